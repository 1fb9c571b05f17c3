"""Where an upstreamed entry's proved code went in a release that moved it: another file holding the same
lines (re-indented, as a function moved out of a class is) or the same symbols. The rewritten proof quotes
the lines exactly as the release has them and names the symbols that enclose them there."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from .manifest import Proof
from .pysymbols import defined_names, enclosing_symbol, has_symbols
from .record import Record

Reader = Callable[[str], "bytes | None"]


class Moved(Record):
    proof: Proof  # the proof rewritten for the release
    how: str  # "same lines" or "same symbols"

    def describe(self) -> str:
        syms = ", ".join(self.proof.symbols) or "-"
        return f"moved to {self.proof.file} ({self.how}; symbols {syms})"


def _pattern(snippet: str) -> re.Pattern[str]:
    """The snippet's lines at any indentation: a proof quotes code from where its first line's text starts,
    and a move (out of a class, into a function) re-indents every line."""
    bodies = [line.strip() for line in snippet.strip("\n").splitlines()]
    return re.compile("^[ \t]*" + "\n[ \t]*".join(re.escape(b) for b in bodies) + "$", re.MULTILINE)


def _probe(snippet: str) -> bytes:
    """The longest stripped line of a snippet: a cheap byte test before any regular expression runs."""
    return max((line.strip() for line in snippet.splitlines()), key=len).encode()


def locate(proof: Proof, read: Reader, paths: Iterable[str]) -> list[Moved]:
    """Every file of `paths` (other than the proof's) where the proved code now is; one result is a move."""
    probes = [_probe(c) for c in proof.contains if c.strip()]
    lasts = [s.rsplit(".", 1)[-1] for s in proof.symbols]
    found = []
    for path in paths:
        if path == proof.file or not path.endswith(".py"):
            continue
        data = read(path)
        if data is None:
            continue
        if probes and not all(p in data for p in probes):
            continue
        if not probes and not all(re.search(rb"\b(def|class)\s+" + line.encode() + rb"\b", data) for line in lasts):
            continue
        text = data.decode("utf-8", "replace")
        moved = _rewrite(proof, path, text)
        if moved is not None:
            found.append(moved)
    return found


def _rewrite(proof: Proof, path: str, text: str) -> Moved | None:
    if proof.contains:
        exact, symbols = [], []
        for snippet in proof.contains:
            m = _pattern(snippet).search(text)
            if m is None:
                return None
            exact.append(m.group(0).lstrip(" \t"))  # from where the text starts, like the proof it replaces
            sym = enclosing_symbol(text, text.count("\n", 0, m.start()) + 1)
            if sym and sym not in symbols:
                symbols.append(sym)
        if not has_symbols(text, proof.symbols):
            symbols = list(proof.symbols)  # the same names still define the code there
        return Moved(Proof(path, tuple(symbols), tuple(exact)), "same lines")
    defined = defined_names(text)
    symbols = []
    for s in proof.symbols:
        last = s.rsplit(".", 1)[-1]
        match = s if s in defined else next((d for d in sorted(defined) if d.rsplit(".", 1)[-1] == last), None)
        if match is None:
            return None
        symbols.append(match)
    return Moved(Proof(path, tuple(symbols), ()), "same symbols")
