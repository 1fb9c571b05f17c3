"""The file operations every write of the tool goes through: atomic, durable, and never through a symlink.

A file is written to a temp file beside it, flushed to disk, then renamed over it, so a reader or a crash sees
the old bytes or the new, never half. The temp file has a fixed name (`tmp_path`): whoever rolls back an
interrupted write knows where the kill may have left one.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from . import interrupts

TMP_SUFFIX = ".sglang-overlay-tmp"
FEW = 2  # a Barrier flush of at most this many paths fsyncs each (see Barrier)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def is_tmp_name(name: str) -> bool:
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


def _create(tmp: Path, mode: int) -> int:
    try:
        return os.open(tmp, _CREATE, mode)
    except FileExistsError:  # left by a killed run: ours to replace (O_EXCL: never write through a planted link)
        os.unlink(tmp)
        return os.open(tmp, _CREATE, mode)


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (os.umask sets it to read it)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def new_file_mode(executable: bool = False) -> int:
    """The mode git gives a file it creates: 0666, or 0777 for an executable one, less the umask (so the exec
    bits are where the read bits are)."""
    return (0o777 if executable else 0o666) & ~umask()


def with_exec_bits(mode: int, executable: bool) -> int:
    """`mode` with exec bits where its read bits are (chmod +x as git does it), or with none."""
    return mode | (mode & 0o444) >> 2 if executable else mode & ~0o111


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """`mode` is set exactly (a restored file gets its old mode back, whatever the umask); else 0o644 & ~umask.
    A signal waits until the file is whole (or its temp is gone again)."""
    with interrupts.held():
        _write_replace(path, data, mode)


def _write_replace(path: Path, data: bytes, mode: int | None) -> None:
    tmp = _write_tmp(path, data, mode, durable=True)
    try:
        os.rename(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_tmp(path: Path, data: bytes, mode: int | None = None) -> Path:
    """The first half of an atomic write, for a caller that makes many durable at once: the bytes in
    `tmp_path(path)`, not yet flushed. Rename it over `path` only after a Barrier's flush, so that the name
    never points at bytes a power loss could still take away."""
    return _write_tmp(path, data, mode, durable=False)


def _write_tmp(path: Path, data: bytes, mode: int | None, *, durable: bool) -> Path:
    tmp = tmp_path(path)
    fd = _create(tmp, 0o644 if mode is None else mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if mode is not None:
            os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
    except BaseException as e:
        os.close(fd)
        unlink_quietly(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # write/fsync errors name no file; the user needs to know which
        raise
    os.close(fd)
    return tmp


def write_plain(path: Path, data: bytes) -> None:
    """A scratch file: no atomicity needed, but a failure must say which file."""
    try:
        path.write_bytes(data)
    except OSError as e:
        e.filename = e.filename or str(path)
        raise


def unlink_quietly(path: Path) -> None:
    """Best effort (cleanup on a path that is already failing); a leftover is found again by recovery."""
    try:
        os.unlink(path)
    except OSError:
        pass


def unlink_if_present(path: Path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def fsync_dir(path: Path) -> None:
    """Make renames and removals in `path` durable (a crash after this cannot bring the old names back)."""
    _fsync(path, directory=True)


def _fsync(path: Path, *, directory: bool) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECTORY if directory else os.O_NOFOLLOW))
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        # some file systems cannot sync a directory; their renames are durable anyway
        if not (directory and e.errno == errno.EINVAL):
            e.filename = str(path)
            raise
    finally:
        os.close(fd)


class Barrier:
    """Many writes made durable together: everything written before `flush()` is on disk when it returns.

    Why: fsync per file was a third of `apply --all` + `revert --all` (2.4 per file: the saved copy, the new
    file, its directory), and each one waits for its own journal commit and disk cache flush. One syncfs(2)
    per file system is one commit and one flush for the whole step, and orders exactly as well: what a
    transaction needs is only that one step's writes are durable before the next step's begin (see
    Transaction.commit), not that each file is durable on its own.

    syncfs is Linux's (glibc >= 2.14); it reports a write-back error (EIO, ENOSPC) since Linux 5.8 only for
    errors after its file descriptor was opened, so the descriptors are opened here, before the first write the
    barrier covers. It also flushes what other programs wrote to the same file system: that costs time, never
    correctness. Where syncfs is missing (another OS, no ctypes) `flush` fsyncs every path that was `add`ed
    (files and directories), which is the per-file behaviour again; so it does for a flush of at most FEW paths
    (the journal alone, when every copy a change needs is saved already), where waiting for the rest of the
    file system costs more than the fsyncs. A path on a file system none of the `anchors` is on (a mount inside
    the tree) is fsynced by itself as well."""

    def __init__(self, anchors: list[Path]):
        self._pending: list[Path] = []
        self._fds: dict[int, tuple[int, Path]] = {}  # st_dev -> (descriptor, its path) for syncfs
        self._syncfs = _syncfs()
        if self._syncfs is None:
            return
        try:
            for a in anchors:
                dev = os.stat(a).st_dev
                if dev not in self._fds:
                    self._fds[dev] = (os.open(a, os.O_RDONLY | os.O_CLOEXEC), a)
        except BaseException:
            self.close()
            raise

    def add(self, *paths: Path) -> None:
        """Paths written (files) or changed (directories: names added or removed) since the last flush."""
        self._pending.extend(paths)

    def flush(self) -> None:
        pending, self._pending = list(dict.fromkeys(self._pending)), []
        if self._syncfs is None or len(pending) <= FEW:
            for p in pending:
                _fsync(p, directory=os.path.isdir(p))
            return
        for fd, anchor in self._fds.values():
            if self._syncfs(fd) != 0:
                import ctypes

                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), str(anchor))
        for p in pending:
            try:
                dev = os.lstat(p).st_dev
            except FileNotFoundError:
                continue
            if dev not in self._fds:
                _fsync(p, directory=os.path.isdir(p))

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd, _ in fds.values():
            os.close(fd)

    def __enter__(self) -> Barrier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SYNCFS: list[Callable[[int], int] | None] = []  # [syncfs, or None where there is none], looked up once


def _syncfs() -> Callable[[int], int] | None:
    if not _SYNCFS:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).syncfs
            fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        except (ImportError, OSError, AttributeError):
            fn = None
        _SYNCFS.append(fn)
    return _SYNCFS[0]


def read_bytes(path: Path) -> bytes | None:
    """A regular file's bytes, None if there is none; a symlink is not followed (ELOOP). O_NONBLOCK: a FIFO
    where a file belongs reads as empty, instead of waiting for a writer (with Ctrl-C held, for ever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):  # open(fd) would refuse it naming the descriptor's number
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "rb", buffering=0) as f:  # unbuffered: one read of the whole file, no buffer around it
        try:
            return f.readall()
        except OSError as e:  # an I/O error names no file here: name the path
            raise OSError(e.errno, e.strerror, os.fspath(path)) from None


def is_symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def missing_dirs(directory: Path, stop: Path) -> list[Path]:
    """The directories between `stop` (exclusive) and `directory` (inclusive) that do not exist, outermost first."""
    out = []
    while directory != stop and stop in directory.parents and not directory.exists():
        out.append(directory)
        directory = directory.parent
    return out[::-1]


def remove_empty_dirs(directory: Path, stop: Path) -> list[Path]:
    """Remove `directory` and its parents up to `stop` (exclusive) while they are empty; returns those removed."""
    removed = []
    while directory != stop and stop in directory.parents:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                break
            raise
        else:
            removed.append(directory)
        directory = directory.parent
    return removed
