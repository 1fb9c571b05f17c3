"""The journal of the transaction in flight: one small JSON file, written whole and renamed into place.

Its presence is the whole protocol: present, the tree may be half-changed and is rolled back from it; absent,
nothing is in flight. Everything a rollback needs is on disk before it appears (each replaced file's previous
bytes in the object store, by hash; the previous state.json verbatim), and a rollback only ever makes files
hold what the journal says, so it can be cut short and run again any number of times.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import StateError
from .record import Record
from .state import Shape, parse_state, read_own_file

JOURNAL_VERSION = 1
BACKUP_NAME = re.compile(r"\d{8}T\d{6}Z-\d+(-\d+)?")
JOURNAL_FIX = (
    "sglang-overlay writes its journal whole and atomically, so something else changed it: move it "
    "aside (it names the files an interrupted command was changing), check those files against "
    "upstream (`git status` in a checkout), then run the command again"
)


class Entry(Record):
    path: str  # repo path
    before: str | None  # sha256 of the bytes it held (kept in objects/); None: it did not exist
    mode: int | None  # its permission bits; None when it did not exist
    after: str | None = None  # sha256 of what the transaction writes there; None: it removes the file


class Journal(Record):
    op: str
    pid: int
    entries: tuple[Entry, ...]
    new_dirs: tuple[str, ...]  # repo paths of the directories the transaction creates, outermost first
    state_before: str | None  # state.json as it was; None: there was none
    backup: str | None  # the backup directory (under backups/) the transaction creates

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": JOURNAL_VERSION,
                "op": self.op,
                "pid": self.pid,
                "files": [{"path": e.path, "before": e.before, "mode": e.mode, "after": e.after} for e in self.entries],
                "new_dirs": list(self.new_dirs),
                "state_before": self.state_before,
                "backup": self.backup,
            }
        ).encode()


def parse_journal(raw: bytes, path: Path) -> Journal:
    sh = Shape(path, "journal", JOURNAL_FIX)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StateError(f"{path}: the journal is not UTF-8 text ({e})", hint=JOURNAL_FIX) from e
    data = sh.load(text)
    sh.keys(data, ("version", "op", "pid", "files", "new_dirs", "state_before", "backup"))
    sh.present(data, ("version", "op", "pid", "files", "new_dirs", "state_before"))  # backup: null if absent
    if data.get("version") != JOURNAL_VERSION:
        raise sh.fail("'version'", f"{data.get('version')!r}, this tool reads {JOURNAL_VERSION}")
    op = sh.get(data, "op", str)
    pid = sh.get(data, "pid", int)
    entries = []
    for i, raw_entry in enumerate(sh.get(data, "files", list)):
        key = f"'files'[{i}]"
        if not isinstance(raw_entry, dict):
            raise sh.fail(key, f"expected an object, got {raw_entry!r:.80}")
        sh.keys(raw_entry, ("path", "before", "mode", "after"), key)
        # 'after' absent reads as null: a rollback then keeps more edits aside, it never deletes for it
        sh.present(raw_entry, ("path", "before", "mode"), key)
        mode = sh.get(raw_entry, "mode", int, optional=True)
        if mode is not None and not 0 <= mode <= 0o7777:
            raise sh.fail(f"{key} -> 'mode'", f"{mode!r} is not a permission mode")
        entries.append(
            Entry(
                sh.repo_path(raw_entry.get("path"), f"{key} -> 'path'"),
                sh.digest(raw_entry.get("before"), f"{key} -> 'before'"),
                mode,
                sh.digest(raw_entry.get("after"), f"{key} -> 'after'"),
            )
        )
    new_dirs = tuple(sh.repo_path(d, f"'new_dirs'[{i}]") for i, d in enumerate(sh.get(data, "new_dirs", list)))
    state_before = sh.get(data, "state_before", str, optional=True)
    if state_before is not None:
        parse_state(state_before, path)  # what a rollback would write back must itself be a valid state
    backup = sh.get(data, "backup", str, optional=True)
    if backup is not None and not BACKUP_NAME.fullmatch(backup):
        raise sh.fail("'backup'", f"{backup!r:.80} is not a backup directory name")
    return Journal(op, pid, tuple(entries), new_dirs, state_before, backup)


def read_journal(path: Path) -> Journal | None:
    raw = read_own_file(path, "the journal", JOURNAL_FIX)
    return None if raw is None else parse_journal(raw, path)
