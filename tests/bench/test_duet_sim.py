"""The duet design against the sequential one on a simulated machine whose state changes over wall time
(bench.simulate.World.host_slow: a two-state chain, x1.6 while slow as on run7's VM, stepping once per
repetition and 10 times per server start, multiplying whichever server serves at that moment).

Figures of `python -m bench simulate --duet --trials 200 [--effect 0.05] [--host-stay 0.8] [--duet-value pairs]`
(the same seeds): sequential start-to-start CV 24 %, final interval 67-71 points wide; duet-to-duet CV of the
ratio 1.4-1.9 % while the state holds ~20 repetitions, 19 % for the ratio of medians when it switches every
~5 (2 of 5 slow repetitions in one arm, 3 in the other), 1.7 % for the adjacent-pair ratio.
"""

from __future__ import annotations

import pytest

from bench.plans import Settings
from bench.replication import Policy
from bench.simulate import World, duet_rates, host_slowdown

SETTINGS = Settings(Policy(3, 8))
TRIALS = 200


def _world(effect: float, stay: float):
    plants = [host_slowdown("p", effect)] if effect else []
    return lambda _t: World(plants, start_cv=0.01, rep_cv=0.01, host_slow=0.6, host_stay=stay, host_ticks_per_start=10)


def _named(r: dict) -> int:
    return r["verdicts"].get("regression", 0) + r["verdicts"].get("improvement", 0)


@pytest.mark.parametrize("value", ["medians", "pairs"])
def test_null_pair_sequential_is_wide_duet_is_tight_and_names_nothing(value):
    r = duet_rates(_world(0.0, 0.95), TRIALS, SETTINGS, planted=False, value=value)
    seq, duet = r["sequential"], r["duet"]
    assert seq["median_cv"] > 0.15 and seq["median_width"] > 0.4  # the machine's state is in every start median
    assert duet["median_cv"] < 0.03 and duet["median_width"] < 0.08  # both servers share it
    assert _named(duet) <= 0.05 * TRIALS  # alpha 0.05 over the looks
    assert duet["verdicts"].get("same", 0) >= 0.2 * TRIALS  # and it can say "same", which sequential cannot here


def test_planted_five_percent_is_found_with_few_duets():
    r = duet_rates(_world(0.05, 0.95), TRIALS, SETTINGS, planted=True, value="pairs")
    duet, seq = r["duet"], r["sequential"]
    assert duet["verdicts"].get("regression", 0) >= 0.85 * TRIALS and duet["median_units"] <= 6
    assert duet["verdicts"].get("improvement", 0) == 0
    assert seq["verdicts"].get("regression", 0) <= 0.2 * TRIALS  # at 8 starts per arm


def test_a_state_switching_within_a_duet_needs_the_adjacent_pairs():
    """When the state switches every few repetitions, the ratio of two medians of 5 moves by the whole slow/fast
    step; the adjacent A/B pairs keep the duet tight, and neither names a null pair."""
    med = duet_rates(_world(0.0, 0.8), TRIALS, SETTINGS, planted=False, value="medians")["duet"]
    pairs = duet_rates(_world(0.0, 0.8), TRIALS, SETTINGS, planted=False, value="pairs")["duet"]
    assert med["median_cv"] > 0.1 and pairs["median_cv"] < 0.03
    assert _named(med) <= 0.05 * TRIALS and _named(pairs) <= 0.05 * TRIALS
