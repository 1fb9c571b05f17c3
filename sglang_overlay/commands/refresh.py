"""Capture hand edits of a patch's files back into patches/NAME.patch (or its overlay files), keeping the
DEP-3 header (Last-Update is set to today). Edits that belong to other applied patches stay theirs: patches
later in manifest order are stripped off the edited file before the new diff is taken.

All of it runs under the tree's lock: the patch files are replaced atomically first, then the tree's state is
switched to record them. A kill between the two leaves the edits in the tree and the new patch on disk;
running refresh again finishes the job (it then finds no new edits and records the patch as applied)."""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

from ..compose import compose
from ..diffgen import make_diff
from ..errors import BadInput, Conflict, os_failure
from ..fsio import atomic_write
from ..manifest import UpstreamedPatch, load_manifest
from ..patchfile import parse_patch_file
from ..progname import prog
from ..switch import switch
from ..treepin import check_tree_version
from ..treeread import base_reader, read_file
from ._common import open_tree, tell

NAME = "refresh"
HELP = "write hand edits of a patch's files back into the patch"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")


def run(ctx, args) -> int:
    m, tree = ctx.manifest, ctx.tree
    patch = m.patch(args.name)
    if isinstance(patch, UpstreamedPatch):
        raise BadInput(
            f"{patch.name} is upstream ({patch.upstream.describe()}): it changes nothing, so there is nothing "
            "to refresh",
            hint="edit the entry's proof in manifest.yaml instead",
        )
    check_tree_version(ctx)
    with open_tree(ctx) as txn:
        state = txn.state
        m.check_carried(state.applied)
        if patch.name not in state.applied:
            raise BadInput(
                f"{patch.name} is not applied, so there are no edits of it to capture",
                hint=f"`{prog()} apply {patch.name}`, edit its files, then refresh",
            )
        # refused before any patch file is written: a directory or link there reads as "no file", and the
        # patch would be rewritten as that file's deletion
        for f in (*(patch.diff.files if patch.diff else ()), *patch.overlay):
            tree.managed_file(f)
        updates = _captured(m, tree, txn, patch)
        for path, data in updates.items():
            try:
                atomic_write(path, data)
            except OSError as e:
                raise os_failure(
                    e,
                    "cannot write",
                    "the tree is unchanged; patch files written before it are "
                    "kept (run refresh again once it can write)",
                ) from None
        if patch.diff is not None and patch.diff.path in updates:
            parse_patch_file(patch.diff.path)  # what we wrote must read back
        # Re-read the manifest so the state records the new patch content, and rewrite the identity module.
        outcome = switch(txn, load_manifest(ctx.selected_manifest_path), state.applied, op="refresh")
        tell(outcome.notes)
    if not updates and not outcome.written:
        print(f"{patch.name}: no hand edits to capture")
        return 0
    print(
        f"refreshed {patch.name}: {len(updates)} file(s) updated; fingerprint now {(outcome.fingerprint or '-')[:12]}"
    )
    print(f"  review it: git diff -- {patch.diff.path if patch.diff else 'overlay/'}", file=sys.stderr)
    return 0


def _captured(m, tree, txn, patch) -> dict[Path, bytes]:
    """patch file or overlay source -> its new bytes, for those the hand edits change."""
    state = txn.state
    order = [p.name for p in m.ordered(state.applied)]
    before = m.changes(order[: order.index(patch.name)])
    after = m.changes(order[order.index(patch.name) + 1 :])
    read = base_reader(tree, state, txn.store)
    diff_files = list(patch.diff.files) if patch.diff else []
    base = {f: read(f) for f in {f for p in before for f in p.files} | set(diff_files)}
    old = compose(base, before).contents
    now = {f: read_file(tree, f) for f in diff_files}
    later = [p for p in after if set(p.files) & set(diff_files)]
    # A later patch sharing a file may write others too: they must be present, as the applied set made them (not
    # as the tree has them, whose hand edits there are no business of this refresh), for it to come off whole.
    others = {f for p in later for f in p.files} - set(diff_files)
    if others:
        applied = m.changes(order)
        made = compose({f: read(f) for p in applied for f in p.files}, applied).contents
        now.update({f: made.get(f) for f in others})
    try:
        mine = compose(now, list(reversed(later)), reverse=True).contents if later else now
    except Conflict as e:
        raise Conflict(
            f"cannot separate {patch.name}'s edits from later patches on the same lines:\n{e}",
            hint="revert the later patches, refresh, then apply them again",
        ) from e
    updates = {}
    if patch.diff is not None:
        body = make_diff(
            {f: old.get(f) for f in diff_files},
            {f: mine.get(f) for f in diff_files},
            executable=patch.diff.executable,
        )
        if not body:
            raise BadInput(
                f"refreshing {patch.name} would leave an empty patch",
                hint=f"revert it instead: `{prog()} revert {patch.name}`",
            )
        if body.encode() != patch.diff.body:
            header = re.sub(
                r"^Last-Update:.*$",
                f"Last-Update: {datetime.date.today().isoformat()}",
                patch.diff.header_text,
                count=1,
                flags=re.M,
            )
            if not header.rstrip("\n").endswith("---"):
                header = header.rstrip("\n") + "\n---\n"
            updates[patch.diff.path] = (header + body).encode()
    for f in patch.overlay:
        cur = read_file(tree, f)
        src = patch.overlay_source(f)
        if cur is not None and cur != src.read_bytes():
            updates[src] = cur
    return updates
