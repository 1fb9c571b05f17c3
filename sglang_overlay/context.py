"""What every command is handed: where the manifest is, which tree was asked for, loaded once on demand."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from .manifest import Manifest, load_manifest
from .tree import Tree, locate


@dataclass
class Context:
    manifest_path: Path
    tree_arg: str | None = None
    pin: str | None = None  # --pin VERSION: the set in pins/VERSION/ (the top level when it is its pin)

    @property
    def project_root(self) -> Path:
        """Where the embedded trees live (.sglang/ beside the top-level manifest, shared by every pin)."""
        return self.top_manifest.project_root

    @functools.cached_property
    def top_manifest(self) -> Manifest:
        return load_manifest(self.manifest_path)

    @functools.cached_property
    def selected_manifest_path(self) -> Path:
        if self.pin is None:
            return self.manifest_path
        from .pins import pin_manifest_path

        return pin_manifest_path(self.top_manifest, self.pin)

    @functools.cached_property
    def manifest(self) -> Manifest:
        if self.pin is None:
            return self.top_manifest
        return load_manifest(self.selected_manifest_path)

    @functools.cached_property
    def tree(self) -> Tree:
        return locate(self.tree_arg, self.project_root, self.manifest.pin.version)
