"""The command the user typed, so that every hint and usage line can be pasted back as it stands.

`sglang-overlay` (the console script), `python apply.py` (the in-checkout entry; its path as typed when run from
elsewhere) or `python -m sglang_overlay`. Set once by the CLI from argv[0]; the Python API keeps the default.
"""

from __future__ import annotations

import os
import shlex

DEFAULT = "sglang-overlay"
_current = DEFAULT


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


def prog() -> str:
    return _current
