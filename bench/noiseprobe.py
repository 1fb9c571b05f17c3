"""The shape of the host's speed noise: how long a slow stretch lasts and whether CPUs share it (GPU host, no SGLang).

    python -m bench.noiseprobe run --out DIR [--seconds 40] [--cpus 1,3,5,...] [--cuda-cpus 2,4]
    python -m bench.noiseprobe analyze DIR

Why: the duet (bench/duet.py) pairs repetitions about 3 s apart and its ratio still spread 5.8 % duet to duet on
the H200 (run9), while single repetitions seconds apart differed by up to 32 %. Whether a finer interleaving
(requests to the arms alternating every ~100 ms) would cancel that depends on the noise's time scale and on
whether it is the machine's (every vCPU at once) or one vCPU's or one process's. This measures exactly that
without a server: one worker process per listed CPU, pinned, does a fixed pure-Python work unit over and over
(the scheduler's regime: host-bound Python), `--cuda-cpus` workers launch one-element CUDA kernels instead (the
host side of a launch), all at the same time for `--seconds`; each records the mean time of its units in 10 ms
bins. `analyze` then prints, per worker kind:
- the share of bins slower than 1.2x the worker's median, and how long a slow stretch lasts;
- the spread of log(time at t) - log(time at t + L) for one worker at lags L from 10 ms to 10 s: the noise of a
  comparison whose two measurements are L apart on the same CPU;
- the same across two workers at the same moment (different CPUs): the noise of a comparison made at once on
  two CPUs, which is what a finer duet would see if the slow state is the machine's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN_NS = 10_000_000  # 10 ms


def _py_unit() -> None:
    # dict and list churn, ~0.2-0.5 ms: what a Python scheduler loop spends its time on
    d = {}
    for i in range(600):
        d[i] = str(i)
    s = 0
    for k, v in d.items():
        s += k + len(v)
    [x * 2 for x in range(400)]


def worker(kind: str, cpu: int, t0_ns: int, seconds: float, out: Path) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    unit = _py_unit
    if kind == "cuda":
        import torch

        x = torch.zeros(1, device="cuda")
        for _ in range(200):
            x.add_(1)
        torch.cuda.synchronize()

        def unit() -> None:
            for _ in range(50):
                x.add_(1)
            torch.cuda.synchronize()

    while time.monotonic_ns() < t0_ns:
        time.sleep(0.001)
    end = t0_ns + int(seconds * 1e9)
    n_bins = int(seconds * 1e9) // BIN_NS + 1
    tot = [0] * n_bins
    cnt = [0] * n_bins
    now = time.monotonic_ns()
    while now < end:
        a = now
        unit()
        now = time.monotonic_ns()
        b = (now - t0_ns) // BIN_NS
        if 0 <= b < n_bins:
            tot[b] += now - a
            cnt[b] += 1
    means = [round(t / c / 1000, 2) if c else None for t, c in zip(tot, cnt)]
    out.write_text(json.dumps({"kind": kind, "cpu": cpu, "bin_ms": BIN_NS / 1e6, "mean_us": means}))


def _steal(path: str = "/proc/stat") -> dict[str, int]:
    out = {}
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("cpu"):
                    f = line.split()
                    out[f[0]] = int(f[8]) if len(f) > 8 else 0
    except OSError:
        pass
    return out


def run(out: Path, seconds: float, cpus: list[int], cuda_cpus: list[int]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic_ns() + int(4e9)  # every worker imported (torch too) and waiting before the clock starts
    procs = []
    for kind, cs in (("py", cpus), ("cuda", cuda_cpus)):
        for c in cs:
            f = out / f"w-{kind}-{c}.json"
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bench.noiseprobe", "worker", kind, str(c), str(t0), str(seconds), str(f)]
                )
            )
    steal = []
    while time.monotonic_ns() < t0 + int(seconds * 1e9):
        steal.append(((time.monotonic_ns() - t0) / 1e9, _steal()))
        time.sleep(0.1)
    rcs = [p.wait() for p in procs]
    workers = []
    for kind, cs in (("py", cpus), ("cuda", cuda_cpus)):
        for c in cs:
            f = out / f"w-{kind}-{c}.json"
            if f.exists():
                workers.append(json.loads(f.read_text()))
                f.unlink()
    topo = {}
    for c in sorted(set(cpus + cuda_cpus)):
        p = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
        topo[c] = p.read_text().strip() if p.exists() else None
    (out / "noise.json").write_text(
        json.dumps({"seconds": seconds, "rcs": rcs, "topology": topo, "steal": steal, "workers": workers})
    )
    print(analyze(out / "noise.json"))
    return 0 if all(rc == 0 for rc in rcs) else 1


def _series(w: dict, k: int) -> list[float | None]:
    """log of the worker's time per unit in bins of k x 10 ms, relative to its median; None where empty."""
    xs = w["mean_us"]
    out: list[float | None] = []
    for i in range(0, len(xs) - k + 1, k):
        v = [x for x in xs[i : i + k] if x]
        out.append(math.log(statistics.mean(v)) if v else None)
    ok = [x for x in out if x is not None]
    med = statistics.median(ok) if ok else 0.0
    return [None if x is None else x - med for x in out]


def _sd(xs: list[float]) -> float:
    return statistics.pstdev(xs) if len(xs) > 1 else float("nan")


def analyze(path: Path) -> str:
    d = json.loads(Path(path).read_text())
    lines = [f"noise probe: {len(d['workers'])} workers, {d['seconds']} s, CPU siblings {d['topology']}"]
    for kind in ("py", "cuda"):
        ws = [w for w in d["workers"] if w["kind"] == kind]
        if not ws:
            continue
        lines.append(f"\n## {kind} workers (CPUs {[w['cpu'] for w in ws]})")
        base = [_series(w, 1) for w in ws]
        for w, s in zip(ws, base):
            ok = [x for x in s if x is not None]
            slow = [x is not None and x > math.log(1.2) for x in s]
            runs, cur = [], 0
            for f in slow:
                if f:
                    cur += 1
                elif cur:
                    runs.append(cur)
                    cur = 0
            if cur:
                runs.append(cur)
            med_us = statistics.median([x for x in w["mean_us"] if x])
            lines.append(
                f"cpu {w['cpu']:>2}: median unit {med_us:.1f} us, bins > 1.2x median {100 * sum(slow) / max(len(ok), 1):.1f} %, "
                f"slow stretches {len(runs)} (median {10 * statistics.median(runs) if runs else 0:.0f} ms, "
                f"max {10 * max(runs) if runs else 0} ms), p90/p10 {math.exp(_q(ok, 0.9) - _q(ok, 0.1)):.3f}"
            )
        lines.append("sd of log ratio, % (same CPU, measurements L apart; bins of the width B):")
        for k, label in ((1, "10 ms"), (10, "100 ms"), (100, "1 s")):
            ss = [_series(w, k) for w in ws]
            row = []
            for lag_s in (0.01, 0.05, 0.1, 0.3, 1, 3, 10):
                lag = round(lag_s * 100 / k)
                if lag < 1:
                    continue
                diffs = [a - b for s in ss for a, b in zip(s, s[lag:]) if a is not None and b is not None]
                if len(diffs) > 10:
                    row.append(f"L={lag_s:g}s {100 * _sd(diffs):.2f}")
            lines.append(f"  B={label:6s} " + "  ".join(row))
        if len(ws) > 1:
            lines.append("sd of log ratio, % (two CPUs at the same moment), and Pearson r of the two series:")
            for k, label in ((1, "10 ms"), (10, "100 ms"), (100, "1 s")):
                ss = [_series(w, k) for w in ws]
                sds, rs = [], []
                for i in range(len(ss)):
                    for j in range(i + 1, len(ss)):
                        pr = [(a, b) for a, b in zip(ss[i], ss[j]) if a is not None and b is not None]
                        if len(pr) > 10:
                            sds.append(100 * _sd([a - b for a, b in pr]))
                            rs.append(_r(pr))
                if sds:
                    lines.append(
                        f"  B={label:6s} sd median {statistics.median(sds):.2f} (range {min(sds):.2f}-{max(sds):.2f}), "
                        f"r median {statistics.median(rs):+.2f} (range {min(rs):+.2f}-{max(rs):+.2f})"
                    )
            lines.append("sd of one CPU's log time around its median, %:")
            for k, label in ((1, "10 ms"), (10, "100 ms"), (100, "1 s")):
                sds = [100 * _sd([x for x in _series(w, k) if x is not None]) for w in ws]
                lines.append(
                    f"  B={label:6s} median {statistics.median(sds):.2f} (range {min(sds):.2f}-{max(sds):.2f})"
                )
    st = d.get("steal") or []
    if len(st) > 1:
        first, last = st[0][1], st[-1][1]
        tot = {k: last.get(k, 0) - first.get(k, 0) for k in last}
        lines.append(
            f"\nsteal jiffies over the run: machine {tot.get('cpu', 0)}, busiest CPU {max((v for k, v in tot.items() if k != 'cpu'), default=0)}"
        )
    return "\n".join(lines)


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * (len(s) - 1))))] if s else float("nan")


def _r(pairs: list[tuple[float, float]]) -> float:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ma, mb = statistics.mean(a), statistics.mean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return float("nan")
    return sum((x - ma) * (y - mb) for x, y in pairs) / math.sqrt(va * vb)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        kind, cpu, t0, seconds, out = argv[1:6]
        worker(kind, int(cpu), int(t0), float(seconds), Path(out))
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.noiseprobe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--seconds", type=float, default=40.0)
    r.add_argument("--cpus", default="1,3,5,7,9,11,13,15")
    r.add_argument("--cuda-cpus", default="")
    a = sub.add_parser("analyze")
    a.add_argument("dir")
    ns = ap.parse_args(argv)
    if ns.cmd == "run":
        ints = lambda s: [int(x) for x in s.split(",") if x.strip()]  # noqa: E731
        return run(Path(ns.out), ns.seconds, ints(ns.cpus), ints(ns.cuda_cpus))
    print(analyze(Path(ns.dir) / "noise.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
