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


def keep(target: Path, data: bytes) -> bool:
    """Best effort: `data` at `target`, whole or not at all (a reader never sees half of it). False when the
    cache cannot take it: the caller only does its work again next time."""
    import tempfile

    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # the writer's pid in the name: the next writer removes what a killed one left (left_by_the_dead)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
        tmp = None
        return True
    except (OSError, ValueError):  # ValueError: a path the OS cannot take
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def left_by_the_dead(name: str, mtime: float, now: float) -> bool:
    """A temp file of keep() whose writer is gone (its pid no longer runs) or, whatever its name, an hour old."""
    if now - mtime > 3600:
        return True
    pid = name.split("-")[1] if name.count("-") >= 2 else ""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False
