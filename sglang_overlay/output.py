"""The CLI's stdout and stderr, guarded: a write the OS refuses (a full disk, a descriptor closed with `>&-`) is
noted and dropped, never raised into the middle of a command, so that a change is never reported as failed
because its report could not be written. The CLI says at the end what was lost (exit 4)."""

from __future__ import annotations

import errno
import io
import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Any

_changed: list[Path] = []  # the trees a command of this process changed (a transaction committed)


class Guarded(io.TextIOBase):
    def __init__(self, label: str, stream: Any, fd: int | None = None):
        self.label = label
        self.stream = stream
        self.closed_at_start = stream is None
        self.reserved = fd  # closed at start: the number, now on /dev/null (a child's output goes there)
        if stream is None and fd is not None:  # keep the number: a file opened later must not become stdout
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        if self.error is None and text:
            if self.closed_at_start:
                self.error = OSError(errno.EBADF, "the descriptor was closed before the command started")
            else:
                try:
                    self.stream.write(text)
                except (OSError, ValueError) as e:
                    self._lost(e)
        return len(text)

    def flush(self) -> None:
        if self.error is None and not self.closed_at_start:
            try:
                self.stream.flush()
            except (OSError, ValueError) as e:
                self._lost(e)

    def _lost(self, err: OSError | ValueError) -> None:
        self.error = err if isinstance(err, OSError) else OSError(errno.EBADF, str(err))
        # what is still buffered goes nowhere, so that no later flush (the interpreter's, at exit) fails again
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def isatty(self) -> bool:
        try:
            return not self.closed_at_start and self.stream.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        if self.closed_at_start:
            if self.reserved is None:
                raise io.UnsupportedOperation("the descriptor was closed before the command started")
            return self.reserved
        return int(self.stream.fileno())

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", None) or "utf-8"


def guard() -> tuple[Any, Any]:
    """Wrap sys.stdout and sys.stderr; returns the originals, for `unguard`."""
    saved = sys.stdout, sys.stderr
    _changed.clear()
    sys.stdout = Guarded("stdout", sys.stdout, 1 if sys.stdout is None else None)
    sys.stderr = Guarded("stderr", sys.stderr, 2 if sys.stderr is None else None)
    return saved


def unguard(saved: tuple[Any, Any]) -> None:
    for name, old in zip(("stdout", "stderr"), saved, strict=True):
        now = getattr(sys, name)
        if isinstance(now, Guarded):
            now.flush()
            # a stream that failed stays replaced: the interpreter's last flush must have nothing to fail on
            setattr(sys, name, old if now.error is None and old is not None else open(os.devnull, "w"))  # noqa: SIM115


def lost() -> list[tuple[str, OSError]]:
    """The streams that dropped output, and why; a reader that left (`| head`, EPIPE) took what it wanted."""
    found = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, Guarded):
            stream.flush()
            if stream.error is not None and stream.error.errno != errno.EPIPE:
                found.append((stream.label, stream.error))
    return found


def note_change(tree: Path) -> None:
    """A transaction committed in this process: the tree holds the change whatever the output does."""
    _changed.append(tree)


def changed() -> tuple[Path, ...]:
    return tuple(_changed)
