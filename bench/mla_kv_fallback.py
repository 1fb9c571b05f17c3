"""flashinfer_mla's torch fallback (fp8 KV below SM89, and the CPU): time and memory per layer call, CPU.

    python -m bench.mla_kv_fallback [--before REV] [--repeats 3] [--json FILE]

For each case (pool rows, index-buffer entries, rows in use) it runs, every one in a fresh process:
  * pristine  `pool.to(torch.bfloat16)`: upstream's cast of the whole per-layer pool;
  * before    `_convert_rows_torch` of overlay/.../mla_kv_step.py at git revision REV;
  * after     `_convert_rows_torch` of the working tree's file.
and prints the median wall time over --repeats calls and the call's peak extra resident memory (VmHWM after
the call minus VmRSS before it, with the high-water mark reset just before; inputs and the reused scratch are
allocated first, so this is what one layer call adds). Under CUDA graphs the index buffer is the wrapper's
whole cuda_graph_kv_indices (max_bs x max_context_len entries), so the first case is the review's: a 2M-entry
buffer, 5000 rows in use, a 200k-row pool of DeepSeek MLA rows (576 fp8 values).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODULE = "overlay/python/sglang/srt/layers/attention/mla_kv_step.py"
ROW = 576  # kv_lora_rank 512 + qk_rope_head_dim 64
# (pool rows, index-buffer entries, rows in use): the review's case, then the index buffer at
# 1/8 .. 2x the pool around the fallback's switch to a full cast (half the pool's rows)
CASES = [(200_000, 2_000_000, 5_000)] + [
    (100_000, n, 5_000) for n in (12_500, 25_000, 45_000, 55_000, 100_000, 200_000)
]

_CHILD = r"""
import importlib.util, json, statistics, sys, time, torch
torch.set_num_threads(1)
impl, module, rows, entries, used, repeats = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
g = torch.Generator().manual_seed(0)
pool = torch.empty(rows, 1, %(row)d, dtype=torch.float8_e4m3fn)
for i in range(0, rows, 16384):  # filled in chunks: no pool-sized float32 temporary before the measurement
    pool[i:i + 16384] = (torch.randn(min(16384, rows - i), 1, %(row)d, generator=g) * 4).to(torch.float8_e4m3fn)
idx = torch.full((entries,), 10**9, dtype=torch.int32)  # a reused buffer: stale entries past the step's rows
idx[:used] = torch.randperm(rows, generator=g)[:used].int()
nnz = torch.tensor([used], dtype=torch.int32)
dst = torch.zeros(rows, 1, %(row)d, dtype=torch.bfloat16)  # the scratch StepKV reuses across layers
if impl == "pristine":
    call = lambda: pool.to(torch.bfloat16)
else:
    spec = importlib.util.spec_from_file_location("mla_kv_step", module)
    kv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kv)
    call = lambda: kv._convert_rows_torch(pool, dst, idx, nnz)
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
times, peaks = [], []
for _ in range(repeats):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = status("VmRSS:")
    t0 = time.perf_counter()
    out = call()
    times.append(time.perf_counter() - t0)
    peaks.append(status("VmHWM:") - base)
    del out
if impl != "pristine":
    ref = pool[idx[:used].long()].to(torch.bfloat16)
    assert torch.equal(dst[idx[:used].long()], ref), "rows the kernel reads are wrong"
print(json.dumps({"s": statistics.median(times), "peak_bytes": max(peaks)}))
""" % {"row": ROW}  # noqa: UP031 - the child script is full of braces that .format() would need doubled


def _module_at(rev: str, tmp: Path) -> Path:
    out = tmp / f"mla_kv_step_{rev}.py"
    out.write_text(
        subprocess.run(["git", "show", f"{rev}:{MODULE}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    )
    return out


def measure(impl: str, module: Path, case: tuple[int, int, int], repeats: int) -> dict:
    rows, entries, used = case
    p = subprocess.run(
        [sys.executable, "-c", _CHILD, impl, str(module), str(rows), str(entries), str(used), str(repeats)],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"{impl} {case}: child failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="c09cc40", help="git revision of the earlier mla_kv_step.py")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    a = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        before = _module_at(a.before, Path(tmp))
        after = ROOT / MODULE
        print(
            f"torch fallback of flashinfer_mla, CPU, 1 thread, {ROW} fp8 values per row -> bf16; "
            f"median of {a.repeats} calls; peak = extra resident memory of one call"
        )
        print(
            f"{'pool rows':>10} {'index buf':>10} {'in use':>7} | {'pristine s':>10} {'MB':>6} | "
            f"{'before s':>9} {'MB':>6} | {'after s':>8} {'MB':>6}"
        )
        for case in CASES:
            row: dict[str, Any] = {"pool_rows": case[0], "index_entries": case[1], "rows_in_use": case[2]}
            for impl, module in (("pristine", after), ("before", before), ("after", after)):
                row[impl] = measure(impl, module, case, a.repeats)
            results.append(row)
            mb = {k: row[k]["peak_bytes"] / 1e6 for k in ("pristine", "before", "after")}
            print(
                f"{case[0]:>10} {case[1]:>10} {case[2]:>7} | {row['pristine']['s']:>10.3f} {mb['pristine']:>6.0f} | "
                f"{row['before']['s']:>9.3f} {mb['before']:>6.0f} | {row['after']['s']:>8.3f} {mb['after']:>6.0f}",
                flush=True,
            )
    if a.json:
        a.json.write_text(json.dumps({"before": a.before, "repeats": a.repeats, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
