"""Start values adjusted for the host's speed (bench.hostprobe): an analysis of covariance over starts.

A start contributes its start value y and the probe's median work-unit time p over the same repetitions. If
the host's speed drifts (the H200 VM of the records switched between two speeds in stretches of a session), both
move together, and the model

    log y = b0 + b_arm * [arm] + b_p * (log p - mean log p) + e

takes the host's share out of the residual: b_arm's t interval (OLS, n - 3 degrees of freedom) is the change
at a fixed host speed, read against the minimum effect by the same rules as the unadjusted comparison
(bench.stats.interval_verdict). The covariate is admissible only if no arm moves it: a patch that slows the
probe (more memory traffic, a busier machine) would have part of its own effect subtracted. Not finding a
difference between the arms' probe values does not show that (3 starts an arm have no power to find one), so
balance is an equivalence claim (`equivalence`): the adjustment is made only when |slope| x the farther end of
the interval of the arms' covariate difference (95 %, whatever the look) is below half the minimum effect;
otherwise the comparison is "cannot tell", with the reason in Comparison.note, not the unadjusted verdict:
either the arm moves the probe, or the host ran at another speed during one arm's starts than during the
other's (then the arm and the host are confounded, and the unadjusted interval names a change that is the
host's). A host that switches speed between starts therefore makes the adjustment unavailable on a few starts:
the price of never adjusting an arm's own effect away (tests/bench/test_covariate_equivalence.py).
The maths is a 3-column least-squares fit (numpy) with scipy's t quantiles: the same numbers as statsmodels'
OLS, which the project does not install.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from . import hoststate
from .stats import (
    MIN_STARTS,
    UNDECIDED,
    Comparison,
    clean,
    compare_starts,
    interval_verdict,
    start_value,
)
from .store import Unit

Pairs = Sequence[tuple[float | None, float | None]]  # (start value, start probe), one per start


def start_pairs(units: Sequence[Unit], metric: str) -> list[tuple[float, float | None]]:
    """(start value, the host probe's median over the same repetitions) per start that has the metric."""
    out = []
    for u in units:
        m = u.value(metric)
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
    """The report's diagnostic line (a difference test); the adjustment itself is gated by `equivalence`."""
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


# The arms' covariate difference is read at this confidence whatever the look: a stricter look must not make
# the gate more lenient (a difference test's would: its "no difference" grows easier as alpha shrinks).
BALANCE_CONFIDENCE = 0.95


def equivalence(ref: Sequence[float], arm: Sequence[float], slope: float, min_effect: float) -> str:
    """Empty when the adjustment may be made, else why not. `ref` / `arm`: the starts' mean (transformed)
    covariate. Balance is an equivalence claim, not the absence of evidence: the adjustment moves the arm's
    estimate by slope x (the arms' covariate difference), and if the arm itself moves the covariate that
    share is the arm's own effect taken away. So it is made only when |slope| x the farther end of the
    difference's Welch interval (BALANCE_CONFIDENCE) is below min_effect / 2: then no more than half the
    minimum effect can be the arm's own, moved. With 3 starts an arm that interval is wide and the gate closes:
    more starts, or a covariate the arm cannot move, open it."""
    from scipy import stats as sst

    a, b = list(ref), list(arm)
    if len(a) < 2 or len(b) < 2:
        return "too few starts to bound the arms' covariate difference"
    d = statistics.fmean(b) - statistics.fmean(a)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        half = 0.0
    else:
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        half = float(sst.t.ppf(0.5 + BALANCE_CONFIDENCE / 2, df)) * math.sqrt(va + vb)
    bound = abs(slope) * (abs(d) + half)
    if bound < min_effect / 2:
        return ""
    return (
        f"the arms' covariate difference {d:+.3g} [{d - half:+.3g}, {d + half:+.3g}] ({BALANCE_CONFIDENCE:.0%}) "
        f"x slope {slope:.2f} could move the change by {bound * 100:.1f} %, not below half the minimum effect "
        f"({min_effect * 50:.1f} %): the arm may move the covariate, so adjusting could remove its own effect"
    )


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


def t_interval(est: float, se: float, df: int, confidence: float) -> tuple[float, float, float]:
    """(low, high, two-sided p) of a coefficient's t interval; a zero standard error is exact."""
    from scipy import stats as sst

    if se == 0:
        return est, est, 1.0 if est == 0 else 0.0
    h = float(sst.t.ppf(0.5 + confidence / 2, df)) * se
    return est - h, est + h, float(2 * sst.t.sf(abs(est) / se, df))


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
    """The arm's change at a fixed host speed, as a bench.stats.Comparison; "cannot tell" unless the arms' probe
    values are shown close enough (`equivalence`; the module's docstring says why); None when the adjustment cannot be made (a start without
    a probe value, too few starts): the caller then uses the unadjusted comparison."""
    a, b = _complete(ref), _complete(arm)
    if len(a) != len(ref) or len(b) != len(arm) or len(a) < min_starts or len(b) < min_starts:
        return None
    ly = [math.log(y) for y, _ in a + b]
    lp = [math.log(p) for _, p in a + b]
    mp = statistics.fmean(lp)
    fit = ols(ly, [[0.0] * len(a) + [1.0] * len(b), [x - mp for x in lp]])
    est, se = fit.coef[1], fit.se[1]
    if fit.df < 1 or math.isnan(se):
        return None
    why = equivalence(lp[: len(a)], lp[len(a) :], fit.coef[2], min_effect)
    how = _Reading(metric, lower_is_better, confidence, min_effect, min_starts)
    return _at_fixed_covariate([y for y, _ in a], [y for y, _ in b], est, se, fit.df, why, how)


@dataclass(frozen=True)
class _Reading:
    """How a comparison is read: bench.stats.compare_starts' keyword arguments (by name), the same for its
    adjusted readings."""

    metric: str
    lower_is_better: bool
    confidence: float
    min_effect: float
    min_starts: int


def _at_fixed_covariate(
    ref_medians: list[float], arm_medians: list[float], est: float, se: float, df: int, why: str, how: _Reading
) -> Comparison:
    """The start values' unadjusted comparison with the model's reading in its place: "cannot tell" with `why`
    where the arms' covariate is not shown close enough (`equivalence`), else the change exp(est) - 1 (est the
    arm's log coefficient, `se` its standard error on `df` degrees of freedom) and its t interval."""
    raw = compare_starts(ref_medians, arm_medians, **asdict(how))
    if why:
        return replace(raw, verdict=UNDECIDED, note=why)
    lo, hi, p_value = t_interval(est, se, df, how.confidence)
    return replace(
        raw,
        change=math.exp(est) - 1,
        low=math.expm1(min(lo, 700.0)),
        high=math.expm1(hi) if hi < 700 else math.inf,  # a sequential look may ask more than data give
        p_value=p_value,
        verdict=interval_verdict(lo, hi, how.min_effect, how.lower_is_better),
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


# -- per repetition: a random intercept per start -------------------------------------------------------------
#
# The per-start fit above has one point per start: with 3 starts per arm it estimates the host's slope from 6
# points and has 3 degrees of freedom left. The repetitions carry more: inside one start the host changes speed
# (session 5: the probe ranged 656-1243 us over the session, and within starts too) while the patch set and the
# server's state do not, so the within-start relation of the step to the covariate is the host's alone. The mixed
# model
#
#     log y_sr = b0 + b_arm [arm] + b_x (x_sr - mean x) + u_s + e_sr,   u_s ~ N(0, s_u^2), e ~ N(0, s_e^2)
#
# (s a start, r a repetition) estimates b_x mostly from within starts and adjusts each start's mean with it; the
# arm is a between-start effect, so its interval rests on the starts (t with n_starts - 3 degrees of freedom, as
# the per-start fit: the model gains precision from a better slope, not from counting repetitions as starts).
# Fitted by REML, profiled over the ratio s_u^2 / s_e^2 (numpy GLS and one bounded scipy search);
# tests/bench/test_covariate_mixed.py checks it against statsmodels' MixedLM, which the GPU host does not have.

Start = tuple[int, Sequence[tuple[float, float]]]  # (arm index, [(value, covariate) per repetition])


@dataclass(frozen=True)
class MixedFit:
    coef: tuple[float, ...]  # intercept, arm dummies..., covariate slope
    se: tuple[float, ...]
    sigma_start: float  # s_u: the starts' spread the covariate leaves (log scale ~ CV)
    sigma_rep: float  # s_e
    n_starts: int
    n_reps: int


def _design(starts: Sequence[Start], transform) -> tuple[list, list, float] | None:
    import numpy as np

    arms = sorted({a for a, _ in starts})
    rows = [(a, math.log(y), transform(x)) for a, reps in starts for y, x in reps]
    if not rows:
        return None
    mx = statistics.fmean(x for _, _, x in rows)
    blocks = []
    for a, reps in starts:
        ys = np.array([math.log(y) for y, _ in reps])
        xs = np.array(
            [[1.0, *[1.0 if a == k else 0.0 for k in arms[1:]], transform(x) - mx] for _, x in reps], dtype=float
        )
        blocks.append((ys, xs))
    return blocks, arms, mx


def fit_mixed(starts: Sequence[Start], transform=math.log) -> MixedFit | None:
    """REML fit of the random-intercept model (module comment); None when it cannot be fitted (fewer starts than
    parameters + 1, a start with no repetition, a covariate without variation)."""
    import numpy as np
    from scipy import optimize

    starts = [(a, [(y, x) for y, x in reps]) for a, reps in starts if reps]
    d = _design(starts, transform)
    if d is None:
        return None
    blocks, arms, _ = d
    p = blocks[0][1].shape[1]
    n = sum(len(y) for y, _ in blocks)
    if len(blocks) < p + 1 or n <= p or np.ptp(np.concatenate([x[:, -1] for _, x in blocks])) == 0:
        return None

    def gls(lam: float):
        xtvx = np.zeros((p, p))
        xtvy = np.zeros(p)
        logdet_v = 0.0
        for y, x in blocks:
            k = len(y)
            w = lam / (1 + k * lam)  # V^-1 = I - w J for V = I + lam J
            sx, sy = x.sum(axis=0), y.sum()
            xtvx += x.T @ x - w * np.outer(sx, sx)
            xtvy += x.T @ y - w * sx * sy
            logdet_v += math.log1p(k * lam)
        beta = np.linalg.solve(xtvx, xtvy)
        rss = 0.0
        for y, x in blocks:
            r = y - x @ beta
            rss += float(r @ r) - lam / (1 + len(y) * lam) * float(r.sum()) ** 2
        s2 = rss / (n - p)
        sign, logdet_x = np.linalg.slogdet(xtvx)
        nll = 0.5 * ((n - p) * math.log(max(s2, 1e-300)) + logdet_v + logdet_x)
        return nll, beta, s2, xtvx

    res = optimize.minimize_scalar(lambda t: gls(math.exp(t))[0], bounds=(-18.0, 12.0), method="bounded")
    lam = math.exp(res.x)
    if gls(0.0)[0] <= gls(lam)[0]:  # the boundary: no start-to-start spread beyond the covariate's
        lam = 0.0
    _, beta, s2, xtvx = gls(lam)
    cov = s2 * np.linalg.inv(xtvx)
    return MixedFit(
        tuple(float(b) for b in beta),
        tuple(float(math.sqrt(max(v, 0.0))) for v in np.diag(cov)),
        math.sqrt(lam * s2),
        math.sqrt(s2),
        len(blocks),
        n,
    )


def rep_starts(units: Sequence[Unit], metric: str, covariate: str) -> list[list[tuple[float, float]]] | None:
    """Per start, its measured repetitions' (metric, covariate) pairs; None when a start lacks the covariate
    on any repetition that has the metric (the model then cannot be fitted on that arm)."""
    out = []
    for u in units:
        pairs = []
        for r in u.reps:
            y, x = r.get(metric), r.get(covariate)
            if y is None or (isinstance(y, float) and math.isnan(y)) or not y > 0:
                continue
            if x is None or (isinstance(x, float) and math.isnan(x)):
                return None
            pairs.append((float(y), float(x)))
        if pairs:
            out.append(pairs)
    return out


def transform_of(covariate: str):
    """The probe's work-unit time enters in logs (a host x% slower: x% on both); a percentage counter as is."""
    return math.log if covariate == PROBE else (lambda x: x / 100)


PROBE = "host_probe_us"  # bench.store.PROBE_METRIC


def compare_mixed(
    ref: Sequence[Sequence[tuple[float, float]]],
    arm: Sequence[Sequence[tuple[float, float]]],
    *,
    covariate: str = PROBE,
    metric: str = "step_ms_b1",
    lower_is_better: bool = True,
    confidence: float = 0.95,
    min_effect: float = 0.02,
    min_starts: int = MIN_STARTS,
) -> Comparison | None:
    """The arm's change at a fixed covariate from the per-repetition model, as a bench.stats.Comparison; "cannot
    tell" unless the arms' start means of the covariate are shown close enough (`equivalence`); None when the model
    cannot be fitted (the caller falls back to the per-start fit, then to the unadjusted comparison)."""

    if len(ref) < min_starts or len(arm) < min_starts:
        return None
    tf = transform_of(covariate)
    fit = fit_mixed([(0, s) for s in ref] + [(1, s) for s in arm], tf)
    if fit is None:
        return None
    df = fit.n_starts - 3
    est, se = fit.coef[1], fit.se[1]
    if df < 1 or math.isnan(se):
        return None
    means = [[statistics.fmean(tf(x) for _, x in s) for s in g if s] for g in (ref, arm)]
    why = equivalence(means[0], means[1], fit.coef[-1], min_effect)
    values = [[v for s in g if (v := start_value([y for y, _ in s])) is not None] for g in (ref, arm)]
    how = _Reading(metric, lower_is_better, confidence, min_effect, min_starts)
    return _at_fixed_covariate(values[0], values[1], est, se, df, why, how)


def spread_mixed(groups: Sequence[Sequence[Sequence[tuple[float, float]]]], covariate: str = PROBE) -> Spread | None:
    """Spread (above) from the per-repetition model: each start's log median moved to the mean covariate with
    the model's slope, its sd around the arms' means; the raw figure is the per-start fit's, so the two compare."""
    tf = transform_of(covariate)
    starts = [(i, s) for i, g in enumerate(groups) for s in g if s]
    n_groups = len({i for i, _ in starts})
    if len(starts) < n_groups + 2:
        return None
    fit = fit_mixed(starts, tf)
    if fit is None:
        return None
    slope = fit.coef[-1]
    mx = statistics.fmean(tf(x) for _, s in starts for _, x in s)
    by: dict[int, list[tuple[float, float]]] = {}
    for i, s in starts:
        ly = math.log(statistics.median(y for y, _ in s))
        lx = statistics.fmean(tf(x) for _, x in s)
        by.setdefault(i, []).append((ly, ly - slope * (lx - mx)))
    df = len(starts) - n_groups

    def sd(k: int) -> float:
        ss = sum((v[k] - statistics.fmean(w[k] for w in g)) ** 2 for g in by.values() for v in g)
        return math.sqrt(ss / df)

    return Spread(len(starts), sd(0), sd(1), slope, fit.se[-1])


# --adjust X: the covariate it reads; the probe's (host) falls back to the per-start fit where repetitions lack it.
# (--adjust state fits no covariate: bench.hoststate reads the probe's states)
COVARIATES = {"host": PROBE, "steal": "host_steal_pct", "wait": "sched_wait_pct"}


def compare_host(
    ref: Sequence[Unit],
    arm: Sequence[Unit],
    adjust: str = "host",
    *,
    metric: str = "step_ms_b1",
    lower_is_better: bool = True,
    confidence: float = 0.95,
    min_effect: float = 0.02,
) -> Comparison | None:
    """The comparison `--adjust` reads: the per-repetition model where every start has the covariate on each of
    at least 2 repetitions (the within-start relation is what it adds: it is better justified whenever it can be
    fitted, tests/bench/test_covariate_mixed.py), else, for the probe, the per-start fit; None: unadjusted.
    `state` reads no slope: the start values over the host's fast-state repetitions (bench.hoststate)."""
    if adjust == "state":
        return hoststate.compare_state(
            ref, arm, metric=metric, lower_is_better=lower_is_better, confidence=confidence, min_effect=min_effect
        )
    cov = COVARIATES[adjust]
    r, a = rep_starts(ref, metric, cov), rep_starts(arm, metric, cov)
    if r is not None and a is not None and all(len(s) >= 2 for s in r + a):
        c = compare_mixed(
            r,
            a,
            covariate=cov,
            metric=metric,
            lower_is_better=lower_is_better,
            confidence=confidence,
            min_effect=min_effect,
        )
        if c is not None:
            return c
    if cov != PROBE:
        return None
    return compare_adjusted(
        start_pairs(ref, metric),
        start_pairs(arm, metric),
        metric=metric,
        lower_is_better=lower_is_better,
        confidence=confidence,
        min_effect=min_effect,
    )


def model_of(ref: Sequence[Unit], arm: Sequence[Unit], adjust: str, metric: str) -> str:
    """Which fit compare_host uses for these starts, in words (the report's line)."""
    if adjust == "state":
        return hoststate.describe(ref, arm, metric)
    cov = COVARIATES[adjust]
    r, a = rep_starts(ref, metric, cov), rep_starts(arm, metric, cov)
    if r is not None and a is not None and all(len(s) >= 2 for s in r + a):
        starts = [(0, s) for s in r] + [(1, s) for s in a]
        if min(len(r), len(a)) >= MIN_STARTS and len(starts) > 3 and fit_mixed(starts, transform_of(cov)):
            return "per repetition: mixed model, random intercept per start (REML)"
    probed = all((u.host_probe.get("start") or {}).get("py_us") for u in [*ref, *arm])
    if cov == PROBE and probed and min(len(ref), len(arm)) >= MIN_STARTS:
        return "per start: OLS on start values"
    return (
        f"**not adjusted**: `{cov}` is missing on some repetition, does not vary, or the starts are too few for "
        "the model (the unadjusted comparison)"
    )
