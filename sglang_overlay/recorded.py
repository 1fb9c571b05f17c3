"""`revert --all` of a tree that holds another release than the manifest pins: what the tree carries is taken out
from what its own state recorded (each file's base, saved in objects/), so neither the pin of the tree's release
nor its wheel nor a manifest that still names those patches is needed.

Where the tree changed release under its state (an upgrade after the patches were applied: the state says it
was recorded on another release), the recorded bases are the old release's: a file that still holds what the
tool wrote goes back to its base (an upgrade that left it alone left it the same in both), and a file that no
longer does is the new release's (or someone's edit) and is left as it is, never overwritten, even with --force.
On the release it was recorded on, a file changed by hand is drift, refused unless --force, as in any revert."""

from __future__ import annotations

from .state import State, digest_of
from .switch import Outcome, read_current, rebuild_bases, refuse_drift
from .transaction import Change, Transaction


def revert_recorded(txn: Transaction, *, force: bool) -> tuple[Outcome, list[str]]:
    """Take out everything the locked tree carries. Returns what was done and the notes for the user."""
    state, tree = txn.state, txn.tree
    found = tree.version()
    moved = state.pin_version is not None and found is not None and state.pin_version != found
    paths = sorted(state.files)
    current = read_current(tree, paths)
    ours = {f for f in paths if digest_of(current[f]) == state.files[f].applied}
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
        f"left as it is: {f}: it no longer holds what sglang-overlay wrote (the tree is SGLang {found} now, its "
        f"state was recorded on {state.pin_version})"
        for f in left
    ]
    if saved:
        notes.append(f"--force: saved {len(saved)} hand-edited file(s) under {backup_dir}")
    outcome = Outcome((), (), tuple(state.applied), tuple(sorted(writes)), [], None, backup_dir)
    return outcome, notes
