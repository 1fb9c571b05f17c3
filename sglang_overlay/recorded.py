"""`revert --all` of a tree that holds another release than the manifest pins: what the tree carries is taken out
from what its own state recorded (each file's base, saved in objects/), so neither the pin of the tree's release
nor its wheel nor a manifest that still names those patches is needed.

Where the tree changed release under its state (an upgrade after the patches were applied: the state says it
was recorded on another release), the recorded bases are the old release's: a file that still holds what the
tool wrote goes back to its base (an upgrade that left it alone left it the same in both), and a file that no
longer does is the new release's (or someone's edit) and is left as it is, never overwritten, even with --force.
The bytes cannot tell the tool's write from a new release that ships the file exactly so (a patch upstreamed
verbatim, an overlay module adopted, a file deleted upstream too), so the tree's own release is asked where it
can answer (its git commit, its dist-info RECORD): what it ships as the file is now is left as it is too.
On the release it was recorded on, a file changed by hand is drift, refused unless --force, as in any revert.
A left file's recorded base is not thrown away with the state that held it: it is saved beside the backups
(FILE.sglang-OLD), the one copy of the old release's file the tool had.
The state records bytes, not modes: a file's exec bit comes from the tree's own git commit where that holds
the base (a file a patch deleted comes back executable if it was); elsewhere it is git's default."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
from pathlib import Path

from .gitcmd import git
from .spelling import Spelling
from .state import State, digest_of
from .switch import Contents, Outcome, exec_mode, read_current, rebuild_bases, refuse_drift
from .transaction import Change, Transaction
from .tree import Tree


def revert_recorded(txn: Transaction, *, force: bool, spelling: Spelling) -> tuple[Outcome, list[str]]:
    """Take out everything the locked tree carries. Returns what was done (with what --force did to files, in its
    notes) and the notes on the tree for the user."""
    state, tree = txn.state, txn.tree
    found = tree.version()
    moved = state.pin_version is not None and found is not None and state.pin_version != found
    paths = sorted(state.files)
    current = read_current(tree, paths)
    ours = {f for f in paths if digest_of(current[f]) == state.files[f].applied}
    shipped = _shipped(tree, found, paths, current) if moved else set()
    ours -= shipped
    left = [f for f in paths if f not in ours] if moved else []
    keep = [f for f in paths if f not in left]
    base = rebuild_bases(txn.store, state, current)
    edited = {f: state.files[f] for f in keep if f not in ours and current[f] != base[f]}
    if edited and not force:
        raise refuse_drift(tree, "revert", edited, spelling)
    modes = _base_modes(tree, {f: base[f] for f in keep}, current)
    writes = {f: base[f] for f in keep if base[f] != current[f] or f in modes}
    new_state = State(pin_version=found or state.pin_version)
    saved = {f: data for f in edited if (data := current[f]) is not None}
    # the old release's file is in no other place the tool knows of once the state that named it is gone
    kept = {
        f"{f}.sglang-{state.pin_version}": data for f in left if (data := base[f]) is not None and data != current[f]
    }
    backup_dir = None
    if writes or kept or new_state.to_json() != state.to_json():
        change = Change("revert", writes, {f: current[f] for f in writes}, new_state, (), saved | kept, modes)
        backup_dir = txn.commit(change)
    notes = [f"{tree.root} is SGLang {found or '(unknown)'}: reverted from the state it recorded"]
    for f in left:
        why = (
            f"SGLang {found} ships it as it is now (the state was recorded on {state.pin_version})"
            if f in shipped
            else f"it no longer holds what sglang-overlay wrote (the tree is SGLang {found} now, its state was "
            f"recorded on {state.pin_version})"
        )
        copy = f"{f}.sglang-{state.pin_version}"
        notes.append(
            f"left as it is: {f}: {why}"
            + (f"; its SGLang {state.pin_version} file is saved as {backup_dir}/{copy}" if copy in kept else "")
        )
    # what --force did to files is the Outcome's, as the switch's is: the API returns it in file_notes, where its
    # callers look for a backup; in the notes it was the one revert whose backup was not there
    forced = [f"{spelling.on('force')}: saved {len(saved)} hand-edited file(s) under {backup_dir}"] if saved else []
    # the switch's revert says the same: a file put back with no backup must not pass in silence
    gone = [f for f in sorted(edited) if current[f] is None]
    forced += [f"{spelling.on('force')}: {f} was deleted by hand; nothing to save" for f in gone]
    outcome = Outcome((), (), tuple(state.applied), tuple(sorted(writes)), [], None, backup_dir, tuple(forced))
    return outcome, notes


def _base_modes(tree: Tree, base: Contents, current: Contents) -> dict[str, int]:
    """The mode of each file going back to its base whose exec bit the tree's git commit decides otherwise than
    the file has now (or would get, created: git's default), where that commit holds exactly the base."""
    head = _head_blobs(tree, sorted(f for f, data in base.items() if data is not None)) if tree.is_git else None
    if head is None:
        return {}
    algorithm, blobs = head
    modes = {}
    for f, (blob, exe) in blobs.items():
        if blob is None or blob != _blob_id(base[f], algorithm):
            continue
        if (mode := exec_mode(tree, f, current[f] is not None, exe)) is not None:
            modes[f] = mode
    return modes


def _shipped(tree: Tree, found: str | None, paths: list[str], current: Contents) -> set[str]:
    """The paths the tree's release ships exactly as they are now (absent included), as far as the tree can
    tell; a tree that cannot (no git of its own, no RECORD) answers none, and the bytes decide as before."""
    if tree.kind == "installed":
        release = _record_of(tree, found)
        if release is None:
            return set()
        return {f for f in paths if release.get(f[len("python/") :]) == _record_hash(current[f])}
    if tree.is_git:
        head = _head_blobs(tree, paths)
        if head is None:
            return set()
        algorithm, blobs = head
        return {f for f in paths if blobs[f][0] == _blob_id(current[f], algorithm)}
    return set()


def _record_hash(data: bytes | None) -> str | None:
    if data is None:
        return None
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _record_of(tree: Tree, found: str | None) -> dict[str, str | None] | None:
    """pip's RECORD of the release the tree holds: path -> hash (a file it lists without one maps to "")."""
    if found is None:
        return None
    for info in tree.root.glob("sglang-*.dist-info"):
        meta = _read_text(info / "METADATA")
        m = re.search(r"^Version:\s*(\S+)", meta or "", re.M)
        record = _read_text(info / "RECORD")
        if m is None or m.group(1) != found or record is None:
            continue
        out: dict[str, str | None] = {}
        try:
            for row in csv.reader(io.StringIO(record)):
                if row:
                    out[row[0]] = row[1] if len(row) > 1 else ""
        except csv.Error:
            return None  # a RECORD that does not parse tells nothing
        return out
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def _head_blobs(tree: Tree, paths: list[str]) -> tuple[str, dict[str, tuple[str | None, bool]]] | None:
    """The hash the tree's own git repository names objects with, and each path's blob id in the commit it has
    checked out (None: not in it) with its exec bit; None if the tree is not the top of a git repository with a
    commit."""
    if not paths:  # `ls-tree HEAD --` with no path lists the whole tree
        return None
    top = git("rev-parse", "--show-toplevel", cwd=tree.root, check=False)
    if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(tree.root):
        return None  # an unpacked tree inside another repository: that one's commit is not this tree's release
    fmt = git("rev-parse", "--show-object-format", cwd=tree.root, check=False)
    listed = git("ls-tree", "-z", "--full-tree", "HEAD", "--", *paths, cwd=tree.root, check=False)
    if listed.returncode != 0:
        return None
    out: dict[str, tuple[str | None, bool]] = dict.fromkeys(paths, (None, False))
    for entry in listed.stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob" and parts[0] in ("100644", "100755") and path in out:
            out[path] = (parts[2], parts[0] == "100755")
    return (fmt.stdout.strip() if fmt.returncode == 0 and fmt.stdout.strip() else "sha1"), out


def _blob_id(data: bytes | None, algorithm: str) -> str | None:
    """What git names these bytes as a blob (None for an absent file, as an absent path has no blob)."""
    if data is None:
        return None
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()
