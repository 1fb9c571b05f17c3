"""An overlay module against another release (issue 41, F2): a patch carries its overlay files unchanged, but
they were written against the pin's SGLang. `rebase` stops, as for a conflict, where what they lean on changed:
an SGLang import of the module that no longer resolves, a function it imports whose parameters changed, or a
function of SGLang holding one of the patch's calls into the module whose parameters changed (0.5.21 added
`dynamic_expert_bias` to select_experts, where oea_topk calls oea.py: the module's routing tests then failed)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

from .compose import hunk_symbol
from .manifest import Change

Reader = Callable[[str], "bytes | None"]


def dotted(repo_path: str) -> str:
    """python/sglang/srt/layers/moe/oea.py -> sglang.srt.layers.moe.oea"""
    return repo_path.removeprefix("python/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _module_paths(module: str) -> tuple[str, str]:
    base = "python/" + module.replace(".", "/")
    return base + ".py", base + "/__init__.py"


@functools.lru_cache(maxsize=64)
def _tree(data: bytes) -> ast.Module | None:
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def _top_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (under if/try too): what `from it import x` can find."""
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return out


def _signature(tree: ast.Module | None, qualname: str) -> str | None:
    """The parameters of a function or method (`Cls.method`), as written; None where there is none."""
    if tree is None:
        return None
    body: list[ast.stmt] = tree.body
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        node = next(
            (
                n
                for n in body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        if i == len(parts) - 1:
            return ast.unparse(node.args) if not isinstance(node, ast.ClassDef) else None
        body = node.body
    return None


def _params(sig: str) -> list[str]:
    """The parameter names of an unparsed signature (`*` and `/` are markers, not parameters)."""
    names = [p.strip().split(":")[0].split("=")[0].strip() for p in sig.split(",")]
    return [n for n in names if n and n not in ("*", "/")]


def _changed(old: str, new: str) -> str:
    a, b = _params(old), _params(new)
    gone, added = [p for p in a if p not in b], [p for p in b if p not in a]
    said = [f"+{p}" for p in added] + [f"-{p}" for p in gone]
    return ", ".join(said) if said else f"({old}) -> ({new})"


def _imports(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(module, name, line) of every `from sglang... import name` in the module, at any depth."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sglang"):
            out += [(node.module or "", a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.startswith("sglang")]
    return out


def review(p: Change, pin: Reader, release: Reader, version: str) -> list[str]:
    """What an overlay module of `p` leans on that `version` changed; [] when nothing did."""
    findings: list[str] = []
    for f in p.overlay:
        tree = _tree(p.overlay_source(f).read_bytes())
        if tree is None:
            continue  # byte-compiling says so
        short = f.rsplit("/", 1)[-1]
        for module, name, line in _imports(tree):
            paths = _module_paths(module)
            rel_data = next((d for d in map(release, paths) if d is not None), None)
            if rel_data is None:
                findings.append(f"{short}:{line}: imports {module}, which sglang {version} does not have")
                continue
            if not name:
                continue
            rel_tree = _tree(rel_data)
            if rel_tree is not None and name not in _top_names(rel_tree):
                findings.append(f"{short}:{line}: imports {name} from {module}, which sglang {version} does not define")
                continue
            pin_data = next((d for d in map(pin, paths) if d is not None), None)
            old, new = _signature(_tree(pin_data) if pin_data else None, name), _signature(rel_tree, name)
            if old is not None and new is not None and _params(old) != _params(new):
                findings.append(f"{short}:{line}: {module}.{name} changed its parameters: {_changed(old, new)}")
        findings += _hooks(p, f, short, pin, release, version)
    return findings


def _hooks(p: Change, f: str, short: str, pin: Reader, release: Reader, version: str) -> list[str]:
    """The SGLang functions holding the patch's calls into overlay file `f`, where their parameters changed."""
    if p.diff is None:
        return []
    module = dotted(f)
    tree = _tree(p.overlay_source(f).read_bytes())
    exported = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} if tree else set()
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for h in p.diff.hunks:
        plus = [ln for ln in h.added if ln not in h.removed]
        if not any(module in ln or any(f"{n}(" in ln for n in exported) for ln in plus):
            continue
        pin_data = pin(h.file)
        sym = hunk_symbol(h, pin_data.decode("utf-8", "replace") if pin_data else None)
        if not sym or (h.file, sym) in seen:
            continue
        seen.add((h.file, sym))
        rel_data = release(h.file)
        old = _signature(_tree(pin_data) if pin_data else None, sym)
        new = _signature(_tree(rel_data) if rel_data else None, sym)
        where = f"{h.file.rsplit('/', 1)[-1]}'s `{sym}`"
        if old is not None and new is None and rel_data is not None:
            out.append(f"{short}: its caller {where} is gone in sglang {version}")
        elif old is not None and new is not None and _params(old) != _params(new):
            out.append(f"{short}: its caller {where} changed its parameters in sglang {version}: {_changed(old, new)}")
    return out
