"""Pieces several commands share: choosing patches on the command line, and reporting a switch."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..context import Context
from ..errors import BadInput
from ..fingerprint import short
from ..fsio import tmp_path, unlink_quietly
from ..hardware import gate_fails
from ..state import State
from ..switch import Outcome, switch
from ..transaction import Transaction


def add_selection(p: argparse.ArgumentParser, *, allow_all: bool = True, allow_set: bool = True) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="patch names")
    if allow_all:
        p.add_argument("--all", action="store_true", help="every patch of the manifest")
    if allow_set:
        p.add_argument("--set", dest="preset", metavar="PRESET", help="a preset from the manifest")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite files edited by hand (they are saved to a backup first, and the path is printed)",
    )
    p.add_argument("--ignore-hardware", action="store_true", help="apply patches whose hardware gate fails here")


def selected(ctx: Context, args, *, verb: str) -> tuple[str, ...]:
    chosen = [bool(args.names), bool(getattr(args, "all", False)), bool(getattr(args, "preset", None))]
    if sum(chosen) != 1:
        raise BadInput(
            f"{verb}: name patches, or give exactly one of --all / --set PRESET",
            hint=f"e.g. `python apply.py {verb} deepseek_v2` (see `python apply.py status`)",
        )
    m = ctx.manifest
    if getattr(args, "preset", None):
        return m.preset(args.preset)
    if getattr(args, "all", False):
        return tuple(p.name for p in m.patches)
    names = []
    for raw in args.names:
        parts = raw.split(",")
        if not all(parts):
            raise BadInput(
                f"{verb}: {raw!r} holds an empty patch name (an unset shell variable?)",
                hint=f"name the patches, e.g. `python apply.py {verb} deepseek_v2,oea_topk`",
            )
        names.extend(parts)
    for n in names:
        m.patch(n)
    return tuple(dict.fromkeys(names))


def without_unavailable(ctx: Context, names, ignore_hardware: bool) -> tuple[str, ...]:
    """--all on a machine where some gates fail: leave those out, saying so, instead of refusing everything."""
    if ignore_hardware:
        return tuple(names)
    keep = []
    for n in names:
        why = gate_fails(ctx.manifest.patch(n).cuda_capability)
        if why:
            print(f"sglang-overlay: leaving out {n}: {why}", file=sys.stderr)
        else:
            keep.append(n)
    return tuple(keep)


@contextmanager
def open_tree(ctx: Context) -> Iterator[Transaction]:
    """The tree locked and rolled back to a finished state; also removes the temp files a killed `refresh` can
    leave beside this manifest's patch and overlay files (they are outside the tree's journal)."""
    with Transaction.open(ctx.tree) as txn:
        for p in ctx.manifest.changes(ctx.manifest.names):
            for src in ([p.diff.path] if p.diff is not None else []) + [p.overlay_source(f) for f in p.overlay]:
                if os.path.lexists(tmp_path(src)):
                    unlink_quietly(tmp_path(src))
        yield txn


def change_tree(
    ctx: Context,
    decide: Callable[[State], tuple[str, ...]],
    *,
    op: str,
    force: bool = False,
    ignore_hardware: bool = False,
) -> Outcome:
    """Lock the tree, roll back what a killed command left, then decide on the state as it is now, and switch."""
    ctx.tree.check_version(ctx.manifest.pin.version)
    with open_tree(ctx) as txn:
        return switch(txn, ctx.manifest, decide(txn.state), op=op, force=force, ignore_hardware=ignore_hardware)


def report(outcome: Outcome, verb_done: str) -> None:
    for o in outcome.offsets:
        print(f"offset   {o}")
    if outcome.added:
        print(f"applied  {', '.join(outcome.added)}")
    if outcome.removed:
        print(f"reverted {', '.join(outcome.removed)}")
    if not outcome.added and not outcome.removed and not outcome.written:
        print(f"nothing to do: the tree already carries {', '.join(outcome.target) or 'no patches'}")
    else:
        print(
            f"{verb_done}: {len(outcome.written)} file(s) written; now carrying "
            f"{len(outcome.target)} patch(es), fingerprint {short(outcome.fingerprint)}"
        )
