"""Statistics used to call a performance difference: median + bootstrap CI, Mann-Whitney U + minimum effect, CV.

The rule follows the tools people trust (asv, Google Benchmark compare.py, Pinpoint): a change is called only
when the rank test is significant AND the relative change of the medians is at least a minimum effect. A
significant but tiny shift is reported as "within min effect"; a large but non-significant one as
"inconclusive" (add repetitions), never as a change.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Sequence

# Verdicts of compare(). Lower-is-better metrics (step time) map "higher" to a regression; the caller
# chooses the wording through `lower_is_better`.
SAME = "same"
WITHIN_MIN_EFFECT = "within-min-effect"
INCONCLUSIVE = "inconclusive"
REGRESSION = "regression"
IMPROVEMENT = "improvement"


@dataclass(frozen=True)
class MedianCI:
    n: int
    median: float
    low: float  # NaN when n < 3: a bootstrap of 1-2 values says nothing
    high: float
    confidence: float

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    n_a: int
    n_b: int
    median_a: float
    median_b: float
    rel_change: float  # (median_b - median_a) / median_a
    p_value: float  # two-sided Mann-Whitney U; NaN if either side has < 2 samples
    alpha: float
    min_effect: float
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def _clean(samples: Sequence[float]) -> list[float]:
    out = [float(x) for x in samples if x is not None and not math.isnan(float(x))]
    return out


def median_ci(samples: Sequence[float], confidence: float = 0.95, n_resamples: int = 9999,
              seed: int = 0) -> MedianCI:
    """Median with a percentile bootstrap CI (scipy.stats.bootstrap).

    Percentile rather than BCa: BCa's jackknife acceleration is degenerate for the median of small samples
    with ties (it returns NaN), and 9-30 values is our usual n.
    """
    xs = _clean(samples)
    if not xs:
        return MedianCI(0, math.nan, math.nan, math.nan, confidence)
    med = statistics.median(xs)
    if len(xs) < 3:
        return MedianCI(len(xs), med, math.nan, math.nan, confidence)
    if min(xs) == max(xs):
        return MedianCI(len(xs), med, med, med, confidence)  # scipy warns on a degenerate sample
    import numpy as np
    from scipy import stats as sst

    res = sst.bootstrap((np.asarray(xs),), np.median, confidence_level=confidence,
                        n_resamples=n_resamples, method="percentile",
                        random_state=np.random.default_rng(seed), vectorized=True)
    return MedianCI(len(xs), med, float(res.confidence_interval.low),
                    float(res.confidence_interval.high), confidence)


def cv(samples: Sequence[float]) -> float:
    """Coefficient of variation (sample stdev / mean); NaN for fewer than 2 values."""
    xs = _clean(samples)
    if len(xs) < 2:
        return math.nan
    mean = statistics.fmean(xs)
    return statistics.stdev(xs) / mean if mean else math.nan


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    xs, ys = _clean(a), _clean(b)
    if len(xs) < 2 or len(ys) < 2:
        return math.nan
    if len(set(xs) | set(ys)) == 1:
        return 1.0  # identical constant samples: scipy warns and returns NaN; there is no difference
    from scipy import stats as sst

    # method="auto": exact distribution for small samples without ties, asymptotic otherwise.
    return float(sst.mannwhitneyu(xs, ys, alternative="two-sided", method="auto").pvalue)


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.01, min_effect: float = 0.02,
            lower_is_better: bool = True) -> Comparison:
    """Compare sample b against reference a.

    verdict: REGRESSION / IMPROVEMENT when p < alpha and |rel_change| >= min_effect; SAME when neither;
    WITHIN_MIN_EFFECT when significant but smaller than min_effect; INCONCLUSIVE when the effect is large but
    p >= alpha (or a side has too few samples to test).
    """
    xs, ys = _clean(a), _clean(b)
    ma = statistics.median(xs) if xs else math.nan
    mb = statistics.median(ys) if ys else math.nan
    rel = (mb - ma) / ma if xs and ys and ma else math.nan
    p = mann_whitney_p(xs, ys)
    if math.isnan(p) or math.isnan(rel):
        verdict = INCONCLUSIVE
    else:
        significant = p < alpha
        big = abs(rel) >= min_effect
        if significant and big:
            worse = rel > 0 if lower_is_better else rel < 0
            verdict = REGRESSION if worse else IMPROVEMENT
        elif significant:
            verdict = WITHIN_MIN_EFFECT
        elif big:
            verdict = INCONCLUSIVE
        else:
            verdict = SAME
    return Comparison(len(xs), len(ys), ma, mb, rel, p, alpha, min_effect, verdict)
