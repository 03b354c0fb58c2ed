"""The ``translate`` console script: the command is imported where Ctrl-C is handled, so that an
interrupt while it starts up ends as one at any later point does (one line, exit 130)."""

import sys


def main() -> int:
    try:
        from torch2pypto.translator.run import cli
    except KeyboardInterrupt:
        print("translate: interrupted; nothing written", file=sys.stderr)
        return 130
    return cli.main()
