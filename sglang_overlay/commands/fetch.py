"""Make the embedded default tree: the pinned SGLang release's source from its PyPI wheel, unpacked into a
local git repository laid out like upstream (python/sglang/...), one pristine commit tagged with the version.
Cached: a second fetch is instant."""

from __future__ import annotations

from ..fetch import ensure_embedded
from ..pathlen import path_arg

NAME = "fetch"
HELP = "download the pinned SGLang release and make the embedded tree"


def add_arguments(p) -> None:
    p.add_argument(
        "--wheel", type=path_arg, help="use this local copy of the pinned wheel (offline hosts); its sha256 is checked"
    )


def run(ctx, args) -> int:
    m = ctx.manifest
    tree, created = ensure_embedded(ctx.project_root, m.pin, args.wheel)
    print(f"{'fetched' if created else 'cached '} {m.pin.package} {m.pin.version} -> {tree.root}")
    return 0
