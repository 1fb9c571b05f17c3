"""Where downloaded wheels and parsed manifests are kept, per user (the same for every project and tree)."""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path

from .errors import BadInput
from .pathlen import too_long

CACHE_ENV = "SGLANG_OVERLAY_CACHE"

# $SGLANG_OVERLAY_CACHE as the Context of the API call running read it when it was made (a 1-tuple: None is no
# value there); unset, the environment of the moment. Read at each use instead, a relative value kept in a
# Context named another directory after a chdir, and check looked there for the pinned wheel.
_HELD: ContextVar[tuple[str | None] | None] = ContextVar("sglang_overlay_cache", default=None)


def hold(value: str | None) -> None:
    """cache_dir() answers from `value` for the rest of the current contextvars context (api.py runs each call in
    a copy of its caller's, so that it ends with the call)."""
    _HELD.set((value,))


def cache_dir() -> Path:
    held = _HELD.get()
    given = held[0] if held is not None else os.environ.get(CACHE_ENV)
    why = too_long(given) if given else None
    if why:  # else fetch failed naming only the path, not the variable that set it
        raise BadInput(f"{CACHE_ENV}: {why}", hint=f"set {CACHE_ENV} to a directory with a shorter path, or unset it")
    return Path(given or Path.home() / ".cache" / "sglang-overlay").expanduser()
