"""The file operations every write of the tool goes through: atomic, durable, and never through a symlink.

A file is written to a temp file beside it, flushed to disk, then renamed over it, so a reader or a crash sees
the old bytes or the new, never half. The temp file has a fixed name (`tmp_path`): whoever rolls back an
interrupted write knows where the kill may have left one.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from . import interrupts

TMP_SUFFIX = ".sglang-overlay-tmp"
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


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """`mode` is set exactly (a restored file gets its old mode back, whatever the umask); else 0o644 & ~umask.
    A signal waits until the file is whole (or its temp is gone again)."""
    with interrupts.held():
        _write_replace(path, data, mode)


def _write_replace(path: Path, data: bytes, mode: int | None) -> None:
    tmp = tmp_path(path)
    fd = _create(tmp, 0o644 if mode is None else mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException as e:
        os.close(fd)
        unlink_quietly(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # write/fsync errors name no file; the user needs to know which
        raise
    os.close(fd)
    try:
        os.rename(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


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
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:  # some file systems cannot sync a directory; their renames are durable anyway
            e.filename = str(path)
            raise
    finally:
        os.close(fd)


def read_bytes(path: Path) -> bytes | None:
    """A regular file's bytes, None if there is none; a symlink is not followed (ELOOP)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


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
