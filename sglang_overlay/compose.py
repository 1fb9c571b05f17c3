"""Pristine contents + enabled patches (manifest order) -> the contents of every touched file.

This is the only place patches are applied (compose_many runs many such jobs in one process, for `check`), always
by `git apply` with zero fuzz on scratch copies, so that any subset in any order gives the same bytes. A failure names the patch, file, hunk and enclosing Python symbol.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import memo
from . import scratch as scratch_dirs
from .errors import WRITABLE_COPY, Conflict, os_failure
from .fsio import write_plain
from .manifest import Change
from .progname import prog
from .pysymbols import enclosing_symbol, symbol_from_section, symbol_span
from .record import Record, field

if TYPE_CHECKING:
    from .gitcmd import GitResult
    from .patchfile import Hunk, PatchFile

# compositions kept between commands (memo.py): the same set on the same files, apply after revert, costs a
# `git apply` of every diff and a scratch copy of every file otherwise
MEMO_KIND = "composed"
MEMO_KEEP = 32
MEMO_MAX_BYTES = 256 << 20
_OFFSET_RE = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", re.M)
CHECKING_RE = re.compile(r"^Checking patch (.+?)\.\.\.$", re.M)
_FAILED_RE = re.compile(r"^error: patch failed: (.+?):(\d+)$", re.M)


def git_outside_repo(*args: str, cwd: Path) -> GitResult:
    """gitcmd's, imported on the first call: a composition the memo gives back runs no git, and subprocess
    is a good part of `apply`'s imports."""
    from .gitcmd import git_outside_repo as run

    return run(*args, cwd=cwd)


class Offset(Record):
    patch: str
    file: str
    hunk: int
    line: int
    offset: int

    def __str__(self) -> str:
        return f"{self.patch}: {self.file} hunk #{self.hunk} applied at line {self.line} (offset {self.offset:+d})"


class Composed(Record, frozen=False):
    contents: dict[str, bytes | None]  # repo path -> bytes (None: absent)
    offsets: list[Offset] = field(default_factory=list)


def compose(
    base: Mapping[str, bytes | None], patches: Iterable[Change], *, reverse: bool = False, copy: str = WRITABLE_COPY
) -> Composed:
    """Apply `patches` in order to `base` (repo path -> content, None if absent).

    `base` must hold every file the patches touch. With reverse=True each diff is reverse-applied (to prove
    an upstreamed change, or to strip later patches off a hand-edited file in `refresh`). `copy`: the fix that
    works on a copy of the tree, in the caller's words (Spelling.copy), for a scratch copy that cannot be written.
    """
    patches = list(patches)
    if not patches:
        return Composed(dict(base))
    key = _memo_key(base, patches, reverse)
    kept = memo.read(MEMO_KIND, key)
    if isinstance(kept, Composed):
        return kept
    result = _compose(base, patches, reverse, copy)
    memo.write(MEMO_KIND, key, result, keep_n=MEMO_KEEP, max_bytes=MEMO_MAX_BYTES)
    return result


def _memo_key(base: Mapping[str, bytes | None], patches: list[Change], reverse: bool) -> str:
    """Everything the outcome depends on: each base file's bytes, each patch's name, diff and overlay files."""
    h = hashlib.sha256(b"reverse" if reverse else b"forward")
    for f in sorted(base):
        data = base[f]
        h.update(f"\0base {f} {-1 if data is None else len(data)}\0".encode("utf-8", "surrogateescape"))
        h.update(data or b"")
    for patch in patches:
        body = patch.diff.applicable if patch.diff is not None and patch.diff.body else b""
        h.update(f"\0patch {patch.name} {len(body)} {list(patch.files)!r}\0".encode("utf-8", "surrogateescape"))
        h.update(body)
        for repo_path in () if reverse else patch.overlay:
            try:
                data = patch.overlay_source(repo_path).read_bytes()
            except OSError:  # said by the composition itself, which is never kept
                return f"unreadable {os.getpid()} {repo_path}"
            h.update(f"\0overlay {repo_path} {len(data)}\0".encode("utf-8", "surrogateescape"))
            h.update(data)
    return h.hexdigest()


def _compose(base: Mapping[str, bytes | None], patches: list[Change], reverse: bool, copy: str) -> Composed:
    contents = dict(base)
    result = Composed(contents)
    holder = scratch_dirs.make("compose")
    scratch = holder / "tree"
    try:
        present = {f: data for f, data in base.items() if data is not None}
        _fill(scratch, present)
        batch = _batchable(patches)
        outputs = _git_apply_all(scratch, patches, reverse) if batch else None
        if batch and outputs is None:  # one fails (or git said the unexpected): start over one by one, to say which
            shutil.rmtree(scratch)
            _fill(scratch, present)
        shifts: dict[str, list[tuple[int, int]]] = {}  # file -> (source line, lines added) of earlier patches
        for patch in patches:
            diff = patch.diff
            if diff is not None and diff.body:
                out = outputs[patch.name] if outputs is not None else _git_apply(scratch, patch, diff, reverse, copy)
                offsets_of(patch.name, diff, out, result.offsets, shifts)
                for h in diff.hunks:
                    delta = len(h.added) - len(h.removed)
                    shifts.setdefault(h.file, []).append((h.source_start, -delta if reverse else delta))
            if not reverse:
                for repo_path in patch.overlay:
                    dst = scratch / repo_path
                    if dst.exists():
                        raise Conflict(
                            f"{patch.name}: overlay file {repo_path} already exists in the tree",
                            hint="upstream now ships a file of that name: rename the overlay file, "
                            "or turn it into a diff against the upstream file",
                        )
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(patch.overlay_source(repo_path), dst)
        for repo_path in {p for patch in patches for p in patch.files} | set(base):
            f = scratch / repo_path
            contents[repo_path] = f.read_bytes() if f.is_file() else None
        check_created(patches, contents, reverse)
        return result
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def check_created(patches: list[Change], contents: dict[str, bytes | None], reverse: bool) -> None:
    # git apply maps paths by stripping one component: a diff whose paths lack a/ b/ would land elsewhere.
    for patch in patches:
        diff = patch.diff
        if diff is None or reverse:
            continue
        for f in diff.created:
            if contents.get(f) is None:
                raise Conflict(
                    f"{patch.name}: {diff.path} creates {f}, but git apply wrote it elsewhere",
                    hint="regenerate the patch with `git diff` (paths a/python/sglang/... b/python/...)",
                )


def _fill(scratch: Path, present: Mapping[str, bytes]) -> None:
    for d in sorted({scratch} | {p for f in present for p in (scratch / f).parents if scratch in p.parents}):
        d.mkdir()
    for repo_path, data in present.items():
        write_plain(scratch / repo_path, data)


def diffs_of(patches: list[Change]) -> list[tuple[str, PatchFile]]:
    """(name, diff) of each patch with a diff body, in order."""
    return [(p.name, p.diff) for p in patches if p.diff is not None and p.diff.body]


def _batchable(patches: list[Change]) -> bool:
    """Two diffs or more, none writing a path some patch adds as an overlay file (their order would matter)."""
    diffs = diffs_of(patches)
    overlay = {f for p in patches for f in p.overlay}
    return len(diffs) > 1 and not any(overlay.intersection(d.files) for _, d in diffs)


def _git_apply_all(scratch: Path, patches: list[Change], reverse: bool) -> dict[str, str] | None:
    """Every diff in one `git apply` (one process instead of one per patch): patch name -> its part of git's
    output; None when a diff fails or the output is not the expected one "Checking patch" line per file diff.

    git applies its input files in turn, each on what the ones before wrote (a file several patches change
    included), and stops at the first that fails, leaving the earlier ones written: the caller starts over."""
    diffs = diffs_of(patches)
    files = []
    for i, (_, diff) in enumerate(diffs):
        files.append(scratch.parent / f"change-{i}.patch")
        write_plain(files[-1], diff.applicable)
    res = git_outside_repo(
        "apply", "--verbose", "--whitespace=nowarn", *(["--reverse"] if reverse else []), *map(str, files), cwd=scratch
    )
    if res.returncode != 0:
        return None
    expected = [(name, f) for name, d in diffs for f in d.files]
    parts: dict[str, list[str]] = {name: [] for name, _ in diffs}
    at = -1
    for line in (res.stdout + res.stderr).splitlines():
        m = CHECKING_RE.match(line)
        if m:
            at += 1
            if at >= len(expected) or expected[at][1] != m.group(1):
                return None
        if at >= 0:
            parts[expected[at][0]].append(line)
    if at != len(expected) - 1:
        return None
    return {name: "\n".join(lines) for name, lines in parts.items()}


def _git_apply(scratch: Path, patch: Change, diff: PatchFile, reverse: bool, copy: str) -> str:
    pfile = scratch.parent / "change.patch"
    write_plain(pfile, diff.applicable)
    args = ["apply", "--verbose", "--whitespace=nowarn"] + (["--reverse"] if reverse else []) + [str(pfile)]
    res = git_outside_repo(*args, cwd=scratch)
    out = res.stdout + res.stderr
    if res.returncode != 0:
        _raise_if_io(out, scratch, copy)
        raise Conflict(
            explain_failure(patch, out, lambda p: _read(scratch, p), reverse),
            hint=f"the tree no longer matches what {patch.name} expects: update the patch "
            f"(`{prog()} refresh {patch.name}` after fixing it by hand), or leave it off",
        )
    return out


def offsets_of(
    name: str, diff: PatchFile, out: str, offsets: list[Offset], shifts: dict[str, list[tuple[int, int]]]
) -> None:
    current = None
    for line in out.splitlines():
        m = CHECKING_RE.match(line)
        if m:
            current = m.group(1)
        m = _OFFSET_RE.match(line)
        if m and current:
            index, at, off = int(m.group(1)), int(m.group(2)), int(m.group(3))
            hunk = [h for h in diff.hunks if h.file == current][index - 1]
            # Lines added above by earlier patches of this set move the hunk by design: not upstream drift.
            off -= sum(d for start, d in shifts.get(current, ()) if start < hunk.source_start)
            if off:
                offsets.append(Offset(name, current, index, at, off))


IO_ERRORS = {
    "No space left on device": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "Permission denied": errno.EACCES,
}


def _raise_if_io(git_output: str, scratch: Path, copy: str) -> None:
    """A git apply that failed to write its scratch copy is a full or read-only $TMPDIR, not a conflict."""
    for text, code in IO_ERRORS.items():
        if text in git_output:
            raise os_failure(
                OSError(code, text, str(scratch)),
                "git apply cannot write its scratch copy in",
                "nothing was changed (set TMPDIR to a directory with room to change where it works)",
                copy=copy,
            )


def _read(scratch: Path, repo_path: str) -> str | None:
    f = scratch / repo_path
    return f.read_text(errors="replace") if f.is_file() else None


def hunk_symbol(hunk: Hunk, original: str | None) -> str | None:
    """The Python symbol a hunk was written for: from the release it was made against, else git's context."""
    if not hunk.file.endswith(".py"):
        return None
    if original is not None:
        sym = enclosing_symbol(original, hunk.first_change)
        if sym:
            return sym
    # Without the original file: the last def/class among the hunk's lines before its first change, else
    # git's function context (which names the definition *above* the hunk's first line).
    lead = hunk.removed[: max(hunk.first_change - hunk.source_start, 0) + 1]
    for line in reversed(lead):
        name = symbol_from_section(line) if line.lstrip().startswith(("def ", "class ", "async def ")) else None
        if name:
            return name
    return symbol_from_section(hunk.section)


def explain_failure(
    patch: Change,
    git_output: str,
    read: Callable[[str], str | None],
    reverse: bool = False,
    original: Callable[[str], str | None] | None = None,
) -> str:
    """Turn git's 'patch failed: file:812' into which hunk, and which Python function it was meant for.

    `read` gives the file as found in the tree; `original`, where known, the file the patch was made against.
    """
    lines = [f"{patch.name} does not {'reverse-' if reverse else ''}apply cleanly (zero fuzz):"]
    for f in re.findall(r"^error: (.+?): No such file or directory$", git_output, re.M):
        lines.append(f"  {f}: the file is not in the tree (moved or removed upstream?)")
    for f in re.findall(r"^error: (.+?): already exists in working directory$", git_output, re.M):
        lines.append(f"  {f}: the patch creates it, but the tree already has it")
    for f, line_no in _FAILED_RE.findall(git_output):
        line_no = int(line_no)
        hunks = patch.diff.hunks if patch.diff is not None else ()
        hunk = next((h for h in hunks if h.file == f and h.source_start == line_no), None)
        if hunk is None:
            lines.append(f"  {f}:{line_no}: a hunk does not match")
            continue
        symbol = hunk_symbol(hunk, original(f) if original else None)
        text = read(f)
        detail = f"  {f}: hunk #{hunk.index} {hunk.header}"
        if symbol:
            detail += f" in `{symbol}`"
            if text is not None:
                last = symbol.rsplit(".", 1)[-1]
                gone = symbol_span(text, symbol) is None and not re.search(rf"\b(def|class)\s+{last}\b", text)
                detail += f": `{symbol}` {'no longer exists' if gone else 'changed'} in the tree"
        lines.append(detail)
    if len(lines) == 1:
        lines.append("  " + (git_output.strip().splitlines() or ["git apply failed without a message"])[-1])
    return "\n".join(lines)
