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
    python -m bench.hostprobe --overhead ROUNDS [--victim-cpu C] [--json FILE]   # does the probe slow a
                                                                              # host-bound process? (a verdict)
"""

from __future__ import annotations

import argparse
import math
import os
import re
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
# On the scheduler's own CPU (--host-probe-at scheduler) the probe shares the vCPU it measures: a unit well under
# the kernel's minimum slice (so it is rarely cut by the scheduler's process), no memory unit (it would evict the
# scheduler's cache lines), and a duty that costs the host-bound step about 1 %, the same in every arm.
SAME_CPU_PY_N = 600
SAME_CPU_DUTY = 0.01
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


def probe_loop(
    out: Path,
    duty: float,
    parent: int | None,
    stop_after_s: float | None = None,
    py_n: int = PY_N,
    mem: bool = True,
) -> int:
    stopping = False

    def on_term(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    buf = bytearray(os.urandom(1024)) * (MEM_BYTES // 1024 if mem else 1)
    work_unit(200)  # first call pays for the loop's bytecode specialisation
    t_end = None if stop_after_s is None else time.monotonic() + stop_after_s
    with out.open("a") as f:
        last_flush = -math.inf  # the first sample is flushed at once: wait_ready reads it
        while not stopping:
            if parent is not None and os.getppid() != parent:
                break  # the bench died (kill -9): the death signal may have been lost, this is not
            t0 = time.perf_counter()
            work_unit(py_n)
            t1 = time.perf_counter()
            if mem:
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


# -- contention counters: what the kernel already counts, read for free -------------------------------------------
#
# The probe is a process: it may perturb what it measures (--overhead says whether it does here). The kernel's own
# counters cost two reads of /proc per repetition and change nothing: per CPU, the jiffies the hypervisor gave to
# another guest while this vCPU wanted to run (steal) and those spent in interrupts (irq, softirq); for the
# scheduler's main thread, the nanoseconds it ran and those it waited runnable on a run queue (schedstat). A
# host-bound step slowed by the hypervisor shows as steal on the scheduler's CPU, one slowed by a neighbour on
# the same VM as run-queue wait.

STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
COUNTERS = (
    "host_steal_pct",
    "host_steal_pct_all",
    "host_irq_pct",
    "host_guest_pct_all",
    "sched_wait_pct",
    "sched_run_pct",
)


@dataclass(frozen=True)
class Snapshot:
    t: float  # time.monotonic()
    cpus: dict[str, tuple[int, ...]]  # "cpu" (all) and "cpuN": STAT_FIELDS in jiffies
    sched: tuple[int, int] | None  # (run_ns, wait_ns) of the watched thread; None: no pid, or gone


def read_cpu_stat(text: str) -> dict[str, tuple[int, ...]]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        try:
            vals = tuple(int(x) for x in parts[1 : 1 + len(STAT_FIELDS)])
        except ValueError:
            continue
        out[parts[0]] = vals + (0,) * (len(STAT_FIELDS) - len(vals))  # old kernels: no guest columns
    return out


def snapshot(pid: int | None, proc: Path = Path("/proc")) -> Snapshot:
    """The counters now: /proc/stat, and /proc/PID/schedstat of `pid` (its main thread: the scheduler's loop)."""
    try:
        cpus = read_cpu_stat((proc / "stat").read_text())
    except OSError:
        cpus = {}
    sched = None
    if pid is not None:
        try:
            run_ns, wait_ns, *_ = (int(x) for x in (proc / str(pid) / "schedstat").read_text().split())
            sched = (run_ns, wait_ns)
        except (OSError, ValueError):
            pass
    return Snapshot(time.monotonic(), cpus, sched)


def _pct(a: Snapshot, b: Snapshot, names: Sequence[str], fields: Sequence[str]) -> float | None:
    """Percent of all jiffies on CPUs `names` between a and b that fell in `fields` (user and nice include guest
    time in /proc/stat: the total leaves guest out so that nothing counts twice)."""
    idx = [STAT_FIELDS.index(f) for f in fields]
    part = total = 0
    for n in names:
        if n not in a.cpus or n not in b.cpus:
            return None
        d = [y - x for x, y in zip(a.cpus[n], b.cpus[n])]
        part += sum(d[i] for i in idx)
        total += sum(d[:8])
    return round(100 * part / total, 3) if total > 0 else None


def counters(a: Snapshot, b: Snapshot, cpus: Sequence[int] | None) -> dict[str, float | None]:
    """Per repetition (a: before it, b: after): the COUNTERS, in percent. host_steal_pct and host_irq_pct are
    over `cpus` (the scheduler's own CPUs under `spread`), machine-wide without them; sched_* are of the wall
    time between the snapshots."""
    own = [f"cpu{c}" for c in cpus] if cpus else ["cpu"]
    wall_ns = (b.t - a.t) * 1e9
    out: dict[str, float | None] = {
        "host_steal_pct": _pct(a, b, own, ("steal",)),
        "host_steal_pct_all": _pct(a, b, ["cpu"], ("steal",)),
        "host_irq_pct": _pct(a, b, own, ("irq", "softirq")),
        "host_guest_pct_all": _pct(a, b, ["cpu"], ("guest", "guest_nice")),
        "sched_wait_pct": None,
        "sched_run_pct": None,
    }
    if a.sched is not None and b.sched is not None and wall_ns > 0:
        run, wait = b.sched[0] - a.sched[0], b.sched[1] - a.sched[1]
        if run >= 0 and wait >= 0:
            out["sched_wait_pct"] = round(100 * wait / (run + wait), 3) if run + wait > 0 else None
            out["sched_run_pct"] = round(100 * run / wall_ns, 3)
    return out


def watched(placed: dict, root_pid: int) -> tuple[int | None, list[int] | None]:
    """(the scheduler's pid, its main CPUs) from bench.placement's record of a start; the pid found from the
    process tree when placement did nothing (mode none), the CPUs then unknown (machine-wide steal)."""
    procs = placed.get("processes") or {}
    scheds = sorted((int(pid), p) for pid, p in procs.items() if p.get("role") == "scheduler")
    if scheds:
        return scheds[0][0], list(scheds[0][1].get("main") or []) or None
    from . import placement

    found = sorted(pid for pid in placement.descendants(root_pid) if placement.role(pid) == "scheduler")
    return (found[0] if found else None), None


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
    at: str = "spare"  # "spare": a CPU kept from the server; "scheduler": the scheduler's own main CPU


def start(path: Path, cpu: int | None, duty: float = DUTY, at: str = "spare") -> Probe:
    """The probe process, pinned to `cpu` (it pins itself before its first sample). `at="scheduler"`: the small
    unit without the memory read (SAME_CPU_PY_N), for a CPU the probe shares with the scheduler."""
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
    if at == "scheduler":
        cmd += ["--py-n", str(SAME_CPU_PY_N), "--no-mem"]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # no preexec_fn (unsafe in a threaded parent): the probe pins itself and asks for its death signal first
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return Probe(proc, path, cpu, duty, at)


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
        "at": probe.at,
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


# The order of one round's windows, and of the next round's mirror: a drift of the host that is linear over a
# round falls on the probe's windows and the others alike (ABBA), and alternating the mirror over rounds
# cancels what is left of a curve (the earlier OFF, ON pairs put every drift on the probe: session 5's
# overhead.txt, where round 4 was 1.6x slower than round 3 in both windows).
ABBA = ((False, True, True, False), (True, False, False, True))
PERTURBS, CLEAN, UNSURE = "perturbs", "does not perturb", "cannot tell"
TOLERANCE = 0.02  # the bench's minimum effect: a probe that moves the step by less is below what verdicts see


@dataclass(frozen=True)
class Overhead:
    """The probe's effect on a host-bound victim: on/off step time ratio over rounds, and its verdict."""

    ratios: tuple[float, ...]  # per round: geometric mean of its ON windows / of its OFF windows
    ratio: float  # geometric mean over rounds
    low: float
    high: float
    confidence: float
    tolerance: float
    verdict: str  # PERTURBS / CLEAN / UNSURE

    @property
    def sentence(self) -> str:
        n = len(self.ratios)
        head = (
            f"on/off {self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] ({self.confidence:.0%} t interval over {n} "
            f"rounds; tolerance ±{self.tolerance:.0%}): "
        )
        if self.verdict == PERTURBS:
            return head + (
                "the probe PERTURBS a host-bound process on another CPU: it is not a clean covariate on this "
                "machine (do not --adjust host with it)"
            )
        if self.verdict == CLEAN:
            return head + "the probe does not perturb a host-bound process on another CPU (within the tolerance)"
        return head + f"cannot tell at {n} rounds (more rounds: --overhead N)"

    def to_dict(self) -> dict:
        return {
            "ratios": list(self.ratios),
            "ratio": self.ratio,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "tolerance": self.tolerance,
            "verdict": self.verdict,
        }


def judge(rounds: Sequence[Sequence[tuple[bool, float]]], tolerance: float = TOLERANCE, confidence: float = 0.95):
    """The verdict on rounds of (probe on?, victim ms) windows: a t interval of the mean log on/off ratio.

    PERTURBS when it lies wholly beyond +-tolerance (either way: a probe that speeds the victim up moves it
    too), CLEAN when wholly inside, UNSURE otherwise or with fewer than 2 rounds. The rounds, not the windows,
    are the replication unit: windows of one round share the host's state of that minute.
    """
    from scipy import stats as sst

    logs = []
    for r in rounds:
        on = [math.log(ms) for p, ms in r if p and ms > 0]
        off = [math.log(ms) for p, ms in r if not p and ms > 0]
        if on and off:
            logs.append(statistics.fmean(on) - statistics.fmean(off))
    ratios = tuple(math.exp(x) for x in logs)
    if len(logs) < 2:
        est = logs[0] if logs else math.nan
        return Overhead(ratios, math.exp(est), math.nan, math.nan, confidence, tolerance, UNSURE)
    est, sd = statistics.fmean(logs), statistics.stdev(logs)
    h = float(sst.t.ppf(0.5 + confidence / 2, len(logs) - 1)) * sd / math.sqrt(len(logs))
    lo, hi = est - h, est + h
    t = math.log1p(tolerance)
    if lo > t or hi < -t:
        verdict = PERTURBS
    elif -t < lo and hi < t:
        verdict = CLEAN
    else:
        verdict = UNSURE
    return Overhead(ratios, math.exp(est), math.exp(lo), math.exp(hi), confidence, tolerance, verdict)


def _real_probe(d: Path, probe_cpu: int | None):
    """A context of one ON window: the probe started on its CPU and stopped after."""
    import contextlib

    @contextlib.contextmanager
    def on(i: int):
        p = start(d / f"s{i}.txt", probe_cpu)
        wait_ready(p)
        try:
            yield p
        finally:
            stop(p)

    return on


def overhead(
    rounds: int,
    victim_cpu: int | None = None,
    seconds: float = 2.0,
    *,
    victim=None,
    probe=None,
    tolerance: float = TOLERANCE,
    confidence: float = 0.95,
) -> dict:
    """The probe's perturbation of a host-bound process on another CPU, in ABBA rounds (ABBA above).

    `victim(seconds) -> ms` times the host-bound work (default: _victim_window on `victim_cpu`); `probe(i)` is a
    context during which the probe runs (default: the real probe on the spare CPU). Tests pass simulated ones.
    """
    import contextlib
    import tempfile

    cpus = os.sched_getaffinity(0)
    probe_cpu = spare_cpu(cpus)
    # the scheduler's CPU under spread (core 0 takes the interrupts); CPU 0 on a 2-CPU machine
    victim_at = victim_cpu if victim_cpu is not None else sorted(cpus)[1 if len(cpus) > 2 else 0]
    out: dict = {"victim_cpu": victim_at, "probe_cpu": probe_cpu, "window_s": seconds, "rounds": []}
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        if victim is None:
            os.sched_setaffinity(0, {victim_at})
            stack.callback(os.sched_setaffinity, 0, cpus)
            victim = _victim_window
        if probe is None:
            probe = _real_probe(Path(d), probe_cpu)
        k = 0
        for i in range(rounds):
            windows, duties = [], []
            for on in ABBA[i % 2]:
                if on:
                    with probe(k) as p:
                        ms = victim(seconds)
                    duty = duty_of(read_samples(p.path)) if isinstance(p, Probe) else None
                    if duty is not None:
                        duties.append(duty)
                    k += 1
                else:
                    ms = victim(seconds)
                windows.append((on, ms))
            out["rounds"].append({"windows": windows, "duty": statistics.median(duties) if duties else None})
    o = judge([r["windows"] for r in out["rounds"]], tolerance, confidence)
    out |= o.to_dict()
    out["sentence"] = o.sentence
    duties = [r["duty"] for r in out["rounds"] if r["duty"] is not None]
    out["duty_median"] = statistics.median(duties) if duties else None
    return out


_OLD_ROUND = re.compile(r"^round \d+: step median off ([\d.]+) ms, on ([\d.]+) ms")


def read_overhead(run_dir: Path) -> Overhead | None:
    """The overhead check recorded beside a run: overhead.json (--overhead N --json FILE), or the text of the
    earlier OFF/ON pairs (overhead.txt), judged the same way; None when there is none. ValueError naming the
    file when overhead.json is there but not a record of rounds."""
    import json

    path = run_dir / "overhead.json"
    try:
        d = json.loads(path.read_text())
        return judge([[(bool(on), float(ms)) for on, ms in r["windows"]] for r in d["rounds"]], d["tolerance"])
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: not an overhead record ({type(e).__name__}: {e}); write it again with "
            f"`python -m bench.hostprobe --overhead 10 --json {path}`"
        ) from None
    try:
        text = (run_dir / "overhead.txt").read_text()
    except OSError:
        return None
    pairs = [(float(m.group(1)), float(m.group(2))) for ln in text.splitlines() if (m := _OLD_ROUND.match(ln))]
    return judge([[(False, off), (True, on)] for off, on in pairs]) if pairs else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostprobe", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None, help="samples file (appended)")
    p.add_argument("--duty", type=float, default=DUTY, help="fraction of one core to use (default %(default)s)")
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU first")
    p.add_argument("--parent", type=int, default=None, help="exit when this process is no longer the parent")
    p.add_argument("--seconds", type=float, default=None, help="stop after this long (a stand-alone probe)")
    p.add_argument("--py-n", type=int, default=PY_N, help="iterations of the Python work unit (default %(default)s)")
    p.add_argument("--no-mem", action="store_true", help="no memory unit (a probe sharing the measured CPU)")
    p.add_argument("--overhead", type=int, default=None, metavar="ROUNDS", help="measure the probe's perturbation")
    p.add_argument("--victim-cpu", type=int, default=None, help="--overhead: the CPU of the timed process")
    p.add_argument("--window", type=float, default=2.0, help="--overhead: seconds per window (default %(default)s)")
    p.add_argument("--json", type=Path, default=None, help="--overhead: also write the rounds and verdict here")
    p.add_argument(
        "--tolerance", type=float, default=TOLERANCE, help="--overhead: the on/off change called clean (%(default)s)"
    )
    a = p.parse_args(argv)
    if a.overhead is not None:
        if a.overhead < 1:
            print("hostprobe: --overhead needs at least 1 round (2 for a verdict)", file=sys.stderr)
            return 2
        try:
            o = overhead(a.overhead, a.victim_cpu, a.window, tolerance=a.tolerance)
        except OSError as e:  # its scratch dir of samples (a full $TMPDIR): the message, not a traceback
            print(
                f"hostprobe: --overhead: {e.filename or 'its samples'}: {e.strerror or e}; free space there or set TMPDIR",
                file=sys.stderr,
            )
            return 1
        for i, r in enumerate(o["rounds"], 1):
            ws = ", ".join(f"{'on' if on else 'off'} {ms:.3f}" for on, ms in r["windows"])
            duty = "-" if r["duty"] is None else f"{r['duty']:.3f}"
            print(f"round {i}: step median ms {ws}; on/off {o['ratios'][i - 1]:.4f}, duty {duty}")
        print(
            f"victim CPU {o['victim_cpu']}, probe CPU {o['probe_cpu']}; {len(o['rounds'])} ABBA rounds; probe duty "
            f"median {(o['duty_median'] or 0) * 100:.1f} % of one core"
        )
        print(f"verdict: {o['sentence']}")
        if a.json is not None:
            import json

            from .derived import write_whole
            from .errors import WriteFailed

            # whole or not at all: the report judges what it finds there
            try:
                write_whole(a.json, (json.dumps(o, indent=1) + "\n").encode(), "free space or choose another --json")
            except WriteFailed as e:
                print(f"hostprobe: {e}", file=sys.stderr)
                return 1
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
    if a.py_n < 1:
        print("hostprobe: --py-n must be >= 1", file=sys.stderr)
        return 2
    return probe_loop(a.out, a.duty, a.parent, a.seconds, py_n=a.py_n, mem=not a.no_mem)


if __name__ == "__main__":
    sys.exit(main())
