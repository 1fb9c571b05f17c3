"""A simulated lab (tests only): servers whose starts vary the way real ones do, with regressions planted where we choose.

The plans (bench.plans) run against it exactly as against real servers, so their error rates can be measured
on the CPU: how often a null comparison names a culprit, how often a planted regression is named (and the
right one), how many starts that takes. Test-only since the lab left the product (issue 39).

Model of one start of a set S (all multiplicative, per metric):
  true level  = base[metric] * prod(effect of each planted patch in S on metric)
  start level = true level * start noise    lognormal(start_cv), or bimodal: x (1 + shift) with probability p
  repetition  = start level * lognormal(rep_cv)
or, with World.pool (`--from-record`), a start is one start of a recorded GPU run drawn at random, its repetitions
as measured (every metric of one start together), times the plants' factors: the noise is the machine's own.
A plant is (patches that must all be present, {metric: factor}); several metrics per plant model a regression
that shows in one phase only, or a GPU delay whose phase grows while the next one shrinks and the step holds.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.errors import BudgetExhausted
from bench.launcher import ArmSpec, PatchSet
from bench.stats import start_value
from bench.store import LATE, late_from

BASE = {
    "step_ms_b1": 4.0,
    "step_ms_bc": 5.0,
    "tok_s_b1": 240.0,
    "tok_s_bc": 1400.0,
    "ttft_ms_b1": 14.0,
    "eagle_step_ms_b1": 3.0,
    "eagle_draft_ms_b1": 1.0,
    "eagle_verify_ms_b1": 1.6,
    "eagle_draft_extend_ms_b1": 0.7,
    # tokens per verify (a trained draft's ~3): set by the draft's agreement with the target, not by the clock,
    # so it carries none of a start's speed (EXACT); only a plant (or World.accept_cv) moves it
    "accept_len_b1": 3.0,
    "accept_len_bc": 2.8,
}
# metrics no start, repetition, host or drift noise reaches: greedy decoding of one workload accepts the same
# tokens in every start (run3's ten H200 starts: 1.008 in every repetition of every start)
EXACT = frozenset({"accept_len_b1", "accept_len_bc"})


def slower(metric: str, factor: float) -> float:
    """The factor by which `metric` moves when the server takes `factor` times as long (rates fall)."""
    return 1 / factor if metric.startswith("tok_s") else factor


@dataclass(frozen=True)
class Plant:
    needs: frozenset[str]  # all of these in the set (two names: an interaction)
    effect: dict[str, float]  # metric -> factor; step slowdowns also lower tok/s (see host_bound)
    intermittent: float = 1.0  # probability that a start of a set carrying it shows the effect
    # how much of the effect each measured repetition of a start shows (in logs; empty: all of it in every one):
    # (0, 0.25, 0.5, 0.75, 1) a cost that grows over a start (a leak), (0, 0, 0, 1, 1) one that only appears
    # after some requests (a cache that fills); repetitions past the tuple's end show its last weight
    shape: tuple[float, ...] = ()

    def factor(self, metric: str, rep: int) -> float:
        f = self.effect.get(metric, 1.0)
        if not self.shape:
            return f
        return f ** self.shape[min(rep, len(self.shape) - 1)]


def host_slowdown(patch: str, rel: float, phase: str = "eagle_verify_ms_b1") -> Plant:
    """A host-side delay in one phase: the step, that phase and tok/s all move."""
    return Plant(
        frozenset({patch}),
        {
            "step_ms_b1": 1 + rel,
            "step_ms_bc": 1 + rel * 0.8,
            "eagle_step_ms_b1": 1 + rel,
            phase: 1 + rel * 3,
            "tok_s_b1": 1 / (1 + rel),
            "tok_s_bc": 1 / (1 + rel * 0.8),
        },
    )


def gpu_hidden(patch: str, rel: float) -> Plant:
    """A GPU-side delay in verify on a host-bound step: verify grows, draft-extend shrinks, the step holds."""
    return Plant(frozenset({patch}), {"eagle_verify_ms_b1": 1 + rel, "eagle_draft_extend_ms_b1": 1 - rel})


@dataclass
class World:
    plants: Sequence[Plant] = ()
    start_cv: float = 0.01
    rep_cv: float = 0.01
    bimodal_p: float = 0.0  # probability of the slow mode per start
    bimodal_shift: float = 0.0
    reps: int = 5
    base: dict[str, float] = field(default_factory=lambda: dict(BASE))
    pool: Sequence[dict[str, list[float]]] = ()  # recorded starts (recorded_starts); replaces base and the noise
    # the adversary's noise (tests/bench/test_adversary.py, bench.scenarios), all off by default
    noise: str = "lognormal"  # "t3": start noise Student t with 3 df, scaled to the same sd (heavy tails)
    drift: Callable[[int], float] | None = None  # factor by the session's start index (0 = first measured start)
    var_plants: dict[str, float] = field(default_factory=dict)  # patch -> extra start cv; the median is unchanged
    independent_metrics: bool = False  # each metric draws its own start noise (phases are not one number)
    outlier_p: float = 0.0  # a start that something else disturbed: x (1 + outlier_shift)
    outlier_shift: float = 0.0
    rep_outlier_p: float = 0.0  # a repetition hit by a pause: x (1 + rep_outlier_shift)
    rep_outlier_shift: float = 0.0
    # a host that switches speed in stretches (session 5's VM): x (1 + host_slow) while slow, switching with
    # probability 1 - host_stay per repetition over the whole session; the probe (host_probe_us) and the
    # scheduler CPU's steal (host_steal_pct) see it, with their own noise
    host_slow: float = 0.0
    host_stay: float = 0.8
    # the machine's state also moves while a server starts (a warm start takes 10-20 repetitions' time): this
    # many chain steps before each start's repetitions (0: the state moves during repetitions only)
    host_ticks_per_start: int = 0
    # each server of a block on a chain of its own (bench.simulate_blocks): on the H200 the j-th repetitions of
    # a block's two servers, a second apart, were no more alike than any two (bench/results/2026-12-03-h200-pairs:
    # lag-1 correlation within a start 0.1-0.2, a block's ratio as noisy as its repetitions predict)
    host_per_server: bool = False
    probe_cv: float = 0.01
    accept_cv: float = 0.0  # start-to-start cv of the EXACT metrics (batch composition under concurrency)

    def active(self, patches: Sequence[str], rng: random.Random) -> list[Plant]:
        """The plants this start shows (an intermittent one only in some starts)."""
        return [p for p in self.plants if p.needs <= set(patches) and rng.random() < p.intermittent]


class SimLab:
    """bench.replication.Lab over World; also keeps every repetition (for comparing with the old method)."""

    def __init__(self, world: World, seed: int = 0, max_total_starts: int | None = None):
        self.world = world
        self.rng = random.Random(seed)
        self.starts: dict[str, list[dict[str, list[float]]]] = {}
        self.order: list[str] = []  # arm keys in the order their starts ran
        self.max_total = max_total_starts
        self.host_is_slow = world.host_slow > 0 and self.rng.random() < 0.5

    def n_starts(self, arm: ArmSpec) -> int:
        return len(self.starts.get(arm.key, []))

    def start_values(self, arm: ArmSpec, metric: str) -> list[float]:
        meds = (start_value(s.get(metric, [])) for s in self.starts.get(arm.key, []))
        return [m for m in meds if m is not None]

    def reps(self, arm: ArmSpec, metric: str) -> list[float]:
        return [x for s in self.starts.get(arm.key, []) for x in s.get(metric, []) if x is not None]

    def add_starts(self, arms: Sequence[ArmSpec]) -> None:

        for arm in arms:
            if self.max_total is not None and len(self.order) >= self.max_total:
                raise BudgetExhausted(f"simulated budget of {self.max_total} starts used")
            self.starts.setdefault(arm.key, []).append(self._with_late(self._one(arm.pset.patches)))
            self.order.append(arm.key)

    @staticmethod
    def _with_late(out: dict[str, list]) -> dict[str, list]:
        """bench.store.with_late over the start's lists: LATE's metrics, None in the earlier half."""
        for k, b in LATE.items():
            if b in out:
                first = late_from(len(out[b]))
                out[k] = [None] * first + out[b][first:]
        return out

    def _one(self, patches: Sequence[str]) -> dict[str, list[float]]:
        w, rng = self.world, self.rng
        k = len(self.order)  # the start's place in the session: what drift depends on
        if w.pool:
            rec = rng.choice(w.pool)
            active = w.active(patches, rng)
            d = w.drift(k) if w.drift else 1.0
            return {
                m: [
                    x * math.prod(p.factor(m, r) for p in active) * (1.0 if m in EXACT else slower(m, d))
                    for r, x in enumerate(v)
                ]
                for m, v in rec.items()
            }
        extra = math.sqrt(sum(v * v for p, v in w.var_plants.items() if p in patches))

        def start_factor() -> float:
            if w.noise == "t3":
                chi = sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3
                z = rng.gauss(0, 1) / math.sqrt(chi) / math.sqrt(3)  # t(3) has variance 3
            else:
                z = rng.gauss(0, 1)
            f = math.exp(w.start_cv * z + (rng.gauss(0, extra) if extra else 0.0))
            if w.bimodal_p and rng.random() < w.bimodal_p:
                f *= 1 + w.bimodal_shift
            if w.outlier_p and rng.random() < w.outlier_p:
                f *= 1 + w.outlier_shift
            return f * (w.drift(k) if w.drift else 1.0)

        shared = start_factor()
        active = w.active(patches, rng)
        out = {}
        for m, level in w.base.items():
            if m in EXACT:
                lvl = level * (math.exp(rng.gauss(0, w.accept_cv)) if w.accept_cv else 1.0)
                out[m] = [lvl * math.prod(p.factor(m, r) for p in active) for r in range(w.reps)]
                continue
            sh = start_factor() if w.independent_metrics else shared
            reps = []
            for r in range(w.reps):
                x = level * math.prod(p.factor(m, r) for p in active) * slower(m, sh) * math.exp(rng.gauss(0, w.rep_cv))
                if w.rep_outlier_p and rng.random() < w.rep_outlier_p:
                    x = x * (1 + w.rep_outlier_shift) if not m.startswith("tok_s") else x / (1 + w.rep_outlier_shift)
                reps.append(x)
            out[m] = reps
        if w.host_slow:
            self._host(out, active)
        return out

    def _tick(self) -> None:
        """One step of the host's two-state chain (World.host_slow / host_stay)."""
        if self.rng.random() > self.world.host_stay:
            self.host_is_slow = not self.host_is_slow

    def _host(self, out: dict[str, list[float]], active: Sequence[Plant] = ()) -> None:
        """The session's host regime over this start's repetitions (World.host_slow), applied in place; a plant
        on PROBE_METRIC moves the probe itself (a patch that loads, or keeps busy, the scheduler's vCPU)."""
        w, rng = self.world, self.rng
        factors = []
        for _ in range(w.host_ticks_per_start):
            self._tick()
        for _ in range(w.reps):
            if rng.random() > w.host_stay:
                self.host_is_slow = not self.host_is_slow
            factors.append(1 + w.host_slow if self.host_is_slow else 1.0)
        for m, xs in out.items():
            if m not in EXACT:
                out[m] = [x / f if m.startswith("tok_s") else x * f for x, f in zip(xs, factors)]
        out["host_probe_us"] = [
            400.0 * f * math.prod(p.factor("host_probe_us", r) for p in active) * math.exp(rng.gauss(0, w.probe_cv))
            for r, f in enumerate(factors)
        ]
        out["host_steal_pct"] = [max(0.0, (20.0 if f > 1 else 0.5) + rng.gauss(0, 1.0)) for f in factors]


def sim_arm(name: str, patches: Sequence[str]) -> ArmSpec:
    patches = tuple(patches)
    return ArmSpec(name, PatchSet(",".join(patches) or "none", patches))


def bisect_rates(world_of, n_cands: int, culprit: str | None, trials: int, settings) -> dict[str, Any]:
    """Run bench.plans.run_bisect `trials` times; count named / right / wrong culprits and starts used."""
    from bench.plans import run_bisect

    good_p = ("g",)
    cands = [f"p{i}" for i in range(n_cands)]
    out: dict[str, Any] = {"trials": trials, "right": 0, "wrong": 0, "none": 0, "starts": []}
    for t in range(trials):
        lab = SimLab(world_of(t), seed=t)
        res = run_bisect(
            lab,
            sim_arm("good", good_p),
            sim_arm("bad", good_p + tuple(cands)),
            lambda patches, role: sim_arm(role, patches),
            lambda name: set(),
            settings,
        )
        named = res["culprit"]
        if named is None:
            out["none"] += 1
        elif named == culprit:
            out["right"] += 1
        else:
            out["wrong"] += 1
        out["starts"].append(len(lab.order))
    out["median_starts"] = statistics.median(out["starts"])
    return out


def _tally(r: dict[str, Any], c: dict, units: int, spread: float) -> None:
    r["verdicts"][c["verdict"]] = r["verdicts"].get(c["verdict"], 0) + 1
    r["units"].append(units)
    r["width"].append(c["high"] - c["low"])
    r["cv"].append(spread)
