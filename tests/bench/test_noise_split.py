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
