"""EAGLE-3 runs with a trained draft against plain decoding, from their stores (bench/gpu_runs.sh's trained
steps): accept length, tok/s and its ratio to plain decoding at batch 1 and the concurrent batch, and whether
each arm's greedy outputs are plain decoding's, token for token.

    python -m bench.draft_compare --plain RUN_DIR --eagle RUN_DIR [--eagle RUN_DIR ...] [--train-json F] [--out F]

An EAGLE arm is held against the plain arm of its name (same patches and variables: speculative decoding is
lossless only against the same target numerics, and OEA's K0 changes them), else the plain run's first arm.
Exit 0 when every EAGLE arm's outputs equal its plain arm's in every repetition, 1 otherwise (2: bad input).
With --train-json (bench train-draft's record) it also says whether the plain server's batch-1 greedy hash is
the reference target's: equal means the server's target is the one the draft was trained against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from . import store

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
        row = {
            "run": run_dir.name,
            "arm": arm["name"],
            "starts": len(units),
            "hash_b1": {m["hash_b1"] for m in reps},
            "hash_bc": {m["hash_bc"] for m in reps},
        }
        for k in _METRICS:
            # a start's value is its median repetition, the arm's the median start (bench/README.md)
            vals = [statistics.median(x) for x in ([m[k] for m in u.reps if m.get(k) is not None] for u in units) if x]
            row[k] = statistics.median(vals) if vals else None
        out.append(row)
    return runs[0], out


def _fmt(x, nd=2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def compare(plain_dir: Path, eagle_dirs: list[Path], train_json: Path | None = None) -> tuple[str, bool]:
    """Each EAGLE arm against the plain arm of the same name (plain decoding under the same patches and
    variables, e.g. OEA's K0), else against the plain run's first arm."""
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
        "| run | arm | vs plain | starts | accept b1 | accept bc | tok/s b1 | x plain | tok/s bc | x plain | outputs = plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {p['run']} | {p['arm']} (plain) | - | {p['starts']} | - | - | {_fmt(p['tok_s_b1'], 1)} | 1.00 | "
        f"{_fmt(p['tok_s_bc'], 1)} | 1.00 | - |"
        for p in plain
    ]
    lossless = True
    for d in eagle_dirs:
        run, rows = _arms(d)
        if run.get("config", {}).get("workload") != wl:
            lines.append(
                f"\n**{d}: another workload than plain's** ({json.dumps(run.get('config', {}).get('workload'))})"
            )
            lossless = False
        for r in rows:
            p = by_name.get(r["arm"], plain[0])
            same = r["hash_b1"] == p["hash_b1"] and r["hash_bc"] == p["hash_bc"] and len(r["hash_b1"]) == 1
            lossless &= same
            ratio = [(r[k] / p[k]) if r[k] and p[k] else None for k in ("tok_s_b1", "tok_s_bc")]
            lines.append(
                f"| {r['run']} | {r['arm']} | {p['arm']} | {r['starts']} | {_fmt(r['accept_len_b1'])} | "
                f"{_fmt(r['accept_len_bc'])} | {_fmt(r['tok_s_b1'], 1)} | {_fmt(ratio[0])} | "
                f"{_fmt(r['tok_s_bc'], 1)} | {_fmt(ratio[1])} | {'yes' if same else '**NO**'} |"
            )
    if train_json is not None:
        rec = json.loads(train_json.read_text())
        n = str(wl.get("max_new_tokens"))
        ref = (rec.get("reference_hash_b1") or {}).get(n)
        m = rec.get("metrics", {})
        first = by_name.get("full", plain[0])
        lines += [
            "",
            f"Draft: {train_json.parent} (trained on {rec.get('device')} in {rec.get('seconds')}); simulated "
            f"accept length: held-out prompts {m.get('held_out', {}).get('accept_length')}, the bench's "
            f"prompts {m.get('bench_prompts', {}).get('accept_length')}.",
            f"Reference target's batch-1 greedy hash at {n} tokens: {ref}; plain {first['arm']}'s: "
            f"{', '.join(sorted(first['hash_b1']))} -> "
            + (
                "equal: the server's target is the one the draft was trained against."
                if {ref} == first["hash_b1"]
                else "differs (the server's bf16 kernels or its detokenized text part from the reference "
                "somewhere in the continuation; the accept lengths above say how much it matters)."
            ),
        ]
    lines += ["", "EAGLE-3 output = plain decoding in every arm and repetition: " + ("yes" if lossless else "**NO**")]
    return "\n".join(lines) + "\n", lossless


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.draft_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plain", type=Path, required=True)
    ap.add_argument("--eagle", type=Path, action="append", required=True)
    ap.add_argument("--train-json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    try:
        text, lossless = compare(a.plain, a.eagle, a.train_json)
    except (OSError, ValueError, KeyError) as e:
        print(f"draft_compare: {e}", file=sys.stderr)
        return 2
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    print(text, end="")
    return 0 if lossless else 1


if __name__ == "__main__":
    raise SystemExit(main())
