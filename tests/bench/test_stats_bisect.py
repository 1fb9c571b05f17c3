"""Statistics on synthetic samples and the bisect logic on a simulated cost function."""
from __future__ import annotations

import math
import random

import pytest

from bench import bisect as bis
from bench import stats


def _samples(n, mu, rel_sd, seed):
    rng = random.Random(seed)
    return [rng.gauss(mu, mu * rel_sd) for _ in range(n)]


def test_median_ci_contains_true_median_and_is_ordered():
    xs = _samples(15, 3.0, 0.01, 1)
    ci = stats.median_ci(xs)
    assert ci.n == 15
    assert ci.low <= ci.median <= ci.high
    assert 2.97 < ci.low and ci.high < 3.03
    assert math.isnan(stats.median_ci([1.0, 2.0]).low)  # no CI from fewer than 3 values
    assert stats.median_ci([2.0] * 5).low == 2.0


def test_cv():
    assert stats.cv([1.0, 1.0, 1.0]) == 0.0
    assert stats.cv([9.0, 11.0]) == pytest.approx(math.sqrt(2) / 10)
    assert math.isnan(stats.cv([1.0]))


def test_known_5pct_shift_is_called_with_9_reps():
    a = _samples(9, 3.0, 0.01, 2)
    b = _samples(9, 3.15, 0.01, 3)
    c = stats.compare(a, b, alpha=0.01, min_effect=0.02)
    assert c.verdict == stats.REGRESSION
    assert c.p_value < 0.001
    assert c.rel_change == pytest.approx(0.05, abs=0.015)
    assert stats.compare(b, a).verdict == stats.IMPROVEMENT
    # higher-is-better metric (tok/s): a drop is the regression
    assert stats.compare(b, a, lower_is_better=False).verdict == stats.REGRESSION


def test_no_shift_is_not_called():
    called = 0
    for seed in range(40):
        a = _samples(9, 3.0, 0.01, 100 + seed)
        b = _samples(9, 3.0, 0.01, 200 + seed)
        if stats.compare(a, b).verdict in (stats.REGRESSION, stats.IMPROVEMENT):
            called += 1
    assert called == 0  # min effect 2% vs 1% noise: never a false call


def test_small_significant_shift_is_within_min_effect_and_noisy_big_is_inconclusive():
    a = _samples(30, 3.0, 0.001, 4)
    b = _samples(30, 3.015, 0.001, 5)  # +0.5%, highly significant, below a 2% minimum effect
    assert stats.compare(a, b).verdict == stats.WITHIN_MIN_EFFECT
    a = [1.0, 1.5, 0.7]
    b = [1.2, 1.8, 0.8]  # +20% medians, 3 noisy samples: not significant
    assert stats.compare(a, b).verdict == stats.INCONCLUSIVE
    assert stats.compare([1.0], [2.0]).verdict == stats.INCONCLUSIVE


# ---- bisect -------------------------------------------------------------------------------------------------

def _oracle(culprits, base_ms=3.0, noise_seed=0):
    """Simulated cost: each culprit adds 5% to the step time; verdict = closer to the bad level."""
    calls = []
    rng = random.Random(noise_seed)

    def measure(patches):
        calls.append(patches)
        ms = base_ms * (1 + 0.05 * sum(1 for p in patches if p in culprits)) + rng.gauss(0, 0.005)
        return bis.Verdict.BAD if ms > base_ms * 1.025 else bis.Verdict.GOOD

    return measure, calls


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 16])
def test_bisect_finds_each_culprit_within_log2_plus_1(n):
    cands = [f"p{i}" for i in range(n)]
    good = ["g0", "g1"]
    for k in range(n):
        measure, calls = _oracle({cands[k]})
        res = bis.bisect_culprit(good, good + cands, measure)
        assert res.culprit == cands[k]
        limit = (math.ceil(math.log2(n)) if n > 1 else 0) + 1
        assert res.n_measured == len(calls) <= limit == res.max_expected_probes()
        assert all(set(good) <= set(c) for c in calls)


def test_bisect_no_culprit_uses_one_measurement():
    measure, calls = _oracle(set())
    res = bis.bisect_culprit(["a"], ["a", "b", "c", "d"], measure)
    assert res.culprit is None and len(calls) == 1
    assert "no regression" in res.reason


def test_bisect_two_culprits_names_first_in_order_and_rejects_non_subset():
    measure, _ = _oracle({"p2", "p5"})
    res = bis.bisect_culprit([], [f"p{i}" for i in range(8)], measure)
    assert res.culprit == "p2"
    with pytest.raises(ValueError, match="only in good: x"):
        bis.bisect_culprit(["x"], ["a"], measure)
    assert bis.bisect_culprit(["a"], ["a"], measure).culprit is None
