"""A manifest loaded and validated before, kept in the cache directory until one of the files it read changes.

Every command loads the manifest, and with it every patch file: at 100 patches that was most of `status` and a
third of `apply --all`. A memo names each path the load looked at (the manifests, every patch and overlay file,
and every directory above them) with what it was then: a file's type and the sha256 of its bytes, a link's
target, a directory, or absent. Any difference is a miss, and the manifest is loaded again. Content, not stat
times: a write within one tick of the clock keeps a file's stat, and the same bytes written again (a checkout,
a restore) are the same manifest. Only whole loads are kept (an error is raised again each time); memo.py keeps
them.
"""

from __future__ import annotations

import hashlib
import os
import stat
from contextvars import ContextVar
from pathlib import Path

from . import memo

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

KIND = "manifests"
KEEP = 64  # memos kept, the newest: one per manifest a user works with
MAX_BYTES = 64 << 20

# the paths the load in progress depends on (None: no load is recording)
_READS: ContextVar[list[Path] | None] = ContextVar("sglang_overlay_manifest_reads", default=None)


def note(*paths: Path) -> None:
    """The load in progress looked at these paths (every directory above them is added on storing)."""
    reads = _READS.get()
    if reads is not None:
        reads.extend(paths)


def _what(path: str) -> tuple[str, ...] | None:
    """What is at `path` now, as a memo compares it (None: nothing there)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:  # not absent: a load would say why it cannot look
        return ("e", str(e.errno))
    try:
        if stat.S_ISREG(st.st_mode):  # opened without following a link, nor waiting on a FIFO put there since
            with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
                return ("f", oct(st.st_mode & 0o111), hashlib.sha256(f.read()).hexdigest())
        if stat.S_ISDIR(st.st_mode):
            return ("d",)
        if stat.S_ISLNK(st.st_mode):
            return ("l", os.readlink(path))
        return ("o", oct(stat.S_IFMT(st.st_mode)))
    except OSError as e:
        return ("e", str(e.errno))


def lookup(manifest: Path) -> Any | None:
    """The Manifest a load of `manifest` (resolved) gave, if nothing it read has changed since; else None."""
    kept = memo.read(KIND, os.fsdecode(manifest))
    if kept is None:
        return None
    inputs, loaded = kept
    return loaded if all(_what(p) == was for p, was in inputs) else None


def recording() -> tuple[list[Path], Any]:
    """Start recording the paths a load reads: (the list, a token for `stop`)."""
    reads: list[Path] = []
    return reads, _READS.set(reads)


def stop(token: Any) -> None:
    _READS.reset(token)


def store(manifest: Path, reads: list[Path], loaded: Any) -> None:
    """Keep `loaded` for `manifest`, with what it read; never raises an OSError."""
    paths: dict[str, None] = {}
    for p in [manifest, *reads]:
        paths[str(p)] = None
        for q in p.parents:  # every directory above it: one replaced by a link makes it another file
            paths[str(q)] = None
    inputs = [(p, _what(p)) for p in paths]
    memo.write(KIND, os.fsdecode(manifest), (inputs, loaded), keep_n=KEEP, max_bytes=MAX_BYTES)
