"""Pieces several commands share: choosing patches on the command line, and reporting a switch."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from ..api import SwitchResult, open_tree
from ..context import Context
from ..fingerprint import short
from ..patchset import PatchSet, from_options

__all__ = ["add_force", "add_selection", "open_tree", "report", "selection", "tell"]


def add_selection(
    p: argparse.ArgumentParser,
    *,
    positional: bool = True,
    allow_all: bool = True,
    allow_set: bool = True,
    set_help: str = "a set expression: PRESET, a,b, PRESET+x, PRESET-x or none",
) -> None:
    """The options of the one patch-set grammar (patchset.py) that this command takes."""
    if positional:
        p.add_argument("names", nargs="*", metavar="NAME", help="patch names")
    if allow_all:
        p.add_argument("--all", action="store_true", help="every patch of the manifest")
    if allow_set:
        p.add_argument("--set", dest="preset", metavar="EXPR", help=set_help)
        p.add_argument("--patches", metavar="A,B,...", help="exactly these patches (comma-separated)")


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite files edited by hand (they are saved to a backup first, and the path is printed)",
    )
    p.add_argument("--ignore-hardware", action="store_true", help="apply patches whose hardware gate fails here")


def selection(ctx: Context, args, *, verb: str, close: bool = True) -> PatchSet | None:
    """The set the command line names (None: none was named), by the one grammar."""
    return from_options(
        ctx.manifest,
        names=getattr(args, "names", None) or (),
        all=bool(getattr(args, "all", False)),
        preset=getattr(args, "preset", None),
        patches=getattr(args, "patches", None),
        verb=verb,
        close=close,
    )


def tell(notes: Iterable[str]) -> None:
    """A switch's notes on what it did to files (Outcome.notes, SwitchResult.file_notes): on stderr, where they were
    printed while the switch ran, before the summary."""
    for note in notes:
        print(f"sglang-overlay: {note}", file=sys.stderr)


def report(result: SwitchResult, verb_done: str) -> None:
    tell(result.file_notes)
    for n, why in result.left_out:
        print(f"sglang-overlay: leaving out {n}: {why}", file=sys.stderr)
    for note in result.notes:
        print(note)
    for o in result.offsets:
        print(f"offset   {o}")
    if result.applied:
        print(f"applied  {', '.join(result.applied)}")
    if result.reverted:
        print(f"reverted {', '.join(result.reverted)}")
    if not result.applied and not result.reverted and not result.written:
        print(f"nothing to do: the tree already carries {', '.join(result.carried) or 'no patches'}")
    else:
        print(
            f"{verb_done}: {len(result.written)} file(s) written; now carrying "
            f"{len(result.carried)} patch(es), fingerprint {short(result.fingerprint)}"
        )
