"""What an arm carries, in the package's one patch-set grammar (sglang_overlay.patchset: PRESET, a,b,
PRESET-x, PRESET+x,y, none). This module only adds the bench's view of a manifest (which entries change code,
who requires whom) and turns the grammar's errors into the bench's SetError."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglang_overlay.errors import OverlayError, PatchSetError
from sglang_overlay.manifest import Manifest, UpstreamedPatch, load_manifest
from sglang_overlay.patchset import PatchSet
from sglang_overlay.patchset import resolve as _resolve

from .errors import SetError

__all__ = ["Catalog", "PatchSet", "SetError", "resolve"]


@dataclass(frozen=True)
class Catalog:
    """The loaded manifest, with the facts the bench asks of it."""

    manifest: Manifest

    @classmethod
    def from_manifest(cls, path: str | Path) -> Catalog:
        try:
            return cls(load_manifest(path))
        except OverlayError as e:  # ManifestError and friends: one clear line, not a traceback
            raise SetError(f"{e}" + (f" ({e.hint})" if e.hint else "")) from e

    @property
    def names(self) -> tuple[str, ...]:
        return self.manifest.names

    @property
    def presets(self):
        return self.manifest.presets

    def closure(self, names) -> tuple[str, ...]:
        """`names` plus what they require, in manifest order (conflicts refused)."""
        return resolve(self, ",".join(names) or "none").patches

    def dependents(self, name: str) -> set[str]:
        """The patches that require `name`, directly or through others (they cannot stay when it leaves)."""
        req = {p.name: set(p.requires) for p in self.manifest.patches}
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
        return tuple(n for n in names if not isinstance(self.manifest.patch(n), UpstreamedPatch))


def resolve(catalog: Catalog, expr: str) -> PatchSet:
    try:
        return _resolve(catalog.manifest, expr, flag="set")
    except PatchSetError as e:
        raise SetError(f"{e}" + (f" ({e.hint})" if e.hint else "")) from e
