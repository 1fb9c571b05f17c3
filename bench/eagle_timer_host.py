"""eagle_profiling's host cost per EAGLE step (CPU): the phase timer's bookkeeping, before and after.

    python -m bench.eagle_timer_host [--before REV] [--steps 20000] [--trials 7] [--json FILE]

Runs the worker's four timer calls per step (begin_step, mark draft, mark verify, end_step with a 4-request
accept-length tensor) in the overlap scheduler's pattern (step i is launched while the GPU still runs step
i-1, so every begin_step folds in one completed step), with fake events whose record/query/elapsed_time do
nothing but count: the time is the timer's own Python and torch-dispatch work, the part of its cost that
adds to a CPU-bound step. What each CUDA call costs on a GPU host is not measured here; the counts per step
say how many there are (event objects created, records, queries, elapsed_time reads, torch ops). Arms:
  off      what the patched worker does per step with the timer off (four `is not None` tests);
  before   overlay/.../eagle_phase_timer.py at git revision REV;
  after    this tree's file;
  every4   this tree's file with SGLANG_EAGLE_PHASE_TIMING_EVERY=4.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "overlay/python/sglang/srt/speculative/eagle_phase_timer.py"


class Counts:
    def __init__(self):
        self.created = self.records = self.queries = self.elapsed = 0
        self.now = 0.0
        self.done_until = -1.0

    def event(self):
        counts = self
        counts.created += 1

        class Ev:
            __slots__ = ("t",)

            def __init__(self):
                self.t = None

            def record(self):
                counts.records += 1
                self.t = counts.now

            def query(self):
                counts.queries += 1
                return self.t is not None and self.t <= counts.done_until

            def elapsed_time(self, other):
                counts.elapsed += 1
                return 1.0

        return Ev()


def _load(path: Path, alias: str):
    spec = importlib.util.spec_from_file_location(alias, path)
    assert spec is not None and spec.loader is not None, f"{path}: not importable as a module"
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _steps(timer, counts: Counts, n: int, accept) -> None:
    prev_end = -1.0
    for _ in range(n):
        counts.done_until = prev_end  # the step before the last is done on the fake GPU
        prev_end = counts.now
        if timer is None:  # the worker's four tests with the timer off
            for _ in range(4):
                if timer is not None:
                    raise AssertionError
            counts.now += 1.0
            continue
        timer.begin_step()
        counts.now += 1.0
        timer.mark("draft")
        timer.mark("verify")
        timer.end_step(4, accept)


def measure(mod, every: int, steps: int, trials: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    accept = torch.tensor([2, 3, 1, 4], dtype=torch.int32)

    def make(counts):
        if mod is None:
            return None
        kw = {"every": every} if every > 1 else {}
        return mod.EaglePhaseTimer(window=1000, log_interval_s=0, event_factory=counts.event, **kw)

    times = []
    for _ in range(trials):
        counts = Counts()
        timer = make(counts)
        _steps(timer, counts, 200, accept)  # warm-up: slots, buffers, deques filled
        t0 = time.perf_counter()
        _steps(timer, counts, steps, accept)
        times.append((time.perf_counter() - t0) / steps * 1e6)
    counts = Counts()
    timer = make(counts)
    _steps(timer, counts, 200, accept)
    base = dict(vars(counts))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _steps(timer, counts, 1000, accept)
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None)
    per = {k: (getattr(counts, k) - base[k]) / 1000 for k in ("created", "records", "queries", "elapsed")}
    if timer is not None:
        assert timer.summary()["window"] > 0
    return {"us_per_step": statistics.median(times), "us_min": min(times), "torch_ops_per_step": ops / 1000, **per}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="c09cc40", help="git revision of the earlier eagle_phase_timer.py")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "eagle_phase_timer_before.py"
        old.write_text(
            subprocess.run(
                ["git", "show", f"{a.before}:{MODULE}"], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout
        )
        arms = {
            "off": (None, 1),
            "before": (_load(old, "timer_before"), 1),
            "after": (_load(ROOT / MODULE, "timer_after"), 1),
        }
        arms["every4"] = (arms["after"][0], 4)
        results = {name: measure(mod, every, a.steps, a.trials) for name, (mod, every) in arms.items()}
    print(
        f"eagle_profiling host cost per step, CPU, fake events, {a.steps} steps x {a.trials} trials "
        f"(median; before = {a.before})"
    )
    print(
        f"{'arm':>7} | {'us/step':>8} {'min':>6} | {'events made':>11} {'records':>7} {'queries':>7} "
        f"{'elapsed':>7} {'torch ops':>9}"
    )
    for name, r in results.items():
        print(
            f"{name:>7} | {r['us_per_step']:>8.2f} {r['us_min']:>6.2f} | {r['created']:>11.2f} {r['records']:>7.2f} "
            f"{r['queries']:>7.2f} {r['elapsed']:>7.2f} {r['torch_ops_per_step']:>9.2f}"
        )
    if a.json:
        a.json.write_text(
            json.dumps({"before": a.before, "steps": a.steps, "trials": a.trials, "results": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
