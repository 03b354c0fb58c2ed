"""torch2pypto: translate PyTorch source into PyPTO kernels with host wrappers.

``translate_source`` is the library entry point; ``interpreted()`` runs translated modules'
kernels in PyPTO's CPU interpreter (it imports pypto on first use).
"""

from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import Translation, translate_source


def interpreted(*modules):
    """Context manager: translated modules launch their kernels on PyPTO's CPU interpreter."""
    from torch2pypto.translator.verification.interpreter import interpreted as _interpreted

    return _interpreted(*modules)


__all__ = ["Options", "Translation", "interpreted", "translate_source"]
