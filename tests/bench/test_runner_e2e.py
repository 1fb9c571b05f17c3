"""The runner end to end on CPU: real subprocess launches of a fake SGLang (tests/bench/fake_apply.py).

Every run starts with the invocation's throwaway start (the first line of the fake's start log), then the
arms' starts; verdicts read start medians, so a comparison needs 3 starts per arm.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from bench_fixtures import FAKE, fake_argv, launcher_arg, make_manifest, manifest  # noqa: F401 - pytest fixtures

from bench import store
from bench.cli import main

FULL = ["alpha", "beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta"]
QUIET = {"noise": 0.002}


def _run(tmp_path, manifest, launcher_arg, monkeypatch, kind, args, fake, server_args=("--tp", "1"), rc=0):
    log = tmp_path / "fake-starts.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / f"run-{kind}"
    argv = fake_argv(kind, args, manifest, launcher_arg, out, server_args)
    assert main(argv) == rc
    starts = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return out, list(store.read(out / "results.jsonl")), starts


@pytest.fixture
def clock(monkeypatch):
    """A clock the test owns: each start this invocation made costs 100 s, the next one 10 s (no wall time)."""
    from bench import runner

    monkeypatch.setattr(runner.Runner, "elapsed", lambda self: 100.0 * self.units_started)
    monkeypatch.setattr(runner, "unit_estimate", lambda *a: 10.0)


def _conclusion(recs):
    return next(r for r in recs if r["type"] == "conclusion")


def test_ab_detects_5pct_regression_with_start_values_and_writes_report(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "ref=full-planted", "slow=full"],
        {"costs": {"planted": 0.05}, **QUIET},
    )
    ref = [p for p in FULL if p != "planted"]
    # the throwaway start (the first arm's set), then interleaved A B A B A B: decided at the first look
    assert [s["patches"] for s in starts] == [ref] + [ref, FULL] * 3
    assert all(s["env"]["SGLANG_RECORD_STEP_TIME"] == "1" for s in starts)
    assert all(s["server_args"] == ["--tp", "1"] for s in starts)
    warm = [r for r in recs if r["type"] == "start" and r["warmup_start"]]
    assert len(warm) == 1 and not [
        r for r in recs if r["type"] == "rep" and r["start_id"] == warm[0]["start_id"] and not r["warmup"]
    ]
    c = _conclusion(recs)["comparisons"][0]
    assert c["verdict"] == "regression" and 0.04 < c["comparison"]["change"] < 0.06
    assert c["comparison"]["n_ref"] == c["comparison"]["n_arm"] == 3
    md = (out / "report.md").read_text()
    change = re.search(r"- slow vs ref on `step_ms_b1`: \*\*regression\*\* \(\+([\d.]+)%", md)
    assert change and 4.0 < float(change.group(1)) < 6.0
    row = next(ln for ln in md.splitlines() if ln.startswith("| ab | ref | slow | step ms (batch 1) (primary) |"))
    assert row.split("|")[5].strip() == "3 / 3" and "**regression**" in row
    arm = next(ln for ln in md.splitlines() if ln.startswith("| slow |")).split("|")
    assert len(arm[5].split(",")) == 3  # every start's median is listed
    assert "throwaway start (ref)" in md and "| Load weight | 0.5 |" in md
    assert (out / "plot.png").stat().st_size > 10_000
    assert (out / "command.txt").read_text().count("--arms") == 1
    assert "All arms produced identical" in md
    starts_rec = [r for r in recs if r["type"] == "start"]
    assert all(r["overlay"]["launch_fingerprint"] == r["fingerprint"] for r in starts_rec)
    assert not [r for r in recs if r["type"] == "identity_warning"]


def test_no_difference_is_same_and_changed_output_is_flagged(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "a=base", "b=base+beta"],
        {"change_output": ["beta"], **QUIET},
    )
    assert _conclusion(recs)["comparisons"][0]["verdict"] == "same"
    assert "b: OUTPUT CHANGED vs a" in (out / "report.md").read_text()


def test_identical_arms_are_refused_and_a_null_pair_needs_an_env(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", ["--arms", "a=base", "b=base"], {}, rc=2)
    assert "same measurement" in capsys.readouterr().err
    _, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "a=base", "b=base", "--arm-env", "b:BENCH_NULL=1"],
        QUIET,
    )
    assert _conclusion(recs)["comparisons"][0]["verdict"] == "same" and len(starts) == 7


def test_a_prefill_only_regression_shows_in_time_to_first_token_and_is_flagged(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    """The step does not move; the first token does (4x: far beyond a loaded machine's HTTP jitter): the verdict
    table says so and the flag points at it."""
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "ref=full-planted", "slow=full"],
        {"prefill_ms": 5000.0, "prefill_costs": {"planted": 3.0}, **QUIET},
    )
    m = [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"]]
    assert all(x["ttft_ms_b1"] > 40.0 for x in m)  # 5000 ms x time_scale 0.01, plus HTTP
    assert _conclusion(recs)["comparisons"][0]["verdict"] == "same"  # the primary step
    md = (out / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| ab | ref | slow | time to first token ms (b1) |"))
    cells = [x.strip() for x in row.split("|")]
    assert cells[5] == "3 / 3" and "**regression**" in cells[7] and float(cells[6].split("%")[0]) > 15, row
    assert "the prefill path; bisect or ablate with --metric ttft_ms_b1" in md
    # the fake serves repeated prompts from its "radix cache": none of the first-token requests was one
    assert "Time to first token voided" not in md


def test_a_first_token_request_served_from_the_cache_voids_the_figure(tmp_path, manifest, launcher_arg, monkeypatch):
    """Without the per-request prefix the repetitions' first-token prompts repeat, the server's cache serves them,
    and the figure is not a prefill: it is left out (and said), never reported."""
    import itertools

    from bench import workload

    monkeypatch.setattr(workload, "_ttft_nonce", itertools.repeat(0))
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "ref=full-planted", "slow=full", "--restarts", "1", "--max-starts", "1"],
        QUIET,
    )
    m = [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"]]
    assert m and all(x["ttft_ms_b1"] is None and "from the cache" in x["extra"]["ttft_void"] for x in m)
    md = (out / "report.md").read_text()
    assert "## Time to first token voided" in md and "time to first token ms (b1)" not in md


def test_eagle_phase_timing_and_accept_length_are_collected(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "on=base+eagle_profiling", "--restarts", "1", "--max-starts", "1"],
        {"accept": 2.0},
        server_args=("--speculative-algorithm", "EAGLE3"),
    )
    assert starts[1]["env"]["SGLANG_EAGLE_PHASE_TIMING"] == "1"
    m = [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"]]
    assert m[0]["eagle_b1"]["verify"]["p50_ms"] == pytest.approx(0.15 * 3.0, rel=0.05)
    assert m[0]["accept_len_b1"] == pytest.approx(2.0) and m[0]["server_accept_len"] == 2.0
    assert "draft / verify / draft-extend p50 ms" in (out / "report.md").read_text()


def test_ablate_names_the_planted_patch_confirmed_both_ways(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ablate",
        ["--base", "base", "--patches", "beta,planted,delta"],
        {"costs": {"planted": 0.05}, **QUIET},
    )
    run = next(r for r in recs if r["type"] == "run")
    assert [a["name"] for a in run["arms"]] == [
        "base",
        "full",
        "+beta",
        "-beta",
        "+planted",
        "-planted",
        "+delta",
        "-delta",
    ]
    c = _conclusion(recs)
    assert c["culprits"] == ["planted"]
    rows = {r["patch"]: r for r in c["patches"]}
    assert rows["planted"]["alone"] == "regression" and rows["planted"]["left_out"] == "improvement"
    assert rows["beta"]["finding"] == "no effect"
    assert "**culprit(s): planted**" in (out / "report.md").read_text()


def test_ablate_leave_out_measures_the_confirmation_of_a_candidate_only(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ablate",
        ["--base", "base", "--patches", "beta,planted", "--mode", "leave-out"],
        {"costs": {"planted": 0.05}, **QUIET},
    )
    started = {",".join(s["patches"]) for s in starts}
    assert "alpha,planted" in started and "alpha,beta" not in started  # +planted confirms; +beta not needed
    assert _conclusion(recs)["culprits"] == ["planted"]


def test_ablate_leave_out_skips_required_patch(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ablate",
        ["--base", "empty", "--patches", "alpha,beta", "--mode", "leave-out"],
        QUIET,
    )
    run = next(r for r in recs if r["type"] == "run")
    # gamma requires alpha: "full-alpha" is impossible and is reported, not silently changed
    assert "-alpha" not in [a["name"] for a in run["arms"]]
    assert any("-alpha" in s and "required" in s for s in run["skipped"])


def test_bisect_names_and_confirms_the_planted_patch(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "bisect",
        ["--good", "base", "--bad", "full"],
        {"costs": {"planted": 0.05}, **QUIET},
    )
    b = _conclusion(recs)
    assert (b["outcome"], b["culprit"]) == ("culprit", "planted")
    assert b["candidates"] == ["beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta"]
    roles = [p["role"] for p in b["probes"]]
    assert roles[-2:] == ["confirm: bad - planted", "confirm: good + planted"]
    assert len(roles) - 2 <= b["max_search_probes"] == 3
    assert b["endpoint"]["verdict"] == "regression" and b["endpoint"]["low"] > 0.02
    md = (out / "report.md").read_text()
    assert "**Culprit: planted** (confirmed)" in md and "| confirm: good + planted |" in md


def test_bisect_reports_an_interaction(tmp_path, manifest, launcher_arg, monkeypatch):
    _, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "bisect",
        ["--good", "base", "--bad", "full"],
        {"interactions": [{"needs": ["beta", "delta"], "cost": 0.08}], **QUIET},
    )
    b = _conclusion(recs)
    assert (b["outcome"], b["partner"], b["culprit"]) == ("interaction", "beta", "delta")


def test_bisect_follows_a_phase_that_moved_while_the_step_did_not(tmp_path, manifest, launcher_arg, monkeypatch):
    """A GPU-side delay on a host-bound step: verify grows, draft-extend shrinks, the step holds."""
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "bisect",
        ["--good", "base+eagle_profiling", "--bad", "full"],
        {"phase_costs": {"delta": {"verify": 0.2, "draft_extend": -0.2}}, **QUIET},
        server_args=("--speculative-algorithm", "EAGLE3"),
    )
    b = _conclusion(recs)
    assert b["metric"] == "eagle_verify_ms_b1" and b["culprit"] == "delta"
    assert b["followed"].startswith("step_ms_b1 did not regress (same")
    md = (out / "report.md").read_text()
    assert "phases moved in opposite directions" in md and "bisecting on eagle_verify_ms_b1" in md


PLANTED_5 = {"costs": {"planted": 0.05}, **QUIET}


@pytest.fixture(scope="module")
def planted_ablate(tmp_path_factory) -> tuple[Path, Path]:
    """One ablate of planted on the base (its manifest and run dir), which both confirm modes' bisects only read
    (--reuse copies records into the bisect's own store)."""
    base = tmp_path_factory.mktemp("planted-ablate")
    manifest = make_manifest(base)
    launcher = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(base / "warm"))
        out, _, _ = _run(
            base,
            manifest,
            launcher,
            mp,
            "ablate",
            ["--base", "base", "--patches", "planted", "--mode", "both"],
            PLANTED_5,
        )
    return manifest, out


@pytest.mark.parametrize("confirm", ["fresh", "shared"])
def test_bisect_reuses_references_from_an_ablate_store(tmp_path, planted_ablate, launcher_arg, monkeypatch, confirm):
    manifest, out1 = planted_ablate
    # another machine (no warm marker): the bisect pays its own throwaway start
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(tmp_path / "another-machine"))
    out2, recs2, new = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "bisect",
        ["--good", "base", "--bad", "full", "--reuse", str(out1 / "results.jsonl"), "--confirm", confirm],
        PLANTED_5,
    )
    b = _conclusion(recs2)
    assert b["culprit"] == "planted"
    block = [p for p in b["probes"] if p.get("block")]
    assert [p["role"] for p in block] == ["confirm: bad - planted", "confirm: good + planted"]
    searched = [p for p in b["probes"] if not p.get("block")]
    refs = sum(s["patches"] in (["alpha"], FULL) for s in new[1:])
    if confirm == "fresh":
        # the endpoints came from the ablate store; what ran is the throwaway start, the search probes and the
        # confirmation block, whose good and bad are fresh starts by design (drift since the ablate)
        assert refs == len(new) - 1 - sum(p["starts"] for p in searched + block)
    else:
        # shared: no start of good or bad ran at all, and a confirmation of a set the search probed (or the
        # ablate measured) reuses its starts: what ran is the throwaway and each distinct new set once
        assert refs == 0
        ran = [s["patches"] for s in new[1:]]
        assert all(x in [p["patches"] for p in searched + block] for x in ran)
        # good + planted is the ablate's "planted alone on the base" arm: confirmed on its stored starts
        alone = next(p for p in block if p["role"] == "confirm: good + planted")
        assert alone["patches"] not in ran and alone["starts"] >= 3
    recs_start = [r for r in recs2 if r["type"] == "start" and not r["warmup_start"]]
    endpoint_keys = {r["arm_key"] for r in recs_start if r["arm"] in ("good", "bad")}
    assert all(r.get("reused_from") for r in recs_start if r["arm_key"] in endpoint_keys)
    assert b["endpoint"]["n_ref"] >= 3 and b["server_starts_this_run"] == len(new)


def test_bisect_no_regression_names_nobody(tmp_path, manifest, launcher_arg, monkeypatch):
    _, recs, starts = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "bisect", ["--good", "base", "--bad", "full"], QUIET
    )
    b = _conclusion(recs)
    assert b["culprit"] is None and not b["probes"]
    # "no regression" needs every metric's regression ruled out; the fake's tok/s is HTTP-bound (+-15% between
    # starts), so after max-starts the honest answer may be "cannot tell", naming what stayed open
    assert b["outcome"] == "no regression" or (
        b["outcome"] == "cannot tell"
        and "not ruled out" in b["reason"]
        and "step_ms" not in b["reason"].split("not ruled out")[1]
    )


def test_bimodal_starts_name_no_wrong_culprit(tmp_path, manifest, launcher_arg, monkeypatch):
    _, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "bisect",
        ["--good", "base", "--bad", "full", "--max-starts", "4"],
        {"bimodal": {"p": 0.5, "shift": 0.19}, **QUIET},
    )
    assert _conclusion(recs)["culprit"] is None


def test_failed_launch_aborts_keeps_data_and_resume_continues(tmp_path, manifest, launcher_arg, monkeypatch):
    args = ["--arms", "a=base", "b=base+zeta", "--restarts", "2", "--max-starts", "2"]
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, {"fail": ["zeta"]}, rc=3)
    assert len([r for r in recs if r["type"] == "unit_done" and not r["warmup_start"]]) == 1  # a's first start kept
    f = next(r for r in recs if r["type"] == "failure")
    assert f["arm"] == "b" and f["stage"] == "launch" and "crashing on purpose" in f["log_tail"]
    assert "## Failures" in (out / "report.md").read_text()
    # resume with the failure gone, on the same machine minutes later: no second throwaway start (this machine
    # served a start of this measurement), only the 3 missing starts
    monkeypatch.setenv("FAKE_BENCH", "{}")
    assert main(["ab", "--resume", str(out)]) == 0
    recs = list(store.read(out / "results.jsonl"))
    v = store.view(recs)
    assert sorted((u.arm, u.round) for u in v.units.values()) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert len(v.warmup_units) == 1 and len([r for r in recs if r["type"] == "run"]) == 2
    assert [r["type"] for r in recs].count("warmup_skipped") == 1


def test_missing_step_time_fails_loudly(tmp_path, manifest, launcher_arg, monkeypatch):
    monkeypatch.setattr("bench.runner.STEP_TIME_ENV", {"SGLANG_RECORD_STEP_TIME": "0"})
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "a=base", "--restarts", "1", "--no-warmup-start"],
        {},
        rc=3,
    )
    f = next(r for r in recs if r["type"] == "failure")
    assert "SGLANG_RECORD_STEP_TIME=1" in f["error"]


def test_env_profile_reaches_the_launcher(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        [
            "--arms",
            "none=base+nccl_env_log",
            "pcie=base+nccl_env_log@nccl_pcie",
            "--restarts",
            "1",
            "--max-starts",
            "1",
            "--no-warmup-start",
            "--arm-env",
            "pcie:X_MARK=7",
        ],
        {},
        server_args=("--tp", "2"),
    )
    assert starts[0]["profile"] is None and starts[1]["profile"] == "nccl_pcie"
    assert starts[1]["env"]["NCCL_P2P_DISABLE"] == "1" and starts[1]["env"]["X_MARK"] == "7"
    assert "X_MARK" not in starts[0]["env"]
    done = [r for r in recs if r["type"] == "unit_done"]
    assert [len(d["nccl_env_lines"]) for d in done] == [2, 2]
    assert all("NCCL_P2P_DISABLE=1" in ln for ln in done[1]["nccl_env_lines"])
    assert not any("NCCL_P2P_DISABLE" in ln for ln in done[0]["nccl_env_lines"])
    md = (out / "report.md").read_text()
    assert "## Environment seen by each rank (nccl_env_log)" in md and "tp_rank=1" in md


def test_identity_mismatch_is_recorded_and_reported(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "a=base+beta", "--restarts", "1", "--max-starts", "1"],
        {"identity_lie": ["beta"]},
    )
    w = [r for r in recs if r["type"] == "identity_warning"]
    assert len(w) == 1 and "server carries ['alpha'], arm asked for ['alpha', 'beta']" in w[0]["warnings"][0]
    assert "## Identity warnings" in (out / "report.md").read_text()


def test_dry_run_prints_plan_and_starts_nothing(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    out, recs, starts = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "bisect", ["--good", "base", "--bad", "full", "--dry-run"], {}
    )
    text = capsys.readouterr().out
    assert starts == [] and recs == [] and not out.exists()
    assert "launch --set base" in text and "launch --set full" in text
    # the endpoints' starts at least; at most theirs and every probe's and confirmation's, at 120 s a start
    assert (
        "server starts: 1 throwaway + 6 to 56 measured (2 arm(s) x 3 to 8 starts; more only for undecided "
        "comparisons); at 120 s a start (--warm-start-estimate) that is 14 to 114 min"
    ) in text
    assert "up to 3 search probe(s) + 2 confirmations" in text


def test_eagle_metric_without_phase_timing_fails_loudly(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        ["--arms", "a=base", "--restarts", "1", "--metric", "eagle_verify_ms_b1", "--no-warmup-start"],
        {},
        server_args=("--speculative-algorithm", "EAGLE3"),
        rc=3,
    )
    f = next(r for r in recs if r["type"] == "failure")
    assert "needs eagle_profiling" in f["error"]


@pytest.fixture
def ab(tmp_path, manifest, launcher_arg, monkeypatch):
    """bench ab against the fake launcher in DIR: (out, records, starts); rc is the exit code it must give."""

    def run(d, args, fake, rc=0):
        return _run(d, manifest, launcher_arg, monkeypatch, "ab", args, fake, rc=rc)

    return run


def test_oea_stats_are_collected_per_phase(tmp_path, manifest, launcher_arg, monkeypatch):
    """--env SGLANG_OEA_STATS=1: each phase's mean distinct experts per routing call, from the server's totals."""
    out, recs, starts = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        [
            "--arms",
            "k0off=base",
            "k0three=base",
            "--arm-env",
            "k0three:SGLANG_OEA_K0=3",
            "--env",
            "SGLANG_OEA_STATS=1",
            "--restarts",
            "1",
            "--max-starts",
            "1",
        ],
        {"oea_distinct": {"0": 8, "3": 3}},
    )
    assert all(s["env"]["SGLANG_OEA_STATS"] == "1" for s in starts)
    m = {
        a: [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"] and r["arm"] == a]
        for a in ("k0off", "k0three")
    }
    for arm, per_row in (("k0off", 8), ("k0three", 3)):
        for x in m[arm]:
            # batch 1: the fake's per-request figure exactly; the warm-up rep before it is not mixed in
            assert x["oea_distinct_experts_b1"] == per_row
            assert x["oea_b1"]["calls"] == 2 * 64 * 2 and x["oea_b1"]["mean_rows"] == 1
            assert x["oea_distinct_experts_bc"] > per_row and x["oea_bc"]["calls"] == 2 * 64 * 4
    md = (out / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| k0three |"))
    assert row.split("|")[-2].strip().startswith("3.00 / ")
    assert "| distinct experts / routing call (b1) |" in md


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--arms", "a=base", "--alpha", "2"], "--alpha must be in (0, 1)"),
        (["--arms", "nonsense"], "--arms expects NAME=SET[@PROFILE], got 'nonsense'"),
        (["--arms", "a=base", "b=base+beta", "--arm-env", "b=K"], "--arm-env expects ARM:K=V"),
        (["--arms", "a=base", "--restarts", "0"], "--restarts must be >= 1"),
    ],
)
def test_bad_bench_arguments_exit_2_with_the_message(tmp_path, ab, capsys, args, says):
    ab(tmp_path, args, {}, rc=2)
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_servers_start_with_bytecode_caching_on(tmp_path, manifest, launcher_arg, monkeypatch):
    """PYTHONDONTWRITEBYTECODE (set on the GPU machines) made every start compile SGLang from source in each of its
    processes: the bench drops it for its servers and points their bytecode at its own cache."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_PYCACHE", str(tmp_path / "pyc"))
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    _, _, starts = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "ab", ["--arms", "ref=full-planted", "slow=full"], QUIET
    )
    assert starts and all("PYTHONDONTWRITEBYTECODE" not in s["env"] for s in starts)
    assert all(s["env"]["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc") for s in starts)


def test_bytecode_env_keeps_the_users_prefix_and_an_explicit_setting_wins_after_it(tmp_path, monkeypatch):
    from bench.runner import bytecode_env

    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_PYCACHE", str(tmp_path / "pyc"))
    assert bytecode_env({"PYTHONPYCACHEPREFIX": "/mine", "PYTHONDONTWRITEBYTECODE": "1"}) == {
        "PYTHONPYCACHEPREFIX": "/mine"
    }
    assert bytecode_env({"PYTHONPYCACHEPREFIX": ""})["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc")


def test_a_server_process_under_bytecode_env_writes_bytecode_outside_a_read_only_tree(tmp_path, monkeypatch):
    """A real interpreter, as the server's processes are started: a module of a read-only tree is compiled once into
    the bench's cache and read from there the next time (no invalid-escape warning, which only compiling emits)."""
    import os
    import subprocess
    import sys

    from bench.runner import bytecode_env

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "slowmod.py").write_text('X = "\\."\n')  # an invalid escape: compiling it warns, loading bytecode does not
    tree.chmod(0o555)
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_PYCACHE", str(tmp_path / "pyc"))
    env = bytecode_env({**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree)})
    env.pop("PYTHONWARNINGS", None)

    def start() -> str:
        p = subprocess.run([sys.executable, "-W", "always", "-c", "import slowmod"], env=env, capture_output=True)
        assert p.returncode == 0, p.stderr
        return p.stderr.decode()

    try:
        assert "invalid escape sequence" in start()
        assert list((tmp_path / "pyc").rglob("slowmod*.pyc"))
        assert "invalid escape sequence" not in start()
        assert not (tree / "__pycache__").exists()
    finally:
        tree.chmod(0o755)


def test_time_budget_stops_before_a_start_that_would_overrun_and_resume_finishes(
    tmp_path, manifest, launcher_arg, monkeypatch, clock
):
    """At 250 s: starts 1-3 begin at 0, 100 and 200 s (+10 s each fits); the 4th would end at 310 s: exit 4."""
    args = ["--arms", "a=base", "b=base+beta", "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    out, recs, _ = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "ab", [*args, "--time-budget", "250"], QUIET, rc=4
    )
    assert len([r for r in recs if r["type"] == "unit_done"]) == 3
    assert "needs ~10s" in _conclusion(recs)["budget_message"]
    assert "Stopped by the time budget" in (out / "report.md").read_text()
    assert main(["ab", "--resume", str(out)]) == 0  # the other three fit the next invocation's 250 s
    v = store.view(store.read(out / "results.jsonl"))
    assert len(v.units) == 6 and v.conclusions[-1]["comparisons"][0]["verdict"] in ("same", "cannot tell")


def test_a_resume_on_a_fresh_machine_throws_a_start_away_again(tmp_path, manifest, launcher_arg, monkeypatch, clock):
    """At 150 s an invocation makes two starts: its throwaway and one measured (or two measured when warm)."""
    args = ["--arms", "a=base", "b=base+beta", "--restarts", "2", "--max-starts", "2", "--time-budget", "150"]
    out, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, QUIET, rc=4)
    assert len(store.view(recs).warmup_units) == 1 and len(store.view(recs).units) == 1
    # the store travels to another machine (RESUME_FROM): its temp dir holds no marker
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(tmp_path / "another-machine"))
    assert main(["ab", "--resume", str(out)]) == 4  # a throwaway again, and one measured start
    assert main(["ab", "--resume", str(out)]) == 0  # warm now: the last measured start, no throwaway
    recs = list(store.read(out / "results.jsonl"))
    assert len(store.view(recs).warmup_units) == 2 and len(store.view(recs).units) == 4
    assert [r["type"] for r in recs].count("warmup_skipped") == 1


def _unit(sid: str, wall: float, startup: float, warm: bool):
    return store.Unit("k", 0, sid, "a", wall_s=wall, startup_s=startup, machine_warm=warm)


def test_unit_estimate_reads_this_invocations_warm_starts_and_guesses_past_a_cold_one():
    from bench.runner import unit_estimate

    cold, warm, old = _unit("c", 360.0, 350.0, False), _unit("w", 80.0, 70.0, True), _unit("o", 400.0, 390.0, True)
    assert unit_estimate([cold, warm, old], [], {"c", "w"}, 120.0) == 80.0  # this invocation's warm start
    # only a cold start seen (366 s against 85 s on the H200): its reps and stop, plus the warm-start guess
    assert unit_estimate([cold], [], {"c"}, 120.0) == 360.0 - 350.0 + 120.0
    assert unit_estimate([old], [], set(), 120.0) == 400.0  # nothing of this invocation: the store's starts
    # only a throwaway start of this invocation seen: it stands in for the first measured start (run7)
    assert unit_estimate([], [cold], {"c"}, 3.0) == 360.0 - 350.0 + 3.0
    assert unit_estimate([], [], set(), 120.0) == 0.0
