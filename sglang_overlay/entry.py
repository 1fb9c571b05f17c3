"""The entry points' first step: `--version` alone is answered before the command line's modules are imported
(they were most of its time); everything else goes to cli.main."""

import sys  # nothing else before the answer (no __future__ either: 3.11 reads `list[str] | None` as it is)

from . import __version__


def main(argv: list[str] | None = None, *, home: str | None = None) -> int:
    """`home`: the directory of the entry script (apply.py's), as cli.main takes it."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        try:
            sys.stdout.write(f"sglang-overlay {__version__}\n")
            sys.stdout.flush()
            return 0
        except (
            OSError,
            ValueError,
            AttributeError,
        ):  # stdout closed (None) or full: cli.main says so as for any other output
            pass
    from pathlib import Path

    from .cli import main as cli_main

    return cli_main(argv, home=None if home is None else Path(home))
