"""Where downloaded wheels and parsed manifests are kept, per user (the same for every project and tree)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "SGLANG_OVERLAY_CACHE"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sglang-overlay").expanduser()
