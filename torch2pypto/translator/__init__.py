"""The engine and its front ends: ``engine`` decides and rewrites, ``run`` is the ``translate``
command, ``verification`` runs kernels in PyPTO's CPU interpreter, ``oracle`` checks outputs."""
