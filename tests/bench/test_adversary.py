"""Adversarial scenarios for the bench's verdicts: planted regressions of kinds the method was not built against.

Each test runs the real plans (bench.plans) over a simulated lab whose noise the bench's authors did not model
(bench.simulate.World extended below: heavy-tailed starts, drift over a session, a patch that only widens the
spread, independent noise per metric) and states what an honest bench must do: never name a wrong culprit (or a
wrong partner, or claim "no regression" / "same" for a real change) in more than ALPHA of the seeds; "cannot
tell" is always acceptable. Rates are measured over many seeds, not single runs.

A test marked `# FINDING:` fails on the code it was written against (main at b787d21); its comment gives the
rate measured there and why. They are kept failing on purpose: the lead fixes the code, not the test.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pytest
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures
from scipy import stats as sst

from bench import bisect as bis
from bench import plans, stats
from bench import scenarios as sc
from bench.replication import Policy, compare, decide_pairs
from bench.scenarios import split
from bench.simulate import Plant, SimLab, World, host_slowdown, sim_arm

ALPHA = 0.05  # the configured alpha: 95% intervals
SETTINGS = plans.Settings(Policy(initial=3, max_starts=8, confidence=1 - ALPHA, min_effect=0.02))
GOOD = ("g",)
C3 = ("p0", "p1", "p2")


# the adversary's noise models (heavy tails, drift, outliers, ...) live in bench.simulate.World / SimLab, so that
# `python -m bench simulate --scenario` replays them too (bench.scenarios)
AdvWorld = World
AdvLab = SimLab


def _bisect(world, seed, cands=C3, settings=SETTINGS, budget=None, make=None, dependents=lambda n: set()):
    lab = AdvLab(world, seed=seed, max_total_starts=budget)
    make = make or (lambda patches, role: sim_arm(role, patches))
    res = plans.run_bisect(lab, sim_arm("good", GOOD), sim_arm("bad", GOOD + tuple(cands)), make, dependents, settings)
    return res, lab


@dataclass(repr=False)
class Rates(sc.Rates):
    @property
    def wrong_rate(self) -> float:
        return self.wrong / self.trials

    @property
    def right_rate(self) -> float:
        return self.right / self.trials

    def rate(self, outcome: str) -> float:
        return self.outcomes.get(outcome, 0) / self.trials

    def __repr__(self) -> str:
        return (
            f"right {self.right_rate:.3f} wrong {self.wrong_rate:.3f} outcomes {self.outcomes} wrong names "
            f"{self.wrong_names} median starts {statistics.median(self.starts)}"
        )


def _rates(world_of, trials, truth=frozenset(), cands=C3, **kw) -> Rates:
    """Bisect `trials` seeds; a named culprit (or partner + culprit pair) not in `truth` is wrong."""
    r = Rates(trials)
    for t in range(trials):
        res, lab = _bisect(world_of(t), t, cands, **kw)
        r.count(res, len(lab.order), frozenset(truth))
    return r


def _same(world):
    return lambda t: world


_split = split


# ---- the statistics themselves -------------------------------------------------------------------------------


def test_welch_interval_and_p_match_scipy():
    """compare_starts' interval and p are scipy's Welch test on the logs (to 1e-9), for unequal n and spreads."""
    import random

    import numpy as np

    rng = random.Random(7)
    for _ in range(300):
        na, nb = rng.randint(3, 9), rng.randint(3, 9)
        a = [math.exp(rng.gauss(1.0, rng.choice([0.002, 0.02, 0.1]))) for _ in range(na)]
        b = [math.exp(rng.gauss(1.04, rng.choice([0.002, 0.02, 0.1]))) for _ in range(nb)]
        conf = rng.choice([0.9, 0.95, 1 - 0.05 / 9])
        ref = sst.ttest_ind(np.log(b), np.log(a), equal_var=False)
        ci = ref.confidence_interval(conf)
        c = stats.compare_starts(a, b, confidence=conf)
        assert math.log1p(c.low) == pytest.approx(ci.low, abs=1e-9)
        assert math.log1p(c.high) == pytest.approx(ci.high, abs=1e-9)
        assert c.p_value == pytest.approx(ref.pvalue, abs=1e-9)


def test_contrast_is_the_satterthwaite_interval_of_the_linear_combination():
    import numpy as np

    groups = [[1.01, 0.98, 1.03], [1.0, 1.02, 0.99, 1.01, 0.97], [1.1, 1.12, 1.08, 1.09]]
    c = np.array([1.0, -0.5, -0.5])
    logs = [np.log(g) for g in groups]
    v = np.array([x.var(ddof=1) / len(x) for x in logs]) * c**2
    df = v.sum() ** 2 / sum(vi**2 / (len(x) - 1) for vi, x in zip(v, logs))
    est = float(sum(ci * x.mean() for ci, x in zip(c, logs)))
    h = float(sst.t.ppf(0.975, df)) * math.sqrt(v.sum())
    got = stats.log_contrast(groups, list(c), 0.95)
    assert (got.estimate, got.low, got.high, got.df) == pytest.approx((est, est - h, est + h, df))


@pytest.mark.parametrize("noise", ["t3", "bimodal"])
def test_one_look_never_calls_a_change_beyond_d_in_a_null_with_three_starts(noise):
    """The 3-start minimum is honest under heavy tails and a bimodal stack: one look at 3 vs 3 starts calls a
    change beyond +-2% in at most alpha/2 of null pairs (measured: t3 0.0%, bimodal 0.3/+15% 1.9%)."""
    w = AdvWorld(
        start_cv=0.01,
        rep_cv=0.01,
        noise="t3" if noise == "t3" else "lognormal",
        bimodal_p=0.3 if noise == "bimodal" else 0.0,
        bimodal_shift=0.15,
    )
    called = 0
    trials = 1500
    for t in range(trials):
        lab = AdvLab(w, seed=t)
        a, b = sim_arm("a", GOOD), sim_arm("b", GOOD + ("x",))
        for _ in range(3):
            lab.add_starts([a, b])
        called += compare(lab, a, b, "step_ms_b1", SETTINGS.policy).verdict in (stats.REGRESSION, stats.IMPROVEMENT)
    assert called / trials <= ALPHA / 2


def test_two_starts_per_arm_cannot_give_a_usable_interval():
    """Why 3 is the least: Welch with 2 starts per arm has 1 <= df <= 2, a t quantile of 4.3 to 12.7."""
    assert sst.t.ppf(0.975, 1) > 12 and sst.t.ppf(0.975, 2) > 4.3 > sst.t.ppf(0.975, 4) + 1.5
    assert stats.compare_starts([1.0, 1.01], [1.2, 1.21]).verdict == stats.TOO_FEW


def _boundary_errors(effect: float, trials: int, policy: Policy = SETTINGS.policy) -> dict[str, float]:
    """Verdicts of ab's adaptive replication when the true change is exactly `effect` (cv 1% starts)."""
    out: dict[str, float] = {}
    w = AdvWorld(plants=[host_slowdown("x", effect)], start_cv=0.01, rep_cv=0.01)
    for t in range(trials):
        lab = AdvLab(w, seed=t)
        a, b = sim_arm("a", GOOD), sim_arm("b", GOOD + ("x",))
        decide_pairs(lab, policy, [(a, b)], "step_ms_b1")
        v = compare(lab, a, b, "step_ms_b1", policy).verdict
        out[v] = out.get(v, 0) + 1 / trials
    return out


def test_optional_stopping_keeps_the_boundary_errors_within_alpha():
    """A true change of exactly -d: 'improvement' claims a change beyond d and 'same' claims one inside it; each
    is wrong here and each must stay within alpha (the 95% interval promises 2.5% per side at one look).

    # FINDING (fixed: replication.Policy.look_confidence spends alpha over the looks, first by Bonferroni, now
    # by a group-sequential Lan-DeMets boundary, bench/sequential.py): adaptive replication
    # looked up to 6 times (3..8 starts) at the same 95% interval and stopped at the
    # first decisive look; measured over 600 seeds (cv 1%): 'improvement' 9.0%, 'same' 3.7% at -2% and 'same'
    # 8.2%, 'regression' 5.5% at +2% -- against 1.3% / 5.0% for one look at a fixed 8 starts. Fix: spend alpha
    # over the looks (e.g. confidence 1 - alpha / (max_starts - initial + 1) at each look, 99.17% here: measured
    # 1.2% / 1.0% at the boundary, +0.5 starts on average) or a group-sequential (Pocock) boundary.
    """
    at_minus = _boundary_errors(-0.02, 400)
    at_plus = _boundary_errors(+0.02, 400)
    assert at_minus.get(stats.IMPROVEMENT, 0) <= ALPHA, at_minus
    assert at_plus.get(stats.SAME, 0) <= ALPHA, at_plus


# ---- bisect: kinds of regression not simulated before ----------------------------------------------------------


@pytest.mark.parametrize("p", [0.5, 0.7])
def test_intermittent_regression_names_no_wrong_patch(p):
    """+10% on p1 in only some starts of a set carrying it (measured wrong: 0% at p=0.5, 1.3% at p=0.7 -- two
    false interactions in 150; mostly 'cannot tell', which is honest: the bad arm itself is bimodal)."""
    w = AdvWorld(plants=[Plant(frozenset({"p1"}), host_slowdown("p1", 0.10).effect, intermittent=p)], start_cv=0.01)
    r = _rates(_same(w), 150, {"p1"})
    assert r.wrong_rate <= ALPHA, r


def test_first_starts_slower_warm_up_drift_names_no_wrong_patch():
    """Starts after the throwaway still 5% slow, decaying over 3 starts (JIT, page cache): the references absorb
    it (measured wrong 0%, right 55%; the rest 'cannot tell')."""
    w = AdvWorld(plants=[host_slowdown("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 + 0.05 * math.exp(-k / 3))
    r = _rates(_same(w), 120, {"p1"})
    assert r.wrong_rate <= ALPHA, r


def test_a_session_that_speeds_up_does_not_invent_an_interaction():
    """The machine gets 0.2% faster per start (thermal settling; about 6% over a 30-start bisect).

    # FINDING (fixed: the confirmations, and an interaction's pair, are measured as a block of fresh starts
    # interleaved with fresh good and bad, and read against those only): wrong interaction 'p0 + p1' in
    # 19.5-22.7% of seeds at b787d21 (culprit p1 alone, 200 seeds); 8% right. The
    # references are measured in the first 6 starts and every probe after them, never interleaved, so a later
    # probe reads faster. `good + p1` (truly bad) is measured late and placed GOOD; bisect._partner then takes
    # the pair (good + p0 + p1) from the search's prefix probe measured earlier (BAD) and good + p0 (GOOD) from
    # the search too: no new measurement backs the interaction. Also 'inconsistent' (redundant culprits) text
    # for a single culprit. Fix: measure each probe in rounds with fresh starts of good and bad (G P B G P B ...)
    # and compare against those, or test the references for a trend over start order and refuse to name under
    # drift; an interaction needs good + c re-measured beside good.
    """
    w = AdvWorld(plants=[host_slowdown("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 - 0.002 * k)
    r = _rates(_same(w), 150, {"p1"})
    assert r.wrong_rate <= ALPHA, r


def test_references_from_another_session_name_no_wrong_patch():
    """--reuse of the endpoints from an earlier session, probes today on a 3% faster machine (measured: wrong
    4.7% -- 7 false interactions in 150, the drift test's mechanism, just under alpha -- and 57% right)."""
    w = AdvWorld(plants=[host_slowdown("p2", 0.05)], start_cv=0.01, drift=lambda k: 0.97 if k >= 6 else 1.0)
    r = _rates(_same(w), 150, {"p2"})
    assert r.wrong_rate <= ALPHA, r


def test_a_patch_that_only_widens_the_start_spread_is_not_a_culprit():
    """p1 adds 8% start-to-start sd without moving the median: no culprit in a null, and no wrong one beside a
    real +5% on p2 (measured: 0% wrong in both; the real one is found in 31%, 'cannot tell' otherwise)."""
    null = _rates(_same(AdvWorld(start_cv=0.01, var_plants={"p1": 0.08})), 120)
    assert null.wrong == 0, null
    real = _rates(
        _same(AdvWorld(plants=[host_slowdown("p2", 0.05)], start_cv=0.01, var_plants={"p1": 0.08})), 120, {"p2"}
    )
    assert real.wrong_rate <= ALPHA, real


@pytest.mark.parametrize("improver,culprit", [("p0", "p2"), ("p2", "p0")])
def test_an_improvement_among_the_candidates_does_not_hide_or_become_the_culprit(improver, culprit):
    """-5% on one candidate, +8% on another: bad is only 2.6% slower than good, so placing probes takes
    precision (measured: 89-98% right, 0% wrong, either order; the rest 'cannot tell')."""
    w = AdvWorld(plants=[host_slowdown(improver, -0.05), host_slowdown(culprit, 0.08)], start_cv=0.01)
    r = _rates(_same(w), 100, {culprit})
    assert r.wrong == 0 and r.right_rate >= 0.85, r


def test_a_split_below_the_minimum_effect_names_the_main_patch_or_nobody():
    """5% split 70/30: the rest (1.5%) is inside the 2% minimum effect, so naming p0 is right; p2 never."""
    r = _rates(_same(AdvWorld(plants=_split(0.05, 0.7), start_cv=0.005)), 120, {"p0"})
    assert r.wrong_rate <= ALPHA, r


@pytest.mark.parametrize(
    "plants,label",
    [
        (_split(0.10, 0.7), "10% split 70/30"),
        ([host_slowdown("p0", 0.08), host_slowdown("p2", 0.03)], "+8% and +3%"),
    ],
)
def test_a_split_regression_is_not_blamed_on_one_patch_when_the_rest_exceeds_the_minimum_effect(plants, label):
    """p0 carries most, p2 the rest, and the rest is beyond the 2% minimum effect: naming p0 alone as the
    confirmed culprit claims 'bad without p0 is good' while it is 3% slower.

    # FINDING (fixed: verdicts.place_confirmation also needs the set's distance to the reference it must match
    # small -- estimate at most d/2 -- or decided beyond d, which makes the outcome 'partial'): p0 named as the
    # sole, confirmed culprit at b787d21 in 59-61% (10% split 70/30) and 60-70% (+8%/+3%) of
    # seeds at start cv 0.5-1% (150 seeds); p2 never named. place_probe calls a probe GOOD as soon as it is
    # nearer good than bad (the midpoint contrast) and replication stops there, while BETWEEN needs both
    # pairwise comparisons decided beyond d: with 3 starts the 3% residual is never decided, so 'bad - p0' is
    # GOOD at the first look. Fix: for the two confirmations require more than 'nearer': e.g. keep adding starts
    # while bad - c vs good is undecided and its estimate exceeds d/2, or call PARTIAL unless bad - c vs good
    # rules out +d (and good + c vs bad rules out -d); at least print the residual's interval beside the name.
    """
    r = _rates(_same(AdvWorld(plants=plants, start_cv=0.01)), 120)
    assert r.wrong_rate <= ALPHA, f"{label}: {r}"


def test_two_equal_contributors_under_noise_name_nobody():
    """+5% on p0 and on p2 at start cv 2% (measured wrong 0/150: 'several' 63%, 'cannot tell' 31%)."""
    r = _rates(_same(AdvWorld(plants=[host_slowdown("p0", 0.05), host_slowdown("p2", 0.05)], start_cv=0.02)), 150)
    assert r.wrong_rate <= ALPHA, r


def _closure_of(requires: dict[str, set[str]]):
    def close(patches):
        out = set(patches)
        todo = list(patches)
        while todo:
            for r in requires.get(todo.pop(), ()):
                if r not in out:
                    out.add(r)
                    todo.append(r)
        return out

    def dependents(name):
        return {p for p in requires if name in close({p}) and p != name}

    return close, dependents


def test_a_patch_that_requires_a_later_candidate_does_not_hide_the_culprit():
    """p0 requires p2 (the manifest does not order requirements first) and p2 is the culprit. Every probe is
    closed over requires as `make_arm` does, so 'good + prefix 1' really carries p0 and p2.

    # FINDING (fixed on this branch: bisect.candidates_between puts each patch after the candidates it
    # requires): at b787d21 100% 'inconsistent: another candidate causes the same regression (redundant
    # culprits)' and p2 never named -- the search blamed p0, as prefix {p0} is closed to {p0, p2}, and bad - p0
    # keeps p2.
    """
    assert bis.candidates_between(GOOD, GOOD + ("p0", "p1", "p2"), _closure_of({"p0": {"p2"}})[1]) == ("p1", "p2", "p0")
    close, deps = _closure_of({"p0": {"p2"}})
    order = ("p0", "p1", "p2")

    def make(patches, role):
        return sim_arm(role, tuple(p for p in GOOD + order if p in close(patches)))

    w = AdvWorld(plants=[host_slowdown("p2", 0.06)], start_cv=0.005)
    r = _rates(_same(w), 20, {"p2"}, cands=order, make=make, dependents=deps)
    assert r.wrong == 0, r
    assert r.right_rate >= 0.9, r


def test_a_patch_that_requires_an_earlier_one_is_bisected_with_its_requirement():
    """p1 requires p0; the culprit is p0: bad - p0 must take p1 along, and p0 is named (measured 100%)."""
    close, deps = _closure_of({"p1": {"p0"}})

    def make(patches, role):
        return sim_arm(role, tuple(p for p in GOOD + C3 if p in close(patches)))

    r = _rates(
        _same(AdvWorld(plants=[host_slowdown("p0", 0.06)], start_cv=0.005)), 20, {"p0"}, make=make, dependents=deps
    )
    assert r.right_rate >= 0.9 and r.wrong == 0, r


@pytest.mark.parametrize(
    "metric_effect",
    [
        {"step_ms_bc": 1.05, "tok_s_bc": 1 / 1.05},  # only the concurrent phase
        {"tok_s_b1": 1 / 1.08},  # only tok/s (e.g. a slower detokenizer: not in the scheduler's step)
    ],
)
def test_a_regression_on_another_metric_is_never_reported_as_no_regression(metric_effect):
    """The primary step_ms_b1 does not move; another metric regresses beyond the issue's 5%. 'No regression' is a
    claim (the user stops looking); 'cannot tell' is allowed.

    # FINDING (fixed on this branch: plans.run_bisect replicates the endpoints while some metric's regression
    # is not ruled out, and says 'no regression' only when every metric's bad-side bound is inside d -- an
    # intersection-union test, no Bonferroni -- else 'cannot tell'): at b787d21 'no regression' in 14-16% of
    # seeds for +5% concurrent-only, 4% for tok/s-only (150 seeds; now 0%, culprit named 97-100% against
    # 83-96%). The endpoints were replicated only until the primary was decided ('same' after 3 starts), then
    # follow_metric read the others at 1 - alpha/9 with those 3 starts (t quantile ~6). Cost: a null bisect at
    # start cv 1% takes a median 14 starts (was 12), 16 with independent noise per metric (was 12).
    """
    assert (
        "not ruled out"
        in _bisect(AdvWorld(plants=[Plant(frozenset({"p1"}), metric_effect)], start_cv=0.01), 0, budget=6)[0]["reason"]
    )
    w = AdvWorld(plants=[Plant(frozenset({"p1"}), metric_effect)], start_cv=0.01)
    r = _rates(_same(w), 120, {"p1"})
    assert r.wrong == 0, r
    assert r.rate("no regression") <= ALPHA, r


def test_a_bimodal_stack_with_a_real_regression_names_no_wrong_patch():
    """p=0.3 slow mode +15% per start, +5% on p1 (measured 0% wrong over 120 seeds; 7.5% right, the rest
    'cannot tell' after a median 24 starts: honest, but deciding needs more than 8 starts per arm)."""
    w = AdvWorld(
        plants=[host_slowdown("p1", 0.05)], start_cv=0.01, rep_cv=0.05, bimodal_p=0.3, bimodal_shift=0.15, reps=9
    )
    r = _rates(_same(w), 120, {"p1"})
    assert r.wrong_rate <= ALPHA, r


@pytest.mark.parametrize("culprit", [None, "p0", "p2"])
def test_heavy_tailed_start_noise_names_no_wrong_patch(culprit):
    """Student t (3 df) start noise, sd 2% (measured wrong 0%; right 80-83% for a +5% culprit)."""
    plants = [host_slowdown(culprit, 0.05)] if culprit else []
    r = _rates(_same(AdvWorld(plants=plants, start_cv=0.02, noise="t3")), 100, {culprit} if culprit else set())
    assert r.wrong_rate <= ALPHA, r


def test_outlier_starts_and_outlier_repetitions_name_no_wrong_patch():
    """1 start in 10 is 30% slow (another tenant), 1 repetition in 5 is 50% slow (a pause); +5% on p1 (measured
    wrong 0%, but right only 7.5%: the median of repetitions absorbs the pauses, while one outlier start widens
    the mean-of-logs interval of its arm until max_starts, so 'cannot tell' after 16 starts)."""
    w = AdvWorld(
        plants=[host_slowdown("p1", 0.05)],
        start_cv=0.01,
        outlier_p=0.1,
        outlier_shift=0.3,
        rep_outlier_p=0.2,
        rep_outlier_shift=0.5,
    )
    r = _rates(_same(w), 120, {"p1"})
    assert r.wrong_rate <= ALPHA, r


@pytest.mark.parametrize("culprit", ["p0", "p5", "p11"])
def test_twelve_candidates_are_bisected_within_the_probe_bound(culprit):
    """12 candidates, +5% at cv 1%: named in >= 90% with 4 search probes + a confirmation block (measured:
    95-97.5%, median 37-38 starts: 6 endpoint starts, 4 probes x 3, a block of good, bad - c, bad, good + c x 3
    and a few more where undecided; the block's fresh references are what drift and a new machine cost)."""
    cands = tuple(f"p{i}" for i in range(12))
    r = _rates(_same(AdvWorld(plants=[host_slowdown(culprit, 0.05)], start_cv=0.01)), 40, {culprit}, cands=cands)
    assert r.wrong == 0 and r.right_rate >= 0.9, r
    assert statistics.median(r.starts) <= 6 + 4 * 3 + 4 * 3 + 12, r


@pytest.mark.parametrize("culprit", ["p0", "p2"])
def test_a_budget_that_ends_anywhere_mid_bisect_names_no_wrong_patch(culprit):
    """Every cut from 4 to 39 starts: never a wrong patch, and a 'cannot tell' says it was the budget."""
    w = AdvWorld(plants=[host_slowdown(culprit, 0.05)], start_cv=0.01)
    for cut in range(4, 40):
        for seed in range(6):
            res, lab = _bisect(w, seed, budget=cut)
            assert res["culprit"] in (None, culprit), (cut, seed, res["reason"])
            assert len(lab.order) <= cut
            if res["budget_exhausted"] and res["outcome"] == bis.CANNOT_TELL:
                assert plans.BUDGET_NOTE in res["reason"], (cut, seed, res["reason"])


def test_independent_noise_per_metric_does_not_make_follow_name_a_culprit_in_a_null():
    """Each metric its own start noise (3%): following the metric that moved (Bonferroni over 9) must not turn a
    null into a culprit (measured 0% over 150)."""
    r = _rates(_same(AdvWorld(start_cv=0.03, independent_metrics=True)), 120)
    assert r.wrong == 0, r


# ---- ablate ----------------------------------------------------------------------------------------------------


def _ablate(world, seed, cands, mode="both"):
    lab = AdvLab(world, seed=seed)
    base, full = sim_arm("base", GOOD), sim_arm("full", GOOD + cands)
    alone = {p: sim_arm(f"+{p}", GOOD + (p,)) for p in cands}
    leave = {p: sim_arm(f"-{p}", tuple(x for x in GOOD + cands if x != p)) for p in cands}
    return plans.run_ablate(lab, base, full, alone, leave, mode, SETTINGS), lab


@pytest.mark.parametrize("mode", ["both", "leave-out", "alone"])
def test_ablate_of_six_patches_on_a_bimodal_stack_names_no_false_culprit(mode):
    """All six no-op, bimodal p=0.3/+15% (the references base and full are shared by every patch's verdict, so
    their errors are correlated): a run naming any culprit at most alpha (measured 0-1.7% over 60 seeds)."""
    cands = tuple(f"p{i}" for i in range(6))
    w = AdvWorld(start_cv=0.01, rep_cv=0.05, bimodal_p=0.3, bimodal_shift=0.15, reps=9)
    named = sum(bool(_ablate(w, t, cands, mode)[0]["culprits"]) for t in range(40))
    assert named / 40 <= ALPHA


@pytest.mark.parametrize("mode", ["leave-out", "alone"])
def test_ablate_does_not_buy_starts_for_a_verdict_its_finding_ignores(mode):
    """In a one-sided mode, a patch that did not move is reported 'cannot tell' whatever its one comparison says
    (ablate_finding needs both sides), so the starts that drove that comparison from 'cannot tell' to 'same'
    bought nothing.

    # FINDING (fixed on this branch: ablate_finding reports 'no effect left out' / 'no effect alone' for a
    # decided one-sided 'same'): at b787d21, 6 patches, +5% on p2, start cv 1%, 30 seeds: 317 starts (10.6 a
    # run) in leave-out mode and 360 (12.0 a run) in alone mode went to the no-effect patches' 'same', printed
    # as 'cannot tell'; a leave-out run takes a median 50.5 starts against 27 for 3 per arm plus the
    # confirmation. Ruling out the change that would need a confirmation is the same two-sided question, so
    # those starts are needed; the report threw their answer away.
    """
    cands = tuple(f"p{i}" for i in range(6))
    w = AdvWorld(plants=[host_slowdown("p2", 0.05)], start_cv=0.01)
    side = "left_out" if mode == "leave-out" else "alone"
    wasted = 0
    for t in range(30):
        res, lab = _ablate(w, t, cands, mode)
        assert res["culprits"] in ([], ["p2"])
        for r in res["patches"]:
            p = r["patch"]
            arm = (
                sim_arm(f"-{p}", tuple(x for x in GOOD + cands if x != p))
                if side == "left_out"
                else sim_arm(f"+{p}", GOOD + (p,))
            )
            if r[side] == stats.SAME and r["finding"] == "cannot tell":
                wasted += lab.n_starts(arm) - SETTINGS.policy.initial
    assert wasted == 0, f"{wasted} starts over 30 runs bought a 'same' that the finding ignores"


# ---- the store: --reuse, --resume and a changed plan over real (fake-server) starts ---------------------------

QUIET = {"noise": 0.002}


@pytest.fixture
def e2e(tmp_path, manifest, launcher_arg, monkeypatch):
    """Run the CLI against tests/bench/fake_apply.py: run(out_name, kind, args, fake) -> (rc, out, records)."""
    import json

    from bench import store
    from bench.cli import main

    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "fake-starts.jsonl"))

    def run(out_name, kind, args, fake, server_args=("--tp", "1")):
        monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
        out = tmp_path / out_name
        argv = fake_argv(kind, args, manifest, launcher_arg, out, server_args)
        rc = main(argv)
        return rc, out, list(store.read(out / "results.jsonl"))

    run.manifest = manifest
    return run


def _last_conclusion(recs):
    return [r for r in recs if r["type"] == "conclusion"][-1]


def test_reuse_after_editing_a_patch_does_not_pool_the_old_patchs_starts(e2e):
    """The user measured planted +5%, fixed the patch, and checks the fix with --reuse of the first store (the
    unchanged reference is worth reusing). The old `full` starts carry the old planted: pooling them reports the
    fixed patch as a regression.

    # FINDING (fixed on this branch: the Runner computes each arm's launch fingerprint from the manifest,
    # --reuse skips starts that carry another, a --resume marks them 'stale' and measures them again): at
    # b787d21 'regression' (+5%) from the 3 stale starts, no server started at all. An arm's key is its patch
    # names, profile and env, not the content fingerprint apply.py launch prints (recorded on every start), so
    # _import_reused and StoreLab (--resume after an edit too) pooled starts of another build.
    """
    rc, out1, _ = e2e(
        "before", "ab", ["--arms", "ref=full-planted", "slow=full"], {"costs": {"planted": 0.05}, **QUIET}
    )
    assert rc == 0
    planted = e2e.manifest.parent / "overlay" / "python" / "sglang" / "srt" / "x_planted.py"
    planted.write_text("# planted, fixed\n")
    rc, out2, recs = e2e(
        "after", "ab", ["--arms", "ref=full-planted", "fixed=full", "--reuse", str(out1 / "results.jsonl")], QUIET
    )
    assert rc == 0
    verdict = _last_conclusion(recs)["comparisons"][0]["verdict"]
    assert verdict in ("same", "cannot tell"), verdict
    # every ref start is the first run's, every fixed one this run's: the report says the comparison is across
    # runs (their machines and times are in it), naming where each arm's starts come from
    md = (out2 / "report.md").read_text()
    flag = next(x for x in md.splitlines() if x.startswith("- fixed vs ref: no invocation measured both arms"))
    assert f"reused from {out1 / 'results.jsonl'}" in flag and "fixed: invocation 1" in flag, flag


def test_resume_after_editing_a_patch_measures_that_arms_starts_again(e2e, monkeypatch):
    """The same edit between two invocations of one run (--resume): the starts of the arm carrying the old
    patch are left out of every statistic (and the report) and measured again, and so are the other arm's:
    sequential starts are compared across starts, so keeping them would set one invocation against another.

    # FINDING (fixed: Runner._set_aside_unpaired): a fresh CI clone of 67b1d85 failed here with tok/s (batch 1)
    # -22.0% [-34.3, -7.4] **regression** between identical fake servers: the kept `ref` starts were measured in
    # the first invocation, the re-measured `slow` ones in the second, under another load of the 2-core machine
    # (tok/s is wall clock). On gpu_device.sh the second invocation is another machine.
    """
    import json

    from bench import store
    from bench.cli import main

    rc, out, recs = e2e("run", "ab", ["--arms", "ref=full-planted", "slow=full"], {"costs": {"planted": 0.05}, **QUIET})
    assert rc == 0 and _last_conclusion(recs)["comparisons"][0]["verdict"] == "regression"
    planted = e2e.manifest.parent / "overlay" / "python" / "sglang" / "srt" / "x_planted.py"
    planted.write_text("# planted, fixed\n")
    monkeypatch.setenv("FAKE_BENCH", json.dumps(QUIET))
    assert main(["ab", "--resume", str(out)]) == 0
    recs = list(store.read(out / "results.jsonl"))
    stale = [r for r in recs if r["type"] == "stale"]
    edited = [r for r in stale if r.get("why") != "unpaired"]
    assert len(edited) == 3 and {r["arm"] for r in edited} == {"slow"}
    assert {r["arm"] for r in stale if r.get("why") == "unpaired"} == {"ref"} and len(stale) == 6
    assert _last_conclusion(recs)["comparisons"][0]["verdict"] in ("same", "cannot tell")
    v = store.view(recs)
    assert {u.start_id for u in v.units.values()}.isdisjoint(r["start_id"] for r in stale)
    # every start compared was measured by the second invocation, ref and slow interleaved
    assert len([r for r in recs if r["type"] == "run"]) == 2
    late = [r for r in recs if r["type"] == "start" and not r.get("warmup_start")][6:]
    assert {r["start_id"] for r in late} == {u.start_id for u in v.units.values()}
    assert [r["arm"] for r in late][:2] in (["ref", "slow"], ["slow", "ref"])
    # the rows of what the fake models (step and phase times); start-up, tok/s and first-token times are this
    # machine's wall clock under its load, which the interleaving above keeps out of one arm's side
    wall = ("start-up", "tok/s", "first token", "ttft")
    rows = [
        x
        for x in (out / "report.md").read_text().splitlines()
        if x.startswith("| ab |") and not any(w in x for w in wall)
    ]
    assert rows and not [x for x in rows if "**regression**" in x]
    assert "no invocation measured both arms" not in (out / "report.md").read_text()


@pytest.mark.parametrize("cut_after", [1, 3, 4])
def test_a_resume_after_an_edit_killed_while_it_sets_starts_aside_ends_with_one_invocations_starts(
    e2e, monkeypatch, cut_after
):
    """Ctrl-C while the resume writes its `stale` records (3 of the unchanged ref, then 3 of the edited slow):
    after 1, after all of ref's, after one of slow's. The next resume must still compare only starts of one
    invocation. (Written edited-first, a cut after the 3 slow ones left nothing stale to act on, and the first
    invocation's ref starts were compared with the new slow ones.)"""
    import json

    from bench import runner as runner_mod
    from bench import store
    from bench.cli import main

    rc, out, _ = e2e("run", "ab", ["--arms", "ref=full-planted", "slow=full"], {"costs": {"planted": 0.05}, **QUIET})
    assert rc == 0
    (e2e.manifest.parent / "overlay" / "python" / "sglang" / "srt" / "x_planted.py").write_text("# fixed\n")
    monkeypatch.setenv("FAKE_BENCH", json.dumps(QUIET))
    real, n = runner_mod.Runner.rec, [0]

    def rec(self, record):
        real(self, record)
        n[0] += record.get("type") == "stale"
        if n[0] >= cut_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(runner_mod.Runner, "rec", rec)
    assert main(["ab", "--resume", str(out)]) == 130
    monkeypatch.setattr(runner_mod.Runner, "rec", real)
    assert main(["ab", "--resume", str(out)]) == 0
    recs = list(store.read(out / "results.jsonl"))
    v = store.view(recs)
    second_run = [i for i, r in enumerate(recs) if r["type"] == "run"][1]
    first = {r["start_id"] for r in recs[:second_run] if r["type"] == "start"}
    assert first and not first & {u.start_id for u in v.units.values()}
    assert {u.arm for u in v.units.values()} == {"ref", "slow"}
    assert _last_conclusion(recs)["comparisons"][0]["verdict"] in ("same", "cannot tell")


@pytest.mark.parametrize(
    "second",
    [
        ["--arms", "a=base", "b=base+planted", "--min-effect", "0.05"],  # the same arms, another minimum effect
        ["--arms", "a=base+planted", "b=base"],  # the arm names swapped
    ],
)
def test_a_changed_plan_over_an_existing_run_dir_is_refused_or_reported_consistently(e2e, second, capsys):
    """A second command with another plan into the same --out (not --resume): the run dir must either refuse it
    (exit 2) or write a report whose verdict table agrees with the conclusion it prints.

    # FINDING (fixed on this branch: the Runner refuses another plan in a used run dir, exit 2, and points to
    # --resume / --reuse): at b787d21 the report read the first run record only (store.view's arm names,
    # report.load_rows' config and comparisons): with --min-effect 0.05 the conclusion said 'same' and the table
    # 'regression' (judged at the first run's 2%); with the names swapped the table said 'b vs a: regression'
    # beside the conclusion's 'b vs a: improvement'; command.txt kept the first command.
    """
    rc, out, _ = e2e("run", "ab", ["--arms", "a=base", "b=base+planted"], {"costs": {"planted": 0.03}, **QUIET})
    assert rc == 0
    capsys.readouterr()
    rc, out, recs = e2e("run", "ab", second, {"costs": {"planted": 0.03}, **QUIET})
    if rc == 2:
        err = capsys.readouterr().err
        assert "holds a run of another plan" in err and "--reuse" in err and "--resume" in err, err
        assert not [r for r in recs if r["type"] == "conclusion"][1:]  # nothing measured or concluded
        return
    c = _last_conclusion(recs)["comparisons"][0]
    md = (out / "report.md").read_text()
    head = f"| ab | {c['ref']} | {c['arm']} | step ms (batch 1) (primary)"
    row = next(ln for ln in md.splitlines() if ln.startswith(head))
    assert row.rstrip(" |").split("|")[-1].strip().strip("*") == c["verdict"], (row, c["verdict"])


def test_rerunning_the_same_plan_into_its_run_dir_continues_it(e2e):
    """The same plan again (as gpu_runs.sh reruns a step: --reuse dropped, another --time-budget) is a resume,
    not another plan: accepted, and nothing already measured is measured again."""
    arms = ["--arms", "a=base", "b=base+beta"]
    _, src, _ = e2e("src", "ab", arms, QUIET)
    rc, _, recs = e2e("run", "ab", [*arms, "--reuse", str(src / "results.jsonl")], QUIET)
    assert rc == 0
    rc, _, recs2 = e2e("run", "ab", [*arms, "--time-budget", "600"], QUIET)
    assert rc == 0
    new = [r for r in recs2[len(recs) :] if r["type"] == "unit_done" and not r["warmup_start"]]
    assert new == []


def test_reusing_two_stores_that_measured_the_same_arm_keeps_every_start(e2e):
    """Two earlier runs each measured base and base+beta 3 times; a third reuses both.

    # FINDING (fixed on this branch: _import_reused renumbers rounds and imports each start once): at b787d21
    # only 3 of the 6 reused starts per arm survived: the records kept their original round numbers and
    # store.view keeps one unit per (arm, round), so the second store's starts were silently dropped and the
    # plan started servers for data it already had.
    """
    from bench import store

    arms = ["--arms", "a=base", "b=base+beta"]
    _, out1, _ = e2e("one", "ab", arms, QUIET)
    _, out2, _ = e2e("two", "ab", arms, QUIET)
    _, out3, recs = e2e(
        "three", "ab", [*arms, "--reuse", str(out1 / "results.jsonl"), "--reuse", str(out2 / "results.jsonl")], QUIET
    )
    v = store.view(recs, signature=next(r for r in recs if r["type"] == "run")["signature"])
    keys = {u.arm_key for u in v.units.values()}
    assert len(keys) == 2
    assert all(len(v.units_of(k)) >= 6 for k in keys), {k: len(v.units_of(k)) for k in keys}
    # a store that already holds another's starts (three reused one): each start is pooled once, not twice
    _, _, recs = e2e(
        "four", "ab", [*arms, "--reuse", str(out1 / "results.jsonl"), "--reuse", str(out3 / "results.jsonl")], QUIET
    )
    v = store.view(recs)
    ids = [u.start_id for u in v.units.values()]
    assert len(ids) == len(set(ids)) and all(len(v.units_of(k)) == 6 for k in keys), {
        k: len(v.units_of(k)) for k in keys
    }


def test_reuse_never_pools_starts_measured_under_other_server_args_or_another_profile(e2e):
    """Stores of the same arm names under other server arguments (another signature) or under an env profile
    (another arm key) contribute no start: every start of this run is measured here."""
    arms = ["--arms", "a=base", "b=base+beta"]
    _, tp2, _ = e2e("tp2", "ab", arms, QUIET, server_args=("--tp", "2"))
    _, prof, _ = e2e("profile", "ab", ["--arms", "a=base@nccl_pcie", "b=base+beta@nccl_pcie"], QUIET)
    rc, _, recs = e2e(
        "tp1", "ab", [*arms, "--reuse", str(tp2 / "results.jsonl"), "--reuse", str(prof / "results.jsonl")], QUIET
    )
    assert rc == 0
    keys = {a["key"] for a in next(r for r in recs if r["type"] == "run")["arms"]}
    assert not [r for r in recs if r["type"] == "unit_done" and r.get("reused_from") and r["arm_key"] in keys]
    c = _last_conclusion(recs)["comparisons"][0]["comparison"]
    assert c["n_ref"] == c["n_arm"] == 3


def test_a_bisect_cut_by_the_time_budget_and_resumed_measures_what_one_run_would(e2e):
    """Interrupted by --time-budget every few starts and resumed until done: the same culprit, and exactly the
    units one uninterrupted run measures (the plan replayed on a quiet simulation of the same sets): nothing
    measured twice, nothing measured that the plan did not ask for."""
    from bench import store
    from bench.cli import main

    full = ("alpha", "beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta")
    lab = AdvLab(AdvWorld(plants=[host_slowdown("planted", 0.05)], start_cv=0.0, rep_cv=0.001), seed=0)
    plans.run_bisect(
        lab,
        sim_arm("good", ("alpha",)),
        sim_arm("bad", full),
        lambda p, role: sim_arm(role, p),
        lambda n: set(),
        SETTINGS,
    )
    rounds: dict[str, int] = {}
    for k in lab.order:
        rounds[k] = rounds.get(k, 0) + 1
    expected = sorted((k, r) for k, n in rounds.items() for r in range(n))
    fake = {"costs": {"planted": 0.05}, "start_s": 0.1, **QUIET}
    rc, cut, _ = e2e("cut", "bisect", ["--good", "base", "--bad", "full", "--time-budget", "3"], fake)
    n = 0
    while rc == 4 and n < 30:
        rc, n = main(["bisect", "--resume", str(cut)]), n + 1
    assert rc == 0 and n >= 2
    recs = list(store.read(cut / "results.jsonl"))
    assert _last_conclusion(recs)["culprit"] == "planted"
    got = sorted((u.arm_key, u.round) for u in store.view(recs).units.values())
    assert got == expected
