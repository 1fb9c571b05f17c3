"""Unified git-style diffs between two versions of some repository files, made by `git diff --no-index`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection, Mapping

from . import scratch as scratch_dirs
from .errors import BadInput
from .fsio import write_plain
from .gitcmd import git_outside_repo


def make_diff(
    before: Mapping[str, bytes | None],
    after: Mapping[str, bytes | None],
    context: int = 3,
    executable: Collection[str] = (),
) -> str:
    """A diff with paths a/python/sglang/... b/python/sglang/..., what `git apply -p1` reads back. A file of
    `executable` (the patch's created or deleted 100755 files) is diffed as one, so its mode line is kept."""
    out = []
    scratch = scratch_dirs.make("diff")
    try:
        for repo_path in sorted(set(before) | set(after)):
            old, new = before.get(repo_path), after.get(repo_path)
            if old == new:
                continue
            sides = []
            for side, data in (("a", old), ("b", new)):
                if data is None:
                    sides.append("/dev/null")
                    continue
                _utf8(repo_path, data)
                p = scratch / side / repo_path
                p.parent.mkdir(parents=True, exist_ok=True)
                write_plain(p, data)  # a full disk's error names the file
                if repo_path in executable:
                    os.chmod(p, 0o755)
                sides.append(f"{side}/{repo_path}")
            res = git_outside_repo(
                "diff",
                "--no-index",
                "--no-prefix",
                "--no-color",
                "--no-ext-diff",
                f"-U{context}",
                sides[0],
                sides[1],
                cwd=scratch,
            )
            text = res.stdout
            if old is None or new is None:
                # git names a created/removed file by its scratch side; rewrite to the a/ b/ convention.
                text = text.replace(f"a/{repo_path} b/{repo_path}", f"a/{repo_path} b/{repo_path}")
                text = text.replace(
                    f"diff --git b/{repo_path} b/{repo_path}", f"diff --git a/{repo_path} b/{repo_path}"
                )
                text = text.replace(
                    f"diff --git a/{repo_path} a/{repo_path}", f"diff --git a/{repo_path} b/{repo_path}"
                )
            out.append(text)
        return "".join(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _utf8(repo_path: str, data: bytes) -> None:
    """A patch is UTF-8 text (patchfile.py reads no other): a file in another encoding cannot go into one."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(
            f"{repo_path}: not UTF-8 text (byte {e.start}: {e.reason}), so no patch can carry its content",
            hint="save the file as UTF-8 (`iconv -f latin1 -t utf-8`), or carry it whole as an overlay file",
        ) from None
