"""Names a patched Python file uses but never defines (pyflakes' undefined-name check, ruff's F821), counted
against the release's own file: a merge that lands code where its imports or locals are not (issue 41, F3)
compiles, and fails only when that line runs. Names the release's file leaves undefined already are not ours."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
from pathlib import Path

from .cachedir import cache_dir
from .record import Record

KEEP = 50_000
_DIGEST = re.compile(rb"^[0-9a-f]{64}$")


class Undefined(Record):
    line: int
    name: str

    def __str__(self) -> str:
        return f"line {self.line}: undefined name `{self.name}`"


@functools.lru_cache(maxsize=256)
def _undefined(data: bytes) -> tuple[Undefined, ...] | None:
    """None: the text does not parse (byte-compiling reports that)."""
    from pyflakes import checker, messages  # only where a check or a rebase asks

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    found = checker.Checker(tree, filename="<patched>").messages
    return tuple(Undefined(m.lineno, m.message_args[0]) for m in found if isinstance(m, messages.UndefinedName))


def new_undefined(data: bytes, release: bytes | None) -> tuple[Undefined, ...]:
    """The undefined names of `data` that the release's file (None: a file the patches add) does not have."""
    got = _undefined(data) or ()
    if not got:
        return ()
    theirs = {u.name for u in (_undefined(release) or ())} if release is not None else set()
    return tuple(u for u in got if u.name not in theirs)


def describe(path: str, found: tuple[Undefined, ...]) -> str:
    return "; ".join(f"{path}:{u.line}: undefined name `{u.name}`" for u in found)


def _version() -> str:
    from importlib.metadata import version

    return version("pyflakes")


class Known:
    """(file, release file) pairs found clean before, kept between runs by digest as compilecache.py keeps
    compiled files: pyflakes on the largest files is most of `check`'s time, and a pair's verdict depends only on
    its bytes and pyflakes' version. Only clean pairs are kept: a finding is reported fresh each run."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else cache_dir() / "names" / f"pyflakes-{_version()}.txt"
        try:
            lines = self.path.read_bytes().splitlines()
        except OSError:
            lines = []
        self.known = {line for line in lines if _DIGEST.match(line)}
        self.kept = len(lines)
        self.new: list[bytes] = []

    def check(self, data: bytes, release: bytes | None) -> tuple[Undefined, ...]:
        key = hashlib.sha256(hashlib.sha256(data).digest() + (release or b"\0(added)")).hexdigest().encode()
        if key in self.known:
            return ()
        found = new_undefined(data, release)
        if not found:
            self.known.add(key)
            self.new.append(key)
        return found

    def save(self) -> None:
        """Best effort, as Compiler.save: a cache that cannot be written only means checking again next run."""
        if not self.new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            if self.kept + len(self.new) > KEEP:
                flags |= os.O_TRUNC
            fd = os.open(self.path, flags, 0o644)
            try:
                os.write(fd, b"".join(k + b"\n" for k in self.new[-KEEP:]))
            finally:
                os.close(fd)
        except OSError:
            pass
