"""The versioned state file inside a tree, and the content store that keeps each patched file's base.

state.json records, for every file the tool manages, the hash of the file before any patch (its base, kept in
objects/) and the hash the tool last wrote. A file whose current hash differs from the latter was edited by
hand: that is drift, and no command overwrites it without --force.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OverlayError

STATE_VERSION = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class FileRecord:
    base: str | None  # sha256 of the file before any patch; None: it did not exist
    applied: str | None  # sha256 of what the tool wrote; None: the tool removed it
    patches: tuple[str, ...]


@dataclass(frozen=True)
class State:
    applied: tuple[str, ...] = ()  # patch names, manifest order
    files: dict[str, FileRecord] = field(default_factory=dict)  # repo path -> record
    fingerprint: str | None = None
    pin_version: str | None = None
    digests: dict[str, str] = field(default_factory=dict)  # patch name -> content digest when applied

    def to_json(self) -> str:
        return json.dumps({
            "version": STATE_VERSION,
            "pin_version": self.pin_version,
            "applied": list(self.applied),
            "fingerprint": self.fingerprint,
            "digests": dict(sorted(self.digests.items())),
            "files": {p: {"base": r.base, "applied": r.applied, "patches": list(r.patches)}
                      for p, r in sorted(self.files.items())},
        }, indent=1) + "\n"


def load_state(path: Path) -> State:
    if not path.exists():
        return State()
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise OverlayError(f"{path}: state file is unreadable ({e})",
                           hint="restore it from the backup your last --force printed, or reset the tree by hand")
    if data.get("version") != STATE_VERSION:
        raise OverlayError(f"{path}: state version {data.get('version')!r}, this tool reads {STATE_VERSION}",
                           hint="use the sglang-overlay version that wrote it to revert, then upgrade")
    files = {p: FileRecord(r["base"], r["applied"], tuple(r["patches"])) for p, r in data.get("files", {}).items()}
    return State(tuple(data.get("applied", ())), files, data.get("fingerprint"), data.get("pin_version"),
                 dict(data.get("digests", {})))


def atomic_write(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write so that a reader (or a crash) sees the old content or the new, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.sglang-overlay-tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


class ObjectStore:
    """Content-addressed copies of base files (like quilt's .pc/, but deduplicated and hash-checked)."""

    def __init__(self, root: Path):
        self.root = root

    def put(self, data: bytes) -> str:
        digest = sha256(data)
        path = self.root / digest
        if not path.exists():
            atomic_write(path, data)
        return digest

    def get(self, digest: str) -> bytes:
        path = self.root / digest
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise OverlayError(f"{path}: the saved base copy is missing",
                               hint="the state directory was damaged; restore the file from git or reinstall")
        if sha256(data) != digest:
            raise OverlayError(f"{path}: the saved base copy is corrupt (hash mismatch)")
        return data

    def prune(self, keep: set[str]) -> None:
        if not self.root.is_dir():
            return
        for p in self.root.iterdir():
            if p.name not in keep and not p.name.startswith("."):
                p.unlink()
