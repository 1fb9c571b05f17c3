"""The runner end to end on CPU: real subprocess launches of a fake SGLang (tests/bench/fake_apply.py)."""
from __future__ import annotations

import json

import pytest

from bench import store
from bench.cli import main
from bench_fixtures import launcher_arg, manifest  # noqa: F401 - pytest fixtures


def _run(tmp_path, manifest, launcher_arg, monkeypatch, kind, args, fake, server_args=("--tp", "1"), rc=0):
    log = tmp_path / "fake-starts.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / f"run-{kind}"
    argv = [kind, *args, "--manifest", str(manifest), "--launcher", launcher_arg, "--out", str(out),
            "--max-new-tokens", "64", "--b1-requests", "2", "--concurrency", "4", "--", *server_args]
    assert main(argv) == rc
    starts = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return out, list(store.read(out / "results.jsonl")), starts


def test_ab_detects_5pct_regression_and_writes_report(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "ref=full-planted", "slow=full", "--restarts", "3", "--reps-per-start", "3"],
                             {"costs": {"planted": 0.05}})
    # interleaved A B A B A B, each start got the step-time env and the right set
    assert [s["patches"] for s in starts] == [
        ["alpha", "beta", "eagle_profiling", "gamma", "delta", "epsilon", "zeta"],
        ["alpha", "beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta"]] * 3
    assert all(s["env"]["SGLANG_RECORD_STEP_TIME"] == "1" for s in starts)
    assert all(s["server_args"] == ["--tp", "1"] for s in starts)
    reps = [r for r in recs if r["type"] == "rep" and not r["warmup"]]
    assert len(reps) == 18 and sum(r["warmup"] for r in recs if r["type"] == "rep") == 6
    ms = {a: sorted(r["metrics"]["step_ms_b1"] for r in reps if r["arm"] == a) for a in ("ref", "slow")}
    assert 2.9 < ms["ref"][4] < 3.1 and 3.05 < ms["slow"][4] / ms["ref"][4] * 3 < 3.2
    md = (out / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| ab | ref | slow | step ms (batch 1) |"))
    change, p, verdict = (c.strip() for c in row.split("|")[5:8])
    assert 4.0 < float(change.rstrip("%")) < 6.0 and float(p) < 0.01 and verdict == "**regression**"
    assert (out / "plot.png").stat().st_size > 10_000
    assert (out / "command.txt").read_text().count("--arms") == 1
    assert "All arms produced identical" in md
    starts_rec = [r for r in recs if r["type"] == "start"]
    assert len({r["fingerprint"] for r in starts_rec}) == 2 and all(r["startup_s"] >= 0 for r in starts_rec)
    assert all(r["overlay"]["launch_fingerprint"] == r["fingerprint"] for r in starts_rec)
    assert not [r for r in recs if r["type"] == "identity_warning"]


def test_no_difference_is_not_called_and_changed_output_is_flagged(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                        ["--arms", "a=base", "b=base+beta", "--restarts", "2", "--reps-per-start", "4"],
                        {"change_output": ["beta"]})
    md = (out / "report.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| ab | a | b | step ms (batch 1)")]
    assert len(rows) == 1 and "regression" not in rows[0] and "improvement" not in rows[0]
    assert "b: OUTPUT CHANGED vs a" in md


def test_eagle_phase_timing_and_accept_length_are_collected(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "on=base+eagle_profiling", "--restarts", "1", "--reps-per-start", "2"],
                             {"accept": 2.0}, server_args=("--speculative-algorithm", "EAGLE3"))
    assert starts[0]["env"]["SGLANG_EAGLE_PHASE_TIMING"] == "1"
    m = [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"]]
    assert m[0]["eagle_b1"]["verify"]["p50_ms"] == pytest.approx(0.15 * 3.0, rel=0.05)
    assert m[0]["accept_len_b1"] == pytest.approx(2.0) and m[0]["server_accept_len"] == 2.0
    assert "draft / verify / draft-extend p50 ms" in (out / "report.md").read_text()


def test_ablate_names_the_planted_patch(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ablate",
                             ["--base", "base", "--patches", "beta,planted,delta", "--restarts", "1", "--reps-per-start", "6",
                              "--warmup-reps", "0"], {"costs": {"planted": 0.05}, "noise": 0.003})
    run = next(r for r in recs if r["type"] == "run")
    assert [a["name"] for a in run["arms"]] == ["base", "full", "+beta", "-beta", "+planted", "-planted",
                                                "+delta", "-delta"]
    assert len(starts) == 8
    md = (out / "report.md").read_text()
    called = [ln for ln in md.splitlines() if "step ms (batch 1)" in ln and ("**regression**" in ln or
                                                                                "**improvement**" in ln)]
    assert sorted(ln.split("|")[3].strip() for ln in called) == ["+planted", "-planted", "full"]


def test_ablate_leave_out_skips_required_patch(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ablate",
                             ["--base", "empty", "--patches", "alpha,beta", "--mode", "leave-out", "--restarts", "1",
                              "--reps-per-start", "1", "--warmup-reps", "0"], {})
    run = next(r for r in recs if r["type"] == "run")
    # gamma requires alpha: "full-alpha" is impossible and is reported, not silently changed
    assert [a["name"] for a in run["arms"]] == ["full", "-beta"]
    assert any("-alpha" in s and "required" in s for s in run["skipped"])


def test_bisect_finds_planted_within_log2_bound(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "bisect",
                             ["--good", "base", "--bad", "full", "--restarts", "1", "--reps-per-start", "7",
                              "--warmup-reps", "0"], {"costs": {"planted": 0.05}, "noise": 0.003})
    b = next(r for r in recs if r["type"] == "bisect")
    assert b["culprit"] == "planted"
    assert b["candidates"] == ["beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta"]
    assert b["n_probes"] <= b["max_expected_probes"] == 4
    assert len(starts) == 2 + b["n_probes"] - 1  # good + bad references, then probes
    assert b["endpoint"]["verdict"] == "regression" and b["endpoint"]["p_value"] < 0.01
    assert "**Culprit: planted**" in (out / "report.md").read_text()


def test_bisect_reuses_references_from_an_ablate_store(tmp_path, manifest, launcher_arg, monkeypatch):
    fake = {"costs": {"planted": 0.05}, "noise": 0.003}
    common = ["--restarts", "1", "--reps-per-start", "7", "--warmup-reps", "0"]
    out1, _, starts1 = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ablate",
                            ["--base", "base", "--patches", "planted", "--mode", "both", *common], fake)
    n1 = len(starts1)
    out2, recs2, starts2 = _run(tmp_path, manifest, launcher_arg, monkeypatch, "bisect",
                                ["--good", "base", "--bad", "full", "--reuse", str(out1 / "results.jsonl"), *common],
                                fake)
    b = next(r for r in recs2 if r["type"] == "bisect")
    assert b["culprit"] == "planted"
    assert len(starts2) - n1 == b["n_probes"] - 1  # base and full came from the ablate store
    assert b["server_starts_this_run"] == b["n_probes"] - 1


def test_bisect_no_regression(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "bisect",
                             ["--good", "base", "--bad", "full", "--restarts", "1", "--reps-per-start", "5",
                              "--warmup-reps", "0"], {"noise": 0.003})
    b = next(r for r in recs if r["type"] == "bisect")
    assert b["culprit"] is None and len(starts) == 2


def test_failed_launch_aborts_keeps_data_and_resume_continues(tmp_path, manifest, launcher_arg, monkeypatch):
    args = ["--arms", "a=base", "b=base+zeta", "--restarts", "2", "--reps-per-start", "2"]
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, {"fail": ["zeta"]}, rc=3)
    assert len([r for r in recs if r["type"] == "unit_done"]) == 1  # arm a round 1 measured and kept
    f = next(r for r in recs if r["type"] == "failure")
    assert f["arm"] == "b" and f["stage"] == "launch" and "crashing on purpose" in f["log_tail"]
    assert "## Failures" in (out / "report.md").read_text()
    # resume with the failure gone: only the 3 missing starts run
    monkeypatch.setenv("FAKE_BENCH", "{}")
    assert main(["ab", "--resume", str(out)]) == 0
    recs = list(store.read(out / "results.jsonl"))
    done = [r for r in recs if r["type"] == "unit_done"]
    assert len(done) == 4
    v = store.view(recs)
    assert sorted((u.arm, u.round) for u in v.units.values()) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert len([r for r in recs if r["type"] == "run"]) == 2


def test_missing_step_time_fails_loudly(tmp_path, manifest, launcher_arg, monkeypatch):
    monkeypatch.setattr("bench.runner.STEP_TIME_ENV", {"SGLANG_RECORD_STEP_TIME": "0"})
    out, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                        ["--arms", "a=base", "--restarts", "1"], {}, rc=3)
    f = next(r for r in recs if r["type"] == "failure")
    assert "SGLANG_RECORD_STEP_TIME=1" in f["error"]


def test_env_profile_reaches_the_launcher(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "none=base+nccl_env_log", "pcie=base+nccl_env_log@nccl_pcie", "--restarts",
                              "1", "--arm-env", "pcie:X_MARK=7"], {}, server_args=("--tp", "2"))
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
    out, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                        ["--arms", "a=base+beta", "--restarts", "1"], {"identity_lie": ["beta"]})
    w = [r for r in recs if r["type"] == "identity_warning"]
    assert len(w) == 1 and "server carries ['alpha'], arm asked for ['alpha', 'beta']" in w[0]["warnings"][0]
    assert "## Identity warnings" in (out / "report.md").read_text()


def test_bisect_on_the_eagle_verify_metric(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "bisect",
                             ["--good", "base+eagle_profiling", "--bad", "full", "--metric", "eagle_verify_ms_b1",
                              "--restarts", "1", "--reps-per-start", "6", "--warmup-reps", "0"],
                             {"costs": {"delta": 0.05}, "noise": 0.003},
                             server_args=("--speculative-algorithm", "EAGLE3"))
    b = next(r for r in recs if r["type"] == "bisect")
    assert b["culprit"] == "delta" and b["endpoint"]["verdict"] == "regression"
    reps = [r["metrics"] for r in recs if r["type"] == "rep"]
    assert all(m["eagle_verify_ms_b1"] is not None for m in reps)
    md = (out / "report.md").read_text()
    assert "| bisect endpoints | good | bad | EAGLE verify p50 ms (b1) | +5.00% |" in md


def test_time_budget_stops_cleanly_and_resume_finishes(tmp_path, manifest, launcher_arg, monkeypatch):
    # each fake start takes >= 0.3 s: a 0.5 s budget allows the first start only
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "a=base", "b=base+beta", "--restarts", "2", "--time-budget", "0.5"],
                             {"start_s": 0.3}, rc=4)
    assert len(starts) == 1 and len([r for r in recs if r["type"] == "unit_done"]) == 1
    assert (out / "report.md").exists()
    monkeypatch.setenv("FAKE_BENCH", "{}")
    # the recorded command carries the budget too; a resumed run gets the same budget per invocation
    for _ in range(3):
        if main(["ab", "--resume", str(out)]) == 0:
            break
    assert len([r for r in store.read(out / "results.jsonl") if r["type"] == "unit_done"]) == 4


def test_dry_run_prints_plan_and_starts_nothing(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "bisect",
                             ["--good", "base", "--bad", "full", "--restarts", "2", "--dry-run"], {})
    text = capsys.readouterr().out
    assert starts == [] and recs == [] and not out.exists()
    assert "launch --set base" in text and "launch --set full" in text
    assert "at most 3 probe set(s)" in text and "server starts (before --reuse): 10" in text


def test_eagle_metric_without_phase_timing_fails_loudly(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                        ["--arms", "a=base", "--restarts", "1", "--metric", "eagle_verify_ms_b1"], {},
                        server_args=("--speculative-algorithm", "EAGLE3"), rc=3)
    f = next(r for r in recs if r["type"] == "failure")
    assert "needs eagle_profiling" in f["error"]


def test_time_budget_estimates_from_this_invocations_starts(tmp_path, manifest, launcher_arg, monkeypatch):
    # A machine's first start is the slow one (JIT caches cold: 366 s against 85 s on the H200 run). A resumed
    # invocation must not refuse warm starts that fit because an earlier invocation saw a cold one.
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "a=base", "b=base+beta", "--restarts", "2", "--time-budget", "3"],
                             {"start_s": 4.0}, rc=4)
    assert len(starts) == 1
    monkeypatch.setenv("FAKE_BENCH", "{}")
    assert main(["ab", "--resume", str(out)]) == 0  # one resume finishes the three remaining warm starts
    assert len([r for r in store.read(out / "results.jsonl") if r["type"] == "unit_done"]) == 4


def test_oea_stats_are_collected_per_phase(tmp_path, manifest, launcher_arg, monkeypatch):
    """--env SGLANG_OEA_STATS=1: each phase's mean distinct experts per routing call, from the server's totals."""
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab",
                             ["--arms", "k0off=base", "k0three=base", "--arm-env", "k0three:SGLANG_OEA_K0=3",
                              "--env", "SGLANG_OEA_STATS=1", "--restarts", "1", "--reps-per-start", "2"],
                             {"oea_distinct": {"0": 8, "3": 3}})
    assert all(s["env"]["SGLANG_OEA_STATS"] == "1" for s in starts)
    m = {a: [r["metrics"] for r in recs if r["type"] == "rep" and not r["warmup"] and r["arm"] == a]
         for a in ("k0off", "k0three")}
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
