"""The planted-regression fixture manifest loads (extends the project's) and its patch composes on the real tree."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from bench.launcher import Catalog, resolve

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
        p = subprocess.run(
            [
                sys.executable,
                str(ROOT / "apply.py"),
                "--manifest",
                str(PLANTED),
                "--tree",
                str(sglang_tree),
                "apply",
                "--set",
                preset,
            ],
            capture_output=True,
            text=True,
        )
        assert p.returncode == 0, p.stderr
        src = target.read_text()
        ast.parse(src)
        assert ("SGLANG_PLANTED_VERIFY_DELAY_US" in src) == preset.endswith("_planted")
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(PLANTED),
            "--tree",
            str(sglang_tree),
            "apply",
            "--set",
            "fixes",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and "SGLANG_PLANTED_VERIFY_DELAY_US" not in target.read_text()
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(PLANTED),
            "--tree",
            str(sglang_tree),
            "apply",
            "planted_slow_verify",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0 and "SGLANG_PLANTED_VERIFY_DELAY_US" in target.read_text()


def test_bench_fixture_patches_pass_check_with_the_real_set(sglang_tree):
    """Each fixture alone, with the full set, with every patch sharing a file, in both orders (apply.py check)."""
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(PLANTED),
            "--tree",
            str(sglang_tree),
            "check",
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    for name in (
        "dummy_init_normal",
        "planted_slow_verify",
        "planted_moe_gpu",
        "planted_draft_host",
        "planted_batch_host",
        "planted_result_host",
    ):
        assert name in p.stdout


def _function_source(path: Path, qualname: str) -> str:
    tree = ast.parse(path.read_text())
    *cls, fn = qualname.split(".")
    nodes = tree.body
    for c in cls:
        nodes = next(n for n in nodes if isinstance(n, ast.ClassDef) and n.name == c).body
    node = next(n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == fn)
    return ast.get_source_segment(path.read_text(), node)


def test_each_plant_lands_in_the_function_and_phase_it_claims(sglang_tree):
    """The plants must hit what their descriptions say, or a bench run tests something else."""
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(PLANTED),
            "--tree",
            str(sglang_tree),
            "apply",
            "planted_moe_gpu",
            "planted_draft_host",
            "planted_batch_host",
            "planted_slow_verify",
            "planted_result_host",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    srt = sglang_tree / "python/sglang/srt"
    result = _function_source(srt / "managers/scheduler.py", "Scheduler.process_batch_result")
    # the scheduler's own loop, for decode batches only, before the result is processed
    assert "SGLANG_PLANTED_RESULT_DELAY_US" in result and "if batch.forward_mode.is_decode():" in result
    assert result.index("SGLANG_PLANTED_RESULT_DELAY_US") < result.index("process_batch_result_decode")
    moe = _function_source(srt / "layers/moe/topk.py", "select_experts")
    assert "torch.cuda._sleep(_planted_cycles)" in moe and "hidden_states.is_cuda" in moe
    draft = _function_source(srt / "speculative/eagle_worker_v2.py", "EagleDraftWorker.draft")
    assert "SGLANG_PLANTED_DRAFT_DELAY_US" in draft and "SGLANG_PLANTED_VERIFY_DELAY_US" not in draft
    verify = _function_source(srt / "speculative/eagle_worker_v2.py", "EAGLEWorkerV2.verify")
    assert "SGLANG_PLANTED_VERIFY_DELAY_US" in verify
    fwd = _function_source(srt / "model_executor/model_runner.py", "ModelRunner.forward")
    assert "SGLANG_PLANTED_BATCH_DELAY_US" in fwd and "forward_batch.batch_size >= 4" in fwd
