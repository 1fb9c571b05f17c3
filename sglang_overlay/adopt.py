"""Local edits of a tree -> named patches of the project (`import`): what changed against the pinned release,
how it is grouped into patches, and the patch files and manifest entries that carry it.

Nothing here writes: api.import_edits writes the plan (project files first, the manifest last, then the tree's
state in one transaction), and a second run finishes what a killed one left (`leftovers`)."""

from __future__ import annotations

import datetime
import errno
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .diffgen import make_diff
from .errors import BadInput
from .manifest import EMPTY_NAMES, NAME_RE, Manifest, UpstreamedPatch
from .progname import prog
from .record import Record
from .repopath import IDENTITY_PATH, STATE_DIR_NAME
from .tree import Tree

if TYPE_CHECKING:
    from .context import Context
    from .spelling import Spelling
    from .transaction import Transaction

Reader = Callable[[str], "bytes | None"]

PACKAGE = "python/sglang/"
_SKIP_DIRS = ("__pycache__", STATE_DIR_NAME)


class Edit(Record):
    """One file the tree holds otherwise than the pin plus the applied patches make it."""

    path: str  # repo path, python/sglang/...
    old: bytes | None  # what the applied set makes (the release's file when no patch touches it); None: new file
    new: bytes | None  # the tree's file; None: deleted
    pristine: bytes | None  # the release's file (the base the state records)


class PlannedPatch(Record):
    name: str
    edits: tuple[Edit, ...]
    overlay: tuple[str, ...]  # new files carried whole under overlay/
    body: str  # the diff of the edits to existing files ("" when only new files)
    requires: tuple[str, ...] = ()  # the applied patches its diff is taken on top of (their files' edits)

    @property
    def kind(self) -> str:
        return "diff" if self.body else "overlay"

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(e.path for e in self.edits)


# -- what changed ----------------------------------------------------------------------------------------------
def changed_paths(
    tree: Tree, release_paths: Callable[[], Iterable[str]], read_release: Reader
) -> tuple[list[str], list[str], list[str], list[str]]:
    """Every path the tree holds otherwise than its release (git's working changes in a checkout, a walk
    against the pinned wheel in an installed tree), and the paths it cannot carry: (paths, outside, mode_only,
    mode_too: edited paths whose mode changed as well)."""
    if tree.is_git:
        return _git_changes(tree.root)
    found = []
    for dirpath, dirnames, filenames in os.walk(tree.package_dir):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".dist-info"))
        for f in filenames:
            if f.endswith((".pyc", ".pyo")):
                continue
            rel = Path(dirpath, f).relative_to(tree.root).as_posix()
            repo_path = "python/" + rel
            if read_release(repo_path) != Path(dirpath, f).read_bytes():
                found.append(repo_path)
    present = set(found)
    for repo_path in release_paths():
        if repo_path.startswith(PACKAGE) and repo_path not in present and not tree.path_of(repo_path).exists():
            found.append(repo_path)
    return sorted(found), [], [], []


def _git_changes(root: Path) -> tuple[list[str], list[str], list[str], list[str]]:
    out = _git_bytes(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    paths: list[str] = []
    outside: list[str] = []
    for rec in out.decode("utf-8", "surrogateescape").split("\0"):
        if not rec:
            continue
        path = rec[3:]
        if path.endswith(("/", ".pyc", ".pyo")) or "/__pycache__/" in path:
            continue
        if f"/{STATE_DIR_NAME}/" in f"/{path}" or path.startswith(STATE_DIR_NAME):
            continue
        (paths if path.startswith(PACKAGE) else outside).append(path)
    mode_only, mode_too = [], []
    raw = _git_bytes(root, "diff", "--raw", "-z", "--no-renames", "HEAD").decode("utf-8", "surrogateescape")
    fields = raw.split("\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.split()
        old_mode, new_mode = (parts[0].lstrip(":"), parts[1]) if len(parts) >= 4 else ("", "")
        if old_mode != new_mode and "000000" not in (old_mode, new_mode):
            head = _git_bytes(root, "cat-file", "blob", f"HEAD:{path}", check=False)
            if (root / path).is_file() and head == (root / path).read_bytes():
                mode_only.append(path)
            else:  # imported, its mode would be dropped without a word
                mode_too.append(path)
    return sorted(p for p in paths if p not in mode_only), sorted(outside), sorted(mode_only), sorted(mode_too)


def _git_bytes(root: Path, *args: str, check: bool = True) -> bytes:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True)
    if check and proc.returncode != 0:
        raise BadInput(
            f"{root}: `git {' '.join(args)}` failed: {proc.stderr.decode('utf-8', 'replace').strip()}",
            hint="run it by hand to see why; import reads a checkout's changes through git",
        )
    return proc.stdout if proc.returncode == 0 else b""


def git_release_reader(root: Path) -> Callable[[str], bytes | None]:
    """A checkout's files as its HEAD commit has them (the release it is checked out at)."""

    def read(repo_path: str) -> bytes | None:
        proc = subprocess.run(["git", "cat-file", "blob", f"HEAD:{repo_path}"], cwd=root, capture_output=True)
        return proc.stdout if proc.returncode == 0 else None

    return read


def refuse_uncarried(
    outside: Sequence[str], mode_only: Sequence[str], mode_too: Sequence[str], binary: Sequence[str]
) -> None:
    """Anything a patch cannot carry is refused by name before anything is written (exit 2)."""
    lines = [f"  {p}: outside python/sglang/ (a patch carries only SGLang's package)" for p in outside]
    lines += [f"  {p}: only its mode changed (patches do not carry modes)" for p in mode_only]
    lines += [f"  {p}: its mode changed as well as its text (patches do not carry modes)" for p in mode_too]
    lines += [f"  {p}: binary (a patch carries UTF-8 text)" for p in binary]
    if lines:
        raise BadInput(
            f"import: {len(lines)} change(s) cannot be carried as patches:\n" + "\n".join(lines),
            hint="undo or commit those changes (or move them out of the tree), then run import again; "
            f"name the files to import to leave the others alone (`{prog()} import FILE...`)",
        )


def is_binary(data: bytes | None) -> bool:
    if data is None:
        return False
    if b"\0" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


# -- grouping --------------------------------------------------------------------------------------------------
def parse_groups(specs: Iterable[str]) -> list[tuple[str, list[str]]]:
    """`--group NAME=FILE,FILE`, as typed: (name, files)."""
    out: list[tuple[str, list[str]]] = []
    for spec in specs:
        name, sep, files = spec.partition("=")
        name = name.strip()
        items = [f.strip() for f in files.split(",") if f.strip()]
        if not sep or not items:
            raise BadInput(
                f"--group {spec!r}: expected NAME=FILE[,FILE...]",
                hint="e.g. --group my_fix=python/sglang/srt/server_args.py,python/sglang/srt/models/llama.py",
            )
        if not NAME_RE.fullmatch(name):
            raise BadInput(
                f"--group {spec!r}: {name!r} is not a patch name",
                hint="lower_snake_case, starting with a letter (e.g. my_fix)",
            )
        if name in (n for n, _ in out):
            raise BadInput(f"--group {name} is given twice", hint="list all its files in one --group NAME=A,B")
        out.append((name, items))
    return out


def resolve(given: str, changed: Sequence[str], tree: Tree) -> str:
    """A file as the user named it (repo path, path in the tree, path relative to python/sglang/, or a path
    on disk) -> the repo path of a changed file."""
    candidates = [given, PACKAGE + given, "python/" + given]
    p = Path(given)
    if p.is_absolute() or p.exists():
        try:
            rel = p.resolve().relative_to(tree.root.resolve()).as_posix()
            candidates.insert(0, rel if tree.kind != "installed" else "python/" + rel)
        except ValueError:
            pass
    for c in candidates:
        if c in changed:
            return c
    raise BadInput(
        f"import: {given} is not among the tree's changed files",
        hint="changed files: " + (", ".join(changed) if changed else "(none)"),
    )


def default_name(path: str, taken: set[str]) -> str:
    """A patch name from a file's path: its stem, then parent_stem, then a number, whichever is free."""
    parts = [re.sub(r"[^a-z0-9_]", "_", s.lower()) for s in Path(path).with_suffix("").parts]
    stem = parts[-1].strip("_") or "edit"
    tries = [stem, f"{parts[-2]}_{stem}" if len(parts) > 1 else stem]
    for t in tries:
        t = t if re.match(r"[a-z]", t) else f"p_{t}"
        if t not in taken:
            return t
    n = 2
    while f"{tries[-1]}_{n}" in taken:
        n += 1
    return f"{tries[-1]}_{n}"


def plan(
    edits: Sequence[Edit],
    groups: Sequence[tuple[str, list[str]]],
    m: Manifest,
    tree: Tree,
    owners: Mapping[str, Sequence[str]] | None = None,
) -> list[PlannedPatch]:
    """One patch per file unless grouped; names checked against the manifest before anything is written.
    `owners`: the applied patches that touch each file; a patch edited on top of them requires them."""
    changed = [e.path for e in edits]
    by_path = {e.path: e for e in edits}
    taken = {*m.names, *m.presets, *EMPTY_NAMES}  # one namespace: a set expression reads each of them
    chosen: list[tuple[str, list[str]]] = []
    grouped: dict[str, str] = {}
    for name, files in groups:
        if name in taken:
            what = (
                f"the manifest has a {'patch' if name in m.names else 'preset'} named {name} already ({m.path})"
                if name not in EMPTY_NAMES
                else f"{name} is reserved (a set expression reads it as the empty set)"
            )
            raise BadInput(
                f"--group {name}: {what}",
                hint="choose another name"
                + (" (`refresh NAME` captures edits of an applied patch)" if name in m.names else ""),
            )
        paths = []
        for f in files:
            path = resolve(f, changed, tree)
            if path in grouped:
                raise BadInput(
                    f"--group {name}: {path} is in --group {grouped[path]} already",
                    hint="name each file in one group",
                )
            grouped[path] = name
            paths.append(path)
        taken.add(name)
        chosen.append((name, paths))
    for e in edits:
        if e.path not in grouped:
            name = default_name(e.path, taken)
            taken.add(name)
            chosen.append((name, [e.path]))
    out = []
    for name, paths in chosen:
        mine = tuple(by_path[p] for p in paths)
        overlay = tuple(e.path for e in mine if e.pristine is None and e.old is None)
        diffed = [e for e in mine if e.path not in overlay]
        body = make_diff({e.path: e.old for e in diffed}, {e.path: e.new for e in diffed})
        needs = {n for e in diffed for n in (owners or {}).get(e.path, ())}
        out.append(PlannedPatch(name, mine, overlay, body, tuple(n for n in m.names if n in needs)))
    return out


# -- what is written -------------------------------------------------------------------------------------------
def header(p: PlannedPatch, tree: Tree, today: datetime.date | None = None) -> str:
    """The DEP-3 header the project's patches carry (README: "manifest.yaml")."""
    day = (today or datetime.date.today()).isoformat()
    return (
        f"Description: {describe(p)}\n"
        f" Imported by sglang-overlay from local edits in {tree.root}.\n"
        "Origin: vendor, local edits\n"
        "Forwarded: no\n"
        "Applied-Upstream: no\n"
        f"Last-Update: {day}\n"
        "---\n"
    )


def describe(p: PlannedPatch) -> str:
    names = [Path(f).name for f in p.files]
    return "local edits of " + ", ".join(names)


def _yaml_str(value: str, flow: bool = False) -> str:
    """`value` as YAML reads it back: plain where it is, else double-quoted (a file name with `: `, ` #`, `,`)."""
    import json

    import yaml

    plain = f"[{value}]" if flow else value
    try:
        same = yaml.safe_load(plain) == ([value] if flow else value)
    except yaml.YAMLError:
        same = False
    return value if same else json.dumps(value, ensure_ascii=False)  # YAML refuses JSON's escapes of an emoji


def entry_yaml(p: PlannedPatch) -> str:
    """The manifest entry, as `- name:` block of `patches:` (manifest_edit.add_entries inserts it)."""
    lines = [
        f"  - name: {p.name}\n",
        f"    description: {_yaml_str(describe(p))}\n",
        f"    kind: {p.kind}\n",
        "    category: experimental\n",
        "    default: true\n",
    ]
    if p.overlay:
        lines.append(f"    overlay: [{', '.join(_yaml_str(f, flow=True) for f in p.overlay)}]\n")
    if p.requires:
        lines.append(f"    requires: [{', '.join(p.requires)}]\n")
    lines.append("    upstream: {status: not-forwarded}\n")
    return "".join(lines)


def project_files(p: PlannedPatch, source_dir: Path, tree: Tree) -> dict[Path, bytes]:
    """patches/NAME.patch and overlay/... for one planned patch."""
    out: dict[Path, bytes] = {}
    if p.body:
        out[source_dir / "patches" / f"{p.name}.patch"] = (header(p, tree) + p.body).encode()
    by_path = {e.path: e for e in p.edits}
    for f in p.overlay:
        data = by_path[f].new
        assert data is not None  # an overlay file is one the edit adds
        out[source_dir / "overlay" / f] = data
    return out


def _other(path: Path, data: bytes) -> bool:
    """A project file that is there with other bytes: import never replaces it."""
    if not os.path.lexists(path):
        return False
    return not path.is_file() or path.is_symlink() or path.read_bytes() != data


def leftovers(
    m: Manifest, applied: Iterable[str], pristine: Reader, made: Mapping[str, bytes | None], current: Reader
) -> list[str]:
    """Entries a killed import left: in the manifest, not applied, and the tree holds exactly what they make of
    the release, or, on files applied patches touch, of what those make (the entries' `requires:` all applied).
    Import records them as applied (it does not import them twice). `made`: what the applied set makes of its
    files (the tree holds it)."""
    from .compose import compose
    from .errors import Conflict

    out = []
    applied = set(applied)
    on = m.changes(applied)
    busy = {f for p in on for f in p.files}
    for p in m.changes(m.names):
        if p.name in applied or any(c in applied for c in p.conflicts) or any(p.name in a.conflicts for a in on):
            continue
        if busy & set(p.files) and not (p.requires and set(p.requires) <= applied):
            continue  # on an applied patch's file, only an entry taken on top of it (import's `requires:`)
        base = {f: made[f] if f in busy else pristine(f) for f in p.files}
        if all(current(f) == base[f] for f in p.files):
            continue  # the tree does not carry it
        try:
            got = compose(base, [p]).contents
        except Conflict:
            continue
        if all(got.get(f) == current(f) for f in p.files):
            out.append(p.name)
    return out


# -- doing it --------------------------------------------------------------------------------------------------
def _put_back(manifest: Path, old: bytes, new: bytes, created: Sequence[Path]) -> None:
    """The project as it was before an import that did not happen: its manifest text and none of what it made.
    A manifest edited meanwhile (by hand: neither text) is left, with the files its new entries name: the next
    import finishes that one (`leftovers`)."""
    from .fsio import atomic_write, unlink_quietly

    now = manifest.read_bytes()
    if now not in (old, new):
        return
    if now != old:
        atomic_write(manifest, old)
    for path in reversed(created):
        if path.is_dir() and not path.is_symlink():
            try:
                os.rmdir(path)
            except OSError:
                pass  # not empty: something else is in it now
        else:
            unlink_quietly(path)


class Imported(Record):
    patches: tuple[PlannedPatch, ...]  # the new entries, in manifest order
    finished: tuple[str, ...]  # entries a killed import had written, recorded as applied now
    carried: tuple[str, ...]  # what the tree carries after it
    fingerprint: str | None
    manifest: Path


def import_edits(
    ctx: Context, txn: Transaction, files: Sequence[str], groups: Sequence[tuple[str, list[str]]], spelling: Spelling
) -> Imported:
    """Turn the tree's local edits into patches and record the tree as carrying them. The project files are
    written first (new names only: nothing of the project is replaced), the manifest last and atomically, then
    the tree's state in one transaction; a kill between the manifest and the state is finished by running
    import again (`leftovers`); a failure or a signal before the tree's change puts the project back.
    `txn`: the tree, locked and recovered (api.open_tree)."""
    from .manifest import load_manifest

    with _project_locked(ctx.manifest.path):
        # read again under the lock: another import (from another tree) may have added entries since
        m = load_manifest(ctx.manifest.path, spelling=ctx.spelling)
        return _import_locked(ctx, txn, m, files, groups, spelling)


@contextmanager
def _project_locked(manifest: Path) -> Iterator[None]:
    """The project's directory locked (flock on its descriptor, whose inode the manifest's atomic replacement
    keeps): two imports from two trees would each write back the manifest they read, one's entries lost."""
    import fcntl

    try:
        fd = os.open(manifest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # a directory without read permission: its files can still be written
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"sglang-overlay: waiting for another import into {manifest.parent}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:  # NFS locks only a descriptor open for writing (EBADF): run unlocked, as before
            if e.errno not in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)


def _import_locked(
    ctx: Context,
    txn: Transaction,
    m: Manifest,
    files: Sequence[str],
    groups: Sequence[tuple[str, list[str]]],
    spelling: Spelling,
) -> Imported:
    from .compose import compose
    from .fsio import atomic_write, missing_dirs
    from .manifest import load_manifest
    from .manifest_edit import add_entries
    from .switch import switch
    from .treeread import read_file

    tree = ctx.tree
    state = txn.state
    m.check_carried(state.applied)
    release: Reader
    paths_of: Callable[[], Iterable[str]]
    if tree.is_git:
        release, paths_of = git_release_reader(tree.root), tuple
    else:
        from .fetch import WheelSource, pinned_wheel

        wheel = WheelSource(pinned_wheel(m.pin))
        release, paths_of = wheel.read, wheel.paths
    paths, outside, mode_only, mode_too = changed_paths(tree, paths_of, release)
    paths = [p for p in paths if p != IDENTITY_PATH]  # the tool writes it for every set
    if files:  # only the named ones: the rest of the tree's changes are left alone
        every = paths + outside + mode_only
        named = {resolve(f, every, tree) for f in files}
        paths, outside, mode_only, mode_too = (
            [p for p in group if p in named] for group in (paths, outside, mode_only, mode_too)
        )

    def pristine(f: str) -> bytes | None:
        rec = state.files.get(f)
        if rec is None:
            return release(f)
        return txn.store.get(rec.base) if rec.base is not None else None

    applied = m.changes(state.applied)
    made = compose({f: pristine(f) for p in applied for f in p.files}, applied).contents if applied else {}
    edits = []
    for f in paths:
        now, old = read_file(tree, f), made.get(f) if f in state.files else pristine(f)
        if now != old:
            edits.append(Edit(f, old, now, pristine(f)))
    refuse_uncarried(outside, mode_only, mode_too, [e.path for e in edits if is_binary(e.old) or is_binary(e.new)])
    done = leftovers(m, state.applied, pristine, made, lambda f: read_file(tree, f))
    done_files = {f for n in done for f in m.patch(n).files}
    edits = [e for e in edits if e.path not in done_files]
    if groups and not edits:
        raise BadInput("import --group: the tree has no edits to group", hint="edit the files first")
    owners: dict[str, list[str]] = {}
    for a in applied:
        for f in a.files:
            owners.setdefault(f, []).append(a.name)
    planned = plan(edits, groups, m, tree, owners)
    source_dir = m.path.parent
    created: list[Path] = []  # files and directories of the project this import makes, in order
    if planned:
        # a file of the same bytes is what a killed import wrote before its manifest: written again, not refused
        taken = [f for p in planned for f, data in project_files(p, source_dir, tree).items() if _other(f, data)]
        if taken:
            raise BadInput(
                "import: the project has these files already: " + ", ".join(map(str, taken)),
                hint="name the patches otherwise (--group NAME=FILE), or move the files away",
            )
    if not planned and not done:
        return Imported((), (), tuple(state.applied), state.fingerprint, m.path)
    old_text = m.path.read_bytes()
    new_text = b""
    try:
        new_m = m
        if planned:
            text = old_text.decode("utf-8")  # the manifest loaded: UTF-8
            added = add_entries(text.replace("\r\n", "\n"), "".join(entry_yaml(p) for p in planned), str(m.path))
            new_text = (added.replace("\n", "\r\n") if "\r\n" in text else added).encode()  # its line endings kept
            for p in planned:
                for path, data in project_files(p, source_dir, tree).items():
                    if os.path.lexists(path):  # the same bytes (checked above): a killed import's, or another entry's
                        continue
                    created += [*missing_dirs(path.parent, source_dir), path]  # before: a signal may come in the write
                    path.parent.mkdir(parents=True, exist_ok=True)
                    atomic_write(path, data)
            atomic_write(m.path, new_text)
            new_m = load_manifest(m.path, spelling=ctx.spelling)
            for p in planned:  # each new patch must make the edited bytes, or the tree would be rewritten
                new_patch = new_m.patch(p.name)
                assert not isinstance(new_patch, UpstreamedPatch)  # import writes diff and overlay entries
                got = compose({e.path: e.old for e in p.edits}, [new_patch]).contents
                wrong = [e.path for e in p.edits if got.get(e.path) != e.new]
                if wrong:
                    raise BadInput(
                        f"import: {p.name} does not give back {', '.join(wrong)} byte for byte",
                        hint="report this; nothing was imported",
                    )
        names = (*state.applied, *done, *(p.name for p in planned))
        bases = {e.path: e.pristine for e in edits if e.path not in state.files}
        bases |= {f: pristine(f) for n in done for f in new_m.patch(n).files if f not in state.files}
        outcome = switch(txn, new_m, names, op="import", spelling=spelling, bases=bases)
    except BaseException:
        # the tree's change did not happen (refused, failed, rolled back, interrupted): the project's neither;
        # one that did (a signal just after its commit) keeps the entries the tree's state now names
        if planned and not {p.name for p in planned} <= set(txn.state.applied):
            _put_back(m.path, old_text, new_text, created)
        raise
    return Imported(tuple(planned), tuple(done), outcome.target, outcome.fingerprint, m.path)
