"""Markdown report + PNG plot of one run's JSONL store (bench/results/<date>-<gpu>/<run>/results.jsonl).

Everything is recomputed from the store, so a report can be regenerated (`python -m bench report DIR`) after
an interrupted run, a resume, or with another --alpha / --min-effect in mind. Older stores (one start per arm,
a rank test over repetitions) render too: their comparisons now read "too few starts", which is what they were.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from . import covariate, duet, duet_report, hoststate, rcbd, stats, store
from .derived import png_bytes, write_whole
from .errors import RecordError
from .replication import LABELS, METRICS, Policy, compare_blocks, lower_is_better
from .stats import MIN_STARTS, START_VALUE, UNDECIDED, Comparison, compare_starts, cv, geometric_mean, start_value
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
        adjust=cfg.get("adjust", "none"),
    )


def schedule(pol: Policy, unit: str = "starts per arm", paired: bool = False) -> str:
    """The look confidences a policy reads comparisons at, in words (paired: the duet's one-sample t intervals,
    whose boundaries are solved for t statistics: Policy.paired_confidence)."""
    conf = pol.paired_confidence if paired else (lambda n: pol.look_confidence((n, n)))
    confs = ", ".join(f"{n}: {conf(n):.2%}" for n in pol.grid)
    if pol.spending == "bonferroni":
        # alpha / K at each look for the duet's t intervals too: a union bound needs no joint law
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


def _compare(
    ref: ArmRow, arm: ArmRow, metric: str, pol: Policy, blocks: str | None = None, rows: list[ArmRow] | None = None
) -> Comparison:
    """A comparison as the run reads it; `blocks`: the per-block value of a --concurrent run (bench.blocks),
    whose arms are paired round by round; with `rows` (every arm of the run), read pooled as a block design
    (bench.rcbd)."""
    if blocks:
        pooled = None
        if rows is not None:
            by_round: dict[int, dict[str, list]] = {}
            for r in rows:
                for u in r.units:
                    by_round.setdefault(u.round, {})[u.arm_key] = [x.get(metric) for x in u.reps]
            values = [rcbd.block_values(b) for _, b in sorted(by_round.items())]
            pooled = (values, ref.key, arm.key)
        return compare_blocks(duet.unit_pairs(ref.units, arm.units, metric, blocks), metric, pol, pooled=pooled)
    if pol.adjust != "none":
        adjusted = covariate.compare_host(
            ref.units,
            arm.units,
            pol.adjust,
            metric=metric,
            lower_is_better=lower_is_better(metric),
            confidence=pol.pair_confidence(len(ref.start_values(metric)), len(arm.start_values(metric))),
            min_effect=pol.min_effect,
        )
        if adjusted is not None:
            return adjusted
    return compare_starts(
        ref.start_values(metric),
        arm.start_values(metric),
        metric=metric,
        lower_is_better=lower_is_better(metric),
        confidence=pol.pair_confidence(len(ref.start_values(metric)), len(arm.start_values(metric))),
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
    if cfg.get("duet"):
        lines += duet_report.method_lines(cfg, pol, schedule(pol, "duets", paired=True), planned_looks(pol, "duets"))
    elif cfg.get("concurrent"):
        lines += duet_report.block_method_lines(
            cfg, pol, schedule(pol, "blocks", paired=True), planned_looks(pol, "blocks per arm")
        )
    elif old:
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
    verdicts = (
        []
        if cfg.get("duet") or cfg.get("concurrent")
        else [
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
    )
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
    own = run.get("config", {}).get("adjust", "none")
    # a duet's or block's verdicts read their paired values (bench.duet.unit_value), never start values
    paired = c.get("method") in ("duet", "block")
    own_value = START_VALUE if paired else run.get("config", {}).get("start_value", "median")
    lines = ["## Conclusion", ""]
    if c.get("budget_exhausted"):
        lines += [f"Stopped by the time budget ({c.get('budget_message')}); `--resume` continues.", ""]
    if pol.adjust != own or own_value != START_VALUE:
        # the stored conclusion was read the run's way: under another reading every verdict is read again here
        # (the Comparisons table's), so that no line of this report states a verdict it does not hold
        how = [f"`--adjust {own}`"] if pol.adjust != own else []
        if own_value != START_VALUE:
            how.append(f"start {own_value}s (a start's value is now the geometric mean of its repetitions)")
        lead = (
            f"Read with `--adjust {pol.adjust}` ({_ADJUST_WORDS.get(pol.adjust, pol.adjust)})"
            if pol.adjust != own
            else "Read here with start values"
        )
        lines += [
            f"{lead}; the run itself read "
            f"them with {' and '.join(how)}, and added its starts by that reading (its own conclusion: "
            f"{_stored_summary(c)}).",
            "",
        ]
        c = readjusted(c, {r.name: r for r in rows}, pol)
    if c["kind"] == "ab":
        for r in c["comparisons"]:
            cmp_ = r["comparison"]
            lines.append(
                f"- {r['arm']} vs {r['ref']} on `{c['metric']}`: **{r['verdict']}** ("
                + (
                    f"{_change(cmp_)}; {cmp_['n_ref']} {c['method']}s)"
                    if c.get("method") in ("duet", "block")
                    else f"{_change(cmp_)}; {cmp_['n_ref']} vs {cmp_['n_arm']} starts)"
                )
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


_ADJUST_WORDS = {
    "host": "verdicts at a fixed host speed: the probe's work-unit time",
    "steal": "verdicts at a fixed steal on the scheduler's CPU",
    "wait": "verdicts at a fixed run-queue wait of the scheduler",
    "state": "verdicts on the start values of the host's fast state: bench.hoststate",
    "none": "verdicts on the raw start values",
}


def _stored_summary(c: dict) -> str:
    if c["kind"] == "ab":
        return "; ".join(
            f"{r['arm']} vs {r['ref']} {r['verdict']} ({_change(r['comparison'])})" for r in c["comparisons"]
        )
    if c["kind"] == "ablate":
        return f"culprit(s) {', '.join(c['culprits'])}" if c["culprits"] else "no culprit named"
    if c.get("culprit"):
        return f"culprit {c['culprit']}" + (f" with {c['partner']}" if c.get("partner") else "")
    return f"no culprit named ({c.get('outcome')})"


def _cmp_dict(rows: dict[str, ArmRow], ref: str, arm: str, metric: str, pol: Policy) -> dict | None:
    a, b = rows.get(ref), rows.get(arm)
    if a is None or b is None or not (a.start_values(metric) and b.start_values(metric)):
        return None
    return _compare(a, b, metric, pol).to_dict()


def _expect(c: dict, role: str) -> str | None:
    """The reference a confirmation set must match, from its role (bench.bisect names them)."""
    if role.startswith("confirm: bad - "):
        return "good"
    if role == f"confirm: good + {c.get('partner')} + {c.get('culprit')}" or (
        not c.get("partner") and role == f"confirm: good + {c.get('culprit')}"
    ):
        return "bad"
    if c.get("partner") and role == f"confirm: good + {c['partner']}":
        return "good"
    return None


def _block_number(tag: str) -> int:
    n = tag.removeprefix("confirm")
    return int(n) if n.isdigit() else 0


def readjusted(c: dict, rows: dict[str, ArmRow], pol: Policy) -> dict:
    """A stored conclusion with its verdicts read again under `pol` (its adjust) from the arms' starts.

    ab: each comparison read again. ablate: each patch's two sides read again and its finding taken anew.
    bisect: the search cannot be replayed (its probes were chosen by the run's reading), so the adjusted
    reading can only withdraw: the culprit stands if the endpoints still regress and each of its confirmations
    still holds one way (bad - c clearly better than bad, good + c clearly worse than good); otherwise no
    culprit, saying which step fails. A culprit is never named that the run did not name.
    """
    from .plans import ablate_finding, qualify
    from .stats import DECIDED, IMPROVEMENT, REGRESSION, regression_ruled_out

    m = c["metric"]
    out = dict(c)
    if c["kind"] == "ab":
        out["comparisons"] = []
        for r in c["comparisons"]:
            d = _cmp_dict(rows, r["ref"], r["arm"], m, pol) or r["comparison"]
            out["comparisons"].append({**r, "verdict": d["verdict"], "comparison": d})
        return out
    if c["kind"] == "ablate":
        out["patches"] = []
        for r in c["patches"]:
            sides = {}
            for side, ref, arm in (("alone", "base", f"+{r['patch']}"), ("left_out", "full", f"-{r['patch']}")):
                d = _cmp_dict(rows, ref, arm, m, pol) if r[side] is not None else None
                sides[side] = d["verdict"] if d is not None else r[side]
            # the other metrics' regressions as the run read them (this reading re-reads the primary one)
            finding, sentence = qualify(*ablate_finding(sides["alone"], sides["left_out"]), r.get("elsewhere", []))
            out["patches"].append({**r, **sides, "finding": finding, "sentence": sentence})
        out["culprits"] = [r["patch"] for r in out["patches"] if r["finding"] == "culprit"]
        return out
    ep = _cmp_dict(rows, c["good"], c["bad"], m, pol)
    if ep is not None:
        out["endpoint"] = ep
    probes = []
    for p in c.get("probes", []):
        q = dict(p)
        for key, ref in (("vs_good", p.get("good", c["good"])), ("vs_bad", p.get("bad", c["bad"]))):
            d = _cmp_dict(rows, ref, p["arm"], m, pol)
            if d is not None:
                q[key] = d
        probes.append(q)
    out["probes"] = probes
    out["readjusted"] = True
    if not c.get("culprit"):
        # the run's outcome stands only where this reading decides the endpoints as the run did and rules out a
        # regression on every metric (bench.plans.not_ruled_out); the search itself is not re-run
        now = out["endpoint"]["verdict"]
        open_ = [
            name
            for name, _, _ in METRICS
            if (a := rows.get(c["good"])) is not None
            and (b := rows.get(c["bad"])) is not None
            and a.start_values(name)
            and b.start_values(name)
            and not regression_ruled_out(_compare(a, b, name, pol))
        ]
        if now != c["endpoint"].get("verdict") or now not in DECIDED or open_:
            out["outcome"] = f"cannot tell under this reading (endpoints: {now}; the search was not re-run)"
        out["reason"] = (
            f"{c['reason']} (the search as the run read it; endpoints now {now}"
            + (
                f"; not ruled out under this reading: a regression beyond {pol.min_effect:.0%} on {', '.join(open_)}"
                if open_
                else ""
            )
            + ")"
        )
        return out
    failed = [] if out["endpoint"]["verdict"] == REGRESSION else [f"bad vs good is {out['endpoint']['verdict']}"]
    # the block that decided (blocks are numbered in order: confirm1, confirm2, ... confirm10)
    tags = [p["block"] for p in probes if p.get("block")]
    last = max(tags, key=_block_number, default=None)
    for p in probes:
        if p.get("block") != last or (expect := _expect(c, p["role"])) is None:
            continue
        key, want = ("vs_bad", IMPROVEMENT) if expect == "good" else ("vs_good", REGRESSION)
        if p[key]["verdict"] != want:
            other = "bad" if expect == "good" else "good"
            failed.append(f"{p['role'].removeprefix('confirm: ')} vs {other} is {p[key]['verdict']} (must be {want})")
    if failed:
        named = c["culprit"] + (f" with {c['partner']}" if c.get("partner") else "")
        out.update(
            culprit=None,
            partner=None,
            outcome=f"culprit {named} withdrawn",
            reason=f"the run named {named}, but under this reading " + "; ".join(failed),
        )
    return out


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
        if c.get("readjusted"):
            lines += [
                "place / toward bad: as the run's search placed the probe; vs good / vs bad: read again this way.",
                "",
            ]
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
        "measure both arms in one run (or --concurrent blocks) before trusting a verdict"
    )


def _comparisons(run: dict, rows: list[ArmRow], v: store.StoreView, pol: Policy, metric: str) -> list[str]:
    cfg = run.get("config", {})
    blocks = cfg.get("duet_value", "pairs") if cfg.get("concurrent") else None
    pooled_rows = rows if blocks and cfg.get("block_analysis", "paired") == "pooled" else None
    by_name = {r.name: r for r in rows}
    pairs = _pairs(run, rows, v)
    if not pairs:
        return []
    order = [metric] + [m for m, _, _ in METRICS if m != metric]
    lines = [
        "## Comparisons (every metric)",
        "",
        "Change of the arm against the reference, with its interval at the confidence of the look its start "
        "counts reach (Method); n = starts"
        + (" (blocks holding both arms: the n of a paired comparison)." if blocks else "."),
        "",
        "| section | reference | arm | metric | n | change [interval] | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    reach: list[str] = []  # how far each undecided primary comparison is from a verdict
    refusals: dict[tuple[str, str], str] = {}
    for section, ref, arm in pairs:
        a, b = by_name[ref], by_name[arm]
        cmps = [_compare(a, b, m, pol, blocks, pooled_rows) for m in order if a.start_values(m) and b.start_values(m)]
        refusals[(ref, arm)] = next((c.note for c in cmps if c.metric == metric and c.note), "")
        up = None if blocks else _startup_comparison(a, b, pol)  # a block's servers start together: not comparable
        for c in cmps + ([up] if up else []):
            verdict = f"**{c.verdict}**" if c.verdict in ("regression", "improvement") else c.verdict
            label = LABELS.get(c.metric, STARTUP_LABEL) + (" (primary)" if c.metric == metric else "")
            lines.append(f"| {section} | {ref} | {arm} | {label} | {c.n_ref} / {c.n_arm} | {pct(c)} | {verdict} |")
        notes += [f"- {arm} vs {ref}: {f}" for f in flags(cmps)]
        apart = None if blocks else _apart(a, b)
        if apart:
            notes.append(f"- {arm} vs {ref}: {apart}")
        reach += [
            f"- {arm} vs {ref}: {res}"
            for c in cmps
            if c.metric == metric and (res := _resolution(c.to_dict(), "block" if blocks else "start"))
        ]
        if up and up.verdict in ("regression", "improvement"):
            notes.append(
                f"- {arm} vs {ref}: server start-up moved ({up.verdict}, {pct(up)}): a patch that adds or removes "
                "start-up work (weights, JIT, graph capture) moves no decode metric above; no plan bisects it "
                "(Server start-up has where a start's seconds go)"
            )
    lines.append("")
    if pol.adjust != "none":
        # per comparison, on the primary metric: the fit, or that the covariate is missing (then unadjusted)
        lines += [
            (
                f"Read with `--adjust state` (each start's value over its repetitions in the host's fast state, "
                f"the probe on the scheduler's CPU below {hoststate.FAST_RATIO} x its arm's fast level; a start "
                f"with fewer than {hoststate.MIN_FAST_REPS} has none; cannot tell where the arms' levels are more "
                f"than {hoststate.SAME_STATE}x apart):"
                if pol.adjust == "state"
                else f"Read with `--adjust {pol.adjust}` (covariate `{covariate.COVARIATES[pol.adjust]}`; adjusted only where the arms' covariate "
                f"difference, bounded at {covariate.BALANCE_CONFIDENCE:.0%}, times the slope stays below half the "
                f"minimum effect, else cannot tell):"
            ),
            "",
        ]
        lines += [
            f"- {arm} vs {ref}: {covariate.model_of(by_name[ref].units, by_name[arm].units, pol.adjust, metric)}"
            + (f"; **not admissible, cannot tell**: {refusals[(ref, arm)]}" if refusals[(ref, arm)] else "")
            for _, ref, arm in pairs
        ]
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


def _duets(run: dict, rows: list[ArmRow], pol: Policy, cfg: dict) -> list[str]:
    by_name = {r.name: r for r in rows}
    comps = [c for c in run.get("comparisons") or [] if c[1] in by_name and c[2] in by_name]
    if not comps:
        return []
    _, ref, arm = comps[0]
    return duet_report.duet_lines(ref, arm, by_name[ref].units, by_name[arm].units, pol, cfg)


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


def _rank(xs: list[float], ys: list[float]) -> str:
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return "- (too few values)"
    from scipy import stats as sst

    r = sst.spearmanr(xs, ys)
    return f"{float(r.statistic):+.2f} (p = {float(r.pvalue):.2g}, n = {len(xs)})"


def _centred(groups: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Log pairs of every group, each group centred on its own means."""
    out = []
    for g in groups:
        g = [(y, p) for y, p in g if y > 0 and p > 0]
        if not g:
            continue
        ly, lp = [math.log(y) for y, _ in g], [math.log(p) for _, p in g]
        my, mp = statistics.fmean(ly), statistics.fmean(lp)
        out += [(a - my, b - mp) for a, b in zip(ly, lp)]
    return out


def _overhead_lines(run_dir: Path) -> list[str]:
    """The overhead check recorded beside the run (bench.hostprobe --overhead): is the probe a clean covariate?"""
    from . import hostprobe

    try:
        o = hostprobe.read_overhead(run_dir)
    except ValueError as e:
        return [f"- probe overhead: **unreadable**: {e}"]
    if o is None:
        return [
            "- probe overhead: not recorded beside this run (`python -m bench.hostprobe --overhead 10 --json "
            "DIR/overhead.json` on the machine)"
        ]
    if o.verdict == hostprobe.PERTURBS:
        return [
            f"- **probe overhead: {o.sentence}. The probe is NOT a clean covariate on this machine: it slows "
            "host-bound work on other CPUs (shared physical cores or memory bandwidth), so the values measured "
            "beside it are not the server's alone; a covariate that costs nothing to sample is below.**"
        ]
    return [f"- probe overhead: {o.sentence}"]


def _host_probe(
    run_dir: Path, run: dict, rows: list[ArmRow], v: store.StoreView, pol: Policy, metric: str
) -> list[str]:
    """The probe against the primary metric: does the host's speed explain the spread, and may it adjust verdicts?"""
    probed = [u for r in rows for u in r.units if u.host_probe]
    if not probed:
        return []
    # within arms (each arm's log values centred on its mean): an arm's own effect must not pass for the host's
    reps = _centred(
        [
            [
                (float(m[metric]), float(m[store.PROBE_METRIC]))
                for u in r.units
                for m in u.reps
                if m.get(metric) is not None and m.get(store.PROBE_METRIC) is not None
            ]
            for r in rows
        ]
    )
    pairs = {r.name: covariate.start_pairs(r.units, metric) for r in rows}
    starts = _centred([[(y, p) for y, p in ps if p is not None] for ps in pairs.values()])
    cpus = sorted({u.host_probe.get("cpu") for u in probed}, key=str)
    duty = _med([u.host_probe["duty"] for u in probed if u.host_probe.get("duty") is not None])
    exclusive = all(u.placement.get("reserved") for u in probed)
    at_scheduler = all(u.host_probe.get("at") == "scheduler" for u in probed)
    lines = [
        "## Host speed probe (bench.hostprobe)",
        "",
        f"A fixed Python work unit on CPU {', '.join(map(str, cpus))} "
        + (
            "(the scheduler's own CPU, by design: `--host-probe-at scheduler`)"
            if at_scheduler
            else "(kept from every server process by `spread`)"
            if exclusive
            else "(**shared**: the server's processes were not kept off it: placement `none`, or `spread` skipped)"
        )
        + f", measured duty {_fmt(duty * 100 if duty is not None else None, 1)} % of one core; "
        f"{len(probed)} of {sum(len(r.units) for r in rows)} starts probed.",
        "",
        *_overhead_lines(run_dir),
        f"- rank correlation (Spearman, within arms) of `{metric}` with the probe's work-unit time: per repetition "
        f"{_rank([a for a, _ in reps], [b for _, b in reps])}; per start {_rank([a for a, _ in starts], [b for _, b in starts])}",
    ]
    sp = covariate.spread([ps for ps in pairs.values() if ps])
    if sp is not None:
        groups = [covariate.rep_starts(r.units, metric, store.PROBE_METRIC) for r in rows]
        mx = covariate.spread_mixed([g for g in groups if g]) if all(g is not None for g in groups) else None
        lines.append(
            f"- start-to-start CV around the arms' means: {sp.cv_raw * 100:.1f} % raw, {sp.cv_adjusted * 100:.1f} % "
            f"after regressing log start value on log probe over starts (slope {sp.probe_slope:.2f} ± "
            f"{sp.probe_slope_se:.2f}, n = {sp.n})"
            + (
                f"; {mx.cv_adjusted * 100:.1f} % with the per-repetition model's slope ({mx.probe_slope:.2f} ± "
                f"{mx.probe_slope_se:.2f}, mostly within starts)"
                if mx is not None
                else ""
            )
        )
    for _section, ref, arm in _pairs(run, rows, v):
        pr = [p for _, p in pairs.get(ref, []) if p is not None]
        pa = [p for _, p in pairs.get(arm, []) if p is not None]
        b = covariate.balance(pr, pa, pol.confidence)
        if math.isnan(b.p_value):
            lines.append(f"- probe balance {arm} vs {ref}: too few probed starts to check")
        elif b.admissible:
            lines.append(
                f"- probe balance {arm} vs {ref}: {b.change * 100:+.1f} % (p = {b.p_value:.2g}): no difference "
                f"shown at {pol.confidence:.0%} (not a proof of balance: `--adjust` adjusts only where the "
                f"difference is bounded small enough)"
            )
        else:
            lines.append(
                f"- **PROBE DIFFERS BETWEEN ARMS {arm} vs {ref}: {b.change * 100:+.1f} % (p = {b.p_value:.2g}). The "
                f"host probe is NOT an admissible covariate for this comparison: the arm moves it (adjusting would "
                f"remove part of the arm's own effect), or the host ran at another speed during one arm's starts "
                f"(then the unadjusted verdict is the host's too).**"
            )
    by_name = {r.name: r for r in rows}
    if pol.adjust == "host":
        refused = [
            f"{arm} vs {ref}"
            for _, ref, arm in _pairs(run, rows, v)
            if ref in by_name and arm in by_name and _compare(by_name[ref], by_name[arm], metric, pol).note
        ]
        models = sorted(
            {
                covariate.model_of(by_name[ref].units, by_name[arm].units, "host", metric)
                for _, ref, arm in _pairs(run, rows, v)
            }
        )
        lines.append(
            "- verdicts above: **adjusted for the host probe** (`--adjust host`: log value ~ arm + log probe, "
            f"{'; '.join(models) or 'per start'}; the arm coefficient's t interval on starts - 3 df)"
            + (
                f"; {', '.join(refused)}: cannot tell (the arms' probe difference is not bounded small enough)"
                if refused
                else ""
            )
        )
    elif pol.adjust == "state":
        fs = hoststate.spread([r.units for r in rows], metric)
        lines.append(
            "- verdicts above: **the host's fast state only** (`--adjust state`, bench.hoststate: start values over "
            "the repetitions the probe found fast; no slope fitted)"
            + (
                f"; start-to-start CV around the arms' means {fs[0] * 100:.1f} % over {fs[1]} starts raw, "
                f"{fs[2] * 100:.1f} % over the {fs[3]} with a fast value"
                if fs is not None
                else ""
            )
        )
    elif pol.adjust == "none":
        lines.append("- verdicts above are unadjusted (`--adjust host` would read them at a fixed host speed)")
    lines += ["", "| arm | start | " + metric + " | probe py µs | probe mem µs |", "|---|---|---|---|---|"]
    for r in rows:
        for u in r.units:
            st = u.host_probe.get("start") or {}
            m = u.value(metric)
            lines.append(
                f"| {r.name} | {u.round + 1} | {_fmt(m, 4)} | {_fmt(st.get('py_us'), 1)} | {_fmt(st.get('mem_us'), 1)} |"
            )
    return lines + [""]


_COUNTER_WORDS = {
    "host_steal_pct": "steal, scheduler's CPU(s)",
    "host_steal_pct_all": "steal, all CPUs",
    "host_irq_pct": "irq + softirq, scheduler's CPU(s)",
    "host_guest_pct_all": "guest, all CPUs",
    "sched_wait_pct": "scheduler run-queue wait (of run + wait)",
    "sched_run_pct": "scheduler on CPU (of wall)",
}


def _within(rows: list[ArmRow], metric: str, counter: str, per_start: bool) -> tuple[list[float], list[float]]:
    """(log metric, counter) pairs, each arm centred on its own means (an arm's effect is not the host's)."""
    xs: list[float] = []
    ys: list[float] = []
    for r in rows:
        pts = []
        for u in r.units:
            reps = [(m[metric], m[counter]) for m in u.reps if m.get(metric) and m.get(counter) is not None]
            if per_start and reps:
                pts.append((math.log(statistics.median(y for y, _ in reps)), statistics.fmean(c for _, c in reps)))
            elif not per_start:
                pts += [(math.log(y), c) for y, c in reps]
        if pts:
            my, mc = statistics.fmean(y for y, _ in pts), statistics.fmean(c for _, c in pts)
            ys += [y - my for y, _ in pts]
            xs += [c - mc for _, c in pts]
    return ys, xs


def _counters(rows: list[ArmRow], metric: str) -> list[str]:
    """The kernel's contention counters per repetition (bench.hostprobe.counters): free to sample, so they cannot
    perturb what they measure; how they relate to the metric, and what the per-repetition model makes of them."""
    from .hostprobe import COUNTERS

    present = [c for c in COUNTERS if any(m.get(c) is not None for r in rows for u in r.units for m in u.reps)]
    if not present:
        return []
    lines = [
        "## Contention counters (the kernel's, per repetition)",
        "",
        "Read from /proc/stat and the scheduler's /proc/PID/schedstat before and after every repetition (nothing "
        "runs to measure them). Correlations are within arms; the CV is the start-to-start CV of "
        f"`{metric}` around the arms' means after the per-repetition model (random intercept per start) with "
        "that counter (raw: the first figure).",
        "",
        "| counter | median % | Spearman per rep | per start | CV raw -> adjusted | slope (per 1 %) |",
        "|---|---|---|---|---|---|",
    ]
    for c in present:
        vals = [m[c] for r in rows for u in r.units for m in u.reps if m.get(c) is not None]
        ys, xs = _within(rows, metric, c, per_start=False)
        ys_s, xs_s = _within(rows, metric, c, per_start=True)
        groups = [covariate.rep_starts(r.units, metric, c) for r in rows]
        sp = covariate.spread_mixed([g for g in groups if g], c) if all(g is not None for g in groups) else None
        cvs = f"{sp.cv_raw * 100:.1f} % -> {sp.cv_adjusted * 100:.1f} %" if sp is not None else "-"
        slope = f"{sp.probe_slope / 100:+.4f} ± {sp.probe_slope_se / 100:.4f}" if sp is not None else "-"
        lines.append(
            f"| {_COUNTER_WORDS.get(c, c)} (`{c}`) | {statistics.median(vals):.2f} | "
            f"{_rank(ys, xs).removeprefix('- ')} | {_rank(ys_s, xs_s).removeprefix('- ')} | {cvs} | {slope} |"
        )
    lines.append("")
    return lines


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


def _whole_blocks(rows: list[ArmRow], v: store.StoreView) -> list[ArmRow]:
    """A block run's rows with only the blocks its plan read: the rounds its last conclusion names, else every
    round all of whose arms completed (a block cut between its unit_done records counts for nothing)."""
    read = next((c.get("block_rounds") for c in reversed(v.conclusions) if c.get("block_rounds") is not None), None)
    by_round: dict[int, set[str]] = {}
    for r in rows:
        for u in r.units:
            by_round.setdefault(u.round, set()).add(u.arm_key)
    whole = {
        u.round
        for r in rows
        for u in r.units
        if set(u.block.get("arms", [])) == by_round.get(u.round, set()) and (read is None or u.round in read)
    }
    return [ArmRow(r.name, r.key, r.label, [u for u in r.units if u.round in whole]) for r in rows]


def build_markdown(run_dir: Path, adjust: str | None = None) -> str:
    run, rows, v = load_rows(run_dir)
    if run.get("config", {}).get("concurrent"):
        rows = _whole_blocks(rows, v)
    cfg = run.get("config", {}) | ({"adjust": adjust} if adjust is not None else {})
    metric = cfg.get("metric", "step_ms_b1")
    pol = _policy(cfg)
    if (cfg.get("duet") or cfg.get("concurrent")) and pol.adjust != "none":
        raise RecordError(
            f"{run_dir}: a duet or block run has no covariate reading (its arms share the host in every unit); "
            f"`python -m bench report {run_dir}` without --adjust"
        )
    lines = _header(run_dir, run) + _method(cfg, pol, v) + _conclusion(run, rows, v, pol) + _arms(rows, metric)
    if cfg.get("duet"):
        lines += _duets(run, rows, pol, cfg)
    else:
        lines += _comparisons(run, rows, v, pol, metric)
    if cfg.get("concurrent"):
        lines += duet_report.block_lines(run, rows, cfg, pol.paired_confidence(pol.max_starts))
    lines += _host_probe(run_dir, run, rows, v, pol, metric)
    lines += _counters(rows, metric)
    lines += _set_cv(rows, metric) + _outputs(rows)
    lines += _startup(v) + _environment(rows, v)
    name = _plot_name(adjust)
    if (run_dir / name).exists():
        lines += [f"![plot]({name})", ""]
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


def plot(run_dir: Path, adjust: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run, rows, v = load_rows(run_dir)
    if run.get("config", {}).get("concurrent"):
        rows = _whole_blocks(rows, v)
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
    own = run.get("config", {}).get("adjust", "none")
    reading = adjust or own
    fig.suptitle(
        f"bench {run.get('kind')} {run.get('run_id')} ({', '.join(run.get('host', {}).get('gpus', [])) or 'no GPU'})"
        + (f"; raw values shown, verdicts read at a fixed host speed (--adjust {reading})" if reading != "none" else "")
    )
    fig.tight_layout()
    out = run_dir / _plot_name(adjust)
    try:
        data = png_bytes(fig, dpi=110)
    finally:
        plt.close(fig)
    write_whole(out, data, _again(run_dir, adjust))
    return out


def _plot_name(adjust: str | None) -> str:
    """plot.png is the run's own; another reading gets its own file (its title names the reading)."""
    return "plot.png" if adjust is None else f"plot-adjust-{adjust}.png"


def write_report(run_dir: Path, adjust: str | None = None) -> Path:
    """report.md (and plot.png) of run_dir; with `adjust`, report-adjust-<adjust>.md read that way instead."""
    run_dir = Path(run_dir)
    note = ""
    try:
        plot(run_dir, adjust)
    except ImportError as e:
        # sglang installs do not always carry matplotlib (only its "test" extra does); the data is all in the
        # JSONL, so the plot can be made later on any machine with `python -m bench report RUN_DIR`.
        note = f"No plot: {e}. Run `python -m bench report {run_dir}` where matplotlib is installed."
    except ValueError as e:  # nothing measured yet: the markdown still says so
        note = f"No plot: {e}"
    if note:
        print(f"bench report: {note}")
    out = run_dir / ("report.md" if adjust is None else f"report-adjust-{adjust}.md")
    text = build_markdown(run_dir, adjust) + ("\n" + note + "\n" if note else "") + "\n"
    write_whole(out, text.encode(), _again(run_dir, adjust))
    return out


def _again(run_dir: Path, adjust: str | None) -> str:
    """The fix a failed write names: everything is in the store, so the same command again once there is room."""
    return f"free space, then `python -m bench report {run_dir}" + (f" --adjust {adjust}`" if adjust else "`")
