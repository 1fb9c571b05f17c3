"""Markdown report + PNG plot of one run's JSONL store (bench/results/<date>-<gpu>/<run>/results.jsonl).

Everything is recomputed from the store, so a report can be regenerated (`python -m bench report DIR`) after
an interrupted run, a resume, or a change of alpha/min-effect.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from . import store
from .stats import compare, cv, median_ci

# (metric, label, lower is better)
METRICS = (("step_ms_b1", "step ms (batch 1)", True), ("step_ms_bc", "step ms (concurrent)", True),
           ("tok_s_b1", "tok/s (batch 1)", False), ("tok_s_bc", "tok/s (concurrent)", False),
           ("eagle_draft_ms_b1", "EAGLE draft p50 ms (b1)", True),
           ("eagle_verify_ms_b1", "EAGLE verify p50 ms (b1)", True),
           ("eagle_draft_extend_ms_b1", "EAGLE draft-extend p50 ms (b1)", True),
           # oea_topk's SGLANG_OEA_STATS: fewer distinct experts per routing call is what OEA is for
           ("oea_distinct_experts_b1", "distinct experts / routing call (b1)", True),
           ("oea_distinct_experts_bc", "distinct experts / routing call (concurrent)", True))


@dataclass
class ArmRow:
    name: str
    key: str
    label: str
    units: list[store.Unit]

    def values(self, metric: str) -> list[float]:
        out = []
        for u in self.units:
            out.extend(float(r[metric]) for r in u.reps if r.get(metric) is not None
                       and not (isinstance(r[metric], float) and math.isnan(r[metric])))
        return out

    def phase_p50(self, phase: str, which: str = "eagle_b1") -> list[float]:
        out = []
        for u in self.units:
            for r in u.reps:
                t = r.get(which) or {}
                v = (t.get(phase) or {}).get("p50_ms")
                if v is not None:
                    out.append(float(v))
        return out

    def hashes(self, which: str = "hash_b1") -> set[str]:
        return {r.get(which) for u in self.units for r in u.reps if r.get(which)}

    @property
    def n_reps(self) -> int:
        return sum(len(u.reps) for u in self.units)


def _fmt(x, nd=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{nd}f}"


def load_rows(run_dir: Path) -> tuple[dict, list[ArmRow], store.StoreView]:
    recs = list(store.read(run_dir / "results.jsonl"))
    runs = [r for r in recs if r.get("type") == "run"]
    if not runs:
        raise FileNotFoundError(f"{run_dir}/results.jsonl has no run record")
    run = runs[0]
    v = store.view(recs, signature=run.get("signature"))
    names: dict[str, tuple[str, str]] = {}  # arm name -> (key, label)
    for a in run.get("arms", []):
        names.setdefault(a["name"], (a["key"], ",".join(a["patches"]) or "(none)"))
    for b in v.bisects:
        for p in b.get("probes", []):
            names.setdefault(p["arm"], (p["key"], ",".join(p["patches"]) or "(none)"))
    rows = [ArmRow(n, k, lbl, v.units_of(k)) for n, (k, lbl) in names.items()]
    return run, rows, v


def build_markdown(run_dir: Path) -> str:
    run, rows, v = load_rows(run_dir)
    cfg = run.get("config", {})
    metric = cfg.get("metric", "step_ms_b1")
    alpha, min_eff = cfg.get("alpha", 0.01), cfg.get("min_effect", 0.02)
    host = run.get("host", {})
    by_name = {r.name: r for r in rows}
    all_units = list(v.units.values())
    lines = [f"# bench {run.get('kind')} — {run.get('time', '')[:10]} — {', '.join(host.get('gpus', [])) or 'no GPU'}",
             "", f"run `{run.get('run_id')}` · signature `{run.get('signature')}` · host `{host.get('hostname')}`",
             "", "Command:", "", "```", _command(run_dir, run), "```", "",
             "Versions: " + ", ".join(f"{k} {val}" for k, val in sorted(host.get("versions", {}).items())), ""]
    starts = len(all_units)
    reps = sum(len(u.reps) for u in all_units)
    gpu_s = sum(u.wall_s for u in all_units)
    wl = cfg.get("workload", {})
    lines += ["## Method", "",
              f"- {cfg.get('restarts')} server start(s) per arm x {cfg.get('reps_per_start')} measured repetition(s) "
              f"per start, {cfg.get('warmup_reps')} warm-up repetition(s) per start discarded; arms interleaved "
              f"round by round.",
              f"- Workload per repetition: {wl.get('b1_requests')} sequential requests (batch 1) then "
              f"{wl.get('concurrency')} concurrent, {wl.get('max_new_tokens')} tokens each, greedy, ignore_eos.",
              f"- Primary metric `{metric}`: median per-step time from the server's step_time_dict "
              f"(SGLANG_RECORD_STEP_TIME=1) over each repetition's phase; median across repetitions with a "
              f"95% percentile-bootstrap CI; Mann-Whitney U two-sided, a change is called only when "
              f"p < {alpha} and |change| >= {min_eff * 100:.1f}%.",
              f"- {'Repetitions within one server start are not independent samples of the start-to-start variation (bimodal on this stack): with 1 start per arm, p-values describe this start only.' if cfg.get('restarts') == 1 else 'Repetitions from several starts are pooled; between-start variation is part of the samples.'}",
              f"- Measured: {starts} completed server start(s), {reps} repetitions, {gpu_s / 60:.1f} min of "
              f"server wall time (start to stop, all units in this store incl. reused)."
              + (f" {v.partial_reps} repetition(s) from interrupted starts ignored." if v.partial_reps else ""),
              ""]
    # arms table
    has_eagle = any(r.phase_p50("verify") for r in rows)
    head = f"| arm | patches | starts | reps | {metric} median [95% CI] | CV | step ms conc. | tok/s b1 | tok/s conc. | accept len |"
    sep = "|---|---|---|---|---|---|---|---|---|---|"
    if has_eagle:
        head += " draft / verify / draft-extend p50 ms |"
        sep += "---|"
    # only stores measured with SGLANG_OEA_STATS=1 have it: older ones keep their table
    has_oea = any(r.values("oea_distinct_experts_b1") or r.values("oea_distinct_experts_bc") for r in rows)
    if has_oea:
        head += " distinct experts / routing call b1 / conc. |"
        sep += "---|"
    lines += ["## Arms", "", head, sep]
    for r in rows:
        xs = r.values(metric)
        ci = median_ci(xs)
        acc = r.values("accept_len_b1")
        cells = [r.name, f"`{r.label}`", str(len(r.units)), str(r.n_reps),
                 f"{_fmt(ci.median, 4)} [{_fmt(ci.low, 4)}, {_fmt(ci.high, 4)}]", f"{_fmt(cv(xs) * 100, 2)}%",
                 _fmt(_med(r.values("step_ms_bc")), 4), _fmt(_med(r.values("tok_s_b1")), 1),
                 _fmt(_med(r.values("tok_s_bc")), 1), _fmt(_med(acc), 2)]
        if has_eagle:
            cells.append(" / ".join(_fmt(_med(r.phase_p50(p)), 3) for p in ("draft", "verify", "draft_extend")))
        if has_oea:
            cells.append(" / ".join(_fmt(_med(r.values(m_)), 2)
                                    for m_ in ("oea_distinct_experts_b1", "oea_distinct_experts_bc")))
        lines.append("| " + " | ".join(cells) + " |")
    fps = {r.name: sorted({u.fingerprint for u in r.units}) for r in rows}
    lines += ["", "Fingerprints: " + "; ".join(f"{n} `{','.join(f) or '-'}`" for n, f in fps.items()), ""]
    if has_oea:
        lines += ["Distinct experts: per phase, the oea_stats totals (SGLANG_OEA_STATS=1) after minus before it: "
                  "distinct routed experts summed over the routing calls of at most SGLANG_OEA_MAX_TOKENS rows "
                  "(decode and verify; a prefill that small too), padding rows excluded, divided by their number; "
                  "median over repetitions.", ""]
    # output hashes
    flags = _output_flags(rows, run)
    if not flags:
        # "identical" needs outputs: a run whose starts all failed has none to compare
        measured = [r.name for r in rows if r.n_reps]
        flags = ["No repetition completed: no outputs to compare."] if not measured else [
            "All arms produced identical batch-1 greedy outputs in every repetition." if len(measured) == len(rows)
            else f"Identical batch-1 greedy outputs in every repetition of {', '.join(measured)}; "
                 f"no repetition completed in {', '.join(r.name for r in rows if not r.n_reps)}."]
    lines += ["## Greedy outputs", ""] + flags + [""]
    # comparisons
    comps = [c for c in (run.get("comparisons") or []) if c[1] in by_name and c[2] in by_name]
    if comps:
        metrics = [m_ for m_ in METRICS if m_[0] != metric]
        metrics.insert(0, (metric, dict((m_[0], m_[1]) for m_ in METRICS).get(metric, metric),
                           not metric.startswith("tok_s")))
        primary, others = [], []
        for section, ref, arm in comps:
            for i, (m, label, lower) in enumerate(metrics):
                a, b = by_name[ref].values(m), by_name[arm].values(m)
                if not a or not b:
                    continue
                c = compare(a, b, alpha=alpha, min_effect=min_eff, lower_is_better=lower)
                verdict = f"**{c.verdict}**" if c.verdict in ("regression", "improvement") else c.verdict
                row = (f"| {section} | {ref} | {arm} | {label} | {c.rel_change * 100:+.2f}% | "
                       f"{_fmt(c.p_value, 4)} | {verdict} |")
                (primary if i == 0 else others).append(row)
        head = ["| section | reference | arm | metric | change | p (MWU) | verdict |", "|---|---|---|---|---|---|---|"]
        lines += [f"## Comparisons: primary metric `{metric}`", ""] + head + primary + [""]
        if others:
            lines += ["## Comparisons: other metrics", ""] + head + others + [""]
    cvs = [(r.name, cv(r.values("step_ms_b1"))) for r in rows if len(r.values("step_ms_b1")) >= 2]
    if cvs:
        worst = max(cvs, key=lambda x: x[1])
        lines += [f"Step-time CV at batch 1: worst arm {worst[0]} {worst[1] * 100:.2f}% (target < 2%); "
                  f"per arm: " + ", ".join(f"{n} {c_ * 100:.2f}%" for n, c_ in cvs) + ".", ""]
    for b in v.bisects:
        lines += ["## Bisect", "", f"good `{b['good']}` -> bad `{b['bad']}`; candidates: "
                  f"{', '.join(b['candidates']) or '(none)'}",
                  f"Endpoint: bad vs good {b['endpoint']['rel_change'] * 100:+.2f}%, p {_fmt(b['endpoint']['p_value'], 5)}"
                  f" -> {b['endpoint']['verdict']}", "", "| probe | patches | median | vs good | p | verdict |",
                  "|---|---|---|---|---|---|"]
        for p in b["probes"]:
            vg = p["vs_good"]
            lines.append(f"| {p['arm']} | `{','.join(p['patches'])}` | {_fmt(p['median'], 4)} | "
                         f"{vg['rel_change'] * 100:+.2f}% | {_fmt(vg['p_value'], 5)} | {p['verdict']} |")
        lines += ["", f"**Culprit: {b['culprit'] or 'none'}** — {b['reason']}. {b['n_probes']} verdict(s) "
                  f"(bound ceil(log2 n)+1 = {b['max_expected_probes']}), {b['server_starts_this_run']} server "
                  f"start(s) in this run, {b['elapsed_s'] / 60:.1f} min wall.", ""]
    nccl = [(r.name, u) for r in rows for u in r.units if u.nccl_env_lines]
    if nccl:
        lines += ["## Environment seen by each rank (nccl_env_log)", ""]
        for name, u in nccl:
            lines.append(f"- {name} round {u.round + 1}: {len(u.nccl_env_lines)} rank line(s)")
            lines += [f"    - `{ln}`" for ln in u.nccl_env_lines]
        lines.append("")
    if v.identity_warnings:
        lines += ["## Identity warnings", ""] + [f"- {w.get('arm')}: {'; '.join(w.get('warnings', []))}"
                                               for w in v.identity_warnings] + [""]
    if v.failures:
        lines += ["## Failures", ""]
        for f in v.failures:
            lines.append(f"- {f.get('arm')} round {f.get('round', 0) + 1} ({f.get('stage')}): {f.get('error')}")
            cause = _exception_line(f.get("log_tail") or "")
            if cause:
                lines.append(f"    - cause, from the server log: `{cause}`")
        lines.append("")
    if (run_dir / "plot.png").exists():
        lines += ["![plot](plot.png)", ""]
    return "\n".join(lines)


# the last line of a Python traceback ("ValueError: ..."), with or without a log prefix before it
_EXC_LINE = re.compile(r"(?:^|\s)((?:[A-Za-z_][\w.]*)?(?:Error|Exception)(?::\s.*|$))")


def _exception_line(log_tail: str) -> str | None:
    """What a failed server died of: the launcher's own error says only that it exited."""
    found = [m.group(1).strip() for ln in log_tail.splitlines() if (m := _EXC_LINE.search(ln))]
    return found[-1][:400] if found else None


def _med(xs):
    return statistics.median(xs) if xs else None


def _command(run_dir: Path, run: dict) -> str:
    p = run_dir / "command.txt"
    return p.read_text().strip() if p.exists() else " ".join(run.get("argv", []))


def _output_flags(rows: list[ArmRow], run: dict) -> list[str]:
    out = []
    ref = rows[0] if rows else None
    for r in rows:
        hs = r.hashes()
        if len(hs) > 1:
            out.append(f"- **{r.name}: batch-1 outputs differ between its own repetitions** "
                       f"({len(hs)} distinct hashes): non-deterministic decoding; step times still reported.")
        if ref is not None and r is not ref and ref.hashes() and hs and hs != ref.hashes():
            out.append(f"- **{r.name}: OUTPUT CHANGED vs {ref.name}** (batch-1 greedy hash {sorted(hs)} vs "
                       f"{sorted(ref.hashes())}). Not averaged away: this arm changes what the model generates.")
        hc = r.hashes("hash_bc")
        if len(hc) > 1:
            out.append(f"- {r.name}: concurrent-batch outputs vary between repetitions ({len(hc)} hashes); batch "
                       f"composition depends on arrival timing, so this is informational only.")
    return out


def plot(run_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run, rows, _ = load_rows(run_dir)
    metric = run.get("config", {}).get("metric", "step_ms_b1")
    rows = [r for r in rows if r.values(metric)]
    if not rows:
        raise ValueError("no repetition measured: nothing to plot")
    has_eagle = any(r.phase_p50("verify") for r in rows)
    ncols = 3 if has_eagle else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols + 1, 4.5))
    names = [r.name for r in rows]
    for ax, (m, label) in zip(axes[:2], ((metric, metric), ("tok_s_b1", "tok/s (batch 1)"))):
        for i, r in enumerate(rows):
            xs = r.values(m)
            if not xs:
                continue
            ax.scatter([i + (j % 7 - 3) * 0.03 for j in range(len(xs))], xs, s=12, alpha=0.6)
            ci = median_ci(xs)
            if not math.isnan(ci.low):
                ax.errorbar([i + 0.25], [ci.median], yerr=[[ci.median - ci.low], [ci.high - ci.median]],
                            fmt="s", color="black", capsize=4)
            else:
                ax.plot([i + 0.25], [ci.median], "s", color="black")
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
        ax.set_title(f"{label}: samples, median + 95% CI")
        ax.grid(alpha=0.3)
    if has_eagle:
        ax = axes[2]
        bottom = [0.0] * len(rows)
        for phase in ("draft", "verify", "draft_extend"):
            vals = [_med(r.phase_p50(phase)) or 0.0 for r in rows]
            ax.bar(range(len(rows)), vals, bottom=bottom, label=phase)
            bottom = [b + x for b, x in zip(bottom, vals)]
        ax.set_xticks(range(len(rows)), names, rotation=30, ha="right")
        ax.set_title("EAGLE phase p50 (ms, median over reps)")
        ax.legend()
    fig.suptitle(f"bench {run.get('kind')} {run.get('run_id')} ({', '.join(run.get('host', {}).get('gpus', [])) or 'no GPU'})")
    fig.tight_layout()
    out = run_dir / "plot.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    note = ""
    try:
        plot(run_dir)
    except ImportError as e:
        # sglang installs do not always carry matplotlib (only its "test" extra does); the data is all in the
        # JSONL, so the plot can be made later on any machine with `python -m bench report RUN_DIR`.
        note = f"No plot: {e}. Run `python -m bench report {run_dir}` where matplotlib is installed."
    except ValueError as e:  # nothing measured yet: the markdown still says so
        note = f"No plot: {e}"
    if note:
        print(f"bench report: {note}")
    out = run_dir / "report.md"
    out.write_text(build_markdown(run_dir) + ("\n" + note + "\n" if note else "") + "\n")
    return out
