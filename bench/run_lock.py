"""One measuring process per run dir: an flock on its results.jsonl, held until the process exits.

Why: two `bench ab` (or a --resume beside a running one) on one out dir both take the next free round, so a
duet would pair one process's start of an arm with the other's start of the other arm, and their servers would
bind the same ports. The lock is on the store itself (no lock file left in a recorded run dir); the kernel drops
it when the holder dies, even by SIGKILL, so a killed run never keeps its dir locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import UsageError

_HELD: list[int] = []  # never closed: the lock lasts as long as the process


def hold(out_dir: Path) -> None:
    """Lock `out_dir` for this process, or refuse (exit 2) naming it: busy, or not writable. A process measures
    one run at a time: the locks of its earlier runs (bench.cli.main called again, as tests do) are let go."""
    while _HELD:
        os.close(_HELD.pop())
    store = out_dir / "results.jsonl"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # non-inheritable (os.open's default): a server started later must not hold the lock after us
        fd = os.open(store, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise UsageError(
            f"--out {out_dir}: cannot write {store}: {e.strerror or e}; free space, make it writable or choose "
            "another --out (nothing was started)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"--out {out_dir}: another bench run is measuring into it (it holds {store}); wait for it to end, "
            "then --resume it, or choose another --out"
        ) from None
    _HELD.append(fd)
