"""eagle_profiling's whole cost per EAGLE step on a GPU, without a server: the real phase timer (real CUDA events,
the pinned accept-length copy, the polls) around a synthetic step, against the same step with the timer off.

    python -m bench.eagle_timer_gpu [--processes 5] [--rounds 8] [--steps 100] [--json FILE]

Why beside the server runs: a server's step varies 2-20 % from start to start (bench/results/2026-12-03-h200-blocks,
2026-12-04-h200-kimi), so "< 3 %" and "off = not applied" stay "cannot tell" there at any budget a session has.
The timer's cost does not need a server to be seen: it is host work (four event records, one non-blocking copy,
a poll, three elapsed_time reads when a step is folded in) and GPU work (the records), both here as in the
worker. What this cannot see is any interaction with the rest of the server (its memory, its other threads).

The step, in the overlap scheduler's pattern: the host launches step i's three phases (GPU time from
torch.cuda._sleep, calibrated; small kernels launched in between), then waits for step i-1 to finish and does
the host work of processing its result (a busy loop), so the step is bound by whichever side is slower. Two
regimes: `kimi` (GPU phases 1.37 / 4.60 / 0.50 ms, the Kimi-width proxy's draft / verify / draft-extend p50 in
kimi_trained, and 1 ms of host work: GPU-bound) and `tiny` (0.25 / 0.45 / 0.15 ms of GPU and 3.5 ms of host
work a step: host-bound, as the tiny model's 4-5 ms step is). Arms: `notapplied` (the step as the unpatched
worker runs it: the reference), `off` (the patched worker with the timer off: its `is not None` tests), `on`
(the timer, every step), `every4` (SGLANG_EAGLE_PHASE_TIMING_EVERY=4).

Design: the process is the replication unit (each a fresh Python: its own CUDA context, allocator, clocks);
inside one, rounds of every arm in a shuffled order (seeded per process), `--steps` steps each after a
warm-up; a process's value per arm is its median round. The verdict per arm against `notapplied` is the mean
over processes of the per-process difference with a 95 % t interval (scipy): "< 3 %" is shown when the
interval's high end is below 3 % of the reference step, "within noise" when the interval holds 0, else the
size is given. A separate pass of `on` times each timer call on the host (where its cost goes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "overlay/python/sglang/srt/speculative/eagle_phase_timer.py"
ARMS = ("notapplied", "off", "on", "every4")
REFERENCE = "notapplied"  # the worker without the patch: no timer, no tests of one
# GPU ms of draft / verify / draft-extend, and host us per step
REGIMES = {"kimi": ((1.37, 4.60, 0.50), 1000.0), "tiny": ((0.25, 0.45, 0.15), 3500.0)}
GOAL = 3.0  # issue 16: "on" costs less than 3 % of the step


def _timer_module():
    spec = importlib.util.spec_from_file_location("eagle_phase_timer", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def _cycles_per_ms(torch) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # clocks up
    torch.cuda.synchronize()
    rates = []
    for _ in range(5):
        start.record()
        torch.cuda._sleep(2_000_000)
        stop.record()
        stop.synchronize()
        rates.append(2_000_000 / start.elapsed_time(stop))
    return statistics.median(rates)


class _HostEvent:
    """A stand-in for torch.cuda.Event on a machine without a GPU (the CPU test of this module's plumbing):
    host time, always complete."""

    def __init__(self, enable_timing: bool = False):
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: _HostEvent) -> float:
        return (other.t - self.t) * 1e3


def one_process(regime: str, rounds: int, steps: int, seed: int, device: str = "cuda") -> dict:
    """One process's rounds: {arm: [us per step of each round]} and the calibration. `device="cpu"` runs the same
    loop with host events and no GPU work (a test of the plumbing, not a measurement)."""
    import torch

    mod = _timer_module()
    phases_ms, host_us = REGIMES[regime]
    gpu = device == "cuda"
    rate = _cycles_per_ms(torch) if gpu else 0.0
    cycles = [int(ms * rate) for ms in phases_ms]
    sleep = torch.cuda._sleep if gpu else (lambda c: None)
    event = torch.cuda.Event if gpu else _HostEvent
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    x = torch.zeros(1024, device=device)
    accept = torch.ones(1, dtype=torch.int32, device=device)
    done = [event(), event()]

    def run(timer, n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            if timer is not None:
                timer.begin_step()
            for phase, c in enumerate(cycles):
                sleep(c)
                for _ in range(4):  # the phase's other launches
                    x.add_(1.0)
                if phase == 1:
                    accept.fill_(4)
                if timer is not None and phase < 2:
                    timer.mark(("draft", "verify")[phase])
            if timer is not None:
                timer.end_step(1, accept)
            done[i % 2].record()
            done[(i + 1) % 2].synchronize()  # step i-1's result, while step i runs
            _spin(host_us)
        sync()
        return (time.perf_counter() - t0) / n * 1e6

    def run_calls(timer, n: int) -> dict[str, list[float]]:
        """The `on` step again with each timer call's host time taken (a pass of its own: the clock reads and
        the wrapper cost too, so the measured rounds go without them)."""
        calls: dict[str, list[float]] = {"begin_step": [], "mark": [], "end_step": []}
        clock = time.perf_counter

        def call(name: str, fn, *args) -> None:
            t = clock()
            fn(*args)
            calls[name].append((clock() - t) * 1e6)

        for i in range(n):
            call("begin_step", timer.begin_step)
            for phase, c in enumerate(cycles):
                sleep(c)
                for _ in range(4):
                    x.add_(1.0)
                if phase == 1:
                    accept.fill_(4)
                if phase < 2:
                    call("mark", timer.mark, ("draft", "verify")[phase])
            call("end_step", timer.end_step, 1, accept)
            done[i % 2].record()
            done[(i + 1) % 2].synchronize()
            _spin(host_us)
        sync()
        return calls

    def run_unpatched(n: int) -> float:
        """The same step as the worker without eagle_profiling has it: no timer and no `is not None` tests."""
        t0 = time.perf_counter()
        for i in range(n):
            for phase, c in enumerate(cycles):
                sleep(c)
                for _ in range(4):
                    x.add_(1.0)
                if phase == 1:
                    accept.fill_(4)
            done[i % 2].record()
            done[(i + 1) % 2].synchronize()
            _spin(host_us)
        sync()
        return (time.perf_counter() - t0) / n * 1e6

    def make(arm: str):
        if arm in ("off", REFERENCE):
            return None
        factory = None if gpu else (lambda: _HostEvent(enable_timing=True))
        every = 4 if arm == "every4" else 1
        return mod.EaglePhaseTimer(window=1000, log_interval_s=0, every=every, event_factory=factory)

    timers = {arm: make(arm) for arm in ARMS}

    def measure(arm: str, n: int) -> float:
        return run_unpatched(n) if arm == REFERENCE else run(timers[arm], n)

    for arm in ARMS:
        measure(arm, 50)  # warm-up: the ring's slots, pinned buffers, clocks
    out: dict[str, list[float]] = {arm: [] for arm in ARMS}
    order = random.Random(seed)  # a fresh order each round: no arm always follows the same one
    for _ in range(rounds):
        for arm in order.sample(ARMS, len(ARMS)):
            out[arm].append(measure(arm, steps))
    calls = run_calls(timers["on"], steps)
    timed = {arm: t.summary() for arm, t in timers.items() if t is not None}
    return {
        "regime": regime,
        "device": torch.cuda.get_device_name() if gpu else "cpu (host events, no GPU work)",
        "cycles_per_ms": rate,
        "steps": steps,
        "us_per_step": out,
        # where `on`'s host time goes: each call's median, timed alone (a step makes 1 begin, 2 marks, 1 end)
        "call_us_p50": {name: statistics.median(v) for name, v in calls.items()},
        "timer_steps": {a: s.get("window", 0) for a, s in timed.items()},
        # the events are real: their phases must be the calibrated GPU times (plus the small launches)
        "phase_p50_ms": {a: {p: s[p]["p50_ms"] for p in mod.PHASES} for a, s in timed.items()},
        "accept_length_mean": {a: s["accept_length_mean"] for a, s in timed.items()},
    }


def verdicts(per_process: list[dict]) -> dict:
    """Per arm against the reference (`notapplied`; `off` in a run made before that arm existed): the mean over
    processes of the difference of their median rounds, its 95 % t interval, the same in % of the reference
    step, and the reading."""
    from scipy import stats

    arms = [a for a in ARMS if all(a in p["us_per_step"] for p in per_process)]
    ref = REFERENCE if REFERENCE in arms else "off"
    med = [{arm: statistics.median(p["us_per_step"][arm]) for arm in arms} for p in per_process]
    base = statistics.mean(m[ref] for m in med)
    out = {"reference": ref, "reference_us": base, "processes": len(med), "medians": med, "arms": {}}
    for arm in arms:
        if arm == ref:
            continue
        diffs = [m[arm] - m[ref] for m in med]
        mean = statistics.mean(diffs)
        if len(diffs) < 2:
            out["arms"][arm] = {"mean_us": mean, "reading": "cannot tell (one process)"}
            continue
        half = float(stats.t.ppf(0.975, len(diffs) - 1)) * statistics.stdev(diffs) / len(diffs) ** 0.5
        lo, hi = mean - half, mean + half
        pct = (100 * mean / base, 100 * lo / base, 100 * hi / base)
        if lo <= 0 <= hi:
            reading = f"within noise (the interval holds 0; < {max(abs(pct[1]), abs(pct[2])):.2f} % either way)"
        elif hi < 0:
            reading = "faster (the interval is below 0)"
        else:
            reading = f"costs {pct[0]:.2f} % [{pct[1]:.2f}, {pct[2]:.2f}]"
        reading += f"; < {GOAL:g} % {'shown' if pct[2] < GOAL else 'not shown'}"
        out["arms"][arm] = {"mean_us": mean, "ci_us": [lo, hi], "pct": list(pct), "reading": reading}
    return out


def _child(regime: str, rounds: int, steps: int, seed: int, device: str) -> dict:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from bench.eagle_timer_gpu import one_process; "
        "print(json.dumps(one_process(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), regime, str(rounds), str(steps), str(seed), device],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SGLANG_EAGLE_PHASE_TIMING": "1"},
    )
    if res.returncode != 0:
        raise SystemExit(f"eagle_timer_gpu: a measuring process failed (rc {res.returncode}):\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _print(regime: str, runs: list[dict], v: dict | None) -> None:
    phases_ms, host_us = REGIMES[regime]
    rounds, steps = len(runs[0]["us_per_step"]["off"]), runs[0].get("steps", "?")
    print(
        f"{regime} ({runs[0]['device']}): GPU phases {'/'.join(f'{p:g}' for p in phases_ms)} ms, host {host_us:g} us "
        f"a step; {len(runs)} processes x {rounds} rounds x {steps} steps per arm"
    )
    for arm, ph in runs[0]["phase_p50_ms"].items():
        shown = " / ".join(f"{ph[p]:.3f}" for p in ("draft", "verify", "draft_extend"))
        print(f"  {arm}: the timer's phase p50 (first process): {shown} ms")
    if v is None:
        print("  no verdicts here (scipy is missing): `python -m bench.eagle_timer_gpu --from FILE` reads the JSON")
        return
    if "call_us_p50" in runs[0]:
        calls = ", ".join(f"{k} {v:.1f}" for k, v in runs[0]["call_us_p50"].items())
        print(f"  on: host us per timer call, median (first process): {calls}")
    ref = v["reference"]
    refs = ", ".join(f"{m[ref]:.1f}" for m in v["medians"])
    print(f"  {ref}: {v['reference_us']:.1f} us/step (process medians: {refs})")
    for arm, r in v["arms"].items():
        ci = r.get("ci_us")
        span = f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""
        print(f"  {arm}: {r['mean_us']:+.2f} us/step{span}: {r['reading']}")


def _verdicts_if_possible(runs: list[dict]) -> dict | None:
    try:
        import scipy  # noqa: F401 - the GPU host may lack it; the JSON is read again elsewhere
    except ImportError:
        return None
    return verdicts(runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regime", action="append", choices=sorted(REGIMES), help="default: both")
    ap.add_argument("--processes", type=int, default=5, help="fresh processes per regime (the replication unit)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds of every arm per process")
    ap.add_argument("--steps", type=int, default=100, help="steps per arm and round")
    ap.add_argument("--json", type=Path, help="write the runs and verdicts here")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: host events, no GPU work (a test)")
    ap.add_argument(
        "--from",
        dest="sources",
        type=Path,
        action="append",
        help="read a saved JSON's runs instead of measuring; given again, the runs of every file pooled per regime "
        "(the arms all of them have)",
    )
    a = ap.parse_args(argv)
    if a.processes < 1 or a.rounds < 1 or a.steps < 1:
        ap.error("--processes, --rounds and --steps must be at least 1")
    if a.json:
        # before minutes of device time, not after: a folder that cannot be made or written, or a --json that is
        # a folder, is found while nothing is lost (the temp name is the one write_whole writes through)
        from sglang_overlay.fsio import tmp_path, unlink_quietly

        try:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            if a.json.is_dir():
                raise IsADirectoryError(21, "Is a directory")
            tmp_path(a.json).open("wb").close()
            unlink_quietly(tmp_path(a.json))
        except OSError as e:
            print(
                f"error: --json {a.json}: cannot be written: {e.strerror or e}; give a file path in a writable folder",
                file=sys.stderr,
            )
            return 2
    regimes: dict[str, list[dict]] = {}
    report: dict = {}
    if a.sources:
        commands = []
        for source in a.sources:
            try:
                saved = json.loads(source.read_text())
                for r, d in saved["regimes"].items():
                    if r not in REGIMES:
                        raise KeyError(f"regime {r!r}")
                    for run in d["runs"]:  # what the reading needs of each run, checked before any of it
                        if not all(isinstance(run["us_per_step"][arm], list) for arm in ("off", "on", "every4")):
                            raise TypeError("us_per_step: a list of rounds per arm")
                        run["phase_p50_ms"].items()
                    regimes.setdefault(r, []).extend(d["runs"])
                commands.append(saved.get("command", str(source)))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                print(f"error: {source}: not a saved eagle_timer_gpu run ({e!r})", file=sys.stderr)
                return 2
        report = {"command": " ; ".join(commands), "from": [str(s) for s in a.sources], "regimes": {}}
        if a.regime:
            regimes = {r: runs for r, runs in regimes.items() if r in a.regime}
    else:
        command = " ".join(["python -m bench.eagle_timer_gpu", *(sys.argv[1:] if argv is None else argv)])
        report = {"command": command, "regimes": {}}
        for regime in a.regime or sorted(REGIMES):
            regimes[regime] = [_child(regime, a.rounds, a.steps, seed, a.device) for seed in range(a.processes)]
    for regime, runs in regimes.items():
        v = _verdicts_if_possible(runs)
        report["regimes"][regime] = {"runs": runs, "verdicts": v}
        _print(regime, runs, v)
    if a.json:
        from .derived import write_whole
        from .errors import WriteFailed

        data = (json.dumps(report, indent=1) + "\n").encode()
        try:
            # whole or not at all: a kill or a full disk leaves the earlier file, which `--from` reads
            write_whole(a.json, data, "the report follows on stdout")
        except WriteFailed as e:
            print(f"error: {e}", file=sys.stderr)
            sys.stdout.write(data.decode())
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
