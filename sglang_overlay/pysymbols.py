"""Name code by Python symbol ("function `select_experts`") rather than by line number."""
from __future__ import annotations

import ast
import functools
import re


def _defs(tree: ast.AST, prefix: str = ""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _defs(node, name + ".")


@functools.lru_cache(maxsize=64)
def _parse(text: str):
    # The radar asks about the same 9000-line files many times; parsing dominates its run time otherwise.
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=64)
def _all_defs(text: str) -> tuple:
    tree = _parse(text)
    return tuple(_defs(tree)) if tree is not None else ()


def enclosing_symbol(text: str, line: int) -> str | None:
    """The innermost class/function (qualified, e.g. `Cls.method`) whose body holds `line`."""
    if _parse(text) is None:
        return None
    best = None
    for name, node in _all_defs(text):
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if start <= line <= (node.end_lineno or node.lineno):
            if best is None or len(name) > len(best):
                best = name
    return best


def symbol_span(text: str, qualname: str) -> tuple[int, int] | None:
    for name, node in _all_defs(text):
        if name == qualname:
            return node.lineno, node.end_lineno or node.lineno
    return None


def has_symbols(text: str, qualnames) -> list[str]:
    """The qualified names from `qualnames` that the module does NOT define."""
    if _parse(text) is None:
        return list(qualnames)
    defined = {name for name, _ in _all_defs(text)}
    return [q for q in qualnames if q not in defined]


def symbol_from_section(section: str) -> str | None:
    """git's hunk-header context (`def select_experts(`) -> `select_experts`."""
    m = re.search(r"\b(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)", section or "")
    return m.group(1) if m else None
