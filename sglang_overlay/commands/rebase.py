"""Carry the whole patch set to another SGLang release, git-rebase-like, into the pin directory pins/VERSION/.

Each patch in manifest order: clean or offset -> rewritten against VERSION; needs-3way -> merged file by file
with the pin's file as the base, and rewritten; conflict -> the rebase stops, the release's tree
(.sglang/sglang-VERSION) carries the patch's files with diff3 markers (the pin's text as the base), and the
message names file, hunk, Python symbol and the patch's Description: edit them, then `rebase --continue`
(any file of the release you change becomes part of the patch; a file the release does not have only if the
patch adds it, any other is refused by name), or `rebase --abort`. An upstreamed entry's proof is checked
again and rewritten where its code moved; a patch whose change VERSION already has is offered to become
`upstreamed` (`--continue` accepts); an overlay file that now ships upstream stops it.

`rebase --skip` leaves the stopped patch out of the new pin instead (and the entries that require it), each
recorded under the new manifest's `skipped:` with the reason and the stop, so it is found again later.

Nothing of the project changes before the end: pins/VERSION/ is built in pins/.rebase-VERSION/ (its
manifest, with the new pin, written last) and renamed into place. Killed, interrupted or refused a write
anywhere, the project is as before, and `rebase --continue` goes on from the last finished step (`--abort`
drops it all but the user's own work: patches carried by hand are renamed aside, the tree's unsaved edits
go to its backups; an abort cut short says so and is finished by `--abort` again). From the rename on, the new
pin and the release tree are the user's: killed after it, `--continue` only removes the progress file, and
`--abort` refuses. `--abort` needs no wheel and no network (the release tree goes back to its git commit), and
a progress file that does not load is dropped by it without being read. A pins/ or pins/VERSION linked out of
the project is refused before anything is fetched or written. Every step
that writes runs under the release tree's lock: a second `--continue`/`--skip`/`--abort` waits and then finds
what the first left; the source pin's files are checked against what the rebase read, so a change to them
meanwhile is refused rather than left out of the new pin."""

from __future__ import annotations

import datetime
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from ..carry import Step, carry
from ..diffgen import make_diff
from ..errors import BadInput, Conflict, ManifestError, StateError, os_failure
from ..fetch import WheelSource, ensure_embedded, file_sha256, pinned_wheel, release_wheel
from ..fsio import atomic_write, fsync_dir, is_tmp_name, read_bytes, tmp_path, unlink_if_present
from ..gitcmd import git
from ..manifest import Manifest, Patch, Pin, UpstreamedPatch, load_manifest, patch_file
from ..manifest_edit import remove_entry, set_entry_key, set_pin, set_top_key
from ..merge3 import marker_lines
from ..overlay_review import review
from ..pinentry import readable_names, refuse_entry
from ..pins import refuse_linked_out
from ..progname import prog
from ..rebase_state import (
    PINS_DIR,
    PROOF_BY_HAND,
    VERSION_RE,
    Progress,
    Result,
    Stop,
    check_version_arg,
    in_progress,
    parse_proof,
    pin_dir,
    progress_path,
    read_progress,
    staging_dir,
)
from ..rebase_step import describe_stop, env_notes, rebased_header
from ..record import replace
from ..state import FileRecord, State, sha256
from ..transaction import Change, Transaction
from ..tree import Tree, embedded_path
from ..undefined import new_undefined
from ..upstream import prove

NAME = "rebase"
HELP = "carry the patch set to another SGLang release into pins/VERSION/ (--continue, --skip, --abort, --status)"
PROOFS = ".proofs"  # in the staging directory: proofs the user is asked to rewrite


def add_arguments(p) -> None:
    p.add_argument("version", nargs="?", metavar="VERSION", help="the release to carry the patch set to")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--continue", dest="resume", action="store_true", help="go on after resolving a stop")
    g.add_argument(
        "--skip",
        action="store_true",
        help="leave the patch the rebase stopped at out of the new pin (and the entries that require it), "
        "recorded under `skipped:` in its manifest, and go on",
    )
    g.add_argument("--abort", action="store_true", help="drop the rebase: the project is as it was before it")
    g.add_argument("--status", action="store_true", help="where the rebase in progress is")
    p.add_argument("--reason", metavar="TEXT", help="with --skip: why, kept in the new manifest beside the stop")


def run(ctx, args) -> int:
    root = ctx.project_root
    if args.reason is not None and not args.skip:
        raise BadInput("rebase: --reason goes with --skip", hint=f"`{prog()} rebase --skip --reason TEXT`")
    if not (args.resume or args.abort or args.status or args.skip):
        if not args.version:
            raise BadInput("rebase: name the release", hint=f"e.g. `{prog()} rebase 0.5.23`")
        return _start(ctx, check_version_arg(args.version))
    readable_names(root / PINS_DIR)  # what is in progress is looked up there: an unreadable one had held none
    _tidy_unstarted(root)
    version = _which(root, args.version)
    if args.status:
        return _status(root, version)
    if args.abort:
        return _abort_locally(root, version)
    refuse_linked_out(root, version)
    progress = read_progress(progress_path(root, version))
    source = None if progress is None else load_manifest(root / progress.source)
    if progress is None or source is None:  # killed after the new pin was renamed into place: nothing is left
        return _none_in_progress(root, version, args.resume)
    tree = _release_tree(root, source.pin, progress)
    with Transaction.open(tree) as txn:
        progress = read_progress(progress_path(root, version))  # decided under the lock
        if progress is None:  # another process finished or aborted it while this one waited for the lock
            return _none_in_progress(root, version, args.resume)
        if args.skip:
            return _skip(root, source, tree, txn, progress, args.reason)
        return _continue(root, source, tree, txn, progress)


def _tidy_unstarted(root: Path) -> None:
    """A start killed before its first progress file left an empty staging directory and that file's temp: no
    rebase refers to them, so they go (under the release tree's lock, which a start holds while it makes them)."""
    folder = root / PINS_DIR
    if not folder.is_dir():
        return
    for staging in sorted(folder.glob(".rebase-*")):
        version = staging.name[len(".rebase-") :]
        if staging.is_symlink() or not staging.is_dir() or not VERSION_RE.fullmatch(version):
            continue
        tree = embedded_path(root, version)
        if progress_path(root, version).exists() or not (tree / "python" / "sglang").is_dir():
            continue
        try:
            with Transaction.open(Tree(tree.resolve(), "embedded")):
                if progress_path(root, version).exists():
                    continue  # a start made it meanwhile
                unlink_if_present(tmp_path(progress_path(root, version)))
                _drop_tmp(staging)
                os.rmdir(staging)  # only an empty one: anything else in it is left and named by what follows
                print(
                    f"sglang-overlay: removed {staging}, left by a rebase to {version} killed as it began",
                    file=sys.stderr,
                )
        except OSError:
            continue
    _rmdir_quietly(folder)  # an empty pins/ too: that start made it (a kill may have come before it went)


def _none_in_progress(root: Path, version: str, resume: bool) -> int:
    """Nothing to go on with: done (`--continue` asked for what is so: 0) or gone (`--abort`, `--skip`: 1)."""
    done = pin_dir(root, version)
    print(f"no rebase to {version} in progress" + (f"; {done} exists" if done.is_dir() else ""))
    return 0 if resume and done.is_dir() else 1


def _which(root: Path, version: str | None) -> str:
    going = in_progress(root)
    if version:
        version = check_version_arg(version)
        if version not in going and not pin_dir(root, version).is_dir():
            raise BadInput(f"no rebase to {version} in progress", hint=f"start one: `{prog()} rebase {version}`")
        return version
    if len(going) != 1:
        raise BadInput(
            "no rebase in progress" if not going else f"rebases in progress to {', '.join(going)}: name one",
            hint=f"`{prog()} rebase VERSION` starts one" if not going else f"e.g. `rebase --continue {going[0]}`",
        )
    return going[0]


# -- start ------------------------------------------------------------------------------------------------------
def _start(ctx, version: str) -> int:
    m, root = ctx.manifest, ctx.project_root
    if version == ctx.top_manifest.pin.version:  # a pins/VERSION shadowing the top level: said as `--pin` says it
        refuse_entry(ctx.top_manifest, version)
    if version == m.pin.version:
        raise BadInput(f"rebase: {m.path} is already pinned to {version}", hint="name a newer release")
    top = ctx.top_manifest
    if version == top.pin.version:  # `--pin V` names the top level itself: pins/V could never be selected
        raise BadInput(
            f"rebase: {version} is the pin of the top-level manifest {top.path}: a pins/{version}/ beside it "
            "could not be reached (`--pin " + version + "` is the top level)",
            hint=f"the top level is the set for {version}; name another release",
        )
    if m.pin_source is not None and m.pin_source != m.path:
        raise BadInput(
            f"rebase: {m.path} extends another manifest: rebase the one that holds the pin",
            hint=f"`{prog(project=False, pin=False)} --manifest {shlex.quote(str(m.pin_source))} rebase {version}`",
        )
    refuse_linked_out(root, version)  # before the release is fetched and any step runs
    _refuse_taken(top, version)
    t0 = time.monotonic()
    wheel = release_wheel(m.pin, version)
    rel_pin = Pin(m.pin.package, version, f"v{version}", wheel.name, file_sha256(wheel))
    tree, _ = ensure_embedded(root, rel_pin, wheel)
    with Transaction.open(tree) as txn:
        _refuse_taken(top, version)  # again under the lock: a second rebase may have started meanwhile
        _refuse_dirty(tree, txn)
        staging = staging_dir(root, version)
        if staging.exists():
            shutil.rmtree(staging)  # a killed start or abort left it; no progress file refers to it
        made_pins = not staging.parent.exists()
        staging.mkdir(parents=True)
        progress = Progress(
            target=version,
            source=os.path.relpath(m.path, root),
            source_pin=m.pin.version,
            wheel=wheel.name,
            sha256=rel_pin.sha256,
            order=m.names,
            started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            source_files={os.path.relpath(f, root): file_sha256(f) for f in _source_files(m)},
        )
        try:
            _save(root, progress)
        except BaseException:
            if not progress_path(root, version).exists():  # nothing refers to the staging directory: no trace left
                shutil.rmtree(staging, ignore_errors=True)
                if made_pins:
                    _rmdir_quietly(staging.parent)
            raise
        print(f"rebase {m.pin.version} -> {version}: {len(m.names)} entries, tree {tree.root}", file=sys.stderr)
        return _go(root, m, tree, txn, progress, t0)


def _source_files(m: Manifest) -> list[Path]:
    """The files of the source pin the rebase carries: its manifest, every patch file and overlay file."""
    out = [m.path]
    for p in m.patches:
        change = patch_file(p)
        out += [change.path] if change is not None else []
        out += [p.overlay_source(f) for f in getattr(p, "overlay", ())]
    return out


def _refuse_changed_source(root: Path, progress: Progress) -> None:
    """Another process (a `refresh`, an editor) changed the source pin since the rebase read it: going on would
    carry what it held before, and the change would be lost from the new pin."""
    changed = [
        rel
        for rel, digest in progress.source_files.items()
        if read_bytes(root / rel) is None or file_sha256(root / rel) != digest
    ]
    if changed:
        raise Conflict(
            f"the source pin changed since the rebase to {progress.target} started: {', '.join(changed[:6])}: "
            "the new pin would carry what they held before",
            hint=f"put them back as they were (`git diff`), then `{prog()} rebase --continue`; or `rebase --abort` "
            "and start again to carry them as they are now",
        )


def _refuse_taken(top: Manifest, version: str) -> None:
    root = top.project_root
    refuse_entry(top, version)  # first: a pins/ that is no directory made the progress file unreadable
    if read_progress(progress_path(root, version)) is not None:
        raise BadInput(
            f"a rebase to {version} is already in progress",
            hint=f"`{prog()} rebase --status`, then `--continue` or `--abort`",
        )
    if pin_dir(root, version).exists():
        raise BadInput(
            f"{pin_dir(root, version)} exists: the project already carries a pin for {version}",
            hint=f"use it (`--pin {version}`), or remove the directory to rebase again",
        )


def _refuse_dirty(tree: Tree, txn: Transaction) -> None:
    changed = _changed(tree)
    for f in changed:  # git lists a file it cannot read as changed: that is a permission to fix, not a revert
        try:
            with open(tree.path_of(f), "rb"):
                pass
        except PermissionError as e:
            raise os_failure(e, "cannot read", "the rebase did not start; nothing was changed") from None
        except OSError:
            pass  # removed, or a directory: a change git names, refused below
    if txn.state.files or changed:
        raise BadInput(
            f"{tree.root}: the release tree carries changes ({', '.join(sorted(set(txn.state.files) | set(changed))[:5])}): "
            f"a rebase needs it as the release ships it",
            hint=f"revert them (`{prog()} --tree {tree.root} revert --all`, `git -C {tree.root} status`)",
        )


def _release_tree(root: Path, pin: Pin, progress: Progress) -> Tree:
    rel_pin = Pin(pin.package, progress.target, f"v{progress.target}", progress.wheel, progress.sha256)
    dest = embedded_path(root, progress.target)
    if (dest / "python" / "sglang").is_dir():
        return Tree(dest.resolve(), "embedded")
    wheel = release_wheel(pin, progress.target)
    return ensure_embedded(root, rel_pin, wheel)[0]


# -- the steps ------------------------------------------------------------------------------------------------
def _go(root: Path, m: Manifest, tree: Tree, txn: Transaction, progress: Progress, t0: float | None = None) -> int:
    version = progress.target
    pin_src = WheelSource(pinned_wheel(m.pin))
    rel_src = WheelSource(release_wheel(m.pin, version))
    staging = staging_dir(root, version)
    for name in progress.order[progress.next :]:
        if name in progress.results:  # skipped ahead of its turn: it requires a skipped entry
            continue
        p = m.patch(name)
        step = carry(p, pin_src.read, rel_src.read, rel_src.paths, version)
        step = _reviewed(p, step, pin_src.read, rel_src.read, version)
        if step.stops:
            return _stop(root, p, step, tree, txn, progress, staging, t0)
        _stage(p, step, staging, progress.source_pin, rel_src.read)
        progress = progress.advanced(name, Result(step.status, step.detail, step.files, step.proof))
        _save(root, progress)
        print(f"  {step.status:<17}{name}" + (f": {step.detail}" if step.detail else ""))
    return _finish(root, m, tree, txn, progress, rel_src)


def _reviewed(p: Patch, step: Step, pin, release, version: str) -> Step:
    """An entry's overlay modules against the release (overlay_review.py), and the names of a merge the tool made
    itself: what changed stops the rebase as a conflict does, the entry's files put in the tree to look at."""
    if isinstance(p, UpstreamedPatch) or step.status not in ("clean", "offset", "needs-3way", "conflict"):
        return step
    said = []
    findings = review(p, pin, release, version) if p.overlay else []
    if findings:
        said.append("overlay review: " + "; ".join(findings))
    if step.status != "conflict":  # a merge the tool made itself compiles, and may use what the release lacks
        names = [
            f"{f}:{u.line}: undefined name `{u.name}`"
            for f, data in sorted(step.contents.items())
            if f.endswith(".py") and data is not None
            for u in new_undefined(data, release(f))
        ]
        if names:
            said.append("names the release does not define: " + "; ".join(names))
    if not said:
        return step
    if step.status == "conflict":
        return replace(step, detail=f"{step.detail}; {'; '.join(said)}")
    return replace(step, status="conflict", detail="; ".join(said))


def _stage(p: Patch, step: Step, staging: Path, from_version: str, release, *, as_upstreamed: bool = False) -> None:
    """Write what the entry becomes in the new pin's directory (the same paths, relative to it)."""
    src_dir = p.source_dir
    change = patch_file(p)
    if isinstance(p, UpstreamedPatch) or as_upstreamed:
        # the original change kept (it reverse-applies: the proof); a moved proof replaces it
        if change is not None and step.status != "upstreamed-moved":
            _write(staging / os.path.relpath(change.path, src_dir), change.path.read_bytes())
        return
    if p.diff is not None and p.diff.body:
        body = make_diff({f: release(f) for f in step.contents}, step.contents, executable=p.diff.executable)
        header = rebased_header(p.diff.header_text, from_version)
        _write(staging / os.path.relpath(p.diff.path, src_dir), (header + body).encode())
    elif p.diff is not None:
        _write(staging / os.path.relpath(p.diff.path, src_dir), p.diff.path.read_bytes())
    for f in p.overlay:
        _write(staging / "overlay" / f, p.overlay_source(f).read_bytes())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)


def _save(root: Path, progress: Progress) -> None:
    atomic_write(progress_path(root, progress.target), progress.to_bytes())
    fsync_dir(progress_path(root, progress.target).parent)


def _stop(root, p: Patch, step: Step, tree: Tree, txn: Transaction, progress: Progress, staging: Path, t0) -> int:
    version = progress.target
    files: tuple[str, ...] = ()
    if step.status == "conflict":
        # the whole patch as it would stand on the release: its files merged or marked, its overlay files too,
        # so the user edits (and can run) all of it; any of them edited becomes the patch's new content
        merged = {f: step.contents.get(f) for f, _ in step.files}
        writes = {f: d for f, d in merged.items() if d is not None}
        if not isinstance(p, UpstreamedPatch):
            writes |= {f: p.overlay_source(f).read_bytes() for f in p.overlay}
        files = tuple(writes)
        _put_in_tree(tree, txn, p.name, writes)
    if step.status == "proof-failed" and isinstance(p, UpstreamedPatch) and p.proof is not None:
        ask = staging / PROOFS / f"{p.name}.yaml"
        if not ask.exists():
            proof = {"file": p.proof.file, "symbols": list(p.proof.symbols), "contains": list(p.proof.contains)}
            asked = yaml.safe_dump(proof, sort_keys=False, width=1000).encode()
            _write(_asked(ask), asked)  # first: an ask without it counts as edited, so an abort keeps it
            _write(ask, asked)
    message = describe_stop(p, step, tree.root, version)
    progress = replace(progress, next=progress.order.index(p.name), stop=Stop(step.status, p.name, files, message))
    _save(root, progress)
    print(message)
    print(_what_now(step.status, p.name, staging), file=sys.stderr)
    if t0 is not None:
        print(f"rebase: stopped at {p.name} after {time.monotonic() - t0:.2f}s", file=sys.stderr)
    return 1


def _asked(ask: Path) -> Path:
    """The proof as the stop wrote it, beside the one the user edits: what tells an edit from none."""
    return ask.with_name(f".{ask.name}.asked")


def _proofs_edited(staging: Path) -> list[str]:
    """The patches whose proof the user rewrote at a stop and has not carried yet (`--continue`)."""
    edited = []
    for ask in sorted((staging / PROOFS).glob("*.yaml")):
        if read_bytes(ask) != read_bytes(_asked(ask)):
            edited.append(ask.name[: -len(".yaml")])
    return edited


def _what_now(kind: str, name: str, staging: Path) -> str:
    return {
        "conflict": "resolve the conflict markers in the files above (any file of the release you change "
        f"becomes part of {name}; leave no other new file in the tree), then `{prog()} rebase --continue`; or "
        "`rebase --abort`",
        "upstream": f"`{prog()} rebase --continue` makes {name} an `upstreamed` entry of the new pin "
        "(its diff kept as the proof); or `rebase --abort`",
        "proof-failed": f"point the proof at the release's code in {staging / PROOFS / (name + '.yaml')} "
        f"(file, symbols, contains), then `{prog()} rebase --continue`; or `rebase --abort`",
        "collision": "the overlay file would replace the release's own file: `rebase --abort`, move the overlay "
        "file to a new path in the source pin (its `overlay:` entry and the imports of it), and rebase again",
    }[kind]


def _put_in_tree(tree: Tree, txn: Transaction, owner: str, writes: dict[str, bytes]) -> None:
    """The stopped patch's files into the release tree, recorded in its state (the bases kept to restore)."""
    before = {f: read_bytes(tree.managed_file(f)) for f in writes}
    files = {
        f: FileRecord(None if (base := before[f]) is None else sha256(base), sha256(d), (owner,))
        for f, d in writes.items()
    }
    bases = tuple(b for b in before.values() if b is not None)
    txn.commit(Change("rebase", writes, before, State(files=files, pin_version=tree_version(tree)), bases))


def tree_version(tree: Tree) -> str | None:
    return tree.version()


def _restore(tree: Tree, txn: Transaction, release, *, keep_edits: bool = False) -> tuple[Path | None, list[str]]:
    """Put the release tree back as the release ships it: the files a stop wrote, and any the user changed.
    `keep_edits` (an abort): what the user wrote into the tree since the stop (a resolution not carried by
    `--continue` yet) is saved in the tree's backups first; returns that directory and the files saved."""
    paths = set(txn.state.files) | set(_changed(tree))
    writes = {f: release(f) for f in sorted(paths)}
    before = {f: read_bytes(tree.managed_file(f)) for f in writes}
    writes = {f: d for f, d in writes.items() if before[f] != d}
    edits = {}
    if keep_edits:
        for f in writes:
            now, rec = before[f], txn.state.files.get(f)
            if now is not None and (rec is None or sha256(now) != rec.applied):
                edits[f] = now
    backup = None
    if writes or txn.state.files:
        state = State(pin_version=txn.state.pin_version)
        backup = txn.commit(Change("rebase", writes, {f: before[f] for f in writes}, state, (), edits))
    return backup, sorted(edits)


def _changed(tree: Tree) -> list[str]:
    """Repository paths under python/sglang that differ from the release's commit (untracked ones too)."""
    res = git(
        "status", "--porcelain", "-z", "--untracked-files=all", "--no-renames", "--", "python/sglang", cwd=tree.root
    )
    out = []
    for entry in res.stdout.split("\0"):
        if len(entry) > 3:
            path = entry[3:]
            if "/__pycache__/" not in path and not path.endswith(".pyc"):
                out.append(path)
    return out


# -- continue / abort / status ------------------------------------------------------------------------------------
def _continue(root: Path, m: Manifest, tree: Tree, txn: Transaction, progress: Progress) -> int:
    if _finished(root, progress.target):
        # killed after the new pin was renamed into place: the release tree was put back before the rename and
        # is the new pin's since (a `--pin V apply` or hand edits may be in it), so only the progress file goes
        return _cleanup_finished(root, progress)
    if progress.aborting:
        raise BadInput(
            f"the rebase to {progress.target} is being aborted (an abort was cut short)",
            hint=f"`{prog()} rebase --abort` finishes it",
        )
    rel_src = WheelSource(release_wheel(m.pin, progress.target))
    if not staging_dir(root, progress.target).is_dir():
        raise StateError(
            f"{staging_dir(root, progress.target)}: the rebase's staging directory is missing "
            f"(and {pin_dir(root, progress.target)} does not exist): something else removed it",
            hint=f"`{prog()} rebase --abort`, then start again",
        )
    _refuse_changed_source(root, progress)
    _drop_tmp(staging_dir(root, progress.target))
    stop = progress.stop
    if stop is None:
        _restore(tree, txn, rel_src.read)  # a kill after a resolution was captured, before the tree went back
        return _go(root, m, tree, txn, progress)
    p = m.patch(stop.patch)
    staging = staging_dir(root, progress.target)
    result: Result | None
    if stop.kind == "conflict":
        result = _capture(p, tree, txn, stop, staging, progress, rel_src.read)
    elif stop.kind == "upstream":
        step = Step(p.name, "upstream", stop.message)
        _stage(p, step, staging, progress.source_pin, rel_src.read, as_upstreamed=True)
        result = Result("upstream", f"accepted: upstreamed in {progress.target}")
    elif stop.kind == "proof-failed":
        result = _asked_proof(p, staging, rel_src.read, progress)
        if result is None:
            return 1
    else:
        step = carry(p, WheelSource(pinned_wheel(m.pin)).read, rel_src.read, rel_src.paths, progress.target)
        if step.stops:
            print(describe_stop(p, step, tree.root, progress.target))
            print(_what_now(step.status, p.name, staging), file=sys.stderr)
            return 1
        _stage(p, step, staging, progress.source_pin, rel_src.read)
        result = Result(step.status, step.detail, step.files, step.proof)
    progress = progress.advanced(p.name, result)
    _save(root, progress)
    print(f"  {result.status:<17}{p.name}: {result.detail}")
    _restore(tree, txn, rel_src.read)
    return _go(root, m, tree, txn, progress)


def _skip(root: Path, m: Manifest, tree: Tree, txn: Transaction, progress: Progress, reason: str | None) -> int:
    """Leave the stopped patch out of the new pin, with every entry that requires it (they cannot be carried
    without it): each recorded as a `skipped` result, written into the new manifest's `skipped:` at the end."""
    if progress.aborting:
        raise BadInput(
            f"the rebase to {progress.target} is being aborted (an abort was cut short)",
            hint=f"`{prog()} rebase --abort` finishes it",
        )
    _refuse_changed_source(root, progress)
    stop = progress.stop
    if stop is None:
        raise BadInput(
            f"the rebase to {progress.target} is not stopped at a patch: there is nothing to skip",
            hint=f"`{prog()} rebase --status` shows where it is; `rebase --continue` goes on",
        )
    why = reason or "left out by `rebase --skip`"
    results = {stop.patch: Result("skipped", why, (), None, _stop_summary(stop.message))}
    for dep in _requiring(m, stop.patch):
        results[dep] = Result("skipped", f"requires {stop.patch}, which was skipped")
    progress = replace(progress.advanced(stop.patch, results[stop.patch]), results={**progress.results, **results})
    _save(root, progress)
    for name, r in results.items():
        print(f"  {'skipped':<17}{name}: {r.detail}" + (f" ({r.stop})" if r.stop else ""))
    rel_src = WheelSource(release_wheel(m.pin, progress.target))
    _restore(tree, txn, rel_src.read)
    return _go(root, m, tree, txn, progress)


def _stop_summary(message: str) -> str:
    """One line of a stop's message (describe_stop): what it was, and where (a conflict) or why."""
    lines = [ln.strip() for ln in message.splitlines()]
    where = [ln[len("where: ") :] for ln in lines if ln.startswith("where: ")]
    head = lines[0].split(": ", 1)[-1] if lines else "stopped"
    why = where[0] if where else (lines[1] if len(lines) > 1 and not lines[1].startswith("the patch's intent") else "")
    return head + (f": {why}" if why else "")


def _requiring(m: Manifest, name: str) -> list[str]:
    """The entries that require `name`, directly or through others, in manifest order."""
    out: set[str] = set()
    grew = True
    while grew:
        grew = False
        for p in m.patches:
            if p.name not in out and (name in p.requires or out & set(p.requires)):
                out.add(p.name)
                grew = True
    return [p.name for p in m.patches if p.name in out]


def _capture(p: Patch, tree: Tree, txn: Transaction, stop: Stop, staging: Path, progress: Progress, release) -> Result:
    """The user's resolution, read from the release tree like `refresh` reads hand edits: the stop's files, the
    patch's own, and any file of the release the user changed. A file the release does not have and the patch
    does not add is refused, not taken: an editor's swap or backup file there had become a hunk of the patch
    (a binary one: a new manifest that never loads), and putting the tree back would delete it unsaid."""
    own = set(stop.files) | set(p.files)
    changed = _changed(tree)
    stray = sorted(f for f in changed if f not in own and release(f) is None)
    if stray:
        raise BadInput(
            f"{p.name}: the release tree holds file(s) that neither sglang {progress.target} nor the patch has: "
            + ", ".join(str(tree.path_of(f)) for f in stray[:8])
            + (f" (and {len(stray) - 8} more)" if len(stray) > 8 else ""),
            hint="remove them (an editor's swap or backup file?), then `rebase --continue`; a new module the "
            f"patch needs goes into the new pin afterwards, as an overlay file of {p.name} "
            f"(pins/{progress.target}/overlay/ and its `overlay:` list)",
        )
    paths = sorted(set(stop.files) | set(changed))
    now = {f: read_bytes(tree.managed_file(f)) for f in paths}
    for f, data in now.items():
        left = marker_lines(data) if data is not None else []
        if left:
            raise Conflict(
                f"{tree.path_of(f)}: conflict markers left at line(s) {', '.join(map(str, left[:8]))}",
                hint="edit the file until no <<<<<<< ||||||| ======= >>>>>>> line is left, then `rebase --continue`",
            )
        if f.endswith(".py") and data is not None:
            try:
                compile(data, str(tree.path_of(f)), "exec", dont_inherit=True)
            except SyntaxError as e:
                raise Conflict(
                    f"{tree.path_of(f)}: line {e.lineno}: {e.msg} (the resolution does not byte-compile)",
                    hint=f"fix it, then `{prog()} rebase --continue`",
                ) from e
            # a hunk merged into another function, or one the tool merged outside any marker, still compiles
            found = new_undefined(data, release(f))
            if found:
                raise Conflict(
                    f"{tree.path_of(f)}: the resolution uses names sglang {progress.target}'s file does not define: "
                    + "; ".join(f"line {u.line}: `{u.name}`" for u in found[:8])
                    + (f" (and {len(found) - 8} more)" if len(found) > 8 else ""),
                    hint=f"import or define them (or move the code where they are), then `{prog()} rebase --continue`",
                )
    if isinstance(p, UpstreamedPatch) or p.diff is None:
        raise BadInput(f"{p.name}: only an entry with a diff can stop at a conflict")
    diffed = [f for f in paths if f not in p.overlay]
    body = make_diff({f: release(f) for f in diffed}, {f: now[f] for f in diffed}, executable=p.diff.executable)
    if not body:
        raise BadInput(
            f"{p.name}: the release tree holds none of its changes now, so the patch would be empty",
            hint="put the resolved change back into the files, or `rebase --abort`",
        )
    _write(
        staging / os.path.relpath(p.diff.path, p.source_dir),
        (rebased_header(p.diff.header_text, progress.source_pin) + body).encode(),
    )
    for f in p.overlay:  # as the user left it in the release tree (it was put there at the stop)
        data = now.get(f)
        _write(staging / "overlay" / f, data if data is not None else p.overlay_source(f).read_bytes())
    files = tuple((f, "resolved") for f in paths)
    return Result("resolved", f"resolved by hand: {', '.join(paths)}", files, by_hand=True)


def _asked_proof(p: Patch, staging: Path, release, progress: Progress) -> Result | None:
    ask = staging / PROOFS / f"{p.name}.yaml"
    hint = (
        "keys: file (a repo path), symbols (a list of qualified names), contains (a list of exact lines): at "
        f"least one symbol or line; then `{prog()} rebase --continue`"
    )
    try:
        raw = yaml.safe_load(ask.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise BadInput(f"{ask}: not a proof ({e})", hint=hint) from e
    proof = parse_proof(raw, str(ask), "", hint=hint)  # checked before the step is recorded: later is too late
    if not isinstance(p, UpstreamedPatch):
        raise BadInput(f"{p.name}: only an upstreamed entry stops for its proof")
    res = prove(replace(p, proof=proof, original=None), release)  # the proof alone: the code moved
    if not res.holds:
        print(f"{p.name}: the proof in {ask} does not hold on {progress.target}: {res.detail}")
        return None
    return Result("upstreamed-moved", f"{PROOF_BY_HAND}: {proof.file}", (), proof, by_hand=True)


def _finished(root: Path, version: str) -> bool:
    """The new pin was renamed into place (the progress file not yet removed): the rebase is done."""
    return pin_dir(root, version).is_dir() and not staging_dir(root, version).exists()


def _abort_locally(root: Path, version: str) -> int:
    """`--abort` from what is on this machine only: the release tree goes back to what its git commit holds (it
    was pristine when the rebase started: _refuse_dirty), never to the release's wheel, which may be gone from
    the cache with no network to fetch it again (an abort stuck half done had to be finished by hand)."""
    try:
        progress = read_progress(progress_path(root, version))
    except BadInput as e:
        return _abort_unread(root, version, e)  # the way out the error's hint names must not read it again
    if progress is None:  # killed after the new pin was renamed into place: nothing is left
        return _none_in_progress(root, version, False)
    dest = embedded_path(root, version)
    if not (dest / "python" / "sglang").is_dir():  # removed by hand: nothing to put back, nothing to fetch for it
        return _abort(root, None, None, progress)
    tree = Tree(dest.resolve(), "embedded")
    with Transaction.open(tree) as txn:
        progress = read_progress(progress_path(root, version))  # decided under the lock
        if progress is None:  # another process finished or aborted it while this one waited for the lock
            return _none_in_progress(root, version, False)
        return _abort(root, tree, txn, progress)


def _abort(root: Path, tree: Tree | None, txn: Transaction | None, progress: Progress) -> int:
    version = progress.target
    staging, done = staging_dir(root, version), pin_dir(root, version)
    if _finished(root, version):
        # from the rename on, pins/VERSION is a pin like any other: `--pin VERSION refresh` may have changed it
        # and its tree may carry applied patches and edits, none of which an abort can tell from the rebase's
        raise BadInput(
            f"the rebase to {version} is finished: its new pin {done} is in place, and --abort does not delete "
            "a finished pin",
            hint=f"`{prog()} rebase --continue` tidies up (removes {progress_path(root, version)}); then delete "
            f"{done} by hand if you do not want the new pin",
        )
    if not progress.aborting:
        progress = replace(progress, aborting=True)
        _save(root, progress)
    notes = []
    if tree is not None and txn is not None:
        backup, edited = _restore(tree, txn, _head_reader(tree), keep_edits=True)
        if edited:
            notes.append(f"your edits of {len(edited)} file(s) in {tree.root} are saved under {backup}")
    # the patches carried by hand (`--continue` after editing a stop) and a proof rewritten at the stop are the
    # user's work: kept, not removed
    by_hand = [n for n in progress.order if (r := progress.results.get(n)) is not None and _by_hand(r)]
    linked = os.path.islink(staging)  # not the rebase's: only the link goes, never what it leads to
    if staging.exists() and not linked:
        by_hand += [f"{n} (its proof, not carried yet)" for n in _proofs_edited(staging)]
    if linked:
        real = os.path.realpath(staging)
        os.unlink(staging)
        notes.append(f"removed the symbolic link {staging} (what it led to, {real}, is as it was)")
    elif staging.exists() and by_hand:
        _drop_tmp(staging)  # a write a kill cut short is no work of the user's
        _set_aside(staging)
    elif staging.exists():
        _rmtree_named(staging)
    os.unlink(progress_path(root, version))
    fsync_dir(progress_path(root, version).parent)
    notes += _kept_notes(root, version, by_hand)
    _rmdir_quietly(staging.parent)  # pins/ goes too if the rebase made it (if it is empty)
    said = f"the project and {tree.root} are" if tree is not None else "the project is"
    print(f"rebase to {version} aborted: {said} as before it" + "".join(f"\n  {n}" for n in notes))
    return 0


def _set_aside(staging: Path) -> Path:
    """The staging directory renamed beside itself (pins/.rebase-V.aborted-STAMP): one rename, so a kill leaves
    it whole under one name or the other."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    kept = staging.with_name(f"{staging.name}.aborted-{stamp}")
    n = 1
    while kept.exists():  # another abort of this version within the second
        n += 1
        kept = staging.with_name(f"{staging.name}.aborted-{stamp}-{n}")
    os.rename(staging, kept)
    fsync_dir(staging.parent)
    return kept


def _kept_notes(root: Path, version: str, by_hand: list[str]) -> list[str]:
    """Every copy an abort of this version set aside, this one's or an earlier one's (an abort cut short after
    the rename, finished by another, still says where the work is)."""
    staging = staging_dir(root, version)
    kept = sorted(staging.parent.glob(f"{staging.name}.aborted-*")) if staging.parent.is_dir() else []
    if not kept:
        return []
    what = f"what you did by hand ({', '.join(by_hand)})" if by_hand else "work done by hand in an earlier try"
    return [
        f"{what} is kept in {', '.join(map(str, kept))} (patches/, overlay/, .proofs/): delete it when you no "
        "longer need it"
    ]


def _by_hand(result: Result) -> bool:
    """A result that holds the user's own work: a conflict resolved, a proof rewritten (_proof_by_hand)."""
    return result.by_hand


def _abort_unread(root: Path, version: str, why: BadInput) -> int:
    """`--abort` of a rebase whose progress file (or source manifest) does not load: nothing it records can be
    trusted, so the release tree is put back as its own git commit holds it (not from the wheel the file
    names), then the staging directory and the progress file go (that last: an abort cut short is done again)."""
    print(f"rebase --abort: {why}\n  dropping the rebase to {version} without it", file=sys.stderr)
    dest = embedded_path(root, version)
    if not (dest / "python" / "sglang").is_dir():
        return _drop_unread(root, version, None, None)
    tree = Tree(dest.resolve(), "embedded")
    with Transaction.open(tree) as txn:
        return _drop_unread(root, version, tree, txn)


def _drop_unread(root: Path, version: str, tree: Tree | None, txn: Transaction | None) -> int:
    staging, path, done = staging_dir(root, version), progress_path(root, version), pin_dir(root, version)
    said = []
    if _finished(root, version):  # a new pin in place is a pin like any other, and the tree is its tree
        said.append(f"{done} is in place: kept, and its release tree as it is")
    elif tree is not None and txn is not None:
        put_back = sorted(set(txn.state.files) | set(_changed(tree)))
        backup, edited = _restore(tree, txn, _head_reader(tree), keep_edits=True)
        said.append(f"{tree.root}: {len(put_back)} file(s) put back as its git commit holds them")
        if edited:
            said.append(f"your edits of {len(edited)} file(s) saved under {backup}")
    # the progress that says what is the user's work does not load: staging with any patch or proof in it is
    # set aside, not removed (it may hold resolutions carried by hand)
    if staging.exists() and any(p.is_file() for d in ("patches", PROOFS) for p in (staging / d).rglob("*")):
        said.append(f"kept {_set_aside(staging)} (it may hold work done by hand: delete it when you no longer need it)")
    elif staging.exists():
        _rmtree_named(staging)
        said.append(f"removed {staging}")
    unlink_if_present(path)
    fsync_dir(path.parent)
    _rmdir_quietly(path.parent)  # pins/ goes too if the rebase made it (if it is empty)
    print(f"rebase to {version} aborted: " + "; ".join([*said, f"removed {path}"]))
    return 0


def _head_reader(tree: Tree) -> Callable[[str], bytes | None]:
    """A repository path as the release tree's git commit holds it (None: not in it), byte for byte (gitcmd's
    git decodes what git prints)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # a hook's GIT_DIR points elsewhere

    def read(repo_path: str) -> bytes | None:
        if git("cat-file", "-e", f"HEAD:{repo_path}", cwd=tree.root, check=False).returncode != 0:
            return None
        proc = subprocess.run(
            ["git", "cat-file", "blob", f"HEAD:{repo_path}"], cwd=tree.root, capture_output=True, env=env, check=False
        )
        if proc.returncode != 0:
            raise StateError(
                f"{tree.root}: git cannot read {repo_path} from its commit: {proc.stderr.decode(errors='replace')}",
                hint=f"`git -C {tree.root} status`; or remove {tree.root} (the next command unpacks it again)",
            )
        return proc.stdout

    return read


def _status(root: Path, version: str) -> int:
    progress = read_progress(progress_path(root, version))
    if progress is None:
        print(
            f"no rebase to {version} in progress"
            + (f"; {pin_dir(root, version)} exists" if pin_dir(root, version).is_dir() else "")
        )
        return 0
    print(f"rebase {progress.source_pin} -> {progress.target} ({progress.source}), started {progress.started}")
    if progress.aborting:
        print(f"  an abort was cut short: `{prog()} rebase --abort` finishes it (the project is then as before it)")
        return 0
    if not staging_dir(root, version).is_dir() and pin_dir(root, version).is_dir():
        print(f"  done: the new pin {pin_dir(root, version)} is in place; `{prog()} rebase --continue` tidies up")
    for name in progress.order:
        r = progress.results.get(name)
        if r is not None:
            print(f"  done     {r.status:<17}{name}" + (f": {r.detail}" if r.detail else ""))
        elif progress.stop is not None and progress.stop.patch == name:
            print(f"  stopped  {progress.stop.kind:<17}{name}")
        else:
            print(f"  to do    {'':<17}{name}")
    if progress.stop is not None:
        print(progress.stop.message)
        print(_what_now(progress.stop.kind, progress.stop.patch, staging_dir(root, version)))
    return 0


# -- the end ----------------------------------------------------------------------------------------------------
def _finish(root: Path, m: Manifest, tree: Tree, txn: Transaction, progress: Progress, rel_src) -> int:
    version, staging = progress.target, staging_dir(root, progress.target)
    _refuse_changed_source(root, progress)  # the last look before the new pin is made of what was carried
    text = set_pin(
        m.path.read_text(), Pin(m.pin.package, version, f"v{version}", progress.wheel, progress.sha256), str(m.path)
    )
    text = _leave_out_skipped(m, text, progress, staging)
    for name, r in progress.results.items():
        if r.status == "skipped":
            continue
        if r.proof is not None:
            text = set_entry_key(text, name, "proof", r.proof, str(m.path))
            if patch_file(m.patch(name)) is not None:
                text = set_entry_key(text, name, "file", None, str(m.path))
        if r.status == "upstream":
            text = set_entry_key(text, name, "kind", "upstreamed", str(m.path))
            text = set_entry_key(text, name, "upstream", {"status": "upstreamed", "release": version}, str(m.path))
            text = set_entry_key(text, name, "overlay", None, str(m.path))
    _drop_tmp(staging)
    target = staging / "manifest.yaml"
    _write(target, text.encode())
    try:
        load_manifest(target)
    except ManifestError as e:
        raise ManifestError(
            f"the new pin's manifest does not load: {e}",
            hint=f"a bug in rebase: the rebase stays resumable; report it with {target}",
        ) from e
    shutil.rmtree(staging / PROOFS, ignore_errors=True)  # only now: a resumed rebase may still need them
    for line in env_notes(load_manifest(target), rel_src.read, rel_src.paths):
        print(f"  note     {line}")
    # before the rename: from it on the release tree is the new pin's, and a rebase resumed after a kill
    # must not put back what a `--pin VERSION apply` or the user's edits made of it
    _restore(tree, txn, rel_src.read)
    fsync_dir(staging)
    os.rename(staging, pin_dir(root, version))  # the new pin appears whole
    fsync_dir(staging.parent)
    return _cleanup_finished(root, progress)


def _leave_out_skipped(m: Manifest, text: str, progress: Progress, staging: Path) -> str:
    """The skipped entries out of the new manifest (their entries, presets and conflicts naming them, their
    staged files), recorded under `skipped:` with why, so `status` on the new pin names them."""
    skipped = {n: r for n, r in progress.results.items() if r.status == "skipped"}
    if not skipped:
        return text
    where = str(m.path)
    for name in skipped:
        p = m.patch(name)
        text = remove_entry(text, name, where)
        change = patch_file(p)
        for f in ([os.path.relpath(change.path, p.source_dir)] if change is not None else []) + [
            os.path.join("overlay", f) for f in getattr(p, "overlay", ())
        ]:
            unlink_if_present(staging / f)  # staged before a later skip dropped it (it required the skipped one)
    for p in m.patches:
        if p.name not in skipped and set(p.conflicts) & set(skipped):
            kept = [c for c in p.conflicts if c not in skipped]
            text = set_entry_key(text, p.name, "conflicts", kept or None, where)
    if any(set(members) & set(skipped) for members in m.presets.values()):
        presets = {k: [n for n in v if n not in skipped] for k, v in m.presets.items()}
        text = set_top_key(text, "presets", {k: v for k, v in presets.items() if v} or None)
    record = {s.name: _skipped_yaml(s.reason, s.stop, s.release, s.source) for s in m.skipped}
    for name, r in skipped.items():
        record[name] = _skipped_yaml(r.detail, r.stop, progress.target, progress.source_pin)
    return set_top_key(text, "skipped", record)


def _skipped_yaml(reason: str, stop: str, release: str, source: str) -> dict[str, str]:
    return {"reason": reason, **({"stop": stop} if stop else {}), "release": release, "from": source}


def _cleanup_finished(root: Path, progress: Progress) -> int:
    path = progress_path(root, progress.target)
    if path.exists():
        os.unlink(path)
        fsync_dir(path.parent)
    done = pin_dir(root, progress.target)
    print(f"rebased {progress.source_pin} -> {progress.target}: {done} (`{prog()} --pin {progress.target} check`)")
    return 0


def _rmtree_named(directory: Path) -> None:
    """shutil.rmtree whose error names the file by its whole path (rmtree's own names it relative to its
    directory, which tells the user nothing)."""

    def named(_func: object, path: str, exc: BaseException) -> None:
        if isinstance(exc, OSError):
            exc.filename = path
        raise exc

    if sys.version_info >= (3, 12):
        shutil.rmtree(directory, onexc=named)
    else:
        shutil.rmtree(directory, onerror=lambda func, path, info: named(func, path, info[1]))


def _rmdir_quietly(directory: Path) -> None:
    try:
        os.rmdir(directory)
    except OSError:
        pass


def _drop_tmp(directory: Path) -> None:
    for dirpath, _dirs, names in os.walk(directory):
        for n in names:
            if is_tmp_name(n):
                os.unlink(Path(dirpath) / n)
