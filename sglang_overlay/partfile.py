"""The partial archive a build writes beside the wheel's final name, and the removal of those killed builds left.

A build holds an exclusive flock on its partial file from the moment it makes it until its name is gone (renamed
into place, or removed). The kernel drops a lock when its process ends, however it ends, so a partial file whose
lock can be taken is no running build's of this kernel. An output directory may be shared by several hosts
(NFS), where a client may keep a lock to itself (`nolock`, `local_lock=`) and every host's first pid namespace
has the same inode: so the name says which kernel wrote it (its boot_id, unique to a host's boot), and a file
of another kernel is never removed here, whatever its lock or its pid says. Within this kernel the pid must be
gone too where it can be asked (the same pid namespace), which also covers the moment between the file's
creation and its lock; a pid of another namespace cannot be asked, so such a file must also be older than that
moment could ever be.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import threading
import time
from pathlib import Path
from typing import BinaryIO

from .distinfo import LOCAL_PATTERN
from .fsio import unlink_quietly
from .scratch import alive, pid_namespace

SUFFIX = ".part"
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# what follows a wheel's name in its partial file's: `<host>.<pid namespace>.<pid>.<build>` (owner_tag), the build
# one of this process's, so that builds in one process (threads) never share a name; without it, as the version
# before wrote them, a name is known all the same (its build ended with its process)
_TAG = re.compile(r"([0-9a-f]{32}|nohost)\.(\d+)\.(\d+)(?:\.\d+)?")
# names written before the lock and the host were in them (`pid`, `namespace.pid`): no lock tells whether their
# build still runs, and their pid may be another host's, so they are never removed here, only named to the user
_OLD_TAG = re.compile(r"(?:\d+\.)?\d+")
# the moment between a partial file's creation and its lock is microseconds; this margin also covers the clock
# of a network file system's server being behind this host's (its mtime then looks older than it is)
CREATION_MARGIN_S = 600


def host_id() -> str | None:
    """This boot of this host's kernel: distinct across hosts (and reboots), shared by its containers."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            text = f.read().strip().replace("-", "")
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{32}", text) else None


_builds = itertools.count()
_builds_lock = threading.Lock()  # next() of a count is atomic only where a GIL makes it so


def owner_tag() -> str:
    """`<host>.<pid namespace>.<pid>.<build>` (_TAG); without a boot_id `nohost`, which no build takes for its
    own."""
    with _builds_lock:
        build = next(_builds)
    return f"{host_id() or 'nohost'}.{pid_namespace()}.{os.getpid()}.{build}"


class PartFile:
    """`target`'s partial file, made and locked on entry; on exit its name is gone (moved by `replace` or
    removed) before the lock is dropped, so no cleanup ever sees it unlocked under that name while we run."""

    def __init__(self, target: Path):
        self.path = target.with_name(f".{target.name}.{owner_tag()}{SUFFIX}")
        self._placed = False
        self.file: BinaryIO = os.fdopen(_create(self.path), "w+b")

    def replace(self, target: Path) -> None:
        """Rename the whole file over `target`: its bytes reach the disk first, so that after a power loss the
        final name holds the whole wheel or the one before it, never blocks that were not written yet. The new
        name is durable once the caller fsyncs `target`'s directory (fsio.fsync_dir): a failure there is not one
        of writing the wheel, which is in place by then, and is the caller's to say so."""
        self.file.flush()
        os.fsync(self.file.fileno())
        os.replace(self.path, target)
        self._placed = True

    def __enter__(self) -> PartFile:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self._placed:
                unlink_quietly(self.path)
        finally:
            self.file.close()


def _create(path: Path) -> int:
    try:
        fd = os.open(path, _CREATE, 0o644)
    except FileExistsError:
        # our own name, from an ended process whose pid (in this namespace, on this host) we now have: each
        # process counts its builds from 0
        if _remove_unheld(path) is not True:
            raise
        fd = os.open(path, _CREATE, 0o644)
    try:
        # blocking: a cleanup that is looking at the new file holds its lock for a moment, then lets go
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass  # no locks on this file system (NFS without a lock manager): a cleanup cannot take one either
    except BaseException:
        os.close(fd)
        unlink_quietly(path)
        raise
    return fd


def reap(out_dir: Path, dist_name: str) -> list[Path]:
    """Remove the partial files of this host's ended builds, whichever wheel they were writing; returns those
    that may still be written (another host's, or an earlier version's), for the user to judge."""
    own = re.compile(rf"^\.{re.escape(dist_name)}-[^-]+\+{LOCAL_PATTERN}-.+\.whl\.(.+){re.escape(SUFFIX)}$")
    try:
        names = os.listdir(out_dir)
    except OSError:
        return []  # cleanup only: the build itself says what is wrong with the directory
    unproven = []
    for name in sorted(names):
        m = own.match(name)
        tag = _TAG.fullmatch(m.group(1)) if m else None
        if tag is None:
            if m and _OLD_TAG.fullmatch(m.group(1)):
                unproven.append(out_dir / name)
            continue
        host, ns, pid = tag.group(1), tag.group(2), int(tag.group(3))
        if host != host_id():
            unproven.append(out_dir / name)
        elif _ended(out_dir / name, ns, pid):
            _remove_unheld(out_dir / name)
    return unproven


def _ended(path: Path, ns: str, pid: int) -> bool:
    if ns == pid_namespace():
        return pid != os.getpid() and not alive(pid)
    try:
        return time.time() - os.lstat(path).st_mtime > CREATION_MARGIN_S
    except OSError:
        return False


def _remove_unheld(path: Path) -> bool | None:
    """Remove `path` if no process holds its lock; None where that cannot be told (no locks there, no access)."""
    try:
        # for writing: a network file system's flock is a byte-range write lock, which needs a writable file
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            return None
        held, named = os.fstat(fd), os.lstat(path)
        if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            return False  # renamed into place and another file took the name since it was opened
        os.unlink(path)
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
