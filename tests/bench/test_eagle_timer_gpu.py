"""bench.eagle_timer_gpu: the plumbing on the CPU (host events, no GPU work) and the verdict's arithmetic on
numbers with known answers. The GPU figures are recorded runs, not tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from bench import eagle_timer_gpu as etg
from sglang_overlay.fsio import tmp_path as tmp_path_of


def _runs(per_process: list[tuple[float, ...]], arms=etg.ARMS) -> list[dict]:
    """Each process's median rounds for notapplied / off / on / every4 (two identical rounds)."""
    return [{"us_per_step": {a: [v, v] for a, v in zip(arms, row, strict=True)}} for row in per_process]


def test_the_real_timer_runs_in_the_step_loop_and_folds_every_timed_step():
    run = etg.one_process("tiny", rounds=2, steps=10, seed=1, device="cpu")
    assert {a: len(v) for a, v in run["us_per_step"].items()} == {"notapplied": 2, "off": 2, "on": 2, "every4": 2}
    # every step of `on` is timed (50 warm-up + 2 x 10 + the 10 of the per-call pass), one in four of `every4`
    # (50 + 2 x 10), none of `off` and `notapplied` (no timer); each timed step read the accept length
    assert run["timer_steps"] == {"on": 80, "every4": 70 // 4}
    assert run["accept_length_mean"] == {"on": 4.0, "every4": 4.0}
    assert set(run["call_us_p50"]) == {"begin_step", "mark", "end_step"}
    assert all(0 < us < 1000 for us in run["call_us_p50"].values()), run["call_us_p50"]


def test_a_cost_above_the_goal_is_not_called_under_it_and_a_null_is_within_noise():
    v = etg.verdicts(_runs([(100.0, 100.1, 105.0, 100.2), (101.0, 100.9, 106.2, 100.9), (99.0, 99.0, 103.9, 99.1)]))
    assert v["reference"] == "notapplied" and v["arms"]["off"]["reading"].startswith("within noise")
    on, every4 = v["arms"]["on"], v["arms"]["every4"]
    assert on["reading"].startswith("costs 5.") and "< 3 % not shown" in on["reading"]
    assert on["ci_us"][0] > 4.0 and on["ci_us"][1] < 6.0
    assert every4["reading"].startswith("within noise") and "< 3 % shown" in every4["reading"]


def test_a_small_cost_is_shown_under_the_goal_only_when_the_interval_is():
    tight = etg.verdicts(
        _runs([(1000.0, 1000.0, 1010.0, 1000.0), (1000.0, 1000.0, 1011.0, 1001.0), (1000.0, 1000.0, 1009.0, 999.0)])
    )
    assert "< 3 % shown" in tight["arms"]["on"]["reading"]
    # the same 1 % on average, but the processes disagree: the interval reaches past 3 %
    wide = etg.verdicts(
        _runs([(1000.0, 1000.0, 970.0, 1000.0), (1000.0, 1000.0, 1050.0, 1001.0), (1000.0, 1000.0, 1010.0, 999.0)])
    )
    assert "< 3 % not shown" in wide["arms"]["on"]["reading"]


def test_one_process_calls_nothing():
    v = etg.verdicts(_runs([(100.0, 100.0, 200.0, 100.0)]))
    assert v["arms"]["on"]["reading"] == "cannot tell (one process)"


def test_a_run_made_before_the_unpatched_arm_is_read_against_off():
    v = etg.verdicts(_runs([(100.0, 110.0, 100.0), (101.0, 111.0, 101.0)], arms=("off", "on", "every4")))
    assert v["reference"] == "off" and set(v["arms"]) == {"on", "every4"}
    assert v["arms"]["on"]["reading"].startswith("costs 9.")


def test_the_command_measures_in_processes_and_reads_its_json_again(tmp_path):
    out = tmp_path / "r.json"
    args = ["--device", "cpu", "--regime", "tiny", "--processes", "2", "--rounds", "2", "--steps", "3"]
    res = subprocess.run(
        [sys.executable, "-m", "bench.eagle_timer_gpu", *args, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    saved = json.loads(out.read_text())
    assert len(saved["regimes"]["tiny"]["runs"]) == 2 and "--processes 2" in saved["command"]
    again = subprocess.run(
        [sys.executable, "-m", "bench.eagle_timer_gpu", "--from", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert again.returncode == 0 and again.stdout == res.stdout, again.stderr
    out.write_text("{}")
    bad = subprocess.run(
        [sys.executable, "-m", "bench.eagle_timer_gpu", "--from", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and str(out) in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("flag", ["--processes", "--rounds", "--steps"])
def test_zero_repetitions_are_refused(flag):
    res = subprocess.run(
        [sys.executable, "-m", "bench.eagle_timer_gpu", flag, "0"], cwd=ROOT, capture_output=True, text=True
    )
    assert res.returncode == 2 and "must be at least 1" in res.stderr


RECORD = ROOT / "bench" / "results" / "2026-12-05-h200-timer"


def _record(*runs: str) -> dict[str, list[dict]]:
    pooled: dict[str, list[dict]] = {}
    for run in runs:
        for regime, d in json.loads((RECORD / run / "eagle_timer_gpu.json").read_text())["regimes"].items():
            pooled.setdefault(regime, []).extend(d["runs"])
    return pooled


def test_the_h200_record_reads_as_its_readme_says():
    """The figures of bench/results/2026-12-05-h200-timer/README.md, from the runs' JSON."""
    pooled = _record("run1", "run2", "run3")
    kimi, tiny = etg.verdicts(pooled["kimi"]), etg.verdicts(pooled["tiny"])
    assert (kimi["processes"], tiny["processes"]) == (10, 15) and kimi["reference"] == "off"
    assert [round(x, 2) for x in kimi["arms"]["on"]["pct"]] == [0.26, 0.26, 0.27]
    assert [round(x, 2) for x in tiny["arms"]["on"]["pct"]] == [2.40, 1.91, 2.89]
    assert [round(x, 2) for x in tiny["arms"]["every4"]["pct"]] == [1.02, 0.77, 1.27]
    later = etg.verdicts(_record("run2", "run3")["tiny"])
    assert later["reference"] == "notapplied" and later["arms"]["off"]["reading"].startswith("within noise")
    assert "< 3 % not shown" in later["arms"]["on"]["reading"]  # run2 + run3 alone: 2.59 % [1.97, 3.21]
    # each run's events are real: the timer's own phases are the calibrated GPU times
    for runs in pooled.values():
        for run in runs:
            assert run["device"] == "NVIDIA H200" and run["accept_length_mean"]["on"] == 4.0
            asked = etg.REGIMES[run["regime"]][0]
            got = run["phase_p50_ms"]["on"]
            assert all(abs(g - a) < 0.1 for g, a in zip((got["draft"], got["verify"], got["draft_extend"]), asked))


CPU_RUN = ["--device", "cpu", "--regime", "tiny", "--processes", "2", "--rounds", "1", "--steps", "2"]


@pytest.mark.parametrize("where", ["under a file", "a folder", "in /proc"])
def test_a_json_that_cannot_be_written_is_refused_before_measuring(tmp_path, where):
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    out = {
        "under a file": tmp_path / "file" / "r.json",
        "a folder": tmp_path / "folder",
        "in /proc": Path("/proc/r.json"),
    }[where]
    res = subprocess.run(
        [sys.executable, "-m", "bench.eagle_timer_gpu", *CPU_RUN, "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and str(out) in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert res.stdout == ""  # nothing measured yet
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"] and not list(
        (tmp_path / "folder").iterdir()
    )


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (installed in CI by .ci/run)")
def test_a_full_disk_at_the_json_keeps_the_earlier_file_and_prints_the_report(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"earlier": 1}\n')
    # ENOSPC at every write to the temp file beside it (-P: only syscalls on that path)
    tmp = tmp_path_of(out)
    res = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-P",
            str(tmp),
            "-e",
            "inject=write:error=ENOSPC",
            sys.executable,
            "-m",
            "bench.eagle_timer_gpu",
            *CPU_RUN,
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and str(out) in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert out.read_text() == '{"earlier": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temp left
    report = json.loads(res.stdout[res.stdout.index('{\n "command"') :])
    assert len(report["regimes"]["tiny"]["runs"]) == 2
