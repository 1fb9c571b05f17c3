"""Group-sequential boundaries: how wide a comparison's interval must be at each look so that reading it at
every planned look (after every added start at --look-step 1), and stopping at the first decisive look,
keeps the error rate at alpha over the whole run.

Why not Bonferroni over the looks (the bench until 2026-12-01): the looks at one comparison are nested (the
fourth start's data contain the third's), so their statistics are strongly correlated and splitting alpha
evenly over K looks pays for K independent chances that are not there. At 6 looks Bonferroni asks 2.87 standard
errors at every look, the last one included; the exact boundary for the same overall alpha asks about 2.05 at
the last look. And the more looks a larger budget allows, the stricter every look became, so power was not
monotone in the budget (bench/results/simulate/README.md).

The method (Jennison & Turnbull, "Group Sequential Methods with Applications to Clinical Trials", 2000, ch. 7
and 9; Lan & DeMets, "Discrete sequential boundaries for clinical trials", Biometrika 1983): repeated
confidence intervals from an alpha-spending function. With information fraction t (the fraction of the
maximum information a comparison can reach: 1 at max_starts per arm) a spending function alpha(t) says how much
two-sided error may have been spent by t; the boundary c_k of look k solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})

for the canonical joint law of the Z statistics (Brownian motion in information: corr(Z_i, Z_j) =
sqrt(t_i / t_j)), computed here by the recursive numerical integration of Armitage, McPherson & Rowe (JRSS A
1969), as J&T ch. 19 give it. The intervals estimate +- c_k * se then cover the true change at every look
simultaneously with probability 1 - alpha (J&T ch. 9), so every verdict an interval supports (regression,
improvement, same) is valid whenever the bench stops, which is what an equivalence-style three-way verdict with
optional stopping needs. With few starts the start values' spread is estimated, so c_k is turned into a t
quantile at the look's Welch degrees of freedom by matching its tail probability (J&T ch. 3.8 / 11.2: the
"significance level" approach): the look's confidence is 2 Phi(c_k) - 1.

Spending functions (Lan-DeMets):
  pocock    Pocock type, a log(1 + (e - 1) t): about the same boundary at every look (2.24-2.45 standard
            errors for 3 to 8 starts per arm). The default: the bench's first looks have 2-4 degrees of
            freedom, and a boundary that is strict early (O'Brien-Fleming's 3.2 standard errors at 3 starts, a
            t quantile near 8) makes every comparison pay for more starts. Measured (bench/results/simulate/):
            fewer starts than O'Brien-Fleming in every bisect scenario, and at a true change of exactly the
            minimum effect a false "improvement" / "same" in 2.3% / 1.7% of ab runs against O'Brien-Fleming's
            4.7% / 3.8%: with estimated variances the t conversion below is an approximation, and it errs
            most where the boundary drops steeply over looks with few degrees of freedom.
  obf       O'Brien-Fleming type, the two-sided form of Lan & DeMets (1983), 2 - 2 Phi(z_{1-a/2} / sqrt(t)):
            almost nothing spent early, the last look nearly at the plain level (2.10 at 8 starts); more power
            at the last look, more starts on the way.
  bonferroni the previous rule: alpha / K at each of K looks (kept to reproduce the old records and as the
            "before" of the comparison).

The looks are the balanced start counts initial, initial + step, ..., max_starts per arm (the canonical grid).
A comparison of arms with unequal counts (a probe against references that more probes share) is read at the
grid look whose information is the largest not above its own (information of a contrast sum c_i x_i of arm
means: 1 / sum c_i^2 / n_i): the boundary of a look with less information than the data have, which is the
conservative direction for a decreasing boundary. What the grid does not model (a reference that grows between
two looks of one probe, several probes sharing references) is measured in the simulator, not assumed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

SPENDING = ("obf", "pocock", "bonferroni")
_CMAX = 12.0  # a boundary this far out never decides
_GRID = 801  # points of the integration grid per look: boundaries to about 1e-4 (tests/bench/test_sequential.py)


def spent(t: float, alpha: float, spending: str) -> float:
    """Two-sided alpha spent by information fraction t (Lan-DeMets spending functions)."""
    from scipy.stats import norm

    t = min(max(t, 0.0), 1.0)
    if t <= 0:
        return 0.0
    if spending == "obf":
        return float(2 - 2 * norm.cdf(norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    raise ValueError(f"unknown spending function {spending!r} (one of {', '.join(SPENDING)})")


def _crossing(c: float, t: float, prev_t: float, grid, dens) -> float:
    """P(continue through the earlier looks and |Z| >= c at information t), given the continuation
    sub-density `dens` of W(prev_t) on `grid` (None before the first look)."""
    import numpy as np
    from scipy.stats import norm

    if grid is None:
        return float(2 * norm.sf(c))
    b, sd = c * math.sqrt(t), math.sqrt(t - prev_t)
    tail = norm.sf((b - grid) / sd) + norm.cdf((-b - grid) / sd)
    return float(np.trapezoid(dens * tail, grid))


@functools.lru_cache(maxsize=256)
def boundaries(fractions: tuple[float, ...], alpha: float, spending: str) -> tuple[float, ...]:
    """Two-sided critical values c_1..c_K (in standard errors) for looks at these increasing information
    fractions, spending alpha by `spending` ("bonferroni": z_{1 - alpha / 2K} at each)."""
    import numpy as np
    from scipy.optimize import brentq
    from scipy.stats import norm

    if not fractions or any(b <= a for a, b in itertools.pairwise(fractions)) or fractions[0] <= 0:
        raise ValueError(f"information fractions must increase from above 0: {fractions}")
    if spending == "bonferroni":
        return tuple(float(norm.ppf(1 - alpha / 2 / len(fractions))) for _ in fractions)
    out: list[float] = []
    # the sub-density of the score W(t) = Z sqrt(t) on the continuation region of the looks so far
    grid = dens = None
    prev_t, prev_spent = 0.0, 0.0
    for t in fractions:
        inc = spent(t, alpha, spending) - prev_spent
        args = (t, prev_t, grid, dens)
        if inc <= 1e-12 or _crossing(_CMAX, *args) >= inc:
            c = _CMAX  # nothing (left) to spend at this look: it cannot decide
        else:
            c = float(brentq(lambda c, a=args, inc=inc: _crossing(c, *a) - inc, 0.01, _CMAX, xtol=1e-8))
        out.append(c)
        b = c * math.sqrt(t)
        new_grid = np.linspace(-b, b, _GRID)
        if grid is None or dens is None:
            new_dens = norm.pdf(new_grid / math.sqrt(t)) / math.sqrt(t)
        else:
            sd = math.sqrt(t - prev_t)
            kern = norm.pdf((new_grid[:, None] - grid[None, :]) / sd) / sd
            new_dens = np.trapezoid(kern * dens[None, :], grid, axis=1)
        grid, dens = new_grid, new_dens
        prev_spent += inc
        prev_t = t
    return tuple(out)


def grid_counts(initial: int, max_starts: int, step: int) -> tuple[int, ...]:
    """The balanced per-arm start counts at which comparisons are planned to be read."""
    if max_starts <= initial:
        return (initial,)
    out = list(range(initial, max_starts, max(1, step)))
    return (*out, max_starts)


def information(counts: Sequence[int], coefs: Sequence[float]) -> float:
    """Information (1 / variance, in units of one start's variance) of sum c_i * mean_i."""
    if any(n <= 0 for n in counts):
        return 0.0
    return 1.0 / sum(c * c / n for n, c in zip(counts, coefs))


def look_confidence(
    counts: Sequence[int],
    coefs: Sequence[float],
    *,
    initial: int,
    max_starts: int,
    step: int,
    confidence: float,
    spending: str,
) -> float:
    """The confidence of the interval to read now, for a contrast of arms with these start counts."""
    from scipy.stats import norm

    grid = grid_counts(initial, max_starts, step)
    full = information([max_starts] * len(coefs), coefs)
    fracs = tuple(information([n] * len(coefs), coefs) / full for n in grid)
    now = information(counts, coefs) / full
    k = sum(1 for f in fracs if f <= now + 1e-9)
    if k == 0:
        k = 1  # fewer starts than the first look: no interval is read (MIN_STARTS), any boundary will do
    c = boundaries(fracs, 1 - confidence, spending)[k - 1]
    return float(1 - 2 * norm.sf(c))
