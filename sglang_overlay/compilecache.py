"""Which file contents byte-compile under this interpreter, kept between runs by their sha256.

`check` compiles every distinct version of every Python file its subsets compose: hundreds of large files at
100 patches sharing files, most of its time. Whether some bytes compile depends on those bytes and the
interpreter alone (compiled here with fixed flags and optimize=0), so a version that compiled once need not be
compiled again: the pre-commit hook re-checks a set of which one patch changed. Only successes are kept: a
failure is compiled again each time, so its message is always this run's. One file per interpreter build, one
line per digest, appended once a run; a torn line is ignored, and past KEEP lines the file starts over.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

from . import compileregion
from .cachedir import cache_dir

KEEP = 50_000  # digests (3 MB): every version of a few hundred check runs of the largest sets
_DIGEST = re.compile(rb"^[0-9a-f]{64}$")


def verdict_file() -> Path:
    build = hashlib.sha256(f"{sys.implementation.name} {sys.version} {sys.hexversion}".encode()).hexdigest()[:16]
    return cache_dir() / "compiled" / f"{sys.implementation.cache_tag}-{build}.txt"


class Compiler:
    """compile() of file contents, skipping bytes `path` says compiled before; `save` adds this run's successes
    there. Without a path every version is compiled and nothing is kept."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.known: set[bytes] = set()
        self.kept = 0
        if path is not None:
            try:
                lines = path.read_bytes().splitlines()
            except OSError:
                lines = []
            self.known = {line for line in lines if _DIGEST.match(line)}
            self.kept = len(lines)
        self.new: list[bytes] = []
        self.compiled = 0  # versions proved this run (the rest were known)
        self.by_region = 0  # of them, from their changed top-level statements (compileregion)
        self._pristine: dict[bytes, compileregion.Pristine | None] = {}
        self._versions: dict[bytes, int] = {}  # pristine file -> its versions compiled whole so far

    def error(self, data: bytes, filename: str, pristine: bytes | None = None) -> str | None:
        """None if `data` byte-compiles, else what is wrong with it ("line 12: invalid syntax"). With the
        `pristine` file it was patched from, a success may be proved from its changed statements alone."""
        key = hashlib.sha256(data).hexdigest().encode()
        if key in self.known:
            return None
        self.compiled += 1
        # Reading the pristine file's statements costs about two compiles of it: worth it from the second
        # version of a file on (a file that one patch changes has only one).
        if pristine is not None and self._versions.setdefault(pristine, 0) >= 1:
            if pristine not in self._pristine:
                self._pristine[pristine] = compileregion.pristine(pristine, filename)
            p = self._pristine[pristine]
            if p is not None and compileregion.compiles_by_region(p, data, filename):
                self.by_region += 1
                self.known.add(key)
                self.new.append(key)
                return None
        if pristine is not None:
            self._versions[pristine] += 1
        try:
            compile(data, filename, "exec", dont_inherit=True, optimize=0)
        except SyntaxError as e:
            return f"line {e.lineno}: {e.msg}"
        except ValueError as e:  # a NUL byte, on Pythons before 3.12
            return str(e)
        self.known.add(key)
        self.new.append(key)
        return None

    def save(self) -> None:
        """Best effort: a read-only or full cache directory only means the next run compiles again."""
        if self.path is None or not self.new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
            if self.kept + len(self.new) > KEEP:
                flags |= os.O_TRUNC  # start over: a torn write from a concurrent run only loses verdicts
            fd = os.open(self.path, flags, 0o644)
            try:
                os.write(fd, b"".join(k + b"\n" for k in self.new[-KEEP:]))  # one write: lines stay whole
            finally:
                os.close(fd)
        except OSError:
            pass
