"""Revert patches: their files go back to exactly what they were before (byte for byte), other patches on the
same files stay. Refuses files edited by hand since (drift) unless --force, which saves them first."""

from __future__ import annotations

from ..errors import BadInput
from ..manifest import UpstreamedPatch
from ._common import add_force, add_selection, change_tree, report, selected

NAME = "revert"
HELP = "revert patches (NAME... or --all)"


def add_arguments(p) -> None:
    add_selection(p, allow_set=False)
    add_force(p)


def target(m, args, names: tuple[str, ...], state) -> tuple[str, ...]:
    for n in names:
        if n not in state.applied and not isinstance(m.patch(n), UpstreamedPatch) and not getattr(args, "all", False):
            print(f"not applied: {n}")
    remaining = tuple(n for n in state.applied if n not in names)
    for n in remaining:
        needs = [r for r in m.patch(n).requires if r in names]
        if needs:
            raise BadInput(
                f"cannot revert {', '.join(needs)}: {n} requires it",
                hint=f"revert {n} too: `python apply.py revert {n} {' '.join(needs)}`",
            )
    return remaining


def run(ctx, args) -> int:
    names = selected(ctx, args, verb="revert")
    outcome = change_tree(
        ctx, lambda state: target(ctx.manifest, args, names, state), op="revert", force=args.force, ignore_hardware=True
    )
    report(outcome, "reverted")
    return 0
