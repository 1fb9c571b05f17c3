"""Pieces several commands share: choosing patches on the command line, and reporting a switch."""
from __future__ import annotations

import argparse
import sys

from ..context import Context
from ..errors import BadInput
from ..fingerprint import short
from ..hardware import gate_fails
from ..switch import Outcome


def add_selection(p: argparse.ArgumentParser, *, allow_all: bool = True, allow_set: bool = True) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="patch names")
    if allow_all:
        p.add_argument("--all", action="store_true", help="every patch of the manifest")
    if allow_set:
        p.add_argument("--set", dest="preset", metavar="PRESET", help="a preset from the manifest")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="overwrite files edited by hand (they are saved to a backup first, and the path is printed)")
    p.add_argument("--ignore-hardware", action="store_true", help="apply patches whose hardware gate fails here")


def selected(ctx: Context, args, *, verb: str) -> tuple[str, ...]:
    chosen = [bool(args.names), bool(getattr(args, "all", False)), bool(getattr(args, "preset", None))]
    if sum(chosen) != 1:
        raise BadInput(f"{verb}: name patches, or give exactly one of --all / --set PRESET",
                       hint=f"e.g. `python apply.py {verb} deepseek_v2` (see `python apply.py status`)")
    m = ctx.manifest
    if getattr(args, "preset", None):
        return m.preset(args.preset)
    if getattr(args, "all", False):
        return tuple(p.name for p in m.patches)
    names = []
    for raw in args.names:
        names.extend(n for n in raw.split(",") if n)
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
        print(f"{verb_done}: {len(outcome.written)} file(s) written; now carrying "
              f"{len(outcome.target)} patch(es), fingerprint {short(outcome.fingerprint)}")
