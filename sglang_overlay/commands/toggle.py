"""Toggle one patch: revert it if the tree carries it, apply it if not (decided under the tree's lock)."""

from __future__ import annotations

import argparse

from . import apply, revert
from ._common import add_force, change_tree, report

NAME = "toggle"
HELP = "apply a patch if it is off, revert it if it is on"


def add_arguments(p) -> None:
    p.add_argument("name", metavar="NAME")
    add_force(p)


def run(ctx, args) -> int:
    ctx.manifest.patch(args.name)
    sub = argparse.Namespace(
        names=[args.name], all=False, preset=None, force=args.force, ignore_hardware=args.ignore_hardware
    )
    names = apply.chosen(ctx, sub)
    was_on = []

    def decide(state) -> tuple[str, ...]:
        was_on.append(args.name in state.applied)
        if was_on[-1]:
            return revert.target(ctx.manifest, sub, names, state)
        return apply.target(sub, names, state)

    # Gates are checked for added patches only, so a revert is never refused for hardware.
    outcome = change_tree(ctx, decide, op="toggle", force=args.force, ignore_hardware=args.ignore_hardware)
    report(outcome, "reverted" if was_on[-1] else "applied")
    return 0
