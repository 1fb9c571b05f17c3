"""Proving that a patched module byte-compiles by compiling only the top-level statements around its changes.

`check` compiles hundreds of versions of large files, each a pristine file P (which compiles) with a few lines
changed. Cut P at top-level statement boundaries outside every change: before the last statement that starts
above the first changed line, after the first that ends below the last one. The version V is then
A + M + B, with A and B the very lines of P around the cut (whole statements, tokenized from a clean top-level
state as in P) and M V's lines in between. If M compiles on its own (P's `__future__` flags given, its line
numbers kept by leading newlines), V compiles:
  - tokens: A ends where P has a statement start (no open bracket, string or continuation), so M is tokenized
    in V as on its own; M compiling on its own ends it in the same clean state, so B is tokenized as in P;
  - grammar: a module is a sequence of statements, and A, M and B each are one;
  - scopes and code generation: every function, class, loop and block lies inside one top-level statement,
    so is checked whole inside A, M or B; what crosses top-level statements is the module scope, where only
    `global` declarations (name used or assigned before its declaration) and `from __future__` imports (which
    must come first) can fail: a file with a module-level `global`, or an M naming `global` or `__future__`,
    is compiled whole.
Not used (the whole file is compiled) near the top of the file (the coding cookie and the future imports live
there), for a P with a coding cookie or a carriage return, or a P that does not compile. A region that fails to
compile never decides: V is compiled whole, for the message it gives.
"""

from __future__ import annotations
import __future__

import ast
import re

from .record import Record

_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)


class Pristine(Record):
    lines: list[bytes]
    spans: list[tuple[int, int]]  # top-level statements: (first line, last line), 0-based, decorators included
    flags: int  # the __future__ features P turns on


def pristine(data: bytes, filename: str) -> Pristine | None:
    """What region compiles of versions of `data` need; None where they cannot be used (see above)."""
    if b"\r" in data or _COOKIE.search(b"\n".join(data.split(b"\n", 2)[:2])):
        return None
    try:
        compile(data, filename, "exec", dont_inherit=True, optimize=0)
        tree = ast.parse(data, filename)
    except (SyntaxError, ValueError):
        return None
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    if _module_level_global(tree.body):
        return None
    spans = []
    for node in tree.body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        spans.append((first - 1, (node.end_lineno or node.lineno) - 1))
    return Pristine(data.split(b"\n"), spans, flags)


def _module_level_global(body: list[ast.stmt]) -> bool:
    """A `global` statement in the module's own scope (inside an if/for/with/try at top level included)."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Global):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def region(p: Pristine, data: bytes) -> tuple[int, bytes] | None:
    """(first line, 0-based; V's lines from it to the cut below) or None where the whole file must compile."""
    v = data.split(b"\n")
    n = min(len(v), len(p.lines))
    first = 0
    while first < n and v[first] == p.lines[first]:
        first += 1
    if first == n and len(v) == len(p.lines):
        return None  # unchanged: nothing to cut
    tail = 0
    while tail < n - first and v[-1 - tail] == p.lines[-1 - tail]:
        tail += 1
    last = len(p.lines) - tail - 1  # the last changed line of P (first - 1 for a pure insertion)
    starts = [s for s, _ in p.spans if s < first]
    ends = [e for _, e in p.spans if e > last]
    if not starts or not ends:
        return None
    lo, hi = max(starts), min(ends) + 1  # V[lo:...] from a statement start; P[hi:] after a statement end
    while any(s < lo <= e for s, e in p.spans):  # a cut inside a statement (`x = (1,\n 2); y = 3`): move out
        lo = min(s for s, e in p.spans if s < lo <= e)
    while any(s < hi <= e for s, e in p.spans):
        hi = max(e for s, e in p.spans if s < hi <= e) + 1
    if lo < 3 or hi > len(p.lines) or len(p.lines) - hi > tail:
        return None
    middle = b"\n".join(v[lo : len(v) - (len(p.lines) - hi)])
    if b"global" in middle or b"__future__" in middle or not middle.strip():
        return None
    return lo, middle


def compiles_by_region(p: Pristine, data: bytes, filename: str) -> bool:
    """True only if `data` is proved to byte-compile from its changed region (False: compile it whole)."""
    cut = region(p, data)
    if cut is None:
        return False
    lo, middle = cut
    try:
        compile(b"\n" * lo + middle + b"\n", filename, "exec", flags=p.flags, dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError):
        return False
    return True
