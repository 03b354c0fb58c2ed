"""The ``translate`` console script: the command is imported where Ctrl-C is handled, so that an
interrupt while it starts up ends as one at any later point does (one line, exit 130)."""

import gc
import sys


def main() -> int:
    try:
        from torch2pypto.translator.run import cli
    except KeyboardInterrupt:
        print("translate: interrupted; nothing written", file=sys.stderr)
        return 130
    return finished(cli.main())


def finished(code: int) -> int:
    """``code``, the objects of the run left to the interpreter's exit as they are: frozen, so that
    its collections at exit do not walk them again (a run's caches hold about 700k objects after
    the transformers zoo at -j1: 1.4 s of collections, 0.1 s frozen). Their memory is freed all
    the same."""
    gc.freeze()
    return code
