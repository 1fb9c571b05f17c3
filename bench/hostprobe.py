"""A host-speed probe: how fast this machine runs a fixed piece of Python right now, beside a measured server.

Why: on the GPU host of the records (a 16-vCPU VM) the tiny, host-bound model's step switched between 3.5-4.0 ms
and 5.7-6.6 ms inside one start, across arms and in stretches of the session, with the scheduler pinned to the
same CPU every start (bench/results/2026-12-01-h200-run4). If the host's own speed varies (noisy neighbours on the
hypervisor), a fixed work unit on a CPU none of the server's processes use slows down in the same stretches, and
its time is a covariate of the start's value that no patch can move (bench.covariate uses it).

The probe is a separate process pinned to one spare CPU (bench.placement keeps the server's processes off it under
`spread`), doing WORK_UNIT (dict and list churn, like the scheduler's host-bound Python) and a memory-touching
unit, then sleeping so that it runs about `duty` of one core (default 10 %): it never competes for the server's
CPUs and adds one process's worth of memory traffic at a tenth of a core. Each sample, a line of text
"monotonic_s py_us mem_us", goes to an unbuffered-by-line file flushed every FLUSH_S; the process exits on SIGTERM
and by itself when its parent dies (a killed bench leaves no probe behind).

    python -m bench.hostprobe --out FILE --cpu N [--duty 0.1] [--parent PID]
    python -m bench.hostprobe --overhead ROUNDS [--victim-cpu C]   # does the probe slow a host-bound process?
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DUTY = 0.10
FLUSH_S = 0.25
PY_N = 4000  # ~0.6 ms of CPython on a 2-3 GHz core: long enough to time, short enough to sample often
MEM_BYTES = 2 << 20  # past a core's L2: the strided read goes to L3 / memory (~0.15 ms, 2 MB per sample)


def work_unit(n: int = PY_N) -> int:
    """The fixed pure-Python work: dict updates, list appends, attribute-free arithmetic (the scheduler's kind)."""
    d: dict[int, int] = {}
    out: list[int] = []
    acc = 0
    for i in range(n):
        k = i & 127
        d[k] = d.get(k, 0) + i
        if i % 3 == 0:
            out.append(k)
        acc ^= d[k]
    return acc + len(out)


def memory_unit(buf: bytearray) -> int:
    """One read of every 64th byte of buf (a cache line each) in C: the memory system's speed, not Python's."""
    return len(bytes(memoryview(buf)[::64]))


def _set_parent_death_signal() -> None:
    """Linux: SIGTERM to this process when its parent exits (prctl PR_SET_PDEATHSIG); best effort."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def probe_loop(out: Path, duty: float, parent: int | None, stop_after_s: float | None = None) -> int:
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    buf = bytearray(os.urandom(1024)) * (MEM_BYTES // 1024)
    work_unit(200)  # first call pays for the loop's bytecode specialisation
    t_end = None if stop_after_s is None else time.monotonic() + stop_after_s
    with out.open("a") as f:
        last_flush = -math.inf  # the first sample is flushed at once: wait_ready reads it
        while not stopping:
            if parent is not None and os.getppid() != parent:
                break  # the bench died (kill -9): the death signal may have been lost, this is not
            t0 = time.perf_counter()
            work_unit()
            t1 = time.perf_counter()
            memory_unit(buf)
            t2 = time.perf_counter()
            now = time.monotonic()
            f.write(f"{now:.6f} {(t1 - t0) * 1e6:.1f} {(t2 - t1) * 1e6:.1f}\n")
            if now - last_flush >= FLUSH_S:
                f.flush()
                last_flush = now
            if t_end is not None and now >= t_end:
                break
            # sleep so that busy / (busy + sleep) = duty
            time.sleep((t2 - t0) * (1 / duty - 1))
    return 0


# -- the runner's side --------------------------------------------------------------------------------------------


def spare_cpu(allowed: set[int]) -> int | None:
    """The CPU the probe takes: the highest allowed one (bench.placement's `spread` fills CPUs from the low end
    and leaves it out when told), or None on a machine with a single CPU."""
    return max(allowed) if len(allowed) > 1 else None


@dataclass
class Probe:
    proc: subprocess.Popen[bytes]
    path: Path
    cpu: int | None
    duty: float


def start(path: Path, cpu: int | None, duty: float = DUTY) -> Probe:
    """The probe process, pinned to `cpu` (it pins itself before its first sample)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    cmd = [
        sys.executable,
        "-m",
        "bench.hostprobe",
        "--out",
        str(path),
        "--duty",
        str(duty),
        "--parent",
        str(os.getpid()),
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # no preexec_fn (unsafe in a threaded parent): the probe pins itself and asks for its death signal first
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return Probe(proc, path, cpu, duty)


def wait_ready(p: Probe, timeout_s: float = 15.0) -> bool:
    """Until the probe's first sample is on disk (its interpreter takes ~0.1 s to start): a repetition measured
    before that would have no probe window."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and p.proc.poll() is None:
        try:
            if p.path.stat().st_size > 0:
                return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def stop(p: Probe, timeout_s: float = 5.0) -> None:
    """SIGTERM (the probe flushes and exits within one sample), SIGKILL if it does not."""
    if p.proc.poll() is not None:
        return
    p.proc.terminate()
    try:
        p.proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        p.proc.kill()
        p.proc.wait()


@dataclass(frozen=True)
class Sample:
    t: float  # time.monotonic() at the end of the sample
    py_us: float
    mem_us: float


def read_samples(path: Path) -> list[Sample]:
    """The samples in a probe file; a line cut by a kill is skipped."""
    out = []
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            out.append(Sample(float(parts[0]), float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def window(samples: Sequence[Sample], t0: float, t1: float) -> dict:
    """The probe over [t0, t1] (monotonic seconds): median work-unit times and the sample count."""
    xs = [s for s in samples if t0 <= s.t <= t1]
    if not xs:
        return {"n": 0, "py_us": None, "mem_us": None}
    return {
        "n": len(xs),
        "py_us": round(statistics.median(s.py_us for s in xs), 2),
        "mem_us": round(statistics.median(s.mem_us for s in xs), 2),
    }


def duty_of(samples: Sequence[Sample]) -> float | None:
    """The fraction of one core the probe's work took over its samples (a check of --duty)."""
    if len(samples) < 2:
        return None
    busy = sum(s.py_us + s.mem_us for s in samples[1:]) / 1e6
    span = samples[-1].t - samples[0].t
    return round(busy / span, 4) if span > 0 else None


def summary(samples: Sequence[Sample], windows: Sequence[tuple[float, float]], probe: Probe) -> dict:
    """The record of one start's probe: per measured repetition and over all of them."""
    reps = [window(samples, a, b) for a, b in windows]
    inside = [s for s in samples if any(a <= s.t <= b for a, b in windows)]
    return {
        "pid": probe.proc.pid,
        "cpu": probe.cpu,
        "duty_target": probe.duty,
        "duty": duty_of(samples),
        "n_samples": len(samples),
        "reps": reps,
        "start": window(inside, -float("inf"), float("inf")),
    }


def _victim_window(seconds: float) -> float:
    """Median ms of a ~2 ms pure-Python "step" (5 work units: the tiny model's scheduler step) over `seconds`."""
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        for _ in range(5):
            work_unit()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def overhead(rounds: int, victim_cpu: int | None = None, seconds: float = 2.0) -> dict:
    """The probe's perturbation of a host-bound process on another CPU: windows without and with a probe on the
    spare CPU, alternating (off, on, off, on ...) so that drift of the machine falls on both alike."""
    cpus = os.sched_getaffinity(0)
    probe_cpu = spare_cpu(cpus)
    # the scheduler's CPU under spread (core 0 takes the interrupts); CPU 0 on a 2-CPU machine
    victim = victim_cpu if victim_cpu is not None else sorted(cpus)[1 if len(cpus) > 2 else 0]
    os.sched_setaffinity(0, {victim})
    import tempfile

    out: dict = {"victim_cpu": victim, "probe_cpu": probe_cpu, "rounds": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(rounds):
            off = _victim_window(seconds)
            p = start(Path(d) / f"s{i}.txt", probe_cpu)
            wait_ready(p)
            on = _victim_window(seconds)
            stop(p)
            out["rounds"].append({"off_ms": off, "on_ms": on, "duty": duty_of(read_samples(p.path))})
    os.sched_setaffinity(0, cpus)
    ratios = [r["on_ms"] / r["off_ms"] for r in out["rounds"]]
    out["ratio_median"] = statistics.median(ratios)
    duties = [r["duty"] for r in out["rounds"] if r["duty"] is not None]
    out["duty_median"] = statistics.median(duties) if duties else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostprobe", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="samples file (appended)")
    p.add_argument("--duty", type=float, default=DUTY, help="fraction of one core to use (default %(default)s)")
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU first")
    p.add_argument("--parent", type=int, default=None, help="exit when this process is no longer the parent")
    p.add_argument("--seconds", type=float, default=None, help="stop after this long (a stand-alone probe)")
    p.add_argument("--overhead", type=int, default=None, metavar="ROUNDS", help="measure the probe's perturbation")
    p.add_argument("--victim-cpu", type=int, default=None, help="--overhead: the CPU of the timed process")
    p.add_argument("--window", type=float, default=2.0, help="--overhead: seconds per window (default %(default)s)")
    a = p.parse_args(argv)
    if a.overhead is not None:
        o = overhead(a.overhead, a.victim_cpu, a.window)
        for i, r in enumerate(o["rounds"], 1):
            print(f"round {i}: step median off {r['off_ms']:.3f} ms, on {r['on_ms']:.3f} ms, duty {r['duty']}")
        print(
            f"victim CPU {o['victim_cpu']}, probe CPU {o['probe_cpu']}; {len(o['rounds'])} paired rounds: on/off "
            f"median {o['ratio_median']:.4f}; probe duty median {(o['duty_median'] or 0) * 100:.1f} % of one core"
        )
        return 0
    if a.out is None:
        print("hostprobe: --out FILE is needed (or --overhead ROUNDS)", file=sys.stderr)
        return 2
    if not 0 < a.duty <= 1:
        print("hostprobe: --duty must be in (0, 1]", file=sys.stderr)
        return 2
    _set_parent_death_signal()
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    return probe_loop(a.out, a.duty, a.parent, a.seconds)


if __name__ == "__main__":
    sys.exit(main())
