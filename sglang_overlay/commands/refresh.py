"""Capture hand edits of a patch's files back into patches/NAME.patch (or its overlay files), keeping the
DEP-3 header (Last-Update is set to today). Edits that belong to other applied patches stay theirs: patches
later in manifest order are stripped off the edited file before the new diff is taken."""
from __future__ import annotations

import datetime
import re
import sys

from ..compose import compose
from ..diffgen import make_diff
from ..errors import BadInput, Conflict
from ..manifest import load_manifest
from ..patchfile import parse_patch_file
from ..state import atomic_write
from ..switch import base_reader, read_file, switch
from ..transaction import Transaction

NAME = "refresh"
HELP = "write hand edits of a patch's files back into the patch"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")


def run(ctx, args) -> int:
    m, tree = ctx.manifest, ctx.tree
    patch = m.patch(args.name)
    txn = Transaction(tree)
    with txn.locked():
        state = txn.state()
    if patch.name not in state.applied:
        raise BadInput(f"{patch.name} is not applied, so there are no edits of it to capture",
                       hint=f"`python apply.py apply {patch.name}`, edit its files, then refresh")
    order = [p.name for p in m.ordered(state.applied)]
    before = m.ordered(order[: order.index(patch.name)])
    after = m.ordered(order[order.index(patch.name) + 1:])
    read = base_reader(tree, state)
    diff_files = list(patch.diff.files) if patch.diff else []
    base = {f: read(f) for f in {f for p in before for f in p.files} | set(diff_files)}
    old = compose(base, before).contents
    now = {f: read_file(tree, f) for f in diff_files}
    later = [p for p in after if set(p.files) & set(diff_files)]
    try:
        mine = compose(now, list(reversed(later)), reverse=True).contents if later else now
    except Conflict as e:
        raise Conflict(f"cannot separate {patch.name}'s edits from later patches on the same lines:\n{e}",
                       hint="revert the later patches, refresh, then apply them again")
    body = make_diff({f: old.get(f) for f in diff_files}, {f: mine.get(f) for f in diff_files})
    changed = 0
    if patch.diff is not None:
        if not body:
            raise BadInput(f"refreshing {patch.name} would leave an empty patch",
                           hint=f"revert it instead: `python apply.py revert {patch.name}`")
        if body.encode() != patch.diff.body:
            header = re.sub(r"^Last-Update:.*$", f"Last-Update: {datetime.date.today().isoformat()}",
                            patch.diff.header_text, count=1, flags=re.M)
            if not header.rstrip("\n").endswith("---"):
                header = header.rstrip("\n") + "\n---\n"
            atomic_write(patch.diff.path, (header + body).encode())
            parse_patch_file(patch.diff.path)  # what we wrote must read back
            changed += 1
    for f in patch.overlay:
        cur = read_file(tree, f)
        src = patch.overlay_source(f)
        if cur is not None and cur != src.read_bytes():
            atomic_write(src, cur)
            changed += 1
    if not changed:
        print(f"{patch.name}: no hand edits to capture")
        return 0
    # Re-read the manifest so the state records the new patch content, and rewrite the identity module.
    outcome = switch(tree, load_manifest(ctx.manifest_path), state.applied, op="refresh")
    print(f"refreshed {patch.name}: {changed} file(s) updated; fingerprint now {outcome.fingerprint[:12]}")
    print(f"  review it: git diff -- {patch.diff.path if patch.diff else 'overlay/'}", file=sys.stderr)
    return 0
