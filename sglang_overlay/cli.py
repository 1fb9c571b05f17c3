"""argparse front end: one subcommand per module in `commands/`, one place that maps errors to exit codes."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from . import __version__, commands, interrupts, output
from .cachedir import CACHE_ENV
from .context import Context
from .errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_LOST,
    BadInput,
    OverlayError,
    os_failure,
)
from .pathlen import path_text
from .progname import prog, set_from_argv, set_where
from .project import MANIFEST_ENV, manifest_path
from .spelling import CLI
from .tree import TREE_ENV

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

EPILOG = """exit codes: 0 ok; 1 conflict, drift, failed apply/check, or the OS refused a write (rolled back);
2 bad input or usage (also a damaged state or journal file); 3 internal error (a bug: please report it with
the saved log); 4 done (a change is made), but its output could not be written (a full disk, a closed
stdout or stderr); 130 interrupted (Ctrl-C, SIGTERM, SIGHUP; a change in progress is rolled back first)"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse makes a formatter for every add_argument, and its default width imports shutil (with bz2 and
    lzma: ~2 ms of every command, `status` included) only to ask for the terminal's width. The same answer
    without it: $COLUMNS, else the terminal's, else 80."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    try:
        return max(int(os.environ["COLUMNS"]), 1)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors share the bad-input exit code
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


class _CommandParser(_Parser):
    """A command's parser, filled in from its module only when that command is parsed or its help shown."""

    command: str | None = None

    def _fill(self) -> None:
        if self.command is not None:
            module, self.command = commands.load(self.command), None
            self.description = module.__doc__
            module.add_arguments(self)
            self.set_defaults(_run=module.run)

    def parse_known_args(self, args=None, namespace=None):
        self._fill()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._fill()
        return super().format_help()


class _MainParser(_Parser):
    commands_action: argparse.Action | None = None

    def format_help(self) -> str:  # the one place every command's module is imported: to list their HELP
        for choice in getattr(self.commands_action, "_choices_actions", ()):
            choice.help = commands.load(choice.dest).HELP
        return super().format_help()


def build_parser(prog: str = "sglang-overlay") -> argparse.ArgumentParser:
    parser = _MainParser(
        prog=prog,
        description="Carry named patches on a pinned SGLang release.",
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"sglang-overlay {__version__}")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--project",
        metavar="DIR",
        type=path_text,
        default=None,
        help="the project directory (manifest.yaml, patches/, overlay/); default: the nearest manifest.yaml "
        "in the current directory or above it",
    )
    where.add_argument(
        "--manifest",
        metavar="FILE",
        type=path_text,
        default=None,
        help=f"the manifest file itself (env {MANIFEST_ENV})",
    )
    parser.add_argument(
        "--tree",
        default=None,
        type=path_text,
        help="SGLang tree: a git checkout, site-packages, or the embedded default (env "
        "SGLANG_OVERLAY_TREE); default: the embedded tree made by `fetch`",
    )
    parser.add_argument(
        "--pin",
        default=None,
        metavar="VERSION",
        help="the patch set of another pin (pins/VERSION/; the top level when VERSION is its pin)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)
    sub.required = True
    parser.commands_action = sub
    sub._name_parser_map = sub.choices = _Commands(sub._prog_prefix)
    for name in commands.NAMES:  # the rows of the main help (add_parser makes them, with a parser each)
        sub._choices_actions.append(sub._ChoicesPseudoAction(name, (), ""))
    return parser


class _Commands(dict[str, "Any"]):  # a parser, or None until it is made
    """Each command's parser by name, made when first looked up: a run parses with one of them (making all of them
    was ~4 ms of every command). Holds every name from the start, for argparse's "invalid choice" check."""

    def __init__(self, prog_prefix: str):
        super().__init__(dict.fromkeys(commands.NAMES))
        self.prog_prefix = prog_prefix

    def __getitem__(self, name: str) -> _CommandParser:
        parser: _CommandParser | None = super().__getitem__(name)
        if parser is None:  # as add_parser makes it
            parser = _CommandParser(prog=f"{self.prog_prefix} {name}", formatter_class=_Formatter)
            parser.command = name
            self[name] = parser
        return parser


def _context(args, home: Path | None) -> Context:
    found = manifest_path(manifest=args.manifest, project=args.project, home=home)
    return Context(
        manifest_path=found,
        tree_arg=args.tree,
        pin=args.pin,
        tree_env=os.environ.get(TREE_ENV),
        cache_env=os.environ.get(CACHE_ENV),
        spelling=CLI,
    )


def _bench_context(args, home: Path | None) -> Context | None:
    try:
        return _context(args, home)
    except OverlayError:
        return None


def main(argv: list[str] | None = None, *, home: Path | None = None) -> int:
    """`home`: the project an entry script belongs to (apply.py passes its own directory), used when no
    manifest.yaml is found from the current directory upward."""
    handlers = interrupts.install()
    saved = output.guard()
    try:
        return _main(argv, home)
    except KeyboardInterrupt:  # a second signal while the first error was being reported
        return EXIT_INTERRUPTED
    finally:
        interrupts.settle()  # the outcome is decided: a late signal cannot change it, nor kill the exit
        set_where(project=None, manifest=None, pin=None)  # the Python API's hints, later in this process
        output.unguard(saved)
        if argv is not None:  # called with its own arguments inside another program: its handlers back
            interrupts.restore(handlers)


def _main(argv: list[str] | None, home: Path | None) -> int:
    try:
        _check_cwd()
        argv = list(sys.argv[1:] if argv is None else argv)
        split = commands.load("bench").split_argv(argv) if "bench" in argv else None
        args = build_parser(set_from_argv(sys.argv[0])).parse_args(split[0] if split else argv)
        set_where(project=args.project, manifest=args.manifest, pin=args.pin)
        if split:  # the bench's arguments are its own; a project is optional for it
            args.bench_args = split[1]
            code = int(args._run(_bench_context(args, home), args) or 0)
        else:
            code = int(args._run(_context(args, home), args) or 0)
        interrupts.settle()
        lost = output.lost()  # here, not at interpreter exit, where a full disk would go unreported
        return _output_lost(lost) if lost and code == 0 else code
    except OverlayError as e:
        _say(e.render())
        return e.exit_code
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `sglang-overlay status | head`: the reader left; nothing went wrong with the tree.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:  # a path the user gave that no check above named: still bad input
            bad = BadInput(f"{e.filename}: a name in this path is longer than the file system allows")
            _say(bad.render())
            return bad.exit_code
        err = os_failure(e, "cannot access", "no change to the tree is in progress")
        _say(err.render())
        return err.exit_code
    except ModuleNotFoundError as e:
        # a dependency missing from this interpreter is the environment, not a bug: name it and the fix (a GPU
        # machine's bundles without .whl stopped `fetch` with "internal error ... unidiff")
        pkg = _DEPENDENCIES.get((e.name or "").split(".")[0])
        if pkg is None:
            return _crash()
        bad = BadInput(
            f"the Python package {pkg} (module {e.name!r}) is not installed for {sys.executable}",
            hint=f"{sys.executable} -m pip install -r requirements.txt (or: pip install '{pkg}'); "
            "a change in progress was rolled back, or is rolled back by the next command",
        )
        _say(bad.render())
        return bad.exit_code
    except Exception:
        return _crash()


def _output_lost(lost: list[tuple[str, OSError]]) -> int:
    """The command did its work; only what it had to say is gone. Never "nothing changed": said where stderr
    still works, else the exit code speaks."""
    why = "; ".join(f"{label}: {e.strerror or e} ({errno.errorcode.get(e.errno or 0, 'error')})" for label, e in lost)
    trees = output.changed()
    done = (
        f"the change was made ({', '.join(map(str, dict.fromkeys(trees)))} holds it)"
        if trees
        else "the command completed"
    )
    _say(
        f"error: {done}, but its output could not be written ({why})\n"
        f"  hint: `{prog()} status` shows what the tree carries; free space or keep the output "
        "open to see the report"
    )
    return EXIT_OUTPUT_LOST


# requirements.txt's packages, by the module they are imported as
_DEPENDENCIES = {"yaml": "PyYAML", "unidiff": "unidiff", "packaging": "packaging", "pyflakes": "pyflakes"}


def _check_cwd() -> None:
    """A shell left in a directory another process removed: every relative path and the project search need the
    current directory, and the OS's ENOENT for it names no file."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise BadInput(
            "the current directory no longer exists (it was removed after the shell entered it)",
            hint='cd to an existing directory (`cd "$PWD"` if it was made again), then run the command again',
        ) from None


def _crash() -> int:
    import platform
    import tempfile
    import traceback

    text = (
        f"sglang-overlay {__version__}, Python {platform.python_version()} ({sys.executable}), "
        f"{_git_version()}, {platform.platform()}\nargv: {sys.argv}\n\n{traceback.format_exc()}"
    )
    try:
        fd, path = tempfile.mkstemp(prefix="sglang-overlay-crash-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        where = f"the traceback is in {path}"
    except OSError:
        where = f"the traceback could not be saved:\n{text}"
    _say(
        f"internal error (a bug in sglang-overlay): {sys.exc_info()[1]!r}\n  {where}\n"
        f"  a change in progress was rolled back, or is rolled back by the next command"
    )
    return EXIT_INTERNAL


def _say(text: str) -> None:
    """The last word on stderr; if even that cannot be written (a full disk behind it), the exit code speaks."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        pass


def _git_version() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "git: not found"
