"""Many independent `compose` jobs in a few `git apply` processes (the check composes hundreds of subsets).

Every job's copies of its files sit side by side in one scratch directory under names of their own, and each
job's diffs, their paths renamed to match, make one input of a single `git apply`: the same program, the same
zero fuzz and the same messages as `compose` of that job alone, but one process and no directory per job (on a
busy disk the directories and files cost more than git). A job this does not settle (it adds an overlay file, a
diff does not apply, git says something unexpected) comes back None: the caller composes it alone, which says
exactly why it fails.

git reads gitattributes by path even outside a repository, so renamed paths could be treated otherwise than
their own names; gitcmd.git_outside_repo runs git blind to the user's and the system's attributes and config.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import scratch as scratch_dirs
from .compose import CHECKING_RE, IO_ERRORS, Composed, check_created, diffs_of, offsets_of
from .errors import Conflict
from .fsio import write_plain
from .gitcmd import git_outside_repo
from .manifest import Change
from .record import Record

Job = tuple[Mapping[str, "bytes | None"], Sequence[Change]]  # (base, patches): what `compose(base, patches)` takes

# One git call's share: its copies of the files on disk, and its command line (one argument per job).
BATCH_BYTES = 32 << 20
BATCH_JOBS = 1000

_HUNK_RE = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
_NOT_MOVABLE = (b"rename ", b"copy ", b"similarity ", b"dissimilarity ", b"GIT binary patch", b"Binary files ")


class _Ready(Record, frozen=False):
    k: int
    base: Mapping[str, bytes | None]
    patches: list[Change]
    names: dict[str, str]  # repo path -> its copy's name in the scratch directory
    diffs: list[tuple[str, tuple[str, ...]]]  # (patch name, repo paths in diff order) of each diff in the input
    body: bytes  # the job's diffs in order, paths renamed: one input of `git apply`


def compose_many(jobs: Sequence[Job]) -> list[Composed | None]:
    """What `compose(base, patches)` gives for each job, or None where this did not settle it."""
    out: list[Composed | None] = [None] * len(jobs)
    ready = [r for k, (base, patches) in enumerate(jobs) if (r := _prepare(k, base, list(patches))) is not None]
    if not ready:
        return out
    chunk: list[_Ready] = []
    size = 0
    for r in ready:
        job_size = sum(len(d) for d in r.base.values() if d is not None)
        if chunk and (size + job_size > BATCH_BYTES or len(chunk) == BATCH_JOBS):
            _run(chunk, out)
            chunk, size = [], 0
        chunk.append(r)
        size += job_size
    if chunk:
        _run(chunk, out)
    return out


def _prepare(k: int, base: Mapping[str, bytes | None], patches: list[Change]) -> _Ready | None:
    # An overlay file is copied in between diffs (and may collide): that stays with `compose`.
    if any(p.overlay for p in patches) or not diffs_of(patches):
        return None
    names = {f: f"{k}.{i}" for i, f in enumerate(dict.fromkeys([*base, *(f for p in patches for f in p.files)]))}
    moved = []
    for _, diff in diffs_of(patches):
        body = move_paths(diff.applicable, {f.encode(): n.encode() for f, n in names.items()})
        if body is None:
            return None
        moved.append(body)
    return _Ready(k, base, patches, names, [(n, d.files) for n, d in diffs_of(patches)], b"".join(moved))


def move_paths(body: bytes, names: Mapping[bytes, bytes]) -> bytes | None:
    """The diff with every file path P renamed to names[P], hunks untouched; None for a diff that is not a plain
    one this can rename for sure (a rename or copy, a binary or quoted path, a path not in `names`, a hunk line
    that does not fit its header's counts). Lines are told apart as git does: by the counts of the hunk header."""
    out = []
    old = new = 0
    for line in body.splitlines(keepends=True):
        if old > 0 or new > 0:
            tag = line[:1]
            if tag == b" " or line == b"\n":  # an empty line is a context line whose blank was lost (git agrees)
                old, new = old - 1, new - 1
            elif tag == b"-":
                old -= 1
            elif tag == b"+":
                new -= 1
            elif tag != b"\\":
                return None
            if old < 0 or new < 0:
                return None
            out.append(line)
            continue
        text = line.rstrip(b"\n")
        if text.startswith(b"diff --git "):
            both = text[len(b"diff --git ") :]
            path = both[2 : 2 + (len(both) - 5) // 2]
            if both != b"a/" + path + b" b/" + path or path not in names:
                return None
            line = b"diff --git a/" + names[path] + b" b/" + names[path] + b"\n"
        elif text.startswith((b"--- ", b"+++ ")):
            name = text[4:]
            if name != b"/dev/null":
                side = b"a/" if text.startswith(b"-") else b"b/"
                if not name.startswith(side) or name[2:] not in names:
                    return None
                line = text[:4] + side + names[name[2:]] + b"\n"
        elif text.startswith(b"@@ "):
            m = _HUNK_RE.match(text)
            if m is None:
                return None
            old = 1 if m.group(1) is None else int(m.group(1))
            new = 1 if m.group(2) is None else int(m.group(2))
        elif text.startswith(_NOT_MOVABLE):
            return None
        out.append(line)
    if old or new:
        return None
    return b"".join(out)


def _run(chunk: list[_Ready], out: list[Composed | None]) -> None:
    """All the jobs as one input first (one file, and git checks every diff before it writes any); if that
    fails, on fresh copies, an input per job, so that one failing job does not hold back the others."""
    holder = scratch_dirs.make("compose-many")
    try:
        try:
            originals = _originals(holder, chunk)
            write_plain(holder / "all.patch", b"".join(r.body for r in chunk))
            tree = _copies(holder / "all", chunk, originals)
        except OSError:
            return  # no room for every copy at once: `compose` of each needs less
        done, todo = _apply(tree, chunk, ["../all.patch"], originals)
        if todo:
            try:
                for r in todo:
                    write_plain(holder / f"{r.k}.patch", r.body)
                tree = _copies(holder / "each", todo, originals)
            except OSError:
                todo = []
        while todo:
            more, todo = _apply(tree, todo, [f"../{r.k}.patch" for r in todo], originals)
            done += more
        for r, result in done:
            out[r.k] = result
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def _originals(holder: Path, chunk: list[_Ready]) -> dict[bytes, Path]:
    """One file per distinct content: every job's copy is a hard link to it. git replaces a file it patches
    (unlinks it, writes a new one), so a link never changes what the others read; `_apply` makes sure."""
    (holder / "orig").mkdir()
    originals: dict[bytes, Path] = {}
    for r in chunk:
        for data in r.base.values():
            if data is not None and data not in originals:
                originals[data] = holder / "orig" / str(len(originals))
                write_plain(originals[data], data)
    return originals


def _copies(tree: Path, chunk: list[_Ready], originals: dict[bytes, Path]) -> Path:
    tree.mkdir()
    for r in chunk:
        for f, data in r.base.items():
            if data is not None:
                os.link(originals[data], tree / r.names[f])
    return tree


def _apply(
    tree: Path, todo: list[_Ready], inputs: list[str], originals: dict[bytes, Path]
) -> tuple[list[tuple[_Ready, Composed]], list[_Ready]]:
    """One `git apply` of `inputs` (the jobs' diffs in turn): (settled jobs, jobs still to try). git stops at
    the first input that fails, the ones before it written and it not at all: the jobs before the failing one
    are settled, the failing one is left to `compose` (for its message), and the jobs after it, untouched, go to
    the next call. With a single input, a failure settles nothing and leaves every job to try again."""
    res = git_outside_repo("apply", "--verbose", "--whitespace=nowarn", *inputs, cwd=tree)
    output = res.stdout + res.stderr
    if res.returncode != 0 and len(inputs) == 1 and len(todo) > 1:
        return [], todo
    expected = [(i, n, f) for i, r in enumerate(todo) for n, (_, fs) in enumerate(r.diffs) for f in fs]
    parts: dict[tuple[int, int], list[str]] = {}
    at = -1
    for line in output.splitlines():
        m = CHECKING_RE.match(line)
        if m:
            at += 1
            if at >= len(expected) or m.group(1) != todo[expected[at][0]].names[expected[at][2]]:
                return [], []  # not the diff, or not the name it was given: settle nothing here
            line = f"Checking patch {expected[at][2]}..."  # as `compose` of the job alone sees it
        if at >= 0:
            parts.setdefault(expected[at][:2], []).append(line)
    if res.returncode == 0:
        if at != len(expected) - 1:
            return [], []
        failing = len(todo)
    elif at < 0 or any(text in output for text in IO_ERRORS):
        return [], []  # a full or read-only scratch: `compose` of each says so
    else:
        failing = expected[at][0]
    if any(_changed(path, data) for data, path in originals.items()):
        return [], []  # a git that wrote through a link: every copy is suspect
    settled = []
    for i, r in enumerate(todo[:failing]):
        composed = _collect(tree, r, ["\n".join(parts.get((i, n), [])) for n in range(len(r.diffs))])
        if composed is not None:
            settled.append((r, composed))
    return settled, todo[failing + 1 :]


def _changed(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() != data
    except OSError:
        return True


def _collect(tree: Path, r: _Ready, outputs: list[str]) -> Composed | None:
    """The job's result from its copies and its part of git's output, as `compose` builds it."""
    contents = dict(r.base)
    result = Composed(contents)
    shifts: dict[str, list[tuple[int, int]]] = {}
    for (name, diff), out in zip(diffs_of(r.patches), outputs):
        offsets_of(name, diff, out, result.offsets, shifts)
        for h in diff.hunks:
            shifts.setdefault(h.file, []).append((h.source_start, len(h.added) - len(h.removed)))
    try:
        for repo_path in {p for patch in r.patches for p in patch.files} | set(r.base):
            f = tree / r.names[repo_path]
            contents[repo_path] = f.read_bytes() if f.is_file() else None
        check_created(r.patches, contents, False)
    except (OSError, Conflict):
        return None
    return result
