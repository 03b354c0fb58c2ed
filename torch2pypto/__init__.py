"""torch2pypto: translate PyTorch source into PyPTO kernels with host wrappers.

``translate_source`` is the library entry point; ``interpreted()`` runs translated modules'
kernels in PyPTO's CPU interpreter (it imports pypto on first use). The engine is imported when
first named, so that importing a part (the ``translate`` command's entry) stays quick.
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch2pypto.translator.engine.transform import Options
    from torch2pypto.translator.engine.translate import Translation, translate_source

_LAZY = {
    "Options": "torch2pypto.translator.engine.transform",
    "Translation": "torch2pypto.translator.engine.translate",
    "translate_source": "torch2pypto.translator.engine.translate",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torch2pypto' has no attribute {name!r}")


def interpreted(*modules):
    """Context manager: translated modules launch their kernels on PyPTO's CPU interpreter."""
    from torch2pypto.translator.verification.interpreter import interpreted as _interpreted

    return _interpreted(*modules)


__all__ = ["Options", "Translation", "interpreted", "translate_source"]
