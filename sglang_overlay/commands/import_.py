"""Import the tree's local edits as named patches (quilt's `import`, StGit's `import`): one patch per changed
file, or `--group NAME=FILE,...`; each with a DEP-3 header and a manifest entry, new files carried whole under
overlay/; the tree is then recorded as carrying them, so `status` lists them and `check` proves them."""

from __future__ import annotations

import sys

from .. import api
from ..adopt import parse_groups
from ..fingerprint import short

NAME = "import"
HELP = "turn the tree's local edits into named patches (one per file, or --group NAME=FILE,...)"


def add_arguments(p) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="import only these changed files")
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=FILE,...",
        help="one patch NAME for these files (repeatable); other changed files get a patch each",
    )


def run(ctx, args) -> int:
    groups = dict(parse_groups(args.group))
    result = api.import_edits(*args.files, groups=groups, context=ctx)
    for n in result.finished:
        print(f"recorded {n} (a killed import had written it)")
    for p in result.patches:
        what = f"patches/{p.name}.patch" if p.kind == "diff" else "overlay/"
        extra = f" + overlay {', '.join(p.overlay)}" if p.overlay and p.kind == "diff" else ""
        print(f"imported {p.name:<20} {p.kind:<8} {', '.join(p.files)}  ({what}{extra})")
    if not result.patches and not result.finished:
        print("nothing to import: the tree has no edits beyond the patches it carries")
        return 0
    print(
        f"now carrying {len(result.carried)} patch(es), fingerprint {short(result.fingerprint)}; "
        f"entries added to {result.manifest}"
    )
    print("  review them: git diff; describe each in its DEP-3 header and manifest entry", file=sys.stderr)
    return 0
