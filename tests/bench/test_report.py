"""report.py from a recorded store (tests/bench/data/synthetic_ab.jsonl: a fake-server A/B run with EAGLE phase
timing, 2 starts x 4 reps per arm, plus an interrupted start appended by hand whose reps must be ignored)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from bench_fixtures import DATA, run_dir  # noqa: F401 - pytest fixture

from bench.cli import main


def _start_values_of(metric: str, arm: str) -> list[float]:
    """What the report must show: per completed start of the arm, the geometric mean of its measured
    repetitions."""
    recs = [json.loads(x) for x in (DATA / "synthetic_ab.jsonl").read_text().splitlines()]
    done = {r["start_id"] for r in recs if r["type"] == "unit_done" and not r.get("warmup_start")}
    by_start: dict[str, list[float]] = {}
    for r in recs:
        if r["type"] == "rep" and r["arm"] == arm and not r["warmup"] and r["start_id"] in done:
            by_start.setdefault(r["start_id"], []).append(r["metrics"][metric])
    return [math.exp(statistics.fmean(math.log(x) for x in v)) for v in by_start.values()]


def _pooled_within(metric: str, arm: str) -> float:
    """The pooled sd of log repetitions around their completed start's mean log."""
    recs = [json.loads(x) for x in (DATA / "synthetic_ab.jsonl").read_text().splitlines()]
    done = {r["start_id"] for r in recs if r["type"] == "unit_done" and not r.get("warmup_start")}
    by_start: dict[str, list[float]] = {}
    for r in recs:
        if r["type"] == "rep" and r["arm"] == arm and not r["warmup"] and r["start_id"] in done:
            by_start.setdefault(r["start_id"], []).append(math.log(r["metrics"][metric]))
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in by_start.values())
    return math.sqrt(ss / sum(len(g) - 1 for g in by_start.values()))


def test_report_from_recorded_jsonl(run_dir):
    assert main(["report", str(run_dir)]) == 0
    md = (run_dir / "report.md").read_text()
    for arm in ("ref", "slow"):
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {arm} |"))
        cells = [c.strip() for c in row.split("|")]
        assert cells[3:5] == ["3", "12"]  # starts, reps: the interrupted start does not count
        meds = _start_values_of("step_ms_b1", arm)
        assert cells[5] == ", ".join(f"{x:.4g}" for x in meds)  # every start's value, in order
        assert float(cells[6]) == pytest.approx(math.exp(statistics.fmean(math.log(x) for x in meds)), abs=1e-4)
        assert cells[7].endswith("%") and float(cells[7][:-1]) < 1.0  # start-to-start CV
        assert cells[11] == "1.60"  # accept length
        draft, verify, extend = (float(x) for x in cells[12].split(" / "))
        assert verify == pytest.approx(statistics.median(_start_values_of("eagle_verify_ms_b1", arm)), abs=5e-4)
    assert "2 repetition(s) from interrupted starts ignored" in md
    assert "99.0" not in md
    table = md.split("## Comparisons (every metric)")[1].split("\n## ")[0]
    row = next(ln for ln in table.splitlines() if ln.startswith("| ab | ref | slow | step ms (batch 1) (primary) |"))
    cells = [c.strip() for c in row.split("|")]
    ref, slow = _start_values_of("step_ms_b1", "ref"), _start_values_of("step_ms_b1", "slow")
    expect = math.exp(statistics.fmean(math.log(x) for x in slow) - statistics.fmean(math.log(x) for x in ref)) - 1
    assert cells[5] == "3 / 3" and float(cells[6].split("%")[0]) == pytest.approx(expect * 100, abs=0.05)
    assert cells[7] == "**regression**"
    assert "| ab | ref | slow | EAGLE verify p50 ms (b1) |" in table
    assert "- slow vs ref on `step_ms_b1`: **regression**" in md  # the conclusion
    assert "- `alpha,beta,eagle_profiling,gamma,delta,epsilon,zeta`: 3 starts, CV" in md
    # the repetitions' own spread beside it, from the completed starts' repetitions (pooled sd of logs)
    line = next(
        ln for ln in md.splitlines() if ln.startswith("- `alpha,beta,eagle_profiling,gamma,delta,epsilon,zeta`")
    )
    within = float(line.split("within starts ")[1].split("%")[0])
    assert within == pytest.approx(_pooled_within("step_ms_b1", "ref") * 100, abs=0.006)
    assert "throwaway start (ref)" in md
    assert (run_dir / "command.txt").read_text().strip() in md  # the recorded command, verbatim
    png = (run_dir / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # 3 panels incl. EAGLE phases


def test_a_store_of_the_earlier_method_reads_too_few_starts():
    """bench/results/2026-11-30-h200x2/bisect: one start per arm. Re-read with start medians it calls nothing."""
    import shutil

    src = DATA.parents[2] / "bench" / "results" / "2026-11-30-h200x2" / "bisect"
    import tempfile

    with tempfile.TemporaryDirectory() as t:
        d = Path(t) / "bisect"
        shutil.copytree(src, d)
        assert main(["report", str(d)]) == 0
        md = (d / "report.md").read_text()
    assert "Recorded with the earlier method (1 start(s) per arm)" in md
    rows = [ln for ln in md.split("## Comparisons (every metric)")[1].splitlines() if ln.startswith("| ")][2:]
    assert rows and all(ln.rstrip().endswith("| too few starts |") for ln in rows)


def test_report_of_a_run_whose_only_start_failed(tmp_path):
    """A recorded GPU store (bench/results/2026-12-01-h200/before/pristine_final: pristine 0.5.17 cannot start with
    an aux id equal to num_hidden_layers): the report names the failure and claims nothing about outputs."""
    src = DATA.parents[2] / "bench" / "results" / "2026-12-01-h200" / "before" / "pristine_final"
    d = tmp_path / "pristine_final"
    d.mkdir()
    (d / "results.jsonl").write_text((src / "results.jsonl").read_text())  # the command: the store's argv
    assert main(["report", str(d)]) == 0
    md = (d / "report.md").read_text()
    assert "No repetition completed: no outputs to compare." in md and "identical" not in md
    assert "- pristine_final round 1 (launch): launcher exited with 1" in md
    assert "    - cause, from the server log: `AssertionError: captured 2 of 3 aux hidden states`" in md
    assert not (d / "plot.png").exists() and "![plot]" not in md


def test_an_arm_whose_starts_take_longer_is_flagged_beside_the_decode_metrics():
    """A patch that only adds start-up work (e.g. capturing graphs for more batch sizes) moves no decode metric:
    the comparison must still show each side's warm starts and say that start-up moved; a machine's cold first
    start (JIT, empty caches) is left out of it."""
    from bench import report, store
    from bench.replication import Policy

    def arm(name: str, startups: list[float], cold: float | None = None) -> report.ArmRow:
        units = [
            store.Unit(name, i, f"{name}{i}", name, reps=[{"step_ms_b1": 4.0 + 0.01 * (i % 3)}] * 3, startup_s=s)
            for i, s in enumerate(startups)
        ]
        if cold is not None:
            units.append(store.Unit(name, 9, f"{name}9", name, reps=[{"step_ms_b1": 4.0}] * 3, startup_s=cold))
            units[-1].machine_warm = False
        return report.ArmRow(name, name, name, units)

    pol = Policy(3, 8, 0.95, 0.02)
    view = store.view([])
    run = {"comparisons": [["ab", "ref", "slow"], ["ab", "ref", "same"]]}
    rows = [arm("ref", [62.0, 64.0, 63.0], cold=361.0), arm("slow", [80.0, 83.0, 81.0]), arm("same", [63, 62, 64])]
    md = "\n".join(report._comparisons(run, rows, view, pol, "step_ms_b1"))
    assert (
        "| ab | ref | slow | server start-up s (warm starts; no plan's metric) | 3 / 3 | +29.1% [+24.1, +34.3] | **regression** |"
        in md
    )
    assert "- slow vs ref: server start-up moved (regression, +29.1%" in md
    assert "- same vs ref: server start-up" not in md and "| ab | ref | same | server start-up s" in md
