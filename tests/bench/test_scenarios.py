"""The adversary's scenarios (bench/scenarios.py) in CI: planted regressions of new kinds give the right culprit
or nobody, under the bench's default method; the full rates over many seeds are in bench/results/simulate/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import plans
from bench import scenarios as sc
from bench.replication import Policy
from bench.simulate import Plant, SimLab, World, host_slowdown, sim_arm

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "bench/results/2026-12-01-h200-run3/variance/results.jsonl"
ALPHA = 0.05
DEFAULT = plans.Settings(Policy(3, 8, 1 - ALPHA, 0.02))  # the bench's defaults (cli: --spending, --confirm)
TRIALS = 12

# (scenario, least right rate over TRIALS seeds: 95-100% measured over 100 seeds in bench/results/simulate/)
KINDS = [
    ("null-cv1", 0.0),
    ("null-bimodal", 0.0),
    ("host-5", 0.75),
    ("gpu-hidden-20", 0.75),
    ("phase-only-draft-8", 0.75),
    ("prefill-only-10", 0.75),
    ("step-gain-verify-up", 0.75),
    ("interaction-p0-p2", 0.75),
    ("drift-slower-0.3", 0.0),
    ("drift-faster-0.2-p1", 0.0),
    ("bimodal-5", 0.0),
    ("outlier-start-5", 0.0),
    ("below-min-1.8", 0.0),
    ("split-10-70-30", 0.0),
    # session 6 (bench/results/simulate/session6-adversary.md: 200 seeds each)
    ("accept-drop-10", 0.9),
    ("accept-drop-noisy", 0.9),
    ("accept-drop-behind-gain", 0.9),
    ("b1-up-bc-down-5", 0.75),
    ("mask-phases-8", 0.9),
    ("mask-step-8", 0.0),
    ("boundary-2.0", 0.0),
    ("below-min-1.9-bc", 0.0),
    ("intermittent-0.3-20", 0.0),
    ("leak-10", 0.75),
    ("late-onset-20", 0.9),
    ("early-reps-30", 0.0),
    ("rep-outliers-null", 0.0),
    ("rep-outliers-late-20", 0.0),
    ("accept-split-1.5", 0.0),
    ("host-and-accept", 0.9),
]


@pytest.mark.parametrize("name,least", KINDS, ids=[k for k, _ in KINDS])
def test_a_new_kind_of_regression_gives_the_right_culprit_or_nobody(name, least):
    r = sc.run(sc.by_name(name), DEFAULT, TRIALS)
    assert r.wrong == 0, (r.wrong_names, r.outcomes)
    assert r.right / r.trials >= least, r.outcomes


def test_real_noise_with_a_planted_regression_names_no_wrong_patch():
    from bench.simulate import recorded_starts

    pool = tuple(recorded_starts(str(RECORD)))
    r = sc.run(sc.by_name("record-10"), DEFAULT, 8, pool)
    assert r.wrong == 0, r.wrong_names


def test_rates_come_with_clopper_pearson_intervals():
    r = sc.Rates(trials=300, wrong=0)
    lo, hi = r.ci(0)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 300), rel=1e-6)  # the exact bound at k = 0
    r.starts = list(range(1, 101))
    assert r.quantile_starts(0.9) == 90 and r.mean_starts == 50.5


def test_shared_confirmations_reuse_the_endpoints_and_a_probe_of_the_same_set():
    """With the culprit last of three (p2): the search probes good+p0 (prefix 1) and good+p0+p1 (prefix 2), and
    `bad - p2` is prefix 2's set: shared confirmations measure only `good + p2` afresh, with no new references."""
    w = World(plants=[host_slowdown("p2", 0.2)], start_cv=0.002, rep_cv=0.002)
    out = {}
    for mode in ("fresh", "shared"):
        lab = SimLab(w, seed=1)
        s = plans.Settings(Policy(3, 8, 0.95, 0.02), confirm=mode, follow=False)
        res = plans.run_bisect(
            lab, sim_arm("good", ("g",)), sim_arm("bad", ("g", "p0", "p1", "p2")), sim_arm_role, lambda n: set(), s
        )
        assert res["culprit"] == "p2", res["reason"]
        out[mode] = (len(lab.order), sorted(set(lab.order)))
    fresh_n, fresh_keys = out["fresh"]
    shared_n, shared_keys = out["shared"]
    assert not any("block=" in k for k in shared_keys) and any("block=" in k for k in fresh_keys)
    # fresh: 2 endpoints + 2 probes + (good, bad, 2 sets) = 8 arms x 3; shared: 2 + 2 + 1 new set = 5 arms x 3
    assert (fresh_n, shared_n) == (24, 15)


def sim_arm_role(patches, role):
    return sim_arm(role, patches)


def test_simulate_cli_lists_and_refuses_unknown_scenarios():
    run = [sys.executable, "-m", "bench", "simulate"]
    listed = subprocess.run([*run, "--scenario", "list"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "step-gain-verify-up:" in listed.stdout and "(needs --from-record)" in listed.stdout
    bad = subprocess.run([*run, "--scenario", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown scenario nope" in bad.stderr and "Traceback" not in bad.stderr
    rec = subprocess.run([*run, "--scenario", "record-10"], cwd=ROOT, capture_output=True, text=True)
    assert rec.returncode == 2 and "--from-record" in rec.stderr
    one = subprocess.run(
        [*run, "--scenario", "host-5", "--trials", "3"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert one.stdout.count("| host-5 | pocock, shared confirmations") == 1 and "wrong culprit [95% CI]" in one.stdout


HOST_SCENARIOS = [
    "host-regimes-null",
    "host-regimes-5",
    "host-stretches-5",
    "host-probe-moved-5",
    "host-probe-only-null",
    "host-busy-5",
    "host-schednull-null",
    "host-schednull-10",
]


@pytest.mark.parametrize("name", HOST_SCENARIOS)
@pytest.mark.parametrize("adjust", ["none", "host", "steal", "state"])
def test_an_adjustment_names_no_wrong_culprit_on_a_regime_switching_host(name, adjust):
    # host / steal: bisect's endpoints are read adjusted, its probes' places are not (bench/results/hostprobe/
    # hostcov.md), so a culprit still needs unadjusted confirmations; state: the places and confirmations read the
    # fast-state values too (bench.replication.placement_values), each arm classed by its own probe level, so a
    # patch that moves only the probe (host-probe-*) is neither named nor hides the one that moves the step
    settings = plans.Settings(Policy(3, 8, 1 - ALPHA, 0.02, adjust=adjust))
    r = sc.run(sc.by_name(name), settings, 8)
    assert r.wrong == 0, r.wrong_names


def test_the_host_regime_world_carries_both_covariates_and_moves_every_metric_with_them():
    lab = SimLab(sc.by_name("host-regimes-null").world(()), seed=3)
    arm = sim_arm("a", ("g",))
    lab.add_starts([arm] * 6)
    units = lab.units(arm)
    reps = [m for u in units for m in u.reps]
    assert len(units) == 6 and all(len(u.reps) == 5 for u in units) and all(u.host_probe for u in units)
    slow = [m for m in reps if m["host_probe_us"] > 500]
    fast = [m for m in reps if m["host_probe_us"] <= 500]
    assert slow and fast
    assert min(m["step_ms_b1"] for m in slow) > 1.4 * max(m["step_ms_b1"] for m in fast)
    assert min(m["host_steal_pct"] for m in slow) > max(m["host_steal_pct"] for m in fast)


def _bisect_scenario(name: str, seed: int) -> dict:
    lab = SimLab(sc.by_name(name).world(()), seed=seed)
    return plans.run_bisect(
        lab, sim_arm("good", ("g",)), sim_arm("bad", ("g", *sc.C3)), sim_arm_role, lambda n: set(), DEFAULT
    )


def _ab_flags(world: World, seed: int = 0) -> tuple[str, dict, list[str]]:
    """`bench ab` of g against g,p1 on the step: its verdict, every metric's comparison, the flags."""
    from bench.verdicts import all_metrics, flags

    lab = SimLab(world, seed=seed)
    ref, arm = sim_arm("ref", ("g",)), sim_arm("arm", ("g", "p1"))
    res = plans.run_ab(lab, [ref, arm], [("ab", ref, arm)], DEFAULT)
    rows = all_metrics(lab, ref, arm, DEFAULT.policy)
    return res["comparisons"][0]["verdict"], {c.metric: c for c in rows}, flags(rows)


def test_a_draft_change_that_the_step_reads_as_an_improvement_is_flagged_with_its_accept_length():
    """A patch that lowers EAGLE's acceptance (3.0 -> 2.7 tokens per verify) makes the step 5% faster (fewer
    accepted tokens to extend) and tok/s 5% slower: ab on the step says "improvement"; the comparison must say
    that tok/s fell for want of accepted tokens, with the accept length's own verdict."""
    verdict, rows, said = _ab_flags(World(plants=[sc.accept_drop("p1", 0.10, 0.05)], start_cv=0.01))
    assert verdict == "improvement"
    assert rows["accept_len_b1"].verdict == "regression" and rows["accept_len_b1"].change == pytest.approx(-0.10)
    said = [f for f in said if f.startswith("tok/s (batch 1) fell")]
    assert len(said) == 1 and ", step ms (batch 1): improvement (" in said[0], said
    assert "EAGLE accept length (b1) regression, -10.0%" in said[0] and "--metric accept_len_b1" in said[0]
    # a host-side slowdown moves tok/s with the step: nothing to flag about tokens per step
    _, _, said = _ab_flags(World(plants=[host_slowdown("p1", 0.08)], start_cv=0.01))
    assert not [f for f in said if "fell" in f]
    # tok/s down, the step and the accept length the same: time outside the steps, not the draft
    _, _, said = _ab_flags(World(plants=[Plant(frozenset({"p1"}), {"tok_s_b1": 1 / 1.08})], start_cv=0.01))
    (said,) = [f for f in said if f.startswith("tok/s (batch 1) fell")]
    assert ": the time went outside the measured steps" in said and "EAGLE accept length (b1): same (+0.0%" in said
    assert said.endswith("--metric tok_s_b1 to find it") and "draft" not in said


def test_bisect_follows_the_accept_length_when_tok_s_falls_and_the_step_improves():
    res = _bisect_scenario("accept-drop-behind-gain", 2)
    assert res["endpoint"]["metric"] == "accept_len_b1" and res["culprit"] == "p2", res["reason"]
    assert "step_ms_b1 did not regress (improvement" in res["followed"]


def test_a_cost_that_appears_late_in_each_start_is_named_and_shown_at_full_size():
    """p1 +20% from the fourth of five measured repetitions on (a cache that fills). Start medians (the third
    repetition) hid it and the bisect had to follow the later half (10 of 200 seeds said "cannot tell" or "no
    regression" on medians alone); a start's value, the geometric mean of its repetitions, carries 2/5 of it
    (+7.6%), and the later half's own metric shows it at full size beside it."""
    res = _bisect_scenario("late-onset-20", 1)
    assert res["culprit"] == "p1", res["reason"]
    _, rows, _ = _ab_flags(sc.by_name("late-onset-20").world(()), seed=1)
    assert rows["step_ms_b1"].verdict == "regression" and rows["step_ms_b1"].change == pytest.approx(
        0.2 * 2 / 5, abs=0.015
    )
    assert rows["step_ms_b1_late"].verdict == "regression" and rows["step_ms_b1_late"].change == pytest.approx(
        0.2, abs=0.01
    )


def test_a_late_cost_the_start_value_dilutes_below_the_minimum_effect_is_flagged():
    """+5% from the fourth of five repetitions: +2.0% in the start value, at the 2% minimum effect, so the step
    cannot decide; the later half moved by the whole 5%, and the comparison says where to look."""
    world = World(plants=[sc.over_reps(host_slowdown("p1", 0.05), (0, 0, 0, 1, 1))], start_cv=0.01)
    verdict, rows, said = _ab_flags(world, seed=1)
    assert verdict not in ("regression", "improvement"), verdict
    assert rows["step_ms_b1_late"].verdict == "regression"
    said = [f for f in said if "later repetitions" in f]
    assert len(said) == 1 and said[0].startswith("step ms (b1), later half of a start moved (regression, +5."), said
    assert "--metric step_ms_b1_late" in said[0]


def test_the_store_gives_the_later_half_of_each_starts_repetitions_its_own_metric():
    from bench import store

    recs = [{"type": "start", "start_id": "s", "arm_key": "a", "round": 0, "arm": "a"}]
    recs += [{"type": "rep", "start_id": "s", "metrics": {"step_ms_b1": float(i)}} for i in range(5)]
    recs += [{"type": "rep", "start_id": "s", "warmup": True, "metrics": {"step_ms_b1": 99.0}}]
    recs += [{"type": "unit_done", "start_id": "s"}]
    (u,) = store.view(recs).units.values()
    assert [r.get("step_ms_b1_late") for r in u.reps] == [None, None, None, 3.0, 4.0]
    assert store.with_late([]) == [] and store.with_late([{"x": 1.0}]) == [{"x": 1.0}]
    assert [r.get("step_ms_b1_late") for r in store.with_late([{"step_ms_b1": 1.0}, {"step_ms_b1": 2.0}])] == [
        None,
        2.0,
    ]


def _ablate(world: World, seed: int) -> dict:
    res = sc.ablate_once(SimLab(world, seed=seed), sc.C3, DEFAULT)
    return {r["patch"]: r for r in res["patches"]} | {"culprits": res["culprits"]}


def test_simulate_ablates_a_scenario_and_counts_each_patchs_finding():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "simulate",
            "--scenario",
            "step-gain-verify-up",
            "--plan",
            "ablate",
            "--trials",
            "3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (line,) = [x for x in out.splitlines() if x.startswith("| step-gain-verify-up | ablate (both)")]
    assert "p1: mixed 3" in line and "| 0.0% [0.0%, 70.8%] |" in line  # no culprit named, none wrong


def test_ablate_says_mixed_not_helps_when_the_step_gain_hides_a_phase_that_regressed():
    """Issue 12's planted GPU-side delay: verify +20%, draft-extend -30%, the host-bound step 5% faster. On the
    step alone ablate called p1 "helps" (confirmed both ways) in 20 of 20 seeds; the same comparisons show verify
    regressed, so the finding is "mixed" and says which metric to ablate on. No culprit is made from it."""
    rows = _ablate(sc.by_name("step-gain-verify-up").world(()), seed=0)
    p1 = rows["p1"]
    assert (p1["alone"], p1["left_out"], p1["finding"]) == ("improvement", "regression", "mixed"), p1
    assert p1["sentence"].startswith("improves the base and the full set regresses without it")
    # start values (geometric means of the repetitions): [+7.5, +31.8] on start medians
    assert "; but eagle_verify_ms_b1 regressed alone on the base (+20.2% [+13.4, +27.4] at 0.9986" in p1["sentence"]
    assert "; eagle_verify_ms_b1 regressed with it in the full set (+20.9%" in p1["sentence"]
    assert p1["sentence"].endswith("; ablate --metric eagle_verify_ms_b1 tests it both ways") and rows["culprits"] == []
    assert [r["finding"] for r in (rows["p0"], rows["p2"])] == ["no effect", "no effect"]  # no other metric moved


def test_ablate_of_a_null_qualifies_no_finding():
    rows = _ablate(World(start_cv=0.01), seed=3)
    assert all(not rows[p]["elsewhere"] and rows[p]["finding"] != "mixed" for p in sc.C3), rows


def test_qualify_keeps_culprits_and_says_the_rest():
    assert plans.qualify("culprit", "s", ["x regressed"]) == ("culprit", "s")
    assert plans.qualify("no effect", "s", []) == ("no effect", "s")
    assert plans.qualify("no effect alone", "s", ["x", "y"]) == ("mixed", "s; but x; y")
    assert plans.qualify("cannot tell", "s", ["x"]) == ("cannot tell", "s; but x")


def test_a_culprit_on_the_step_is_not_credited_with_another_patchs_drop_in_accepted_tokens():
    """p0 slows the step 5% (host-side), p2 accepts 10% fewer tokens with the step flat. The bisect on the step
    rightly names p0, and reverting p0 leaves tok/s 10% down: the conclusion must say so, from `bad - p0`
    against good, and point at the metric to bisect next. A lone culprit gets no such note."""
    res = _bisect_scenario("host-and-accept", 0)
    assert res["culprit"] == "p0" and res["metric"] == "step_ms_b1"
    assert res["not_carried"][:1] == ["tok_s_b1"] and "accept_len_b1" in res["not_carried"]
    head = "; without p0 the set still regresses against good on tok_s_b1 ("
    assert head in res["reason"], res["reason"]
    assert float(res["reason"].split(head)[1].split("%")[0]) == pytest.approx(-10.0, abs=0.5)
    assert res["reason"].endswith("not p0's; bisect with --metric accept_len_b1 for it")
    lone = _bisect_scenario("host-5", 0)
    assert lone["culprit"] == "p1" and "not_carried" not in lone and "still regresses" not in lone["reason"]
