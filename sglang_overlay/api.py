"""The Python API: what the commands do, as functions that return frozen results (docs/api.md).

    from sglang_overlay import api
    api.apply("deepseek_v2", project="path/to/project", tree="path/to/sglang")
    print(api.status(project="path/to/project", tree="path/to/sglang").applied)

Every function finds the project as the command line does (`project=` a directory, `manifest=` a file, else the
nearest manifest.yaml from the current directory upward) and the tree likewise (`tree=`, else
$SGLANG_OVERLAY_TREE, else the project's embedded tree), made absolute when the Context is made (locate, or the
call's start), as $SGLANG_OVERLAY_CACHE is. Sets are named in the one grammar of patchset.py.
Failures raise the package's OverlayError hierarchy (errors.py) with the message and hint the CLI prints, in the
API's words (expr=, tree=, force=True where the CLI says --set, --tree, --force: the Context's Spelling, spelling.py);
nothing here prints or exits. The CLI commands are thin callers of these functions (they pass `context=`); `status`
calls treestatus.read, as api.status does, and imports nothing of the rest.
Heavy modules are imported inside the functions that need them, so `import sglang_overlay.api` stays cheap.
"""

from __future__ import annotations

import contextvars
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import apiargs, cachedir
from .context import Context
from .patchset import from_options
from .project import manifest_path
from .record import Record
from .spelling import CLI, Spelling, api_spelling
from .tree import TREE_ENV
from .treestatus import PatchStatus, Status  # noqa: F401  (api.PatchStatus: the rows of api.Status)

if TYPE_CHECKING:  # the heavy modules stay unimported until a function needs them
    from .manifest import Manifest
    from .patchset import PatchSet
    from .state import State
    from .switch import Outcome

PathLike = str | os.PathLike[str]
_P = ParamSpec("_P")
_R = TypeVar("_R")


def locate(
    project: PathLike | None = None, *, manifest: PathLike | None = None, tree: PathLike | None = None
) -> Context:
    """The project and tree to work on, found as the command line finds them."""
    return _locate("locate", project, manifest, tree)


def _locate(fn: str, project: PathLike | None, manifest: PathLike | None, tree: PathLike | None) -> Context:
    for arg, value in (("project", project), ("manifest", manifest), ("tree", tree)):
        apiargs.path(fn, arg, value)
    # os.fspath, not str: a PathLike that is not a Path (os.DirEntry) prints as its repr
    said = api_spelling(fn)
    found = manifest_path(
        manifest=None if manifest is None else os.fspath(manifest),
        project=None if project is None else os.fspath(project),
        spelling=said,
    )
    # Absolute now, so that a Context kept by the caller means the same after a chdir; $SGLANG_OVERLAY_TREE and
    # $SGLANG_OVERLAY_CACHE too, read now and not at first use. Not resolved: a link stays the path asked for, resolved later where the CLI's
    # paths are too (load_manifest, tree.classify).
    return Context(
        manifest_path=found.absolute(),
        tree_arg=_absolute(tree),
        tree_env=_absolute(os.environ.get(TREE_ENV) or None),
        cache_env=_absolute(os.environ.get(cachedir.CACHE_ENV) or None),
        spelling=said,
    )


def _absolute(path: PathLike | None) -> str | None:
    """`path` (an argument, or a variable of the environment) absolute against the cwd of now."""
    if path is None:
        return None
    text = os.fspath(path)
    if not text.strip():  # refused where it is used (tree.locate): made absolute, it would be the cwd
        return text
    try:
        return str(Path(text).expanduser().absolute())
    except RuntimeError:  # a ~ with no home to expand to: kept as given, refused where it is used (tree.locate)
        return text


def _ctx(
    fn: str, c: Context | None, project: PathLike | None, manifest: PathLike | None, tree: PathLike | None
) -> Context:
    apiargs.context(fn, c)
    given = [arg for arg, value in (("project", project), ("manifest", manifest), ("tree", tree)) if value is not None]
    if c is None:
        c = _locate(fn, project, manifest, tree)
    elif given:  # the context already names its project and tree: the other would be ignored, and a change go astray
        from .errors import BadInput

        raise BadInput(
            f"api.{fn}: context= and {', '.join(a + '=' for a in given)} both say where to work: give one",
            hint=f"pass api.locate({', '.join(a + '=...' for a in given)}) as context=, or leave context= out",
        )
    cachedir.hold(c.cache_env)  # the cache this context was made with, for this call (_own_call) only
    return c


def _own_call(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """`fn` runs in a copy of its caller's contextvars context: the cache its Context holds (cachedir.hold, in
    _ctx) is the call's, not left behind for the caller's next call."""

    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return contextvars.copy_context().run(fn, *args, **kwargs)

    return call


def _spelling(ctx: Context, fn: str) -> Spelling:
    """The words of the caller of `fn`: a context the command line made keeps its options."""
    return CLI if ctx.spelling.cli else api_spelling(fn)


# -- results -----------------------------------------------------------------------------------------------------
class SwitchResult(Record):
    """What an apply, revert or toggle did. `notes`: what the CLI prints before its summary ("already applied:
    x"); `left_out`: (patch, why) for patches `--all` left out on this hardware."""

    carried: tuple[str, ...]
    applied: tuple[str, ...]
    reverted: tuple[str, ...]
    written: tuple[str, ...]
    offsets: tuple[str, ...]
    fingerprint: str | None
    backup_dir: Path | None
    notes: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    # what the switch did to files beyond their bytes: an exec bit set or cleared as a patch's diff says, and with
    # force=True the hand-edited files saved to backup_dir or found deleted (the CLI prints these on stderr)
    file_notes: tuple[str, ...] = ()


class CheckItem(Record):
    what: str
    subject: str
    ok: bool
    detail: str = ""


class CheckResult(Record):
    package: str
    version: str
    ok: bool
    items: tuple[CheckItem, ...]
    offsets: tuple[str, ...]
    seconds: float

    @property
    def failures(self) -> tuple[CheckItem, ...]:
        return tuple(i for i in self.items if not i.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "ok": self.ok,
            "status": "pass" if self.ok else "fail",  # `check --all-pins --json`: "error" for a pin not checked
            "items": [vars(i) for i in self.items],
            "offsets": list(self.offsets),
            "failures": len(self.failures),
            "seconds": round(self.seconds, 3),
            # what `check --all-pins --json` says of a pin it could not check (status "error"): every entry has one
            # key set, so a dashboard reads a pin not checked as it reads the others
            "error": None,
            "hint": None,
        }


class Fingerprint(Record):
    value: str
    short: str
    patches: tuple[str, ...]
    env_profile: str | None
    pin: str


# -- the tree, locked ------------------------------------------------------------------------------------------
@contextmanager
def open_tree(ctx: Context) -> Iterator[Any]:
    """The tree locked and rolled back to a finished state; also removes the temp files a killed `refresh` can
    leave beside this manifest's patch and overlay files (they are outside the tree's journal)."""
    from .fsio import tmp_path, unlink_quietly
    from .transaction import Transaction

    with Transaction.open(ctx.tree, spelling=ctx.spelling) as txn:
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
    from .switch import switch
    from .treepin import check_tree_version

    check_tree_version(ctx)
    with open_tree(ctx) as txn:
        return switch(
            txn,
            ctx.manifest,
            decide(txn.state),
            op=op,
            force=force,
            ignore_hardware=ignore_hardware,
            spelling=_spelling(ctx, op),
        )


def said_after(ctx: Context, outcome: Outcome, notes: list[str]) -> list[str]:
    """`notes` and what is true of the tree only once it carries the outcome's set (launch says it too)."""
    from .distinfo import stale_version

    stale = stale_version(ctx.tree, ctx.manifest, outcome.target)
    return notes + [stale] if stale else notes


def _result(outcome: Outcome, notes: list[str], left_out: Mapping[str, str] | None = None) -> SwitchResult:
    return SwitchResult(
        carried=tuple(outcome.target),
        applied=tuple(outcome.added),
        reverted=tuple(outcome.removed),
        written=tuple(outcome.written),
        offsets=tuple(str(o) for o in outcome.offsets),
        fingerprint=outcome.fingerprint,
        backup_dir=outcome.backup_dir,
        notes=tuple(notes),
        left_out=tuple((left_out or {}).items()),
        file_notes=outcome.notes,
    )


# -- the commands ----------------------------------------------------------------------------------------------
@_own_call
def status(
    project: PathLike | None = None,
    *,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> Status:
    """What the tree carries and the state of every patch (read-only)."""
    from .treestatus import read

    return read(_ctx("status", context, project, manifest, tree))


def _apply_target(
    m: Manifest, exact: bool, names: tuple[str, ...], state: State, notes: list[str], sp: Spelling
) -> tuple[str, ...]:
    if exact:  # the set replaces what the tree carries, an entry the manifest lost included
        return names
    notes.extend(f"already applied: {n}" for n in names if n in state.applied)
    m.check_carried(state.applied, sp)
    return tuple(state.applied) + names


def _revert_target(
    m: Manifest, names: tuple[str, ...], every: bool, state: State, notes: list[str], sp: Spelling
) -> tuple[str, ...]:
    from .errors import BadInput
    from .manifest import UpstreamedPatch

    notes.extend(
        f"not applied: {n}"
        for n in names
        if n not in state.applied and not isinstance(m.patch(n), UpstreamedPatch) and not every
    )
    remaining = () if every else tuple(n for n in state.applied if n not in names)
    m.check_carried(remaining, sp)
    for n in remaining:
        needs = [r for r in m.patch(n).requires if r in names]
        if needs:
            raise BadInput(
                f"cannot revert {', '.join(needs)}: {n} requires it",
                hint=f"revert {n} too: {_revert_call(sp, (n, *needs))}",
            )
    return remaining


def _revert_call(sp: Spelling, names: tuple[str, ...]) -> str:
    from .progname import prog

    if sp.cli:
        return f"`{prog()} revert {' '.join(names)}`"
    return f"api.revert({', '.join(repr(n) for n in names)})"


def _apply_names(
    ctx: Context, chosen: PatchSet, every: bool, ignore_hardware: bool, notes: list[str]
) -> tuple[tuple[str, ...], Mapping[str, str]]:
    from .hardware import blocked
    from .manifest import UpstreamedPatch

    names = chosen.patches
    for n in names:
        p = ctx.manifest.patch(n)
        if isinstance(p, UpstreamedPatch):
            notes.append(f"upstream {n}: {p.upstream.describe()}; nothing to apply")
    left_out = {} if not every or ignore_hardware else blocked(ctx.manifest.patch(n) for n in names)
    return tuple(n for n in names if n not in left_out), left_out


def _need(chosen: PatchSet | None, verb: str, sp: Spelling) -> PatchSet:
    from .errors import BadInput
    from .progname import prog

    if chosen is None and sp.cli:
        raise BadInput(
            f"{verb}: name patches, or give one of --all / --set EXPR / --patches A,B",
            hint=f"e.g. `{prog()} {verb} deepseek_v2` (see `{prog()} status`)",
        )
    if chosen is None:
        sets = "all=True" if verb == "revert" else "all=True, expr= or patches="
        raise BadInput(
            f"api.{verb}: name patches, or pass {sets}",
            hint=f"e.g. api.{verb}('deepseek_v2') (see api.status().patches)",
        )
    return chosen


@_own_call
def apply(
    *names: str,
    all: bool = False,
    expr: str | None = None,
    patches: str | None = None,
    force: bool = False,
    ignore_hardware: bool = False,
    project: PathLike | None = None,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> SwitchResult:
    """`apply NAME...` adds patches (and what they require); `all=True` adds every patch (leaving out those whose
    hardware gate fails here); `expr="full-oea_topk"` or `patches="a,b"` makes the tree carry exactly that set."""
    apiargs.names("apply", names)
    for arg, text in (("expr", expr), ("patches", patches)):
        apiargs.text("apply", arg, text)
    for arg, on in (("all", all), ("force", force), ("ignore_hardware", ignore_hardware)):
        apiargs.flag("apply", arg, on)
    ctx = _ctx("apply", context, project, manifest, tree)
    sp = _spelling(ctx, "apply")
    chosen = _need(
        from_options(
            ctx.manifest, names=names, all=all, preset=expr, patches=patches, verb="apply", close=False, spelling=sp
        ),
        "apply",
        sp,
    )
    notes: list[str] = []
    wanted, left_out = _apply_names(ctx, chosen, all, ignore_hardware, notes)
    exact = expr is not None or patches is not None
    outcome = change_tree(
        ctx,
        lambda state: _apply_target(ctx.manifest, exact, wanted, state, notes, sp),
        op="apply",
        force=force,
        ignore_hardware=ignore_hardware,
    )
    return _result(outcome, said_after(ctx, outcome, notes), left_out)


@_own_call
def revert(
    *names: str,
    all: bool = False,
    force: bool = False,
    project: PathLike | None = None,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> SwitchResult:
    """Revert the named patches (or `all=True`): their files go back byte for byte; refuses hand edits unless
    `force=True` (which saves them to a backup first). `all=True` on a tree of another release than the manifest
    pins works from the tree's recorded state (recorded.py): the way out when no pin of its release is left."""
    from .treepin import other_release

    apiargs.names("revert", names)
    for arg, on in (("all", all), ("force", force)):
        apiargs.flag("revert", arg, on)
    ctx = _ctx("revert", context, project, manifest, tree)
    sp = _spelling(ctx, "revert")
    chosen = _need(
        from_options(ctx.manifest, names=names, all=all, verb="revert", close=False, spelling=sp), "revert", sp
    )
    if all and other_release(ctx):
        from .recorded import revert_recorded

        with open_tree(ctx) as txn:
            recorded, said = revert_recorded(txn, force=force, spelling=sp)
        return _result(recorded, said)
    notes: list[str] = []
    outcome = change_tree(
        ctx,
        lambda state: _revert_target(ctx.manifest, chosen.patches, all, state, notes, sp),
        op="revert",
        force=force,
        ignore_hardware=True,
    )
    return _result(outcome, said_after(ctx, outcome, notes))


@_own_call
def toggle(
    name: str,
    *,
    force: bool = False,
    ignore_hardware: bool = False,
    project: PathLike | None = None,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> SwitchResult:
    """Revert `name` if the tree carries it, apply it if not (decided under the tree's lock)."""
    apiargs.name("toggle", name)
    for arg, on in (("force", force), ("ignore_hardware", ignore_hardware)):
        apiargs.flag("toggle", arg, on)
    ctx = _ctx("toggle", context, project, manifest, tree)
    ctx.manifest.patch(name)
    sp = _spelling(ctx, "toggle")
    chosen = _need(from_options(ctx.manifest, names=[name], verb="toggle", close=False, spelling=sp), "toggle", sp)
    notes: list[str] = []
    wanted, _ = _apply_names(ctx, chosen, False, ignore_hardware, notes)

    def decide(state: State) -> tuple[str, ...]:
        if name in state.applied:
            return _revert_target(ctx.manifest, chosen.patches, False, state, notes, sp)
        return _apply_target(ctx.manifest, False, wanted, state, notes, sp)

    # Gates are checked for added patches only, so a revert is never refused for hardware.
    outcome = change_tree(ctx, decide, op="toggle", force=force, ignore_hardware=ignore_hardware)
    return _result(outcome, said_after(ctx, outcome, notes))


@_own_call
def check(
    project: PathLike | None = None, *, manifest: PathLike | None = None, context: Context | None = None
) -> CheckResult:
    """Prove the patch set against the pristine pinned release (alone, full, leave-one-out, pairs, order, compile,
    upstreamed proofs, overlay collisions). Returns the result; `ok` is False on any failure (nothing raised)."""
    from .compat import check_pin
    from .fetch import WheelSource, pinned_wheel

    ctx = _ctx("check", context, project, manifest, None)
    m = ctx.manifest
    source = WheelSource(pinned_wheel(m.pin))
    t0 = time.monotonic()
    rep = check_pin(m, source.read, m.pin.version)
    return CheckResult(
        package=m.pin.package,
        version=m.pin.version,
        ok=rep.ok,
        items=tuple(CheckItem(i.what, i.subject, i.ok, i.detail) for i in rep.items),
        offsets=tuple(rep.offsets),
        seconds=time.monotonic() - t0,
    )


class ImportedPatch(Record):
    name: str
    kind: str  # diff | overlay
    files: tuple[str, ...]
    overlay: tuple[str, ...]  # the new files it carries whole under overlay/


class ImportResult(Record):
    """What import_edits did: the new manifest entries (`patches`), the entries a killed import had written and
    this one recorded as applied (`finished`), and the set the tree carries now."""

    patches: tuple[ImportedPatch, ...]
    finished: tuple[str, ...]
    carried: tuple[str, ...]
    fingerprint: str | None
    manifest: Path


@_own_call
def import_edits(
    *files: str,
    groups: Mapping[str, tuple[str, ...] | list[str]] | None = None,
    project: PathLike | None = None,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> ImportResult:
    """`import`: the tree's local edits (a checkout's working changes, an installed tree's against the pinned
    wheel) become patches of the project, one per file unless `groups={"name": ["file", ...]}` says otherwise,
    with DEP-3 headers and manifest entries; the tree is recorded as carrying them. `files`: only these."""
    from . import adopt

    apiargs.names("import_edits", files)
    if groups is not None and not (
        isinstance(groups, Mapping)
        and all(
            isinstance(k, str) and isinstance(v, (list, tuple)) and all(isinstance(f, str) for f in v)
            for k, v in groups.items()
        )
    ):
        from .errors import BadInput

        raise BadInput(
            f"api.import_edits: groups= is {type(groups).__name__}, not a dict of patch name -> list of files",
            hint='e.g. groups={"my_fix": ["python/sglang/srt/server_args.py"]}',
        )
    ctx = _ctx("import_edits", context, project, manifest, tree)
    specs = [f"{name}={','.join(fs)}" for name, fs in (groups or {}).items()]
    from .treepin import check_tree_version

    check_tree_version(ctx)
    with open_tree(ctx) as txn:
        done = adopt.import_edits(ctx, txn, files, adopt.parse_groups(specs), _spelling(ctx, "import_edits"))
    return ImportResult(
        tuple(ImportedPatch(p.name, p.kind, p.files, p.overlay) for p in done.patches),
        done.finished,
        done.carried,
        done.fingerprint,
        done.manifest,
    )


@_own_call
def fingerprint(
    expr: str | None = None,
    *,
    patches: str | None = None,
    all: bool = False,
    env_profile: str | None = None,
    project: PathLike | None = None,
    tree: PathLike | None = None,
    manifest: PathLike | None = None,
    context: Context | None = None,
) -> Fingerprint:
    """The fingerprint of a set (`expr` in the set grammar, or `patches="a,b"`); with neither, of the set the tree
    carries now. Includes the env profile when one is named."""
    from .fingerprint import fingerprint as compute
    from .fingerprint import short
    from .treeread import reading

    for arg, text in (("expr", expr), ("patches", patches), ("env_profile", env_profile)):
        apiargs.text("fingerprint", arg, text)
    apiargs.flag("fingerprint", "all", all)
    ctx = _ctx("fingerprint", context, project, manifest, tree)
    m = ctx.manifest
    sp = _spelling(ctx, "fingerprint")
    chosen = from_options(m, all=all, preset=expr, patches=patches, verb="fingerprint", spelling=sp)
    if chosen is not None:
        names = chosen.patches
    else:
        with reading(ctx.tree) as view:
            names = view.state.applied
    profile = m.env_profile(env_profile, spelling=sp) if env_profile is not None else None
    fp = compute(m, names, profile)
    carried = tuple(p.name for p in m.changes(names))
    return Fingerprint(fp, short(fp), carried, env_profile, m.pin.version)
