"""The report's sections for a duet run (bench.duet): the Method lines, each duet's ratio, the duet-to-duet CV of
the ratio beside each arm's start-to-start CV, and every metric compared over the duets. bench.report calls
these in place of its sequential sections; they read store units only."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from . import duet, store
from .replication import LABELS, METRICS, Policy
from .stats import MIN_STARTS, NoiseSplit, blocks_for, cv, noise_split
from .verdicts import pct


def method_lines(cfg: dict, pol: Policy, schedule: str, looks: str = "") -> list[str]:
    """`schedule`: the look confidences in words; `looks`: where the verdict is read when not after every duet
    (bench.report.planned_looks)."""
    value = cfg.get("duet_value", "medians")
    ratio = (
        "median_B / median_A of its two starts' repetitions"
        if value == "medians"
        else "the median over its adjacent A/B repetition pairs of B / A"
    )
    return [
        f"- Duet design (bench/duet.py): each unit starts both arms' servers on one machine, the one on "
        f"`{cfg.get('tree')}` first and, once healthy, the one on `{cfg.get('duet')}` (port + {duet.PORT_OFFSET}); "
        f"their measured repetitions alternate A B B A A B ..., the idle server waiting, so both sample the "
        f"machine's state within seconds; the arms swap trees (and start and serving order) every other duet. "
        f"{pol.initial} duet(s) first, then one more while the primary metric is undecided, up to {pol.max_starts}{looks}. "
        + (
            "One throwaway start before the first duet."
            if cfg.get("warmup_start")
            else "No throwaway start (--no-warmup-start)."
        ),
        f"- Verdicts: a duet is the replication unit; its value is log of {ratio}. The t interval of the mean over "
        f"duets, at {schedule}; **regression/improvement** when the interval lies beyond ±{pol.min_effect:.1%}, "
        f"**same** when inside, **cannot tell** when it straddles; fewer than {MIN_STARTS} duets: no verdict. Two "
        "servers share the GPU (only one serves at a time) and the second starts beside a live one, so start-up "
        "time is not compared.",
    ]


def duet_lines(
    ref_name: str, arm_name: str, ref_units: Sequence, arm_units: Sequence, pol: Policy, cfg: dict
) -> list[str]:
    metric = cfg.get("metric", "step_ms_b1")
    value = cfg.get("duet_value", "medians")
    arm_by = {u.round: u for u in arm_units}
    lines = [
        "## Duets",
        "",
        f"`{metric}` per duet: each arm's start median, the ratio {arm_name} / {ref_name} of the medians and of the "
        "adjacent repetition pairs (the run reads the "
        f"{value}); the tree the reference ran on.",
        "",
        f"| duet | round | {ref_name} on | {ref_name} median | {arm_name} median | ratio (medians) | ratio (pairs) |",
        "|---|---|---|---|---|---|---|",
    ]
    n = 0
    for u in sorted(ref_units, key=lambda u: u.round):
        v = arm_by.get(u.round)
        if v is None:
            continue
        a, b = [r.get(metric) for r in u.reps], [r.get(metric) for r in v.reps]
        med, pair = duet.unit_value(a, b, "medians"), duet.unit_value(a, b, "pairs")
        if med is None or pair is None:
            continue
        n += 1
        lines.append(
            f"| {n} | {u.round} | `{u.duet.get('tree', '-')}` | {med[0]:.4g} | {med[1]:.4g} | "
            f"{med[1] / med[0]:.4f} | {pair[1] / pair[0]:.4f} |"
        )
    pm, pp = (duet.unit_pairs(ref_units, arm_units, metric, x) for x in ("medians", "pairs"))
    ref_cv, arm_cv = cv(store.start_values(ref_units, metric)), cv(store.start_values(arm_units, metric))
    lines += [
        "",
        f"Spread: duet-to-duet CV of the ratio {duet.ratio_cv(pm) * 100:.2f}% (medians), "
        f"{duet.ratio_cv(pp) * 100:.2f}% (pairs); start-to-start CV of the start values {ref_name} "
        f"{ref_cv * 100:.2f}%, {arm_name} {arm_cv * 100:.2f}% (what a sequential comparison's interval is made of).",
        "",
        "### Every metric over the duets",
        "",
        "| metric | duets | change [interval] | verdict |",
        "|---|---|---|---|",
    ]
    for m, _, _ in [x for x in METRICS if x[0] == metric] + [x for x in METRICS if x[0] != metric]:
        pairs = duet.unit_pairs(ref_units, arm_units, m, value)
        if not pairs:
            continue
        c = duet.compare(pairs, m, pol)
        verdict = f"**{c.verdict}**" if c.verdict in ("regression", "improvement") else c.verdict
        label = LABELS[m] + (" (primary)" if m == metric else "")
        lines.append(f"| {label} | {c.n_ref} | {pct(c)} | {verdict} |")
    return [*lines, ""]


def block_method_lines(cfg: dict, pol: Policy, schedule: str, looks: str = "") -> list[str]:
    """The Method lines of a --concurrent run (bench.blocks)."""
    value = cfg.get("duet_value", "pairs")
    ratio = (
        "the ratio of the two arms' start medians"
        if value == "medians"
        else "the median over the block's rounds of arm / reference (the j-th repetition of each, served in the "
        "same round)"
    )
    return [
        "- Block design (bench/blocks.py): each round is one block, the servers of its arms (and of the references "
        "they are compared with) started together on one GPU, one tree each, all on the same CPUs, "
        "`--sleep-on-idle` so that only the serving one runs; measured repetitions served round by round "
        f"(positions 0..n-1, then n-1..0); positions rotate from block to block. {pol.initial} block(s) first, then "
        f"one more with the arms of each undecided comparison, up to {pol.max_starts}{looks}. "
        + (
            "With --block-pairs a block holds one comparison's two arms only: a round is one block per comparison. "
            if cfg.get("block_pairs")
            else ""
        )
        + (
            "One throwaway start before the first block."
            if cfg.get("warmup_start")
            else "No throwaway start (--no-warmup-start)."
        ),
        (
            "- Verdicts: the block is the replication unit, read as a block design (bench/rcbd.py): each arm's value "
            "per block is the median over rounds of its log value minus the round's mean over the block's arms; "
            "arm and block effects by least squares, the arm contrast's interval from the residual variance pooled "
            "over all the blocks' arms (read on each comparison's own blocks, by log of "
            f"{ratio}, where the arms' spread differs: Brown-Forsythe p < 0.05)"
            if cfg.get("block_analysis") == "pooled"
            else f"- Verdicts: the block is the replication unit; a comparison's value per block is log of {ratio}. "
            "The t interval of the mean over the blocks holding both arms"
        )
        + f", at {schedule}; **regression/improvement** when the interval lies beyond ±{pol.min_effect:.1%}, "
        f"**same** when inside, **cannot tell** when it straddles; fewer than {MIN_STARTS} blocks holding both: "
        "no verdict.",
    ]


def block_lines(run: dict, rows: Sequence, cfg: dict, confidence: float = 0.95) -> list[str]:
    """Per comparison of a --concurrent run: each block's ratio on the primary metric, and its block-to-block CV
    beside the two arms' start-to-start CV (what a sequential comparison's interval would be made of)."""
    metric = cfg.get("metric", "step_ms_b1")
    value = cfg.get("duet_value", "pairs")
    by_name = {r.name: r for r in rows}
    comps = [c for c in run.get("comparisons") or [] if c[1] in by_name and c[2] in by_name]
    if not comps:
        return []
    lines = [
        "## Blocks",
        "",
        f"`{metric}`: per comparison, the ratio arm / reference in each block holding both (the run's {value} "
        "value), its block-to-block CV, the arms' start-to-start CV of their start values, and the block-to-block "
        "spread (sd of log) its repetitions predict against the one the blocks show (stats.noise_split).",
        "",
        "| reference | arm | blocks | ratio per block | block-to-block CV | start-to-start CV (ref, arm) | "
        "spread: repetitions predict / blocks show |",
        "|---|---|---|---|---|---|---|",
    ]
    splits: list[tuple[str, NoiseSplit]] = []
    designs: list[tuple[str, NoiseSplit, tuple[float, float, int] | None]] = []
    for _, ref, arm in comps:
        a, b = by_name[ref], by_name[arm]
        pairs = duet.unit_pairs(a.units, b.units, metric, value)
        if not pairs:
            continue
        ref_cv, arm_cv = cv(store.start_values(a.units, metric)), cv(store.start_values(b.units, metric))
        split = noise_split(duet.unit_reps(a.units, b.units, metric), value)
        if split is not None:
            splits.append((f"{arm} vs {ref}", split))
            designs.append((f"{arm} vs {ref}", split, _block_cost(a.units, b.units, int(cfg.get("warmup_reps") or 0))))
        lines.append(
            f"| {ref} | {arm} | {len(pairs)} | {', '.join(f'{y / x:.4f}' for x, y in pairs)} | "
            f"{_cv_cell(duet.ratio_cv(pairs))} | {_cv_cell(ref_cv)}, {_cv_cell(arm_cv)} | "
            + (f"{split.expected:.3f} / {split.observed:.3f} |" if split else "- |")
        )
    min_effect = float(cfg.get("min_effect", 0.02))
    return [*lines, "", *_split_lines(splits), "", *_design_lines(designs, min_effect, confidence)]


def _block_cost(ref_units: Sequence, arm_units: Sequence, warmup: int) -> tuple[float, float, int] | None:
    """(fixed s, s per round) of this comparison's blocks, medians over them: the fixed part is the slowest
    server's start-up, the rest of the block's wall time is spread over its rounds (warm-up ones included)."""
    arm_by = {u.round: u for u in arm_units}
    fixed, per_round = [], []
    for u in ref_units:
        v = arm_by.get(u.round)
        if v is None or not u.block_wall_s or not u.reps:
            continue
        start = max(u.startup_s, v.startup_s)
        fixed.append(start)
        per_round.append(max(u.block_wall_s - start, 0.0) / (len(u.reps) + warmup))
    if not fixed:
        return None
    return statistics.median(fixed), statistics.median(per_round), warmup


def _design_lines(
    designs: Sequence[tuple[str, NoiseSplit, tuple[float, float, int] | None]], min_effect: float, confidence: float
) -> list[str]:
    """What a 5 % change would take at the noise measured, with the repetitions per start as they were and at 4
    times as many. A block's spread as observed splits into the part beyond its repetitions (observed^2 -
    expected^2, when positive) and theirs, which falls as 1/n if repetitions are independent (what
    noise_split's test cannot refute, not what it proves)."""
    out = []
    for name, s, cost in designs:
        beyond = max(s.observed**2 - s.expected**2, 0.0)
        reps_part = s.observed**2 - beyond
        cells = []
        for n in (s.reps, 4 * s.reps):
            k = blocks_for(math.sqrt(beyond + reps_part * s.reps / n), 0.05, min_effect, confidence)
            if k is None:
                cells.append(f"{n} repetitions: more than 500 blocks")
                continue
            block_s = None if cost is None else cost[0] + (n + cost[2]) * cost[1]
            secs = "" if block_s is None else f" of about {block_s:.0f} s"
            mins = "" if block_s is None else f", {k * block_s / 60:.0f} min"
            cells.append(f"{n} repetitions: {k} blocks{secs}{mins}")
        out.append(f"- {name}: {'; '.join(cells)}")
    if not out:
        return []
    return [
        f"A 5 % change, per comparison read on its own blocks at {confidence:.2%} (stats.blocks_for; the blocks' "
        "spread split as above, start-up and per-round seconds from this run's blocks; an estimate as uncertain as "
        "a spread over this few blocks):",
        "",
        *out,
        "",
    ]


def _cv_cell(x: float) -> str:
    """A CV of one value is undefined: a dash, not 'nan%'."""
    return "-" if x != x else f"{x * 100:.2f}%"


def _split_lines(splits: Sequence[tuple[str, NoiseSplit]]) -> list[str]:
    """Which knob narrows the intervals: more repetitions per start, or only more blocks."""
    if not splits:
        return []
    beyond = [name for name, s in splits if s.p < 0.05]
    if beyond:
        return [
            f"The blocks vary more than their repetitions predict on {', '.join(beyond)} (p < 0.05): a state per "
            "block or start that more repetitions do not average out; more blocks do."
        ]
    reps = max(s.reps for _, s in splits)
    return [
        "The blocks vary no more than their repetitions predict (every p ≥ 0.05): no state per block or start "
        f"shows beyond the repetitions' own spread, so more repetitions per start (`--reps-per-start`, {reps} "
        "here) should narrow the intervals about as more blocks would, without a block's start-up time. The "
        "prediction is a bootstrap of each block's repetitions and runs high on 6-8 of them, so this test flags a "
        "block effect only when it is clear."
    ]
