"""The files the bench derives outside its results store (report.md, the plots, the --adjust variants,
command.txt, hostprobe's --json): each written whole or not at all, through the package's one atomic write.

Why not write_text/savefig to the name: both truncate first, so a kill, Ctrl-C or a full disk mid-write left a
report or plot cut short, which a reader (or `bench report` on the next look) took for the run's own."""

from __future__ import annotations

from pathlib import Path

from .errors import WriteFailed


def write_whole(path: Path, data: bytes, fix: str) -> None:
    """fsio.atomic_write: a temp file beside `path` (a fixed name the next write replaces), fsync'ed, renamed
    over it; a kill leaves the previous file or the new one. An OS error is WriteFailed naming the file, the
    error and `fix`, with the previous file as it was and no temp left."""
    from sglang_overlay.fsio import atomic_write

    try:
        atomic_write(path, data)
    except OSError as e:
        # the fix in the message itself: the bench's commands print str(error), not a hint line
        raise WriteFailed(f"cannot write {path}: {e.strerror or e}; {fix}; {path} is as it was") from None


def png_bytes(fig, dpi: int) -> bytes:
    """A matplotlib figure as PNG bytes, for write_whole (savefig to a file name would truncate it first)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
