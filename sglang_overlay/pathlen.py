"""Path names the file system cannot hold. Said before the path is used: the OS's ENAMETOOLONG names neither the
option nor the manifest key the path came from, and it surfaced as a failed write (exit 1) instead of bad input."""

from __future__ import annotations

import os
from pathlib import Path

# Linux's limits. A file system with a lower one (eCryptfs: 143) still ends in ENAMETOOLONG, which the CLI says is
# bad input too, naming the path only.
NAME_MAX, PATH_MAX = 255, 4096


def too_long(path: str | os.PathLike[str]) -> str | None:
    """Why `path` cannot name a file (a component, or the whole, longer than the OS allows), or None."""
    raw = os.fsencode(os.fspath(path))
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX:
            shown = part[:24].decode(errors="replace")
            return f"the name {shown}... is {len(part)} bytes long; a file name may have at most {NAME_MAX}"
    if len(raw) >= PATH_MAX:
        return f"the path is {len(raw)} bytes long; a path must be shorter than {PATH_MAX}"
    return None


def path_text(text: str) -> str:
    """argparse type of an option naming a path: one too long for the OS is a usage error naming the option."""
    why = too_long(text)
    if why:
        import argparse  # loaded already by the CLI that calls this

        raise argparse.ArgumentTypeError(f"{why}; name a shorter path")
    return text


def path_arg(text: str) -> Path:
    return Path(path_text(text))
