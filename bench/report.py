"""Markdown report + PNG plot of one run's JSONL store (bench/results/<date>-<gpu>/<run>/results.jsonl).

Everything is recomputed from the store, so a report can be regenerated (`sglang-overlay bench report DIR`)
after an interrupted run, a resume, or with another --alpha / --min-effect in mind. Older stores (one start per arm,
a rank test over repetitions) render too: their comparisons now read "too few starts", which is what they were.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from . import stats, store
from .errors import RecordError
from .replication import LABELS, METRICS, Policy, lower_is_better
from .stats import MIN_STARTS, START_VALUE, UNDECIDED, Comparison, compare_starts, cv, geometric_mean, start_value
from .store import png_bytes, write_whole
from .verdicts import flags, pct


@dataclass
class ArmRow:
    name: str
    key: str
    label: str
    units: list[store.Unit]

    def start_values(self, metric: str) -> list[float]:
        return store.start_values(self.units, metric)

    def values(self, metric: str) -> list[float]:
        return [
            float(r[metric])
            for u in self.units
            for r in u.reps
            if r.get(metric) is not None and not (isinstance(r[metric], float) and math.isnan(r[metric]))
        ]

    def phase_p50(self, phase: str, which: str = "eagle_b1") -> list[float]:
        out = []
        for u in self.units:
            vals = [((r.get(which) or {}).get(phase) or {}).get("p50_ms") for r in u.reps]
            m = start_value(vals)
            if m is not None:
                out.append(m)
        return out

    def hashes(self, which: str = "hash_b1") -> set[str]:
        return {h for u in self.units for r in u.reps if (h := r.get(which))}

    @property
    def n_reps(self) -> int:
        return sum(len(u.reps) for u in self.units)


def _fmt(x, nd=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def _med(xs):
    return statistics.median(xs) if xs else None


def load_rows(run_dir: Path) -> tuple[dict, list[ArmRow], store.StoreView]:
    recs = list(store.read(run_dir / "results.jsonl"))
    runs = [r for r in recs if r.get("type") == "run"]
    if not runs:
        raise RecordError(f"{run_dir}/results.jsonl: no run record (not a bench run directory, or nothing written yet)")
    run = runs[0]
    v = store.view(recs, signature=run.get("signature"))
    names: dict[str, tuple[str, str]] = {}  # arm name -> (key, label)
    for a in v.arms:
        names.setdefault(a["name"], (a["key"], ",".join(a["patches"]) or "(none)"))
    # probes whose starts all came from the store (--reuse, --resume) have no arm record of their own
    for b in [r for r in recs if r.get("type") in ("bisect", "conclusion")]:
        for p in b.get("probes", []):
            names.setdefault(p["arm"], (p["key"], ",".join(p["patches"]) or "(none)"))
    rows = [ArmRow(n, k, lbl, v.units_of(k)) for n, (k, lbl) in names.items()]
    return run, rows, v


def _policy(cfg: dict) -> Policy:
    conf = cfg.get("confidence", 1 - cfg.get("alpha", 0.05))
    return Policy(
        cfg.get("initial_starts", cfg.get("restarts", MIN_STARTS)),
        cfg.get("max_starts", 8),
        conf,
        cfg.get("min_effect", 0.02),
        # a record without it was decided with alpha split evenly over the looks
        cfg.get("spending", "bonferroni"),
        cfg.get("look_step", 1),
    )


def schedule(pol: Policy, unit: str = "starts per arm") -> str:
    """The look confidences a policy reads comparisons at, in words."""
    confs = ", ".join(f"{n}: {pol.look_confidence((n, n)):.2%}" for n in pol.grid)
    if pol.spending == "bonferroni":
        return f"{pol.look_confidence():.2%} at every look ({pol.confidence:.0%} split over {pol.looks} looks)"
    name = {"obf": "O'Brien-Fleming", "pocock": "Pocock"}.get(pol.spending, pol.spending)
    return (
        f"repeated confidence intervals of a group-sequential design ({1 - pol.confidence:.0%} spent by a "
        f"Lan-DeMets {name}-type function over looks at these {unit}, confidence: {confs})"
    )


def planned_looks(pol: Policy, unit: str) -> str:
    """With --look-step > 1, where verdicts are read, in words (a clause to follow "up to max_starts"); empty
    at a look after every round, which the sentence before it already says."""
    if pol.looks >= pol.max_starts - pol.initial + 1:  # every round a look (step 1 or a short run)
        return ""
    looks = ", ".join(str(n) for n in pol.grid)
    return (
        f"; read only at the planned looks ({looks} {unit}, --look-step {pol.step}): what is added between "
        "them is not read until the next"
    )


def _compare(ref: ArmRow, arm: ArmRow, metric: str, pol: Policy) -> Comparison:
    """A comparison as the run reads it: the arms' start values at the look's confidence."""
    a, b = ref.start_values(metric), arm.start_values(metric)
    return compare_starts(
        a,
        b,
        metric=metric,
        lower_is_better=lower_is_better(metric),
        confidence=pol.pair_confidence(len(a), len(b)),
        min_effect=pol.min_effect,
    )


# -- sections -----------------------------------------------------------------------------------------------------


def _header(run_dir: Path, run: dict) -> list[str]:
    host = run.get("host", {})
    return [
        f"# bench {run.get('kind')} — {run.get('time', '')[:10]} — {', '.join(host.get('gpus', [])) or 'no GPU'}",
        "",
        f"run `{run.get('run_id')}` · signature `{run.get('signature')}` · host `{host.get('hostname')}`",
        "",
        "Command:",
        "",
        "```",
        _command(run_dir, run),
        "```",
        "",
        "Versions: " + ", ".join(f"{k} {val}" for k, val in sorted(host.get("versions", {}).items())),
        "",
    ]


def _method(cfg: dict, pol: Policy, v: store.StoreView) -> list[str]:
    units = list(v.units.values())
    wl = cfg.get("workload", {})
    metric = cfg.get("metric", "step_ms_b1")
    old = "initial_starts" not in cfg
    lines = ["## Method", ""]
    if old:
        lines.append(
            f"- Recorded with the earlier method ({cfg.get('restarts')} start(s) per arm); re-read here "
            f"with start values: comparisons need {MIN_STARTS} starts per arm."
        )
    else:
        lines.append(
            f"- The server start is the replication unit: {pol.initial} start(s) per arm first, then one "
            f"more per round to the arms of each undecided comparison, up to {pol.max_starts}"
            f"{planned_looks(pol, 'starts per arm')}; arms interleaved. "
            + (
                "One throwaway start before the first measured one."
                if cfg.get("warmup_start")
                else "No throwaway start (--no-warmup-start)."
            )
        )
    verdicts = [
        f"- Verdicts: Welch's t interval for the ratio of the arms' geometric mean start values, at "
        f"{schedule(pol)}; "
        f"**regression/improvement** when the interval lies beyond ±{pol.min_effect:.1%}, **same** when inside, "
        f"**cannot tell** when it straddles; fewer than {MIN_STARTS} starts: no verdict. Primary metric "
        f"`{metric}`; every metric is shown. Bisect: probes placed at {pol.confidence:.0%} against the midpoint "
        "of good and bad; a culprit only after its confirmations ("
        + (
            "a block of fresh starts of good and bad, interleaved with them"
            if cfg.get("confirm", "fresh") == "fresh"
            else "read against every start of good and bad; a probe's starts of the same set reused; measured "
            "again fresh when they do not confirm"
        )
        + ("" if pol.spending == "bonferroni" else ", at the look's sequential confidence")
        + ")."
    ]
    penv = cfg.get("patch_env")
    lines += [
        *(
            [
                "- Patch variables set in the bench's environment (every server inherited them): "
                + (", ".join(f"`{k}={v}`" for k, v in penv.items()) if penv else "none; the manifest's defaults")
                + "."
            ]
            if penv is not None
            else []
        ),
        f"- Per start: {cfg.get('warmup_reps')} discarded and {cfg.get('reps_per_start')} measured repetitions; the "
        f"start's value is their {'geometric mean' if cfg.get('start_value') == 'geomean' else 'median'}. Repetition: {wl.get('b1_requests')} sequential requests (batch 1), then "
        f"{wl.get('concurrency')} concurrent, {wl.get('max_new_tokens')} tokens each, greedy, ignore_eos.",
        *verdicts,
        f"- CPU placement: {cfg.get('cpu_placement', 'none')}. Phase spans (eagle_profiling) are CUDA-event spans: "
        f"they include GPU idle time waiting for the host (bench/verdicts.py).",
        f"- Measured: {len(units)} completed start(s), {sum(len(u.reps) for u in units)} repetitions, "
        f"{sum(u.wall_s for u in units + v.warmup_units) / 60:.1f} min of server wall time"
        + (f" (incl. {len(v.warmup_units)} throwaway start(s))" if v.warmup_units else "")
        + "."
        + (f" {v.partial_reps} repetition(s) from interrupted starts ignored." if v.partial_reps else ""),
        "",
    ]
    return lines


def _conclusion(run: dict, rows: list[ArmRow], v: store.StoreView, pol: Policy) -> list[str]:
    if not v.conclusions:
        return []
    c = v.conclusions[-1]
    lines = ["## Conclusion", ""]
    if c.get("budget_exhausted"):
        lines += [f"Stopped by the time budget ({c.get('budget_message')}); `--resume` continues.", ""]
    if note := _old_method(run, c):
        lines += [note, ""]
    if c["kind"] == "ab":
        for r in c["comparisons"]:
            cmp_ = r["comparison"]
            lines.append(
                f"- {r['arm']} vs {r['ref']} on `{c['metric']}`: **{r['verdict']}** ("
                + f"{_change(cmp_)}; {cmp_['n_ref']} vs {cmp_['n_arm']} {c.get('method') or 'start'}s)"
                + (f"; {res}" if (res := _resolution(cmp_, c.get("method") or "start")) else "")
            )
    elif c["kind"] == "ablate":
        lines += [
            f"On `{c['metric']}`: "
            + (f"**culprit(s): {', '.join(c['culprits'])}**" if c["culprits"] else "no culprit named"),
            "",
            "| patch | alone on base | left out of full | finding |",
            "|---|---|---|---|",
        ]
        for r in c["patches"]:
            lines.append(
                f"| {r['patch']} | {r['alone'] or '-'} | {r['left_out'] or '-'} | {r['finding']}: {r['sentence']} |"
            )
    else:
        lines += _bisect_lines(c)
    lines.append("")
    return lines


def _old_method(run: dict, c: dict) -> str:
    """One line for a record made with a method the bench no longer has (bench/README.md says why each left)."""
    cfg = run.get("config", {})
    how = []
    if c.get("method") in ("duet", "block"):
        how.append(f"the {c['method']} design")
    if cfg.get("adjust", "none") != "none":
        how.append(f"`--adjust {cfg['adjust']}`")
    if (v := cfg.get("start_value", "median")) != START_VALUE:
        how.append(f"start {v}s")
    if not how:
        return ""
    return (
        f"This run read its verdicts with {' and '.join(how)}, which the bench no longer has: the conclusion is "
        "the run's own; the tables below read start values."
    )


def _change(c: dict) -> str:
    ci = "" if c.get("low") is None or math.isnan(c["low"]) else f" [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"
    ch = c.get("change")
    return ("-" if ch is None or math.isnan(ch) else f"{ch * 100:+.2f}%") + ci


def _resolution(cmp_: dict, unit: str) -> str:
    """Where a "cannot tell" stands: the change this run's noise resolves, and the units a 5 % one would take."""
    r = stats.resolution(cmp_) if cmp_.get("verdict") == UNDECIDED else None
    if r is None:
        return ""
    need = (
        f"about {r.units} {unit}s per arm would name a {r.target:.0%} change"
        if r.units
        else f"a {r.target:.0%} change is out of reach at this noise"
    )
    return f"at this noise it resolves changes beyond ±{r.resolves:.1%}: {need}"


def _bisect_lines(c: dict) -> list[str]:
    who = c.get("culprit")
    if c.get("partner"):
        head = f"**Interaction: {c['partner']} + {c['culprit']}**"
    elif who:
        head = f"**Culprit: {who}** (confirmed)"
    else:
        head = f"**No culprit named: {c['outcome']}**"
    lines = [f"good `{c['good']}` -> bad `{c['bad']}`; candidates: {', '.join(c['candidates']) or '(none)'}", ""]
    if c.get("followed"):
        lines += [f"Metric: {c['followed']}.", ""]
    ep = c["endpoint"]
    lines += [
        f"Endpoints on `{c['metric']}`: bad vs good {_change(ep)} ({ep['n_ref']} vs {ep['n_arm']} starts) -> "
        f"{ep['verdict']}",
        "",
    ]
    if c.get("probes"):
        lines += [
            "| probe | role | patches | starts | place | toward bad | vs good | vs bad |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in c["probes"]:
            lines.append(
                f"| {p['arm']} | {p['role']} | `{','.join(p['patches'])}` | {p['starts']} | {p['place']} | "
                f"{_fmt(p.get('toward_bad'), 2)} | {_change(p['vs_good'])} | {_change(p['vs_bad'])} |"
            )
        lines.append("")
    lines += [
        f"{head} — {c['reason']}. {len(c.get('probes', []))} probe set(s) (search bound "
        f"{c.get('max_search_probes')} + 2 confirmations), {c.get('server_starts_this_run', '?')} server "
        f"start(s) in this invocation, {c.get('elapsed_s', 0) / 60:.1f} min wall."
    ]
    return lines


def _arms(rows: list[ArmRow], metric: str) -> list[str]:
    has_eagle = any(r.phase_p50("verify") for r in rows)
    has_oea = any(r.start_values("oea_distinct_experts_b1") or r.start_values("oea_distinct_experts_bc") for r in rows)
    head = (
        f"| arm | patches | starts | reps | {metric}: start values | geo. mean | start-to-start CV | "
        f"step ms conc. | tok/s b1 | tok/s conc. | accept len |"
    )
    sep = "|---|---|---|---|---|---|---|---|---|---|---|"
    if has_eagle:
        head += " draft / verify / draft-extend p50 ms |"
        sep += "---|"
    if has_oea:
        head += " distinct experts / routing call b1 / conc. |"
        sep += "---|"
    lines = [
        "## Arms",
        "",
        "Each start's value is the geometric mean of its repetitions (bench.stats.start_value); the columns "
        "after the start values are medians over starts.",
        "",
        head,
        sep,
    ]
    for r in rows:
        meds = r.start_values(metric)
        cells = [
            r.name,
            f"`{r.label}`",
            str(len(r.units)),
            str(r.n_reps),
            ", ".join(f"{x:.4g}" for x in meds) or "-",
            _fmt(geometric_mean(meds) if meds else None, 4),
            f"{_fmt(cv(meds) * 100, 2)}%",
            _fmt(_med(r.start_values("step_ms_bc")), 4),
            _fmt(_med(r.start_values("tok_s_b1")), 1),
            _fmt(_med(r.start_values("tok_s_bc")), 1),
            _fmt(_med(r.start_values("accept_len_b1")), 2),
        ]
        if has_eagle:
            cells.append(" / ".join(_fmt(_med(r.phase_p50(p)), 3) for p in ("draft", "verify", "draft_extend")))
        if has_oea:
            cells.append(
                " / ".join(
                    _fmt(_med(r.start_values(m_)), 2) for m_ in ("oea_distinct_experts_b1", "oea_distinct_experts_bc")
                )
            )
        lines.append("| " + " | ".join(cells) + " |")
    fps = {r.name: sorted({u.fingerprint for u in r.units}) for r in rows}
    lines += ["", "Fingerprints: " + "; ".join(f"{n} `{','.join(f) or '-'}`" for n, f in fps.items()), ""]
    if has_oea:
        lines += [
            "Distinct experts: per phase, the oea_stats totals (SGLANG_OEA_STATS=1) after minus before it, "
            "divided by the routing calls (padding rows excluded).",
            "",
        ]
    return lines


def _within_note(starts: list[list[float]]) -> str:
    """The repetitions' spread around their own start's mean (pooled sd of logs): about as large as the start-to-start
    CV when the machine's speed moves within minutes (run7) rather than once per start."""
    sd, dof = stats.pooled_log_sd(starts)
    if not dof:
        return ""
    return f"; within starts {sd * 100:.2f}% (repetitions around their start's mean, pooled)"


def _set_cv(rows: list[ArmRow], metric: str) -> list[str]:
    """Start-to-start CV per patch set, pooled over the arms that carry it (a null comparison's two arms)."""
    by_set: dict[str, list[float]] = {}
    reps_by_set: dict[str, list[list[float]]] = {}
    for r in rows:
        by_set.setdefault(r.label, []).extend(r.start_values(metric))
        reps_by_set.setdefault(r.label, []).extend([float(x[metric]) for x in u.reps if x.get(metric)] for u in r.units)
    out = [
        f"- `{s}`: {len(xs)} starts, CV {cv(xs) * 100:.2f}%{_within_note(reps_by_set[s])}"
        for s, xs in by_set.items()
        if len(xs) >= 2
    ]
    return (
        (
            [
                "## Start-to-start variation by patch set",
                "",
                f"`{metric}` start values, pooled over arms of the "
                f"same set (arms may differ in env or CPU placement: see Arms):",
                "",
            ]
            + out
            + [""]
        )
        if out
        else []
    )


def _pairs(run: dict, rows: list[ArmRow], v: store.StoreView) -> list[tuple[str, str, str]]:
    names = {r.name for r in rows}
    pairs = [tuple(c) for c in (run.get("comparisons") or []) if c[1] in names and c[2] in names]
    for c in v.conclusions[-1:]:
        if c["kind"] == "bisect":
            pairs += [
                ("probe vs good", p.get("good", "good"), p["arm"])
                for p in c.get("probes", [])
                if p["arm"] not in ("good", "bad")
            ]
            pairs += [("confirmation refs", p["good"], p["bad"]) for p in c.get("probes", []) if p.get("block")]
    seen, out = set(), []
    for p in pairs:
        # an arm the budget stopped before its first start has no row
        if p[1] not in names or p[2] not in names:
            continue
        if (p[1], p[2]) not in seen:
            seen.add((p[1], p[2]))
            out.append(p)
    return out


def _apart(ref: ArmRow, arm: ArmRow) -> str | None:
    """Sequential starts are compared across starts: when no invocation measured both arms (--reuse of another
    run's starts, an arm measured only after a --resume), the two invocations' machines and times are in the
    change, and nothing in the run can separate them."""
    a, b = {u.invocation for u in ref.units}, {u.invocation for u in arm.units}
    if not a or not b or a & b:
        return None
    return (
        f"no invocation measured both arms ({ref.name}: {', '.join(sorted(a))}; {arm.name}: {', '.join(sorted(b))}): "
        "a difference between those invocations' machines or times is in every change of this comparison; "
        "measure both arms in one run before trusting a verdict"
    )


def _comparisons(run: dict, rows: list[ArmRow], v: store.StoreView, pol: Policy, metric: str) -> list[str]:
    by_name = {r.name: r for r in rows}
    pairs = _pairs(run, rows, v)
    if not pairs:
        return []
    order = [metric] + [m for m, _, _ in METRICS if m != metric]
    lines = [
        "## Comparisons (every metric)",
        "",
        "Change of the arm against the reference, with its interval at the confidence of the look its start "
        "counts reach (Method); n = starts.",
        "",
        "| section | reference | arm | metric | n | change [interval] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    reach: list[str] = []  # how far each undecided primary comparison is from a verdict
    for section, ref, arm in pairs:
        a, b = by_name[ref], by_name[arm]
        cmps = [_compare(a, b, m, pol) for m in order if a.start_values(m) and b.start_values(m)]
        up = _startup_comparison(a, b, pol)
        for c in cmps + ([up] if up else []):
            verdict = f"**{c.verdict}**" if c.verdict in ("regression", "improvement") else c.verdict
            label = LABELS.get(c.metric, STARTUP_LABEL) + (" (primary)" if c.metric == metric else "")
            lines.append(f"| {section} | {ref} | {arm} | {label} | {c.n_ref} / {c.n_arm} | {pct(c)} | {verdict} |")
        notes += [f"- {arm} vs {ref}: {f}" for f in flags(cmps)]
        apart = _apart(a, b)
        if apart:
            notes.append(f"- {arm} vs {ref}: {apart}")
        reach += [
            f"- {arm} vs {ref}: {res}"
            for c in cmps
            if c.metric == metric and (res := _resolution(c.to_dict(), "start"))
        ]
        if up and up.verdict in ("regression", "improvement"):
            notes.append(
                f"- {arm} vs {ref}: server start-up moved ({up.verdict}, {pct(up)}): a patch that adds or removes "
                "start-up work (weights, JIT, graph capture) moves no decode metric above; no plan bisects it "
                "(Server start-up has where a start's seconds go)"
            )
    lines.append("")
    if notes:
        lines += ["Flags:", ""] + notes + [""]
    if reach:
        lines += (
            [
                f"Cannot tell on `{metric}`: the change the noise measured lets each interval resolve, and the units "
                "a 5% change would take (stats.resolution: a minimum detectable effect, not power at the observed "
                "change; an estimate at noise measured over few units):",
                "",
            ]
            + reach
            + [""]
        )
    return lines


STARTUP_LABEL = "server start-up s (warm starts; no plan's metric)"
# Warm starts of one set on one machine ranged 62-77 s (bench/results/2026-12-01-h200) and follow the host's load,
# and the arms' starts are not interleaved on a --resume: a start-up change under 10 % is not one a user acts on,
# and the decode metrics' 2 % would flag the load instead.
STARTUP_MIN_EFFECT = 0.10


def _startup_comparison(ref: ArmRow, arm: ArmRow, pol: Policy) -> Comparison | None:
    """The arms' warm starts' seconds to serve, compared like a metric (at the plain confidence: it steers no
    plan, it is shown); None without starts on both sides. A machine's cold first start is left out."""
    a, b = ([u.startup_s for u in r.units if u.machine_warm and u.startup_s > 0] for r in (ref, arm))
    if not (a and b):
        return None
    return compare_starts(
        a, b, metric="startup_s", confidence=pol.confidence, min_effect=max(pol.min_effect, STARTUP_MIN_EFFECT)
    )


def _startup(v: store.StoreView) -> list[str]:
    units = list(v.units.values())
    if not units and not v.warmup_units:
        return []
    lines = ["## Server start-up", ""]
    for u in v.warmup_units:
        lines.append(f"- throwaway start ({u.arm}): {u.startup_s:.0f} s to serve, {u.wall_s:.0f} s in all")
    if units:
        st = [u.startup_s for u in units]
        lines.append(
            f"- measured starts: to serve median {statistics.median(st):.1f} s (min {min(st):.1f}, max "
            f"{max(st):.1f}); a whole unit (start, repetitions, stop) median "
            f"{statistics.median(u.wall_s for u in units):.1f} s"
        )
    phases: dict[str, list[float]] = {}
    first: list[float] = []
    for u in units:
        for p in u.startup.get("phases", []):
            phases.setdefault(p["name"], []).append(p["s"])
        if "first_line_s" in u.startup:
            first.append(u.startup["first_line_s"])
    if phases or first:
        lines += [
            "",
            "Where a measured start's seconds go (medians over starts, from the server log):",
            "",
            "| phase | s |",
            "|---|---|",
        ]
        if first:
            lines.append(
                f"| launch to the server's first log line (imports, tree switch) | {statistics.median(first):.1f} |"
            )
        for name, xs in phases.items():
            lines.append(f"| {name} | {statistics.median(xs):.1f} |")
    first_measured = next((u for u in units if u.startup.get("gaps")), None)
    if first_measured is not None:
        lines += [
            "",
            f"Longest silences in the server log of {first_measured.arm} start {first_measured.round + 1} "
            "(what SGLang does not bracket, e.g. a spawned process importing):",
            "",
        ]
        lines += [
            f"- {g['s']:.0f} s after `{g['after'][:90]}` until `{g['before'][:90]}`"
            for g in first_measured.startup["gaps"]
        ]
    return lines + [""]


def _outputs(rows: list[ArmRow]) -> list[str]:
    out = []
    ref = rows[0] if rows else None
    for r in rows:
        hs = r.hashes()
        if len(hs) > 1:
            out.append(
                f"- **{r.name}: batch-1 outputs differ between its own repetitions** "
                f"({len(hs)} distinct hashes): non-deterministic decoding; step times still reported."
            )
        if ref is not None and r is not ref and ref.hashes() and hs and hs != ref.hashes():
            out.append(
                f"- **{r.name}: OUTPUT CHANGED vs {ref.name}** (batch-1 greedy hash {sorted(hs)} vs "
                f"{sorted(ref.hashes())}). Not averaged away: this arm changes what the model generates."
            )
        hc = r.hashes("hash_bc")
        if len(hc) > 1:
            out.append(
                f"- {r.name}: concurrent-batch outputs vary between repetitions ({len(hc)} hashes); batch "
                f"composition depends on arrival timing, so this is informational only."
            )
    if not out:
        # "identical" needs outputs: a run whose starts all failed has none to compare
        measured = [r.name for r in rows if r.n_reps]
        out = (
            ["No repetition completed: no outputs to compare."]
            if not measured
            else [
                "All arms produced identical batch-1 greedy outputs in every repetition."
                if len(measured) == len(rows)
                else f"Identical batch-1 greedy outputs in every repetition of {', '.join(measured)}; "
                f"no repetition completed in {', '.join(r.name for r in rows if not r.n_reps)}."
            ]
        )
    return ["## Greedy outputs", ""] + out + [""]


def _environment(rows: list[ArmRow], v: store.StoreView) -> list[str]:
    lines: list[str] = []
    nccl = [(r.name, u) for r in rows for u in r.units if u.nccl_env_lines]
    if nccl:
        lines += ["## Environment seen by each rank (nccl_env_log)", ""]
        for name, u in nccl:
            lines.append(f"- {name} start {u.round + 1}: {len(u.nccl_env_lines)} rank line(s)")
            lines += [f"    - `{ln}`" for ln in u.nccl_env_lines]
        lines.append("")
    void = [(r.name, (m.get("extra") or {}).get("ttft_void")) for r in rows for u in r.units for m in u.reps]
    void = [(name, why) for name, why in void if why]
    if void:
        lines += [
            "## Time to first token voided",
            "",
            f"- {len(void)} repetition(s) ({', '.join(sorted({n for n, _ in void}))}) have no first-token figure: "
            f"{void[0][1]} (bench.workload.ttft_ms); the metric is read over the others only",
            "",
        ]
    if v.identity_warnings:
        lines += (
            ["## Identity warnings", ""]
            + [f"- {w.get('arm')}: {'; '.join(w.get('warnings', []))}" for w in v.identity_warnings]
            + [""]
        )
    if v.failures:
        lines += ["## Failures", ""]
        for f in v.failures:
            lines.append(f"- {f.get('arm')} round {f.get('round', 0) + 1} ({f.get('stage')}): {f.get('error')}")
            cause = _exception_line(f.get("log_tail") or "")
            if cause:
                lines.append(f"    - cause, from the server log: `{cause}`")
        lines.append("")
    return lines


def build_markdown(run_dir: Path) -> str:
    run, rows, v = load_rows(run_dir)
    cfg = run.get("config", {})
    metric = cfg.get("metric", "step_ms_b1")
    pol = _policy(cfg)
    lines = _header(run_dir, run) + _method(cfg, pol, v) + _conclusion(run, rows, v, pol) + _arms(rows, metric)
    lines += _comparisons(run, rows, v, pol, metric)
    lines += _set_cv(rows, metric) + _outputs(rows)
    lines += _startup(v) + _environment(rows, v)
    if (run_dir / "plot.png").exists():
        lines += ["![plot](plot.png)", ""]
    return "\n".join(lines)


# the last line of a Python traceback ("ValueError: ..."), with or without a log prefix before it
_EXC_LINE = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w.]*)?(?:Error|Exception)(?::\s.*|$))")


def _exception_line(log_tail: str) -> str | None:
    """What a failed server died of: the launcher's own error says only that it exited."""
    found = [m.group(1).strip() for ln in log_tail.splitlines() if (m := _EXC_LINE.search(ln))]
    return found[-1][:400] if found else None


def _command(run_dir: Path, run: dict) -> str:
    p = run_dir / "command.txt"
    return p.read_text().strip() if p.exists() else " ".join(run.get("argv", []))


def plot(run_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run, rows, v = load_rows(run_dir)
    metric = run.get("config", {}).get("metric", "step_ms_b1")
    rows = [r for r in rows if r.start_values(metric)]
    if not rows:
        raise ValueError("no repetition measured: nothing to plot")
    has_eagle = any(r.phase_p50("verify") for r in rows)
    ncols = 3 if has_eagle else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols + 1, 4.5))
    names = [r.name for r in rows]
    for ax, m in zip(axes[:2], (metric, "tok_s_b1")):
        for i, r in enumerate(rows):
            xs = r.values(m)
            if not xs:
                continue
            # repetitions faint, one marker per start (the unit of every verdict), the geometric mean as a bar
            ax.scatter([i - 0.15 + (j % 9) * 0.01 for j in range(len(xs))], xs, s=6, alpha=0.25, color="grey")
            meds = r.start_values(m)
            ax.scatter([i + 0.1] * len(meds), meds, s=28, marker="D")
            ax.hlines(geometric_mean(meds), i + 0.0, i + 0.3, color="black")
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
        ax.set_title(f"{m}: reps (grey), start values (diamonds)")
        ax.grid(alpha=0.3)
    if has_eagle:
        ax = axes[2]
        bottom = [0.0] * len(rows)
        for phase in ("draft", "verify", "draft_extend"):
            vals = [_med(r.phase_p50(phase)) or 0.0 for r in rows]
            ax.bar(range(len(rows)), vals, bottom=bottom, label=phase)
            bottom = [b + x for b, x in zip(bottom, vals)]
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
        ax.set_title("EAGLE phase p50 (ms, median over starts)")
        ax.legend()
    fig.suptitle(
        f"bench {run.get('kind')} {run.get('run_id')} ({', '.join(run.get('host', {}).get('gpus', [])) or 'no GPU'})"
    )
    fig.tight_layout()
    out = run_dir / "plot.png"
    try:
        data = png_bytes(fig, dpi=110)
    finally:
        plt.close(fig)
    write_whole(out, data, _again(run_dir))
    return out


def write_report(run_dir: Path) -> Path:
    """report.md (and plot.png) of run_dir."""
    run_dir = Path(run_dir)
    note = ""
    try:
        plot(run_dir)
    except ImportError as e:
        # the data is all in the JSONL: the plot can be made later wherever matplotlib is installed
        note = f"No plot: {e}. Run `sglang-overlay bench report {run_dir}` where the [bench] extra is installed."
    except ValueError as e:  # nothing measured yet: the markdown still says so
        note = f"No plot: {e}"
    if note:
        print(f"bench report: {note}")
    out = run_dir / "report.md"
    text = build_markdown(run_dir) + ("\n" + note + "\n" if note else "") + "\n"
    write_whole(out, text.encode(), _again(run_dir))
    return out


def _again(run_dir: Path) -> str:
    """The fix a failed write names: everything is in the store, so the same command again once there is room."""
    return f"free space, then `sglang-overlay bench report {run_dir}`"
