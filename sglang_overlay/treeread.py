"""Reading a tree without changing it: the names in its state directory, the shared lock, the state as a
rollback would leave it, which files were edited by hand, and each file as it was before any patch.

Kept apart from transaction.py (which builds on it) so that the read-only commands, `status` first, import
neither the writer nor what only writing needs (scratch directories, shutil, the object store's writes)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .errors import WRITABLE_COPY, StateError, os_failure
from .journal import JOURNAL_FIX, read_journal
from .record import Record, field
from .repopath import JOURNAL_NAME, STATE_NAME
from .state import FileRecord, ObjectStore, State, digest_of, load_state, parse_state
from .tree import Tree

LOCK_NAME = "lock"
OBJECTS = "objects"


class View(Record):
    """A read-only look at a tree: the state it carries (as a rollback would leave it, if one is pending)."""

    tree: Tree
    state: State
    pending: bool  # a killed command left a journal: the next changing command rolls it back
    store: ObjectStore
    # pending: what the rollback puts back in each file the journal names (a saved copy's hash; None: no file)
    rolled_back: Mapping[str, str | None] = field(default_factory=dict)


def lock(tree: Tree, state_dir: Path, *, exclusive: bool, copy: str = WRITABLE_COPY) -> int | None:
    """`copy`: the fix that works on a copy of the tree, in the caller's words (errors.writable_copy)."""
    path = state_dir / LOCK_NAME
    if exclusive and not state_dir.is_dir():
        try:
            os.mkdir(state_dir)
        except FileExistsError:
            pass
        except OSError as e:
            raise os_failure(e, "cannot create the state directory", "nothing was changed", copy=copy) from None
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_RDWR | os.O_CREAT, 0o644) if exclusive else os.open(path, flags | os.O_RDONLY)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StateError(f"{path} is a symbolic link", hint=f"remove it (rm {path}); it is only a lock") from None
        if not exclusive:
            return None  # no writer ever ran here, or the lock is not ours to read: read without it
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and os.path.isfile(path):
            fd = os.open(path, flags | os.O_RDONLY)  # a command that ends up writing nothing still works here
        else:
            raise os_failure(e, "cannot create the lock", "nothing was changed", copy=copy) from None
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"sglang-overlay: waiting for another command on {tree.root} ...", file=sys.stderr, flush=True)
            fcntl.flock(fd, mode)  # a signal here interrupts at once: nothing is written yet
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def reading(tree: Tree) -> Iterator[View]:
    """The tree's state for a command that only reads; waits while a writer is in the middle of a change."""
    state_dir = tree.checked_state_dir()
    fd = lock(tree, state_dir, exclusive=False)
    try:
        journal = read_journal(state_dir / JOURNAL_NAME)
        store = ObjectStore(state_dir / OBJECTS)
        if journal is None:
            state = load_state(state_dir / STATE_NAME)
        else:
            state = parse_state(journal.state_before, state_dir / JOURNAL_NAME) if journal.state_before else State()
            for e in journal.entries:  # what is shown must be what a rollback can restore
                if e.before is not None and not store.has(e.before):
                    raise StateError(
                        f"{state_dir / JOURNAL_NAME}: cannot roll back the interrupted `{journal.op}`: "
                        f"{store.root / e.before}: a saved copy the state needs is missing",
                        hint=JOURNAL_FIX,
                    )
        restores = {} if journal is None else {e.path: e.before for e in journal.entries}
        yield View(tree, state, journal is not None, store, restores)
    finally:
        if fd is not None:
            os.close(fd)


def read_file(tree: Tree, repo_path: str) -> bytes | None:
    p, st = tree.walk(repo_path)
    if st is not None and stat.S_ISREG(st.st_mode):  # the common case, without a second stat
        with open(p, "rb") as f:
            return f.read()
    return p.read_bytes() if st is not None and p.is_file() else None  # a link within the tree: its target


def drifted_files(tree: Tree, state: State) -> dict[str, FileRecord]:
    return {f: rec for f, rec in state.files.items() if digest_of(read_file(tree, f)) != rec.applied}


def exec_bit_drifted(tree: Tree, state: State, wanted: Mapping[str, bool]) -> tuple[str, ...]:
    """The managed files whose exec bit is not the one `wanted` gives them (a hand chmod since the tool wrote
    them): the same owner bit `apply` looks at when it sets or clears it."""
    out = []
    for f, exe in sorted(wanted.items()):
        if f not in state.files:
            continue
        try:
            st = os.lstat(tree.path_of(f))
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone: the bytes' drift says so
        if stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o100) != exe:
            out.append(f)
    return tuple(out)


def base_reader(
    tree: Tree, state: State, store: ObjectStore, rolled_back: Mapping[str, str | None] | None = None
) -> Callable[[str], bytes | None]:
    """Read a file as it was before any patch (from the saved base when the tool manages it). `rolled_back`: a
    pending journal's files (View.rolled_back), read as its rollback leaves them, not as the kill did."""

    def read(repo_path: str) -> bytes | None:
        rec = state.files.get(repo_path)
        if rec is None:
            if rolled_back and repo_path in rolled_back:
                digest = rolled_back[repo_path]
                return store.get(digest) if digest is not None else None
            return read_file(tree, repo_path)
        return store.get(rec.base) if rec.base is not None else None

    return read
