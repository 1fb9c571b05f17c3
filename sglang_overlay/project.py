"""Which project (manifest.yaml, patches/, overlay/) a command works on, found the way pre-commit finds its config.

In order: --manifest FILE; --project DIR (DIR/manifest.yaml); $SGLANG_OVERLAY_MANIFEST; the nearest manifest.yaml
in the current directory or above it; for `python apply.py` only, the project that holds that apply.py (so it
works from anywhere, as it always did). Nothing is looked up next to the installed package: a wheel holds code,
not a user's patches. The embedded tree (.sglang/) and the tree state are placed relative to the project found.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BadInput, ProjectNotFound
from .pathlen import too_long
from .progname import prog
from .spelling import CLI, Spelling

MANIFEST_NAME = "manifest.yaml"
MANIFEST_ENV = "SGLANG_OVERLAY_MANIFEST"


def _nonempty(value: str | None, arg: str, what: str, spelling: Spelling) -> str | None:
    if value is not None and not value.strip():
        raise BadInput(
            f"{spelling.about(arg)} is empty (an unset shell variable?)",
            hint=f"pass the {what}, or leave {spelling.arg(arg)} out to search upward",
        )
    return value


def find_upward(start: Path) -> Path | None:
    for d in (start, *start.parents):
        if (d / MANIFEST_NAME).is_file():
            return d / MANIFEST_NAME
    return None


def manifest_path(
    *,
    manifest: str | None = None,
    project: str | os.PathLike[str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
    spelling: Spelling = CLI,
) -> Path:
    """The manifest to load. `home`: the project an entry script belongs to (apply.py's own directory).
    `spelling`: the caller's words for --manifest and --project (the API's manifest= and project=)."""
    if _nonempty(manifest, "manifest", "manifest's path", spelling):
        return Path(manifest)  # type: ignore[arg-type]
    if project is not None:
        _nonempty(os.fspath(project), "project", "project directory", spelling)
        given = Path(project) / MANIFEST_NAME
        if not given.is_file():
            said = f"--project {project}" if spelling.cli else f"{spelling.about('project')}{os.fspath(project)!r}"
            raise ProjectNotFound(
                f"{said}: there is no {given}",
                hint=f"pass the directory that holds {MANIFEST_NAME}, patches/ and overlay/",
            )
        return given
    if os.environ.get(MANIFEST_ENV):
        why = too_long(os.environ[MANIFEST_ENV])
        if why:
            raise ProjectNotFound(f"{MANIFEST_ENV}: {why}", hint=f"set {MANIFEST_ENV} to the manifest file's path")
        return Path(os.environ[MANIFEST_ENV])
    start = (cwd or Path.cwd()).absolute()
    found = find_upward(start)
    if found is None and home is not None and (home / MANIFEST_NAME).is_file():
        found = home / MANIFEST_NAME
    if found is None:
        project_dir = f"a project (a directory with {MANIFEST_NAME}, patches/, overlay/)"
        if spelling.cli:
            hint = (
                f"run {prog()} inside {project_dir}, or pass --project DIR (or --manifest FILE, or set {MANIFEST_ENV})"
            )
        else:
            hint = f"pass project= (or manifest=, or set {MANIFEST_ENV}), or call it from inside {project_dir}"
        raise ProjectNotFound(f"no {MANIFEST_NAME} in {start} or any directory above it", hint=hint)
    return found
