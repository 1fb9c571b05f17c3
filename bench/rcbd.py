"""Blocks read as a randomized complete block design: one residual variance for all the arms of the blocks.

A block (bench.blocks) measures several arms under one machine state, so it is a block in the textbook sense
(Montgomery, Design and Analysis of Experiments, ch. 4; Cochran & Cox, Experimental Designs, ch. 4): the model
is y[a, b] = mu[a] + beta[b] + e[a, b], arm effects mu, block effects beta, and e the server start's own
deviation (its layout, its placement: what the start as replication unit is about). Read pair by pair (bench.duet's
paired t), a comparison of two arms over n blocks has n - 1 degrees of freedom: 2 at the first look of 3
blocks, whose t quantile at the first look's confidence is 6.2. But every arm of a block is one more start
of the same kind, so the variance of e can be estimated from all of them: (n - 1)(K - 1) degrees of freedom for
K arms in n complete blocks (10 for ablate's six arms at 3 blocks, quantile 2.9). That is the analysis of
variance of a block design: least squares with arm and block effects (incomplete blocks too, the adaptive rounds
holding only the undecided arms), the arm contrast's standard error from the pooled residual variance.

y[a, b]: the block's rounds (bench.blocks.serving_order: every arm once per round) are centred first, each arm's
log value in round j minus the mean log value of the block's arms in that round (the state the round was
served in, which moves on the scale of seconds: bench/results/2026-12-03-h200-noise), then y is the median over
the rounds, as bench.duet.unit_value's "pairs" is for two arms.

The pooled variance assumes the arms' start noise is alike. A patch that makes its own starts noisier would borrow
the quiet arms' variance and look surer than it is, so the arms' residuals are tested for equal spread first
(Brown-Forsythe, scipy.stats.levene with the median) and, when that is rejected at HETERO_P, each comparison
is read by its own paired t instead (`note` says so).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

HETERO_P = 0.05


def block_values(block: Mapping[str, Sequence[float | None]]) -> dict[str, float]:
    """{arm key: y} of one block from each arm's measured repetitions in serving order (round j = index j)."""
    keys = list(block)
    n = max((len(v) for v in block.values()), default=0)
    per: dict[str, list[float]] = {k: [] for k in keys}
    for j in range(n):
        logs = {}
        for k in keys:
            v = block[k]
            x = v[j] if j < len(v) else None
            if x is not None and x > 0 and not math.isnan(x):
                logs[k] = math.log(x)
        if len(logs) < 2:
            continue
        centre = statistics.fmean(logs.values())
        for k, x in logs.items():
            per[k].append(x - centre)
    return {k: statistics.median(v) for k, v in per.items() if v}


@dataclass(frozen=True)
class Fit:
    arms: tuple[str, ...]
    effects: tuple[float, ...]  # least-squares arm effects (only their differences are estimable)
    cov: tuple[tuple[float, ...], ...]  # their covariance / sigma2 ((X'X)^+ restricted to the arm columns)
    sigma2: float
    df: int
    hetero_p: float  # Brown-Forsythe p of equal residual spread across arms (1.0 when untestable)


def fit(blocks: Sequence[Mapping[str, float]]) -> Fit | None:
    """Least squares y ~ arm + block over the blocks' values; None when nothing is left to estimate the error."""
    import numpy as np

    arms = sorted({k for b in blocks for k in b})
    rows = [(i, k, y) for i, b in enumerate(blocks) for k, y in b.items()]
    if len(arms) < 2 or not rows:
        return None
    used = sorted({i for i, _, _ in rows})
    bcol = {i: c for c, i in enumerate(used[1:])}  # the first block is the reference level
    a_idx = {k: c for c, k in enumerate(arms)}
    x = np.zeros((len(rows), len(arms) + len(bcol)))
    y = np.zeros(len(rows))
    for r, (i, k, v) in enumerate(rows):
        x[r, a_idx[k]] = 1.0
        if i in bcol:
            x[r, len(arms) + bcol[i]] = 1.0
        y[r] = v
    rank = int(np.linalg.matrix_rank(x))
    df = len(rows) - rank
    if df < 1:
        return None
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    sigma2 = float(resid @ resid) / df
    xtx_pinv = np.linalg.pinv(x.T @ x)
    n_arms = len(arms)
    by_arm: dict[str, list[float]] = {}
    for (_, key, _), e in zip(rows, resid):
        by_arm.setdefault(key, []).append(float(e))
    groups = [v for v in by_arm.values() if len(v) >= 2]
    hetero_p = 1.0
    if len(groups) >= 2 and any(statistics.pvariance(g) > 0 for g in groups):
        from scipy import stats as sst

        hetero_p = float(sst.levene(*groups, center="median").pvalue)
        if math.isnan(hetero_p):
            hetero_p = 1.0
    return Fit(
        tuple(arms),
        tuple(float(b) for b in beta[:n_arms]),
        tuple(tuple(float(c) for c in row[:n_arms]) for row in xtx_pinv[:n_arms]),
        sigma2,
        df,
        hetero_p,
    )


def contrast(f: Fit, ref: str, arm: str) -> tuple[float, float, int] | None:
    """(estimate of mu[arm] - mu[ref], its standard error, df) or None if either arm is not in the fit."""
    if ref not in f.arms or arm not in f.arms:
        return None
    i, j = f.arms.index(ref), f.arms.index(arm)
    var = (f.cov[i][i] + f.cov[j][j] - 2 * f.cov[i][j]) * f.sigma2
    return f.effects[j] - f.effects[i], math.sqrt(max(var, 0.0)), f.df
