"""The report's sections for a duet run (bench.duet): the Method lines, each duet's ratio, the duet-to-duet CV of
the ratio beside each arm's start-to-start CV, and every metric compared over the duets. bench.report calls
these in place of its sequential sections; they read store units only."""

from __future__ import annotations

from collections.abc import Sequence

from . import duet
from .replication import LABELS, METRICS, Policy
from .stats import MIN_STARTS, cv, start_median
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
    ref_cv = cv([start_median([r.get(metric) for r in u.reps]) for u in ref_units])
    arm_cv = cv([start_median([r.get(metric) for r in u.reps]) for u in arm_units])
    lines += [
        "",
        f"Spread: duet-to-duet CV of the ratio {duet.ratio_cv(pm) * 100:.2f}% (medians), "
        f"{duet.ratio_cv(pp) * 100:.2f}% (pairs); start-to-start CV of the start medians {ref_name} "
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
