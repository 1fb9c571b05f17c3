"""stats.noise_split: do a comparison's blocks vary more than their own repetitions predict? And the report's line."""

from __future__ import annotations

import math

import numpy as np

from bench.duet_report import _split_lines
from bench.stats import noise_split


def _blocks(rng, n_blocks: int, reps: int, rep_sd: float, block_sd: float, effect: float = 0.0):
    """(reference, arm) repetitions per block: a shared level per block, the arm's own state per block (block_sd),
    independent repetition noise (rep_sd), lognormal."""
    out = []
    for _ in range(n_blocks):
        level = rng.normal(1.5, 0.2)
        shift = effect + rng.normal(0, block_sd)
        a = np.exp(level + rng.normal(0, rep_sd, reps))
        b = np.exp(level + shift + rng.normal(0, rep_sd, reps))
        out.append((list(a), list(b)))
    return out


def test_blocks_of_pure_repetition_noise_show_no_block_effect():
    """The null: at alpha 0.05 the test flags at most about 5 % of runs (it is conservative: fewer)."""
    rng = np.random.default_rng(1)
    flagged = 0
    for _ in range(100):
        s = noise_split(_blocks(rng, 6, 6, 0.15, 0.0), "pairs")
        assert s is not None and s.blocks == 6 and s.reps == 6
        flagged += s.p < 0.05
    assert flagged <= 8


def test_a_state_per_block_is_flagged_and_measured():
    rng = np.random.default_rng(2)
    for value in ("pairs", "medians"):
        s = noise_split(_blocks(rng, 8, 6, 0.02, 0.15, effect=0.05), value)
        assert s is not None and s.p < 0.01
        assert 0.08 < s.observed < 0.3 and s.expected < 0.05


def test_the_expected_spread_follows_the_repetitions():
    """Four times the repetitions: about half the spread a block's value has from them."""
    rng = np.random.default_rng(3)
    few = [noise_split(_blocks(rng, 10, 6, 0.15, 0.0), "pairs").expected for _ in range(10)]
    many = [noise_split(_blocks(rng, 10, 24, 0.15, 0.0), "pairs").expected for _ in range(10)]
    ratio = float(np.mean(many) / np.mean(few))
    assert 0.35 < ratio < 0.65, ratio


def test_too_few_blocks_or_repetitions_give_nothing():
    rng = np.random.default_rng(4)
    assert noise_split(_blocks(rng, 2, 6, 0.1, 0.0), "pairs") is None
    assert noise_split(_blocks(rng, 5, 2, 0.1, 0.0), "pairs") is None
    # missing repetitions (a failed request) are dropped, not read as zero
    blocks = [([4.0, None, 4.1, 4.2], [4.4, 4.3, None, 4.5])] * 3
    s = noise_split(blocks, "medians")
    assert s is not None and math.isfinite(s.expected) and s.observed == 0


def test_identical_blocks_have_no_spread_and_no_warning(recwarn):
    s = noise_split([([4.0, 4.0, 4.0], [4.4, 4.4, 4.4])] * 3, "pairs")
    assert s is not None and s.expected == 0 and s.observed == 0 and s.p == 1.0
    assert not [w for w in recwarn if "degenerate" in str(w.message).lower()]


def test_the_report_line_names_the_knob():
    rng = np.random.default_rng(5)
    quiet = noise_split(_blocks(rng, 6, 6, 0.15, 0.0), "pairs")
    loud = noise_split(_blocks(rng, 8, 6, 0.02, 0.2), "pairs")
    assert quiet.p >= 0.05 and loud.p < 0.05
    (line,) = _split_lines([("a vs base", quiet)])
    assert "no more than their repetitions predict" in line and "`--reps-per-start`, 6" in line
    (line,) = _split_lines([("a vs base", quiet), ("b vs base", loud)])
    assert "vary more than their repetitions predict on b vs base" in line and "a vs base" not in line
    assert _split_lines([]) == []


def test_blocks_for_a_change_follow_the_t_interval():
    from scipy import stats as sst

    from bench.stats import blocks_for

    gap = math.log(1.05) - math.log(1.02)
    k = blocks_for(0.05, 0.05, 0.02, 0.95)
    assert k is not None and k >= 3
    assert sst.t.ppf(0.975, k - 1) * 0.05 / math.sqrt(k) <= gap < sst.t.ppf(0.975, k - 2) * 0.05 / math.sqrt(k - 1)
    assert blocks_for(0.001) == 3  # the first look's minimum, never fewer
    assert blocks_for(0.05, 0.02, 0.02) is None  # a change inside the minimum effect is never named
    assert blocks_for(5.0, cap=50) is None
    assert blocks_for(0.1, confidence=0.99) > blocks_for(0.1, confidence=0.95)


def test_the_design_lines_price_four_times_the_repetitions():
    from bench.duet_report import _block_cost, _design_lines
    from bench.stats import NoiseSplit, blocks_for

    quiet = NoiseSplit(blocks=4, reps=6, expected=0.12, observed=0.08, p=0.7)  # no block effect: all repetitions
    (line,) = [x for x in _design_lines([("a vs base", quiet, (35.0, 2.5, 2))], 0.02, 0.98) if x.startswith("- ")]
    k6, k24 = blocks_for(0.08, confidence=0.98), blocks_for(0.04, confidence=0.98)
    assert (
        f"6 repetitions: {k6} blocks of about 55 s" in line and f"24 repetitions: {k24} blocks of about 100 s" in line
    )
    assert k24 < k6
    # a state per block does not shrink with repetitions: 4 times as many barely help
    loud = NoiseSplit(blocks=8, reps=6, expected=0.02, observed=0.1, p=0.001)
    (line,) = [x for x in _design_lines([("b vs base", loud, None)], 0.02, 0.98) if x.startswith("- ")]
    k_loud6, k_loud24 = (
        blocks_for(0.1, confidence=0.98),
        blocks_for(math.sqrt(0.1**2 - 0.02**2 + 0.02**2 / 4), confidence=0.98),
    )
    assert line == f"- b vs base: 6 repetitions: {k_loud6} blocks; 24 repetitions: {k_loud24} blocks"
    assert k_loud24 >= k_loud6 - 2
    assert _design_lines([], 0.02, 0.95) == []

    class U:
        def __init__(self, rnd, startup, wall, reps):
            self.round, self.startup_s, self.block_wall_s, self.reps = rnd, startup, wall, [{}] * reps

    # the slowest server's start-up is the fixed part; the rest of the block is spread over its 6 + 2 rounds
    cost = _block_cost([U(0, 30, 62, 6), U(1, 33, 65, 6)], [U(0, 34, 62, 6), U(1, 31, 65, 6)], 2)
    assert cost == (33.5, 3.75, 2)  # (62 - 34) / 8 and (65 - 33) / 8
    assert _block_cost([U(0, 30, 0.0, 6)], [U(0, 30, 0.0, 6)], 2) is None  # no block wall time recorded
