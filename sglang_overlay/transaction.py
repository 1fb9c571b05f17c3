"""Every change to a tree goes through one Transaction: all of it lands, or none of it, across a kill -9 too.

A command that changes a tree takes the tree's lock, rolls back whatever a killed command left (its journal),
reads the state, decides, and commits. Commit: (1) the bytes each replaced file holds now go to the object
store; (2) the journal, one file naming them and holding the old state verbatim, is renamed into place; (3) the
files are replaced one by one, each checked first to still hold what the decision was made on; (4) the new
state is written; (5) the journal is removed, the one point where the change becomes final. Stopped anywhere
before (5), by a kill, a signal or an OS error, the change is rolled back: at once while the process still
runs, else by the next command. Rollback only makes files hold what the journal says, so it can itself be
killed and run again. Commands that only read take the lock shared and write nothing (a read-only tree works).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from . import interrupts, output, scratch
from .errors import Conflict, OSFailure, PathEscape, StateError, os_failure
from .fsio import (
    Barrier,
    atomic_write,
    fsync_dir,
    is_symlink,
    is_tmp_name,
    new_file_mode,
    read_bytes,
    remove_empty_dirs,
    tmp_path,
    unlink_if_present,
    unlink_quietly,
    write_tmp,
)
from .journal import BACKUP_NAME, Entry, Journal, read_journal
from .record import Record
from .repopath import JOURNAL_NAME, REPO_PACKAGE_PREFIX, STATE_NAME
from .spelling import CLI, Spelling
from .state import ObjectStore, State, digest_of, load_state, sha256
from .tree import Tree, own_dir_link
from .treeread import OBJECTS, lock

BACKUPS = "backups"
GITIGNORE = ".gitignore"  # "*": git ignores the whole state directory, without the tool touching .git/
FREE_MARGIN = 256 << 10  # bytes beyond the change itself that must stay free (file system metadata, the journal)


class Change(Record):
    """What one command decided: the files to replace (None removes one) and the state that records them."""

    op: str
    writes: Mapping[str, bytes | None]
    before: Mapping[str, bytes | None]  # what each written file held when the change was decided
    state: State
    bases: tuple[bytes, ...] = ()  # base copies the new state refers to that are not stored yet
    backup: Mapping[str, bytes] | None = None  # hand-edited files to save before they are overwritten (--force)
    # the mode of each written file that does not keep the one it has: one the change creates (else git's
    # default, new_file_mode()) or one whose exec bit the patches set or clear; its bytes may be unchanged
    modes: Mapping[str, int] | None = None


def _real_dir(path: Path) -> Path:
    if is_symlink(path):
        raise own_dir_link(path)
    if not path.is_dir():
        path.mkdir(exist_ok=True)
    return path


class Transaction:
    def __init__(self, tree: Tree, state_dir: Path, spelling: Spelling = CLI):
        self.tree = tree
        self.spelling = spelling  # whose words a refusal's fix is in: the command line's, or the API's
        self.dir = state_dir
        self.state_path = state_dir / STATE_NAME
        self.journal_path = state_dir / JOURNAL_NAME
        self.store = ObjectStore(state_dir / OBJECTS)
        self.state = State()
        self.recovered: Journal | None = None  # what the opening rollback undid, if anything

    @property
    def copy(self) -> str:
        """The fix that works on a copy of the tree, in the caller's words."""
        return self.spelling.copy

    @classmethod
    @contextmanager
    def open(cls, tree: Tree, *, spelling: Spelling = CLI) -> Iterator[Transaction]:
        """Lock the tree, roll back what a killed command left, clean up, read the state. `spelling`: the caller's
        words for a refusal's fix (a copy of the tree: the API's tree=, not the command line's --tree)."""
        state_dir = tree.checked_state_dir()
        fd = lock(tree, state_dir, exclusive=True, copy=spelling.copy)
        try:
            txn = cls(tree, state_dir, spelling)
            with interrupts.held():
                txn.recovered = txn.recover()
                txn.state = load_state(txn.state_path)
                txn._clean()
            yield txn
        finally:
            if fd is not None:
                os.close(fd)

    # -- recovery ----------------------------------------------------------------------------------------------
    def recover(self) -> Journal | None:
        """Roll back an interrupted transaction, if there is one. Safe to interrupt and run again."""
        journal = read_journal(self.journal_path)
        if journal is None:
            return None
        try:
            self._roll_back(journal)
        except StateError as e:
            raise StateError(
                f"{self.journal_path}: cannot roll back the interrupted `{journal.op}`: {e}", hint=e.hint
            ) from None
        except PathEscape as e:  # a link in the tree, met before anything was written through it
            raise PathEscape(
                f"cannot roll back the interrupted `{journal.op}`: {e}; the journal {self.journal_path} is kept",
                hint=f"{e.hint}; then {self.spelling.recover} rolls it back",
            ) from None
        except OSError as e:
            raise os_failure(
                e,
                "cannot roll back an interrupted command: cannot write",
                f"the journal {self.journal_path} is kept, and the next command tries again",
                copy=self.copy,
            ) from None
        print(
            f"sglang-overlay: rolled back an interrupted `{journal.op}` (pid {journal.pid}): "
            f"{len(journal.entries)} file(s) restored in {self.tree.root}",
            file=sys.stderr,
        )
        return journal

    def _roll_back(self, journal: Journal, *, live: bool = False) -> list[Path]:
        """`live`: this process's own commit stopped, so a file holding neither its old bytes nor the new ones
        was edited by hand while the command ran: it is left as it is (returned), never moved aside."""
        self.tree.forget_checks()  # a link swapped in since the commit looked must not take a restored file
        for d in (self.dir / BACKUPS, self.dir / BACKUPS / journal.backup) if journal.backup else ():
            if is_symlink(d):  # removed at the end: through a link, that would delete outside the tree
                raise own_dir_link(d)
        dirs = {self.dir}
        kept = self._edited(journal) if live else []
        if not live:
            self._keep_later_edits(journal)
        for entry in reversed(journal.entries):
            path = self.tree.path_of(entry.path)
            dirs.add(path.parent)
            unlink_if_present(tmp_path(path))
            if path in kept:
                continue
            if entry.before is None:
                if os.path.lexists(path):
                    os.unlink(path)
                continue
            data = self.store.get(entry.before)
            mode = entry.mode if entry.mode is not None else new_file_mode()
            if not _holds(path, data, mode):
                if not path.parent.is_dir():  # removed with the file by the step being undone
                    path.parent.mkdir(parents=True)
                atomic_write(path, data, mode)
        for repo_dir in reversed(journal.new_dirs):
            try:
                os.rmdir(self.tree.path_of(repo_dir))
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                    raise
        if journal.backup:
            try:
                shutil.rmtree(self.dir / BACKUPS / journal.backup)  # the edits it saved are back in the tree
            except FileNotFoundError:
                pass
        if journal.state_before is None:
            unlink_if_present(self.state_path)
        elif read_bytes(self.state_path) != journal.state_before.encode():
            atomic_write(self.state_path, journal.state_before.encode())
        for d in sorted(dirs):
            fsync_dir(d)
        os.unlink(self.journal_path)
        self._flush_final()
        return kept

    def _edited(self, journal: Journal) -> list[Path]:
        kept = []
        for entry in journal.entries:
            path = self.tree.path_of(entry.path)
            now = read_bytes(path) if os.path.lexists(path) else None
            if now is not None and digest_of(now) not in (entry.before, entry.after):
                kept.append(path)
        return kept

    def _keep_later_edits(self, journal: Journal) -> None:
        """A file that holds neither its old bytes nor the new ones was edited by hand after the kill: save it
        before the rollback puts the old bytes back, so no edit is lost."""
        edited = {}
        for entry in journal.entries:
            now = read_bytes(self.tree.path_of(entry.path)) if os.path.lexists(self.tree.path_of(entry.path)) else None
            if now is not None and digest_of(now) not in (entry.before, entry.after):
                edited[entry.path] = now
        if not edited:
            return
        root = _real_dir(self.dir / BACKUPS) / f"{self._backup_name()}-rollback"
        for f, data in sorted(edited.items()):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            atomic_write(root / f, data)
        print(
            f"sglang-overlay: {len(edited)} file(s) were edited after the interrupted `{journal.op}`; saved them "
            f"under {root} before rolling back",
            file=sys.stderr,
        )

    def _clean(self) -> None:
        """Remove what a killed command can leave outside its journal: temp files, unused copies, scratch."""
        for name in os.listdir(self.dir):
            if is_tmp_name(name):
                unlink_quietly(self.dir / name)
        _real_dir(self.dir / OBJECTS)
        self.store.prune()  # temp files only: every copy under its name is whole (ObjectStore)
        if not os.path.lexists(self.dir / GITIGNORE):
            try:
                atomic_write(self.dir / GITIGNORE, b"# sglang-overlay's state: not part of the tree\n*\n")
            except OSError:
                pass  # only a convenience for `git status`; tried again next time
        scratch.reap()

    # -- commit ------------------------------------------------------------------------------------------------
    def commit(self, change: Change) -> Path | None:
        """Make the tree hold `change`, all of it or none of it. Returns the backup directory, if one was made.

        Durability comes from three barriers and three directory fsyncs, not an fsync per file (fsio.Barrier).
        Why this order is enough across a power cut (a kill loses nothing written, so only the order in which
        writes reach the disk matters): a name may only become durable after the bytes it names, and each step
        only after the one it relies on.
          1. the bytes of the saved copies and of the journal, then the copies' names (their directory fsynced),
             then the journal's: a copy's name never points at bytes a cut could still take (ObjectStore), so
             the copies a change finds already saved, by an earlier command or a killed one, are whole (and
             checked: _save_copies), and a durable journal names only copies that are there, whole, after a
             cut: a rollback always has what it needs;
          2. the journal's name before anything in the tree (its directory fsynced alone: nothing else is
             pending then): the tree is never changed without a durable record of how to undo it, and no temp
             file is left in the tree where no journal names it;
          3. every new file's bytes (and the new state's), then all the renames at once: each file holds its
             old bytes or its new ones, never a name over lost bytes (a torn file would look like a hand edit to
             the rollback); a cut anywhere here leaves the journal, and recovery restores every file it lists;
          4. the renames (and the state) before the journal's removal: once the journal is gone from disk the
             change is final, so all of it must already be there (_flush_final then makes the removal durable).
        A kill, a signal or an OS error at any point before the journal's removal rolls back as before."""
        self.tree.forget_checks()  # what the decision looked at may have changed since: look again
        paths = {f: self.tree.managed_file(f) for f in sorted(change.writes)}
        journal = self._journal_for(change, paths)
        journal_bytes, state_bytes = journal.to_bytes(), change.state.to_json().encode()
        self._preflight(change, paths, journal, len(journal_bytes) + len(state_bytes))
        if journal.backup:  # a link refused before the journal: met by the rollback, it would stop it
            _real_dir(self.dir / BACKUPS)
        anchors = sorted(
            {self.dir, self.store.root} | {_existing_ancestor(d) for d in {p.parent for p in paths.values()}}
        )
        with interrupts.held():
            try:
                with Barrier(anchors) as barrier:
                    copies = self._save_copies(change, journal, barrier)
                    barrier.add(write_tmp(self.journal_path, journal_bytes))
                    barrier.flush()  # step 1
                    for copy in copies:
                        os.rename(tmp_path(copy), copy)
                    fsync_dir(self.store.root)  # the copies it found too: a killed command's names may not be
                    os.rename(tmp_path(self.journal_path), self.journal_path)
                    fsync_dir(self.dir)  # step 2
                    backup_dir = self._write_backup(journal, change, barrier)
                    self._stage(paths, change, journal, barrier)
                    barrier.add(write_tmp(self.state_path, state_bytes))
                    barrier.flush()  # step 3: the bytes
                    for f, path in paths.items():
                        interrupts.checkpoint()
                        self._replace(f, path, change, barrier)
                    os.rename(tmp_path(self.state_path), self.state_path)
                    barrier.add(self.dir)
                    barrier.flush()  # step 4: the names
                interrupts.checkpoint()  # the last point at which a signal still rolls the change back
                os.unlink(self.journal_path)  # final from here on
                output.note_change(self.tree.root)
            except BaseException as e:
                self._abandon(e)
            self.state = change.state
            self._flush_final()
            # the copies this change used stay for the next (a cycle of apply --all, revert --all saves none)
            self.store.prune(change.state.bases | {d for e in journal.entries for d in (e.before, e.after) if d})
        return backup_dir

    def _save_copies(self, change: Change, journal: Journal, barrier: Barrier) -> list[Path]:
        """The bases the new state needs and the bytes every replaced file holds now, beside their place in the
        object store (tmp_path), not yet renamed; a copy already saved is checked, and written again if it does
        not hold its bytes. Returns where each goes."""
        seen: set[str] = set()
        out = []
        befores = ((e.before, change.before[e.path]) for e in journal.entries)
        for digest, data in (*((sha256(b), b) for b in change.bases), *befores):
            if digest is None or data is None or digest in seen:
                continue
            seen.add(digest)
            if self.store.holds(digest, data):
                continue
            interrupts.checkpoint()
            barrier.add(write_tmp(self.store.root / digest, data))
            out.append(self.store.root / digest)
        return out

    def _stage(self, paths: Mapping[str, Path], change: Change, journal: Journal, barrier: Barrier) -> None:
        """Every new file's bytes beside where it goes (tmp_path), not yet in place."""
        for repo_dir in journal.new_dirs:
            if not os.path.isdir(self.tree.path_of(repo_dir)):
                os.mkdir(self.tree.path_of(repo_dir))
                barrier.add(self.tree.path_of(repo_dir).parent)
        modes = {e.path: e.mode for e in journal.entries} | dict(change.modes or {})
        for f, path in paths.items():
            data = change.writes[f]
            if data is not None:
                interrupts.checkpoint()
                mode = modes[f]
                barrier.add(write_tmp(path, data, mode if mode is not None else new_file_mode()))

    def _flush_final(self) -> None:
        """After the journal is gone the outcome is decided; a failing flush can only be reported."""
        try:
            fsync_dir(self.dir)
        except OSError as e:
            print(
                f"sglang-overlay: warning: done, but {self.dir} could not be flushed to disk ({e.strerror}): "
                f"a power loss now could bring the journal back, and the next command would roll back",
                file=sys.stderr,
            )

    def _journal_for(self, change: Change, paths: Mapping[str, Path]) -> Journal:
        entries, missing = [], set()
        there: set[str] = set()  # directories found to exist (most files share theirs)
        for f, path in paths.items():
            before = change.before[f]
            mode = _mode_of(path) if before is not None else None
            entries.append(Entry(f, digest_of(before), mode, digest_of(change.writes[f])))
            if change.writes[f] is not None:
                parent = os.path.dirname(f)
                while parent + "/" != REPO_PACKAGE_PREFIX and parent not in there and parent not in missing:
                    if os.path.exists(self.tree.path_of(parent)):
                        there.add(parent)
                        break
                    missing.add(parent)
                    parent = os.path.dirname(parent)
        new_dirs = sorted(missing, key=lambda d: (d.count("/"), d))
        backup = self._backup_name() if change.backup else None
        state_before = read_bytes(self.state_path)
        return Journal(
            change.op,
            os.getpid(),
            tuple(entries),
            tuple(new_dirs),
            state_before.decode() if state_before is not None else None,
            backup,
        )

    def _backup_name(self) -> str:
        stamp = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
        name, n = stamp, 1
        while os.path.lexists(self.dir / BACKUPS / name):
            n += 1
            name = f"{stamp}-{n}"
        assert BACKUP_NAME.fullmatch(name)
        return name

    def _preflight(self, change: Change, paths: Mapping[str, Path], journal: Journal, own: int) -> None:
        """Refuse before the first write what would fail during it: a directory that cannot be written, too
        little free space for the new bytes (and the copies that make the change undoable). `own`: the bytes
        of the journal and the new state."""
        targets = {self.dir, self.store.root} | {_existing_ancestor(d) for d in {p.parent for p in paths.values()}}
        if change.backup:
            targets.add(_existing_ancestor(self.dir / BACKUPS))
        for d in sorted(targets):
            if not os.access(d, os.W_OK):
                code = errno.EROFS if _read_only(d) else errno.EPERM if _immutable(d) else errno.EACCES
                raise os_failure(
                    OSError(code, os.strerror(code), str(d)),
                    "cannot write in",
                    "nothing was changed (found before the first write)",
                    copy=self.copy,
                )
        need = FREE_MARGIN + own
        need += sum(len(d) for d in change.writes.values() if d) + sum(len(b) for b in change.bases)
        unsaved = (e for e in journal.entries if e.before is not None and not self.store.has(e.before))
        need += sum(len(change.before[e.path] or b"") for e in unsaved)
        need += sum(len(b) for b in (change.backup or {}).values())
        st = os.statvfs(self.dir)
        free = st.f_bavail * st.f_frsize
        files = 8 + 2 * len(change.writes) + len(change.bases) + len(change.backup or {})  # temps, copies, journal
        if st.f_files > 0 and st.f_favail < files:
            raise OSFailure(
                f"no free inodes in {self.dir}: the change needs about {files} new files, {st.f_favail} can be "
                f"made (ENOSPC); nothing was changed (found before the first write)",
                hint=f"the file system has no free inodes left, whatever `df -h` says: `df -i {self.dir}`; remove "
                "files there, then run the command again",
                error=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.dir)),
            )
        if free < need:
            raise OSFailure(
                f"not enough free space in {self.dir}: the change needs about {need // 1024} KiB, "
                f"{free // 1024} KiB are free (ENOSPC); nothing was changed (found before the first "
                f"write)",
                hint=f"free space on that file system (`df -h {self.dir}`), then run the command again",
                error=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.dir)),
            )

    def _write_backup(self, journal: Journal, change: Change, barrier: Barrier) -> Path | None:
        """The edits --force overwrites, saved whole; their names (every directory down to each file) go to
        step 3's barrier: they must be durable before the files they save are replaced."""
        if not journal.backup:
            return None
        root = _real_dir(self.dir / BACKUPS) / journal.backup
        os.mkdir(root)
        barrier.add(self.dir, root.parent)
        for f, data in sorted((change.backup or {}).items()):
            path = root / f
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data)
            d = path.parent
            while d != root.parent:
                barrier.add(d)
                d = d.parent
        return root

    def _replace(self, f: str, path: Path, change: Change, barrier: Barrier) -> None:
        if read_bytes(path) != change.before[f]:
            raise Conflict(
                f"{path} changed while this command ran (edited by hand, or another program wrote it)",
                hint="this command's own writes are rolled back; the edit is left in place in that file: run the "
                "command again (it then sees the edit)",
            )
        barrier.add(path.parent)
        if change.writes[f] is None:
            os.unlink(path)
            barrier.add(*(d.parent for d in remove_empty_dirs(path.parent, self.tree.package_dir)))
            return
        os.rename(tmp_path(path), path)

    def _abandon(self, err: BaseException) -> None:
        """Roll back a commit that did not finish, then report why it stopped."""
        kept: list[Path] = []
        try:
            journal = read_journal(self.journal_path)
            if journal is not None:
                kept = self._roll_back(journal, live=True)
            for name in os.listdir(self.dir):
                if is_tmp_name(name):
                    unlink_quietly(self.dir / name)
            self.store.prune(self.state.bases)
        except (OSError, StateError, PathEscape) as again:  # PathEscape: a link swapped in since the commit looked
            what = f"{err.strerror} on {err.filename}" if isinstance(err, OSError) else str(err) or type(err).__name__
            fix = getattr(again, "hint", None)
            raise OSFailure(
                f"the change stopped ({what}), and rolling it back failed too ({again}); the journal "
                f"{self.journal_path} is kept",
                hint=(f"{fix}; then " if fix else "once the cause is fixed, ")
                + f"{self.spelling.recover} rolls it back",
            ) from None
        if kept:
            print(
                f"sglang-overlay: left as edited while the command ran (not rolled back, not moved): "
                f"{', '.join(map(str, kept))}",
                file=sys.stderr,
            )
        if isinstance(err, KeyboardInterrupt):
            print(f"sglang-overlay: interrupted: rolled back, {self.tree.root} is as it was", file=sys.stderr)
            raise err
        if isinstance(err, OSError):
            raise os_failure(
                err, "cannot write", "nothing was changed: what was written so far is rolled back", copy=self.copy
            ) from None
        raise err


def _holds(path: Path, data: bytes, mode: int) -> bool:
    try:
        return read_bytes(path) == data and stat.S_IMODE(os.lstat(path).st_mode) == mode
    except OSError:
        return False


def _mode_of(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _immutable(path: Path) -> bool:
    """chattr +i: even root may not write there (FS_IOC_GETFLAGS, FS_IMMUTABLE_FL)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = fcntl.ioctl(fd, 0x80086601, b"\0" * 8)
        return bool(int.from_bytes(flags[:4], sys.byteorder) & 0x10)
    except OSError:
        return False
    finally:
        os.close(fd)


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
