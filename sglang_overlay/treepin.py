"""A tree that holds another SGLang release than the manifest pins: which pins the project has, what the tree
carries, and the command that works from there.

Such a tree is what an upgrade under applied patches leaves (`pip install -U`, `git checkout` of another tag),
or the release tree of a pin that was since removed. The bare "this tree is X, the manifest pins Y" named no
way out: `--pin X` needs a pin for X, `rebase X` refuses a tree that carries patches, and revert refused the
version, so only `rm -rf` was left. `revert --all` now works from the tree's recorded state (recorded.py), and
every refusal says so, in its caller's words (the Context's Spelling): the API has no pin, rebase or fetch, so an
API caller is given those as command lines that name the project, and the revert as api.revert."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from .errors import VersionMismatch
from .tree import Tree, carried, embedded_path

if TYPE_CHECKING:
    from .context import Context


def other_release(ctx: Context) -> bool:
    """The tree does not hold the release its manifest pins (or cannot tell which it holds)."""
    return ctx.tree.version() != ctx.manifest.pin.version


def check_tree_version(ctx: Context) -> None:
    """Refuse a tree of another release (exit 2) naming the tree, its release, the project's pins and the fix."""
    if other_release(ctx):
        raise refusal(ctx)


def refusal(ctx: Context) -> VersionMismatch:
    tree, m = ctx.tree, ctx.manifest
    found, expected = tree.version(), m.pin.version
    if found is None:
        what = (
            f"{tree.root}: cannot tell which SGLang version this tree holds (no python/sglang/_version.py, no "
            f"dist-info, no tag); the manifest pins {expected}"
        )
        fixes = [f"use the pinned release ({ctx.spelling.command('fetch', m.path)}) or check out tag v{expected}"]
    else:
        what = f"{tree.root}: this tree is SGLang {found}, the manifest pins {expected}"
        fixes = [_fix_for(ctx, tree, found, expected)]
    what += f" ({m.path}); this project's pins: {', '.join(_pins(ctx))}"
    carries = carried(tree.state_dir)
    if carries:  # first: a rebase to the tree's release, the other way out, needs its tree to carry nothing
        what += f"; the tree carries {', '.join(carries)}"
        fixes.insert(0, _revert_hint(ctx, tree))
    return VersionMismatch(what, hint="; ".join(fixes))


def note(ctx: Context) -> str:
    """What `status` says above its rows for such a tree: they compare the tree with another release's set."""
    said = refusal(ctx)
    return f"note: {said}\n  {said.hint}"


def _pins(ctx: Context) -> list[str]:
    from .pins import pin_versions  # only for a tree of another release: `status` stays light

    return pin_versions(ctx.top_manifest)


def _fix_for(ctx: Context, tree: Tree, found: str, expected: str) -> str:
    sp, top = ctx.spelling, ctx.top_manifest.path
    if found in _pins(ctx):
        # an API caller's tree may be tree= or $SGLANG_OVERLAY_TREE, which a command line run elsewhere lacks
        embedded = sp.cli and tree.root == embedded_path(ctx.project_root, found).resolve()
        at = "" if embedded else f" --tree {tree.root if sp.cli else shlex.quote(str(tree.root))}"
        run = sp.command(f"--pin {found}{at} status", top, pin=False)
        return f"this project has a pin for {found}: {run} (and apply, revert, ...)"
    pin = "" if ctx.manifest.path == top else f"--pin {expected} "
    rebase, fetch = (sp.command(f"{pin}{what}", top, pin=False) for what in (f"rebase {found}", "fetch"))
    return (
        f"no pin of this project is for {found}: {rebase} makes one from the {expected} set; or use a {expected} "
        f"tree ({fetch} makes one)"
    )


def _revert_hint(ctx: Context, tree: Tree) -> str:
    run = ctx.spelling.run(
        f"--tree {tree.root} revert --all", f"api.revert(all=True, tree={str(tree.root)!r})", pin=False
    )
    return f"{run} takes out what the tree carries, from what it recorded (no pin of its release needed)"
