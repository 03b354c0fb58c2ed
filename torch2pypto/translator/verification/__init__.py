"""Running generated kernels: PyPTO's CPU interpreter, ``interpreted()`` and ``--verify``."""
