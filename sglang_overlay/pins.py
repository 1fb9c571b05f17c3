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

from .errors import BadInput
from .manifest import Manifest
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
        known = ", ".join(v for v, _ in all_pins(top))
        raise BadInput(
            f"--pin {version}: no pin for {version} in {top.project_root} (no {path})",
            hint=f"pins here: {known}; `{prog()} rebase {version}` makes one",
        )
    return _inside(top, path, f"--pin {version}")


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
    folder = top.project_root / PINS_DIR
    if folder.is_dir():
        for d in sorted(folder.iterdir()):
            if not d.name.startswith(".") and (d / "manifest.yaml").is_file() and d.name != top.pin.version:
                out.append((d.name, _inside(top, d / "manifest.yaml", f"{PINS_DIR}/{d.name}")))
    return out
