"""NCCL environment: spawned ranks inherit the launcher's, what SGLang's engine edits in it (engine_env_respect
is tested in test_sglang_engine_env.py), and the nccl_env_log line."""

from __future__ import annotations

import ast
import multiprocessing as mp
import os
import sys
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import _nccl_child  # noqa: E402


def _spawn(target, *args, timeout=900):
    """`timeout`, and the wait for the child's exit, are fail-safes: importing SGLang in a fresh interpreter
    takes minutes on a loaded machine (a 30 s wait for the exit killed a child that was still shutting down)."""
    ctx = mp.get_context("spawn")  # what SGLang uses for its scheduler processes
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, writer))
    proc.start()
    writer.close()
    try:
        if not reader.poll(timeout):
            pytest.fail("spawned child sent nothing")
        return reader.recv()
    finally:
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
        assert proc.exitcode == 0, f"child exit code {proc.exitcode}"


def test_env_set_in_the_launcher_reaches_a_spawned_child(monkeypatch):
    """A spawned child is a fresh interpreter, but it gets the parent's os.environ as it is at start(),
    including values the launcher set at run time (as `apply.py launch` does with a profile)."""
    monkeypatch.setenv("NCCL_P2P_LEVEL", "SYS")
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT,GRAPH")
    env = _spawn(_nccl_child.report_env)
    assert env["NCCL_P2P_LEVEL"] == "SYS" and env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH"
    assert env.get("PATH") == os.environ.get("PATH")


def _environ_writes(fn: ast.FunctionDef) -> set[str]:
    keys = set()
    for node in ast.walk(fn):
        # os.environ["X"] = ...
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ":
                    keys.add(ast.literal_eval(t.slice))
        # os.environ.setdefault("X", ...) / os.environ.update / putenv
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.setdefault", "os.putenv"):
            keys.add(ast.literal_eval(node.args[0]))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "os.environ.update":
            keys.add("<update>")
    return keys


def test_sglang_only_sets_its_own_nccl_vars_and_the_profiles_avoid_them(pristine_sglang_tree):
    """engine._set_envs_and_config runs in the launcher before the children are spawned. It writes only a
    few NCCL_* keys (mostly when unset) and always overwrites CUDA_DEVICE_MAX_CONNECTIONS, so the manifest's
    profiles leave that one to engine_env_respect; everything else they set reaches every rank unchanged."""
    src = (pristine_sglang_tree / "python/sglang/srt/entrypoints/engine.py").read_text()
    fn = next(
        n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef) and n.name == "_set_envs_and_config"
    )
    writes = _environ_writes(fn)
    nccl = {k for k in writes if k.startswith("NCCL_")}
    assert nccl <= {"NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_MNNVL_ENABLE"}, nccl
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in writes and "<update>" not in writes
    manifest = yaml.safe_load((ROOT / "manifest.yaml").read_text())
    profiles = manifest["env_profiles"]
    assert "nccl_pcie" in profiles
    for name, prof in profiles.items():
        for var, spec in prof["vars"].items():
            assert var != "CUDA_DEVICE_MAX_CONNECTIONS", f"{name}: SGLang overwrites {var}"
            assert spec.get("why"), f"{name}.{var} has no why"
            if var == "NCCL_NVLS_ENABLE":
                assert str(spec["value"]) != "1", "never turn NVLS on from a profile"


def test_scheduler_process_logs_its_nccl_env(sglang_patched, monkeypatch):
    """The patched run_scheduler_process, in a spawned child, logs the inherited values on one line."""
    monkeypatch.setenv("NCCL_P2P_LEVEL", "SYS")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    info = _spawn(_nccl_child.run_patched_scheduler_entry, str(sglang_patched), str(HERE))
    assert Path(info["sglang_file"]).resolve().is_relative_to(Path(sglang_patched).resolve())
    assert info["env"]["NCCL_P2P_LEVEL"] == "SYS"
    lines = [m for m in info["log"] if m.startswith("sglang-overlay nccl_env")]
    assert len(lines) == 1, info["log"]
    line = lines[0]
    assert "tp_rank=1 pp_rank=0 dp_rank=None gpu_id=3" in line
    assert "NCCL_P2P_LEVEL=SYS" in line and "NCCL_NVLS_ENABLE=0" in line
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8" in line
    assert "PATH=" not in line.replace("NCCL_", "")
