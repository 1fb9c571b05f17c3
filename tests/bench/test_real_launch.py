"""The bench runner through the REAL `apply.py launch` on a copy of the real SGLang 0.5.17 tree.

Only the server module is a stand-in (SGLANG_OVERLAY_SERVER_MODULE=fake_bench_server, the launcher's documented
test hook): the set switch, environment, process group, url/fingerprint lines and signal forwarding are the
tool's own. The server reports the patch set from the tree's identity module, so a wrong set would show.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from bench import store
from bench.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ab_through_real_launch(sglang_tree, tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_OVERLAY_TREE", raising=False)
    monkeypatch.setenv("SGLANG_OVERLAY_SERVER_MODULE", "fake_bench_server")
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv("FAKE_BENCH", json.dumps({"costs": {"eagle_profiling": 0.05}, "noise": 0.003}))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "starts.jsonl"))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / "run"
    rc = main(
        [
            "ab",
            "--arms",
            "id=overlay_identity",
            "prof=overlay_identity+eagle_profiling@nccl_pcie",
            "--manifest",
            str(ROOT / "manifest.yaml"),
            "--tree",
            str(sglang_tree),
            "--launcher",
            f"{sys.executable} {ROOT / 'apply.py'}",
            "--out",
            str(out),
            "--restarts",
            "3",
            "--max-starts",
            "3",
            "--reps-per-start",
            "3",
            "--max-new-tokens",
            "64",
            "--b1-requests",
            "2",
            "--concurrency",
            "4",
            "--health-timeout",
            "60",
            "--",
            "--speculative-algorithm",
            "EAGLE3",
            "--port",
            str(_port()),
        ]
    )
    assert rc == 0
    recs = list(store.read(out / "results.jsonl"))
    starts = [r for r in recs if r["type"] == "start"]
    # the throwaway start (the first arm's set), then the arms interleaved
    assert [s["overlay"]["patches"] for s in starts] == [["overlay_identity"]] + [
        ["overlay_identity"],
        ["overlay_identity", "eagle_profiling"],
    ] * 3
    assert [s["warmup_start"] for s in starts] == [True] + [False] * 6
    # the printed fingerprint is the launch fingerprint the server got; the profile reached the server
    assert all(s["overlay"]["launch_fingerprint"] == s["fingerprint"] for s in starts)
    assert [s["overlay"]["env_profile"] for s in starts[1:3]] == [None, "nccl_pcie"]
    assert not [r for r in recs if r["type"] == "identity_warning"]
    logged = [json.loads(x) for x in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert logged[2]["env"]["NCCL_P2P_LEVEL"] == "SYS" and "NCCL_P2P_LEVEL" not in logged[1]["env"]
    assert logged[2]["env"]["SGLANG_EAGLE_PHASE_TIMING"] == "1"
    md = (out / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| ab | id | prof | step ms (batch 1) (primary) |"))
    assert "**regression**" in row
    assert all(r["launcher_rc"] == 0 for r in recs if r["type"] == "unit_done")
