"""How close to a tie is a dummy-weight model's greedy choice, per dummy-init std? Two computations of the same
weights (float32 and bfloat16, on the CPU) decode the bench's prompts greedily; where they part, and the gap
between the top two logits, say whether a rounding difference (another GPU, EAGLE-3's verify forward against
one-token decoding) can change the text. bench/results/2026-12-05-h200-attrib5 found the Kimi-width proxy's
greedy text parting between two GPUs within a median 3 tokens at the bench's std, so its "EAGLE-3 output =
plain decoding" check measured rounding, not losslessness; a std at which greedy text survives bf16 rounding is
the one to serve the proxy at for that check.

    python -m bench greedy-ties MODEL_DIR [--std 0.02 --std 0.2 ...] [--dummy-init normal --dummy-init successor]
        [--embed-std 1.0] [--prompts 8] [--new-tokens 64]

The successor init (bench/dummy_init.py) is the answer to that: its greedy choice has a margin of many logits.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from .dummy_init import DEFAULT_EMBED_STD, DEFAULT_STD, MODES, DummyInit


def _gaps(target, prompts: list[list[int]], seqs: list[list[int]]) -> list[float]:
    """Top-1 minus top-2 logit over each continuation position (teacher-forced), in units of that position's
    logit standard deviation."""
    import torch

    out: list[float] = []
    for p, s in zip(prompts, seqs):
        ids = torch.tensor([s], dtype=torch.long)
        pos = torch.arange(len(s))[None]
        logits, _ = target.forward(ids, pos, target.new_cache(1, len(s)), logits="all")
        lg = logits[0, len(p) - 1 : len(s) - 1].float()
        top = lg.topk(2, dim=-1).values
        out += ((top[:, 0] - top[:, 1]) / lg.std(dim=-1)).tolist()
    return out


def measure(model_dir: Path, inits: list[DummyInit], prompts: int, new_tokens: int, fp32: bool = True) -> list[dict]:
    """fp32=False: bfloat16 alone (a float32 copy of a Kimi-width target is 10 GB more): gaps and the successor's
    share, no comparison (equal and first_diff None)."""
    import torch

    from .seqs_compare import first_diff
    from .target_ref import TargetRef, dummy_weights, greedy, successor_of
    from .train_draft import load_archs, tokenize
    from .workload import fixed_prompts

    _, _, ta, _ = load_archs(model_dir, "draft")
    toks = tokenize(model_dir, fixed_prompts(prompts))
    rows = []
    for init in inits:
        t0 = time.monotonic()
        w16 = dummy_weights(ta, torch.bfloat16, torch.device("cpu"), init)
        succ = successor_of(w16, ta.vocab)
        # the same bf16 values, computed in float32 and in bfloat16
        seqs = {}
        targets = {}
        kinds = (("fp32", torch.float32), ("bf16", torch.bfloat16)) if fp32 else (("bf16", torch.bfloat16),)
        for name, dt in kinds:
            targets[name] = TargetRef(ta, {k: v.to(dt) for k, v in w16.items()})
            with torch.no_grad():
                seqs[name] = greedy(targets[name], toks, new_tokens)
        first = kinds[0][0]
        parts: list[int | None] | None = None
        if fp32:
            parts = [first_diff(a[len(p) :], b[len(p) :]) for p, a, b in zip(toks, seqs["fp32"], seqs["bf16"])]
        with torch.no_grad():
            gaps = _gaps(targets[first], toks, seqs[first])
        parted = [x for x in parts or [] if x is not None]
        # how much of the text is the successor structure's (1.0: the last token alone decides)
        pairs = [(s[i - 1], s[i]) for p, s in zip(toks, seqs[first]) for i in range(len(p), len(s))]
        rows.append(
            {
                "init": init.describe(),
                "std": init.std,
                "follows_successor": sum(int(succ[a]) == b for a, b in pairs) / len(pairs),
                "equal": None if parts is None else len(parts) - len(parted),
                "prompts": len(toks),
                "first_diff": parts,
                "decoded_in": first,
                "first_diff_median": statistics.median(parted) if parted else None,
                "gap_median": statistics.median(gaps),
                "gap_min": min(gaps),
                "gap_under_0_1": sum(g < 0.1 for g in gaps) / len(gaps),
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
    return rows


def table(rows: list[dict], new_tokens: int) -> str:
    lines = [
        f"| dummy init | greedy fp32 = bf16 ({new_tokens} tokens) | where they part (token index) "
        "| top-1 - top-2 logit, median / least (logit SDs) | positions with a gap < 0.1 SD | tokens = the last one's "
        "successor | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["first_diff"] is None:
            same, where = f"not compared ({r['decoded_in']} only)", "-"
        else:
            same = f"{r['equal']} of {r['prompts']}"
            where = ", ".join("-" if x is None else str(x) for x in r["first_diff"])
        lines.append(
            f"| {r['init']} | {same} | {where} | {r['gap_median']:.3f} / {r['gap_min']:.3f} | "
            f"{r['gap_under_0_1']:.1%} | {r['follows_successor']:.1%} | {r['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def add_cli(sub) -> None:
    p = sub.add_parser("greedy-ties", help="how near a tie a dummy-weight model's greedy choice is, per std (CPU)")
    p.add_argument("model_dir", type=Path, help="a `bench tinymodel` dir (its target/)")
    p.add_argument("--std", type=float, action="append", default=None, help="dummy-init std (repeat; default 0.02)")
    p.add_argument(
        "--dummy-init",
        choices=MODES,
        action="append",
        default=None,
        help="the weights' kind (repeat; each --std is measured with each; default normal)",
    )
    p.add_argument("--embed-std", type=float, default=DEFAULT_EMBED_STD, help="successor's embedding std (its default)")
    p.add_argument("--prompts", type=int, default=8, help="the bench's first N prompts")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument(
        "--bf16-only",
        action="store_true",
        help="decode in bfloat16 alone (no float32 copy: a Kimi-width target's does not fit 23 GB): no comparison",
    )
    p.set_defaults(func=_cli)


def _cli(a: argparse.Namespace) -> int:
    finite = all(0 < s < math.inf for s in [*(a.std or []), a.embed_std])  # what the server's variables take
    if a.prompts < 1 or a.new_tokens < 1 or not finite:
        print(
            "bench greedy-ties: --prompts, --new-tokens, --std and --embed-std must be above 0 (and finite)",
            file=sys.stderr,
        )
        return 2
    if not (a.model_dir / "target" / "config.json").is_file():
        print(
            f"bench greedy-ties: {a.model_dir}: no target/config.json: make one with `python -m bench tinymodel DIR`",
            file=sys.stderr,
        )
        return 2
    inits = [DummyInit(m, s, a.embed_std) for m in a.dummy_init or ["normal"] for s in a.std or [DEFAULT_STD]]
    rows = measure(a.model_dir, inits, a.prompts, a.new_tokens, fp32=not a.bf16_only)
    print(table(rows, a.new_tokens), end="")
    return 0
