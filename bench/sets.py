"""Patch-set expressions: what an arm carries.

Syntax (patch names are [a-z][a-z0-9_]*, so '+', '-' and ',' cannot occur in them):
  full                  a preset from the manifest
  deepseek_v2,oea_topk  an explicit list of patches
  full-oea_topk         a preset minus a patch;  full-oea_topk-nccl_env_log  minus two
  base+eagle_profiling  a preset plus a patch;   base+oea_topk,eagle_profiling  plus two
  none                  the empty set (pristine tree)
A term after '+'/'-' may itself be a preset (its members are added/removed). The result is closed over
`requires` and put in manifest order (Manifest.closure), which is what `apply.py launch --patches` applies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import SetError

if TYPE_CHECKING:  # imported where a catalog is loaded: the set grammar itself needs no manifest
    from sglang_overlay.manifest import Manifest

EMPTY_NAMES = ("none", "pristine")
_TERM_RE = re.compile(r"([+-]?)([^+-]+)")


@dataclass(frozen=True)
class Catalog:
    """The manifest facts the bench needs: patch order, presets, which entries change code, and the closure."""

    names: tuple[str, ...]
    presets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    applies_change: Mapping[str, bool] = field(default_factory=dict)  # False for `upstreamed` entries
    manifest: Manifest | None = None  # the loaded sglang_overlay Manifest, for its closure

    @classmethod
    def from_manifest(cls, path: str | Path) -> Catalog:
        try:
            from sglang_overlay.manifest import UpstreamedPatch, load_manifest
        except ImportError as e:  # pragma: no cover - only outside the repo
            raise SetError(f"cannot import sglang_overlay.manifest ({e}); run from the repository root") from e
        try:
            m = load_manifest(path)
        except Exception as e:  # ManifestError and friends: one clear line, not a traceback
            hint = getattr(e, "hint", None)
            raise SetError(f"{e}" + (f" ({hint})" if hint else "")) from e
        return cls(
            names=m.names,
            presets=dict(m.presets),
            applies_change={p.name: not isinstance(p, UpstreamedPatch) for p in m.patches},
            manifest=m,
        )

    def closure(self, names) -> tuple[str, ...]:
        """`names` plus what they require, in manifest order: the manifest's own closure (conflicts refused)."""
        for n in names:
            self._check(n)
        if self.manifest is None:
            raise SetError("this catalog was built without a manifest: it cannot take a closure")
        try:
            return self.manifest.closure(names)
        except Exception as e:  # ManifestError (a conflicting pair): one clear line
            raise SetError(str(e)) from e

    def dependents(self, name: str) -> set[str]:
        """The patches that require `name`, directly or through others (they cannot stay when it leaves)."""
        req = {p.name: set(p.requires) for p in self.manifest.patches} if self.manifest is not None else {}
        out: set[str] = set()
        todo = [name]
        while todo:
            x = todo.pop()
            for n, r in req.items():
                if x in r and n not in out:
                    out.add(n)
                    todo.append(n)
        return out

    def changing(self, names) -> tuple[str, ...]:
        """The members that change code (upstreamed entries apply nothing: measuring them wastes GPU time)."""
        return tuple(n for n in names if self.applies_change.get(n, True))

    def _check(self, name: str) -> None:
        if name not in self.names:
            import difflib

            close = difflib.get_close_matches(name, list(self.names) + list(self.presets), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SetError(
                f"unknown patch {name!r}{hint}; patches: {', '.join(self.names) or '(none)'}; "
                f"presets: {', '.join(sorted(self.presets)) or '(none)'}"
            )


@dataclass(frozen=True)
class PatchSet:
    expr: str
    patches: tuple[str, ...]  # closed over requires, manifest order
    preset: str | None = None  # set when expr is exactly a preset name: launched with --set

    def launch_flags(self) -> list[str]:
        if self.preset is not None:
            return ["--set", self.preset]
        return ["--patches", ",".join(self.patches)]

    @property
    def label(self) -> str:
        return ",".join(self.patches) if self.patches else "(none)"


def _members(catalog: Catalog, term: str) -> list[str]:
    out: list[str] = []
    for name in term.split(","):
        name = name.strip()
        if not name:
            continue
        if name in EMPTY_NAMES:
            continue
        if name in catalog.presets:
            if name in catalog.names:
                raise SetError(f"{name!r} is both a preset and a patch name: ambiguous")
            out.extend(catalog.presets[name])
        else:
            catalog._check(name)
            out.append(name)
    return out


def resolve(catalog: Catalog, expr: str) -> PatchSet:
    expr = expr.strip()
    if not expr:
        raise SetError("empty set expression (write 'none' for the pristine tree)")
    if expr in catalog.presets:
        return PatchSet(expr, catalog.closure(catalog.presets[expr]), preset=expr)
    terms = _TERM_RE.findall(expr)
    if "".join(op + t for op, t in terms) != expr or terms[0][0]:
        raise SetError(f"cannot parse set {expr!r}: expected PRESET|a,b[+c|-d ...]")
    chosen: list[str] = []
    removed: set[str] = set()
    for op, term in terms:
        members = _members(catalog, term)
        if op == "-":
            missing = [m for m in members if m not in chosen]
            if missing:
                raise SetError(f"{expr!r}: cannot remove {', '.join(missing)}: not in the set so far")
            chosen = [c for c in chosen if c not in members]
            removed.update(members)
        else:
            chosen.extend(m for m in members if m not in chosen)
    patches = catalog.closure(chosen)
    removed_back = [p for p in patches if p in removed]
    if removed_back:
        # A removed patch that another member requires comes back through the closure: say so, don't hide it.
        raise SetError(f"{expr!r}: {', '.join(removed_back)} is required by a member of the set and cannot be left out")
    return PatchSet(expr, patches)
