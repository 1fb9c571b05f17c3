"""What ab, ablate and bisect measure, and what they conclude, over any lab (real servers or a simulation).

Each plan states its comparisons, lets bench.replication add starts until they are decided or the budget
ends, and returns a conclusion record that the runner stores and the report prints. A plan names a culprit
only after a confirmation: bisect measures bad - c and good + c (bench.bisect); ablate needs both the patch
alone on the base to regress and the full set without it to improve, measuring the missing side itself
when only one mode was asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import bisect as bis
from .errors import BudgetExhausted
from .launcher import ArmSpec
from .replication import (
    METRICS,
    Lab,
    Policy,
    compare,
    decide_pairs,
    ensure,
    ensure_pairs,
    look_confidence_of,
    placement_values,
    replicate_until,
    smaller_sides,
)
from .stats import DECIDED, IMPROVEMENT, REGRESSION, SAME, Comparison, regression_ruled_out
from .verdicts import Place, Placement, pct, place_confirmation, place_probe

BUDGET_NOTE = "at this budget"


@dataclass(frozen=True)
class Settings:
    policy: Policy
    metric: str = "step_ms_b1"
    # bisect: when the primary metric does not regress but another metric does (at a Bonferroni-adjusted
    # confidence over the other metrics), bisect that one and say so
    follow: bool = True
    # bisect's confirmations: "fresh" measures good and bad again beside them (drift cannot fake them); "shared"
    # reads every start of the endpoints and reuses a probe's starts of the same set (fewer starts)
    confirm: str = "shared"


class _Budget:
    """Turns the lab's BudgetExhausted into a flag: a plan finishes its conclusions with what was measured."""

    def __init__(self) -> None:
        self.exhausted = False
        self.message = ""

    def run(self, fn: Callable[[], object]) -> bool:
        if self.exhausted:
            return False
        try:
            fn()
            return True
        except BudgetExhausted as e:
            self.exhausted, self.message = True, str(e)
            return False


# -- ab ---------------------------------------------------------------------------------------------------------


def run_ab(lab: Lab, arms: Sequence[ArmSpec], pairs: Sequence[tuple[str, ArmSpec, ArmSpec]], s: Settings) -> dict:
    budget = _Budget()
    budget.run(lambda: ensure(lab, arms, s.policy.initial))
    budget.run(lambda: decide_pairs(lab, s.policy, [(r, a) for _, r, a in pairs], s.metric))
    rows = []
    for section, ref, arm in pairs:
        c = compare(lab, ref, arm, s.metric, s.policy)
        rows.append(
            {"section": section, "ref": ref.name, "arm": arm.name, "verdict": c.verdict, "comparison": c.to_dict()}
        )
    return {
        "type": "conclusion",
        "kind": "ab",
        "metric": s.metric,
        "comparisons": rows,
        "budget_exhausted": budget.exhausted,
        "budget_message": budget.message,
    }


# -- ablate -----------------------------------------------------------------------------------------------------


def ablate_finding(alone: str | None, leave: str | None) -> tuple[str, str]:
    """(finding, sentence) for one patch from its alone-on-base and left-out-of-full verdicts."""
    if alone == REGRESSION and leave == IMPROVEMENT:
        return "culprit", "regresses on the base and the full set improves without it (confirmed both ways)"
    if alone == IMPROVEMENT and leave == REGRESSION:
        return "helps", "improves the base and the full set regresses without it (confirmed both ways)"
    if alone == REGRESSION and leave == SAME:
        return (
            "masked",
            "regresses alone, but the full set is the same without it: another patch does the same or hides it",
        )
    if alone == SAME and leave == IMPROVEMENT:
        return (
            "interaction",
            "alone it changes nothing, but the full set improves without it: it regresses together with another patch",
        )
    if alone == SAME and leave == SAME:
        return "no effect", "no change either way (both intervals inside the minimum effect)"
    if alone in DECIDED and leave in DECIDED:
        return "inconsistent", f"alone: {alone}, left out: {leave}"
    # One side measured (--mode alone / leave-out, or a set that cannot exist): a decided "same" is what the starts
    # bought, so say it; it is not a culprit test (that needs both sides).
    if alone is None and leave == SAME:
        return "no effect left out", "the full set is the same without it (alone on the base: not measured)"
    if leave is None and alone == SAME:
        return "no effect alone", "it changes nothing on the base (left out of the full set: not measured)"
    return "cannot tell", f"alone: {alone or 'not measured'}, left out: {leave or 'not measured'}"


NO_HARM = ("no effect", "helps", "no effect alone", "no effect left out")


def qualify(finding: str, sentence: str, elsewhere: Sequence[str]) -> tuple[str, str]:
    """An ablate finding, read on the primary metric, with what regressed on the other metrics of the same
    comparisons: a claim of no harm becomes "mixed" (the step may hold while a phase, tok/s or the accept
    length regresses); another finding but a culprit says them too. A culprit is never made from them."""
    if not elsewhere or finding == "culprit":
        return finding, sentence
    return ("mixed" if finding in NO_HARM else finding), f"{sentence}; but {'; '.join(elsewhere)}"


def _elsewhere(lab: Lab, sides: Sequence[tuple[ArmSpec, ArmSpec, str]], s: Settings) -> list[str]:
    """What regressed on the other metrics of a patch's measured sides (ref, arm, where), and how to test it."""
    out, names = [], []
    for ref, arm, where in sides:
        regressed, k = regressed_elsewhere(lab, ref, arm, s)
        out += [
            f"{c.metric} regressed {where} ({pct(c)} at {c.confidence:.4f}, adjusted for {k} metrics)"
            for c in regressed
        ]
        names += [c.metric for c in regressed if c.metric not in names]
    return out + [f"ablate --metric {m} tests it both ways" for m in names]


def run_ablate(
    lab: Lab, base: ArmSpec, full: ArmSpec, alone: dict[str, ArmSpec], leave: dict[str, ArmSpec], mode: str, s: Settings
) -> dict:
    """alone/leave map each candidate to its arm (base + p / full - p; None where the set cannot exist)."""
    pol, m = s.policy, s.metric
    budget = _Budget()
    first = [(base, alone[p]) for p in alone if mode in ("both", "alone") and alone[p] is not None]
    first += [(full, leave[p]) for p in leave if mode in ("both", "leave-out") and leave[p] is not None]
    budget.run(lambda: ensure_pairs(lab, first, pol.initial))
    budget.run(lambda: decide_pairs(lab, pol, first, m))
    # confirmation: the side the mode left out, for each patch that moved on the side measured
    second = []
    for p in alone:
        va = compare(lab, base, alone[p], m, pol).verdict if alone.get(p) and mode != "leave-out" else None
        vl = compare(lab, full, leave[p], m, pol).verdict if leave.get(p) and mode != "alone" else None
        if mode == "leave-out" and vl in (IMPROVEMENT, REGRESSION) and alone.get(p):
            second.append((base, alone[p]))
        if mode == "alone" and va in (IMPROVEMENT, REGRESSION) and leave.get(p):
            second.append((full, leave[p]))
    if second:
        budget.run(lambda: decide_pairs(lab, pol, second, m))
    rows = []
    for p in alone:
        va = compare(lab, base, alone[p], m, pol).verdict if alone.get(p) and lab.n_starts(alone[p]) else None
        vl = compare(lab, full, leave[p], m, pol).verdict if leave.get(p) and lab.n_starts(leave[p]) else None
        finding, sentence = ablate_finding(va, vl)
        if finding == "cannot tell" and budget.exhausted:
            sentence += f" ({BUDGET_NOTE})"
        sides = [(base, alone[p], "alone on the base")] if va is not None else []
        sides += [(leave[p], full, "with it in the full set")] if vl is not None else []
        elsewhere = _elsewhere(lab, sides, s)
        finding, sentence = qualify(finding, sentence, elsewhere)
        rows.append(
            {
                "patch": p,
                "alone": va,
                "left_out": vl,
                "finding": finding,
                "sentence": sentence,
                "elsewhere": elsewhere,
                "confirmation_measured": any(a is alone.get(p) or a is leave.get(p) for _, a in second),
            }
        )
    culprits = [r["patch"] for r in rows if r["finding"] == "culprit"]
    return {
        "type": "conclusion",
        "kind": "ablate",
        "metric": m,
        "patches": rows,
        "culprits": culprits,
        "budget_exhausted": budget.exhausted,
        "budget_message": budget.message,
    }


# -- bisect -----------------------------------------------------------------------------------------------------


def follow_metric(lab: Lab, good: ArmSpec, bad: ArmSpec, s: Settings) -> tuple[str, str]:
    """The metric to bisect on, and why: the primary one, or the other metric that clearly regressed (read as
    regressed_elsewhere reads them)."""
    primary = compare(lab, good, bad, s.metric, s.policy)
    if endpoint_regressed(lab, good, bad, s.metric, s.policy) or not s.follow:
        return s.metric, ""
    regressed, k = regressed_elsewhere(lab, good, bad, s)
    if not regressed:
        return s.metric, ""
    c = clearest(regressed)
    why = (
        f"{s.metric} did not regress ({primary.verdict}, {primary.change * 100:+.1f}%), but {c.metric} did "
        f"({c.change * 100:+.1f}% [{c.low * 100:+.1f}, {c.high * 100:+.1f}] at {c.confidence:.4f} confidence, "
        f"adjusted for {k} metrics): bisecting on {c.metric}"
    )
    return c.metric, why


def clearest(regressed: Sequence[Comparison]) -> Comparison:
    """The regression whose interval lies farthest beyond no change (the first on ties)."""
    return max(regressed, key=lambda c: c.low if c.lower_is_better else -c.high)


def regressed_elsewhere(lab: Lab, ref: ArmSpec, arm: ArmSpec, s: Settings) -> tuple[list[Comparison], int]:
    """The metrics but the primary one on which `arm` regressed against `ref`, and k, the number of others read."""
    others = [m for m, _, _ in METRICS if m != s.metric and lab.start_values(ref, m) and lab.start_values(arm, m)]
    if not others:
        return [], 0
    look = look_confidence_of(lab, ref, arm, s.metric, s.policy)
    conf = 1 - (1 - look) / len(others)
    read = [compare(lab, ref, arm, m, s.policy, confidence=conf) for m in others]
    return [c for c in read if c.verdict == REGRESSION], len(others)


def not_ruled_out(lab: Lab, good: ArmSpec, bad: ArmSpec, pol: Policy) -> list[str]:
    """The metrics on which bad may still be worse than good by the minimum effect (its interval's bad-side
    bound reaches d, or too few starts): "no regression" needs this empty. Every metric is read at the plain
    confidence: "none regresses" is an intersection-union claim, which needs no multiplicity adjustment."""
    out = []
    for m, _, _ in METRICS:
        if not (lab.start_values(good, m) and lab.start_values(bad, m)):
            continue
        if not regression_ruled_out(compare(lab, good, bad, m, pol)):
            out.append(m)
    return out


def endpoint_regressed(lab: Lab, good: ArmSpec, bad: ArmSpec, metric: str, pol: Policy) -> bool:
    """A regression at the endpoints is read at the plain confidence: it only starts the search, and no patch is
    named before the confirmations, measured afresh, agree. Claims that end the search (same, improvement)
    are read at the per-look confidence."""
    return compare(lab, good, bad, metric, pol, confidence=pol.confidence).verdict == REGRESSION


def _endpoint_primary_needs(lab: Lab, good: ArmSpec, bad: ArmSpec, s: Settings) -> Callable[[], list[ArmSpec]]:
    def needs() -> list[ArmSpec]:
        if endpoint_regressed(lab, good, bad, s.metric, s.policy):
            return []
        if compare(lab, good, bad, s.metric, s.policy).verdict in DECIDED:
            return []
        return smaller_sides(lab, [(good, bad)], s.policy)

    return needs


def _endpoint_needs(lab: Lab, good: ArmSpec, bad: ArmSpec, s: Settings) -> Callable[[], list[ArmSpec]]:
    """More endpoint starts while the primary metric did not regress, no other metric has (as follow_metric
    reads them) and some metric is not ruled out: a regression outside the primary needs starts to show."""

    def needs() -> list[ArmSpec]:
        if endpoint_regressed(lab, good, bad, s.metric, s.policy) or follow_metric(lab, good, bad, s)[1]:
            return []
        return smaller_sides(lab, [(good, bad)], s.policy) if not_ruled_out(lab, good, bad, s.policy) else []

    return needs


def _place(lab: Lab, good: ArmSpec, bad: ArmSpec, probe: ArmSpec, metric: str, pol: Policy) -> Placement:
    """Where the probe's start values lie between good's and bad's (bench.verdicts.place_probe)."""
    g, b, p = placement_values(lab, [good, bad, probe], metric, pol)
    return place_probe(g, b, p, metric, pol, False)


def _placement_needs(
    lab: Lab, good: ArmSpec, bad: ArmSpec, probe: ArmSpec, metric: str, pol: Policy
) -> Callable[[], list[ArmSpec]]:
    def needs() -> list[ArmSpec]:
        pl = _place(lab, good, bad, probe, metric, pol)
        if pl.place is not Place.OPEN:
            return []
        n = {a.key: lab.n_starts(a) for a in (good, bad, probe)}
        # the probe weighs most in the contrast; the shared references once the probe has more starts
        if n[probe.key] <= min(n[good.key], n[bad.key]):
            return [probe]
        return smaller_sides(lab, [(good, bad)], pol) or [probe]

    return needs


def run_bisect(
    lab: Lab,
    good: ArmSpec,
    bad: ArmSpec,
    make_arm: Callable[[tuple[str, ...], str], ArmSpec],
    dependents: Callable[[str], set[str]],
    s: Settings,
) -> dict:
    pol = s.policy
    budget = _Budget()
    budget.run(lambda: ensure(lab, [good, bad], pol.initial))
    budget.run(lambda: replicate_until(lab, pol, _endpoint_primary_needs(lab, good, bad, s)))
    if s.follow:
        budget.run(lambda: replicate_until(lab, pol, _endpoint_needs(lab, good, bad, s)))
    metric, why = follow_metric(lab, good, bad, s)
    endpoint = compare(lab, good, bad, metric, pol)
    if endpoint_regressed(lab, good, bad, metric, pol) and not why:
        endpoint = compare(lab, good, bad, metric, pol, confidence=pol.confidence)
    out: dict[str, Any] = {
        "type": "conclusion",
        "kind": "bisect",
        "good": good.name,
        "bad": bad.name,
        "metric": metric,
        "primary_metric": s.metric,
        "followed": why,
        "endpoint": endpoint.to_dict(),
    }
    cands = bis.candidates_between(good.pset.patches, bad.pset.patches, dependents)
    placements: list[dict] = []
    if endpoint.verdict != REGRESSION:
        open_ = not_ruled_out(lab, good, bad, pol) if s.follow else []
        outcome = bis.CANNOT_TELL if endpoint.verdict not in DECIDED or open_ else "no regression"
        measured = "" if math.isnan(endpoint.change) else f" ({endpoint.change * 100:+.1f}%)"
        reason = (
            f"bad vs good on {metric}: {endpoint.verdict}{measured} after {endpoint.n_ref} and "
            f"{endpoint.n_arm} starts"
            + (f"; not ruled out: a regression beyond {pol.min_effect:.0%} on {', '.join(open_)}" if open_ else "")
            + (f" {BUDGET_NOTE}" if budget.exhausted or outcome == bis.CANNOT_TELL else "")
        )
        res = bis.BisectResult(candidates=cands, outcome=outcome, reason=reason)
    else:

        def place(patches: tuple[str, ...], role: str) -> Place:
            arm = make_arm(patches, role)
            budget.run(lambda: ensure(lab, [arm], pol.initial))
            budget.run(lambda: replicate_until(lab, pol, _placement_needs(lab, good, bad, arm, metric, pol)))
            pl: Placement = _place(lab, good, bad, arm, metric, pol)
            placements.append(
                {
                    "arm": arm.name,
                    "key": arm.key,
                    "patches": list(arm.pset.patches),
                    "role": role,
                    "starts": lab.n_starts(arm),
                    **pl.to_dict(),
                }
            )
            return pl.place

        blocks = [0]
        confirmed: dict[str, tuple[ArmSpec, ArmSpec]] = {}  # confirmation role -> (its good reference, its set)

        def confirm(items: list[tuple[tuple[str, ...], str, str]]) -> list[Place]:
            """The confirmations of a suspect (or of an interaction's pair), measured as one block."""
            # shared evidence may confirm, never refute: drift can fake `good + c` looking good (14 % of runs of a
            # drifting session), so shared confirmations that do not both hold are measured again fresh
            if s.confirm == "shared":
                places = measure_block(items, shared=True)
                if all(pl.value == expect for pl, (_, _, expect) in zip(places, items)) or budget.exhausted:
                    return places
            return measure_block(items, shared=False)

        def measure_block(items: list[tuple[tuple[str, ...], str, str]], shared: bool) -> list[Place]:
            """Round by round: good, the first set, bad, the next set, ... until each set is placed."""
            blocks[0] += 1
            tag = f"confirm{blocks[0]}"
            if shared:
                g, b = good, bad
                arms = [make_arm(p, role) for p, role, _ in items]
            else:
                g = replace(good, name=f"good@{tag}", block=tag)
                b = replace(bad, name=f"bad@{tag}", block=tag)
                arms = [replace(make_arm(p, role), block=tag) for p, role, _ in items]
                arms = [replace(a, name=f"{a.name}@{tag}") for a in arms]
            order = [x for i, a in enumerate(arms) for x in ((g if i % 2 == 0 else b), a)]
            order += [b if len(arms) % 2 else g]

            def placed(a: ArmSpec, expect: str) -> Placement:
                vg, vb, va = placement_values(lab, [g, b, a], metric, pol)
                return place_confirmation(vg, vb, va, expect, metric, pol)

            def needs() -> list[ArmSpec]:
                out: list[ArmSpec] = []
                for a, (_, _, expect) in zip(arms, items):
                    if placed(a, expect).place is Place.OPEN:
                        out += smaller_sides(lab, [(g, a), (b, a)], pol)
                return out

            budget.run(lambda: ensure(lab, order, pol.initial))
            budget.run(lambda: replicate_until(lab, pol, needs))
            out = []
            for a, (_, role, expect) in zip(arms, items):
                pl = placed(a, expect)
                confirmed[role] = (g, a)
                placements.append(
                    {
                        "arm": a.name,
                        "key": a.key,
                        "patches": list(a.pset.patches),
                        "role": role,
                        "block": tag,
                        "refs": "shared" if shared else "fresh",
                        "good": g.name,
                        "bad": b.name,
                        "starts": lab.n_starts(a),
                        **pl.to_dict(),
                    }
                )
                out.append(pl.place)
            return out

        res = bis.bisect_culprit(good.pset.patches, bad.pset.patches, place, dependents, confirm)
        if res.outcome == bis.CANNOT_TELL and budget.exhausted:
            res.reason += f" ({BUDGET_NOTE})"
        if res.culprit and not res.partner and f"confirm: bad - {res.culprit}" in confirmed:
            # the culprit is confirmed on one metric; what the set without it still regresses on is another
            # patch's doing (a draft change under a host slowdown): said, never named
            g, a = confirmed[f"confirm: bad - {res.culprit}"]
            left, k = regressed_elsewhere(lab, g, a, replace(s, metric=metric))
            if left:
                res.reason += (
                    f"; without {res.culprit} the set still regresses against good on "
                    + ", ".join(f"{c.metric} ({pct(c)})" for c in left)
                    + f" (at {left[0].confidence:.4f}, adjusted for {k} metrics): not {res.culprit}'s; bisect with "
                    f"--metric {clearest(left).metric} for it"
                )
                out["not_carried"] = [c.metric for c in left]
    out.update(
        {
            "outcome": res.outcome,
            "culprit": res.culprit,
            "partner": res.partner,
            "suspect": res.suspect,
            "reason": res.reason,
            "candidates": list(cands),
            "probes": placements,
            "max_search_probes": res.max_search_probes(),
            "budget_exhausted": budget.exhausted,
            "budget_message": budget.message,
        }
    )
    return out
