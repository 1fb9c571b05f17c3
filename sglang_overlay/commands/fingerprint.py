"""Print the patch-set fingerprint: a stable hash of the pin, the patches' content and the env profile.
Without a selection: the set the tree carries now."""

from __future__ import annotations

import json

from ..fingerprint import fingerprint, short
from ..transaction import reading

NAME = "fingerprint"
HELP = "print the fingerprint of a patch set"


def add_arguments(p) -> None:
    p.add_argument("--set", dest="preset", metavar="PRESET")
    p.add_argument("--patches", metavar="A,B,...", help="comma-separated patch names")
    p.add_argument("--env-profile", metavar="NAME")
    p.add_argument("--short", action="store_true", help="print the short form")
    p.add_argument("--json", action="store_true")


def run(ctx, args) -> int:
    m = ctx.manifest
    if args.preset:
        names = m.closure(m.preset(args.preset))
    elif args.patches is not None:
        names = m.closure([n for n in args.patches.split(",") if n])
    else:
        with reading(ctx.tree) as view:
            names = view.state.applied
    profile = m.env_profile(args.env_profile) if args.env_profile else None
    fp = fingerprint(m, names, profile)
    if args.json:
        print(
            json.dumps(
                {
                    "fingerprint": fp,
                    "short": short(fp),
                    "patches": [p.name for p in m.changes(names)],
                    "env_profile": args.env_profile,
                    "pin": m.pin.version,
                }
            )
        )
    else:
        print(short(fp) if args.short else fp)
    return 0
