"""Within-start spread of step_ms_b1 repetitions in every recorded store, against the decode steps a repetition
averages (n_steps_b1: log windows of 8 steps). Run from the project root: python bench/results/2026-12-03-h200-pairs/reps.py
If a repetition's noise were independent from step to step, 4 times the steps would halve it."""

import glob
import json
import math
from collections import defaultdict

import numpy as np

for path in sorted(glob.glob("bench/results/*/*/results.jsonl")):
    by: dict[str, list[float]] = defaultdict(list)
    ns = []
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    for r in recs:
        if r.get("type") == "rep" and not r.get("warmup"):
            m = r.get("metrics", {})
            if m.get("step_ms_b1"):
                by[r.get("start_id")].append(math.log(m["step_ms_b1"]))
                ns.append(m.get("n_steps_b1") or 0)
    sds = [np.std(v, ddof=1) for v in by.values() if len(v) > 2]
    if sds:
        print(
            f"{path[14:-14]:48} starts {len(by):3}  windows per rep {np.median(ns):3.0f}  "
            f"within-start sd of log step {math.sqrt(np.mean(np.square(sds))):.3f}"
        )
