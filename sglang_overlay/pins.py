"""Several pins in one project: the top-level manifest.yaml is the default pin; another release's set is
the complete project directory pins/<version>/ (manifest.yaml, patches/, overlay/, the same grammar).

Why directories, not patch-package's one file per package version or a git branch per release: a pin's
set is more than its diffs (which patches exist, their order, proofs, presets, env), and each release
rewrites some of that, so the unit that changes together is the whole project directory. Per-version patch
files cannot say that an entry became `upstreamed` on one release only; a branch per release cannot be
checked in one CI run, and a fix must be cherry-picked between branches by hand, while here `check
--all-pins` proves every pin in one run and a diff of two pin directories shows what a rebase changed."""

from __future__ import annotations

from pathlib import Path

from .errors import BadInput, ManifestError
from .manifest import Manifest, load_manifest
from .progname import prog
from .rebase_state import PINS_DIR, VERSION_RE


def pin_manifest_path(top: Manifest, version: str) -> Path:
    """The manifest of the pin `version`: the top level when it is the top level's pin."""
    if version == top.pin.version:
        return top.path
    if not VERSION_RE.fullmatch(version or ""):
        raise BadInput(f"--pin {version!r} is not a release version", hint="e.g. `--pin 0.5.23`")
    path = top.project_root / PINS_DIR / version / "manifest.yaml"
    if not path.is_file():
        known = ", ".join([top.pin.version, *(d.name for d in _pin_dirs(top))])
        raise BadInput(
            f"--pin {version}: no pin for {version} in {top.project_root} (no {path})",
            hint=f"pins here: {known}; `{prog()} rebase {version}` makes one",
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
            f"none), or remove it and `{prog()} rebase {version}` to make the pin for {version}",
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


def all_pins(top: Manifest) -> list[tuple[str, Path]]:
    """(version, manifest path) of every pin of the project, the top level's first."""
    out = [(top.pin.version, top.path)]
    for d in _pin_dirs(top):
        out.append((d.name, _pins_its_version(_inside(top, d / "manifest.yaml", f"{PINS_DIR}/{d.name}"), d.name)))
    return out


def _pin_dirs(top: Manifest) -> list[Path]:
    folder = top.project_root / PINS_DIR
    if not folder.is_dir():
        return []
    return [
        d
        for d in sorted(folder.iterdir())
        if not d.name.startswith(".") and (d / "manifest.yaml").is_file() and d.name != top.pin.version
    ]
