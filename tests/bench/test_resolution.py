"""stats.resolution: how far a "cannot tell" is from a verdict. Its unit count is checked by measuring that many
units: the interval then names the change, and one unit fewer does not."""

from __future__ import annotations

import math
import statistics

import pytest

from bench import report, stats


def _ratios(n: int, change: float, sd: float) -> list[tuple[float, float]]:
    """n (reference, arm) pairs whose log ratios have mean ln(1+change) and sample sd exactly `sd`."""
    base = [(-1) ** i * (1 + i % 3) for i in range(n)]
    m = statistics.fmean(base)
    z = [b - m for b in base]
    scale = sd / statistics.stdev(z)
    return [(1.0, math.exp(math.log1p(change) + scale * x)) for x in z]


@pytest.mark.parametrize("sd", [0.03, 0.06, 0.09])
def test_the_unit_count_for_a_change_is_where_the_paired_interval_first_names_it(sd):
    c = stats.compare_paired(_ratios(4, 0.05, sd)).to_dict()
    assert c["verdict"] == stats.UNDECIDED
    r = stats.resolution(c, target=0.05)
    assert r is not None and r.units is not None and r.units > 4
    at = stats.compare_paired(_ratios(r.units, 0.05, sd))
    fewer = stats.compare_paired(_ratios(r.units - 1, 0.05, sd))
    assert at.verdict == stats.REGRESSION, (r, at)
    assert fewer.verdict == stats.UNDECIDED, (r, fewer)


def test_the_resolvable_change_is_the_minimum_effect_plus_the_interval_s_half_width():
    c = stats.compare_paired(_ratios(5, 0.0, 0.05)).to_dict()
    r = stats.resolution(c)
    h = (math.log1p(c["high"]) - math.log1p(c["low"])) / 2
    assert r.resolves == pytest.approx(math.expm1(math.log1p(c["min_effect"]) + h))
    # a change of that size, measured with this interval's width, clears the minimum effect: a verdict
    assert stats.interval_verdict(math.log1p(r.resolves) - h + 1e-9, math.log1p(r.resolves) + h, 0.02, True) == (
        stats.REGRESSION
    )


def test_a_change_below_the_minimum_effect_or_too_noisy_is_out_of_reach_and_too_few_units_give_nothing():
    c = stats.compare_paired(_ratios(4, 0.0, 0.05)).to_dict()
    assert stats.resolution(c, target=0.01).units is None  # 1 % < the 2 % minimum effect: no count names it
    wild = stats.compare_paired(_ratios(3, 0.0, 1.5)).to_dict()
    assert stats.resolution(wild, target=0.05, cap=50).units is None
    assert stats.resolution(stats.compare_paired(_ratios(2, 0.0, 0.05)).to_dict()) is None  # too few: no interval


def test_the_pooled_block_reading_s_df_is_kept_and_used():
    # the same half width with 9 df (a pooled fit) means a larger se than with 3: more units, not fewer
    c = stats.compare_contrast(0.0, 0.05, 9, [1.0] * 4, [1.0] * 4).to_dict()
    assert c["df"] == 9
    pooled = stats.resolution(c)
    paired = stats.resolution({**c, "df": 3})
    assert pooled.units > paired.units
    # a record from before df was stored: no guess (n-1 would understate a pooled fit's count)
    assert stats.resolution({k: v for k, v in c.items() if k != "df"}) is None


def test_the_report_says_it_for_cannot_tell_and_not_for_a_verdict():
    undecided = stats.compare_paired(_ratios(4, 0.05, 0.06)).to_dict()
    line = report._resolution(undecided, "block")
    assert (
        line.startswith("at this noise it resolves changes beyond") and "blocks per arm would name a 5% change" in line
    )
    decided = stats.compare_paired(_ratios(8, 0.2, 0.01)).to_dict()
    assert decided["verdict"] == stats.REGRESSION
    assert report._resolution(decided, "block") == ""
