"""The versioned state file inside a tree, and the content store that keeps each patched file's base.

state.json records, for every file the tool manages, the hash of the file before any patch (its base, kept in
objects/) and the hash the tool last wrote. A file whose current hash differs from the latter was edited by
hand: that is drift, and no command overwrites it without --force.

Nothing read back from disk is trusted: state.json is checked key by key (its paths like a manifest's), and a
saved copy is checked against its hash before it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from pathlib import Path

from .errors import StateError
from .fsio import is_tmp_name, read_bytes, unlink_quietly
from .progname import prog
from .record import Record, field
from .repopath import IDENTITY_OWNER, check_repo_path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

STATE_VERSION = 1
HEX64 = re.compile(r"[0-9a-f]{64}")
PATCH_NAME = re.compile(r"[a-z][a-z0-9_]*")


def state_fix(state_dir: Path | None = None) -> str:
    """The fix for a damaged state file (a function: it names the command the user ran). `state_dir`: the
    tree's state directory, so that the embedded tree's way out names that tree by its whole path (a hint
    pasted in another directory must not act on another project's tree), moved aside, not deleted: its
    backups/ may hold the user's edits."""
    tree = shlex.quote(str(state_dir.parent)) if state_dir is not None else ".sglang/sglang-VERSION"
    return (
        "sglang-overlay writes this file whole and atomically, so something else changed it: move it aside, "
        "put the patched files back as upstream ships them (`git checkout -- python/sglang` in a checkout, a "
        f"reinstall for site-packages, `mv {tree} {tree}.damaged && {prog()} fetch` for the embedded tree: "
        "its backups/ stay in the moved copy), then apply again"
    )


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(data: bytes | None) -> str | None:
    return sha256(data) if data is not None else None


class FileRecord(Record):
    base: str | None  # sha256 of the file before any patch; None: it did not exist
    applied: str | None  # sha256 of what the tool wrote; None: the tool removed it
    patches: tuple[str, ...]


class State(Record):
    applied: tuple[str, ...] = ()  # patch names, manifest order
    files: dict[str, FileRecord] = field(default_factory=dict)  # repo path -> record
    fingerprint: str | None = None
    pin_version: str | None = None
    digests: dict[str, str] = field(default_factory=dict)  # patch name -> content digest when applied

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "version": STATE_VERSION,
                    "pin_version": self.pin_version,
                    "applied": list(self.applied),
                    "fingerprint": self.fingerprint,
                    "digests": dict(sorted(self.digests.items())),
                    "files": {
                        p: {"base": r.base, "applied": r.applied, "patches": list(r.patches)}
                        for p, r in sorted(self.files.items())
                    },
                },
                indent=1,
            )
            + "\n"
        )

    @property
    def bases(self) -> set[str]:
        return {r.base for r in self.files.values() if r.base}


class Shape:
    """Checks one JSON document written by this tool, naming the key that is wrong."""

    def __init__(self, path: Path, what: str, fix: str):
        self.path, self.what, self.fix = path, what, fix

    def fail(self, key: str, problem: str) -> StateError:
        return StateError(f"{self.path}: {self.what}: key {key}: {problem}", hint=self.fix)

    def load(self, text: str) -> dict[str, Any]:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise StateError(f"{self.path}: {self.what} is not valid JSON ({e}; truncated?)", hint=self.fix) from e
        if not isinstance(data, dict):
            raise StateError(
                f"{self.path}: {self.what}: expected a JSON object, got {type(data).__name__}", hint=self.fix
            )
        return data

    def keys(self, data: dict[str, Any], allowed: tuple[str, ...], key: str = "(top level)") -> None:
        extra = sorted(set(data) - set(allowed))
        if extra:
            raise self.fail(key, f"unknown key(s) {', '.join(map(repr, extra))}")

    def present(self, data: dict[str, Any], required: tuple[str, ...], key: str = "(top level)") -> None:
        """Every key this tool writes must be there: a missing one read as null could mean "did not exist",
        and a rollback or revert would delete the file."""
        missing = [k for k in required if k not in data]
        if missing:
            where = "" if key == "(top level)" else f"{key} -> "
            raise self.fail(f"{where}{missing[0]!r}", "missing")

    def get(self, data: dict[str, Any], key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in data:
            if optional:
                return None
            raise self.fail(repr(key), "missing")
        value = data[key]
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.fail(repr(key), f"expected {names}, got {value!r:.80}")
        return value

    def required_digest(self, value: Any, key: str) -> str:
        return self._digest(value, key, "")

    def digest(self, value: Any, key: str) -> str | None:
        """A digest or null."""
        return None if value is None else self._digest(value, key, " or null")

    def _digest(self, value: Any, key: str, or_null: str) -> str:
        if not isinstance(value, str) or not HEX64.fullmatch(value):
            raise self.fail(key, f"expected a sha256 hex digest{or_null}, got {value!r:.80}")
        return value

    def name(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not PATCH_NAME.fullmatch(value):
            raise self.fail(key, f"{value!r:.80} is not a patch name")
        return value

    def repo_path(self, value: Any, key: str) -> str:
        return check_repo_path(value, f"{self.path}: {self.what}: key {key}")


def parse_state(text: str, path: Path) -> State:
    sh = Shape(path, "state file", state_fix(path.parent))
    data = sh.load(text)
    sh.keys(data, ("version", "pin_version", "applied", "fingerprint", "digests", "files"))
    version = data.get("version")
    if version != STATE_VERSION or isinstance(version, bool):
        raise StateError(
            f"{path}: state version {version!r}, this tool reads {STATE_VERSION}",
            hint="use the sglang-overlay version that wrote it to revert, then upgrade",
        )
    sh.present(data, ("applied", "digests", "files"))  # pin_version, fingerprint: null if absent
    applied = tuple(sh.name(n, f"'applied'[{i}]") for i, n in enumerate(sh.get(data, "applied", list)))
    pin_version = sh.get(data, "pin_version", str, optional=True)
    fingerprint = sh.digest(data.get("fingerprint"), "'fingerprint'")
    digests = {
        sh.name(k, "'digests'"): sh.required_digest(v, f"'digests' -> {k!r}")
        for k, v in sh.get(data, "digests", dict).items()
    }
    files = {}
    for p, r in sh.get(data, "files", dict).items():
        key = f"'files' -> {p!r:.120}"
        sh.repo_path(p, key)
        if not isinstance(r, dict):
            raise sh.fail(key, f"expected an object, got {r!r:.80}")
        sh.keys(r, ("base", "applied", "patches"), key)
        sh.present(r, ("base", "applied", "patches"), key)
        patches = tuple(
            n if n == IDENTITY_OWNER else sh.name(n, f"{key} -> 'patches'") for n in sh.get(r, "patches", list)
        )
        files[p] = FileRecord(
            sh.digest(r.get("base"), f"{key} -> 'base'"), sh.digest(r.get("applied"), f"{key} -> 'applied'"), patches
        )
    return State(applied, files, fingerprint, pin_version, digests)


def read_own_file(path: Path, what: str, fix: str) -> bytes | None:
    """One of the tool's own files (state, journal, rebase progress); None if absent, unreadable is bad input."""
    try:
        return read_bytes(path)
    except OSError as e:
        raise StateError(f"{path}: {what} cannot be read ({e.strerror})", hint=fix) from e


def load_state(path: Path) -> State:
    raw = read_own_file(path, "the state file", state_fix(path.parent))
    if raw is None:
        return State()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StateError(f"{path}: the state file is not UTF-8 text ({e})", hint=state_fix(path.parent)) from e
    return parse_state(text, path)


class ObjectStore:
    """Content-addressed copies of base files (like quilt's .pc/, but deduplicated and hash-checked), and of the
    previous bytes of the files a transaction replaces.

    A copy's name only ever appears once its bytes are durable (Transaction.commit writes it to a temp file,
    flushes, then renames), so a name left by a kill or a power cut names whole bytes. That is why the copies of
    the last change are kept, not only those the state refers to: an `apply --all` after a `revert --all` finds
    every copy it needs already there and writes none (Transaction.commit prunes the rest)."""

    def __init__(self, root: Path):
        self.root = root

    def has(self, digest: str) -> bool:
        return os.path.lexists(self.root / digest)

    def holds(self, digest: str, data: bytes) -> bool:
        """The copy `digest` is there and holds `data` (nothing on disk is trusted: one that does not is
        written again)."""
        try:
            return read_bytes(self.root / digest) == data
        except IsADirectoryError:  # nothing can be renamed over it: say so, not the temp file's EISDIR
            where = shlex.quote(str(self.root / digest))
            raise StateError(
                f"{self.root / digest}: a directory where a saved copy belongs",
                hint=f"remove it (`rm -r {where}`): the command saves the copy again",
            ) from None
        except OSError:
            return False

    def get(self, digest: str) -> bytes:
        path = self.root / digest
        try:
            data = read_bytes(path)
        except OSError as e:
            raise StateError(
                f"{path}: a saved copy cannot be read ({e.strerror})", hint=state_fix(self.root.parent)
            ) from e
        if data is None:
            raise StateError(f"{path}: a saved copy the state needs is missing", hint=state_fix(self.root.parent))
        if sha256(data) != digest:
            raise StateError(
                f"{path}: a saved copy is corrupt (its hash does not match its name)", hint=state_fix(self.root.parent)
            )
        return data

    def prune(self, keep: set[str] | None = None) -> None:
        """Remove temp files a killed write left and, unless `keep` is None, the copies not in `keep`."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            if is_tmp_name(name) or (keep is not None and HEX64.fullmatch(name) and name not in keep):
                unlink_quietly(self.root / name)
