"""Proof that an `upstreamed` entry's change is in a tree: its symbols and lines exist, its diff reverse-applies."""

from __future__ import annotations

from collections.abc import Callable

from .errors import WRITABLE_COPY, Conflict
from .manifest import UpstreamedPatch
from .pysymbols import has_symbols
from .record import Record


class ProofResult(Record):
    holds: bool
    detail: str


def prove(patch: UpstreamedPatch, read: Callable[[str], bytes | None], *, copy: str = WRITABLE_COPY) -> ProofResult:
    """`read(repo_path)` gives a file of the tree to test (None if absent). `copy`: the fix that works on a copy of
    the tree, in the caller's words (compose), for a scratch copy that cannot be written."""
    problems: list[str] = []
    evidence: list[str] = []
    proof = patch.proof
    if proof is not None:
        data = read(proof.file)
        if data is None:
            return ProofResult(False, f"{proof.file} is not in the tree")
        text = data.decode("utf-8", errors="replace")
        missing = has_symbols(text, proof.symbols)
        problems += [f"`{s}` is missing from {proof.file}" for s in missing]
        problems += [f"{proof.file} lacks the line {_first_line(c)!r}" for c in proof.contains if c not in text]
        if not missing and proof.symbols:
            evidence.append(f"{len(proof.symbols)} symbol(s) present")
        if proof.contains and all(c in text for c in proof.contains):
            evidence.append(f"{len(proof.contains)} line(s) present")
    original = patch.original_change()
    if original is not None and original.diff.body:
        from .compose import compose  # with what it needs (scratch, git): only for an entry that keeps its diff

        base = {f: read(f) for f in original.diff.files}
        try:
            compose(base, [original], reverse=True, copy=copy)
            evidence.append("the original change reverse-applies")
        except Conflict as e:
            problems.append(f"the original change does not reverse-apply: {str(e).splitlines()[-1].strip()}")
    if problems:
        return ProofResult(False, "; ".join(problems))
    return ProofResult(True, ", ".join(evidence))


def _first_line(snippet: str) -> str:
    first = snippet.strip().splitlines()[0] if snippet.strip() else snippet
    return first + (" ..." if "\n" in snippet.strip() else "")
