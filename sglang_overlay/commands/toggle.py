"""Toggle one patch: revert it if the tree carries it, apply it if not (decided under the tree's lock)."""

from __future__ import annotations

from .. import api
from ._common import add_force, report

NAME = "toggle"
HELP = "apply a patch if it is off, revert it if it is on"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")
    add_force(p)


def run(ctx, args) -> int:
    result = api.toggle(args.name, force=args.force, ignore_hardware=args.ignore_hardware, context=ctx)
    report(result, "reverted" if result.reverted else "applied")
    return 0
