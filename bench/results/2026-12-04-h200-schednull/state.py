"""The host-state reading of schednull/results.jsonl: every repetition classed fast or slow by the probe on the
scheduler's vCPU, start values over the fast repetitions only, their start-to-start CV and comparisons.
    .venv-ci/bin/python bench/results/2026-12-04-h200-schednull/state.py > bench/results/2026-12-04-h200-schednull/state.txt
"""

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import hoststate, store
from bench.stats import start_value


def sv(ys: list[float]) -> float:
    v = start_value(ys)
    assert v is not None
    return v


HERE = Path(__file__).parent
METRIC = "step_ms_b1"
MIN_FAST = 3  # a start with fewer fast repetitions has no fast value

recs = list(store.read(HERE / "schednull" / "results.jsonl"))
v = store.view(recs)
units = sorted(v.units.values(), key=lambda u: u.start_id)
probe = {r["start_id"]: [x["py_us"] for x in r["reps"]] for r in recs if r.get("type") == "host_probe"}
reps = {u.start_id: [m[METRIC] for m in u.reps] for u in units}
arms = sorted({u.arm for u in units}, key=["a", "null", "full"].index)
order = [r["start_id"] for r in recs if r.get("type") == "start" and not r.get("warmup_start")]
units.sort(key=lambda u: order.index(u.start_id))
allp = [p for u in units for p in probe[u.start_id]]
level = float(np.percentile(allp, 10))


def cv(xs: list[float]) -> float:
    return statistics.stdev(math.log(x) for x in xs) * 100


def fast_values(ratio: float) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for u in units:
        ys = [y for y, p in zip(reps[u.start_id], probe[u.start_id], strict=True) if p < level * ratio]
        if len(ys) >= MIN_FAST:
            out[u.arm].append(sv(ys))
    return out


def welch(ref: list[float], arm: list[float]) -> str:
    x, y = np.log(arm), np.log(ref)
    t = stats.ttest_ind(x, y, equal_var=False)
    ci = t.confidence_interval(0.95)
    return f"{math.expm1(x.mean() - y.mean()):+.1%} [{math.expm1(ci.low):+.1%}, {math.expm1(ci.high):+.1%}] (p = {t.pvalue:.3f})"


print(
    f"{len(units)} measured starts, {sum(map(len, reps.values()))} repetitions of {METRIC}; probe work unit (us) per repetition:"
)
print(f"  10th percentile (the fast level) {level:.1f}; the threshold of the fast state 1.2 x = {level * 1.2:.1f}")
hist = np.histogram(allp, bins=[0, 110, 120, 130, 140, 160, 180, 200, 1000])
print("  histogram:", ", ".join(f"<{b}: {n}" for n, b in zip(hist[0], hist[1][1:], strict=True)))
print()
print("Per start, in run order: the repetitions' probe and step, how many are fast, the start value raw and fast-only")
thr = level * 1.2
for u in units:
    ps, ys = probe[u.start_id], reps[u.start_id]
    f = [y for y, p in zip(ys, ps, strict=True) if p < thr]
    fv = f"{start_value(f):.3f}" if len(f) >= MIN_FAST else "-"
    r = np.corrcoef(np.log(ys), np.log(ps))[0, 1]
    print(
        f"  {u.arm:5s} {u.start_id[:6]}  fast {len(f):2d}/{len(ys)}  raw {start_value(ys):.3f}  fast-only {fv:>5s}  "
        f"r(log step, log probe) {r:+.2f}  probe {min(ps):.0f}-{max(ps):.0f}"
    )
print()
print("Step by state (median over repetitions), and the probe's fast level by arm (median over fast repetitions):")
for a in arms:
    us = [u for u in units if u.arm == a]
    pairs = [(y, p) for u in us for y, p in zip(reps[u.start_id], probe[u.start_id], strict=True)]
    fast = [y for y, p in pairs if p < thr]
    slow = [y for y, p in pairs if p >= level * 1.6]
    fp = [p for _, p in pairs if p < thr]
    print(
        f"  {a:5s} fast {len(fast):2d} reps {statistics.median(fast):.3f} ms, slow (probe >= 1.6 x) {len(slow):2d} reps "
        f"{statistics.median(slow) if slow else float('nan'):.3f} ms; fast-state probe {statistics.median(fp):.1f} us"
    )
print()
raw: dict[str, list[float]] = defaultdict(list)
for u in units:
    raw[u.arm].append(sv(reps[u.start_id]))
d_raw = raw["a"] + raw["null"]
print(f"Start-to-start CV of the default set (a and null, the same patches), {METRIC}:")
print(f"  raw: {cv(d_raw):.1f} % over {len(d_raw)} starts")
for ratio in (1.1, 1.15, 1.2, 1.3, 1.4):
    fvs = fast_values(ratio)
    d = fvs["a"] + fvs["null"]
    print(
        f"  fast-only (probe < {ratio} x the fast level): {cv(d):.1f} % over {len(d)} starts; "
        f"null vs a {welch(fvs['a'], fvs['null'])}; full vs a {welch(fvs['a'], fvs['full'])} "
        f"(starts {len(fvs['a'])}/{len(fvs['null'])}/{len(fvs['full'])})"
    )
print()
print("Unfiltered, for comparison (Welch on the raw start values, 95 %):")
print(f"  null vs a {welch(raw['a'], raw['null'])}; full vs a {welch(raw['a'], raw['full'])}")
print()
print("bench.hoststate's own reading (--adjust state), start-to-start CV as its report computes it:")
for label, groups in (
    ("the default set's starts as one group", [[u for u in units if u.arm in ("a", "null")]]),
    ("around the three arms' means", [[u for u in units if u.arm == a] for a in arms]),
):
    fs = hoststate.spread(groups, METRIC)
    assert fs is not None
    print(f"  {label}: raw {fs[0]:.1%} over {fs[1]} starts, fast state {fs[2]:.1%} over {fs[3]}")
