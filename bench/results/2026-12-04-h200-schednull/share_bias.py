"""An arm that is only slow more often (80 % of the time against the reference's 40 %), the same step at the fast
state: what the fast-state reading (bench.hoststate) makes of it, for the level rule and line it had before the
review and after (the review's simulation; tests/bench/test_hoststate.py asserts the last row's bounds).
    .venv-ci/bin/python bench/results/2026-12-04-h200-schednull/share_bias.py > bench/results/2026-12-04-h200-schednull/share_bias.txt
"""

import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench.simulate import probed_units, switching_starts

from bench import hoststate
from bench.stats import IMPROVEMENT, REGRESSION


def quantile_only(st: Sequence[Sequence[tuple[float, float]]]) -> float | None:
    """The level before the review: the 10th percentile itself."""
    ps = sorted(p for s in st for _, p in s)
    q: float = statistics.quantiles(ps, n=100, method="inclusive")[9]
    return q


refined = hoststate.fast_level
for label, level, ratio in (
    ("before: the 10th percentile, line 1.2x", quantile_only, 1.2),
    ("the median below 1.2x it, line 1.2x", refined, 1.2),
    ("after: the median below 1.15x it, line 1.15x", refined, 1.15),
):
    hoststate.fast_level = level  # type: ignore[assignment]  # the rule under test, for the module's
    hoststate.FAST_RATIO = ratio
    rng = random.Random(4)
    named = refused = 0
    ratios, levels = [], []
    for _ in range(200):
        r, a = probed_units("ref", switching_starts(rng, 30, 0.4)), probed_units("arm", switching_starts(rng, 30, 0.8))
        c = hoststate.compare_state(r, a)
        sa, sb = hoststate.arm_state(r, "step_ms_b1"), hoststate.arm_state(a, "step_ms_b1")
        assert c is not None and sa is not None and sb is not None
        named += c.verdict in (REGRESSION, IMPROVEMENT)
        refused += bool(c.note)
        ratios.append(statistics.fmean(sb.values) / statistics.fmean(sa.values))
        levels.append(sb.level / sa.level)
    print(
        f"{label}: 200 nulls, 30 starts an arm: named {named}, refused {refused}; fast values arm/ref "
        f"{statistics.fmean(ratios) - 1:+.1%}, levels arm/ref {statistics.fmean(levels):.3f}"
    )
