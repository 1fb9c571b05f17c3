"""The group-sequential boundaries (bench.sequential) against an independent computation, and what they buy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sst
from simlab import SimLab, World, host_slowdown, sim_arm

from bench import sequential as seq
from bench import stats
from bench.replication import Policy, compare, decide_pairs


def _crossing_by_look(fracs, bounds) -> list[float]:
    """P(the first |Z_j| >= c_j is at or before look k), by scipy's multivariate normal CDF (Genz), for Z the
    canonical group-sequential statistics: corr(Z_i, Z_j) = sqrt(t_i / t_j)."""
    out = []
    for k in range(1, len(fracs) + 1):
        t = np.asarray(fracs[:k])
        cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
        c = np.asarray(bounds[:k])
        inside = sst.multivariate_normal(np.zeros(k), cov).cdf(c, lower_limit=-c, rng=np.random.default_rng(0))
        out.append(1 - float(inside))
    return out


@pytest.mark.parametrize("spending", ["obf", "pocock"])
@pytest.mark.parametrize("fracs", [(0.2, 0.4, 0.6, 0.8, 1.0), tuple(n / 8 for n in range(3, 9)), (0.3, 0.45, 1.0)])
def test_boundaries_spend_exactly_the_spending_function(spending, fracs):
    """The recursive integration's boundaries give, by an independent method, a probability of having crossed
    by look k equal to alpha(t_k) (to 3e-4 absolute)."""
    bounds = seq.boundaries(fracs, 0.05, spending)
    got = _crossing_by_look(fracs, bounds)
    want = [seq.spent(t, 0.05, spending) for t in fracs]
    assert got == pytest.approx(want, abs=3e-4)
    assert got[-1] == pytest.approx(0.05, abs=3e-4)


def test_pocock_type_matches_the_published_table():
    """Lan-DeMets Pocock-type spending, 5 equally spaced looks, two-sided 0.05 (Jennison & Turnbull 2000,
    table 7.6; gsDesign sfLDPocock): 2.438, 2.427, 2.410, 2.397, 2.386."""
    got = seq.boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05, "pocock")
    assert got == pytest.approx((2.438, 2.427, 2.410, 2.397, 2.386), abs=2e-3)


def test_one_look_is_the_plain_interval_and_bonferroni_the_old_rule():
    assert seq.boundaries((1.0,), 0.05, "obf")[0] == pytest.approx(sst.norm.ppf(0.975), abs=1e-6)
    assert seq.boundaries((1.0,), 0.05, "pocock")[0] == pytest.approx(sst.norm.ppf(0.975), abs=1e-6)
    old = Policy(3, 8, 0.95, 0.02, "bonferroni")
    assert old.look_confidence((4, 4)) == pytest.approx(1 - 0.05 / 6)  # replication.Policy before this change
    assert Policy(3, 3).look_confidence((3, 3)) == pytest.approx(0.95)


def test_the_last_look_is_nearly_plain_and_the_schedule_depends_on_the_budget_only():
    """OBF's last look asks far less than Bonferroni's; a larger budget makes early looks stricter, never the
    last one much stricter (what made power fall with --max-starts before)."""
    for mx in (6, 8, 12, 16):
        k = mx - 3 + 1
        obf = seq.boundaries(tuple(n / mx for n in range(3, mx + 1)), 0.05, "obf")
        assert obf[-1] < 2.2 < sst.norm.ppf(1 - 0.025 / k)
        assert list(obf) == sorted(obf, reverse=True)


def test_unbalanced_counts_read_at_the_grid_look_below_their_information():
    pol = Policy(3, 8, spending="obf")
    # a probe of 3 starts against references of 8: information 1/(1/3 + 1/8) = 2.18 of a full 4 -> look 2 (n=4)
    assert pol.pair_confidence(8, 3) == pytest.approx(pol.pair_confidence(4, 4))
    assert pol.pair_confidence(3, 3) > pol.pair_confidence(4, 4) > pol.pair_confidence(8, 8) > 0.95
    assert pol.pair_confidence(8, 8) == pytest.approx(
        1 - 2 * sst.norm.sf(seq.boundaries(pol_fracs(pol), 0.05, "obf")[-1])
    )
    stepped = Policy(3, 9, spending="obf", step=3)
    assert stepped.grid == (3, 6, 9) and stepped.looks == 3
    assert stepped.pair_confidence(5, 5) == pytest.approx(stepped.pair_confidence(3, 3))
    with pytest.raises(ValueError):
        seq.spent(0.5, 0.05, "linear")


def pol_fracs(pol: Policy) -> tuple[float, ...]:
    return tuple(n / pol.max_starts for n in pol.grid)


def _ab(effect: float, pol: Policy, trials: int, start_cv: float = 0.02) -> dict[str, float]:
    w = World(plants=[host_slowdown("x", effect)] if effect else [], start_cv=start_cv, rep_cv=0.01)
    out: dict[str, float] = {}
    starts = 0
    for t in range(trials):
        lab = SimLab(w, seed=t)
        a, b = sim_arm("a", ("g",)), sim_arm("b", ("g", "x"))
        decide_pairs(lab, pol, [(a, b)], "step_ms_b1")
        v = compare(lab, a, b, "step_ms_b1", pol).verdict
        out[v] = out.get(v, 0) + 1 / trials
        starts += len(lab.order)
    out["starts"] = starts / trials
    return out


@pytest.mark.parametrize("spending", ["pocock", "obf"])
def test_power_grows_with_the_budget_and_beats_bonferroni_with_fewer_starts(spending):
    """ab, +5% at start cv 2%, 150 seeds: the chance of calling the regression grows with --max-starts (6, 8,
    12), and at every budget it is above Bonferroni's while using fewer starts. Measured (power, mean starts):
    pocock 0.49/10.5, 0.56/12.7, 0.75/16.5; obf 0.53/10.9, 0.66/13.5, 0.87/17.8; bonferroni 0.43/11.0,
    0.49/13.9, 0.67/18.5."""
    new = [_ab(0.05, Policy(3, mx, 0.95, 0.02, spending), 150) for mx in (6, 8, 12)]
    old = [_ab(0.05, Policy(3, mx, 0.95, 0.02, "bonferroni"), 150) for mx in (6, 8, 12)]
    power = [r.get(stats.REGRESSION, 0) for r in new]
    assert power == sorted(power), power
    for n, o in zip(new, old):
        assert n.get(stats.REGRESSION, 0) > o.get(stats.REGRESSION, 0) and n["starts"] < o["starts"], (n, o)


@pytest.mark.parametrize("spending", ["obf", "pocock"])
def test_a_null_ab_calls_no_change_beyond_alpha_over_all_looks(spending):
    """Identical arms, read after every round until decided or 8 starts: a regression or an improvement is
    called in at most alpha of runs (each is a false claim of a change beyond 2% here)."""
    out = _ab(0.0, Policy(3, 8, 0.95, 0.02, spending), 300, start_cv=0.02)
    wrong = out.get(stats.REGRESSION, 0) + out.get(stats.IMPROVEMENT, 0)
    ci = sst.binomtest(round(wrong * 300), 300).proportion_ci(0.95)
    assert ci.low <= 0.05, (out, ci)
    assert math.isclose(sum(v for k, v in out.items() if k != "starts"), 1.0)


def test_a_look_with_nothing_to_spend_is_undecided_not_a_crash():
    """30 looks (3 to 32 starts): O'Brien-Fleming's first look asks 6.4 standard errors, a t quantile of about
    1e5 at 2 degrees of freedom (one noisy arm), so exp() of the interval's bound overflowed; the interval is
    now unbounded above and the verdict 'cannot tell'."""
    pol = Policy(3, 32, spending="obf")
    conf = pol.pair_confidence(3, 3)
    assert conf > 1 - 1e-9
    c = stats.compare_starts([1.0, 1.5, 0.7], [1.0, 1.01, 0.99], confidence=conf)
    assert c.verdict == stats.UNDECIDED and c.high == math.inf and c.low == -1.0


def test_a_store_decided_before_the_sequential_looks_is_not_resumed_under_them():
    """--resume replays the plan's decisions over the stored starts: a record written before this change (no
    spending / confirm in its config) was decided with Bonferroni and fresh blocks, so resuming it with the new
    defaults is a different plan (refused, exit 2, naming the field), and with the old flags it is the same."""
    from bench.runner import plan_differences

    old_run = {"config": {"initial_starts": 3, "max_starts": 8, "confidence": 0.95, "min_effect": 0.02}}
    new = {"config": {"initial_starts": 3, "max_starts": 8, "spending": "pocock", "look_step": 1, "confirm": "shared"}}
    assert plan_differences(old_run, new) == ["spending 'bonferroni' -> 'pocock'", "confirm 'fresh' -> 'shared'"]
    same = {"config": {"initial_starts": 3, "spending": "bonferroni", "look_step": 1, "confirm": "fresh"}}
    assert plan_differences(old_run, same) == []
    assert plan_differences({"config": {}}, new) == []  # the first method's records: nothing to compare


class _Fixed:
    """A Lab of given start medians per arm name, served in order."""

    def __init__(self, values: dict[str, list[float]]):
        self.values, self.n = values, {}

    def n_starts(self, arm) -> int:
        return self.n.get(arm.key, 0)

    def start_values(self, arm, metric) -> list[float]:
        return self.values[arm.name][: self.n_starts(arm)]

    def add_starts(self, arms) -> None:
        for a in arms:
            self.n[a.key] = self.n_starts(a) + 1


@pytest.mark.parametrize(("step", "stop"), [(1, 7), (2, 7), (3, 6), (5, 8)])
def test_ab_reads_verdicts_only_at_the_planned_looks(step, stop):
    """Arms whose interval first clears the minimum effect at 6 starts under the boundary of a look at 3 or 5:
    --look-step 2 plans looks at 3, 5, 7, 8 and --look-step 5 at 3 and 8, so neither may stop at 6 (both did:
    the verdict was read after every round, at the last look's boundary again, an unplanned look)."""
    pol = Policy(3, 8, step=step)
    lab = _Fixed({"a": [1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.0], "b": [1.10, 1.30, 1.0] + [1.20] * 5})
    a, b = sim_arm("a", ()), sim_arm("b", ("p",))
    assert decide_pairs(lab, pol, [(a, b)], "step_ms_b1")
    assert lab.n_starts(a) == lab.n_starts(b) == stop and pol.at_look(stop)
    assert compare(lab, a, b, "step_ms_b1", pol).verdict == stats.REGRESSION


def test_every_plan_adds_starts_up_to_a_planned_look():
    """ab of two arms against one reference, ablate and bisect at --look-step 2 (looks at 3, 5, 7, 8): every
    arm ends at a planned look, where its comparisons were read (a shared reference taking starts for one
    comparison reads the other one at the unbalanced counts' look, bench.sequential)."""
    from bench import plans

    pol = Policy(3, 8, step=2)
    s = plans.Settings(pol)
    off: list[tuple[str, int, int]] = []
    for t in range(12):
        w = World(plants=[host_slowdown("p1", 0.03)], start_cv=0.02, rep_cv=0.01)
        labs = []
        lab = SimLab(w, seed=t)
        ref, x, y = sim_arm("ref", ("g",)), sim_arm("x", ("g", "p1")), sim_arm("y", ("g", "p0"))
        plans.run_ab(lab, [ref, x, y], [("ab", ref, x), ("ab", ref, y)], s)
        labs.append(("ab", lab))
        lab = SimLab(w, seed=t)
        base, full = sim_arm("base", ("g",)), sim_arm("full", ("g", "p0", "p1"))
        alone = {p: sim_arm(f"+{p}", ("g", p)) for p in ("p0", "p1")}
        leave = {p: sim_arm(f"-{p}", ("g", *(q for q in ("p0", "p1") if q != p))) for p in ("p0", "p1")}
        plans.run_ablate(lab, base, full, alone, leave, "both", s)
        labs.append(("ablate", lab))
        lab = SimLab(w, seed=t)
        good, bad = sim_arm("good", ("g",)), sim_arm("bad", ("g", "p0", "p1", "p2"))
        plans.run_bisect(lab, good, bad, lambda patches, role: sim_arm(role, patches), lambda _: set(), s)
        labs.append(("bisect", lab))
        for plan, lab in labs:
            counts: dict[str, int] = {}
            for k in lab.order:
                counts[k] = counts.get(k, 0) + 1
            off += [(plan, t, n) for n in counts.values() if not pol.at_look(n)]
    assert not off


def test_a_null_ab_at_look_step_2_calls_no_change_beyond_alpha():
    """Identical arms, minimum effect 0 (any interval off zero is a false call), 1000 seeds, --look-step 2:
    at most alpha of runs call a change. Read after every round at the boundaries of the planned looks, 57 of
    1000 did (5.7 %; 114 of 2000; 64 of 1000 at --look-step 3); read at the planned looks only, 44 (4.4 %), as at
    --look-step 1 (44)."""
    out = _ab(0.0, Policy(3, 8, 0.95, 0.0, "pocock", step=2), 1000, start_cv=0.02)
    wrong = round((out.get(stats.REGRESSION, 0) + out.get(stats.IMPROVEMENT, 0)) * 1000)
    assert wrong <= 50, out


def test_the_method_names_the_planned_looks():
    """The report's Method says where verdicts were read: after every round at --look-step 1, only at 3, 5, 7
    and 8 starts per arm at --look-step 2, with those looks' confidences (it said 'one more per round ... up
    to 8' either way)."""
    from bench import report, store

    def method(step: int) -> str:
        cfg = {"initial_starts": 3, "max_starts": 8, "spending": "pocock", "look_step": step}
        return "\n".join(report._method(cfg, report._policy(cfg), store.view([])))

    unit = "starts per arm"
    stepped = method(2)
    assert f"read only at the planned looks (3, 5, 7, 8 {unit}, --look-step 2)" in stepped
    confs = "3: 97.51%, 5: 98.08%, 7: 98.09%, 8: 98.39%"
    assert f"looks at these {unit}, confidence: {confs})" in stepped
    assert "planned looks" not in method(1) and f"{unit}, confidence: 3: 97.51%, 4: " in method(1)
