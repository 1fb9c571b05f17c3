"""Which number should stand for one server start? A re-read of every recorded GPU store (no new measurement).

A start's repetitions switch between two step times (about 3.7 and 5.5 ms on the H200 records), so the median
of 5-6 of them jumps to whichever state holds the majority, while a mean moves with the share of each. Two
readings, each per summary of a start's measured repetitions:
  A. start-to-start spread of one arm (sd of the log start values, %), arms with >= 6 completed starts;
  B. the spread of a within-block comparison (sd over blocks of log(arm value / reference value), %) for every
     pair of arms that shared >= 4 blocks or duets, pooled over pairs (the paired design's noise).
Run from the project root: python bench/results/2026-12-03-start-value/start_value.py
"""

import glob
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import statsmodels.api as sm  # type: ignore[import-untyped]
from scipy import stats as st

sys.path.insert(0, ".")
from bench import store


def _huber(x: np.ndarray) -> float:
    try:
        return float(sm.robust.scale.Huber(maxiter=200)(np.asarray(x))[0])
    except Exception:  # statsmodels' Huber fails to converge on some tiny samples: the median then
        return float(np.median(x))


def _hl(x: np.ndarray) -> float:
    return float(np.median([(x[i] + x[j]) / 2 for i in range(len(x)) for j in range(i, len(x))]))


# each takes the logs of a start's repetitions and gives the log of the start's value
SUMMARIES = {
    "median": np.median,
    "geomean": np.mean,
    "trim25": lambda x: st.trim_mean(x, 0.25),
    "huber": _huber,
    "hodges-lehmann": _hl,
}
METRICS = ("step_ms_b1", "tok_s_b1", "step_ms_bc")


def _logs(u: store.Unit, metric: str) -> list[float]:
    return [math.log(r[metric]) for r in u.reps if r.get(metric) and r[metric] > 0]


def main() -> None:
    paths = sorted(glob.glob("bench/results/2026-*/**/results.jsonl", recursive=True))
    views = {p[len("bench/results/") : -len("/results.jsonl")]: store.view(store.read(Path(p))) for p in paths}
    print("A. start-to-start sd of log start value (%), step_ms_b1, arms with >= 6 starts")
    print(f"{'store':44} {'arm':18} {'n':>3} " + " ".join(f"{k:>14}" for k in SUMMARIES))
    pooled_a: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for name, v in views.items():
        by: dict[str, list[list[float]]] = defaultdict(list)
        for u in v.units.values():
            if len(x := _logs(u, "step_ms_b1")) >= 2:
                by[u.arm].append(x)
        for arm, starts in sorted(by.items()):
            if len(starts) < 6:
                continue
            row = []
            for k, f in SUMMARIES.items():
                sv = np.array([f(np.array(x)) for x in starts])
                row.append(np.std(sv, ddof=1) * 100)
                pooled_a[k][0] += ((sv - sv.mean()) ** 2).sum()
                pooled_a[k][1] += len(sv) - 1
            print(f"{name:44} {arm[:18]:18} {len(starts):3} " + " ".join(f"{x:14.1f}" for x in row))
    print("pooled: " + ", ".join(f"{k} {math.sqrt(s / df) * 100:.1f} (df {df})" for k, (s, df) in pooled_a.items()))
    print()
    print("B. sd over blocks of the log ratio arm / reference (%), pooled over pairs of arms sharing >= 4 blocks")
    for metric in METRICS:
        pooled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        n_pairs = 0
        for v in views.values():
            blocks: dict[int, dict[str, store.Unit]] = defaultdict(dict)
            for u in v.units.values():
                if u.block or u.duet:
                    blocks[u.round][u.arm] = u
            arms = sorted({a for b in blocks.values() for a in b})
            for i, ra in enumerate(arms):
                for rb in arms[i + 1 :]:
                    vals: dict[str, list[float]] = defaultdict(list)
                    for b in blocks.values():
                        if ra not in b or rb not in b:
                            continue
                        la, lb = _logs(b[ra], metric), _logs(b[rb], metric)
                        n = min(len(la), len(lb))
                        if n < 2:
                            continue
                        la, lb = np.array(la[:n]), np.array(lb[:n])
                        for k, f in SUMMARIES.items():
                            vals[k].append(f(lb) - f(la))
                        # the duet/block default (bench.duet.unit_value "pairs"): median of adjacent-rep ratios
                        vals["pairs (median of rep ratios)"].append(float(np.median(lb - la)))
                    if len(vals["median"]) < 4:
                        continue
                    n_pairs += 1
                    for k, xs in vals.items():
                        x = np.array(xs)
                        pooled[k][0] += ((x - x.mean()) ** 2).sum()
                        pooled[k][1] += len(x) - 1
        print(
            f"  {metric:11} ({n_pairs} pairs, df {pooled['median'][1]}): "
            + ", ".join(f"{k} {math.sqrt(s / df) * 100:.2f}" for k, (s, df) in pooled.items())
        )


if __name__ == "__main__":
    main()
