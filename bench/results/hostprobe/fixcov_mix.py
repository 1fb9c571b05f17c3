"""hostcov.md's equivalence-gate figures: PYTHONPATH=.:tests/bench python bench/results/hostprobe/fixcov_mix.py"""

import collections
import random
import statistics

import test_covariate_mixed as t  # type: ignore[import-not-found]  # tests/bench on PYTHONPATH (the docstring)

from bench import covariate

for eff in (0.0, 0.05):
    r = t._rates(150, eff, 4)
    for k in ("raw", "ols", "mixed"):
        print(
            eff,
            k,
            dict(collections.Counter(v for v, _ in r[k])),
            f"{statistics.median(w for _, w in r[k]) * 100:.2f} %",
        )


rng = random.Random(5)
cs = [c for _ in range(30) if (c := covariate.compare_mixed(*t._session(rng, 4, 0.1, stay=1.0, cov_effect=0.1)))]
print("moves covariate: refused", sum(bool(c.note) for c in cs), dict(collections.Counter(c.verdict for c in cs)))
