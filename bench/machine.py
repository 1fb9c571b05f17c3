"""The machine a run measures on: GPU names and package versions for the record (no torch or sglang import),
where a server start's seconds go (read from the server's log), and CPU placement of a server's processes.

Start-up: SGLang logs "<what> begin." / "<what> end. elapsed=X s" around weight loading, distributed init and
each CUDA-graph capture, then "The server is fired up". Phases with `elapsed=` use it, the others timestamp
differences (+-1 s).

Placement: on a host-bound step (the tiny model) the scheduler's main thread is the step time. `spread` gives
it a physical core of its own, its other threads the next core, tokenizer and detokenizer the next, the rest
(launcher, bench client) what is left. Set after the server is healthy; GPU settings are never touched.
"""

from __future__ import annotations

import itertools
import os
import platform
import re
import shutil
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("sglang", "torch", "flashinfer-python", "sglang-kernel", "sgl-kernel", "transformers", "triton")


def gpu_names() -> list[str]:
    if os.environ.get("BENCH_GPU_NAME"):  # for tests and hosts without nvidia-smi on PATH
        return [os.environ["BENCH_GPU_NAME"]]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def gpu_kind(name: str) -> str:
    """The GPU's model from one gpu_names() entry (nvidia-smi's "name, driver")."""
    return name.split(",")[0].strip()


def gpu_slug(names: list[str]) -> str:
    if not names:
        return "nogpu"
    first = gpu_kind(names[0])
    first = re.sub(r"^NVIDIA\s+", "", first)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", first).strip("-").lower()
    return f"{len(names)}x{slug}" if len(names) > 1 else slug


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def host_record() -> dict:
    names = gpu_names()
    return {"hostname": platform.node(), "gpus": names, "gpu_slug": gpu_slug(names), "versions": versions()}


# -- start-up breakdown ----------------------------------------------------------------------------------------

_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[^\]]*?)\]\s*(.*)$")
_EDGE = re.compile(r"^(?P<what>[A-Z][\w /+-]*?) (?P<edge>begin|end|ends)\b")
_ELAPSED = re.compile(r"elapsed=\s*([\d.]+)\s*s")
READY = "The server is fired up"


def parse_log(text: str) -> list[tuple[float, str]]:
    out = []
    for ln in text.splitlines():
        m = _LINE.match(ln.strip())
        if m:
            try:
                ts = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
            except ValueError:
                continue
            out.append((ts, m.group(2)))
    return out


def startup_breakdown(log_text: str, launched_at: float | None = None, ready_at: float | None = None) -> dict:
    """{"phases": [{"name", "s", "how"}], "first_line_s", "log_span_s", "total_s", "unaccounted_s"}.

    launched_at / ready_at: epoch seconds of the launch command and of the url line (the runner's clock).
    """
    lines = parse_log(log_text)
    phases: list[dict] = []
    open_: dict[str, float] = {}
    seen: dict[str, int] = {}
    for ts, msg in lines:
        m = _EDGE.match(msg)
        if not m:
            continue
        what = m.group("what").strip()
        if m.group("edge") == "begin":
            open_[what] = ts
            continue
        el = _ELAPSED.search(msg)
        # the target's and then the draft's model runner log the same names: number the repeats
        seen[what] = seen.get(what, 0) + 1
        name = what if seen[what] == 1 else f"{what} #{seen[what]}"
        if el:
            phases.append({"name": name, "s": float(el.group(1)), "how": "elapsed"})
        elif what in open_:
            phases.append({"name": name, "s": ts - open_[what], "how": "timestamps"})
        open_.pop(what, None)
    first = lines[0][0] if lines else None
    ready = next((ts for ts, msg in lines if msg.startswith(READY)), None)
    out: dict = {"phases": phases, "gaps": log_gaps(lines)}
    if first is not None and ready is not None:
        out["log_span_s"] = ready - first
    if launched_at is not None and first is not None:
        out["first_line_s"] = max(0.0, first - launched_at)
    if launched_at is not None and ready_at is not None:
        out["total_s"] = ready_at - launched_at
        out["unaccounted_s"] = out["total_s"] - sum(p["s"] for p in phases)
    return out


def log_gaps(lines: list[tuple[float, str]], n: int = 5, at_least: float = 2.0) -> list[dict]:
    """The longest silences between consecutive log lines up to the server being ready, with the lines around
    them: the phases SGLang does not bracket (a spawned scheduler importing sglang before its first line took
    28 of a 76 s warm start on the H200) show up here."""
    out: list[dict[str, Any]] = []
    for (t0, before), (t1, after) in itertools.pairwise(lines):
        if before.startswith(READY):
            break
        if t1 - t0 >= at_least:
            out.append({"s": t1 - t0, "after": before[:160], "before": after[:160]})
    return sorted(out, key=lambda g: -g["s"])[:n]


def startup_from_file(path: str | Path, launched_at: float | None, ready_at: float | None) -> dict:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return {"error": str(e), "phases": []}
    return startup_breakdown(text, launched_at, ready_at)


# -- CPU placement ---------------------------------------------------------------------------------------------

MODES = ("none", "spread")
PLACEMENT_ENV = "BENCH_CPU_PLACEMENT"  # an arm's env may override the run's --cpu-placement (variance experiments)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(x) for x in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def role(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "sglang::scheduler" in cmd:
        return "scheduler"
    if "sglang::detokenizer" in cmd:
        return "detokenizer"
    if "sglang.launch_server" in cmd or "sglang::" in cmd:
        return "tokenizer"
    return "other"


def cores(cpus: set[int]) -> list[list[int]]:
    """The allowed CPUs grouped by physical core (hyper-thread siblings together), in CPU order."""
    groups: list[list[int]] = []
    seen: set[int] = set()
    for c in sorted(cpus):
        if c in seen:
            continue
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text().strip()
            sib = _cpulist(text)
        except OSError:
            sib = {c}
        g = sorted(sib & cpus) or [c]
        seen.update(g)
        groups.append(g)
    return groups


def _cpulist(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def _pin(pid: int, cpus: set[int], others: set[int] | None = None) -> int:
    """Pin every thread of pid (the main thread to `cpus`, the rest to `others` when given); threads pinned."""
    n = 0
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    for tid in tids:
        target = cpus if (tid == pid or others is None) else others
        try:
            os.sched_setaffinity(tid, target)
            n += 1
        except OSError:
            continue
    return n


def assign(groups: list[list[int]], procs: dict[int, str]) -> dict[int, tuple[set[int], set[int]]] | str:
    """pid -> (CPUs of its main thread, CPUs of its other threads) for `spread`, or why it cannot be done."""
    if len(groups) > 4:
        groups = groups[1:]  # core 0 takes most interrupts and housekeeping
    scheds = sorted(p for p, r in procs.items() if r == "scheduler")
    wide = len(groups) >= 3 * len(scheds) + 3  # room for 2 helper cores per rank, 2 front cores and the rest
    per_rank, front_n = (3, 2) if wide else (2, 1)
    need = per_rank * len(scheds) + front_n + 1
    if len(groups) < need:
        return f"{len(groups)} usable cores < {need} needed"
    plan: dict[int, tuple[set[int], set[int]]] = {}
    it = iter(groups)
    for s in scheds:
        main_core = next(it)
        helpers = {c for _ in range(per_rank - 1) for c in next(it)}
        # the hot thread alone on one logical CPU; its hyper-thread sibling stays idle
        plan[s] = ({main_core[0]}, helpers)
    front = {c for _ in range(front_n) for c in next(it)}
    rest = {c for g in it for c in g}
    for p, r in procs.items():
        if r in ("tokenizer", "detokenizer"):
            plan[p] = (front, front)
        elif r == "other":
            plan[p] = (rest, rest)
    return plan


def place(
    root_pid: int,
    mode: str,
    client_pid: int | None = None,
    reserve: frozenset[int] = frozenset(),
    cpus: frozenset[int] | None = None,
) -> dict:
    """Apply `mode` to the process tree under root_pid (and the bench client); what was done, for the record.

    `reserve`: CPUs none of them may use. `cpus`: the CPUs to plan on (default: this process's affinity, which
    is narrowed once it was placed as a client: later servers need the Runner's own set).
    """
    if mode == "none" or not hasattr(os, "sched_setaffinity"):
        return {"mode": "none"}
    procs = {p: role(p) for p in descendants(root_pid)}
    if client_pid is not None:
        procs[client_pid] = "other"
    plan = assign(cores(set(cpus if cpus is not None else os.sched_getaffinity(0)) - reserve), procs)
    if isinstance(plan, str):
        return {"mode": mode, "skipped": plan}
    done = {}
    for pid, (main, others) in plan.items():
        threads = _pin(pid, main, others=others)
        done[str(pid)] = {"role": procs[pid], "main": sorted(main), "threads": sorted(others), "n_threads": threads}
    out: dict = {"mode": mode, "processes": done}
    if reserve:
        out["reserved"] = sorted(reserve)
    return out


def pin_process(pid: int, cpus: set[int]) -> int:
    """Every thread of pid on `cpus` (e.g. the bench process back on its original set between starts)."""
    return _pin(pid, set(cpus))
