"""One error hierarchy. Every user-facing failure is an OverlayError; the CLI maps its class to an exit code."""
from __future__ import annotations

EXIT_OK = 0
EXIT_CONFLICT = 1  # a patch does not apply, drift, a failed check
EXIT_BAD_INPUT = 2  # malformed manifest, usage, wrong version, path escape
EXIT_INTERNAL = 3  # a bug in this tool
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


class PathEscape(BadInput):
    """A patch or overlay file would write outside the tree."""


class VersionMismatch(BadInput):
    """The tree holds another SGLang version than the manifest pins."""


class FetchError(BadInput):
    """The pinned release could not be downloaded or does not match its recorded hash."""


class TreeNotFound(BadInput):
    """No SGLang tree was given or found."""


class Conflict(OverlayError):
    """A patch does not apply to the tree (exactly, with zero fuzz)."""


class Drift(OverlayError):
    """A file the tool wrote was changed by hand since; refusing to overwrite it."""


class CheckFailed(OverlayError):
    """`check` found at least one failure (all are listed before this is raised)."""


class ChildFailed(OverlayError):
    """A process the tool started (the server) failed."""
