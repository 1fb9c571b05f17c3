"""Repository paths (python/sglang/...): the one rule for what a patch, the state or the journal may name.

Every path a patch may touch lives in the SGLang package: that is the part of the upstream repository that
exists in all three tree kinds (a checkout, an installed package, the embedded release tree).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from .errors import BadInput, PathEscape
from .fsio import TMP_SUFFIX
from .pathlen import too_long

REPO_PACKAGE_PREFIX = "python/sglang/"
STATE_DIR_NAME = ".sglang-overlay"
STATE_NAME = "state.json"  # in the state directory
JOURNAL_NAME = "journal.json"
_DRIVE = re.compile(r"[A-Za-z]:")
_CONTROL = frozenset(map(chr, [*range(32), 0x7F]))
# Generated into the tree so the running server (and `pip show` of a built wheel) can say what it carries.
IDENTITY_PATH = "python/sglang/_overlay_build.py"
IDENTITY_OWNER = "(sglang-overlay identity)"  # the owner state.json records for it, where patches are named


def check_repo_path(path: str, where: str) -> str:
    """A tree path must stay inside the SGLang package: relative, no '..', no backslashes."""
    if not isinstance(path, str) or not path:
        raise PathEscape(f"{where}: path {path!r} is not a non-empty string")
    if path.startswith("/") or _DRIVE.match(path) or "\\" in path:
        raise PathEscape(
            f"{where}: path {path!r} is absolute",
            hint="use a path relative to the SGLang repository root, e.g. python/sglang/srt/...",
        )
    # split, not PurePosixPath: state.json names every managed file, and status reads it each time
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise PathEscape(
            f"{where}: path {path!r} escapes the tree or is not normalised",
            hint="paths may not contain '..' or '.' components",
        )
    if not _CONTROL.isdisjoint(path):
        raise PathEscape(
            f"{where}: path {path!r} holds a control character (a newline, a tab, ...)",
            hint="name the file exactly as it is in the repository",
        )
    why = too_long(path)
    if why:  # no file of that name can exist: writing it failed late, as an OS error (exit 1)
        raise BadInput(
            f"{where}: path {path[:60]!r}...: {why}", hint="name the file exactly as it is in the repository"
        )
    if not path.startswith(REPO_PACKAGE_PREFIX):
        raise PathEscape(
            f"{where}: path {path!r} is outside {REPO_PACKAGE_PREFIX}",
            hint="patches may only change the SGLang package; other paths do not exist in an installed tree",
        )
    return path


def check_patchable(path: str, where: str) -> str:
    """A path a patch may write: a repository path that is not one of the tool's own files."""
    check_repo_path(path, where)
    if path == IDENTITY_PATH:
        raise PathEscape(
            f"{where}: {path} is reserved: sglang-overlay writes the identity module there",
            hint="name the file differently",
        )
    parts = PurePosixPath(path).parts
    if STATE_DIR_NAME in parts or parts[-1].endswith(TMP_SUFFIX):
        raise PathEscape(
            f"{where}: {path} is reserved for sglang-overlay's own state and temp files",
            hint="name the file differently",
        )
    return path
