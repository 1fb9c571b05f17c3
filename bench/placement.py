"""CPU placement of a running server's processes (a candidate source of start-to-start variance).

On a host-bound step (the tiny model) the scheduler's main thread *is* the step time. Left to the kernel,
where it lands relative to the tokenizer, the detokenizer, the bench client and its own helper threads
differs from start to start; `spread` gives it a physical core of its own (its hyper-thread sibling left
idle), its other threads the next core, the tokenizer and detokenizer the next, and everything else (the
launcher, the bench client) the rest. Set after the server is healthy, through sched_setaffinity on every
thread (threads created later inherit their creator's mask). GPU settings are never touched.

Roles come from the process titles SGLang sets (setproctitle: "sglang::scheduler_TP0", "sglang::detokenizer").
"""

from __future__ import annotations

import os
from pathlib import Path

MODES = ("none", "spread")
ENV = "BENCH_CPU_PLACEMENT"  # an arm's env may override the run's --cpu-placement (variance experiments)


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
    """pid -> (CPUs of its main thread, CPUs of its other threads) for `spread`, or why it cannot be done.

    groups: the usable CPUs by physical core; procs: pid -> role (bench.placement.role). A scheduler's main
    thread gets a core alone; its other threads (about 70 on 0.5.17, the overlap scheduler's forward thread
    among them) two cores where there are enough, one otherwise; the tokenizer and detokenizer likewise.
    """
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

    `reserve`: CPUs none of them may use (the host probe's, bench.hostprobe), left out before cores are assigned.
    `cpus`: the CPUs to plan on; by default this process's affinity, which is narrowed once it was placed as a
    client: a second server placed after it must be given the bench's own CPUs (the Runner's), or its plan is
    made on the client's few (run8-run9's duets and 2026-12-03's first block put their later servers elsewhere).
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


def halves(cpus: set[int]) -> tuple[frozenset[int], frozenset[int]]:
    """The CPUs split by physical core into two halves, for two servers placed side by side (bench.duet_runner):
    each server is placed with the other's half reserved. Core 0 (interrupts, housekeeping) stays in the first."""
    groups = cores(cpus)
    cut = (len(groups) + 1) // 2
    first = frozenset(c for g in groups[:cut] for c in g)
    return first, frozenset(cpus) - first
