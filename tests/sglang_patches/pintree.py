"""A pin's patched SGLang tree, imported on the CPU: what both pins' conftests build their fixtures from.

The tree is made the way a user makes it: the engine's embedded pristine tree of the pin (`apply.py fetch`,
cached in .sglang/), cloned to a temporary directory, then `apply.py --manifest M --tree DIR apply --set P`.
Its python/ goes first on sys.path, so `import sglang` is the patched release, not anything installed.
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


def _run(cmd, cwd=None, env=None):
    proc = subprocess.run(cmd, check=False, cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def pristine_tree(manifest_path: Path) -> Path:
    """The engine's embedded pristine tree of the manifest's pin (a git checkout tagged like upstream)."""
    from sglang_overlay.fetch import ensure_embedded
    from sglang_overlay.manifest import load_manifest

    tree, _ = ensure_embedded(ROOT, load_manifest(manifest_path).pin)
    return Path(tree.root)


def patched_tree(pristine: Path, dst: Path, manifest_path: Path, preset: str) -> Path:
    _run(["git", "clone", "-q", "--no-hardlinks", str(pristine), str(dst)])
    env = dict(os.environ)
    env.pop("SGLANG_OVERLAY_TREE", None)
    cmd = [sys.executable, str(ROOT / "apply.py"), "--manifest", str(manifest_path), "--tree", str(dst)]
    _run([*cmd, "apply", "--set", preset], cwd=ROOT, env=env)
    return dst


def import_patched(tree: Path) -> Path:
    """sys.path set up for the patched tree (a missing CPU dependency fails here, loudly); its python/."""
    import torch  # noqa: F401
    from _torchvision_standin import install

    install()
    py = tree / "python"
    sys.path.insert(0, str(py))
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    import sglang

    assert Path(sglang.__file__).resolve().is_relative_to(py.resolve()), sglang.__file__
    return py


def module_loader():
    return importlib.import_module


def pristine_loader(pristine: Path):
    """Load one pristine source file as a separate module (its imports resolve to the patched package,
    whose other files the patch set does not change for the code under test)."""

    def load(repo_path: str, alias: str):
        if alias in sys.modules:
            return sys.modules[alias]
        spec = importlib.util.spec_from_file_location(alias, pristine / repo_path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[alias] = mod
        spec.loader.exec_module(mod)
        return mod

    return load
