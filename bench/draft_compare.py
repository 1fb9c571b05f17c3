"""`python -m bench.draft_compare --plain RUN --eagle RUN... [--train-json F] [--out F]`: EAGLE-3 runs with a
trained draft against plain decoding: accept length, tok/s ratio, and whether each arm's batch-1 greedy output is
plain decoding's (one hash over every repetition; concurrent outputs vary with arrival: shown, not judged; OEA
arms route verify otherwise: not expected equal). Exit 0 lossless, 1 not, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from . import store
from .dummy_init import from_env
from .errors import DraftInputError, RecordError, WriteFailed
from .machine import gpu_kind

_METRICS = ("accept_len_b1", "accept_len_bc", "tok_s_b1", "tok_s_bc")


def _arms(run_dir: Path) -> tuple[dict, list[dict]]:
    path = run_dir / "results.jsonl"
    records = list(store.read(path))
    runs = [r for r in records if r.get("type") == "run"]
    if not runs:
        raise ValueError(f"{path}: no run record (not a bench run dir?)")
    v = store.view(records)
    out = []
    for arm in v.arms:
        units = v.units_of(arm["key"])
        reps = [m for u in units for m in u.reps]
        if not reps:
            continue
        env = {**runs[0].get("config", {}).get("env", {}), **(arm.get("env") or {})}
        row = {
            "run": run_dir.name,
            "arm": arm["name"],
            "oea_k0": _k0(env.get("SGLANG_OEA_K0")),
            "starts": len(units),
            "hash_b1": {m["hash_b1"] for m in reps},
            "hash_bc": {m["hash_bc"] for m in reps},
            "dummy_init": env.get("SGLANG_DUMMY_INIT"),  # the weights its server drew (--env / --arm-env)
        }
        for k in _METRICS:
            # a start's value is its median repetition, the arm's the median start (bench/README.md)
            vals = [statistics.median(x) for x in ([m[k] for m in u.reps if m.get(k) is not None] for u in units) if x]
            row[k] = statistics.median(vals) if vals else None
            row[f"starts_{k}"] = vals
        out.append(row)
    return runs[0], out


def _k0(value) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


OEA_NOTE = "not expected to be equal (OEA routes per batch)"
PLAIN_NONDET = "plain decoding is not deterministic here"


def _verdict(r: dict, p: dict) -> tuple[str, bool]:
    """(the batch-1 outputs' cell, whether it fails). One output over the repetitions in any arm, OEA's too."""
    if r["oea_k0"] > 0:
        if len(r["hash_b1"]) > 1:
            return f"**NO**: {len(r['hash_b1'])} distinct over its repetitions (not deterministic)", True
        return OEA_NOTE, False
    if len(p["hash_b1"]) > 1:
        # no one output to hold EAGLE-3 to: the fault is plain decoding's
        return f"? ({PLAIN_NONDET}: {len(p['hash_b1'])} distinct)", True
    same = len(r["hash_b1"]) == 1 and r["hash_b1"] == p["hash_b1"]
    return ("yes" if same else "**NO**"), not same


def _departures(run: Path, judged: list[tuple[dict, bool, str | None]], first: str | None = None) -> list[str]:
    """Where one EAGLE run's departures come from, held against its first arm (SPEED_ARMS puts the pristine set
    first): a departure the baseline shares is not the set's, one it lacks is. `judged`: (arm, departs, why it
    has no plain output of its own, or None); `first`: the recorded first arm, which `judged` lacks where it
    completed no start."""
    if len(judged) < 2 or not any(failed for _, failed, why in judged if why is None):
        return []
    (base, base_failed, base_why), rest = judged[0], [x for x in judged[1:] if x[2] is None]
    b = base["arm"]
    if first is not None and b != first:
        b, base_why = first, "no completed start"
    if base_why is not None:
        return [
            f"{run}: its first arm {b} cannot be its baseline ({base_why}): where a departure comes from is not told"
        ]
    out = []
    for r, failed, _ in rest:
        a, odd = r["arm"], [f"{x['arm']} ({len(x['hash_b1'])} outputs)" for x in (base, r) if len(x["hash_b1"]) > 1]
        if not failed:
            says = f"keeps plain decoding's output while the baseline arm {b} departs" if base_failed else ""
        elif not base_failed:
            says = f"departs while the baseline arm {b} keeps plain decoding's output: it comes with {a}'s patches "
            says += "(bisect between the two arms' sets)"
        elif odd:
            says = f"and the baseline arm {b} both depart, and {' and '.join(odd)} not deterministic over its "
            says += "repetitions: the set's share cannot be told apart"
        elif r["hash_b1"] == base["hash_b1"]:
            says = f"departs as the baseline arm {b} does, with the same output: not the set's doing (SGLang's "
            says += "EAGLE-3 departs on this model without it)"
        else:
            says = f"and the baseline arm {b} both depart, with different outputs: the baseline departs without the "
            says += f"set, and {a}'s patches change EAGLE-3's output further; the set's share cannot be told apart"
        out += [f"{run}: {a} {says}"] if says else []
    return out


def _unjudged(r: dict, p: dict) -> str | None:
    """Why an EAGLE arm has no plain output of its own to be held to (None: it has)."""
    if r["oea_k0"] > 0:
        return f"an OEA arm (K0={r['oea_k0']}), not expected to decode as plain decoding does"
    if p["arm"] != r["arm"]:
        return f"no plain arm of its name: held against plain {p['arm']}, another set's output"
    if len(p["hash_b1"]) > 1:
        return f"plain {p['arm']} is not deterministic"
    return None


def _made_elsewhere(seqs_source: dict, plain_run: dict, train_json: Path) -> str:
    gpus = seqs_source.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        raise ValueError(
            f"{train_json}: sequences.source.source.gpus: expected a list of GPU names (as bench.hostinfo records "
            f"them), got {gpus!r}: make the sequences again with bench server-seqs, or remove the key"
        )
    # kinds, not lists: one H100 and eight are one kind
    made = sorted({gpu_kind(g) for g in gpus or []})
    here = sorted({gpu_kind(g) for g in (plain_run.get("host") or {}).get("gpus") or []})
    if made and here and made != here:  # near ties: another GPU's kernels round otherwise
        return (
            f"differs: the sequences were made on {', '.join(made)}, this plain run ran on {', '.join(here)}; "
            "make them on this machine (bench server-seqs) for a draft that follows this server."
        )
    return (
        "differs: the server decoded these prompts otherwise when the sequences were made (another tree, set, "
        "server args" + ("" if made and here else " or GPU") + "?)."
    )


def _weights(recorded, rows: list[dict]) -> str:
    """What an output comparison on the draft's weights (train.json's) can show, where every run drew them too."""
    if not isinstance(recorded, dict):
        return "not recorded in train.json"
    env = {k: str(v) for k, v in recorded.items() if v is not None}
    try:
        init = from_env(env)
    except DraftInputError:
        return f"unreadable dummy_init {recorded!r}"
    other = [r for r in rows if r.get("dummy_init") != init.mode]
    if other:
        ran = sorted({str(r.get("dummy_init")) for r in other})
        arms = ", ".join(f"{r['run']} {r['arm']}" for r in other)
        return (
            f"{init.describe()}, but {arms} ran "
            f"SGLANG_DUMMY_INIT={' / '.join(ran)} (as their records say): another model than the draft's, so "
            "neither its accept length nor the outputs say anything of this draft"
        )
    if init.mode == "successor":
        return f"{init.describe()}: greedy choices by many logits, so outputs differ only by a real departure"
    return f"{init.describe()}: greedy choices near ties, so another kernel's rounding alone can change the output"


def _bc(r: dict, p: dict) -> str:
    if len(r["hash_bc"]) == 1 and r["hash_bc"] == p["hash_bc"]:
        return "same"
    return f"differ ({len(r['hash_bc'])} distinct; plain {len(p['hash_bc'])})"


def _fmt(x, nd=2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def ratio_interval(
    eagle: list[float], plain: list[float], confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """The ratio of geometric means of start values with Welch's interval on the logs (the start is the unit,
    bench/README.md); None below two starts a side."""
    if len(eagle) < 2 or len(plain) < 2 or min(eagle + plain) <= 0:
        return None
    import numpy as np
    from scipy import stats

    le, lp = np.log(eagle), np.log(plain)
    ci = stats.ttest_ind(le, lp, equal_var=False).confidence_interval(confidence)
    return float(np.exp(le.mean() - lp.mean())), float(np.exp(ci.low)), float(np.exp(ci.high))


def _speed_lines(pairs: list[tuple[dict, dict]], target: float | None) -> list[str]:
    lines = [
        "",
        "Batch-1 tok/s against plain decoding with the start as the unit: the ratio of geometric means of start "
        "values, 95 % Welch interval on their logs"
        + (f"; the target {target:g}x is shown only when the interval's low end reaches it" if target else "")
        + ":",
    ]
    for r, p in pairs:
        e, q = r["starts_tok_s_b1"], p["starts_tok_s_b1"]
        got = ratio_interval(e, q)
        if got is None:
            lines.append(
                f"- {r['run']} {r['arm']} vs {p['arm']}: {len(e)} vs {len(q)} starts, no interval (2 a side at least)"
            )
            continue
        ratio, lo, hi = got
        says = ""
        if target:
            says = (
                f": **{target:g}x shown**"
                if lo >= target
                else f": **below {target:g}x**"
                if hi < target
                else f": {target:g}x **cannot tell** at {len(e)} vs {len(q)} starts"
            )
        lines.append(
            f"- {r['run']} {r['arm']} vs {p['arm']} (plain): {ratio:.2f}x [{lo:.2f}, {hi:.2f}], "
            f"{len(e)} vs {len(q)} starts{says}"
        )
    return lines


def compare(
    plain_dir: Path, eagle_dirs: list[Path], train_json: Path | None = None, target: float | None = None
) -> tuple[str, bool]:
    plain_run, plain = _arms(plain_dir)
    if not plain:
        raise ValueError(f"{plain_dir}: no completed start of plain decoding")
    by_name = {p["arm"]: p for p in plain}
    wl = plain_run.get("config", {}).get("workload", {})
    lines = [
        "# EAGLE-3 with a trained draft vs plain decoding",
        "",
        f"Plain decoding: {plain_dir}; workload {json.dumps(wl)}. Each arm's start value is the median of its "
        "repetitions, the arm's the median of its starts.",
        "",
        "| run | arm | vs plain | starts | accept b1 | accept bc | tok/s b1 | x plain | tok/s bc | x plain "
        "| b1 outputs = plain | bc outputs (not judged) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['run']} | {p['arm']} (plain) | - | {p['starts']} | - | - | {_fmt(p['tok_s_b1'], 1)} | 1.00 | "
        f"{_fmt(p['tok_s_bc'], 1)} | 1.00 | - | {len(p['hash_bc'])} distinct |"
        for p in plain
    ]
    lossless, eagle_rows, oea_arms, nondet = True, [], [], sorted(p["arm"] for p in plain if len(p["hash_b1"]) > 1)
    pairs: list[tuple[dict, dict]] = []
    departures: list[str] = []
    for d in eagle_dirs:
        run, rows = _arms(d)
        judged: list[tuple[dict, bool, str | None]] = []
        if run.get("config", {}).get("workload") != wl:
            lines.append(
                f"\n**{d}: another workload than plain's** ({json.dumps(run.get('config', {}).get('workload'))})"
            )
            lossless = False
        for r in rows:
            p = by_name.get(r["arm"], plain[0])
            cell, failed = _verdict(r, p)
            lossless &= not failed
            judged.append((r, failed, _unjudged(r, p)))
            eagle_rows.append(r)
            pairs.append((r, p))
            if r["oea_k0"] > 0:
                oea_arms.append(f"{r['arm']} (K0={r['oea_k0']})")
            ratio = [(r[k] / p[k]) if r[k] and p[k] else None for k in ("tok_s_b1", "tok_s_bc")]
            lines.append(
                f"| {r['run']} | {r['arm']} | {p['arm']} | {r['starts']} | {_fmt(r['accept_len_b1'])} | "
                f"{_fmt(r['accept_len_bc'])} | {_fmt(r['tok_s_b1'], 1)} | {_fmt(ratio[0])} | "
                f"{_fmt(r['tok_s_bc'], 1)} | {_fmt(ratio[1])} | {cell} | {_bc(r, p)} |"
            )
        departures += _departures(d, judged, next((a.get("name") for a in run.get("arms") or []), None))
    lines += _speed_lines(pairs, target)
    if train_json is not None:
        rec = json.loads(train_json.read_text())
        n = str(wl.get("max_new_tokens"))
        ref = (rec.get("reference_hash_b1") or {}).get(n)
        m = rec.get("metrics", {})
        first = by_name.get("full", plain[0])
        src = (rec.get("sequences") or {}).get("source") or {}
        server = src.get("generated_by", "").startswith("the server")
        what = "training sequences' (the server's own, bench server-seqs)" if server else "reference target's"
        bench = (src.get("source") or {}).get("bench") or {}
        b1n, want_b1n = bench.get("b1_requests", 2), wl.get("b1_requests")  # older files asked for 2
        made = bench.get("hash_b1", {}).get(n) if want_b1n in (None, b1n) else None
        unrecorded = server and made is None and bool(bench)  # without a bench record: the sequences' own hash
        if unrecorded:
            ref = None
        if server and made:  # the server's own reply when the sequences were made
            ref, what = made, "plain server's (when bench server-seqs made the training sequences)"
        in_server = ", ".join(f"{r['arm']} {_fmt(r['accept_len_b1'])}" for r in eagle_rows)
        lines += [
            "",
            f"Draft: {train_json.parent} (trained on {rec.get('device')} in {rec.get('seconds')}"
            + (
                f"; on {src.get('file')}, the reference's argmax agreeing at {src.get('reference_agrees')}"
                if server
                else ""
            )
            + f"; target weights: {_weights(rec.get('dummy_init'), [*plain, *eagle_rows])}"
            + f"). Accept length at batch 1, in the server: {in_server or '-'}; simulated at training: the "
            f"bench's prompts {m.get('bench_prompts', {}).get('accept_length')}, held-out prompts "
            f"{m.get('held_out', {}).get('accept_length')}.",
            f"The {what} batch-1 greedy hash at {n} tokens: {ref}; plain {first['arm']}'s: "
            f"{', '.join(sorted(first['hash_b1']))} -> "
            + (
                "equal: the draft was trained on the continuation the server decodes."
                if ref is not None and {ref} == first["hash_b1"]
                else (
                    f"not recorded for {want_b1n} b1 requests at {n} tokens (bench server-seqs hashed "
                    f"{b1n} b1 requests at {', '.join(sorted(bench.get('hash_b1', {}))) or 'no length'}): no "
                    "check."
                    if unrecorded
                    else _made_elsewhere(src.get("source") or {}, plain_run, train_json)
                    if server
                    else "differs (the server's bf16 kernels or its detokenized text part from the reference "
                    "somewhere in the continuation; the accept lengths above say how much it matters)."
                )
            ),
        ]
    if departures:
        lines += ["", "Where a departure comes from (each EAGLE run's first arm is its baseline):"]
        lines += [f"- {x}" for x in departures]
    lines += [
        "",
        "EAGLE-3 batch-1 greedy output = plain decoding in every arm where it must be: "
        + ("yes" if lossless else (f"unknown, {PLAIN_NONDET} ({', '.join(nondet)})" if nondet else "**NO**"))
        + (
            f" ({', '.join(oea_arms)}: not expected to be equal, OEA routes on the union of a batch's top-k0 "
            "experts, so verify (4 tokens) and decode (1) route differently)"
            if oea_arms
            else ""
        )
        + ". Concurrent-batch outputs are shown, not judged: they vary between repetitions with arrival timing.",
    ]
    return "\n".join(lines) + "\n", lossless


def _ratio(s: str) -> float:
    if not float(s) > 0:  # a ValueError or this: argparse's exit 2 names the flag
        raise argparse.ArgumentTypeError(f"{s}: give a ratio above 0 (e.g. 1.5)")
    return float(s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.draft_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plain", type=Path, required=True)
    ap.add_argument("--eagle", type=Path, action="append", required=True)
    ap.add_argument("--train-json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--target-ratio", type=_ratio, default=None, metavar="R", help="is tok/s b1 shown >= R x plain?")
    a = ap.parse_args(argv)
    try:
        text, lossless = compare(a.plain, a.eagle, a.train_json, a.target_ratio)
    except (OSError, ValueError, KeyError, RecordError) as e:  # exit 1 is the answer "not lossless"
        print(f"draft_compare: {e}", file=sys.stderr)
        return 2
    if a.out:
        try:
            write_out(a.out, text)
        except (OSError, WriteFailed) as e:
            print(f"draft_compare: --out {a.out}: {e}", file=sys.stderr)
            return 2
    print(text, end="")
    return 0 if lossless else 1


def write_out(path: Path, text: str) -> None:
    """A summary written whole (a kill leaves the previous one), its directory made first."""
    from .store import write_whole

    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, text.encode(), "give --out a writable place")


if __name__ == "__main__":
    raise SystemExit(main())
