"""Start values adjusted for the host's speed (bench.hostprobe): an analysis of covariance over starts.

A start contributes its start median y and the probe's median work-unit time p over the same repetitions. If
the host's speed drifts (the H200 VM of the records switched between two speeds in stretches of a session), both
move together, and the model

    log y = b0 + b_arm * [arm] + b_p * (log p - mean log p) + e

takes the host's share out of the residual: b_arm's t interval (OLS, n - 3 degrees of freedom) is the change
at a fixed host speed, read against the minimum effect by the same rules as the unadjusted comparison
(bench.stats.interval_verdict). The covariate is admissible only if no arm moves it: a patch that slows the
probe (more memory traffic, a busier machine) would have part of its own effect subtracted. So the arms'
probe values are compared first (Welch's t on the logs); when they differ at the run's confidence the
comparison is "cannot tell", not the unadjusted verdict: either the arm moves the probe, or the host ran at
another speed during one arm's starts than during the other's (then the arm and the host are confounded, and
the unadjusted interval, which is narrow when each arm's starts share one regime, names a change that is the
host's: 5 % wrong verdicts of 200 simulated null runs, tests/bench/test_hostprobe.py). More starts, interleaved,
may break the confound; the adaptive plan asks for them because the comparison is undecided. The maths is a 3-column least-squares fit (numpy) with scipy's t quantiles: the same
numbers as statsmodels' OLS, which the project does not install.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .stats import (
    MIN_STARTS,
    UNDECIDED,
    Comparison,
    clean,
    compare_starts,
    geometric_mean,
    interval_verdict,
    start_median,
)
from .store import Unit

Pairs = Sequence[tuple[float | None, float | None]]  # (start value, start probe), one per start


def start_pairs(units: Sequence[Unit], metric: str) -> list[tuple[float, float | None]]:
    """(start median, the host probe's median over the same repetitions) per start that has the metric."""
    out = []
    for u in units:
        m = start_median([r.get(metric) for r in u.reps])
        if m is not None:
            out.append((m, (u.host_probe.get("start") or {}).get("py_us")))
    return out


def _complete(pairs: Pairs) -> list[tuple[float, float]]:
    out = []
    for y, p in pairs:
        if y is None or p is None or not (y > 0 and p > 0) or math.isnan(y) or math.isnan(p):
            continue
        out.append((float(y), float(p)))
    return out


@dataclass(frozen=True)
class Balance:
    """Do the arms' probe values differ? (if they do, the probe is not a covariate of the host alone)"""

    change: float  # geometric mean probe of the arm / of the reference - 1
    p_value: float  # Welch's t on the logs
    admissible: bool


def balance(ref_probe: Sequence[float], arm_probe: Sequence[float], confidence: float) -> Balance:
    from scipy import stats as sst

    a, b = [math.log(x) for x in clean(ref_probe)], [math.log(x) for x in clean(arm_probe)]
    if len(a) < 2 or len(b) < 2:
        return Balance(math.nan, math.nan, False)
    change = math.exp(statistics.fmean(b) - statistics.fmean(a)) - 1
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        p = 1.0 if change == 0 else 0.0
    else:
        p = float(sst.ttest_ind(b, a, equal_var=False).pvalue)
    return Balance(change, p, p >= 1 - confidence)


@dataclass(frozen=True)
class Fit:
    coef: tuple[float, ...]
    se: tuple[float, ...]
    df: int
    resid_sd: float


def ols(y: Sequence[float], columns: Sequence[Sequence[float]]) -> Fit:
    """Least squares of y on an intercept and `columns`; coefficient standard errors from the residual variance."""
    import numpy as np

    x = np.column_stack([np.ones(len(y)), *[np.asarray(c, float) for c in columns]])
    yy = np.asarray(y, float)
    coef, *_ = np.linalg.lstsq(x, yy, rcond=None)
    df = len(yy) - x.shape[1]
    resid = yy - x @ coef
    s2 = float(resid @ resid) / df if df > 0 else math.nan
    cov = s2 * np.linalg.pinv(x.T @ x)
    return Fit(
        tuple(float(c) for c in coef), tuple(float(math.sqrt(max(v, 0.0))) for v in np.diag(cov)), df, math.sqrt(s2)
    )


def compare_adjusted(
    ref: Pairs,
    arm: Pairs,
    *,
    metric: str = "step_ms_b1",
    lower_is_better: bool = True,
    confidence: float = 0.95,
    min_effect: float = 0.02,
    min_starts: int = MIN_STARTS,
) -> Comparison | None:
    """The arm's change at a fixed host speed, as a bench.stats.Comparison; "cannot tell" when the probe differs
    between the arms (the module's docstring says why); None when the adjustment cannot be made (a start without
    a probe value, too few starts): the caller then uses the unadjusted comparison."""
    a, b = _complete(ref), _complete(arm)
    if len(a) != len(ref) or len(b) != len(arm) or len(a) < min_starts or len(b) < min_starts:
        return None
    if not balance([p for _, p in a], [p for _, p in b], confidence).admissible:
        raw = compare_starts(
            [y for y, _ in a],
            [y for y, _ in b],
            metric=metric,
            lower_is_better=lower_is_better,
            confidence=confidence,
            min_effect=min_effect,
            min_starts=min_starts,
        )
        return replace(raw, verdict=UNDECIDED)
    from scipy import stats as sst

    ly = [math.log(y) for y, _ in a + b]
    lp = [math.log(p) for _, p in a + b]
    mp = statistics.fmean(lp)
    fit = ols(ly, [[0.0] * len(a) + [1.0] * len(b), [x - mp for x in lp]])
    est, se = fit.coef[1], fit.se[1]
    if fit.df < 1 or math.isnan(se):
        return None
    if se == 0:
        lo = hi = est
        p_value = 1.0 if est == 0 else 0.0
    else:
        h = float(sst.t.ppf(0.5 + confidence / 2, fit.df)) * se
        lo, hi = est - h, est + h
        p_value = float(2 * sst.t.sf(abs(est) / se, fit.df))
    return Comparison(
        metric=metric,
        lower_is_better=lower_is_better,
        ref_medians=tuple(y for y, _ in a),
        arm_medians=tuple(y for y, _ in b),
        center_ref=geometric_mean([y for y, _ in a]),
        center_arm=geometric_mean([y for y, _ in b]),
        change=math.exp(est) - 1,
        low=math.expm1(min(lo, 700.0)),
        high=math.expm1(hi) if hi < 700 else math.inf,  # a sequential look may ask more than data give
        p_value=p_value,
        confidence=confidence,
        min_effect=min_effect,
        verdict=interval_verdict(lo, hi, min_effect, lower_is_better),
    )


@dataclass(frozen=True)
class Spread:
    """Start-to-start variation around the arms' means, before and after taking the probe out."""

    n: int
    cv_raw: float  # residual sd of log start values on the arms alone (~ CV)
    cv_adjusted: float  # ... on the arms and log probe
    probe_slope: float  # b_p: d log y / d log p
    probe_slope_se: float


def spread(groups: Sequence[Pairs]) -> Spread | None:
    """Pooled over arms (one dummy per arm after the first): how much of the start-to-start spread the probe explains."""
    gs = [_complete(g) for g in groups]
    gs = [g for g in gs if g]
    n = sum(len(g) for g in gs)
    if n < len(gs) + 3:
        return None
    ly = [math.log(y) for g in gs for y, _ in g]
    lp = [math.log(p) for g in gs for _, p in g]
    mp = statistics.fmean(lp)
    dummies = [[1.0 if j == i else 0.0 for j, g in enumerate(gs) for _ in g] for i in range(1, len(gs))]
    raw = ols(ly, dummies)
    adj = ols(ly, [*dummies, [x - mp for x in lp]])
    return Spread(n, raw.resid_sd, adj.resid_sd, adj.coef[-1], adj.se[-1])
