"""Apply patches: NAME... adds them to what the tree carries; --all applies every patch; --set EXPR (a preset,
or an expression such as full-oea_topk) and --patches A,B make the tree carry exactly that set. Patches a chosen
one requires are added too. One transaction."""

from __future__ import annotations

from .. import api
from ._common import add_force, add_selection, report

NAME = "apply"
HELP = "apply patches (NAME..., --all, --set EXPR or --patches A,B)"


def add_arguments(p) -> None:
    add_selection(p)
    add_force(p)


def run(ctx, args) -> int:
    result = api.apply(
        *args.names,
        all=args.all,
        expr=args.preset,
        patches=args.patches,
        force=args.force,
        ignore_hardware=args.ignore_hardware,
        context=ctx,
    )
    report(result, "applied")
    return 0
