"""Find the patch responsible for a regression between a good and a bad patch set in ~log2(n) measurements.

Pure logic over an oracle ``measure(patch_set) -> Verdict``; the GPU runner supplies an oracle that starts a
server with that set and compares it against the good/bad references (bench/runner.py).

Model (same as ``asv find`` / ``git bisect``): the candidates are the patches in bad but not in good, in
manifest order; probe sets are good + a prefix of the candidates; the first prefix that turns bad ends with the
culprit. Exactly one verdict call checks that bad is really bad (otherwise: "no culprit"), then
ceil(log2 n) calls bisect the prefixes, so at most ceil(log2 n) + 1 calls in total. With several interacting
culprits it names the first candidate (in order) whose addition makes the prefix bad.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence


class Verdict(str, enum.Enum):
    GOOD = "good"
    BAD = "bad"


@dataclass(frozen=True)
class Probe:
    patches: tuple[str, ...]
    verdict: Verdict


@dataclass
class BisectResult:
    culprit: str | None  # None: the bad set measured good (no regression to bisect), or no candidates
    candidates: tuple[str, ...]
    probes: list[Probe] = field(default_factory=list)
    reason: str = ""

    @property
    def n_measured(self) -> int:
        return len(self.probes)

    def max_expected_probes(self) -> int:
        n = len(self.candidates)
        return (math.ceil(math.log2(n)) if n > 1 else 0) + 1


def candidates_between(good: Sequence[str], bad: Sequence[str]) -> tuple[str, ...]:
    good_set = set(good)
    extra = [p for p in good if p not in set(bad)]
    if extra:
        # Bisecting removals as well as additions has no single prefix order; say so instead of guessing.
        raise ValueError(f"bisect needs good to be a subset of bad; only in good: {', '.join(extra)}")
    return tuple(p for p in bad if p not in good_set)


def bisect_culprit(good: Sequence[str], bad: Sequence[str],
                   measure: Callable[[tuple[str, ...]], Verdict]) -> BisectResult:
    """good/bad are ordered patch lists (bad must contain good); measure gets ordered tuples."""
    cands = candidates_between(good, bad)
    result = BisectResult(culprit=None, candidates=cands)
    if not cands:
        result.reason = "good and bad are the same set: nothing to bisect"
        return result

    def probe(prefix_len: int) -> Verdict:
        chosen = set(good) | set(cands[:prefix_len])
        patches = tuple(p for p in bad if p in chosen)  # keep manifest (bad-list) order
        v = Verdict(measure(patches))
        result.probes.append(Probe(patches, v))
        return v

    if probe(len(cands)) is Verdict.GOOD:
        result.reason = "the bad set measured good: no regression to bisect"
        return result
    lo, hi = 0, len(cands)  # invariant: prefix lo is good (the good set by definition), prefix hi is bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid) is Verdict.BAD:
            hi = mid
        else:
            lo = mid
    result.culprit = cands[hi - 1]
    result.reason = f"adding {result.culprit} turns good + {hi - 1} candidate(s) bad"
    return result
