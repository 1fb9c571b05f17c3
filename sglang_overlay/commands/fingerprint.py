"""Print the patch-set fingerprint: a stable hash of the pin, the patches' content and the env profile.
Without a selection: the set the tree carries now."""

from __future__ import annotations

import json

from .. import api
from ._common import add_selection

NAME = "fingerprint"
HELP = "print the fingerprint of a patch set"


def add_arguments(p) -> None:
    add_selection(p, positional=False, set_help="the set: PRESET, a,b, PRESET+x, PRESET-x or none")
    p.add_argument("--env-profile", metavar="NAME")
    p.add_argument("--short", action="store_true", help="print the short form")
    p.add_argument("--json", action="store_true")


def run(ctx, args) -> int:
    fp = api.fingerprint(args.preset, patches=args.patches, all=args.all, env_profile=args.env_profile, context=ctx)
    if args.json:
        out = {"fingerprint": fp.value, "short": fp.short, "patches": list(fp.patches)}
        print(json.dumps(out | {"env_profile": fp.env_profile, "pin": fp.pin}))
    else:
        print(fp.short if args.short else fp.value)
    return 0
