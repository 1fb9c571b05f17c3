"""One error hierarchy. Every user-facing failure is an OverlayError; the CLI maps its class to an exit code."""

from __future__ import annotations

import errno
import os

EXIT_OK = 0
EXIT_CONFLICT = 1  # a patch does not apply, drift, a failed check, the OS refused a write (rolled back)
EXIT_BAD_INPUT = 2  # malformed manifest, patch, state or journal; usage; wrong version; path escape
EXIT_INTERNAL = 3  # a bug in this tool
EXIT_OUTPUT_LOST = 4  # the command did its work (a change is made), but its output could not be written
EXIT_INTERRUPTED = 130


class OverlayError(Exception):
    """A failure the user can act on: `str(err)` names the file and says the fix."""

    exit_code = EXIT_CONFLICT

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class BadInput(OverlayError):
    exit_code = EXIT_BAD_INPUT


class ManifestError(BadInput):
    """The manifest (or a file it names) is invalid. Raised before any tree is touched."""


class ProjectNotFound(BadInput):
    """No manifest.yaml was named (--project, --manifest) or found upward from the current directory."""


class PatchSetError(BadInput):
    """A patch-set expression or selection (NAME..., --all, --set, --patches) does not name a set of the manifest."""


class PathEscape(BadInput):
    """A patch or overlay file would write outside the tree."""


class VersionMismatch(BadInput):
    """The tree holds another SGLang version than the manifest pins."""


class FetchError(BadInput):
    """The pinned release could not be downloaded or does not match its recorded hash."""


class TreeNotFound(BadInput):
    """No SGLang tree was given or found."""


class StateError(BadInput):
    """The tool's own files in a tree (state.json, the journal, saved copies) are damaged or not what it wrote."""


class PinNotChecked(BadInput):
    """`check --all-pins`: a pin could not be checked at all (its release, its manifest); every other was, and
    each outcome is said."""


class Conflict(OverlayError):
    """A patch does not apply to the tree (exactly, with zero fuzz)."""


class Drift(OverlayError):
    """A file the tool wrote was changed by hand since; refusing to overwrite it."""


class CheckFailed(OverlayError):
    """`check` found at least one failure (all are listed before this is raised)."""


class ChildFailed(OverlayError):
    """A process the tool started (the server) failed."""


class OSFailure(OverlayError):
    """The operating system refused a read or a write: a full disk, a read-only file system, permissions."""

    def __init__(self, message: str, *, hint: str | None = None, error: OSError | None = None):
        super().__init__(message, hint=hint)
        # the OS's own error, its filename the path refused: a caller that knows better what that path is to the
        # user (a scratch copy in $TMPDIR, not the tree) says it again in those terms
        self.error = error


_FIXES = {
    errno.ENOSPC: "free space on that file system (`df -h {where}`), then run the command again",
    errno.EDQUOT: "your disk quota is used up: free space (`quota -s`), then run the command again",
    errno.EROFS: "the file system is mounted read-only: remount it read-write, or {elsewhere}",
    errno.EACCES: "you lack permission there: run as the owner of {where}, or fix its permissions (`ls -ld {where}`)",
    errno.EPERM: "the system does not permit it: the file or directory may be immutable (`lsattr -d {where}`, then "
    "`chattr -i`) or owned by another user",
    errno.EIO: "the disk reported an I/O error: check it (`dmesg`) before going on",
    errno.EMFILE: "too many open files: raise the limit (`ulimit -n`) and run the command again",
    errno.ENOENT: "a directory vanished while the command ran: run it again",
}


def writable_copy(tree_arg: str) -> str:
    """Where the work can go instead when a file system is full or read-only: for a tree, a copy of it, named by
    `tree_arg` as its caller names a tree (the command line's `--tree DIR`, the API's tree=)."""
    return f"work on a writable copy ({tree_arg})"


WRITABLE_COPY = writable_copy("`--tree DIR`")
# the errors that writing somewhere else gets around
_ELSEWHERE = (errno.ENOSPC, errno.EDQUOT, errno.EACCES)


def os_failure(
    err: OSError,
    what: str,
    outcome: str,
    *,
    path: os.PathLike[str] | str | None = None,
    elsewhere: str | None = None,
    where: os.PathLike[str] | str | None = None,
    copy: str = WRITABLE_COPY,
) -> OSFailure:
    """`what` the tool was doing (e.g. "cannot write"), `outcome` what state the tree is in now. `path`: the file
    the user knows, named instead of the OS's (a temp file's, or none: a failed write() names no file);
    `elsewhere`: where else the output can go, when that is not a copy of the tree; `where`: the directory the
    fix's commands name, when not the path's own (a mount point is on another file system than its parent);
    `copy`: the way to a writable copy of the tree, in the caller's words (writable_copy)."""
    shown = path if path is not None else err.filename
    path = str(shown) if shown else "?"
    name = errno.errorcode.get(err.errno or 0, "error")
    if where is not None:
        where = _existing(str(where))
    else:
        where = _existing(os.path.dirname(path) or path) if path != "?" else "."
    fix = _FIXES.get(err.errno or 0, "fix the cause named above, then run the command again")
    if err.errno == errno.ENOSPC and _out_of_inodes(where):
        fix = _NO_INODES
    fix = fix.format(where=where, elsewhere=elsewhere or copy)
    if elsewhere and err.errno in _ELSEWHERE:
        fix += f"; or {elsewhere}"
    return OSFailure(f"{what} {path}: {err.strerror or err} ({name}); {outcome}", hint=fix, error=err)


_NO_INODES = (
    "the file system has no free inodes (files) left, whatever `df -h` says: `df -i {where}`; remove files there"
)
_NO_INODES += ", then run the command again"


def _out_of_inodes(where: str) -> bool:
    try:
        st = os.statvfs(where)
    except OSError:
        return False
    return st.f_files > 0 and st.f_favail == 0


def _existing(where: str) -> str:
    # `df -h DIR` / `ls -ld DIR` of a directory not made yet (an --out that mkdir could not make) fails: name the
    # nearest one that exists, on the file system the new one would have been on
    while where and not os.path.lexists(where):
        parent = os.path.dirname(where.rstrip("/"))
        where = parent if parent != where else ""
    return where or "."


def os_fix_in(text: str, where: str) -> str | None:
    """The fix for an OS error another program (git) reports in its own words: the system's text for it."""
    for code, fix in _FIXES.items():
        if code != errno.ENOENT and os.strerror(code) in text:
            return fix.format(where=where, elsewhere=WRITABLE_COPY)
    return None
