"""The block design (bench.blocks) on simulated servers: ablate's error rates and cost, blocks against sequential
starts on the same simulated machines.

SimBlockLab is the bench.replication.Lab (and its block_pairs) over bench.simulate.World, as BlockStoreLab is
over real servers: a block holds the arms asked for and their comparisons' references; each server is one start
as SimLab draws it (start noise, bimodal starts, plants, repetition noise); the block's repetitions are served in
bench.blocks.serving_order while the host's two-state chain (World.host_slow, host_stay; host_ticks_per_start
steps while the block starts) moves one step per repetition. By default every server of a block is on the
same vCPU, so the state a repetition is served in is the block's, whichever arm is serving; with
World.host_per_server (`bench simulate --host-per-server`, what the H200's blocks of two showed) each server
has a chain of its own. `pairs` (`--block-pairs`) runs blocks of two servers, one comparison each
(bench.blocks.comparison_pairs). Sequential starts (SimLab) see one chain, one start after the other.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .blocks import arrangement, comparison_pairs, serving_order
from .duet import unit_value
from .errors import BudgetExhausted
from .launcher import ArmSpec
from .simulate import EXACT, SimLab, World, host_slowdown, sim_arm
from .stats import start_value


class SimBlockLab:
    def __init__(
        self,
        world: World,
        comparisons: Sequence[tuple[ArmSpec, ArmSpec]],
        seed: int = 0,
        max_total_starts: int | None = None,
        value: str = "pairs",
        analysis: str = "pooled",
        pairs: bool = False,
    ):
        self.world = world
        self.block_analysis = analysis
        self.starts = SimLab(replace(world, host_slow=0.0), seed=seed)  # per-start draws; the chain is the block's
        self.rng = self.starts.rng
        self.host_is_slow = world.host_slow > 0 and self.rng.random() < 0.5
        self.comparisons = list(comparisons)
        self.pairs = pairs  # --block-pairs: one block per comparison (bench.blocks.comparison_pairs)
        self.refs: dict[str, list[ArmSpec]] = {}
        for ref, arm in comparisons:
            self.refs.setdefault(arm.key, []).append(ref)
        self.blocks: list[dict[str, dict[str, list[float]]]] = []
        self.max_total = max_total_starts
        self.value = value
        self.servers = 0

    def n_starts(self, arm: ArmSpec) -> int:
        return sum(arm.key in b for b in self.blocks)

    def start_values(self, arm: ArmSpec, metric: str) -> list[float]:
        meds = (start_value(b[arm.key].get(metric, [])) for b in self.blocks if arm.key in b)
        return [m for m in meds if m is not None]

    def block_pairs(self, ref: ArmSpec, arm: ArmSpec, metric: str) -> list[tuple[float, float]]:
        out = []
        for b in self.blocks:
            if ref.key in b and arm.key in b:
                v = unit_value(b[ref.key].get(metric, []), b[arm.key].get(metric, []), self.value)
                if v is not None:
                    out.append(v)
        return out

    def block_values(self, metric: str) -> list[dict[str, float]]:
        from .rcbd import block_values

        return [block_values({k: v.get(metric, []) for k, v in b.items()}) for b in self.blocks]

    def add_starts(self, arms: Sequence[ArmSpec]) -> None:
        if self.pairs:
            met = lambda r, a: any(r.key in b and a.key in b for b in self.blocks)  # noqa: E731
            for pair in comparison_pairs(arms, self.comparisons, met):
                self._block(pair)
            return
        block: list[ArmSpec] = []
        for x in [*arms, *(r for a in arms for r in self.refs.get(a.key, []))]:
            if x.key not in {b.key for b in block}:
                block.append(x)
        self._block(block)

    def _block(self, block: list[ArmSpec]) -> None:
        if self.max_total is not None and self.servers + len(block) > self.max_total:
            raise BudgetExhausted(f"simulated budget of {self.max_total} server starts used")
        self.servers += len(block)
        w = self.world
        order = [block[i] for i in arrangement(len(block), len(self.blocks))]
        for _ in range(w.host_ticks_per_start):
            self._tick()
        runs = [self.starts._one(a.pset.patches) for a in order]
        factors: list[list[float]] = [[] for _ in order]
        # per server: each starts in the chain's stationary state (a symmetric chain: even odds)
        own = [self.rng.random() < 0.5 for _ in order] if w.host_per_server else []
        for _, pos in serving_order(len(order), w.reps):
            if w.host_per_server:
                if self.rng.random() > w.host_stay:
                    own[pos] = not own[pos]
                slow = own[pos]
            else:
                self._tick()
                slow = self.host_is_slow
            factors[pos].append(1 + w.host_slow if slow else 1.0)
        for out, fs in zip(runs, factors):
            for m, xs in out.items():
                if m not in EXACT:
                    out[m] = [x / f if m.startswith("tok_s") else x * f for x, f in zip(xs, fs)]
        self.blocks.append({a.key: SimLab._with_late(r) for a, r in zip(order, runs)})

    def _tick(self) -> None:
        if self.rng.random() > self.world.host_stay:
            self.host_is_slow = not self.host_is_slow


def ablate_rates(
    world_of: Callable[[int], World],
    n_cands: int,
    culprit: str | None,
    trials: int,
    settings,
    blocks: bool,
    analysis: str = "pooled",
    pairs: bool = False,
) -> dict[str, Any]:
    """ablate --mode leave-out of candidates p0..p{n-1} on the base g, as blocks (SimBlockLab) or sequential
    starts (SimLab): right / wrong / no culprit named, and the server starts used."""
    from .plans import run_ablate

    cands = [f"p{i}" for i in range(n_cands)]
    base, full = sim_arm("base", ("g",)), sim_arm("full", ("g", *cands))
    alone = {p: sim_arm(f"+{p}", ("g", p)) for p in cands}
    leave = {p: sim_arm(f"-{p}", ("g", *[q for q in cands if q != p])) for p in cands}
    comps = [(base, full), *((base, alone[p]) for p in cands), *((full, leave[p]) for p in cands)]
    out: dict[str, Any] = {"trials": trials, "right": 0, "wrong": 0, "none": 0, "servers": []}
    for t in range(trials):
        lab: SimBlockLab | SimLab = (
            SimBlockLab(world_of(t), comps, seed=t, analysis=analysis, pairs=pairs)
            if blocks
            else SimLab(world_of(t), seed=t)
        )
        res = run_ablate(lab, base, full, alone, leave, "leave-out", settings)
        named = res["culprits"]
        if not named:
            out["none"] += 1
        elif named == [culprit]:
            out["right"] += 1
        else:
            out["wrong"] += 1
        out["servers"].append(lab.servers if isinstance(lab, SimBlockLab) else len(lab.order))
    out["median_servers"] = statistics.median(out["servers"])
    return out


def rates_text(a, settings) -> str:
    """`bench simulate --concurrent`: both designs on the same simulated machines, as printed lines."""
    culprit = f"p{a.candidates - 1}" if a.effect else None
    plants = [host_slowdown(culprit, a.effect)] if culprit else []

    def world(_t: int) -> World:
        return World(
            plants,
            a.start_cv,
            a.rep_cv,
            a.bimodal_p,
            a.bimodal_shift,
            reps=a.reps,
            host_slow=a.host_slow,
            host_stay=a.host_stay,
            host_ticks_per_start=a.host_ticks,
            host_per_server=a.host_per_server,
        )

    pol = settings.policy
    lines = [
        f"ablate --mode leave-out over {a.candidates} candidates, planted step effect {a.effect * 100:+.1f}% on "
        f"{culprit or 'none'}; start cv {a.start_cv:.1%}, rep cv {a.rep_cv:.1%}, bimodal p {a.bimodal_p} shift "
        f"{a.bimodal_shift:+.0%}, host x{1 + a.host_slow:.2f} while slow holding {a.host_stay:.2f} per repetition, "
        f"{a.host_ticks} steps per start{', a chain per server' if a.host_per_server else ''}"
        f"{', blocks of one comparison (--block-pairs)' if a.block_pairs else ''}; {a.reps} repetitions; "
        f"{a.trials} seeded trials, {pol.initial} to "
        f"{pol.max_starts} units, alpha {1 - pol.confidence:.2g}, minimum effect {pol.min_effect:.1%}:"
    ]
    for name, blocks, analysis in (
        ("sequential", False, ""),
        ("blocks, paired", True, "paired"),
        ("blocks, pooled", True, "pooled"),
    ):
        r = ablate_rates(world, a.candidates, culprit, a.trials, settings, blocks, analysis, a.block_pairs)
        n = a.trials
        lines.append(
            f"  {name}: right culprit {r['right']} ({r['right'] / n:.1%}), wrong culprit {r['wrong']} "
            f"({r['wrong'] / n:.1%}), none named {r['none']} ({r['none'] / n:.1%}); median server starts "
            f"{r['median_servers']:.0f} (max {max(r['servers'])})"
        )
    return "\n".join(lines)
