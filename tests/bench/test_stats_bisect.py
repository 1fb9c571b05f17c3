"""The start-level statistics and the pure bisect logic (scripted oracles: every outcome of the confirmation)."""

from __future__ import annotations

import math
import random

import pytest

from bench import bisect as bis
from bench import stats
from bench.replication import Policy
from bench.verdicts import Place, flags, place_probe


def _starts(n, mu, cv, seed):
    rng = random.Random(seed)
    return [mu * math.exp(rng.gauss(0, cv)) for _ in range(n)]


def test_verdict_zones_and_too_few_starts():
    a = [3.0, 3.03, 2.98, 3.01]
    assert stats.compare_starts(a, [x * 1.10 for x in a]).verdict == stats.REGRESSION
    assert stats.compare_starts(a, [x * 0.90 for x in a]).verdict == stats.IMPROVEMENT
    assert stats.compare_starts(a, [3.0, 3.02, 2.99, 3.01]).verdict == stats.SAME
    # +3% with these spreads: the interval straddles the 2% line
    c = stats.compare_starts(a, [3.09, 3.0, 3.15, 3.05])
    assert c.verdict == stats.UNDECIDED and c.low < 0.02 < c.high
    # tok/s: higher is better, a drop is the regression
    assert stats.compare_starts(a, [x * 0.9 for x in a], lower_is_better=False).verdict == stats.REGRESSION
    few = stats.compare_starts([3.0, 3.0], [4.0, 4.0, 4.0])
    assert few.verdict == stats.TOO_FEW and math.isnan(few.low) and few.n_ref == 2
    # deterministic metrics: no spread, the difference is exact
    assert stats.compare_starts([8.0] * 3, [8.0] * 3).verdict == stats.SAME
    assert stats.compare_starts([8.0] * 3, [9.0] * 3).verdict == stats.REGRESSION


def test_interval_covers_the_true_ratio_at_its_confidence():
    """Welch on log start medians: the 95% interval covers the true +5% in about 95 of 100 trials."""
    hits = 0
    trials = 400
    for t in range(trials):
        a, b = _starts(4, 3.0, 0.02, t), _starts(4, 3.15, 0.02, 10_000 + t)
        c = stats.compare_starts(a, b)
        hits += c.low <= 0.05 <= c.high
    assert 0.92 <= hits / trials <= 0.98


def test_contrast_interval_and_placement():
    g, b = _starts(4, 3.0, 0.005, 1), _starts(4, 3.3, 0.005, 2)
    # one planned look (3 starts is also the last): placed at the plain 95%; the boundaries of a run with more
    # looks are bench.sequential's (tests/bench/test_sequential.py)
    pol = Policy(initial=3, max_starts=3)
    assert place_probe(g, b, _starts(3, 3.0, 0.005, 3), "step_ms_b1", pol).place is Place.GOOD
    assert place_probe(g, b, _starts(3, 3.3, 0.005, 4), "step_ms_b1", pol).place is Place.BAD
    half = place_probe(g, b, _starts(3, 3.15, 0.005, 5), "step_ms_b1", pol)
    assert half.place is Place.BETWEEN and 0.3 < half.toward_bad < 0.7
    assert place_probe(g, b, [3.0, 3.0], "step_ms_b1", pol).place is Place.OPEN  # too few starts
    # higher-is-better metric: bad is the lower one
    assert place_probe([240.0] * 3, [200.0] * 3, [201.0, 199.0, 200.5], "tok_s_b1", pol).place is Place.BAD
    con = stats.log_contrast([[2.0, 2.0], [1.0, 1.0], [4.0, 4.0]], [1, -0.5, -0.5])
    assert con.estimate == pytest.approx(0.0) and con.low == con.high


def test_flags_name_a_phase_that_moved_while_the_step_did_not():
    def c(metric, change):
        ref = [1.0, 1.01, 0.99]
        return stats.compare_starts(ref, [x * (1 + change) for x in ref], metric=metric)

    rows = [c("step_ms_b1", 0.0), c("eagle_verify_ms_b1", 0.21), c("eagle_draft_extend_ms_b1", -0.3)]
    out = flags(rows)
    assert any(f.startswith("EAGLE verify p50 ms (b1) moved (regression") for f in out)
    assert any(f.startswith("phases moved in opposite directions") for f in out)
    assert flags([c("step_ms_b1", 0.1), c("eagle_verify_ms_b1", 0.1)]) == []


def test_flags_name_a_first_token_or_concurrent_change_the_step_does_not_show():
    def c(metric, change):
        ref = [1.0, 1.01, 0.99]
        return stats.compare_starts(ref, [x * (1 + change) for x in ref], metric=metric)

    out = flags([c("step_ms_b1", 0.0), c("ttft_ms_b1", 0.15)])
    assert len(out) == 1 and out[0].startswith("time to first token ms (b1) moved (regression")
    assert "the prefill path" in out[0] and "--metric ttft_ms_b1" in out[0]
    out = flags([c("step_ms_b1", 0.0), c("step_ms_bc", -0.1)])
    assert len(out) == 1 and "the concurrent batch" in out[0] and "(improvement" in out[0]
    # the step moved too: its own verdict says so, no flag
    assert flags([c("step_ms_b1", 0.1), c("ttft_ms_b1", 0.1), c("step_ms_bc", 0.1)]) == []


# ---- bisect: scripted oracles --------------------------------------------------------------------------------


def _oracle(culprits=(), pairs=(), script=None):
    """Place by a truth table: bad when a culprit (or a whole interacting pair) is in the set."""
    calls = []

    def place(patches, role):
        calls.append((patches, role))
        if script and role in script:
            return script[role]
        s = set(patches)
        bad = any(c in s for c in culprits) or any(set(p) <= s for p in pairs)
        return Place.BAD if bad else Place.GOOD

    return place, calls


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 16])
def test_bisect_finds_and_confirms_each_culprit(n):
    cands = [f"p{i}" for i in range(n)]
    good = ["g0", "g1"]
    for k in range(n):
        place, calls = _oracle({cands[k]})
        res = bis.bisect_culprit(good, good + cands, place)
        assert res.outcome == bis.CULPRIT and res.culprit == cands[k]
        roles = [r for _, r in calls]
        assert roles[-2:] == [f"confirm: bad - {cands[k]}", f"confirm: good + {cands[k]}"]
        assert len(roles) - 2 <= res.max_search_probes()
        assert all(set(good) <= set(p) for p, _ in calls)


def test_confirmation_rejects_a_wrong_candidate():
    """The search said p2 (e.g. a noisy probe), but bad without p2 is still bad: nobody is named."""
    cands = ["p0", "p1", "p2", "p3"]
    place, _ = _oracle({"p3"}, script={"prefix 2 of 4": Place.GOOD, "prefix 3 of 4": Place.BAD})
    res = bis.bisect_culprit([], cands, place)
    assert res.suspect == "p2" and res.culprit is None and res.outcome == bis.INCONSISTENT
    assert "bad - p2 is bad" in res.reason or "still bad" in res.reason


def test_interaction_is_reported_with_its_partner():
    cands = [f"p{i}" for i in range(6)]
    place, calls = _oracle(pairs=[("p1", "p4")])
    res = bis.bisect_culprit(["g"], ["g", *cands], place)
    assert res.outcome == bis.INTERACTION and (res.partner, res.culprit) == ("p1", "p4")
    assert any(r.startswith("partner:") for _, r in calls)


def test_split_regression_and_undecided_probes_name_nobody():
    place, _ = _oracle(script={"prefix 2 of 4": Place.BETWEEN})
    res = bis.bisect_culprit([], ["a", "b", "c", "d"], place)
    assert res.outcome == bis.SEVERAL and res.culprit is None and "bench ablate --patches a,b,c,d" in res.reason
    place, _ = _oracle({"d"}, script={"confirm: good + d": Place.OPEN})
    res = bis.bisect_culprit([], ["a", "b", "c", "d"], place)
    assert res.outcome == bis.CANNOT_TELL and res.culprit is None and res.suspect == "d"
    place, _ = _oracle({"c"}, script={"confirm: good + c": Place.BETWEEN})
    assert bis.bisect_culprit([], ["a", "b", "c", "d"], place).outcome == bis.PARTIAL


def test_removal_takes_the_dependents_along_and_rejects_non_subset():
    place, calls = _oracle({"b"})
    res = bis.bisect_culprit([], ["a", "b", "c"], place, dependents=lambda n: {"c"} if n == "b" else set())
    assert res.culprit == "b"
    assert (("a",), "confirm: bad - b, c") in calls
    with pytest.raises(ValueError, match="only in good: x"):
        bis.bisect_culprit(["x"], ["a"], place)
    assert bis.bisect_culprit(["a"], ["a"], place).outcome == bis.NOTHING
