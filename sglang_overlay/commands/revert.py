"""Revert patches: their files go back to exactly what they were before (byte for byte), other patches on the
same files stay. Refuses files edited by hand since (drift) unless --force, which saves them first."""

from __future__ import annotations

from .. import api
from ._common import add_force, add_selection, report

NAME = "revert"
HELP = "revert patches (NAME... or --all)"


def add_arguments(p) -> None:
    add_selection(p, allow_set=False)
    add_force(p)


def run(ctx, args) -> int:
    report(api.revert(*args.names, all=args.all, force=args.force, context=ctx), "reverted")
    return 0
