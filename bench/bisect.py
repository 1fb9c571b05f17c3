"""Find the patch that makes a bad set slower than a good one, and confirm it before naming it.

Pure logic over an oracle `place(patches) -> Place` that says where a set lies between the good and the bad
references (bench.verdicts.place_probe, fed by adaptive replication in bench.plans). The caller has already
shown that bad is worse than good; nothing here looks at numbers.

Search (as `git bisect` / `asv find`): the candidates are the patches in bad but not in good, in manifest
order but each after the candidates it requires (so every prefix is closed over requires); probe sets are
good + a prefix of the candidates; the first prefix that is bad ends with the candidate c. Then, as
Chromium's Pinpoint and Mozilla's sheriffs do before assigning blame, two confirmations:
  bad - c   must be good (c is necessary)
  good + c  must be bad  (c is sufficient)
Only when both hold is c named. When bad - c is good but good + c is good too, c needs an earlier candidate:
a second search over good + c + a prefix of the earlier candidates finds that partner, and the pair is
reported as an interaction. Every other outcome names nobody and says which probe disagreed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .verdicts import Place

CULPRIT = "culprit"
INTERACTION = "interaction"
SEVERAL = "several"  # the regression is split between candidates (a probe lies between the references)
PARTIAL = "partial"  # the candidate carries part of it
INCONSISTENT = "inconsistent"
CANNOT_TELL = "cannot tell"
NOTHING = "nothing to bisect"


@dataclass(frozen=True)
class Probe:
    patches: tuple[str, ...]
    role: str  # "prefix 2 of 5", "confirm: bad - x", "confirm: good + x", "partner: ..."
    place: Place


@dataclass
class BisectResult:
    candidates: tuple[str, ...]
    outcome: str = NOTHING
    culprit: str | None = None  # set only when confirmed both ways (or the second of an interaction)
    partner: str | None = None  # INTERACTION: the earlier candidate the culprit needs
    suspect: str | None = None  # the search's candidate, whether or not it was confirmed
    reason: str = ""
    probes: list[Probe] = field(default_factory=list)

    @property
    def n_probes(self) -> int:
        return len(self.probes)

    def max_search_probes(self) -> int:
        n = len(self.candidates)
        return math.ceil(math.log2(n)) if n > 1 else 0


def candidates_between(
    good: Sequence[str], bad: Sequence[str], dependents: Callable[[str], set[str]] = lambda name: set()
) -> tuple[str, ...]:
    """bad minus good, in bad's order except that a patch comes after every candidate it requires.

    A probe is closed over `requires` before it is launched, so with a patch listed before its requirement
    "good + prefix" would carry a patch from beyond the prefix and the search would blame the wrong one.
    """
    extra = [p for p in good if p not in set(bad)]
    if extra:
        # Bisecting removals as well as additions has no single prefix order; say so instead of guessing.
        raise ValueError(f"bisect needs good to be a subset of bad; only in good: {', '.join(extra)}")
    todo = [p for p in bad if p not in set(good)]
    needs = {p: {r for r in todo if r != p and p in dependents(r)} for p in todo}
    out: list[str] = []
    while todo:
        nxt = next((p for p in todo if needs[p] <= set(out)), todo[0])  # todo[0]: a cycle, which the manifest refuses
        out.append(nxt)
        todo.remove(nxt)
    return tuple(out)


Confirm = Callable[[list[tuple[tuple[str, ...], str, str]]], list[Place]]


def bisect_culprit(
    good: Sequence[str],
    bad: Sequence[str],
    place: Callable[[tuple[str, ...], str], Place],
    dependents: Callable[[str], set[str]] = lambda name: set(),
    confirm: Confirm | None = None,
) -> BisectResult:
    """good/bad are ordered patch lists (bad contains good); `place` gets ordered tuples (bad's order) and a role.

    `dependents(c)`: the patches that require c (they leave with it: bad - c cannot keep them).
    `confirm([(patches, role, expect), ...])`: the confirmations, measured together as one block (the caller
    interleaves them with fresh starts of good and bad, so drift since the search cannot fake them); `expect`
    is the reference the set must match, "good" or "bad". Without it, each is placed like a search probe.
    """
    cands = candidates_between(good, bad, dependents)
    res = BisectResult(candidates=cands)
    if not cands:
        res.reason = "good and bad are the same set"
        return res

    def probe(chosen: set[str], role: str) -> Place:
        patches = tuple(p for p in bad if p in chosen)
        pl = place(patches, role)
        res.probes.append(Probe(patches, role, pl))
        return pl

    def block(items: list[tuple[set[str], str, str]]) -> list[Place]:
        sets = [(tuple(p for p in bad if p in chosen), role, expect) for chosen, role, expect in items]
        places = confirm(sets) if confirm is not None else [place(p, r) for p, r, _ in sets]
        res.probes += [Probe(p, r, pl) for (p, r, _), pl in zip(sets, places)]
        return places

    base = set(good)
    lo, hi = 0, len(cands)  # prefix lo is good (the good set), prefix hi is bad (shown by the caller)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        pl = probe(base | set(cands[:mid]), f"prefix {mid} of {len(cands)}")
        if pl is Place.BAD:
            hi = mid
        elif pl is Place.GOOD:
            lo = mid
        elif pl is Place.BETWEEN:
            res.outcome = SEVERAL
            res.reason = (
                f"good + {', '.join(cands[:mid])} lies between good and bad: part of the regression comes "
                f"with {', '.join(cands[lo:mid])}, the rest with {', '.join(cands[mid:hi])}; no single "
                f"culprit (run `bench ablate --patches {','.join(cands[lo:hi])}`)"
            )
            return res
        else:
            res.outcome = CANNOT_TELL
            res.reason = f"probe good + {', '.join(cands[:mid])} stayed undecided at this budget"
            return res
    c = cands[hi - 1]
    res.suspect = c
    gone = {c} | dependents(c)
    without, alone = block(
        [
            (set(bad) - gone, f"confirm: bad - {', '.join(p for p in bad if p in gone)}", "good"),
            (base | {c}, f"confirm: good + {c}", "bad"),
        ]
    )
    if without is Place.GOOD and alone is Place.BAD:
        res.outcome, res.culprit = CULPRIT, c
        res.reason = f"bad without {c} is good and good with {c} is bad"
    elif without is Place.GOOD and alone is Place.GOOD and hi > 1:
        _partner(res, good, cands[: hi - 1], c, probe, block)
    elif Place.OPEN in (without, alone):
        res.outcome = CANNOT_TELL
        res.reason = f"{c} is the search's candidate, but its confirmation stayed undecided at this budget"
    elif Place.BETWEEN in (without, alone):
        res.outcome = PARTIAL
        res.reason = (
            f"{c} carries part of the regression: bad - {c} is {without.value}, good + {c} is "
            f"{alone.value}; other candidates carry the rest"
        )
    elif without is Place.BAD and alone is Place.BAD:
        res.outcome = INCONSISTENT
        res.reason = (
            f"good + {c} is bad, but bad without {c} is still bad: another candidate causes the same "
            f"regression (redundant culprits); no single culprit"
        )
    else:
        res.outcome = INCONSISTENT
        res.reason = (
            f"the search pointed at {c}, but bad - {c} is {without.value} and good + {c} is "
            f"{alone.value}: the probes disagree (noise, or an effect that is not monotonic in the set)"
        )
    return res


def _partner(res: BisectResult, good, earlier: Sequence[str], c: str, probe, block) -> None:
    """c is necessary but not sufficient: find the earlier candidate it needs (good + c + prefix turns bad)."""
    base = set(good) | {c}
    lo, hi = 0, len(earlier)  # good + c is good (just measured); good + c + all earlier = the bad prefix
    while hi - lo > 1:
        mid = (lo + hi) // 2
        pl = probe(base | set(earlier[:mid]), f"partner: good + {c} + prefix {mid} of {len(earlier)}")
        if pl is Place.BAD:
            hi = mid
        elif pl is Place.GOOD:
            lo = mid
        else:
            res.outcome = CANNOT_TELL if pl is Place.OPEN else PARTIAL
            res.reason = (
                f"{c} is needed but not enough alone (bad - {c} good, good + {c} good); the search for "
                f"what it needs stopped at good + {c} + {', '.join(earlier[:mid])} ({pl.value})"
            )
            return
    partner = earlier[hi - 1]
    # the pair is confirmed in a block of its own: the search's probe of the same set is not evidence enough
    pair, single = block(
        [
            (set(good) | {partner, c}, f"confirm: good + {partner} + {c}", "bad"),
            (set(good) | {partner}, f"confirm: good + {partner}", "good"),
        ]
    )
    if pair is Place.BAD and single is Place.GOOD:
        res.outcome, res.culprit, res.partner = INTERACTION, c, partner
        res.reason = (
            f"{partner} and {c} together: good + both is bad, good + either alone is good, bad without {c} is good"
        )
    else:
        res.outcome = CANNOT_TELL if Place.OPEN in (pair, single) else INCONSISTENT
        res.reason = (
            f"{c} is needed but not enough alone; {partner} looked like its partner, but good + "
            f"{partner} + {c} is {pair.value} and good + {partner} is {single.value}"
        )
