"""Named adversarial worlds for `bench simulate --scenario`: planted regressions of kinds the bench's method was
not designed against, and what counts as a right answer in each.

A scenario is a simulated lab (bench.simulate.World) plus the truth: the culprits whose naming is right (a
patch, or a (partner, culprit) pair for an interaction). Anything else named is a wrong culprit; "cannot tell",
"no regression", "several", "partial" and "inconsistent" name nobody and are never wrong here. The rates come
with Clopper-Pearson intervals (scipy.stats.binomtest), so "0 wrong in N" states how small the true rate is
shown to be, not just that none was seen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .simulate import EXACT, Plant, SimLab, World, gpu_hidden, host_slowdown, sim_arm, slower

C3 = ("p0", "p1", "p2")
C4 = ("p0", "p1", "p2", "p3")
Truth = frozenset[str | tuple[str, str]]


@dataclass(frozen=True)
class Scenario:
    name: str
    world: Callable[[tuple[dict[str, list[float]], ...]], World]  # given the recorded pool (may be empty)
    truth: Truth
    cands: tuple[str, ...] = C3
    needs_record: bool = False  # draws real starts: only with --from-record
    note: str = ""
    # ablate asks of each patch what it does on the base and in the full set, not what moved between two sets:
    # where the answers differ (a patch masked by another), its own truth; None: the bisect's
    ablate_truth: Truth | None = None


def _w(**kw: Any) -> Callable[[tuple], World]:
    return lambda pool: World(**kw)


def split(total: float, share: float, a: str = "p0", b: str = "p2") -> list[Plant]:
    """A regression of `total` split multiplicatively: `share` of it (in logs) on a, the rest on b."""
    return [host_slowdown(a, (1 + total) ** share - 1), host_slowdown(b, (1 + total) ** (1 - share) - 1)]


def phase_only(patch: str, phase: str, rel: float) -> Plant:
    """A regression that shows in one phase's span and nowhere else (the step, tok/s unchanged)."""
    return Plant(frozenset({patch}), {phase: 1 + rel})


def masked_by_step_gain(patch: str, rel: float, gain: float) -> Plant:
    """Issue 12's "Why": a GPU-side delay in verify while the host runs ahead: verify grows, draft-extend
    shrinks more, and the host-bound step gets *faster* (an "improvement" at the endpoints)."""
    return Plant(
        frozenset({patch}),
        {
            "eagle_verify_ms_b1": 1 + rel,
            "eagle_draft_extend_ms_b1": 1 - 1.5 * rel,
            "step_ms_b1": 1 - gain,
            "eagle_step_ms_b1": 1 - gain,
            "tok_s_b1": 1 / (1 - gain),
        },
    )


def uniform(patch: str, rel: float) -> Plant:
    """Every metric worse by the same factor (tok/s lower): nothing larger hides in a phase."""
    from .simulate import BASE

    return Plant(frozenset({patch}), {m: slower(m, 1 + rel) for m in BASE if m not in EXACT})


def accept_drop(patch: str, rel: float, step_gain: float = 0.0) -> Plant:
    """A draft-quality change (e.g. a numerics change in the draft model): `rel` fewer tokens accepted per
    verify, so tok/s falls; the step itself gets `step_gain` faster (draft-extend has fewer accepted tokens to
    extend), which the step time alone reads as an improvement. tok/s = accept length / step time."""
    keep = 1 - rel
    return Plant(
        frozenset({patch}),
        {
            "accept_len_b1": keep,
            "accept_len_bc": keep,
            "step_ms_b1": 1 - step_gain,
            "step_ms_bc": 1 - step_gain,
            "eagle_step_ms_b1": 1 - step_gain,
            "eagle_draft_extend_ms_b1": 1 - 2 * step_gain,
            "tok_s_b1": keep / (1 - step_gain),
            "tok_s_bc": keep / (1 - step_gain),
        },
    )


def batch_opposite(patch: str, rel: float) -> Plant:
    """Slower at batch 1, faster by as much under concurrency (e.g. a kernel choice tuned for large batches)."""
    return Plant(
        frozenset({patch}),
        {
            "step_ms_b1": 1 + rel,
            "eagle_step_ms_b1": 1 + rel,
            "eagle_verify_ms_b1": 1 + 3 * rel,
            "tok_s_b1": 1 / (1 + rel),
            "step_ms_bc": 1 / (1 + rel),
            "tok_s_bc": 1 + rel,
        },
    )


def over_reps(plant: Plant, shape: tuple[float, ...]) -> Plant:
    return Plant(plant.needs, plant.effect, plant.intermittent, shape)


def _p(name: str) -> Truth:
    return frozenset({name})


NONE: Truth = frozenset()


def catalogue() -> list[Scenario]:
    h = host_slowdown
    return [
        Scenario("null-cv1", _w(start_cv=0.01), NONE, note="no effect, start cv 1%"),
        Scenario(
            "null-bimodal",
            _w(start_cv=0.01, rep_cv=0.05, bimodal_p=0.2, bimodal_shift=0.25, reps=5),
            NONE,
            note="no effect; 1 start in 5 slow throughout (+25%), as run3's slow starts",
        ),
        Scenario("host-5", _w(plants=[h("p1", 0.05)], start_cv=0.01), _p("p1"), note="host-side +5% on p1, cv 1%"),
        Scenario(
            "gpu-hidden-20",
            _w(plants=[gpu_hidden("p1", 0.20)], start_cv=0.01),
            _p("p1"),
            note="GPU-side: verify +20%, draft-extend -20%, step unchanged",
        ),
        Scenario(
            "phase-only-draft-8",
            _w(plants=[phase_only("p2", "eagle_draft_ms_b1", 0.08)], start_cv=0.01),
            _p("p2"),
            note="+8% in the draft phase only",
        ),
        Scenario(
            "prefill-only-10",
            _w(plants=[Plant(frozenset({"p0"}), {"ttft_ms_b1": 1.10})], start_cv=0.01),
            _p("p0"),
            note="+10% on the first token only (a prefill-path delay): no decode metric moves",
        ),
        Scenario(
            "step-gain-verify-up",
            _w(plants=[masked_by_step_gain("p1", 0.20, 0.05)], start_cv=0.01),
            _p("p1"),
            note="step -5% (an 'improvement') while verify +20% and draft-extend -30%",
        ),
        Scenario(
            "interaction-p0-p2",
            _w(plants=[Plant(frozenset({"p0", "p2"}), h("x", 0.08).effect)], start_cv=0.01),
            frozenset({("p0", "p2")}),
            note="+8% only with p0 and p2 together",
        ),
        Scenario(
            "drift-slower-0.3",
            _w(plants=[h("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 + 0.003 * k),
            _p("p1"),
            note="p1 +5%; the machine 0.3% slower per start over the session",
        ),
        Scenario(
            "drift-faster-0.3",
            _w(plants=[h("p2", 0.05)], start_cv=0.01, drift=lambda k: 1 - 0.003 * k),
            _p("p2"),
            note="p2 +5%; the machine 0.3% faster per start",
        ),
        Scenario(
            "drift-faster-0.2-p1",
            _w(plants=[h("p1", 0.05)], start_cv=0.01, drift=lambda k: 1 - 0.002 * k),
            _p("p1"),
            note="p1 (the middle one) +5%; the machine 0.2% faster per start: what made shared confirmations "
            "invent an interaction before a refuting block was measured again fresh",
        ),
        Scenario(
            "bimodal-5",
            _w(plants=[h("p1", 0.05)], start_cv=0.01, rep_cv=0.05, bimodal_p=0.2, bimodal_shift=0.25),
            _p("p1"),
            note="p1 +5%; 1 start in 5 slow throughout (+25%)",
        ),
        Scenario(
            "outlier-start-5",
            _w(plants=[h("p0", 0.05)], start_cv=0.01, outlier_p=0.07, outlier_shift=0.6),
            _p("p0"),
            note="p0 +5%; 1 start in 15 is 60% slow (heavy-tailed outlier)",
        ),
        Scenario(
            "t3-5", _w(plants=[h("p2", 0.05)], start_cv=0.02, noise="t3"), _p("p2"), note="p2 +5%, t(3) start noise"
        ),
        Scenario(
            "below-min-1.8",
            _w(plants=[uniform("p1", 0.018)], start_cv=0.01),
            NONE,
            note="p1 +1.8% on every metric, just below the 2% minimum effect: naming p1 claims a change beyond "
            "2% and counts as wrong here",
        ),
        Scenario(
            "split-10-70-30",
            _w(plants=split(0.10, 0.7), start_cv=0.01),
            NONE,
            note="10% split 70/30 between p0 and p2: no single culprit",
        ),
        Scenario(
            "host-regimes-null",
            _w(start_cv=0.01, host_slow=0.6),
            NONE,
            note="no effect; the host x1.6 slow in stretches switching with p 0.2 per rep (session 5's VM)",
        ),
        Scenario(
            "host-regimes-5",
            _w(plants=[h("p1", 0.05)], start_cv=0.01, host_slow=0.6),
            _p("p1"),
            note="p1 +5%; the host x1.6 slow in stretches switching with p 0.2 per rep",
        ),
        Scenario(
            "host-stretches-5",
            _w(plants=[h("p2", 0.05)], start_cv=0.01, host_slow=0.6, host_stay=0.97),
            _p("p2"),
            note="p2 +5%; the host x1.6 slow in long stretches (p 0.03 per rep: several starts)",
        ),
        # patches that move the probe itself (bench/results/2026-12-04-h200-schednull: the busy-waiting plant's arm
        # ran the probe 7 % faster): what --adjust host's balance gate and --adjust state's per-arm level are for
        Scenario(
            "host-probe-moved-5",
            _w(plants=[Plant(frozenset({"p0"}), {"host_probe_us": 1.15}), h("p1", 0.05)], start_cv=0.01, host_slow=0.6),
            _p("p1"),
            note="p1 +5%; p0 slows the probe 15% and not the step; the host x1.6 slow in stretches (p 0.2 per rep)",
        ),
        Scenario(
            "host-probe-only-null",
            _w(plants=[Plant(frozenset({"p1"}), {"host_probe_us": 0.85})], start_cv=0.01, host_slow=0.6),
            NONE,
            note="no step effect; p1 makes the probe 15% faster; the host x1.6 slow in stretches",
        ),
        Scenario(
            "host-busy-5",
            _w(plants=[Plant(frozenset({"p2"}), {"host_probe_us": 0.93}), h("p2", 0.05)], start_cv=0.01, host_slow=0.6),
            _p("p2"),
            note="p2 +5% and the probe 7% faster in its starts (schednull's busy wait); the host x1.6 slow in stretches",
        ),
        # the schednull record's own figures: 1.7x slow state, 10 repetitions a start, 4 % left between starts in
        # the fast state (bench/results/2026-12-04-h200-schednull: 3.6-5.0 %)
        Scenario(
            "host-schednull-null",
            _w(start_cv=0.04, host_slow=0.7, reps=10),
            NONE,
            note="no effect; start cv 4%, the host x1.7 slow in stretches (p 0.2 per rep), 10 reps a start",
        ),
        Scenario(
            "host-schednull-10",
            _w(
                plants=[Plant(frozenset({"p1"}), {"host_probe_us": 0.93}), h("p1", 0.10)],
                start_cv=0.04,
                host_slow=0.7,
                reps=10,
            ),
            _p("p1"),
            note="p1 +10% with the probe 7% faster in its starts; start cv 4%, the host x1.7 slow, 10 reps a start",
        ),
        # session 6's adversary (bench/results/simulate/session6-adversary.md)
        Scenario(
            "accept-drop-10",
            _w(plants=[accept_drop("p1", 0.10, 0.03)], start_cv=0.01),
            _p("p1"),
            note="p1 accepts 10% fewer draft tokens (3.0 -> 2.7 per verify): tok/s -7%, the step -3% faster",
        ),
        Scenario(
            "accept-drop-noisy",
            _w(plants=[accept_drop("p1", 0.10, 0.03)], start_cv=0.01, accept_cv=0.01),
            _p("p1"),
            note="accept-drop-10 with the accept length itself 1% different from start to start",
        ),
        Scenario(
            "accept-drop-behind-gain",
            _w(plants=[host_slowdown("p0", -0.05), accept_drop("p2", 0.10)], start_cv=0.01),
            _p("p2"),
            note="p0 makes the step 5% faster (a real gain), p2 accepts 10% fewer tokens: the endpoints' step "
            "improves, tok/s falls 5%",
        ),
        Scenario(
            "host-and-accept",
            _w(plants=[host_slowdown("p0", 0.05), accept_drop("p2", 0.10)], start_cv=0.01),
            _p("p0"),
            note="p0 +5% host-side (the step's culprit), p2 accepts 10% fewer tokens with the step flat: the bisect "
            "on the step must name p0 and say that p2's tok/s drop is not p0's",
        ),
        Scenario(
            "b1-up-bc-down-5",
            _w(plants=[batch_opposite("p2", 0.05)], start_cv=0.01),
            _p("p2"),
            note="p2 +5% at batch 1, -5% under concurrency",
        ),
        Scenario(
            "mask-phases-8",
            _w(
                plants=[host_slowdown("p0", 0.08), host_slowdown("p2", 1 / 1.08 - 1, "eagle_draft_ms_b1")],
                start_cv=0.01,
            ),
            _p("p0"),
            note="p0 +8% in verify, p2 -7.4% in draft: the step and tok/s cancel, verify +24% is p0's",
        ),
        Scenario(
            "mask-step-8",
            _w(plants=[host_slowdown("p0", 0.08), host_slowdown("p2", 1 / 1.08 - 1)], start_cv=0.01),
            NONE,
            note="p0 +8%, p2 -7.4% in the same phase: every metric cancels between the endpoints (a bisect's culprit "
            "is wrong); ablate must name p0 (alone on the base it regresses)",
            ablate_truth=_p("p0"),
        ),
        Scenario(
            "boundary-2.0",
            _w(plants=[uniform("p1", 0.02)], start_cv=0.01),
            NONE,
            note="p1 +2.0% on every timing metric, exactly the minimum effect: naming p1 claims a change beyond "
            "2% and counts as wrong (at most alpha of runs)",
        ),
        Scenario(
            "below-min-1.9-bc",
            _w(plants=[Plant(frozenset({"p1"}), {"step_ms_bc": 1.019, "tok_s_bc": 1 / 1.019})], start_cv=0.01),
            NONE,
            note="p1 +1.9% under concurrency only: below the minimum effect on a metric bisect must follow",
        ),
        Scenario(
            "intermittent-0.3-20",
            _w(plants=[Plant(frozenset({"p1"}), h("p1", 0.20).effect, 0.3)], start_cv=0.01),
            _p("p1"),
            note="p1 +20%, but in only 3 starts in 10 (a race: bimodal by start)",
        ),
        Scenario(
            "leak-10",
            _w(plants=[over_reps(h("p1", 0.10), (0, 0.25, 0.5, 0.75, 1))], start_cv=0.01),
            _p("p1"),
            note="p1 grows over a start: +0% at the first measured repetition to +10% at the fifth (a leak)",
        ),
        Scenario(
            "late-onset-20",
            _w(plants=[over_reps(h("p1", 0.20), (0, 0, 0, 1, 1))], start_cv=0.01),
            _p("p1"),
            note="p1 +20% from the fourth measured repetition of a start on (a cache that fills): a start median "
            "(the third) hid it; the start value (geometric mean) carries 2/5 of it",
        ),
        Scenario(
            "early-reps-30",
            _w(plants=[over_reps(h("p2", 0.30), (1, 1, 0))], start_cv=0.01),
            _p("p2"),
            note="p2 +30% in the first two measured repetitions of a start only (warm-up that outlasts the "
            "warm-up repetitions): the steady state is unchanged; p2 or nobody",
        ),
        Scenario(
            "rep-outliers-null",
            _w(start_cv=0.01, rep_outlier_p=0.2, rep_outlier_shift=0.5),
            NONE,
            note="no effect; 1 repetition in 5 hit by a +50% pause (what the later half's two repetitions "
            "cannot outvote)",
        ),
        Scenario(
            "rep-outliers-late-20",
            _w(
                plants=[over_reps(h("p0", 0.20), (0, 0, 0, 1, 1))],
                start_cv=0.01,
                rep_outlier_p=0.2,
                rep_outlier_shift=0.5,
            ),
            _p("p0"),
            note="late-onset-20 on p0 with 1 repetition in 5 hit by a +50% pause",
        ),
        Scenario(
            "accept-split-1.5",
            _w(plants=[accept_drop("p0", 0.015), accept_drop("p2", 0.015)], start_cv=0.01),
            NONE,
            note="p0 and p2 each accept 1.5% fewer tokens (exactly: no noise), 3% together: no single culprit",
        ),
        Scenario(
            "record-null",
            lambda pool: World(pool=pool),
            NONE,
            C4,
            needs_record=True,
            note="real starts (--from-record), no effect, 4 candidates",
        ),
        Scenario(
            "record-10",
            lambda pool: World(plants=[h("p3", 0.10)], pool=pool),
            _p("p3"),
            C4,
            needs_record=True,
            note="real starts, host-side +10% on p3 of 4",
        ),
        Scenario(
            "record-10-drift",
            lambda pool: World(plants=[h("p1", 0.10)], pool=pool, drift=lambda k: 1 + 0.003 * k),
            _p("p1"),
            C4,
            needs_record=True,
            note="real starts, +10% on p1 of 4, the machine 0.3% slower per start",
        ),
    ]


def by_name(name: str) -> Scenario:
    for s in catalogue():
        if s.name == name:
            return s
    raise KeyError(name)


@dataclass
class Rates:
    trials: int
    right: int = 0
    wrong: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    wrong_names: dict[str, int] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)

    def count(self, res: dict[str, Any], starts: int, truth: Truth) -> None:
        """Tally one bisect conclusion: a named culprit (or (partner, culprit) pair) not in `truth` is wrong."""
        named = (res["partner"], res["culprit"]) if res["partner"] else res["culprit"]
        # a culprit whose `bad - c` still regresses on other metrics (bench.plans: not carried by it)
        outcome = res["outcome"] + (" + not-carried note" if res.get("not_carried") else "")
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if named is not None:
            if named in truth:
                self.right += 1
            else:
                self.wrong += 1
                self.wrong_names[str(named)] = self.wrong_names.get(str(named), 0) + 1
        self.starts.append(starts)

    def count_ablate(self, res: dict[str, Any], starts: int, truth: Truth) -> None:
        """Tally one ablate conclusion: a culprit not in `truth` is wrong; right when the culprits are some of
        the truth and none else; every patch's finding is counted ("p1: mixed")."""
        wrong = [p for p in res["culprits"] if p not in truth]
        for p in wrong:
            self.wrong_names[p] = self.wrong_names.get(p, 0) + 1
        self.wrong += bool(wrong)
        self.right += bool(res["culprits"]) and not wrong
        for r in res["patches"]:
            key = f"{r['patch']}: {r['finding']}"
            self.outcomes[key] = self.outcomes.get(key, 0) + 1
        self.starts.append(starts)

    def ci(self, k: int, confidence: float = 0.95) -> tuple[float, float]:
        from scipy.stats import binomtest

        c = binomtest(k, self.trials).proportion_ci(confidence, method="exact")
        return float(c.low), float(c.high)

    @property
    def mean_starts(self) -> float:
        return statistics.fmean(self.starts)

    def quantile_starts(self, q: float) -> float:
        xs = sorted(self.starts)
        return float(xs[min(len(xs) - 1, math.ceil(q * len(xs)) - 1)])


def run(scenario: Scenario, settings: Any, trials: int, pool: tuple = (), seed0: int = 0) -> Rates:
    """`trials` seeded bisects of the scenario (bench.plans.run_bisect over bench.simulate.SimLab)."""
    from .plans import run_bisect

    r = Rates(trials)
    good = ("g",)
    for t in range(seed0, seed0 + trials):
        lab = SimLab(scenario.world(pool), seed=t)
        res = run_bisect(
            lab,
            sim_arm("good", good),
            sim_arm("bad", good + scenario.cands),
            lambda patches, role: sim_arm(role, patches),
            lambda name: set(),
            settings,
        )
        r.count(res, len(lab.order), scenario.truth)
    return r


def ablate_once(lab: SimLab, cands: tuple[str, ...], settings: Any) -> dict[str, Any]:
    """bench.plans.run_ablate (both modes) of `cands` on the base `g`."""
    from .plans import run_ablate

    base, full = ("g",), ("g", *cands)
    alone = {p: sim_arm(f"+{p}", (*base, p)) for p in cands}
    leave = {p: sim_arm(f"-{p}", tuple(q for q in full if q != p)) for p in cands}
    return run_ablate(lab, sim_arm("base", base), sim_arm("full", full), alone, leave, "both", settings)


def run_ablate(scenario: Scenario, settings: Any, trials: int, pool: tuple = (), seed0: int = 0) -> Rates:
    """`trials` seeded ablates of the scenario's candidates (ablate_once)."""
    r = Rates(trials)
    for t in range(seed0, seed0 + trials):
        lab = SimLab(scenario.world(pool), seed=t)
        truth = scenario.truth if scenario.ablate_truth is None else scenario.ablate_truth
        r.count_ablate(ablate_once(lab, scenario.cands, settings), len(lab.order), truth)
    return r


def row(name: str, method: str, r: Rates) -> str:
    """One markdown table row: scenario | method | right [CI] | wrong [CI] | starts mean / p90 | outcomes."""
    lo, hi = r.ci(r.right)
    wlo, whi = r.ci(r.wrong)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items(), key=lambda kv: -kv[1]))
    wrong = f"{r.wrong / r.trials:.1%} [{wlo:.1%}, {whi:.1%}]"
    if r.wrong_names:
        wrong += " (" + ", ".join(f"{k}: {v}" for k, v in r.wrong_names.items()) + ")"
    return (
        f"| {name} | {method} | {r.right / r.trials:.1%} [{lo:.1%}, {hi:.1%}] | {wrong} | "
        f"{r.mean_starts:.1f} / {r.quantile_starts(0.9):.0f} | {outcomes} |"
    )


HEADER = (
    "| scenario | method | right culprit [95% CI] | wrong culprit [95% CI] | server starts mean / p90 | outcomes |\n"
    "|---|---|---|---|---|---|"
)
