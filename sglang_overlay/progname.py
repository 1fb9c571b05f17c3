"""The command the user typed, so that every hint and usage line can be pasted back as it stands.

`sglang-overlay` (the console script), `python apply.py` (the in-checkout entry; its path as typed when run from
elsewhere) or `python -m sglang_overlay`. Set once by the CLI from argv[0]; the Python API keeps the default.
"""

from __future__ import annotations

import os
import shlex

DEFAULT = "sglang-overlay"
_current = DEFAULT
# the options that chose the project and its patch set: a hint pasted without them would act on another
# project (the nearest manifest.yaml) or the top-level pin
_project = ""
_pin = ""


def detect(argv0: str, cwd: str | None = None) -> str:
    base = os.path.basename(argv0)
    if base == "__main__.py":
        return "python -m sglang_overlay"
    if base.endswith(".py"):
        here = os.path.realpath(cwd or os.getcwd())
        shown = base if os.path.realpath(os.path.dirname(argv0) or ".") == here else argv0
        return f"python {shlex.quote(shown)}"
    return base or DEFAULT


def set_from_argv(argv0: str) -> str:
    global _current
    _current = detect(argv0)
    return _current


def set_where(*, project: str | None, manifest: str | None, pin: str | None) -> None:
    """The user's --project/--manifest and --pin, as typed, for every hint's command. --tree is not among them:
    hints that act on a tree name it themselves (`--tree ROOT`), the one the error is about."""
    global _project, _pin
    _project = "".join(
        f" {flag} {shlex.quote(v)}" for flag, v in (("--project", project), ("--manifest", manifest)) if v
    )
    _pin = f" --pin {shlex.quote(pin)}" if pin is not None else ""


def prog(*, project: bool = True, pin: bool = True) -> str:
    """`project=False`: a hint that names the manifest itself (`--manifest` and `--project` exclude each other);
    `pin=False`: one that names its own pin, or is about the user's pin being missing or wrong, or needs none."""
    return _current + (_project if project else "") + (_pin if pin else "")
