"""The patched SGLang 0.5.17 tree, imported on the CPU.

A session fixture builds it the way a user does: the engine's embedded pristine
tree (`apply.py fetch`, cached in .sglang/), cloned to a temporary directory, then
`apply.py --tree DIR apply --set full`. Its python/ goes first on sys.path, so
`import sglang` below is the patched release, not anything installed.

Needs the packages in requirements-sglang-cpu.txt (CPU torch and SGLang's import-time
dependencies). A missing one fails these tests; nothing is skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for _p in (ROOT, HERE):  # the engine; the helper modules beside this file
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# Routing helpers are wrapped in torch.compile; on a CPU runner inductor would
# compile C++ for ~30 s per function. The tests check routing semantics, not the
# compiler, so run them eagerly.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

PRESET = "full"


def _run(cmd, cwd=None):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def pristine_sglang_tree() -> Path:
    """The engine's embedded pristine 0.5.17 tree (a git checkout tagged v0.5.17)."""
    from sglang_overlay.fetch import ensure_embedded
    from sglang_overlay.manifest import load_manifest

    manifest = load_manifest(ROOT / "manifest.yaml")
    tree, _ = ensure_embedded(ROOT, manifest.pin)
    return Path(tree.root)


@pytest.fixture(scope="session")
def patched_sglang_tree(pristine_sglang_tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("sglang_patched") / "sglang-0.5.17"
    _run(["git", "clone", "-q", "--no-hardlinks", str(pristine_sglang_tree), str(dst)])
    env_tree = dict(os.environ)
    env_tree.pop("SGLANG_OVERLAY_TREE", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), "--tree", str(dst), "apply", "--set", PRESET],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env_tree,
    )
    if proc.returncode != 0:
        pytest.fail(f"apply --set {PRESET} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dst


@pytest.fixture(scope="session")
def sglang_patched(patched_sglang_tree):
    """Import path set up for the patched tree; returns the tree's python/ directory."""
    import torch  # noqa: F401  (a missing CPU torch fails here, loudly)
    from _torchvision_standin import install

    install()
    py = patched_sglang_tree / "python"
    sys.path.insert(0, str(py))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    import sglang

    assert Path(sglang.__file__).resolve().is_relative_to(py.resolve()), sglang.__file__
    return py


@pytest.fixture(scope="session")
def patched(sglang_patched):
    """patched('sglang.srt.layers.moe.topk') -> the module from the patched tree."""

    def load(name: str):
        return importlib.import_module(name)

    return load


@pytest.fixture(scope="session")
def pristine_module(pristine_sglang_tree, sglang_patched):
    """Load one pristine source file as a separate module (its imports resolve to the patched package,
    whose other files the patch set does not change for the code under test)."""

    def load(repo_path: str, alias: str):
        if alias in sys.modules:
            return sys.modules[alias]
        spec = importlib.util.spec_from_file_location(alias, pristine_sglang_tree / repo_path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[alias] = mod
        spec.loader.exec_module(mod)
        return mod

    return load
