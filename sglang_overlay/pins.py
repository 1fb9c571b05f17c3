"""Several pins in one project: the top-level manifest.yaml is the default pin; another release's set is
the complete project directory pins/<version>/ (manifest.yaml, patches/, overlay/, the same grammar).

Why directories, not patch-package's one file per package version or a git branch per release: a pin's
set is more than its diffs (which patches exist, their order, proofs, presets, env), and each release
rewrites some of that, so the unit that changes together is the whole project directory. Per-version patch
files cannot say that an entry became `upstreamed` on one release only; a branch per release cannot be
checked in one CI run, and a fix must be cherry-picked between branches by hand, while here `check
--all-pins` proves every pin in one run and a diff of two pin directories shows what a rebase changed."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from .errors import BadInput, ManifestError
from .manifest import Manifest, load_manifest
from .pinentry import broken_link, entry_problem, name_problem, pin_entries, refuse_entry
from .progname import prog
from .rebase_state import PINS_DIR, VERSION_RE
from .tree import Tree, carried, embedded_path


def pin_manifest_path(top: Manifest, version: str) -> Path:
    """The manifest of the pin `version`: the top level when it is the top level's pin."""
    if version != top.pin.version and not VERSION_RE.fullmatch(version or ""):
        raise BadInput(f"--pin {version!r} is not a release version", hint="e.g. `--pin 0.5.23`")
    refuse_entry(top, version)  # not "no pin: `rebase` makes one": the rebase refuses the entry too
    if version == top.pin.version:
        return top.path
    path = top.project_root / PINS_DIR / version / "manifest.yaml"
    if not path.is_file():
        raise BadInput(
            f"--pin {version}: no pin for {version} in {top.project_root} (no {path})",
            hint=f"pins here: {', '.join(pin_versions(top))}; `{prog(pin=False)} rebase {version}` makes one"
            + _carrying_tree(top.project_root, version),
        )
    return _pins_its_version(_inside(top, path, f"--pin {version}"), version)


def _pins_its_version(path: Path, version: str) -> Path:
    """The directory's name is the one thing `--pin` and `check --all-pins` go by: a copy of another pin's
    directory (its manifest pinning that release) would be used, and reported green, as the wrong release."""
    pinned = load_manifest(path).pin.version
    if pinned != version:
        raise ManifestError(
            f"{path}: pin.version is {pinned}, but its directory names the pin for {version}",
            hint=f"a pin's directory is named after its release: rename it to {PINS_DIR}/{pinned} (if there is "
            f"none), or remove it and `{prog(pin=False)} rebase {version}` to make the pin for {version}",
        )
    return path


def _inside(top: Manifest, path: Path, label: str) -> Path:
    """A pin's directory is part of the project: one linked out of it had been read (and refreshed) there."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a looping link: its load says so
        return path
    if not real.is_relative_to(top.project_root.resolve()):
        raise BadInput(
            f"{label}: {path.parent} must be a path inside the project {top.project_root} (it leads to {real.parent})",
            hint=f"copy that pin's directory into {top.project_root / PINS_DIR} instead of linking it",
        )
    return path


def all_pins(top: Manifest) -> list[str]:
    """The release of every pin of the project, the top level's first. Each is judged when it is selected
    (`pin_manifest_path`), so that `check --all-pins` reports one that cannot be used (no manifest, unreadable,
    malformed) under its release and checks the rest. An entry that no release can report is refused here, before
    any pin is checked: its name is no release, or it is the top level's, whose result it would take the place of."""
    out = [top.pin.version]
    for d in pin_entries(top):
        problem = name_problem(top, d)
        if problem is not None:
            raise problem
        out.append(d.name)
    return out


def listed_manifest_path(top: Manifest, version: str) -> Path:
    """The manifest of a pin `all_pins` listed, judged as `--pin` judges it (its own words for what it lacks)."""
    if version == top.pin.version:
        return top.path
    d = top.project_root / PINS_DIR / version
    problem = entry_problem(top, d)
    if problem is not None:
        raise problem
    return _pins_its_version(_inside(top, d / "manifest.yaml", f"{PINS_DIR}/{version}"), version)


def pin_versions(top: Manifest) -> list[str]:
    """The releases the project has a pin for, the top level's first (their manifests not loaded). Only for
    messages: a directory without its manifest is no pin to name there; selecting it says what it lacks."""
    try:
        return [top.pin.version, *(d.name for d in pin_entries(top) if entry_problem(top, d) is None)]
    except BadInput:  # pins/ unusable or unreadable: selecting a pin says so, a message about another thing need not
        return [top.pin.version]


def _carrying_tree(project_root: Path, version: str) -> str:
    """The pin gone (removed by hand, or never renamed into place) while its embedded tree still carries its
    patches: `rebase` refuses that tree until it is pristine, so the way to make it so is said here."""
    tree = embedded_path(project_root, version)
    what = carried(Tree(tree, "embedded").state_dir) if (tree / "python" / "sglang").is_dir() else None
    if not what:
        return ""
    return (
        f"; its tree {tree} still carries {', '.join(what)}: `{prog(pin=False)} --tree {tree} revert --all` takes that "
        "out from what the tree recorded, no pin needed"
    )


def refuse_linked_out(project_root: Path, version: str) -> None:
    """Before a rebase does any work: it builds the new pin under pins/ and renames it to pins/VERSION, so a
    pins/ linked out of the project put the new pin where `--pin` refuses it, and a link at pins/VERSION made
    the final rename fail (ENOTDIR) once every step was done."""
    root = os.path.realpath(project_root)
    folder, target = project_root / PINS_DIR, project_root / PINS_DIR / version
    if os.path.islink(folder) and not _within(os.path.realpath(folder), root):
        raise BadInput(
            f"rebase {version}: {folder} is a symbolic link to {os.path.realpath(folder)}, outside the project "
            f"{project_root}: the new pin would be made there, and `--pin {version}` refuses a pin linked out "
            "of the project",
            hint=f"make {folder} a directory of the project (`rm {_q(folder)} && mkdir {_q(folder)}`, then copy in the "
            "pins it led to), then rebase again",
        )
    staging = folder / f".rebase-{version}"
    if os.path.islink(staging):  # the new pin is built there: through a link it would be built elsewhere
        raise BadInput(
            f"rebase {version}: the staging directory {staging} is a symbolic link (to {os.path.realpath(staging)}):"
            " the rebase builds the new pin there and makes that directory itself",
            hint=f"remove the link (`rm {_q(staging)}`; what it leads to is not touched), then `{prog()} rebase "
            "--abort` and start again",
        )
    if os.path.islink(target):
        real, there = os.path.realpath(target), os.path.exists(target)
        if _within(real, root) and there:
            return  # a pin linked within the project is a pin (`--pin` takes it): _refuse_taken names it
        link = broken_link(target)
        if link is not None and link.why == "denied" and _within(real, root):  # maybe a pin: not ours to remove
            raise BadInput(
                f"rebase {version}: {target} is {link.said}",
                hint=f"{link.reach}, or run as a user who may; or remove the link (`rm {_q(target)}`) and rebase again",
            )
        said = link.said if link else f"a symbolic link to {real}"  # a loop: no target to name, none outside
        keep = (
            f"; to make what it leads to the pin for {version} instead, copy it in its place "
            f"(`rm {_q(target)} && cp -r {_q(real)} {_q(target)}`)"
            if there
            else ""
        )
        raise BadInput(
            f"rebase {version}: {target} is {said}"
            + ("" if _within(real, root) else f", outside the project {project_root}")
            + f": the rebase renames the new pin to {target}, and a pin's directory is part of the project",
            hint=f"remove the link (`rm {_q(target)}`) and rebase again{keep}",
        )


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _q(path: str | os.PathLike[str]) -> str:
    """A path as a hint's command must hold it to be pasted: a space would make `rm` remove two other things."""
    return shlex.quote(os.fspath(path))
