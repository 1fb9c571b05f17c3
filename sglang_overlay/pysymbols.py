"""Name code by Python symbol ("function `select_experts`") rather than by line number."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator

from .parsecache import cached

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    import ast

    Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _defs(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Def]]:
    import ast

    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _defs(node, name + ".")


@functools.lru_cache(maxsize=64)
def _spans(text: str) -> tuple[tuple[str, int, int, int], ...] | None:
    """(qualified name, first line with decorators, `def` line, last line) of every class and function; None if
    the text does not parse. The radar asks about the same 9000-line files many times, so this is cached per
    text; the tree itself is dropped at once (64 cached ASTs were 189 MiB of the radar's peak)."""
    import ast  # here, not at the top: `status` proves symbols without it (defined_names), ~2 ms

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return tuple(
        (
            name,
            min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]),
            node.lineno,
            node.end_lineno or node.lineno,
        )
        for name, node in _defs(tree)
    )


def enclosing_symbol(text: str, line: int) -> str | None:
    """The innermost class/function (qualified, e.g. `Cls.method`) whose body holds `line`."""
    best = None
    for name, start, _, end in _spans(text) or ():
        if start <= line <= end and (best is None or len(name) > len(best)):
            best = name
    return best


def symbol_span(text: str, qualname: str) -> tuple[int, int] | None:
    for name, _, first, end in _spans(text) or ():
        if name == qualname:
            return first, end
    return None


_DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)


def defined_names(text: str) -> set[str]:
    """Qualified names of classes and functions, from indentation alone.

    `status` proves upstreamed entries on every run; a full parse of server_args.py (9,000+ lines) alone costs
    more than the whole command's budget. Even this scan takes ~5 ms there, and the files rarely change, so what
    it finds is kept per text in the parse cache (hashing the text takes under 1 ms). A `def` at the start of a
    line inside a string would be counted too: acceptable for a proof, which also checks exact lines.
    """
    return set(cached("defined-names", text, lambda: sorted(_scan_defined_names(text))))


def _scan_defined_names(text: str) -> set[str]:
    names: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, qualified name) of enclosing definitions
    for m in _DEF_LINE.finditer(text):
        indent = len(m.group(1).expandtabs())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        qual = f"{stack[-1][1]}.{m.group(2)}" if stack else m.group(2)
        names.add(qual)
        stack.append((indent, qual))
    return names


def has_symbols(text: str, qualnames: Iterable[str]) -> list[str]:
    """The qualified names from `qualnames` that the module does NOT define."""
    defined = defined_names(text)
    return [q for q in qualnames if q not in defined]


def symbol_from_section(section: str) -> str | None:
    """git's hunk-header context (`def select_experts(`) -> `select_experts`."""
    m = re.search(r"\b(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)", section or "")
    return m.group(1) if m else None
