"""Toggle one patch: revert it if the tree carries it, apply it if not."""
from __future__ import annotations

import argparse

from ..transaction import Transaction
from . import apply, revert
from ._common import add_force

NAME = "toggle"
HELP = "apply a patch if it is off, revert it if it is on"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")
    add_force(p)


def run(ctx, args) -> int:
    ctx.manifest.patch(args.name)
    on = args.name in Transaction(ctx.tree).state().applied
    sub = argparse.Namespace(names=[args.name], all=False, preset=None, force=args.force,
                             ignore_hardware=args.ignore_hardware)
    return (revert if on else apply).run(ctx, sub)
