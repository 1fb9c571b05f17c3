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
On the release it was recorded on, a file changed by hand is drift, refused unless --force, as in any revert."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
from pathlib import Path

from .gitcmd import git
from .state import State, digest_of
from .switch import Contents, Outcome, read_current, rebuild_bases, refuse_drift
from .transaction import Change, Transaction
from .tree import Tree


def revert_recorded(txn: Transaction, *, force: bool) -> tuple[Outcome, list[str]]:
    """Take out everything the locked tree carries. Returns what was done and the notes for the user."""
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
    base = rebuild_bases(txn.store, state, {f: current[f] for f in keep})
    edited = {f: state.files[f] for f in keep if f not in ours and current[f] != base[f]}
    if edited and not force:
        raise refuse_drift(tree, "revert", edited)
    # a file a patch deleted comes back with git's default mode: the state records bytes, not modes
    writes = {f: base[f] for f in keep if base[f] != current[f]}
    new_state = State(pin_version=found or state.pin_version)
    saved = {f: data for f in edited if (data := current[f]) is not None}
    backup_dir = None
    if writes or new_state.to_json() != state.to_json():
        backup_dir = txn.commit(Change("revert", writes, {f: current[f] for f in writes}, new_state, (), saved))
    notes = [f"{tree.root} is SGLang {found or '(unknown)'}: reverted from the state it recorded"]
    notes += [
        f"left as it is: {f}: SGLang {found} ships it as it is now (the state was recorded on {state.pin_version})"
        if f in shipped
        else f"left as it is: {f}: it no longer holds what sglang-overlay wrote (the tree is SGLang {found} now, "
        f"its state was recorded on {state.pin_version})"
        for f in left
    ]
    if saved:
        notes.append(f"--force: saved {len(saved)} hand-edited file(s) under {backup_dir}")
    # the switch's revert says the same: a file put back with no backup must not pass in silence
    notes += [f"--force: {f} was deleted by hand; nothing to save" for f in sorted(edited) if current[f] is None]
    outcome = Outcome((), (), tuple(state.applied), tuple(sorted(writes)), [], None, backup_dir)
    return outcome, notes


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
        return {f for f in paths if blobs[f] == _blob_id(current[f], algorithm)}
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


def _head_blobs(tree: Tree, paths: list[str]) -> tuple[str, dict[str, str | None]] | None:
    """The hash the tree's own git repository names objects with, and the blob id of each path in the commit it
    has checked out (None: not in it); None if the tree is not the top of a git repository with a commit."""
    top = git("rev-parse", "--show-toplevel", cwd=tree.root, check=False)
    if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(tree.root):
        return None  # an unpacked tree inside another repository: that one's commit is not this tree's release
    fmt = git("rev-parse", "--show-object-format", cwd=tree.root, check=False)
    listed = git("ls-tree", "-z", "--full-tree", "HEAD", "--", *paths, cwd=tree.root, check=False)
    if listed.returncode != 0:
        return None
    out: dict[str, str | None] = dict.fromkeys(paths)
    for entry in listed.stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob" and parts[0] in ("100644", "100755") and path in out:
            out[path] = parts[2]
    return (fmt.stdout.strip() if fmt.returncode == 0 and fmt.stdout.strip() else "sha1"), out


def _blob_id(data: bytes | None, algorithm: str) -> str | None:
    """What git names these bytes as a blob (None for an absent file, as an absent path has no blob)."""
    if data is None:
        return None
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()
