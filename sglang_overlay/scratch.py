"""Scratch directories under $TMPDIR, named so that the next command can remove those a killed one left.

A name carries the pid (and pid namespace) of the process that made it; `reap` removes the ones whose process
is gone. A live process's scratch is never touched, whoever runs `reap`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "sglang-overlay-"
# the kind may hold a hyphen itself ("compose-many"): the owner tag is the first `-NS.PID-` after it
_NAME_RE = re.compile(rf"^{re.escape(PREFIX)}[a-z][a-z0-9-]*?-(\d+)\.(\d+)-")
_reaped: set[Path] = set()  # the parents this process has reaped: once is enough


def pid_namespace() -> str:
    try:
        return re.sub(r"\D", "", os.readlink("/proc/self/ns/pid")) or "0"
    except OSError:
        return "0"


def root() -> Path:
    # tempfile.gettempdir() probes by writing a file: a kill there would leave it, so use $TMPDIR as given.
    given = os.environ.get("TMPDIR")
    return Path(given) if given and os.path.isdir(given) else Path(tempfile.gettempdir())


def owner_tag() -> str:
    """This process in a file name, as the next command reads it back: `<pid namespace>.<pid>`."""
    return f"{pid_namespace()}.{os.getpid()}"


def make(kind: str, parent: Path | None = None) -> Path:
    """A new scratch directory; the first in a process first removes what killed commands left (a read-only
    `check` makes scratch too, and a killed one must not leave it until some command changes a tree)."""
    where = parent or root()
    if where not in _reaped:
        reap(where)
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{owner_tag()}-", dir=parent or root()))


def owner_gone(ns: str | None, pid: int) -> bool:
    """Whether the process an owner_tag names has ended. A pid of another namespace cannot be asked about, so it
    is never gone; `ns=None`: a name from before the namespace was in it, taken as this namespace's."""
    return (ns is None or ns == pid_namespace()) and pid != os.getpid() and not alive(pid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(parent: Path | None = None) -> None:
    """Remove the scratch directories of processes that no longer run (a kill -9 leaves them behind)."""
    parent = parent or root()
    _reaped.add(parent)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = _NAME_RE.match(name)
        if m and owner_gone(m.group(1), int(m.group(2))):
            shutil.rmtree(parent / name, ignore_errors=True)
