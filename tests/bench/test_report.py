"""report.py from a recorded store (tests/bench/data/synthetic_ab.jsonl: a fake-server A/B run with EAGLE phase
timing, 2 starts x 4 reps per arm, plus an interrupted start appended by hand whose reps must be ignored)."""
from __future__ import annotations

import json
import statistics

import pytest

from bench.cli import main

from bench_fixtures import DATA, run_dir  # noqa: F401 - pytest fixture


def _expected(metric: str, arm: str) -> float:
    recs = [json.loads(x) for x in (DATA / "synthetic_ab.jsonl").read_text().splitlines()]
    done = {r["start_id"] for r in recs if r["type"] == "unit_done"}
    return statistics.median(r["metrics"][metric] for r in recs if r["type"] == "rep" and r["arm"] == arm
                             and not r["warmup"] and r["start_id"] in done)


def test_report_from_recorded_jsonl(run_dir):
    assert main(["report", str(run_dir)]) == 0
    md = (run_dir / "report.md").read_text()
    for arm in ("ref", "slow"):
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {arm} |"))
        cells = [c.strip() for c in row.split("|")]
        assert cells[3:5] == ["2", "8"]  # starts, reps: the interrupted start does not count
        assert cells[5].startswith(f"{_expected('step_ms_b1', arm):.4f} [")
        assert cells[10] == "1.60"  # accept length
        draft, verify, extend = (float(x) for x in cells[11].split(" / "))
        assert verify == pytest.approx(_expected("eagle_verify_ms_b1", arm), abs=5e-4)
    assert "2 repetition(s) from interrupted starts ignored" in md
    assert "99.0" not in md
    primary = md.split("## Comparisons: primary metric `step_ms_b1`")[1].split("##")[0]
    row = next(ln for ln in primary.splitlines() if ln.startswith("| ab | ref | slow |"))
    change = float(row.split("|")[5].strip().rstrip("%"))
    assert change == pytest.approx((_expected("step_ms_b1", "slow") / _expected("step_ms_b1", "ref") - 1) * 100,
                                   abs=0.01)
    assert "**regression**" in row
    assert "EAGLE verify p50 ms (b1)" in md.split("## Comparisons: other metrics")[1]
    assert "Step-time CV at batch 1: worst arm" in md
    assert (run_dir / "command.txt").read_text().strip() in md  # the recorded command, verbatim
    png = (run_dir / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # 3 panels incl. EAGLE phases


def test_report_of_a_run_whose_only_start_failed(tmp_path):
    """A recorded GPU store (bench/results/2026-12-01-h200/before/pristine_final: pristine 0.5.17 cannot start with
    an aux id equal to num_hidden_layers): the report names the failure and claims nothing about outputs."""
    src = DATA.parents[2] / "bench" / "results" / "2026-12-01-h200" / "before" / "pristine_final"
    d = tmp_path / "pristine_final"
    d.mkdir()
    for name in ("results.jsonl", "command.txt"):
        (d / name).write_text((src / name).read_text())
    assert main(["report", str(d)]) == 0
    md = (d / "report.md").read_text()
    assert "No repetition completed: no outputs to compare." in md and "identical" not in md
    assert "- pristine_final round 1 (launch): launcher exited with 1" in md
    assert "    - cause, from the server log: `AssertionError: captured 2 of 3 aux hidden states`" in md
    assert not (d / "plot.png").exists() and "![plot]" not in md
