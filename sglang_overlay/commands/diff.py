"""Show what one patch changes in the tree as it is now: the difference between the tree with and without it,
other applied patches included (their order is the manifest's)."""

from __future__ import annotations

import sys

from ..compose import compose
from ..diffgen import make_diff
from ..manifest import UpstreamedPatch
from ..treeread import base_reader, reading

NAME = "diff"
HELP = "show what a patch changes in the tree now"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")


def run(ctx, args) -> int:
    m = ctx.manifest
    patch = m.patch(args.name)
    if isinstance(patch, UpstreamedPatch):
        print(f"{patch.name} is upstream ({patch.upstream.describe()}): it changes nothing", file=sys.stderr)
        return 0
    with reading(ctx.tree) as view:
        return _show(m, ctx.tree, view, patch)


def _show(m, tree, view, patch) -> int:
    state = view.state
    m.check_carried(state.applied)
    applied = [n for n in state.applied if n != patch.name]
    files = sorted(set(patch.files))
    without = m.changes(applied)
    with_it = m.changes(applied + [patch.name])
    read = base_reader(tree, state, view.store, view.rolled_back)
    needed = sorted({f for p in with_it for f in p.files})
    base = {f: read(f) for f in needed}
    before = compose(base, without).contents
    after = compose(base, with_it).contents
    executable = patch.diff.executable if patch.diff is not None else ()
    sys.stdout.write(make_diff({f: before[f] for f in files}, {f: after[f] for f in files}, executable=executable))
    if patch.name not in state.applied:
        print(f"({patch.name} is not applied: this is what applying it would change)", file=sys.stderr)
    return 0
