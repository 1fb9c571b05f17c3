"""Do two `bench server-seqs` files decode the bench's prompts alike? Before a sequences file made on one machine
(or with one tree, set or server args) trains a draft served on another: a draft follows only the continuation it
was trained on, and a dummy-weight model's greedy choice is often a near tie that another GPU's kernels round the
other way (bench/results/2026-12-05-h200-attrib5).

    python -m bench.seqs_compare A.json B.json [--out F]

Prompts are matched by their token ids. Reported: how many continuations are equal, how many begin with the same
token, and where the first difference falls (after it the two continuations follow different text, so a share of
equal positions would say little) (median, and each batch-1 prompt's, the prompts the
bench's batch-1 phase decodes). Exit 0 when both files hold the same prompts and every continuation is equal, 1
otherwise, 2 on a file that is not a
sequences file (named, with the key).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from .draft_compare import write_out
from .errors import DraftInputError, WriteFailed
from .hostinfo import gpu_kind
from .server_seqs import read_doc


@dataclass(frozen=True)
class Seqs:
    path: Path
    rows: dict[tuple[int, ...], tuple[list[int], str]]  # prompt ids -> (continuation, batch: "1" or "concurrent")
    source: dict


def read(path: Path) -> Seqs:
    doc = read_doc(path, "give a `bench server-seqs` file")
    rows: dict[tuple[int, ...], tuple[list[int], str]] = {}
    seqs = doc.get("sequences")
    if not isinstance(seqs, list):
        raise DraftInputError(f"{path}: sequences: missing or not a list", hint="give a `bench server-seqs` file")
    for i, r in enumerate(seqs):
        p, o = (r.get(k) if isinstance(r, dict) else None for k in ("prompt_ids", "output_ids"))
        if not (isinstance(p, list) and isinstance(o, list)):
            raise DraftInputError(
                f"{path}: sequences[{i}]: needs prompt_ids and output_ids lists", hint="make the file again"
            )
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in (*p, *o)):
            # a list in prompt_ids had been an unhashable key (a traceback), anything else compared as if a token
            raise DraftInputError(
                f"{path}: sequences[{i}]: prompt_ids and output_ids must be lists of token ids (integers)",
                hint="make the file again",
            )
        if tuple(p) in rows:
            # two continuations of one prompt: keeping either would compare a file against half of itself
            j = next(k for k, q in enumerate(seqs) if isinstance(q, dict) and q.get("prompt_ids") == p)
            raise DraftInputError(
                f"{path}: sequences[{i}]: the same prompt_ids as sequences[{j}]",
                hint="a server-seqs file holds each prompt once: make the file again",
            )
        rows[tuple(p)] = (o, str(r.get("batch", "")))
    source = doc.get("source")
    source = source if isinstance(source, dict) else {}
    gpus = source.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        raise DraftInputError(
            f"{path}: source.gpus: expected a list of GPU names (as bench.hostinfo records them), got {gpus!r}",
            hint="make the file again, or remove the key",
        )
    return Seqs(path, rows, source)


def first_diff(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def compare(a: Seqs, b: Seqs) -> tuple[str, bool]:
    common = [p for p in a.rows if p in b.rows]
    if not common:
        raise DraftInputError(f"{a.path} and {b.path}: no prompt in common", hint="compare files of the same prompts")
    firsts, b1 = [], []
    for p in common:
        (x, batch), (y, _) = a.rows[p], b.rows[p]
        f = first_diff(x, y)
        firsts.append(f)
        if batch == "1":
            b1.append("equal" if f is None else str(f))
    differ = [f for f in firsts if f is not None]

    def made(s: Seqs) -> str:
        gpus = ", ".join(gpu_kind(g) for g in s.source.get("gpus") or []) or "GPU not recorded"
        return f"{s.path} ({gpus}; {s.source.get('set', '?')})"

    lines = [
        "# Two server-seqs files against each other",
        "",
        f"A: {made(a)}",
        f"B: {made(b)}",
        "",
        "| prompts in common | continuations equal | first token equal | first difference (token index): median "
        "| batch-1 prompts' first difference |",
        "|---|---|---|---|---|",
        f"| {len(common)} | {len(common) - len(differ)} | {sum(f != 0 for f in firsts)} | "
        f"{statistics.median(differ) if differ else '-'} | {', '.join(b1) or '-'} |",
    ]
    only = [(s.path, len(s.rows) - len(common)) for s in (a, b) if len(s.rows) > len(common)]
    if only:
        # equal where both decoded is not "alike": the rest was never compared
        lines += ["", *(f"{path} has {n} prompt(s) the other lacks: not compared." for path, n in only)]
    return "\n".join(lines) + "\n", not differ and not only


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.seqs_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    o = ap.parse_args(argv)
    try:
        text, equal = compare(read(o.a), read(o.b))
    except DraftInputError as e:
        print(f"seqs_compare: {e}", file=sys.stderr)
        return 2
    if o.out:
        try:
            write_out(o.out, text)
        except (OSError, WriteFailed) as e:
            print(f"seqs_compare: --out {o.out}: cannot write ({getattr(e, 'strerror', None) or e})", file=sys.stderr)
            return 2
    print(text, end="")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
