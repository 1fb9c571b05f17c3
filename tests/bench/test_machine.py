"""Where start-up seconds go (a real SGLang log's shape) and CPU placement of a server's processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from bench import machine

# lines as SGLang 0.5.17 writes them (model_runner.py, cuda_graph_setup.py, eagle_worker_v2.py, http_server.py)
LOG = """\
[2026-12-01 10:00:03] server_args=ServerArgs(model_path='/tmp/tiny/target', ...)
[2026-12-01 10:00:09 TP0] Init torch distributed begin.
[2026-12-01 10:00:10 TP0] Init torch distributed ends. elapsed=0.42 s, mem usage=0.09 GB
[2026-12-01 10:00:10 TP0] Load weight begin. avail mem=138.12 GB
[2026-12-01 10:00:12 TP0] Load weight end. elapsed=1.73 s, type=DeepseekV3ForCausalLM, avail mem=136.70 GB, mem usage=1.42 GB.
[2026-12-01 10:00:14 TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8], avail mem=50.1 GB
[2026-12-01 10:00:38 TP0] Capture target prefill CUDA graph end. elapsed=23.80 s, mem usage=0.50 GB, avail mem=49.6 GB.
[2026-12-01 10:00:38 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=49.6 GB
[2026-12-01 10:00:44 TP0] Capture cuda graph end. elapsed=5.91 s, mem usage=0.30 GB, avail mem=49.3 GB.
[2026-12-01 10:00:44 TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8]
[2026-12-01 10:00:52 TP0] Capture draft decode CUDA graph end. elapsed=8.02 s, mem usage=0.1 GB
[2026-12-01 10:00:55] INFO:     Started server process [123]
[2026-12-01 10:00:57] The server is fired up and ready to roll!
"""


def test_startup_breakdown_reads_phases_and_the_gaps_around_them():
    t0 = time.mktime(time.strptime("2026-12-01 09:59:58", "%Y-%m-%d %H:%M:%S"))
    b = machine.startup_breakdown(LOG, launched_at=t0, ready_at=t0 + 60.0)
    names = {p["name"]: p for p in b["phases"]}
    assert set(names) == {
        "Init torch distributed",
        "Load weight",
        "Capture target prefill CUDA graph",
        "Capture cuda graph",
        "Capture draft decode CUDA graph",
    }
    assert names["Capture target prefill CUDA graph"]["s"] == 23.8 and names["Load weight"]["how"] == "elapsed"
    assert b["first_line_s"] == 5.0 and b["log_span_s"] == 54.0 and b["total_s"] == 60.0
    assert b["unaccounted_s"] == pytest.approx(60.0 - (0.42 + 1.73 + 23.8 + 5.91 + 8.02))
    # the silences SGLang does not bracket, longest first, up to the server being ready
    assert [g["s"] for g in b["gaps"]] == [24.0, 8.0, 6.0, 6.0, 3.0]
    assert b["gaps"][0]["after"].startswith("Capture target prefill CUDA graph begin")
    # a phase without elapsed= is timed by its timestamps; a truncated log still gives its phases
    b = machine.startup_breakdown("[2026-12-01 10:00:00 TP0] Warmup begin.\n[2026-12-01 10:00:03 TP0] Warmup end.\n")
    assert b["phases"] == [{"name": "Warmup", "s": 3.0, "how": "timestamps"}] and "log_span_s" not in b
    assert machine.startup_from_file("/nonexistent/log", None, None)["phases"] == []


def test_spread_gives_the_scheduler_a_core_of_its_own():
    groups = [[i, i + 8] for i in range(8)]  # 8 cores with hyper-thread siblings
    plan = machine.assign(groups, {10: "scheduler", 11: "tokenizer", 12: "detokenizer", 13: "other"})
    main_cpus, helpers = plan[10]
    assert main_cpus == {1} and helpers == {2, 10, 3, 11}  # core 0 skipped; 1's sibling 9 left idle
    assert plan[11] == plan[12] == ({4, 12, 5, 13}, {4, 12, 5, 13})
    assert plan[13][0] == {6, 7, 14, 15}
    assert all(9 not in cpus for pair in plan.values() for cpus in pair)
    # the H200 machine: 16 vCPUs, one thread per core
    plan = machine.assign([[i] for i in range(16)], {10: "scheduler", 11: "tokenizer", 13: "other"})
    assert plan[10] == ({1}, {2, 3}) and plan[11][0] == {4, 5} and plan[13][0] == set(range(6, 16))
    # two ranks on 8 cores: narrow (one helper core each)
    plan = machine.assign(groups, {10: "scheduler", 20: "scheduler", 11: "tokenizer"})
    assert plan[10] == ({1}, {2, 10}) and plan[20][0] == {3}
    assert machine.assign([[0], [1]], {10: "scheduler"}) == "2 usable cores < 4 needed"


def _wait_for_exec(pid: int, limit_s: float = 60.0) -> None:
    """Until the child's command line is the exec'ed one (Popen may return a moment before /proc shows it)."""
    end = time.monotonic() + limit_s
    cmdline = Path(f"/proc/{pid}/cmdline")
    while b"sglang::" not in cmdline.read_bytes():
        assert time.monotonic() < end, "the child never exec'ed"
        time.sleep(0.01)


def test_place_pins_every_thread_of_a_real_process_tree():
    cpus = os.sched_getaffinity(0)
    child = subprocess.Popen(["sglang::scheduler_TP0", "30"], executable="sleep")
    try:
        _wait_for_exec(child.pid)
        assert machine.role(child.pid) == "scheduler"
        assert machine.descendants(os.getpid())[0] == os.getpid() and child.pid in machine.descendants(os.getpid())
        done = machine.place(child.pid, "spread")
        if len(machine.cores(cpus)) < 4:
            assert done == {"mode": "spread", "skipped": f"{len(machine.cores(cpus))} usable cores < 4 needed"}
        else:
            got = os.sched_getaffinity(child.pid)
            assert got == set(done["processes"][str(child.pid)]["main"]) and len(got) == 1
        assert machine.place(child.pid, "none") == {"mode": "none"}
        # the pinning itself, on any machine (the spread plan needs 4+ cores)
        assert machine.pin_process(child.pid, {min(cpus)}) == 1
        assert os.sched_getaffinity(child.pid) == {min(cpus)}
    finally:
        child.kill()
        child.wait()
