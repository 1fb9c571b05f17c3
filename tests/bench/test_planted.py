"""The planted-regression fixture manifest loads (extends the project's) and its patch composes on the real tree."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from bench.sets import Catalog, resolve

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLANTED = HERE / "planted" / "manifest.yaml"


def test_planted_catalog_extends_project_manifest():
    cat = Catalog.from_manifest(PLANTED)
    assert {"planted_slow_verify", "dummy_init_normal"} <= set(cat.names)
    assert "planted_slow_verify" not in Catalog.from_manifest(ROOT / "manifest.yaml").names
    full = resolve(cat, "full_planted").patches
    assert full[-1] == "planted_slow_verify" and set(resolve(cat, "full").patches) == set(full) - {full[-1]}
    assert "planted_slow_verify" in cat.changing(full)


def test_planted_patch_applies_with_and_without_eagle_profiling(sglang_tree):
    target = sglang_tree / "python/sglang/srt/speculative/eagle_worker_v2.py"
    for preset in ("full_planted", "fixes", "default_planted"):
        p = subprocess.run([sys.executable, str(ROOT / "apply.py"), "--manifest", str(PLANTED), "--tree",
                            str(sglang_tree), "apply", "--set", preset], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        src = target.read_text()
        ast.parse(src)
        assert ("SGLANG_PLANTED_VERIFY_DELAY_US" in src) == preset.endswith("_planted")
    p = subprocess.run([sys.executable, str(ROOT / "apply.py"), "--manifest", str(PLANTED), "--tree",
                        str(sglang_tree), "apply", "--set", "fixes"], capture_output=True, text=True)
    assert p.returncode == 0 and "SGLANG_PLANTED_VERIFY_DELAY_US" not in target.read_text()
    p = subprocess.run([sys.executable, str(ROOT / "apply.py"), "--manifest", str(PLANTED), "--tree",
                        str(sglang_tree), "apply", "planted_slow_verify"], capture_output=True, text=True)
    assert p.returncode == 0 and "SGLANG_PLANTED_VERIFY_DELAY_US" in target.read_text()


def test_bench_fixture_patches_pass_check_with_the_real_set(sglang_tree):
    """Each fixture alone, with the full set, with every patch sharing a file, in both orders (apply.py check)."""
    p = subprocess.run([sys.executable, str(ROOT / "apply.py"), "--manifest", str(PLANTED), "--tree",
                        str(sglang_tree), "check", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "dummy_init_normal" in p.stdout and "planted_slow_verify" in p.stdout
