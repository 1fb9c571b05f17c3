"""Start values in the host's fast state: `--adjust state` (needs `--host-probe --host-probe-at scheduler`).

The H200 VM's vCPUs each switch between two speeds about 1.8x apart, in stretches of 10 ms to tens of seconds
(bench/results/2026-12-03-h200-noise), and the host-bound step follows its scheduler's vCPU: with the probe on
that vCPU, the repetitions of one start sit at ~4 ms (probe ~110 us) or ~7 ms (probe ~200 us), and a start's value
is mostly the share of its repetitions that fell in the slow state: 15.2 % start-to-start CV around the arms' means
over that run's 15 starts, 4.9 % over the 12 this reading keeps (bench/results/2026-12-04-h200-schednull).

So this reading classes each repetition by the probe's mean work-unit time over it: fast when below FAST_RATIO x
the arm's fast level (`fast_level`), and a start's value is the start
value (bench.stats.start_value) of its fast repetitions; a start with fewer than MIN_FAST_REPS has none. The
comparison is then the unadjusted one (bench.stats.compare_starts) on those values: no slope is fitted, so the
probe's level within a state adjusts nothing.

Why each arm's own level, not one threshold for both: a patch can move the probe itself (on the schednull run
the planted arm's busy wait kept its vCPU from idling, and the probe ran 7 % faster in it); a threshold relative to
the arm's own fast level classes its repetitions the same way whatever uniform factor the arm puts on the probe.
What it cannot tell apart is an arm whose repetitions never reached the fast state (its "fast level" is the slow
one): the two arms' levels must lie within SAME_STATE of each other (the states are ~1.8x apart), else the
comparison is "cannot tell" with the reason in Comparison.note. So is a patch that moves the probe itself by more
than that (a regression that loads the scheduler's vCPU that much is not read here at all).

What this reading answers: the change at the host's fast state. A patch whose cost appears only when the vCPU is
slow, or that changes how often the vCPU is slow, is not seen here: the unadjusted report beside it still is. The
latter also leans on this reading a little: an arm slow more often has more of its "fast" repetitions spanning a
switch (simulated, 80 % of the time against 40 %: +0.9 % at the fast state, 2 of 200 nulls named;
bench/results/2026-12-04-h200-schednull/share_bias.txt).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .stats import UNDECIDED, Comparison, compare_starts, pooled_log_sd, start_value
from .store import PROBE_METRIC, Unit

# a repetition is fast below this x the arm's fast level: the fast cluster's own spread is ~5 % (schednull), the
# two states ~1.8x apart; a looser line admits more repetitions that span a switch, and an arm that is slow more
# often has more of those (simulated, slow 80 % of the time against 40 %: +1.6 % in the fast state at 1.2x, +0.9 %
# at 1.15x; bench/results/2026-12-04-h200-schednull/share_bias.txt)
FAST_RATIO = 1.15
LEVEL_QUANTILE = 0.10  # the arm's fast level: the median of its probe values below FAST_RATIO x this quantile
MIN_FAST_REPS = 3  # a start with fewer fast repetitions has no fast value
SAME_STATE = 1.25  # the arms' fast levels must be within this factor: else one arm never saw the fast state


def _rep_pairs(units: Sequence[Unit], metric: str) -> list[list[tuple[float, float]]] | None:
    """Per start, (metric, probe) per repetition; None when a start's probe was not pinned to its scheduler's
    CPU (a spare CPU's state is not the step's), or a repetition with the metric lacks the probe, or none has both."""
    out = []
    for u in units:
        if u.host_probe.get("at") != "scheduler" or u.host_probe.get("cpu") is None:
            return None  # unpinned (the scheduler's CPU was not known): its samples are any vCPU's
        pairs = []
        for m in u.reps:
            y, p = m.get(metric), m.get(PROBE_METRIC)
            if y is None or not math.isfinite(y):
                continue
            if p is None or not p > 0:
                return None
            pairs.append((float(y), float(p)))
        out.append(pairs)
    return out if any(out) else None


def fast_level(starts: Sequence[Sequence[tuple[float, float]]]) -> float | None:
    """The median of the repetitions' probe values below FAST_RATIO x their LEVEL_QUANTILE (statistics.quantiles,
    inclusive); None without any. Not the quantile itself: it climbs the fast cluster as the arm's share of slow
    repetitions grows (10 % of 20 % fast repetitions is that cluster's median, of 60 % its 17th percentile), and an
    arm that is only slow more often would then admit more of the repetitions that span a switch."""
    ps = sorted(p for s in starts for _, p in s)
    if not ps:
        return None
    if len(ps) == 1:
        return ps[0]
    low = statistics.quantiles(ps, n=100, method="inclusive")[round(LEVEL_QUANTILE * 100) - 1]
    return statistics.median(p for p in ps if p < FAST_RATIO * low)


@dataclass(frozen=True)
class ArmState:
    """One arm's fast-state reading: its level, how many repetitions were fast, and the starts' fast values."""

    level: float  # the probe's fast level (us)
    fast_reps: int
    reps: int
    values: tuple[float, ...]  # start values over fast repetitions, starts with fewer than MIN_FAST_REPS left out
    starts: int  # starts with a repetition (the values' denominator)


def arm_state(units: Sequence[Unit], metric: str) -> ArmState | None:
    """The arm's fast-state reading; None where a repetition lacks the probe."""
    starts = _rep_pairs(units, metric)
    if starts is None:
        return None
    level = fast_level(starts)
    if level is None:
        return None
    fast = [[y for y, p in s if p < FAST_RATIO * level] for s in starts]
    values = tuple(v for ys in fast if len(ys) >= MIN_FAST_REPS and (v := start_value(ys)) is not None)
    return ArmState(level, sum(map(len, fast)), sum(map(len, starts)), values, sum(1 for s in starts if s))


def refusal(ref: ArmState, arm: ArmState) -> str:
    """Empty when the arms' fast levels are within SAME_STATE of each other, else why not (Comparison.note)."""
    ratio = arm.level / ref.level
    if 1 / SAME_STATE <= ratio <= SAME_STATE:
        return ""
    return (
        f"the arms' fast-state probe levels are {ratio:.2f}x apart ({ref.level:.0f} against {arm.level:.0f} us, "
        f"more than {SAME_STATE}x): one arm's repetitions may never have reached the host's fast state, or the "
        f"arm moves the probe itself by more than that"
    )


def compare_state(
    ref: Sequence[Unit],
    arm: Sequence[Unit],
    *,
    metric: str = "step_ms_b1",
    lower_is_better: bool = True,
    confidence: float = 0.95,
    min_effect: float = 0.02,
) -> Comparison | None:
    """The comparison of the arms' fast-state start values (bench.stats.compare_starts: fewer than its minimum is
    "too few starts"); "cannot tell" with Comparison.note when `refusal` says so; None where a repetition lacks
    the probe (the caller then reads the start values unadjusted)."""
    a, b = arm_state(ref, metric), arm_state(arm, metric)
    if a is None or b is None:
        return None
    c = compare_starts(
        a.values,
        b.values,
        metric=metric,
        lower_is_better=lower_is_better,
        confidence=confidence,
        min_effect=min_effect,
    )
    why = refusal(a, b)
    return replace(c, verdict=UNDECIDED, note=why) if why else c


def describe(ref: Sequence[Unit], arm: Sequence[Unit], metric: str) -> str:
    """The report's line for one comparison: levels, fast repetitions and the starts that kept a value."""
    a, b = arm_state(ref, metric), arm_state(arm, metric)
    if a is None or b is None:
        return (
            "**not adjusted**: a start's probe was not on its scheduler's CPU (`--host-probe-at scheduler`) or a "
            "repetition has no probe value (the unadjusted comparison)"
        )

    def one(s: ArmState) -> str:
        return (
            f"level {s.level:.0f} us, {s.fast_reps} of {s.reps} repetitions fast, "
            f"{len(s.values)} of {s.starts} starts with >= {MIN_FAST_REPS}"
        )

    return f"fast state (probe < {FAST_RATIO} x the arm's level): reference {one(a)}; arm {one(b)}"


def spread(groups: Sequence[Sequence[Unit]], metric: str) -> tuple[float, int, float, int] | None:
    """Start-to-start CV around the arms' means (sd of log start values, pooled): (raw, starts, fast-state only,
    starts); None where an arm lacks the probe or either has fewer than 2 degrees of freedom."""
    raw: list[list[float]] = []
    fast: list[list[float]] = []
    for units in groups:
        s = arm_state(units, metric)
        if s is None:
            return None
        raw.append([v for u in units if (v := u.value(metric)) is not None and v > 0])
        fast.append([v for v in s.values if v > 0])
    (cr, df_raw), (cf, df_fast) = pooled_log_sd(raw), pooled_log_sd(fast)
    if df_raw < 2 or df_fast < 2:
        return None
    return cr, sum(map(len, raw)), cf, sum(map(len, fast))
