"""Apply patches: NAME... adds them to what the tree carries; --all applies every patch; --set PRESET makes
the tree carry exactly that preset. Patches a chosen one requires are added too. One transaction."""

from __future__ import annotations

from ..manifest import UpstreamedPatch
from ._common import add_force, add_selection, change_tree, report, selected, without_unavailable

NAME = "apply"
HELP = "apply patches (NAME..., --all, or --set PRESET)"


def add_arguments(p) -> None:
    add_selection(p)
    add_force(p)


def chosen(ctx, args) -> tuple[str, ...]:
    """What was asked for (validated before the lock); `target` turns it into the set to carry."""
    names = selected(ctx, args, verb="apply")
    for n in names:
        p = ctx.manifest.patch(n)
        if isinstance(p, UpstreamedPatch):
            print(f"upstream {n}: {p.upstream.describe()}; nothing to apply")
    if getattr(args, "all", False):
        names = without_unavailable(ctx, names, args.ignore_hardware)
    return names


def target(args, names: tuple[str, ...], state) -> tuple[str, ...]:
    if getattr(args, "preset", None):
        return names
    for n in names:
        if n in state.applied:
            print(f"already applied: {n}")
    return tuple(state.applied) + names


def run(ctx, args) -> int:
    names = chosen(ctx, args)
    outcome = change_tree(
        ctx,
        lambda state: target(args, names, state),
        op="apply",
        force=args.force,
        ignore_hardware=args.ignore_hardware,
    )
    report(outcome, "applied")
    return 0
