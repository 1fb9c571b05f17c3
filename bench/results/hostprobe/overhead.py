"""Does the probe perturb a host-bound process? A pure-Python "step" (bench.hostprobe.work_unit x 5, ~2 ms, like
the tiny model's scheduler step) pinned to CPU 0, timed in 2 s windows with and without a probe on the highest CPU,
alternating (off, on, off, on, ...) so that drift of the machine's load falls on both conditions alike.

    PYTHONPATH=. python bench/results/hostprobe/overhead.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import hostprobe


def window(seconds: float = 2.0) -> float:
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        for _ in range(5):
            hostprobe.work_unit()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    probe_cpu = hostprobe.spare_cpu(cpus)
    ratios, off_ms, on_ms, duties = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(rounds):
            off = window()
            p = hostprobe.start(Path(d) / f"s{i}.txt", probe_cpu)
            hostprobe.wait_ready(p)
            on = window()
            hostprobe.stop(p)
            duties.append(hostprobe.duty_of(hostprobe.read_samples(p.path)) or 0.0)
            off_ms.append(off)
            on_ms.append(on)
            ratios.append(on / off)
            print(f"round {i + 1}: step median off {off:.3f} ms, on {on:.3f} ms, on/off {on / off:.4f}", flush=True)
    q = statistics.quantiles(ratios, n=4)
    print(
        f"victim CPU {min(cpus)}, probe CPU {probe_cpu}; {rounds} paired rounds: on/off median "
        f"{statistics.median(ratios):.4f} (quartiles {q[0]:.4f}-{q[2]:.4f}); probe duty median "
        f"{statistics.median(duties) * 100:.1f} % of one core"
    )


if __name__ == "__main__":
    main()
