"""argparse front end: one subcommand per module in `commands/`, one place that maps errors to exit codes."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from pathlib import Path

from . import __version__
from .commands import COMMANDS
from .context import Context, default_manifest_path
from .errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, OverlayError

EPILOG = """exit codes: 0 ok; 1 conflict, drift or failed apply/check; 2 bad input or usage;
3 internal error (a bug: please report it with the saved traceback); 130 interrupted"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors share the bad-input exit code
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="apply.py", description="Carry named patches on a pinned SGLang release.",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sglang-overlay {__version__}")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="manifest.yaml to use (default: ./manifest.yaml, else the project's; env "
                             "SGLANG_OVERLAY_MANIFEST)")
    parser.add_argument("--tree", default=None,
                        help="SGLang tree: a git checkout, site-packages, or the embedded default (env "
                             "SGLANG_OVERLAY_TREE); default: the embedded tree made by `fetch`")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in COMMANDS:
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    ctx = Context(manifest_path=args.manifest or default_manifest_path(), tree_arg=args.tree)
    try:
        return int(args._run(ctx, args) or 0)
    except OverlayError as e:
        print(e.render(), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `apply.py status | head`: the reader left; nothing went wrong with the tree.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:
        fd, path = tempfile.mkstemp(prefix="sglang-overlay-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            traceback.print_exc(file=f)
        print(f"internal error (a bug in sglang-overlay): {sys.exc_info()[1]!r}\n"
              f"  the traceback is in {path}; the tree is unchanged or rolled back by the next command",
              file=sys.stderr)
        return EXIT_INTERNAL
