"""Adaptive replication: which arms get another server start, and when to stop.

A plan (ab, ablate, bisect: bench/plans.py) states what it needs to know as comparisons; this module measures
every arm `initial` times, interleaved round by round, then adds one start to each arm of every comparison that
is still undecided (the arm with fewer starts, or both when equal: the interval narrows fastest that way),
again interleaved, reading the comparisons again only at the planned looks (every `step` starts per arm and
at `max_starts`: Policy.at_look), until every comparison is decided, the arms reach `max_starts`, or the time
budget ends (BudgetExhausted from the lab). Then an undecided comparison is reported as "cannot tell at this budget":
never as a change.

A lab is where starts happen: bench.runner.StoreLab starts real servers and keeps every start in the JSONL
store; the CPU tests use a simulated lab. Decisions read only what the lab returns, so replaying a plan over a
store (--resume, --reuse) takes the same decisions and measures only what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .launcher import ArmSpec
from .stats import DECIDED, MIN_STARTS, TOO_FEW, Comparison, compare_contrast, compare_paired, compare_starts

# (metric, label, lower is better): every metric a comparison reports; the primary one is chosen per run
# What a warm start is taken to cost before an invocation has seen one (an H200 served the tiny model's warm
# starts in 57-83 s, bench/results/2026-12-01-h200-run4): --time-budget's guess after only a cold start.
WARM_START_ESTIMATE_S = 120.0

METRICS = (
    ("step_ms_b1", "step ms (batch 1)", True),
    ("step_ms_bc", "step ms (concurrent)", True),
    ("tok_s_b1", "tok/s (batch 1)", False),
    ("tok_s_bc", "tok/s (concurrent)", False),
    # the prefill path: a change there moves none of the decode metrics above (bench.workload.ttft_ms)
    ("ttft_ms_b1", "time to first token ms (b1)", True),
    # the later half of each start's repetitions (bench.store.LATE): a cost that grows as a start serves requests
    ("step_ms_b1_late", "step ms (b1), later half of a start", True),
    ("eagle_step_ms_b1", "EAGLE step p50 ms (b1)", True),
    ("eagle_draft_ms_b1", "EAGLE draft p50 ms (b1)", True),
    ("eagle_verify_ms_b1", "EAGLE verify p50 ms (b1)", True),
    ("eagle_draft_extend_ms_b1", "EAGLE draft-extend p50 ms (b1)", True),
    # tokens per verify: a draft-quality change lowers tok/s while the step holds or even gets faster (fewer
    # accepted tokens to extend), so the step alone reads it as an improvement
    ("accept_len_b1", "EAGLE accept length (b1)", False),
    ("accept_len_bc", "EAGLE accept length (concurrent)", False),
    # oea_topk's SGLANG_OEA_STATS: fewer distinct experts per routing call is what OEA is for
    ("oea_distinct_experts_b1", "distinct experts / routing call (b1)", True),
    ("oea_distinct_experts_bc", "distinct experts / routing call (concurrent)", True),
)
LABELS = {m: label for m, label, _ in METRICS}
_LOWER_IS_BETTER = {m: lib for m, _, lib in METRICS}
PHASES = ("eagle_draft_ms_b1", "eagle_verify_ms_b1", "eagle_draft_extend_ms_b1")


def lower_is_better(metric: str) -> bool:
    return _LOWER_IS_BETTER.get(metric, not metric.startswith("tok_s"))


class Lab(Protocol):
    def n_starts(self, arm: ArmSpec) -> int: ...

    def start_values(self, arm: ArmSpec, metric: str) -> list[float]:
        """One value per completed start of the arm (bench.stats.start_value of its repetitions); starts without it dropped."""
        ...

    def add_starts(self, arms: Sequence[ArmSpec]) -> None:
        """One more start of each arm, in this order; BudgetExhausted when the budget cannot take the next."""
        ...


@dataclass(frozen=True)
class Policy:
    initial: int = MIN_STARTS  # starts per arm before the first look
    max_starts: int = 8  # per arm: past it a comparison stays "cannot tell"
    confidence: float = 0.95
    min_effect: float = 0.02
    # How the error of reading a comparison at several looks is kept at 1 - confidence (bench.sequential):
    # "obf" / "pocock" Lan-DeMets spending, "bonferroni" the earlier alpha / looks at every look.
    spending: str = "pocock"
    step: int = 1  # starts per arm between planned looks
    # "host" / "steal" / "wait": verdicts at a fixed probe speed, steal or run-queue wait (bench.covariate.COVARIATES);
    # "state": on the repetitions in the host's fast state (bench.hoststate)
    adjust: str = "none"

    @property
    def grid(self) -> tuple[int, ...]:
        """The planned looks, as balanced start counts per arm."""
        from .sequential import grid_counts

        return grid_counts(self.initial, self.max_starts, self.step)

    @property
    def looks(self) -> int:
        return len(self.grid)

    def at_look(self, n: int) -> bool:
        """Whether n starts (duets) per arm is a planned look: the one definition both designs read verdicts
        by (replicate_until here, bench.plans.run_duet). The boundaries spend alpha at the planned looks only;
        a verdict read between them (at a look's boundary again, with more data) is an unplanned look, and
        with --look-step 2 that called a null pair a change in 57 of 1000 seeded runs at alpha 5%, 44 once read
        at the planned looks only (tests/bench/test_sequential.py)."""
        return n in self.grid

    def look_confidence(self, counts: Sequence[int] = (), coefs: Sequence[float] = (1.0, -1.0)) -> float:
        """The confidence at which to read a contrast of arms with these start counts now (default: the last
        look of a pair). Bonferroni here, 6 looks at one 95% interval called 'improvement' for a true -2% in 10%
        of runs; the group-sequential boundary keeps it within alpha over all looks (bench.sequential)."""
        from .sequential import look_confidence

        return look_confidence(
            counts or [self.max_starts] * len(coefs),
            coefs,
            initial=self.initial,
            max_starts=self.max_starts,
            step=self.step,
            confidence=self.confidence,
            spending=self.spending,
        )

    def pair_confidence(self, n_ref: int, n_arm: int) -> float:
        return self.look_confidence((n_ref, n_arm))

    def paired_confidence(self, n: int) -> float:
        """The confidence of the duet's one-sample t interval over n duets (bench.sequential.paired_t_quantiles:
        its boundaries are solved for t statistics, not converted from the Z boundaries look by look, which
        at 2-7 degrees of freedom called a null pair a change in 5.8% of runs at alpha 5%)."""
        from .sequential import paired_look_confidence

        return paired_look_confidence(
            n,
            initial=self.initial,
            max_starts=self.max_starts,
            step=self.step,
            confidence=self.confidence,
            spending=self.spending,
        )


class BlockLab(Lab, Protocol):
    block_analysis: str  # "pooled" (bench.rcbd) or "paired" (each comparison's own blocks)

    def block_pairs(self, ref: ArmSpec, arm: ArmSpec, metric: str) -> list[tuple[float, float]]:
        """(reference value, arm value) of each block holding both arms (bench.block_runner), in block order."""
        ...

    def block_values(self, metric: str) -> list[dict[str, float]]:
        """Every block's {arm key: value} (bench.rcbd.block_values), in block order."""
        ...


BLOCK_ANALYSES = ("pooled", "paired")


def is_blocked(lab: Lab) -> bool:
    """Whether the lab pairs its arms block by block (bench.blocks): then every comparison reads the blocks'
    paired values, never two arms' start values side by side."""
    return callable(getattr(lab, "block_pairs", None))


def compare_blocks(
    pairs: list[tuple[float, float]],
    metric: str,
    policy: Policy,
    confidence: float | None = None,
    pooled: tuple[list[dict[str, float]], str, str] | None = None,
) -> Comparison:
    """A comparison over blocks at the per-look confidence of the paired design for the number of blocks holding
    both arms (the duet's: Policy.paired_confidence) unless told otherwise: the one-sample t interval of
    log(arm / reference) over those blocks, or, with `pooled` = (every block's values, reference key, arm key),
    the block design's least-squares contrast with the residual variance of all the blocks' arms (bench.rcbd),
    unless their spread differs between arms."""
    conf = policy.paired_confidence(len(pairs)) if confidence is None else confidence
    lib = lower_is_better(metric)
    paired = compare_paired(pairs, metric=metric, lower_is_better=lib, confidence=conf, min_effect=policy.min_effect)
    if pooled is None or paired.verdict == TOO_FEW:
        return paired
    from . import rcbd

    values, ref_key, arm_key = pooled
    f = rcbd.fit(values)
    c = rcbd.contrast(f, ref_key, arm_key) if f is not None else None
    if f is None or c is None:
        return paired
    if f.hetero_p < rcbd.HETERO_P:
        from dataclasses import replace

        return replace(
            paired,
            note=f"the arms' spread differs (Brown-Forsythe p = {f.hetero_p:.3f}): read on its own blocks, not pooled",
        )
    est, se, df = c
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    return compare_contrast(
        est, se, df, a, b, metric=metric, lower_is_better=lib, confidence=conf, min_effect=policy.min_effect
    )


def look_confidence_of(lab: Lab, ref: ArmSpec, arm: ArmSpec, metric: str, policy: Policy) -> float:
    """The per-look confidence a comparison of these arms is read at now."""
    if is_blocked(lab):
        return policy.paired_confidence(len(lab.block_pairs(ref, arm, metric)))  # type: ignore[attr-defined]
    return policy.pair_confidence(len(lab.start_values(ref, metric)), len(lab.start_values(arm, metric)))


def compare(
    lab: Lab, ref: ArmSpec, arm: ArmSpec, metric: str, policy: Policy, confidence: float | None = None
) -> Comparison:
    """A comparison as a stopping decision reads it: at the policy's per-look confidence unless told otherwise."""
    if is_blocked(lab):
        bl: BlockLab = lab  # type: ignore[assignment]
        pooled = (bl.block_values(metric), ref.key, arm.key) if bl.block_analysis == "pooled" else None
        return compare_blocks(bl.block_pairs(ref, arm, metric), metric, policy, confidence, pooled)
    if policy.adjust != "none":
        adjusted = compare_host_adjusted(lab, ref, arm, metric, policy, confidence)
        if adjusted is not None:
            return adjusted
    a, b = lab.start_values(ref, metric), lab.start_values(arm, metric)
    return compare_starts(
        a,
        b,
        metric=metric,
        lower_is_better=lower_is_better(metric),
        confidence=policy.pair_confidence(len(a), len(b)) if confidence is None else confidence,
        min_effect=policy.min_effect,
    )


def compare_host_adjusted(
    lab: Lab, ref: ArmSpec, arm: ArmSpec, metric: str, policy: Policy, confidence: float | None = None
) -> Comparison | None:
    """compare() with the policy's covariate (bench.covariate), from a lab that has the starts' repetitions
    (`units`) or (start value, probe) pairs (`paired`); None where it cannot be."""
    from .covariate import compare_adjusted, compare_host

    units, paired = getattr(lab, "units", None), getattr(lab, "paired", None)
    lib = lower_is_better(metric)
    if units is not None:
        a, b = units(ref), units(arm)
        conf = policy.pair_confidence(len(a), len(b)) if confidence is None else confidence
        return compare_host(
            a, b, policy.adjust, metric=metric, lower_is_better=lib, confidence=conf, min_effect=policy.min_effect
        )
    if paired is None or policy.adjust != "host":
        return None
    pa, pb = paired(ref, metric), paired(arm, metric)
    conf = policy.pair_confidence(len(pa), len(pb)) if confidence is None else confidence
    return compare_adjusted(pa, pb, metric=metric, lower_is_better=lib, confidence=conf, min_effect=policy.min_effect)


def placement_values(lab: Lab, arms: Sequence[ArmSpec], metric: str, policy: Policy) -> list[list[float]]:
    """The start values a placement reads (bench.verdicts): `arms` is good, bad, then the arms placed between them.

    Raw start values, except under `--adjust state` where the lab has the repetitions: each arm's fast-state
    values (bench.hoststate), gated as bench.hoststate.compare_state gates a pair. A placed arm whose level is
    refused against good's or bad's gets none (it cannot be placed); good and bad refused against each other
    leave nothing to place against. A fitted covariate (host, steal, wait) has no per-arm values to place:
    those placements stay unadjusted."""
    units = getattr(lab, "units", None)
    if policy.adjust != "state" or units is None:
        return [lab.start_values(a, metric) for a in arms]
    from . import hoststate

    states = [hoststate.arm_state(units(a), metric) for a in arms]
    known = [s for s in states if s is not None]
    if len(known) < len(states) or len(known) < 2:
        return [lab.start_values(a, metric) for a in arms]
    good, bad, placed = known[0], known[1], known[2:]
    if hoststate.refusal(good, bad):
        return [[] for _ in arms]
    return [list(good.values), list(bad.values)] + [
        [] if hoststate.refusal(good, s) or hoststate.refusal(bad, s) else list(s.values) for s in placed
    ]


def _unique(arms: Sequence[ArmSpec]) -> list[ArmSpec]:
    seen: set[str] = set()
    out = []
    for a in arms:
        if a.key not in seen:
            seen.add(a.key)
            out.append(a)
    return out


def ensure(lab: Lab, arms: Sequence[ArmSpec], n: int) -> None:
    """Every arm measured at least n times, one round at a time (A B C A B C ...)."""
    arms = _unique(arms)
    while True:
        short = [a for a in arms if lab.n_starts(a) < n]
        if not short:
            return
        lab.add_starts(short)


def ensure_pairs(lab: Lab, pairs: Sequence[tuple[ArmSpec, ArmSpec]], n: int) -> None:
    """Every arm of these (reference, arm) pairs measured at least n times. A blocked lab is asked for both arms
    of each short pair: a block pairs what it is asked for, and a reference measured more often (ablate's full
    set, the reference of every leave-out) left out of the ask would send its arms to references nobody asked
    about (with two candidates a leave-out is also a patch alone on the base)."""
    if not is_blocked(lab):
        ensure(lab, [x for p in pairs for x in p], n)
        return
    while short := [x for r, a in pairs if min(lab.n_starts(r), lab.n_starts(a)) < n for x in (r, a)]:
        lab.add_starts(_unique(short))


def smaller_sides(lab: Lab, pairs: Sequence[tuple[ArmSpec, ArmSpec]], policy: Policy) -> list[ArmSpec]:
    """The arms to add a start to for these undecided pairs: each pair's arm with fewer starts (both if equal)."""
    out: list[ArmSpec] = []
    if is_blocked(lab):
        # a block pairs what it holds: both arms of an undecided comparison go into the next block together
        return _unique([x for p in pairs for x in p])
    for ref, arm in pairs:
        # an arm at max_starts is named too when both are: replicate_until then sees nothing can take more
        sides = [a for a in (ref, arm) if lab.n_starts(a) < policy.max_starts] or [ref, arm]
        least = min(lab.n_starts(a) for a in sides)
        out += [a for a in sides if lab.n_starts(a) == least]
    return _unique(out)


def replicate_until(lab: Lab, policy: Policy, needs: Callable[[], list[ArmSpec]]) -> bool:
    """Add starts to what `needs()` names until it names nothing (True) or nothing can take more (False);
    `needs()` is asked again only once each arm it named is at a planned look (Policy.at_look).

    BudgetExhausted from the lab propagates: the plan turns it into "cannot tell at this budget".
    """
    while True:
        asked = needs()
        if not asked:
            return True
        want = [a for a in _unique(asked) if lab.n_starts(a) < policy.max_starts]
        if not want:
            return False
        lab.add_starts(want)
        # needs() reads verdicts, so it is asked only at planned looks: until then the arms it named take
        # starts round by round (max_starts is a planned look, so this ends there at the latest)
        if is_blocked(lab):
            # a block reads pairs: an arm measured more often (a reference in other blocks too) must not be sent
            # on alone to its own next look; the blocks go on whole until the least measured arm, whose count is
            # its comparisons' number of blocks, is at one
            while (n := min(lab.n_starts(a) for a in want)) < policy.max_starts and not policy.at_look(n):
                lab.add_starts(want)
            continue
        while rest := [a for a in want if not policy.at_look(lab.n_starts(a)) and lab.n_starts(a) < policy.max_starts]:
            lab.add_starts(rest)


def decide_pairs(lab: Lab, policy: Policy, pairs: Sequence[tuple[ArmSpec, ArmSpec]], metric: str) -> bool:
    """Replicate until every pair is decided on `metric` (True) or cannot be at max_starts (False)."""

    def needs() -> list[ArmSpec]:
        open_ = [(r, a) for r, a in pairs if compare(lab, r, a, metric, policy).verdict not in DECIDED]
        return smaller_sides(lab, open_, policy)

    ensure_pairs(lab, pairs, policy.initial)
    return replicate_until(lab, policy, needs)
