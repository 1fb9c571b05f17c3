"""What every command is handed: where the manifest is, which tree was asked for, loaded once on demand."""

from __future__ import annotations

import functools
from pathlib import Path

from .manifest import Manifest, load_manifest
from .record import Record, field
from .spelling import Spelling
from .tree import Tree, locate


class Context(Record, frozen=False):
    """What a command works on: the manifest's path and the tree asked for, each loaded on first use."""

    manifest_path: Path
    tree_arg: str | None = None
    pin: str | None = None  # --pin VERSION: the set in pins/VERSION/ (the top level when it is its pin)
    # $SGLANG_OVERLAY_TREE as it was when the context was made: read at first use instead, a relative value meant
    # another directory after a chdir. No default, so that no maker of a context forgets it.
    tree_env: str | None = field(kw_only=True)
    # $SGLANG_OVERLAY_CACHE likewise (each API call holds it: cachedir.hold), for the wheel check reads and the
    # manifests parsed once.
    cache_env: str | None = field(kw_only=True)
    # Who made it: a refusal names the command line's options (--tree) or the API's arguments (api.status: tree=).
    # No default: a context from the API that spoke of --tree sent its caller looking for an option.
    spelling: Spelling = field(kw_only=True)

    @property
    def project_root(self) -> Path:
        """Where the embedded trees live (.sglang/ beside the top-level manifest, shared by every pin)."""
        return self.top_manifest.project_root

    @functools.cached_property
    def top_manifest(self) -> Manifest:
        return load_manifest(self.manifest_path, spelling=self.spelling)

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
        return load_manifest(self.selected_manifest_path, spelling=self.spelling)

    @functools.cached_property
    def tree(self) -> Tree:
        return locate(self.tree_arg, self.tree_env, self.project_root, self.manifest.pin.version, self.spelling)
