"""Group-sequential boundaries: how wide a comparison's interval must be at each look so that reading it at
every planned look, and stopping at the first decisive one, keeps the error rate at alpha over the whole run.

Bonferroni over the looks overpays: the looks are nested, so their statistics are strongly correlated (at 6
looks it asks 2.87 standard errors at every look, the exact boundary 2.05 at the last). The method: repeated
confidence intervals from a Lan-DeMets alpha-spending function (Jennison & Turnbull 2000, ch. 7, 9 and 19;
Lan & DeMets 1983). With information fraction t (1 at max_starts per arm), look k's boundary c_k solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = alpha(t_k) - alpha(t_{k-1})

for Brownian motion in information (Armitage, McPherson & Rowe 1969, by numerical integration). With few
starts c_k becomes a t quantile at the look's Welch degrees of freedom by matching its tail probability.

Spending: pocock (the default: about the same boundary at every look; fewer starts than O'Brien-Fleming in
every simulated bisect), obf (strict early, near the plain level at the last look), bonferroni (alpha / K per
look: old records). Looks are the balanced counts initial, initial + step, ..., max_starts per arm; unequal
counts are read at the grid look with the largest information not above their own (the conservative side).
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
