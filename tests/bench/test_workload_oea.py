"""oea_topk's SGLANG_OEA_STATS in the bench: per-phase deltas of the server's cumulative totals, and the report
column / comparison they feed (tests/bench/data/synthetic_ab.jsonl is a store recorded before the field existed)."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from bench_fixtures import DATA, run_dir  # noqa: F401 - pytest fixture

from bench.cli import main
from bench.report import build_markdown
from bench.workload import WorkloadError, oea_phase_delta


def _snap(calls, distinct, rows, k0=3):
    return {
        "calls": calls,
        "distinct_experts_sum": distinct,
        "rows_sum": rows,
        "k0": k0,
        "max_tokens": 64,
        "mean_distinct_experts": distinct / calls if calls else None,
        "mean_rows": rows / calls if calls else None,
    }


def test_phase_delta_is_the_mean_over_the_phase_only():
    # 100 earlier calls at 20 experts each must not leak into a phase of 60 calls at 3
    before = _snap(100, 2000, 400)
    after = _snap(160, 2000 + 180, 400 + 60)
    d = oea_phase_delta(before, after)
    assert d["calls"] == 60 and d["distinct_experts_sum"] == 180 and d["rows_sum"] == 60
    assert d["mean_distinct_experts"] == pytest.approx(3.0)
    assert d["mean_rows"] == pytest.approx(1.0)
    assert d["k0"] == 3
    # the cumulative mean would have said 13.6
    assert after["mean_distinct_experts"] == pytest.approx(13.625)


def test_phase_delta_without_stats_or_calls():
    assert oea_phase_delta(None, _snap(1, 1, 1)) is None
    assert oea_phase_delta(_snap(1, 1, 1), None) is None
    d = oea_phase_delta(_snap(5, 40, 5), _snap(5, 40, 5))
    assert d["calls"] == 0 and d["mean_distinct_experts"] is None and d["mean_rows"] is None


def test_phase_delta_refuses_totals_that_went_backwards():
    with pytest.raises(WorkloadError, match="went backwards"):
        oea_phase_delta(_snap(10, 80, 10), _snap(4, 30, 4))


def test_old_store_without_the_field_keeps_its_report(run_dir):
    md = build_markdown(run_dir)
    assert "distinct experts" not in md
    head = next(ln for ln in md.splitlines() if ln.startswith("| arm |"))
    assert head.rstrip().endswith("draft / verify / draft-extend p50 ms |")


def test_report_shows_distinct_experts_per_arm_and_compares_them(run_dir):
    recs = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    per_arm = {"ref": 8.0, "slow": 3.0}
    i = 0
    for r in recs:
        if r["type"] == "rep":
            i += 1
            r["metrics"]["oea_distinct_experts_b1"] = per_arm[r["arm"]] + 0.01 * (i % 5)
            r["metrics"]["oea_distinct_experts_bc"] = 2 * per_arm[r["arm"]] + 0.01 * (i % 3)
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    done = {r["start_id"] for r in recs if r["type"] == "unit_done" and not r.get("warmup_start")}

    def starts(arm, m):
        by: dict[str, list[float]] = {}
        for r in recs:
            if r["type"] == "rep" and r["arm"] == arm and not r["warmup"] and r["start_id"] in done:
                by.setdefault(r["start_id"], []).append(r["metrics"][m])
        return [statistics.median(v) for v in by.values()]

    def med(arm, m):  # the arms table: median over start medians
        return statistics.median(starts(arm, m))

    assert main(["report", str(run_dir)]) == 0
    md = (run_dir / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| arm |"))
    assert head.rstrip().endswith("distinct experts / routing call b1 / conc. |")
    for arm in ("ref", "slow"):
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {arm} |"))
        b1, bc = (float(x) for x in row.split("|")[-2].split(" / "))
        assert b1 == pytest.approx(med(arm, "oea_distinct_experts_b1"), abs=5e-3)
        assert bc == pytest.approx(med(arm, "oea_distinct_experts_bc"), abs=5e-3)
    table = md.split("## Comparisons (every metric)")[1]
    row = next(ln for ln in table.splitlines() if "| distinct experts / routing call (b1) |" in ln)
    change = float(row.split("|")[6].strip().split("%")[0])
    gm = {a: math.exp(statistics.fmean(math.log(x) for x in starts(a, "oea_distinct_experts_b1"))) for a in per_arm}
    assert change == pytest.approx((gm["slow"] / gm["ref"] - 1) * 100, abs=0.05) and "**improvement**" in row
    assert "Distinct experts: per phase" in md
