"""Results kept in the cache directory between commands (a loaded manifest, a composed set), each in one file
that carries a hash of its own bytes and of the code that made it. Best effort throughout: a memo that cannot
be read or written only means the work is done again; one of another version of the code is never read."""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from pathlib import Path

from .cachedir import cache_dir, keep, left_by_the_dead

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

FORMAT = b"sglang-overlay memo 1\n"
_PACKAGE = Path(__file__).resolve().parent
_pruned: set[str] = set()  # kinds pruned by this process (once is enough)


def code_signature() -> str:
    """The package's modules by name, size and mtime: a memo made by other code is another memo."""
    h = hashlib.sha256(FORMAT)
    with os.scandir(_PACKAGE) as it:
        for e in sorted(it, key=lambda e: e.name):
            if e.name.endswith(".py"):
                st = e.stat()
                h.update(f"{e.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _off() -> bool:
    # SGLANG_OVERLAY_NO_MEMO=1: every command does all its work (the fault tests count a command's calls)
    return os.environ.get("SGLANG_OVERLAY_NO_MEMO", "") not in ("", "0")


def _file(kind: str, key: str, code: str) -> Path:
    """Named by the code too: two versions of the tool on one project (a venv and a pipx install, or the bench's
    before and after) each keep their own memo, instead of each replacing the other's at every run."""
    return cache_dir() / kind / hashlib.sha256(f"{code}\n{key}".encode("utf-8", "surrogateescape")).hexdigest()


def read(kind: str, key: str) -> Any | None:
    """What `write(kind, key, ...)` kept, whole and made by this code; else None."""
    if _off():
        return None
    try:
        blob = _file(kind, key, code := code_signature()).read_bytes()
    except (OSError, ValueError):  # ValueError: a path the OS cannot take; the work itself says what is wrong
        return None
    head, _, body = blob.partition(b"\n")
    if len(head) != 64 or hashlib.sha256(body).hexdigest().encode() != head or not body.startswith(FORMAT):
        return None
    try:
        kept_code, kept_key, value = pickle.loads(body[len(FORMAT) :])
    except Exception:  # a memo of another version of the code: a miss, never an error
        return None
    return value if kept_code == code and kept_key == key else None


def write(kind: str, key: str, value: Any, *, keep_n: int, max_bytes: int) -> None:
    """Keep `value` under `key`; the newest `keep_n` memos of `kind` (at most `max_bytes` in all) stay."""
    if _off():
        return
    try:
        code = code_signature()
        body = FORMAT + pickle.dumps((code, key, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # something in it that pickle cannot take (or the package's directory unreadable): no memo
        return
    if len(body) > max_bytes:
        return
    target = _file(kind, key, code)
    if keep(target, hashlib.sha256(body).hexdigest().encode() + b"\n" + body):
        _prune(kind, target.parent, keep_n, max_bytes)


def _prune(kind: str, d: Path, keep_n: int, max_bytes: int) -> None:
    """Once a process: the newest memos that fit `keep_n` and `max_bytes` stay; a killed writer's temp files go."""
    if kind in _pruned:
        return
    _pruned.add(kind)
    now = time.time()
    entries, stale = [], []
    try:
        listing = list(os.scandir(d))
    except OSError:  # best effort, as the write
        return
    for e in listing:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if e.name.startswith(".tmp-"):
            if left_by_the_dead(e.name, st.st_mtime, now):
                stale.append(e.path)
        else:
            entries.append((st.st_mtime, st.st_size, e.path))
    entries.sort(reverse=True)
    total = 0
    for k, (_, size, path) in enumerate(entries):
        total += size
        if k >= keep_n or total > max_bytes:
            stale.append(path)
    for path in stale:
        try:
            os.unlink(path)
        except OSError:
            pass
