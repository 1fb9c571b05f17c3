"""Per-file three-way merges: the release's file, the pin's file (the common base) and the pin's file with a
patch applied, by `git merge-file --diff3`. One result per file, so a file that merges is never reported as
conflicting because another file of the same patch does not."""

from __future__ import annotations

import shutil

from . import scratch as scratch_dirs
from .fsio import write_plain
from .gitcmd import git_outside_repo
from .record import Record

MARKERS = ("<<<<<<< ", "||||||| ", "=======", ">>>>>>> ")


class FileMerge(Record):
    path: str  # repo path
    status: str  # "unchanged" (upstream kept the pin's bytes), "merged" or "conflict"
    data: bytes | None  # the merged bytes; with diff3 markers when status is "conflict"
    conflicts: int = 0  # conflicting regions


def merge_file(
    path: str, release: bytes | None, base: bytes | None, patched: bytes | None, *, release_label: str, pin_label: str
) -> FileMerge:
    if release == base:
        return FileMerge(path, "unchanged", patched)
    if patched == base:
        return FileMerge(path, "unchanged", release)
    if release is None or base is None or patched is None:
        # created on one side, removed on another: nothing to merge line by line
        return FileMerge(path, "conflict", release, 1)
    scratch = scratch_dirs.make("merge")
    try:
        names = ("release", "base", "patched")
        for name, data in zip(names, (release, base, patched)):
            write_plain(scratch / name, data)
        res = git_outside_repo(
            "merge-file",
            "--diff3",
            "-L",
            f"{release_label} {path}",
            "-L",
            f"{pin_label} {path} (base)",
            "-L",
            f"patched {path}",
            *names,
            cwd=scratch,
        )
        if res.returncode > 127:
            raise OSError(f"git merge-file failed on {path}: {res.stderr.strip()}")
        data = (scratch / "release").read_bytes()  # merged in place: bytes exactly, whatever the encoding
        return FileMerge(path, "merged" if res.returncode == 0 else "conflict", data, res.returncode)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def marker_lines(data: bytes) -> list[int]:
    """1-based numbers of the lines that are still conflict markers."""
    out = []
    for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if line.startswith((MARKERS[0], MARKERS[1], MARKERS[3])) or line == MARKERS[2]:
            out.append(i)
    return out
