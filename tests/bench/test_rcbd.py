"""bench.rcbd, the block design's pooled reading: the same arm contrasts, standard errors and degrees of freedom
as statsmodels' OLS of y ~ C(arm) + C(block) (complete and incomplete blocks), the round centring that cancels a
state shared by a block's arms, and the fall-back to each comparison's own blocks when the arms' spread differs."""

from __future__ import annotations

import math
import random

import pytest

from bench import rcbd
from bench.replication import Policy, compare_blocks


def _blocks(seed: int, arms: list[str], n: int, effect: dict[str, float], sd: dict[str, float] | None = None):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        shift = rng.gauss(0, 0.1)  # the block's state: cancelled
        out.append({a: shift + effect.get(a, 0.0) + rng.gauss(0, (sd or {}).get(a, 0.01)) for a in arms})
    return out


@pytest.mark.parametrize("incomplete", [False, True])
def test_the_fit_matches_statsmodels_ols_with_arm_and_block_effects(incomplete):
    import pandas as pd
    import statsmodels.formula.api as smf

    arms = ["a", "b", "c", "d"]
    blocks = _blocks(1, arms, 5, {"c": 0.05})
    if incomplete:  # the adaptive rounds: only some arms, with their reference
        blocks += [{"a": 0.02, "c": 0.08}, {"a": -0.01, "c": 0.03, "d": 0.0}]
    f = rcbd.fit(blocks)
    assert f is not None
    rows = [{"y": y, "arm": k, "block": str(i)} for i, b in enumerate(blocks) for k, y in b.items()]
    m = smf.ols("y ~ C(arm) + C(block)", data=pd.DataFrame(rows)).fit()
    assert f.df == int(m.df_resid)
    for arm in ("b", "c", "d"):
        est, se, df = rcbd.contrast(f, "a", arm)
        assert est == pytest.approx(m.params[f"C(arm)[T.{arm}]"], abs=1e-9)
        assert se == pytest.approx(m.bse[f"C(arm)[T.{arm}]"], rel=1e-6)
    est, se, _ = rcbd.contrast(f, "b", "c")  # a contrast of two non-reference arms
    c = m.t_test("C(arm)[T.c] - C(arm)[T.b] = 0")
    assert est == pytest.approx(float(c.effect.ravel()[0]), abs=1e-9)
    assert se == pytest.approx(float(c.sd.ravel()[0]), rel=1e-6)


def test_round_centring_cancels_a_state_every_arm_of_a_round_shares():
    # arm b 5 % slower than a in every round; rounds 2 and 3 served in a 1.8x slow state, for both arms alike
    a = [4.0, 4.0, 7.2, 7.2, 4.0]
    b = [x * 1.05 for x in a]
    v = rcbd.block_values({"a": a, "b": b})
    assert v["b"] - v["a"] == pytest.approx(math.log(1.05))
    # a round missing one arm's value is centred on the others or skipped, never breaks the block
    v = rcbd.block_values({"a": [4.0, None, 4.0], "b": [4.2, 4.2, None], "c": [4.0, 4.0, 4.0]})
    assert set(v) == {"a", "b", "c"}


def test_pooling_buys_degrees_of_freedom_and_falls_back_when_the_spread_differs():
    pol = Policy(3, 6, 0.95, 0.02)
    arms = ["ref", "x", "y", "z", "w", "v"]
    blocks = _blocks(3, arms, 3, {"x": 0.05})
    pairs = [(math.exp(b["ref"]), math.exp(b["x"])) for b in blocks]
    paired = compare_blocks(pairs, "step_ms_b1", pol)
    pooled = compare_blocks(pairs, "step_ms_b1", pol, pooled=(blocks, "ref", "x"))
    assert pooled.high - pooled.low < (paired.high - paired.low) / 1.5  # 10 df against 2
    assert pooled.verdict == "regression" and pooled.note == ""
    # one arm ten times as noisy as the rest: its spread is not the others', so nothing is pooled
    noisy = _blocks(4, arms, 6, {}, {"v": 0.2})
    f = rcbd.fit(noisy)
    assert f is not None and f.hetero_p < rcbd.HETERO_P
    pairs = [(math.exp(b["ref"]), math.exp(b["v"])) for b in noisy]
    c = compare_blocks(pairs, "step_ms_b1", pol, pooled=(noisy, "ref", "v"))
    assert "not pooled" in c.note
    assert c.verdict == compare_blocks(pairs, "step_ms_b1", pol).verdict
