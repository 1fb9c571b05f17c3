"""Blocks on real servers (bench.blocks): every arm of a round live at once, on shared CPUs, repetitions interleaved.

BlockStoreLab is the bench.replication.Lab over a bench.runner.Runner for `--concurrent`: `add_starts(arms)` is
one block holding those arms and the reference of each comparison they are in, so every comparison a plan reads
is paired block by block (`block_pairs`; bench.replication.compare reads those instead of start values). A block
is the start records of one round, one per arm, and counts only when every one has its unit_done, written after
all the block's servers stopped: an interrupted block leaves nothing the statistics read, and --resume measures
it again under a new round. The plan's earlier blocks are served from the store in round order, like StoreLab's
starts, so a replay takes the same decisions and measures only what is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace

from . import hostprobe, launcher, placement, store
from .blocks import arrangement, comparison_pairs, server_args_at, serving_order
from .duet import first_port, unit_value
from .errors import RunAborted
from .launcher import ArmSpec
from .runner import PendingServer, Runner, mark_warm_machine, progress, warm_machine_age
from .stats import cv
from .workload import WorkloadError


class BlockStoreLab:
    def __init__(self, runner: Runner, trees: Sequence[str]):
        self.runner, self.trees = runner, list(trees)
        self.block_analysis = runner.cfg.block_analysis
        by_name = {a.name: a for a in runner.arms}
        # an arm's references: the arms it is compared with as the comparison's second member
        self.refs: dict[str, list[ArmSpec]] = {}
        for _, ref, arm in runner.comparisons:
            if ref in by_name and arm in by_name:
                self.refs.setdefault(by_name[arm].key, []).append(by_name[ref])
        self.consumed: list[int] = []  # rounds of the stored blocks the plan has seen, in the order it saw them

    # -- what the store holds --------------------------------------------------------------------------------
    def _complete(self) -> dict[int, dict[str, store.Unit]]:
        """round -> {arm key: unit} of every block all of whose arms completed."""
        by_round: dict[int, dict[str, store.Unit]] = {}
        for u in self.runner.view().units.values():
            if u.block:
                by_round.setdefault(u.round, {})[u.arm_key] = u
        return {r: us for r, us in by_round.items() if set(next(iter(us.values())).block.get("arms", [])) == set(us)}

    def _blocks(self) -> list[dict[str, store.Unit]]:
        done = self._complete()
        return [done[r] for r in self.consumed if r in done]

    # -- bench.replication.Lab ---------------------------------------------------------------------------------
    def n_starts(self, arm: ArmSpec) -> int:
        return sum(arm.key in b for b in self._blocks())

    def start_values(self, arm: ArmSpec, metric: str) -> list[float]:
        return store.start_values([b[arm.key] for b in self._blocks() if arm.key in b], metric)

    def block_pairs(self, ref: ArmSpec, arm: ArmSpec, metric: str) -> list[tuple[float, float]]:
        """(reference, arm) of every block holding both, by bench.duet.unit_value over their interleaved
        repetitions (the j-th of each served in the same round), in block order."""
        out = []
        value = self.runner.cfg.duet_value
        for b in self._blocks():
            if ref.key in b and arm.key in b:
                x = unit_value(
                    [r.get(metric) for r in b[ref.key].reps], [r.get(metric) for r in b[arm.key].reps], value
                )
                if x is not None:
                    out.append(x)
        return out

    def block_values(self, metric: str) -> list[dict[str, float]]:
        """Every block's {arm key: value} for the block design's pooled reading (bench.rcbd)."""
        from .rcbd import block_values

        return [block_values({k: [r.get(metric) for r in u.reps] for k, u in b.items()}) for b in self._blocks()]

    def add_starts(self, arms: Sequence[ArmSpec]) -> None:
        """One block: these arms and the references they are compared with (with --block-pairs one block per
        comparison they are in, two servers each), from the store when its next block holds exactly them,
        measured otherwise."""
        if self.runner.cfg.block_pairs:
            for pair in self._pairs(arms):
                self._block(pair)
            return
        block: list[ArmSpec] = []
        for x in [*arms, *(r for a in arms for r in self.refs.get(a.key, []))]:
            if x.key not in {b.key for b in block}:
                block.append(x)
        self._block(block)

    def _pairs(self, arms: Sequence[ArmSpec]) -> list[list[ArmSpec]]:
        by_name = {a.name: a for a in self.runner.arms}
        comps = [(by_name[r], by_name[a]) for _, r, a in self.runner.comparisons if r in by_name and a in by_name]
        blocks = self._blocks()
        return comparison_pairs(arms, comps, lambda r, a: any(r.key in b and a.key in b for b in blocks))

    def _block(self, block: list[ArmSpec]) -> None:
        keys = {a.key for a in block}
        later = sorted(r for r in self._complete() if r > max(self.consumed, default=-1))
        done = self._complete()
        if later and set(done[later[0]]) == keys:
            self.consumed.append(later[0])
            return
        for a in block:
            if a.key not in {x.key for x in self.runner.arms}:
                self.runner.arms.append(a)
                self.runner.rec({"type": "arm", **Runner.arm_record(a)})
        # every round a start record holds, completed or not: a block killed before its first unit_done leaves
        # only start records, and its round is not given to the next block
        used = [
            r.get("round", -1) for r in store.read(self.runner.cfg.store_path) if r.get("type") in ("start", "failure")
        ]
        rnd = max([*used, *self.consumed, -1]) + 1
        run_block(self.runner, block, self.trees, rnd, len(self.consumed))
        self.consumed.append(rnd)

    def note(self, record: dict) -> None:
        self.runner.rec(record)


def block_estimate(runner: Runner, n: int) -> float:
    """Seconds a block of n servers will take: its start-up (the servers start together) plus n servers'
    repetitions and stops. From the blocks seen, each scaled to n servers (their repetitions by n / their size;
    a machine's cold first block's start-up taken as a warm one's, --warm-start-estimate at most); before any,
    from the throwaway start, whose warm-up repetitions give the time of one (run4: a cold start's seconds taken
    for the next one's stopped a run with most of its budget left)."""
    cfg = runner.cfg
    v = runner.view()
    by_round: dict[int, list[store.Unit]] = {}
    for u in v.units.values():
        if u.block_wall_s:
            by_round.setdefault(u.round, []).append(u)
    here = {r: us for r, us in by_round.items() if any(u.start_id in runner.started_ids for u in us)}
    out = []
    for us in (here or by_round).values():
        startup = max(u.startup_s for u in us)
        rest = max(us[0].block_wall_s - startup, 0.0)
        if not all(u.machine_warm for u in us):
            startup = min(startup, cfg.warm_start_estimate_s)
        out.append(startup + rest * n / len(us))
    if out:
        return max(out)
    warm = [u for u in v.warmup_units if u.wall_s]
    if not warm:
        return 0.0
    u = max(warm, key=lambda x: x.wall_s)
    per_rep = max(u.wall_s - u.startup_s, 0.0) / max(cfg.warmup_reps, 1)
    return min(u.startup_s, cfg.warm_start_estimate_s) + n * per_rep * (cfg.warmup_reps + cfg.reps_per_start)


def run_block(runner: Runner, arms: Sequence[ArmSpec], trees: Sequence[str], rnd: int, index: int) -> None:
    """One block: launch every arm's server at once (position k on trees[k], port + 500 k; positions rotate with
    the block's index), wait for all, put them all on the same CPUs, warm each up, serve the measured repetitions
    round by round (bench.blocks.serving_order), stop them all."""
    cfg = runner.cfg
    if len(arms) > len(trees):
        raise RunAborted(
            f"a block of {len(arms)} servers ({', '.join(a.name for a in arms)}) needs {len(arms)} trees; this run has "
            f"{len(trees)}: give --trees one per server of the largest block, or leave --trees out"
        )
    order = [arms[i] for i in arrangement(len(arms), index)]
    launches = [
        replace(cfg.launch, tree=trees[pos], server_args=server_args_at(cfg.launch.server_args, pos))
        for pos in range(len(order))
    ]
    runner.check_budget(order[0], what=f"block of {len(order)}", need_s=block_estimate(runner, len(order)))
    runner.warmup(order[0], launches[0])
    runner.check_budget(order[0], what=f"block of {len(order)}", need_s=block_estimate(runner, len(order)))
    label = f"[block {index + 1}]"
    t0 = time.monotonic()
    machine_warm = warm_machine_age(runner.sig) is not None
    pending: list[PendingServer] = []
    servers: list[launcher.Server] = []
    sids: list[str] = []
    watched: list[tuple[int | None, list[int] | None]] = []
    keys = [a.key for a in order]
    serving = 0  # the position a failure is recorded against
    try:
        for pos, (a, launch) in enumerate(zip(order, launches)):
            serving = pos
            pending.append(
                runner.spawn_server(launch, a, rnd, f"{label} arm {a.name} on {launch.tree}: starting ({a.pset.label})")
            )
        for pos, p in enumerate(pending):
            serving = pos
            started = runner.await_server(p)
            servers.append(started.srv)
            sids.append(started.sid)
        # every server on the same CPUs (the scheduler's main thread on one core for all): only one serves at a
        # time, and a vCPU's speed is its own (bench.blocks); the bench client with the first, on the rest
        for pos, (a, p, srv) in enumerate(zip(order, pending, servers)):
            placed = placement.place(
                srv.proc.pid,
                runner.placement_of(a),
                client_pid=os.getpid() if pos == 0 else None,
                cpus=runner.own_cpus,  # the same plan for every server: not the client's CPUs once it is placed
            )
            blk = {
                "index": index,
                "position": pos,
                "tree": launches[pos].tree,
                "port": first_port(launches[pos].server_args),
                "arms": keys,
                # the KV pool it got: --max-total-tokens, or less where SGLang found less free (a crowded start)
                "kv_tokens": _kv_tokens(srv),
            }
            runner.record_start(
                sids[pos],
                a,
                rnd,
                srv,
                p.console,
                False,
                machine_warm,
                runner.identity(srv),
                placed,
                p.launched_at,
                p.launched_at + srv.startup_s,
                {"block": blk},
            )
            watched.append(hostprobe.watched(placed, srv.proc.pid))
        for serving, (a, srv) in enumerate(zip(order, servers)):
            for i in range(cfg.warmup_reps):
                runner.rep(srv, sids[serving], a, rnd, i - cfg.warmup_reps, True, watched[serving])
        for slot, (j, serving) in enumerate(serving_order(len(order), cfg.reps_per_start)):
            runner.rep(
                servers[serving], sids[serving], order[serving], rnd, j, False, watched[serving], {"block_slot": slot}
            )
    except (WorkloadError, OSError) as e:
        try:
            if serving < len(sids):
                runner.record_failure(order[serving], rnd, sids[serving], servers[serving], False, e)
        finally:  # the failure record refused too (a full disk): the servers are stopped all the same
            _stop_all(runner, [p.srv for p in pending])
        raise RunAborted(f"{label} arm {order[serving].name}: {e}") from e
    except BaseException:
        _stop_all(runner, [p.srv for p in pending])  # Ctrl-C, an abort, a failed start: no server keeps the GPU
        raise
    rcs = _stop_all(runner, servers)
    wall = time.monotonic() - t0
    runner.record_units_done(order, sids, rnd, rcs, wall, {"block_wall_s": round(wall, 2), "block_index": index})
    mark_warm_machine(runner.sig)
    starts = ", ".join(f"{s.startup_s:.0f}" for s in servers)
    meds = [runner.view().units[(a.key, rnd)].value(cfg.metric) for a in order]
    progress(
        f"{label} done: {len(order)} servers (start-up {starts} s), unit {wall:.0f}s | {cfg.metric} start values "
        + ", ".join(f"{a.name} {m:.4g}" for a, m in zip(order, meds) if m is not None)
        + f" (spread {cv([m for m in meds if m is not None]) * 100:.1f}%) | elapsed {runner.elapsed():.0f}s"
    )


def _kv_tokens(srv: launcher.Server) -> int | None:
    """The server's KV pool in tokens (SGLang's internal state), None where it does not say."""
    from .workload import internal_state, server_info

    try:
        v = internal_state(server_info(srv.url)).get("max_total_num_tokens")
        return int(v) if v is not None else None
    except Exception:
        return None


def _stop_all(runner: Runner, servers: list[launcher.Server]) -> list[int | None]:
    """Stop the servers in the reverse of their start order; each stop puts the bench client back on its CPUs."""
    rcs: list[int | None] = [None] * len(servers)
    for i in reversed(range(len(servers))):
        rcs[i] = runner.stop_server(servers[i])
    return rcs
