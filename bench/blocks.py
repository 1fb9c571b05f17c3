"""The block design: every round's arms live at once on one GPU, on the same CPUs, their repetitions interleaved.

Why (bench/results/2026-12-03-h200-noise): on the H200 VM a host-bound process's speed switches between two
levels about 1.8x apart, in stretches of 10 ms to tens of seconds, and each vCPU does so on its own (Pearson r
of two pinned workers' 1 s speeds +0.11; the duet's two servers sat on different halves of the CPUs, so their
pairs shared a moment but not a vCPU). Two measurements on one vCPU 1 s apart differ by 15 % (sd of the log
ratio, 1 s bins), 3 s apart by 22 %, on two vCPUs at the same moment by 25 %. So a block puts every arm's
server on the same CPUs (each process kind on the same core as its counterparts), lets only one serve at a time
(SGLang's --sleep-on-idle: an idle scheduler blocks in a poll instead of spinning on the shared core), and
serves short repetitions round by round (A B C, C B A, A B C ...), so that an arm's j-th repetition and the
reference's j-th are seconds apart on the same vCPU. A comparison reads, per block, log(median over rounds j of
arm_j / ref_j) (bench.duet.unit_value "pairs"; the duet's value for two arms), and the block is the replication
unit: the t interval of the mean over blocks at the design's per-look confidence (Policy.paired_confidence),
as for duets. A block generalizes the duet (Bulej et al., ICPE 2020) from two arms to any number, which is
what ablate needs: the full set and each leave-one-out in one block, so every comparison is paired.

Every block holds the reference of each comparison whose arm it holds (BlockStoreLab), so a plan written for
sequential starts (bench.plans.run_ab, run_ablate) gets paired comparisons unchanged. Bisect chooses its probes
one at a time and compares each to the midpoint of good and bad, which this design does not pair: refused.

Memory: each server takes --mem-fraction-static of what is free when it starts, and the block's servers start
together, so the KV pool must be fixed (--max-total-tokens), or each arm's pool would depend on who allocated
first: a layout difference between arms that no swap cancels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .duet import MEMF_FLAG, MEMF_MAX, PORT_OFFSET, first_port, flag_value
from .errors import UsageError

if TYPE_CHECKING:
    from .launcher import ArmSpec

SLEEP_FLAG = "--sleep-on-idle"
TOKENS_FLAG = "--max-total-tokens"


def check_server_args(server_args: Sequence[str]) -> None:
    """Refuse server arguments under which a block's servers could not share one GPU as equals."""
    args = list(server_args)
    got = flag_value(args, MEMF_FLAG)
    if got is None or got[1] is None:
        raise UsageError(
            f"--concurrent runs every arm's server on one GPU at once: give each a memory share, "
            f"`{MEMF_FLAG} F` with F <= {MEMF_MAX} after `--` (SGLang's default takes most of the GPU)"
        )
    try:
        f = float(got[1])
    except ValueError:
        raise UsageError(f"{MEMF_FLAG} {got[1]!r}: not a number; give F <= {MEMF_MAX} for --concurrent") from None
    if not 0 < f <= MEMF_MAX:
        raise UsageError(
            f"{MEMF_FLAG} {got[1]} with --concurrent: the block's servers share one GPU; give {MEMF_FLAG} "
            f"{MEMF_MAX} or less (0.3 for the tiny model) and a fixed KV pool ({TOKENS_FLAG} N)"
        )
    tok = flag_value(args, TOKENS_FLAG)
    if tok is None or tok[1] is None or not tok[1].isdigit() or int(tok[1]) <= 0:
        raise UsageError(
            f"--concurrent needs a fixed KV pool, `{TOKENS_FLAG} N` after `--` (e.g. 16384 for the tiny model): "
            "the block's servers start together, and without it each one's pool would be what the others left "
            "free at that moment, a difference between arms that is not the patches'"
        )
    first_port(args)  # a --port that is not a number: refused before any server starts


def block_server_args(server_args: Sequence[str]) -> tuple[str, ...]:
    """The run's server arguments with --sleep-on-idle, which a block needs (the idle servers share the serving
    one's cores); once, wherever the user put it."""
    args = tuple(server_args)
    return args if SLEEP_FLAG in args else (*args, SLEEP_FLAG)


NCCL_PORT_OFFSET = 50  # a block's server's torch.distributed port: its HTTP port + this


def server_args_at(server_args: Sequence[str], position: int) -> tuple[str, ...]:
    """The arguments of the server at `position` in a block: its own port (the first's + position x 500) and,
    unless the user set one, its own --nccl-port beside it. SGLang otherwise asks the OS for a free port and
    closes it before torch binds it again; servers starting together could be handed the same one."""
    port = first_port(server_args) + position * PORT_OFFSET
    args = list(server_args)
    if flag_value(args, "--port") is None:
        args += ["--port", str(port)]
    for i, x in enumerate(args):
        if x.startswith("--port="):
            args[i] = f"--port={port}"
        elif x == "--port" and i + 1 < len(args):
            args[i + 1] = str(port)
    nccl = flag_value(args, "--nccl-port")
    if nccl is None:
        args += ["--nccl-port", str(port + NCCL_PORT_OFFSET)]
    elif nccl[1] is not None and nccl[1].isdigit():  # the user's, moved with the position like --port
        own = str(int(nccl[1]) + position * PORT_OFFSET)
        for i, x in enumerate(args):
            if x.startswith("--nccl-port="):
                args[i] = f"--nccl-port={own}"
            elif x == "--nccl-port" and i + 1 < len(args):
                args[i + 1] = own
    return tuple(args)


def arrangement(n: int, index: int) -> list[int]:
    """The positions (and trees) of a block's n arms, rotated by the block's index: position k of block `index`
    holds arm (k + index) mod n, so over n blocks every arm starts, serves and runs from every position once."""
    return [(k + index) % n for k in range(n)] if n else []


def serving_order(n: int, rounds: int) -> list[tuple[int, int]]:
    """(round, position) of each measured repetition of a block of n servers: positions 0..n-1, then n-1..0,
    and so on, so that a linear drift falls on every position alike every two rounds."""
    out = []
    for j in range(rounds):
        order = range(n) if j % 2 == 0 else range(n - 1, -1, -1)
        out += [(j, k) for k in order]
    return out


def comparison_pairs(
    asked: Sequence[ArmSpec],
    comparisons: Sequence[tuple[ArmSpec, ArmSpec]],
    met: Callable[[ArmSpec, ArmSpec], bool] | None = None,
) -> list[list[ArmSpec]]:
    """--block-pairs: the blocks of two a round holds for these asked arms, given the run's (reference, arm)
    comparisons. Each asked arm meets each of its references that was asked too; an asked arm no pair holds
    yet meets the references it has met in earlier blocks (`met`; all of them if none), or, being nobody's arm
    (ablate's base), the arms it is the reference of. One that pairs with asked arms takes no block more: ablate's full set, asked for
    its leave-outs, took a block with the base every round, a comparison the plan never reads
    (bench/results/2026-12-03-h200-pairs). The references met before keep a plan's later rounds on its own
    comparisons when the reference itself is not asked again (it reached --max-starts first, being in every
    block): with two candidates a leave-out is also a patch alone on the base, and would meet the base too.
    Arms in no comparison go two at a time.

    Why pairs: a round of K comparisons costs K blocks of two starts, but each block is as short as one start;
    the blocks of six varied 4.3-9.7 % (bench/results/2026-12-03-h200-ablate), pairs 1.7 % over their first
    3 blocks, then 3.9-9.7 %, all of it the repetitions' own spread (bench/results/2026-12-03-h200-pairs)."""
    refs: dict[str, list[ArmSpec]] = {}
    for ref, arm in comparisons:
        refs.setdefault(arm.key, []).append(ref)
    out: list[list[ArmSpec]] = []
    seen: set[tuple[str, str]] = set()

    def add(ref: ArmSpec, arm: ArmSpec) -> None:
        if (ref.key, arm.key) not in seen:
            seen.add((ref.key, arm.key))
            out.append([ref, arm])

    keys = {a.key for a in asked}
    for a in asked:
        for r in refs.get(a.key, []):
            if r.key in keys:
                add(r, a)
    covered = {x.key for p in out for x in p}
    for a in asked:
        if a.key in covered:
            continue
        mine = refs.get(a.key, [])
        before = [r for r in mine if met is not None and met(r, a)]
        for r in before or mine:
            add(r, a)
        if not refs.get(a.key):
            for ref, arm in comparisons:
                if ref.key == a.key:
                    add(a, arm)
    covered = {x.key for p in out for x in p}
    lone = [a for a in asked if a.key not in covered]
    return out + [lone[i : i + 2] for i in range(0, len(lone), 2)]
