"""The bench's method against simulated servers (bench.simulate): error rates, not single runs.

Starts of the simulated stack vary like the H200 record (issue 12): bimodal between starts (+19% in half of
them), noisy within. The old method (one start per arm, a rank test over its repetitions) names a culprit for
a regression that does not exist; the new one (start medians, intervals, confirmation) names a wrong patch in
at most alpha of the trials, finds a real shift, a phase-only one, an interaction, and stops when decided.
"""

from __future__ import annotations

import statistics

import pytest
from scipy import stats as sst
from simlab import Plant, SimLab, World, bisect_rates, gpu_hidden, host_slowdown, sim_arm

from bench import plans
from bench.errors import BudgetExhausted
from bench.replication import Policy, decide_pairs

GOOD = ("g",)
CANDS = ("p0", "p1", "p2")
BIMODAL = dict(start_cv=0.01, rep_cv=0.05, bimodal_p=0.5, bimodal_shift=0.19, reps=9)
SETTINGS = plans.Settings(Policy(initial=3, max_starts=8, confidence=0.95, min_effect=0.02))


def _bisect(world, seed, settings=SETTINGS, budget=None):
    lab = SimLab(world, seed=seed, max_total_starts=budget)
    res = plans.run_bisect(
        lab,
        sim_arm("good", GOOD),
        sim_arm("bad", GOOD + CANDS),
        lambda patches, role: sim_arm(role, patches),
        lambda name: set(),
        settings,
    )
    return res, lab


def _old_method_culprit(world, seed):
    """Issue 6's bisect: 1 start per arm, 9 reps, MWU p < 0.01 and >= 2% on the endpoints, then each probe is
    classified by the nearer reference median, and the last prefix's candidate is named."""
    lab = SimLab(world, seed=seed)
    good, bad = sim_arm("good", GOOD), sim_arm("bad", GOOD + CANDS)
    lab.add_starts([good, bad])
    g, b = lab.reps(good, "step_ms_b1"), lab.reps(bad, "step_ms_b1")
    mg, mb = statistics.median(g), statistics.median(b)
    if not (sst.mannwhitneyu(g, b).pvalue < 0.01 and (mb - mg) / mg >= 0.02):
        return None
    lo, hi = 0, len(CANDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        probe = sim_arm(f"p{mid}", GOOD + CANDS[:mid])
        lab.add_starts([probe])
        m = statistics.median(lab.reps(probe, "step_ms_b1"))
        if abs(m - mb) < abs(m - mg):
            hi = mid
        else:
            lo = mid
    return CANDS[hi - 1]


def test_old_method_names_culprits_for_start_noise_and_new_one_does_not():
    world = World(**BIMODAL)  # no regression at all: every named patch is a false culprit
    trials = 120
    old = sum(_old_method_culprit(world, t) is not None for t in range(trials))
    new = sum(_bisect(world, t)[0]["culprit"] is not None for t in range(trials))
    assert old / trials > 0.2  # about a quarter: whenever good drew the fast mode and bad the slow one
    assert new / trials <= 0.05
    assert new < old / 6


def test_wrong_culprit_rate_with_a_real_regression_on_a_bimodal_stack():
    """A real +5% on p2 under the same bimodal noise: never the wrong patch (cannot tell is allowed)."""
    world = World(plants=[host_slowdown("p2", 0.05)], **BIMODAL)
    r = bisect_rates(lambda t: world, len(CANDS), "p2", 100, SETTINGS)
    assert r["wrong"] / r["trials"] <= 0.05


@pytest.mark.parametrize("culprit", CANDS)
def test_a_real_shift_is_found_and_confirmed(culprit):
    world = World(plants=[host_slowdown(culprit, 0.05)], start_cv=0.01, rep_cv=0.01)
    r = bisect_rates(lambda t: world, len(CANDS), culprit, 30, SETTINGS)
    assert r["wrong"] == 0 and r["right"] >= 27
    res, _ = _bisect(world, 1)
    assert [p["role"] for p in res["probes"]][-2:] == [f"confirm: bad - {culprit}", f"confirm: good + {culprit}"]


def test_a_gpu_side_delay_that_only_shows_in_a_phase_is_followed_and_named():
    world = World(plants=[gpu_hidden("p1", 0.2)], start_cv=0.01, rep_cv=0.01)
    hits = 0
    for t in range(20):
        res, _ = _bisect(world, t)
        assert res["culprit"] in (None, "p1")
        hits += res["culprit"] == "p1" and res["metric"] == "eagle_verify_ms_b1"
    assert hits >= 18
    assert "step_ms_b1 did not regress" in res["followed"] and "adjusted for" in res["followed"]
    # without following, the step time is the answer: no regression there, nobody named
    res, _ = _bisect(world, 0, plans.Settings(SETTINGS.policy, follow=False))
    assert res["outcome"] == "no regression" and res["culprit"] is None


def test_an_interaction_is_reported_as_such():
    world = World(plants=[Plant(frozenset({"p0", "p2"}), host_slowdown("x", 0.08).effect)], start_cv=0.01, rep_cv=0.01)
    res, _ = _bisect(world, 3)
    assert res["outcome"] == "interaction" and (res["partner"], res["culprit"]) == ("p0", "p2")


def test_two_contributors_are_not_blamed_on_one():
    world = World(plants=[host_slowdown("p0", 0.05), host_slowdown("p2", 0.05)], start_cv=0.005, rep_cv=0.01)
    outcomes = [_bisect(world, t)[0] for t in range(10)]
    assert all(o["culprit"] is None for o in outcomes)
    assert {o["outcome"] for o in outcomes} <= {"several", "partial", "cannot tell", "inconsistent"}


def test_null_comparison_names_nothing_in_repeated_runs():
    """ab of two identical arms: 'same' or 'cannot tell', never a change, in 200 runs."""
    world = World(start_cv=0.01, rep_cv=0.02)
    called = 0
    for t in range(200):
        lab = SimLab(world, seed=t)
        a, b = sim_arm("a", GOOD), sim_arm("b", GOOD + ("noop",))
        res = plans.run_ab(lab, [a, b], [("ab", a, b)], SETTINGS)
        called += res["comparisons"][0]["verdict"] in ("regression", "improvement")
    assert called / 200 <= 0.05


def test_adaptive_replication_stops_when_decided_and_at_the_cap():
    clear = World(plants=[host_slowdown("p0", 0.2)], start_cv=0.005)
    lab = SimLab(clear, seed=0)
    a, b = sim_arm("a", GOOD), sim_arm("b", GOOD + ("p0",))
    assert decide_pairs(lab, SETTINGS.policy, [(a, b)], "step_ms_b1")
    assert lab.n_starts(a) == lab.n_starts(b) == 3  # decided at the first look: no start more
    # +2% under 10% start noise cannot be decided in 5 starts: the arms stop at max_starts, "cannot tell"
    edge = World(plants=[host_slowdown("p0", 0.02)], start_cv=0.10)
    lab = SimLab(edge, seed=0)
    pol = Policy(initial=3, max_starts=5)
    assert not decide_pairs(lab, pol, [(a, b)], "step_ms_b1")
    assert lab.n_starts(a) == lab.n_starts(b) == 5
    assert lab.order[:6] == [a.key, b.key] * 3  # interleaved


def test_budget_ends_with_cannot_tell_and_the_budget_named():
    world = World(plants=[host_slowdown("p2", 0.05)], start_cv=0.01)
    res, lab = _bisect(world, 0, budget=8)
    assert res["budget_exhausted"] and res["culprit"] is None and res["outcome"] == "cannot tell"
    assert "at this budget" in res["reason"] and len(lab.order) == 8
    with pytest.raises(BudgetExhausted):
        lab.add_starts([sim_arm("x", ())])


def test_ablate_names_only_confirmed_culprits_and_measures_the_missing_side():
    world = World(plants=[host_slowdown("p1", 0.06)], start_cv=0.01)
    lab = SimLab(world, seed=2)
    base, full = sim_arm("base", GOOD), sim_arm("full", GOOD + CANDS)
    alone = {p: sim_arm(f"+{p}", GOOD + (p,)) for p in CANDS}
    leave = {p: sim_arm(f"-{p}", tuple(x for x in GOOD + CANDS if x != p)) for p in CANDS}
    res = plans.run_ablate(lab, base, full, alone, leave, "leave-out", SETTINGS)
    assert res["culprits"] == ["p1"]
    row = {r["patch"]: r for r in res["patches"]}
    assert row["p1"]["alone"] == "regression" and row["p1"]["left_out"] == "improvement"
    assert row["p1"]["confirmation_measured"] and not row["p0"]["confirmation_measured"]
    assert lab.n_starts(alone["p0"]) == 0 and lab.n_starts(alone["p1"]) >= 3


def _start_cv(reps: int, seeds: int = 120) -> float:
    """Median start-to-start CV of one set's batch-1 step over 15 starts, on run 3's two-speed H100: 1.52x slow,
    a switch about every 7 repetitions (0.14-0.16 per repetition), 32 repetitions' time per server start."""
    cvs = []
    for seed in range(seeds):
        lab = SimLab(
            World(start_cv=0.02, rep_cv=0.02, reps=reps, host_slow=0.52, host_stay=0.84, host_ticks_per_start=32),
            seed=seed,
        )
        a = sim_arm("a", GOOD)
        for _ in range(15):
            lab.add_starts([a])
        v = lab.start_values(a, "step_ms_b1")
        cvs.append(statistics.stdev(v) / statistics.mean(v))
    return statistics.median(cvs)


def test_on_a_host_that_switches_speed_longer_starts_decide_sooner():
    """Why gpu_runs.sh measures 30 repetitions a start: a repetition (~1.1 s) is cheap next to a start (~35 s),
    and more of them average the host's speed switches. Run 3's own starts: CV 23.3 / 19.4 / 16.7 % from their
    first 1 / 4 / 8 repetitions (bench/results/2026-12-07-h100-run3)."""
    cv8, cv30 = _start_cv(8), _start_cv(30)
    assert 0.10 < cv8 < 0.22  # near the record's 16.7 %
    # device time per decision goes with cv^2 x a start's seconds
    cost = {8: 35 + 1.1 * 9, 30: 35 + 1.1 * 31}
    assert cv30**2 * cost[30] < 0.75 * cv8**2 * cost[8]
