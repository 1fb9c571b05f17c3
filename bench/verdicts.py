"""Every metric of a comparison in one table, the flags a reader must not miss, and where a bisect probe lies.

What a phase span measures (eagle_profiling): CUDA events recorded on the stream before and after the draft,
verify and draft-extend phases, so a span is the time between the GPU *reaching* the first event and reaching
the second. It includes the GPU's idle gaps while it waits for the host to enqueue the phase's kernels. On a
host-bound step (the tiny model: GPU busy about 9% of a step) a GPU-side slowdown in one phase lengthens that
phase's span while the host keeps running ahead, so the next phase's kernels are already queued when the GPU
gets there and its span *shrinks*; the step time, set by the host, may not move at all. Hence the flags: a
phase that moved while the step did not, and phases that moved in opposite directions, are shown beside the
verdict on the primary metric, never averaged into it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .replication import LABELS, PHASES, Policy
from .stats import IMPROVEMENT, MIN_STARTS, REGRESSION, SAME, Comparison, clean, compare_starts, log_contrast


def pct(c: Comparison) -> str:
    ci = "" if math.isnan(c.low) else f" [{c.low * 100:+.1f}, {c.high * 100:+.1f}]"
    return f"{c.change * 100:+.1f}%{ci}"


def flags(rows: Sequence[Comparison]) -> list[str]:
    """What the reader of a comparison must not miss beside its verdict."""
    by = {c.metric: c for c in rows}
    moved = {REGRESSION, IMPROVEMENT}
    out = []
    step = by.get("step_ms_b1")
    for m in PHASES:
        c = by.get(m)
        if c is None or c.verdict not in moved:
            continue
        if step is not None and step.verdict not in moved:
            out.append(
                f"{LABELS[m]} moved ({c.verdict}, {pct(c)}) while step ms (batch 1) did not ({step.verdict}, "
                f"{pct(step)}): the change is in that phase's GPU span; a host-bound step can hide it"
            )
    # what the primary step cannot show: the prefill path (first token), the concurrent batch, and the later
    # repetitions of a start (the start value averages them with the earlier half, diluting a late cost)
    for m, where in (
        ("ttft_ms_b1", "the prefill path"),
        ("step_ms_bc", "the concurrent batch"),
        ("step_ms_b1_late", "the later repetitions of each start: a cost that grows as a start serves requests"),
    ):
        c = by.get(m)
        if c is None or c.verdict not in moved or (step is not None and step.verdict in moved):
            continue
        out.append(
            f"{LABELS[m]} moved ({c.verdict}, {pct(c)}) while step ms (batch 1) did not"
            + (f" ({step.verdict}, {pct(step)})" if step is not None else "")
            + f": the change is in {where}; bisect or ablate with --metric {m} to find it"
        )
    # tok/s = tokens per step / step time: tok/s falling while its step time is shown not to regress is fewer
    # tokens per step (the accept length) or time outside the steps, which no timing metric (the step, a phase
    # span) can show; an undecided step is not enough (a slowdown's tok/s interval may decide before its step's)
    for b in ("b1", "bc"):
        tok, st, acc = by.get(f"tok_s_{b}"), by.get(f"step_ms_{b}"), by.get(f"accept_len_{b}")
        if tok is None or tok.verdict != REGRESSION:
            continue
        fewer = acc is not None and acc.verdict == REGRESSION
        if not fewer and (st is None or st.verdict not in (SAME, IMPROVEMENT)):
            continue
        said = f"{LABELS[tok.metric]} fell ({pct(tok)})" + (
            f", {LABELS[st.metric]}: {st.verdict} ({pct(st)})" if st is not None else ""
        )
        if fewer and acc is not None:
            said += (
                f": fewer tokens per step ({LABELS[acc.metric]} {acc.verdict}, {pct(acc)}), a change in what the "
                f"draft gets accepted, not in speed; bisect or ablate with --metric {acc.metric} to find it"
            )
        else:
            said += (
                ": the time went outside the measured steps (scheduling between them, detokenizing, the client)"
                + (f"; {LABELS[acc.metric]}: {acc.verdict} ({pct(acc)})" if acc is not None else "")
                + f"; bisect or ablate with --metric {tok.metric} to find it"
            )
        out.append(said)
    ups = [m for m in PHASES if m in by and by[m].verdict == REGRESSION]
    downs = [m for m in PHASES if m in by and by[m].verdict == IMPROVEMENT]
    if ups and downs:
        out.append(
            "phases moved in opposite directions ("
            + ", ".join(f"{LABELS[m]} {pct(by[m])}" for m in ups + downs)
            + "): a phase span includes GPU idle time waiting for the host, so a GPU-side delay in one phase "
            "shortens the next one's span; read the phase that grew"
        )
    return out


class Place(str, enum.Enum):  # noqa: UP042 - a StrEnum would change str() of the members, which reports print
    GOOD = "good"  # the probe carries none of the regression (nearer good, with confidence)
    BAD = "bad"  # it carries the regression (nearer bad, with confidence)
    BETWEEN = "between"  # clearly away from both: part of the regression, the rest elsewhere
    OPEN = "undecided"  # not yet: more starts of the probe or the references may decide


@dataclass(frozen=True)
class Placement:
    place: Place
    vs_good: Comparison
    vs_bad: Comparison
    toward_bad: float  # (log P - log G) / (log B - log G): 0 = good, 1 = bad (NaN without data)
    contrast_low: float  # interval of log P - (log G + log B) / 2, in B's direction
    contrast_high: float

    def to_dict(self) -> dict:
        return {
            "place": self.place.value,
            "vs_good": self.vs_good.to_dict(),
            "vs_bad": self.vs_bad.to_dict(),
            "toward_bad": self.toward_bad,
            "contrast_low": self.contrast_low,
            "contrast_high": self.contrast_high,
        }


def place_probe(
    good: Sequence[float],
    bad: Sequence[float],
    probe: Sequence[float],
    metric: str,
    policy: Policy,
    sequential: bool | None = None,
) -> Placement:
    """Where a probe's start values lie between the good and the bad references.
    BAD / GOOD: the interval of log P - (log G + log B)/2 (Welch-Satterthwaite) lies wholly on bad's / good's
    side of the midpoint; BETWEEN: P is beyond the minimum effect from both references (worse than good,
    better than bad). A probe must be nearer one reference with confidence before it steers the bisection.
    """
    from .replication import lower_is_better

    lib = lower_is_better(metric)

    g, b, p = clean(good), clean(bad), clean(probe)
    # A confirmation is read after every added start, at the group-sequential boundary of its look, like every
    # claim the bench makes. A search probe (sequential=False) is read at the plain confidence: it only steers
    # the search, no patch is named from it, and a wrong turn ends in a suspect whose confirmations fail.
    # (The earlier method, "bonferroni", read confirmations at the plain confidence too.)
    if sequential is None:
        sequential = policy.spending != "bonferroni"

    def vs(ref: Sequence[float | None]) -> Comparison:
        conf = policy.pair_confidence(len(clean(ref)), len(p)) if sequential else policy.confidence
        return compare_starts(
            ref, probe, metric=metric, lower_is_better=lib, confidence=conf, min_effect=policy.min_effect
        )

    vg, vb = vs(good), vs(bad)
    nan = math.nan
    if min(len(g), len(b), len(p)) < MIN_STARTS:
        return Placement(Place.OPEN, vg, vb, nan, nan, nan)
    lg, lb, lp = (sum(math.log(x) for x in xs) / len(xs) for xs in (g, b, p))
    span = lb - lg
    toward = (lp - lg) / span if span else nan
    coefs = [1.0, -0.5, -0.5]
    conf = policy.look_confidence((len(p), len(g), len(b)), coefs) if sequential else policy.confidence
    con = log_contrast([p, g, b], coefs, conf)
    sign = 1.0 if span >= 0 else -1.0
    low, high = sorted((sign * con.low, sign * con.high))
    if vg.verdict == REGRESSION and vb.verdict == IMPROVEMENT:
        place = Place.BETWEEN
    elif low > 0:
        place = Place.BAD
    elif high < 0:
        place = Place.GOOD
    else:
        place = Place.OPEN
    return Placement(place, vg, vb, toward, low, high)


def _badness(c: Comparison) -> tuple[float, float, float]:
    """(estimate, low, high) of how much worse the arm is than the reference (positive = worse)."""
    if c.lower_is_better:
        return c.change, c.low, c.high
    return -c.change, -c.high, -c.low


def place_confirmation(
    good: Sequence[float], bad: Sequence[float], probe: Sequence[float], expect: str, metric: str, policy: Policy
) -> Placement:
    """place_probe, made strict for the two sets a culprit rests on (bad - c must be good, good + c bad)."""
    pl = place_probe(good, bad, probe, metric, policy)
    if pl.place in (Place.OPEN, Place.BETWEEN) or pl.place.value != expect:
        return pl
    d = policy.min_effect
    if expect == "good":
        est, low, _ = _badness(pl.vs_good)  # how much worse than good the set still is
    else:
        bad_est, _, bad_high = _badness(pl.vs_bad)  # how much better than bad: the part it does not carry
        est, low = -bad_est, -bad_high
    if est <= d / 2:
        return pl
    place = Place.BETWEEN if low > d else Place.OPEN
    return Placement(place, pl.vs_good, pl.vs_bad, pl.toward_bad, pl.contrast_low, pl.contrast_high)
