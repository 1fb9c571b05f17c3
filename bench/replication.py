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
from .stats import DECIDED, MIN_STARTS, Comparison, compare_starts

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

    @property
    def grid(self) -> tuple[int, ...]:
        """The planned looks, as balanced start counts per arm."""
        from .sequential import grid_counts

        return grid_counts(self.initial, self.max_starts, self.step)

    @property
    def looks(self) -> int:
        return len(self.grid)

    def at_look(self, n: int) -> bool:
        """Whether n starts per arm is a planned look. Reading between looks is an unplanned look: with
        --look-step 2 it called a null pair a change in 57 of 1000 seeded runs (tests/bench/test_sequential.py)."""
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


def look_confidence_of(lab: Lab, ref: ArmSpec, arm: ArmSpec, metric: str, policy: Policy) -> float:
    """The per-look confidence a comparison of these arms is read at now."""
    return policy.pair_confidence(len(lab.start_values(ref, metric)), len(lab.start_values(arm, metric)))


def compare(
    lab: Lab, ref: ArmSpec, arm: ArmSpec, metric: str, policy: Policy, confidence: float | None = None
) -> Comparison:
    """A comparison as a stopping decision reads it: at the policy's per-look confidence unless told otherwise."""
    a, b = lab.start_values(ref, metric), lab.start_values(arm, metric)
    return compare_starts(
        a,
        b,
        metric=metric,
        lower_is_better=lower_is_better(metric),
        confidence=policy.pair_confidence(len(a), len(b)) if confidence is None else confidence,
        min_effect=policy.min_effect,
    )


def placement_values(lab: Lab, arms: Sequence[ArmSpec], metric: str, policy: Policy) -> list[list[float]]:
    """The start values a placement reads (bench.verdicts): good, bad, then the arms placed between them."""
    return [lab.start_values(a, metric) for a in arms]


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
    """Every arm of these (reference, arm) pairs measured at least n times."""
    ensure(lab, [x for p in pairs for x in p], n)


def smaller_sides(lab: Lab, pairs: Sequence[tuple[ArmSpec, ArmSpec]], policy: Policy) -> list[ArmSpec]:
    """The arms to add a start to for these undecided pairs: each pair's arm with fewer starts (both if equal)."""
    out: list[ArmSpec] = []
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
        while rest := [a for a in want if not policy.at_look(lab.n_starts(a)) and lab.n_starts(a) < policy.max_starts]:
            lab.add_starts(rest)


def decide_pairs(lab: Lab, policy: Policy, pairs: Sequence[tuple[ArmSpec, ArmSpec]], metric: str) -> bool:
    """Replicate until every pair is decided on `metric` (True) or cannot be at max_starts (False)."""

    def needs() -> list[ArmSpec]:
        open_ = [(r, a) for r, a in pairs if compare(lab, r, a, metric, policy).verdict not in DECIDED]
        return smaller_sides(lab, open_, policy)

    ensure_pairs(lab, pairs, policy.initial)
    return replicate_until(lab, policy, needs)
