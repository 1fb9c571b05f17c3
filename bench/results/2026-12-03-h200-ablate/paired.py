"""The README's paired readings and F tests, from the block ratios in blocks_ablate/report.md and ab_plant/report.md
(their Blocks tables): python bench/results/2026-12-03-h200-ablate/paired.py > bench/results/2026-12-03-h200-ablate/paired.txt"""

import math
import statistics

from scipy import stats

RATIOS = {  # arm / reference per block, step_ms_b1
    "six: full vs base": [1.1546, 1.1054, 1.0209, 1.0701, 1.0770, 1.0486],
    "six: -planted_result_host vs full": [0.9546, 0.9304, 1.0013, 0.7863, 0.9217, 0.9332],
    "two: full vs base (ab_plant)": [1.0961, 1.1300, 1.1270],
}
for name, v in RATIOS.items():
    logs = [math.log(x) for x in v]
    n, m, s = len(logs), statistics.fmean(logs), statistics.stdev(logs)
    for conf in (0.95, 0.9689, 0.9869):  # 0.9689 / 0.9869: the run's look confidence at 3 / 6 blocks
        h = stats.t.ppf(0.5 + conf / 2, n - 1) * s / math.sqrt(n)
        print(f"{name}: paired at {conf}: {math.expm1(m):+.1%} [{math.expm1(m - h):+.1%}, {math.expm1(m + h):+.1%}]")
cv = {k: statistics.stdev(v) / statistics.fmean(v) for k, v in RATIOS.items()}
two = cv["two: full vs base (ab_plant)"]
for k in list(RATIOS)[:2]:
    f = (cv[k] / two) ** 2
    print(f"F ({k} / two): {f:.1f} on 5 and 2 df, p = {stats.f.sf(f, 5, 2):.3f}")
