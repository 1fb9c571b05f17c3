"""within-start.txt: python bench/results/2026-12-02-h200-run7/kimi_profiling/within_start.py (scipy)."""

import json
import math
import statistics as st
from collections import defaultdict
from pathlib import Path

from scipy import stats

here = Path(__file__).parent
d: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
for line in (here / "results.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r.get("type") == "rep" and not r.get("warmup"):
        d[(r["arm"], r["start_id"])].append(r["metrics"])
d = {k: v for k, v in d.items() if len(v) == 5}  # completed starts (the interrupted one has 1 repetition)
print(len(d), "complete starts")
for arm in ("on", "notapplied", "off"):
    groups = [[math.log(m["step_ms_b1"]) for m in v] for (a, _), v in d.items() if a == arm]
    w = sum(st.variance(g) * (len(g) - 1) for g in groups) / sum(len(g) - 1 for g in groups)
    means = [st.mean(g) for g in groups]
    print(
        arm,
        f"within-start sd of log step {100 * math.sqrt(w):.1f}%; sd of start means {100 * st.stdev(means):.1f}%",
    )
xs, ys = [], []
for v in d.values():
    mu = st.mean(m["step_ms_b1"] for m in v)
    mt = st.mean(m["ttft_ms_b1"] for m in v)
    for m in v:
        xs.append(m["step_ms_b1"] - mu)
        ys.append(m["ttft_ms_b1"] - mt)
r = stats.spearmanr(xs, ys)
print(f"within starts: Spearman(step_ms_b1, ttft_ms_b1) = {r.statistic:.2f} (p = {r.pvalue:.2g}, n = {len(xs)})")
on = [
    (m["step_ms_b1"], m["eagle_step_ms_b1"], m["eagle_verify_ms_b1"]) for (a, _), v in d.items() if a == "on" for m in v
]
r = stats.spearmanr([a for a, _, _ in on], [b for _, b, _ in on])
print(f"on arm: Spearman(step_ms_b1, CUDA-event step) = {r.statistic:.2f} (p = {r.pvalue:.2g}, n = {len(on)})")
print(
    f"on arm: CUDA-event step {min(b for _, b, _ in on):.2f}-{max(b for _, b, _ in on):.2f} ms, "
    f"verify {min(c for _, _, c in on):.2f}-{max(c for _, _, c in on):.2f} ms"
)
allstep = sorted(m["step_ms_b1"] for v in d.values() for m in v)
print(f"all measured reps: step_ms_b1 {allstep[0]:.2f}-{allstep[-1]:.2f} ms")
print(f"sched_run_pct median {st.median(m['sched_run_pct'] for v in d.values() for m in v):.2f}")
