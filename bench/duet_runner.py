"""Duets on real servers (bench.duet): both arms' servers live at once, their repetitions in ABBA order.

DuetStoreLab is the bench.duet.DuetLab over a bench.runner.Runner: a duet is two start records of one round
(one per arm, each marked with the duet's tree, position and port) whose repetitions carry their serving slot,
and it counts only when both starts have their unit_done, written after both servers stopped. So an
interrupted duet leaves nothing the statistics read, and --resume measures it again under a new round; the
plan's earlier duets are served from the store in round order, like StoreLab's starts.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from . import hostprobe, launcher, placement
from .duet import abba, first_is_ref, first_port, second_server_args, unit_pairs
from .errors import RunAborted
from .launcher import ArmSpec
from .runner import Runner, mark_warm_machine, progress, warm_machine_age
from .workload import WorkloadError


class DuetStoreLab:
    def __init__(self, runner: Runner, ref: ArmSpec, arm: ArmSpec):
        if not runner.cfg.duet_tree:
            raise ValueError("DuetStoreLab needs a run with a duet tree")
        self.runner, self.ref, self.arm = runner, ref, arm
        self.cursor = 0

    def _rounds(self) -> list[int]:
        """Rounds of the store in which both arms' starts completed."""
        v = self.runner.view()
        ref = {u.round for u in v.units_of(self.ref.key)}
        return sorted(ref & {u.round for u in v.units_of(self.arm.key)})

    def n_duets(self) -> int:
        return self.cursor

    def pairs(self, metric: str) -> list[tuple[float, float]]:
        v = self.runner.view()
        rounds = set(self._rounds()[: self.cursor])
        ref = [u for u in v.units_of(self.ref.key) if u.round in rounds]
        return unit_pairs(ref, v.units_of(self.arm.key), metric, self.runner.cfg.duet_value)

    def add_duet(self) -> None:
        if self.cursor >= len(self._rounds()):
            v = self.runner.view()
            # a half-completed duet (killed between its two unit_done records) keeps its round: never reused
            used = [u.round for k in (self.ref.key, self.arm.key) for u in v.units_of(k)]
            run_duet_unit(self.runner, self.ref, self.arm, max(used, default=-1) + 1, self.cursor)
        self.cursor += 1

    def note(self, record: dict) -> None:
        self.runner.rec(record)


def run_duet_unit(runner: Runner, ref: ArmSpec, arm: ArmSpec, rnd: int, index: int) -> None:
    """One duet: start the first tree's server, then (once it is healthy) the second's, place them on the two
    halves of the machine's CPUs, warm each up, serve the measured repetitions in abba() order, stop both.
    `index` (the duet's place in the plan) decides which arm is on which tree (bench.duet.first_is_ref)."""
    cfg = runner.cfg
    assert cfg.duet_tree
    runner.check_budget(ref, starts=2, what="duet")
    runner.warmup(ref)
    runner.check_budget(ref, starts=2, what="duet")  # after a throwaway start too: it may have taken the budget
    ref_first = first_is_ref(index)
    arms = (ref, arm) if ref_first else (arm, ref)
    launches = (
        cfg.launch,
        replace(cfg.launch, tree=cfg.duet_tree, server_args=second_server_args(cfg.launch.server_args)),
    )
    own = runner.own_cpus
    mode = cfg.cpu_placement
    halves = placement.halves(set(own)) if own and mode != "none" else (frozenset(), frozenset())
    label = f"[duet {index + 1}]"
    t0 = time.monotonic()
    machine_warm = warm_machine_age(runner.sig) is not None
    servers: list[launcher.Server] = []
    sids: list[str] = []
    watched: list[tuple[int | None, list[int] | None]] = []
    serving = 0  # the position of the server a repetition is running on (what a failure is recorded against)
    try:
        for pos, (a, launch) in enumerate(zip(arms, launches)):
            serving = pos  # a failure while this server starts is its arm's, not the first server's
            announce = f"{label} arm {a.name} on {launch.tree or '(default tree)'}: starting server ({a.pset.label})"
            started = runner.start_server(launch, a, rnd, announce)
            sid, srv, console = started.sid, started.srv, started.console
            launched_at, ready_at = started.launched_at, started.ready_at
            servers.append(srv)
            sids.append(sid)
            ident = runner.identity(srv)
            # each server on its half of the CPUs (the other half reserved); the bench client with the first,
            # whose arm alternates, so the client's neighbourhood falls on both arms equally
            other = halves[1 - pos]
            placed = placement.place(
                srv.proc.pid,
                runner.placement_of(a),
                client_pid=os.getpid() if pos == 0 else None,
                reserve=other,
                cpus=own,  # not the client's CPUs, which the first server's placement narrowed
            )
            port = first_port(launch.server_args)
            duet = {"index": index, "position": pos, "tree": launch.tree, "port": port}
            runner.record_start(
                sid, a, rnd, srv, console, False, machine_warm, ident, placed, launched_at, ready_at, {"duet": duet}
            )
            watched.append(hostprobe.watched(placed, srv.proc.pid))
        for serving, (a, srv) in enumerate(zip(arms, servers)):
            for i in range(cfg.warmup_reps):
                runner.rep(srv, sids[serving], a, rnd, i - cfg.warmup_reps, True, watched[serving])
        seen = [0, 0]
        for slot, serving in enumerate(abba(cfg.reps_per_start)):
            extra = {"duet_slot": slot}
            runner.rep(
                servers[serving], sids[serving], arms[serving], rnd, seen[serving], False, watched[serving], extra
            )
            seen[serving] += 1
    except (WorkloadError, OSError) as e:
        try:
            if serving < len(servers):
                runner.record_failure(arms[serving], rnd, sids[serving], servers[serving], False, e)
        finally:  # the failure record refused too (a full disk): the servers are stopped all the same
            _stop_all(runner, servers)
        raise RunAborted(f"{label} arm {arms[serving].name}: {e}") from e
    except BaseException:
        _stop_all(runner, servers)  # Ctrl-C or an abort: never leave a server holding the GPU
        raise
    rcs = _stop_all(runner, servers)
    wall = time.monotonic() - t0
    # half the duet each: the next duet's estimate is 2 x this
    runner.record_units_done(arms, sids, rnd, rcs, wall, {"duet_index": index})
    mark_warm_machine(runner.sig)
    v = runner.view()
    ratios = [b / a for a, b in unit_pairs(v.units_of(ref.key), v.units_of(arm.key), cfg.metric, cfg.duet_value)]
    progress(
        f"{label} done: {arms[0].name} first on {launches[0].tree or '(default tree)'}, unit {wall:.0f}s | "
        f"{cfg.metric} ratio {ref.name}->{arm.name} per duet {', '.join(f'{x:.4f}' for x in ratios)} | "
        f"elapsed {runner.elapsed():.0f}s"
    )


def _stop_all(runner: Runner, servers: list[launcher.Server]) -> list[int | None]:
    """Stop the servers in the reverse of their start order; each stop puts the bench client back on its CPUs."""
    rcs: list[int | None] = [None] * len(servers)
    for i in reversed(range(len(servers))):
        rcs[i] = runner.stop_server(servers[i])
    return rcs
