"""Verdicts from server starts: the start is the replication unit.

Repetitions inside one start share its memory layout, CUDA-graph pool, placement and JIT state: they say
nothing about what varies between starts (Kalibera & Jones, ISMM 2013). On this stack the start-to-start spread
is the larger one (4.66 ms and 3.9 ms per step in two starts of one set on an H200). So each start gives one
value per metric (start_value), and two arms are compared on those in logs: Welch's t interval for the ratio
of the arms' geometric means (the two-stage analysis of a hierarchical design; honest with 3-5 starts).

The verdict reads the interval against a minimum effect d (an equivalence design):
  regression / improvement  the whole interval lies beyond +d / -d (in the metric's bad / good direction)
  same                      the whole interval lies inside (-d, +d)
  cannot tell               the interval straddles a boundary: more starts may decide
  too few starts            fewer than MIN_STARTS per arm: no interval
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

REGRESSION = "regression"
IMPROVEMENT = "improvement"
SAME = "same"
UNDECIDED = "cannot tell"
TOO_FEW = "too few starts"
DECIDED = (REGRESSION, IMPROVEMENT, SAME)

# Two starts give a variance with one degree of freedom: the t quantile (12.7 at 95%) makes any interval
# useless, and a bimodal stack can hand both starts the same mode. Three per arm is the least we read.
MIN_STARTS = 3


def clean(values: Sequence[float | None]) -> list[float]:
    out = []
    for x in values:
        if x is None:
            continue
        x = float(x)
        if not math.isnan(x):
            out.append(x)
    return out


# What start_value computes, as run records name it ("median" for records made before it became the mean)
START_VALUE = "geomean"


def start_value(values: Sequence[float | None]) -> float | None:
    """One start's number for a metric: the geometric mean of its measured repetitions (the arithmetic mean
    where one is not positive; None without any).

    Not their median: a repetition's step time is already a median over its decode-log windows (a GC pause or
    a slow first request stays inside one window), and on the recorded H200 stores the repetitions of one start
    switch between two states (about 3.7 and 5.5 ms), so the median of 5-6 of them jumps to whichever state
    holds the majority while the mean moves with each state's share. Re-read over every recorded store
    (bench/results/2026-12-03-start-value/), the within-block comparison's spread fell from 11.5 % to 7.7 %
    (step ms, 27 pairs of arms), about half the starts for one interval width."""
    xs = clean(values)
    if not xs:
        return None
    if min(xs) > 0:
        return math.exp(statistics.fmean(math.log(x) for x in xs))
    return statistics.fmean(xs)


def cv(values: Sequence[float | None]) -> float:
    """Coefficient of variation (sample sd / mean); NaN for fewer than 2 values."""
    xs = clean(values)
    if len(xs) < 2:
        return math.nan
    mean = statistics.fmean(xs)
    return statistics.stdev(xs) / mean if mean else math.nan


def pooled_log_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The sd of log values around their own group's mean, pooled over the groups, and its degrees of freedom
    (sum of n - 1); values <= 0 left out; (NaN, 0) without a group of two."""
    logs = [[math.log(x) for x in g if x > 0] for g in groups]
    df = sum(len(g) - 1 for g in logs if g)
    if not df:
        return math.nan, 0
    ss = sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in logs if g)
    return math.sqrt(ss / df), df


def geometric_mean(values: Sequence[float]) -> float:
    xs = clean(values)
    if not xs or min(xs) <= 0:
        return statistics.median(xs) if xs else math.nan
    return math.exp(statistics.fmean(math.log(x) for x in xs))


@dataclass(frozen=True)
class Comparison:
    metric: str
    lower_is_better: bool
    ref_medians: tuple[float, ...]  # start values of the reference arm, in start order (the name is stored)
    arm_medians: tuple[float, ...]
    center_ref: float  # geometric mean of the start values
    center_arm: float
    change: float  # center_arm / center_ref - 1
    low: float  # confidence interval of `change` (NaN with too few starts)
    high: float
    p_value: float  # Welch's two-sided test on the logs, informational: the verdict reads the interval
    confidence: float
    min_effect: float
    verdict: str
    note: str = ""  # why a covariate-adjusted reading is "cannot tell" (bench.covariate), else empty
    df: float = math.nan  # the interval's degrees of freedom (resolution() scales them with the units)

    @property
    def n_ref(self) -> int:
        return len(self.ref_medians)

    @property
    def n_arm(self) -> int:
        return len(self.arm_medians)

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    def to_dict(self) -> dict:
        d = asdict(self)
        d["n_ref"], d["n_arm"] = self.n_ref, self.n_arm
        return d


def _log_interval(a: list[float], b: list[float], confidence: float) -> tuple[float, float, float, float, float]:
    """(mean log difference b - a, its interval low/high, two-sided p, df) by Welch's t on the logs."""
    c = log_contrast([b, a], [1.0, -1.0], confidence)
    return c.estimate, c.low, c.high, _p_value(c, confidence), c.df


def _p_value(c: Contrast, confidence: float) -> float:
    """Two-sided p of a contrast's estimate against 0, from its interval's half width and df."""
    if math.isinf(c.df):
        # identical values within each group (a deterministic metric): the estimate is known exactly
        return 1.0 if c.estimate == 0 else 0.0
    from scipy import stats as sst

    se = (c.high - c.estimate) / float(sst.t.ppf(0.5 + confidence / 2, c.df))
    return float(2 * sst.t.sf(abs(c.estimate) / se, c.df)) if se > 0 else 0.0


def regression_ruled_out(c: Comparison) -> bool:
    """The arm is not worse than the reference by the minimum effect: its interval's bad-side bound is below it
    (a "no regression" claim on this metric; too few starts rule nothing out)."""
    bound = c.high if c.lower_is_better else -c.low
    return c.verdict != TOO_FEW and bound < c.min_effect


def interval_verdict(lo: float, hi: float, min_effect: float, lower_is_better: bool) -> str:
    """The verdict of an interval [lo, hi] of a log ratio against the minimum effect (the module's rules)."""
    thr = math.log1p(min_effect)
    if lo > thr:
        return REGRESSION if lower_is_better else IMPROVEMENT
    if hi < -thr:
        return IMPROVEMENT if lower_is_better else REGRESSION
    if -thr < lo and hi < thr:
        return SAME
    return UNDECIDED


def compare_starts(
    ref: Sequence[float | None],
    arm: Sequence[float | None],
    *,
    metric: str = "step_ms_b1",
    lower_is_better: bool = True,
    confidence: float = 0.95,
    min_effect: float = 0.02,
    min_starts: int = MIN_STARTS,
) -> Comparison:
    """Compare `arm` against `ref`, each a list of start values (one per server start)."""
    a, b = clean(ref), clean(arm)
    ca, cb = geometric_mean(a), geometric_mean(b)
    change = cb / ca - 1 if a and b and ca else math.nan
    enough = len(a) >= min_starts and len(b) >= min_starts and min(a + b) > 0
    return _comparison(
        metric,
        lower_is_better,
        a,
        b,
        change,
        _log_interval(a, b, confidence) if enough else None,
        confidence,
        min_effect,
    )


def _comparison(
    metric: str,
    lower_is_better: bool,
    a: Sequence[float],
    b: Sequence[float],
    change: float,
    interval: tuple[float, float, float, float, float] | None,
    confidence: float,
    min_effect: float,
) -> Comparison:
    """The Comparison of arms `a` and `b` from the (estimate, low, high, p, df) of their log ratio; None: too
    few."""
    low = high = p = df = math.nan
    if interval is None:
        verdict = TOO_FEW
    else:
        est, lo, hi, p, df = interval
        change = math.exp(est) - 1
        # an early look of a long sequential schedule may ask for more standard errors than any data can
        # give (bench.sequential): its interval is then unbounded above, and says "cannot tell"
        low, high = math.expm1(min(lo, 700.0)), (math.expm1(hi) if hi < 700 else math.inf)
        verdict = interval_verdict(lo, hi, min_effect, lower_is_better)
    return Comparison(
        metric=metric,
        lower_is_better=lower_is_better,
        ref_medians=tuple(a),
        arm_medians=tuple(b),
        center_ref=geometric_mean(a),
        center_arm=geometric_mean(b),
        change=change,
        low=low,
        high=high,
        p_value=p,
        confidence=confidence,
        min_effect=min_effect,
        verdict=verdict,
        df=df,
    )


@dataclass(frozen=True)
class Contrast:
    estimate: float  # sum of coef * mean log start value
    low: float
    high: float
    df: float


def log_contrast(groups: Sequence[Sequence[float]], coefs: Sequence[float], confidence: float = 0.95) -> Contrast:
    """Welch-Satterthwaite interval for a linear contrast of the groups' mean log values.

    Used by bisect to place a probe against the midpoint of the good and bad references
    (log P - (log G + log B) / 2): the references are shared by every probe and measured more often, so the
    contrast is tighter than two pairwise tests, and its sign says which reference the probe is nearer.
    """
    logs = [[math.log(x) for x in clean(g)] for g in groups]
    if any(len(g) < 2 for g in logs):
        raise ValueError("every group needs at least 2 values")
    est = sum(c * statistics.fmean(g) for c, g in zip(coefs, logs))
    parts = [c * c * statistics.variance(g) / len(g) for c, g in zip(coefs, logs)]
    se2 = sum(parts)
    if se2 == 0:
        return Contrast(est, est, est, math.inf)
    df = se2 * se2 / sum(p * p / (len(g) - 1) for p, g in zip(parts, logs) if p > 0)
    from scipy import stats as sst

    h = float(sst.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(se2)
    return Contrast(est, est - h, est + h, df)


@dataclass(frozen=True)
class Resolution:
    """What an undecided comparison's interval can and cannot resolve at the noise it measured."""

    resolves: float  # the smallest change (as a ratio - 1) whose interval, this wide, would clear the min effect
    target: float  # the change asked about (e.g. 0.05)
    units: int | None  # units per arm an interval would need to name `target` (None: more than `cap`)


def resolution(c: dict, target: float = 0.05, cap: int = 200) -> Resolution | None:
    """How far "cannot tell" is from a verdict: a minimum detectable effect, not a post-hoc power at the observed
    change (which only restates the p value, Hoenig & Heisey 2001). The interval's log half width h over n units
    (the smaller arm's count) gives se = h / t(df); a true change e is named when ln(1+e) - h clears ln(1+d), d the
    minimum effect; units for `target` solve t(df') * se * sqrt(n / n') <= ln(1+target) - ln(1+d), df' = df (n'-1) /
    (n-1): the paired reading's n-1 and the pooled block reading's (n-1)(K-1) grow so, Welch's about so. A record
    without df (older runs) gives None: guessing n-1 under a pooled fit's 9 df halved the count. An estimate at the
    noise measured, which is itself uncertain with few units."""
    low, high, n = c.get("low"), c.get("high"), min(c.get("n_ref") or 0, c.get("n_arm") or 0)
    df = c.get("df")
    if low is None or high is None or n < 2 or not (math.isfinite(low) and math.isfinite(high)) or low <= -1:
        return None
    if df is None or not (math.isfinite(df) and df > 0):
        return None
    from scipy import stats as sst

    conf, d = float(c.get("confidence", 0.95)), float(c.get("min_effect", 0.02))
    h = (math.log1p(high) - math.log1p(low)) / 2
    df = float(df)
    q = lambda k: float(sst.t.ppf(0.5 + conf / 2, df * (k - 1) / (n - 1)))  # noqa: E731
    se = h / q(n)
    gap = math.log1p(target) - math.log1p(d)
    units = next((k for k in range(max(n, 2), cap + 1) if gap > 0 and q(k) * se * math.sqrt(n / k) <= gap), None)
    return Resolution(resolves=math.expm1(math.log1p(d) + h), target=target, units=units)
