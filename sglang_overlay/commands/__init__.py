"""One module per command. Each has NAME, HELP, add_arguments(parser) and run(ctx, args) -> exit code.

NAMES lists them without importing them: the command line imports only the one it runs (a command's imports,
e.g. `check`'s wheel reader, are no part of what `status` costs)."""

import importlib
import keyword

NAMES = (
    "fetch",
    "status",
    "apply",
    "revert",
    "toggle",
    "diff",
    "refresh",
    "import",
    "recover",
    "fingerprint",
    "check",
    "rebase",
    "launch",
    "build-wheel",
    "bench",
)


def load(name: str):
    """The module of the command NAME (build-wheel: build_wheel.py; import, a Python keyword: import_.py)."""
    module = name.replace("-", "_")
    return importlib.import_module(f"{__name__}.{module}_" if keyword.iskeyword(module) else f"{__name__}.{module}")
