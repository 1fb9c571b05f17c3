"""The patched SGLang 0.5.17 tree, imported on the CPU.

A session fixture builds it the way a user does: the engine's embedded pristine
tree (`apply.py fetch`, cached in .sglang/), cloned to a temporary directory, then
`apply.py --tree DIR apply --set full`. Its python/ goes first on sys.path, so
`import sglang` below is the patched release, not anything installed.

Needs the packages in requirements-sglang-cpu.txt (CPU torch and SGLang's import-time
dependencies). A missing one fails these tests; nothing is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for _p in (ROOT, HERE):  # the engine; the helper modules beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import pintree  # noqa: E402

# Routing helpers are wrapped in torch.compile; on a CPU runner inductor would
# compile C++ for ~30 s per function. The tests check routing semantics, not the
# compiler, so run them eagerly.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

MANIFEST = ROOT / "manifest.yaml"
PRESET = "full"


@pytest.fixture(scope="session")
def pristine_sglang_tree() -> Path:
    """The engine's embedded pristine 0.5.17 tree (a git checkout tagged v0.5.17)."""
    return pintree.pristine_tree(MANIFEST)


@pytest.fixture(scope="session")
def patched_sglang_tree(pristine_sglang_tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("sglang_patched") / "sglang-0.5.17"
    return pintree.patched_tree(pristine_sglang_tree, dst, MANIFEST, PRESET)


@pytest.fixture(scope="session")
def sglang_patched(patched_sglang_tree):
    """Import path set up for the patched tree; returns the tree's python/ directory."""
    return pintree.import_patched(patched_sglang_tree)


@pytest.fixture(scope="session")
def patched(sglang_patched):
    """patched('sglang.srt.layers.moe.topk') -> the module from the patched tree."""
    return pintree.module_loader()


@pytest.fixture(scope="session")
def pristine_module(pristine_sglang_tree, sglang_patched):
    """Load one pristine source file as a separate module (see pintree.pristine_loader)."""
    return pintree.pristine_loader(pristine_sglang_tree)
