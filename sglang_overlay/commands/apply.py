"""Apply patches: NAME... adds them to what the tree carries; --all applies every patch; --set PRESET makes
the tree carry exactly that preset. Patches a chosen one requires are added too. One transaction."""
from __future__ import annotations

from ..switch import switch
from ..transaction import Transaction
from ._common import add_force, add_selection, report, selected, without_unavailable

NAME = "apply"
HELP = "apply patches (NAME..., --all, or --set PRESET)"


def add_arguments(p) -> None:
    add_selection(p)
    add_force(p)


def run(ctx, args) -> int:
    names = selected(ctx, args, verb="apply")
    m = ctx.manifest
    for n in names:
        p = m.patch(n)
        if not p.applies_change:
            print(f"upstream {n}: {p.upstream.describe()}; nothing to apply")
    if args.all:
        names = without_unavailable(ctx, names, args.ignore_hardware)
    if args.preset:
        target = names
    else:
        current = Transaction(ctx.tree).state().applied
        for n in names:
            if n in current:
                print(f"already applied: {n}")
        target = tuple(current) + tuple(names)
    outcome = switch(ctx.tree, m, target, op="apply", force=args.force, ignore_hardware=args.ignore_hardware)
    report(outcome, "applied")
    return 0
