"""The duet design: both arms' servers live on one machine at once, their repetitions alternating.

Why: on a cloud VM the step time swings between a fast and a slow state over wall time, within minutes and
within one server start (bench/results/2026-12-02-h200-run7: one start's repetitions 6.33, 6.46, 5.42, 4.75,
4.71 ms); a host probe on another CPU tracks the slow stretches, so it is the machine's state, not the
start's. Sequential starts of two arms sample different stretches of it, and no interleaving of whole starts
cancels a state that changes faster than a start. Duet benchmarking (Bulej et al., "Duet Benchmarking:
Improving Measurement Accuracy in the Cloud", ICPE 2020 / EMSE 2020) runs both versions at the same time on
the same machine, so that they share the interference; randomized multiple interleaved trials (Abedi &
Brecht, ICPE 2017) make the remaining order effects cancel.

A unit (a duet) here: the server on the first tree starts and becomes healthy, then the one on the second
tree (SGLang's memory profiling must not see a half-started neighbour; each takes its --mem-fraction-static
of what is free when it starts), then measured repetitions alternate A B B A A B B A ..., the idle server
waiting, so that both sample the machine within seconds of each other. The arms swap trees (and with them
which one starts and serves first) on alternate duets. The unit's value is log(median_B / median_A) over
its repetitions; the verdict is the t interval of the mean over duets (bench.stats.compare_paired) at the
duet's per-look confidence (Policy.paired_confidence: boundaries solved for t statistics with 2-7 degrees of
freedom, not converted from the Z boundaries) and the bench's minimum effect. The duet, not the repetition, is the replication unit: the
repetitions of one duet share its two starts.

What a duet cannot measure: start-up time (the second server starts beside a live one), a cost that needs the
whole GPU (the two servers share it; only one serves at a time, the other's memory stays held), and a cost an arm
puts on its neighbour while idle (e.g. a polling thread of its own that slows the serving server): the swap
cancels what a tree or a position does to both arms alike, not what one arm does to the other, which reads as
that arm being faster. A tree or position effect, though cancelled, widens the duet-to-duet spread and so
costs power (tests/bench/test_duet_sim.py checks that it names nothing).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Protocol

from .errors import UsageError
from .replication import Policy, compare_blocks
from .stats import Comparison, clean, cv

# Each server takes its --mem-fraction-static of the memory free when it starts: two must fit on one GPU.
MEMF_MAX = 0.45
MEMF_FLAG = "--mem-fraction-static"
# The second server's port: the first's plus this (bench/gpu_device.sh gives a second stream on a GPU +500 too).
PORT_OFFSET = 500
DEFAULT_PORT = 30000  # SGLang's, when the server args name none


def abba(n_per_arm: int) -> tuple[int, ...]:
    """The serving order of one duet's measured repetitions: 0 = the first-started server, 1 = the other.
    A B B A A B B A ...: every adjacent pair holds one of each, and a linear drift over the duet falls on both
    equally every four repetitions."""
    return tuple((0, 1, 1, 0)[i % 4] for i in range(2 * n_per_arm))


def first_is_ref(duet: int) -> bool:
    """Which arm the first tree (the run's --tree, started and served first) holds in duet number `duet`:
    alternate duets swap, so a tree's or a start order's effect falls on both arms equally."""
    return duet % 2 == 0


def flag_value(args: Sequence[str], flag: str) -> tuple[int, str | None] | None:
    """(index, value) of the last `flag V` or `flag=V` in server arguments (argparse, as SGLang's, takes the last
    one); value None when `flag` ends them. None when the flag is absent."""
    found = None
    for i, x in enumerate(args):
        if x == flag:
            found = (i, args[i + 1] if i + 1 < len(args) else None)
        elif x.startswith(flag + "="):
            found = (i, x[len(flag) + 1 :])
    return found


def check_server_args(server_args: Sequence[str]) -> None:
    """Refuse server arguments under which two servers cannot share the GPU."""
    got = flag_value(list(server_args), MEMF_FLAG)
    if got is None or got[1] is None:
        raise UsageError(
            f"--duet runs two servers on one GPU: give each a memory share that fits twice, "
            f"`{MEMF_FLAG} F` with F <= {MEMF_MAX} after `--` (SGLang's default takes most of the GPU)"
        )
    raw = got[1]
    try:
        f = float(raw)
    except ValueError:
        raise UsageError(f"{MEMF_FLAG} {raw!r}: not a number; give F <= {MEMF_MAX} for --duet") from None
    if not 0 < f <= MEMF_MAX:
        raise UsageError(
            f"{MEMF_FLAG} {raw} with --duet: two servers share one GPU, so each must fit twice; "
            f"give {MEMF_FLAG} {MEMF_MAX} or less (e.g. 0.3 for the tiny model)"
        )
    first_port(server_args)  # a --port that is not a number: refused before any server starts


def first_port(server_args: Sequence[str]) -> int:
    """The first server's port: its --port (either form), SGLang's default without one."""
    got = flag_value(list(server_args), "--port")
    if got is None:
        return DEFAULT_PORT
    try:
        return int(got[1] or "")
    except ValueError:
        raise UsageError(f"--port {got[1]!r}: not a number; --duet gives the second server port + 500") from None


def second_server_args(server_args: Sequence[str]) -> tuple[str, ...]:
    """The first server's arguments with the second server's port (--port P + PORT_OFFSET): every --port, of
    either form, gets it, so that no `--port=P` is left for SGLang to pick (both servers on P)."""
    port = str(first_port(server_args) + PORT_OFFSET)
    args = list(server_args)
    if flag_value(args, "--port") is None:
        return (*args, "--port", port)
    for i, x in enumerate(args):
        if x.startswith("--port="):
            args[i] = f"--port={port}"
        elif x == "--port" and i + 1 < len(args):
            args[i + 1] = port
    return tuple(args)


class DuetLab(Protocol):
    def n_duets(self) -> int: ...

    def pairs(self, metric: str) -> list[tuple[float, float]]:
        """(reference median, arm median) of each completed duet, in duet order; duets without the metric dropped."""
        ...

    def add_duet(self) -> None:
        """One more duet; BudgetExhausted when the budget cannot take it."""
        ...


VALUES = ("medians", "pairs")


def unit_value(a: Sequence[float | None], b: Sequence[float | None], value: str) -> tuple[float, float] | None:
    """One duet's (reference, arm) numbers from its two starts' measured repetitions, in serving order.

    medians: the two start medians (the duet's ratio is median_B / median_A). pairs: the reference's median
    and that times the median over j of B_j / A_j, the j-th repetitions of each, which abba() serves next to
    each other: a state that switches every few repetitions puts 2 of 5 slow repetitions in one arm and 3 in
    the other, moving the ratio of medians by the whole slow/fast step, while it spoils only the adjacent
    pairs it falls between. Either way the duet stays the replication unit."""
    ca, cb = clean(a), clean(b)
    if not ca or not cb:
        return None
    ma, mb = statistics.median(ca), statistics.median(cb)
    if ma <= 0 or mb <= 0:
        return None
    if value == "medians":
        return ma, mb
    rs = [y / x for x, y in zip(a, b) if x is not None and y is not None and x > 0 and y > 0]
    return (ma, ma * statistics.median(rs)) if rs else None


def unit_reps(ref_units: Sequence, arm_units: Sequence, metric: str) -> list[tuple[list, list]]:
    """(reference's, arm's) measured repetitions of `metric` in each round both completed (bench.store units of
    one round), in round order."""
    arm_by = {u.round: u for u in arm_units}
    return [
        ([r.get(metric) for r in u.reps], [r.get(metric) for r in arm_by[u.round].reps])
        for u in sorted(ref_units, key=lambda u: u.round)
        if u.round in arm_by
    ]


def unit_pairs(ref_units: Sequence, arm_units: Sequence, metric: str, value: str) -> list[tuple[float, float]]:
    """unit_value of each duet both of whose starts completed, in round order."""
    return [x for a, b in unit_reps(ref_units, arm_units, metric) if (x := unit_value(a, b, value)) is not None]


def compare(
    pairs: Sequence[tuple[float, float]], metric: str, policy: Policy, confidence: float | None = None
) -> Comparison:
    """The duets' comparison, at the policy's per-look confidence for this many duets unless told otherwise (a duet
    is a block of two: bench.replication.compare_blocks)."""
    return compare_blocks(list(pairs), metric, policy, confidence)


def ratio_cv(pairs: Sequence[tuple[float, float]]) -> float:
    """Duet-to-duet CV of the ratio arm / reference (the spread the verdict's interval is made of)."""
    return cv([b / a for a, b in pairs if a > 0])
