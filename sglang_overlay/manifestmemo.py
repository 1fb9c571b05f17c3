"""A manifest loaded and validated before, kept in the cache directory until one of the files it read changes.

Every command loads the manifest, and with it every patch file: at 100 patches that was most of `status` and a
third of `apply --all`. A memo names each path the load looked at (the manifests, every patch and overlay file,
and every directory above them) with what it was then: a file's type and the sha256 of its bytes, a link's
target, a directory, or absent. Any difference is a miss, and the manifest is loaded again. Content, not stat
times: a write within one tick of the clock keeps a file's stat, and the same bytes written again (a checkout,
a restore) are the same manifest. Only whole loads are kept (an error is raised again each time), and each memo
carries a hash of its own bytes and of the code that made it. Best effort throughout: a memo that cannot be read
or written only means a full load.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import time
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from .cachedir import cache_dir

FORMAT = b"sglang-overlay manifest memo 1\n"
KEEP = 64  # memos kept, the newest: one per manifest a user works with
_PACKAGE = Path(__file__).resolve().parent

# the paths the load in progress depends on (None: no load is recording)
_READS: ContextVar[list[Path] | None] = ContextVar("sglang_overlay_manifest_reads", default=None)
_pruned = False


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


def _code() -> str:
    """The modules that parse and validate a manifest, by name, size and mtime: an edited one is another memo."""
    h = hashlib.sha256(FORMAT)
    with os.scandir(_PACKAGE) as it:
        for e in sorted(it, key=lambda e: e.name):
            if e.name.endswith(".py"):
                st = e.stat()
                h.update(f"{e.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _file(manifest: Path) -> Path:
    return cache_dir() / "manifests" / hashlib.sha256(os.fsencode(manifest)).hexdigest()


def lookup(manifest: Path) -> Any | None:
    """The Manifest a load of `manifest` (resolved) gave, if nothing it read has changed since; else None."""
    try:
        blob = _file(manifest).read_bytes()
    except (OSError, ValueError):  # ValueError: a path the OS cannot take; the full load says what is wrong
        return None
    head, _, body = blob.partition(b"\n")
    if len(head) != 64 or hashlib.sha256(body).hexdigest().encode() != head or not body.startswith(FORMAT):
        return None
    try:
        code, inputs, loaded = pickle.loads(body[len(FORMAT) :])
    except Exception:  # a memo of another version of the code: a miss, never an error
        return None
    if code != _code() or any(_what(p) != s for p, s in inputs):
        return None
    return loaded


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
    try:
        body = FORMAT + pickle.dumps((_code(), inputs, loaded), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # something in it that pickle cannot take: no memo
        return
    _write(_file(manifest), hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def _write(target: Path, blob: bytes) -> None:
    import tempfile

    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{os.getpid()}-", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, target)  # whole or absent: a reader never sees half a memo
        tmp = None
        _prune(target.parent)
    except (OSError, ValueError):
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(d: Path) -> None:
    """Once a process: the newest KEEP memos stay, and temp files older than a minute (a killed writer's) go."""
    global _pruned
    if _pruned:
        return
    _pruned = True
    now = time.time()
    entries = []
    for e in os.scandir(d):
        try:
            mtime = e.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if e.name.startswith(".tmp-"):
            if now - mtime > 60:
                entries.append((0.0, e.path))
        else:
            entries.append((mtime, e.path))
    entries.sort(reverse=True)
    for _, path in entries[KEEP:] + [x for x in entries[:KEEP] if x[0] == 0.0]:
        try:
            os.unlink(path)
        except OSError:
            pass
