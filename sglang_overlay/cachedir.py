"""Where downloaded wheels and parsed manifests are kept, per user (the same for every project and tree)."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BadInput
from .pathlen import too_long

CACHE_ENV = "SGLANG_OVERLAY_CACHE"


def cache_dir() -> Path:
    given = os.environ.get(CACHE_ENV)
    why = too_long(given) if given else None
    if why:  # else fetch failed naming only the path, not the variable that set it
        raise BadInput(f"{CACHE_ENV}: {why}", hint=f"set {CACHE_ENV} to a directory with a shorter path, or unset it")
    return Path(given or Path.home() / ".cache" / "sglang-overlay").expanduser()
