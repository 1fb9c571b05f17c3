"""The patches' environment a run inherited is part of its record: a plant's delay or SGLANG_OEA_K0 exported before
`bench` reaches every server, yet neither the arms' fingerprints nor --env said so (the first blocks_ablate record
was measured at SGLANG_PLANTED_RESULT_DELAY_US=400 and its store could not tell)."""

from __future__ import annotations

import json

import yaml
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401

from bench import store
from bench.cli import main
from bench.runner import patch_env_in_effect


def test_only_the_manifest_s_declared_variables_are_taken_from_the_environment():
    env = {"SGLANG_PLANTED_RESULT_DELAY_US": "400", "SGLANG_OEA_K0": "3", "HOME": "/root", "NCCL_DEBUG": "INFO"}
    got = patch_env_in_effect("tests/bench/planted/manifest.yaml", env)
    assert got == {"SGLANG_OEA_K0": "3", "SGLANG_PLANTED_RESULT_DELAY_US": "400"}
    assert patch_env_in_effect("tests/bench/planted/manifest.yaml", {"HOME": "/root"}) == {}
    assert patch_env_in_effect("/nonexistent/manifest.yaml", env) is None


def test_a_run_records_and_reports_the_patch_variables_its_servers_inherited(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    data = yaml.safe_load(manifest.read_text())
    beta = next(p for p in data["patches"] if p["name"] == "beta")
    beta["env"] = {"X_BETA_LEVEL": {"default": "1", "help": "how much beta"}}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("FAKE_BENCH", json.dumps({"noise": 0.002}))
    monkeypatch.setenv("X_BETA_LEVEL", "7")
    out = tmp_path / "run"
    assert main(fake_argv("ab", ["--arms", "a=base", "b=base+beta"], manifest, launcher_arg, out)) == 0
    run = next(r for r in store.read(out / "results.jsonl") if r["type"] == "run")
    assert run["config"]["patch_env"] == {"X_BETA_LEVEL": "7"}
    assert "`X_BETA_LEVEL=7`" in (out / "report.md").read_text()
    monkeypatch.delenv("X_BETA_LEVEL")
    out2 = tmp_path / "run2"
    assert main(fake_argv("ab", ["--arms", "a=base", "b=base+beta"], manifest, launcher_arg, out2)) == 0
    assert "none; the manifest's defaults" in (out2 / "report.md").read_text()


def test_a_resume_under_other_patch_variables_is_refused_and_says_how_to_put_them_back(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """The stored starts ran at X_BETA_LEVEL=7; resuming with it unset (or at 9) would pool two measurements."""
    data = yaml.safe_load(manifest.read_text())
    beta = next(p for p in data["patches"] if p["name"] == "beta")
    beta["env"] = {"X_BETA_LEVEL": {"default": "1", "help": "how much beta"}}
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("FAKE_BENCH", json.dumps({"noise": 0.002}))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "starts.jsonl"))
    monkeypatch.setenv("X_BETA_LEVEL", "7")
    out = tmp_path / "run"
    args = ["--arms", "a=base", "b=base+beta", "--time-budget", "1"]
    assert main(fake_argv("ab", args, manifest, launcher_arg, out)) == 4  # stopped by its budget: resumable
    n = len(list(store.read(out / "results.jsonl")))
    starts = (tmp_path / "starts.jsonl").read_text() if (tmp_path / "starts.jsonl").exists() else ""
    capsys.readouterr()
    again = ["--arms", "a=base", "b=base+beta", "--time-budget", "600"]  # the same plan into its run dir
    for now, cmd in (("9", again), (None, again), ("9", ["--arms", "a=base", "--resume", str(out)])):
        if now is None:
            monkeypatch.delenv("X_BETA_LEVEL")
        else:
            monkeypatch.setenv("X_BETA_LEVEL", now)
        assert main(fake_argv("ab", cmd, manifest, launcher_arg, out)) == 2
        err = capsys.readouterr().err
        assert "X_BETA_LEVEL=7" in err and "export X_BETA_LEVEL=7" in err and "new --out" in err, err
        assert "Traceback" not in err
        assert len(list(store.read(out / "results.jsonl"))) == n  # nothing written
    assert ((tmp_path / "starts.jsonl").read_text() if (tmp_path / "starts.jsonl").exists() else "") == starts
    monkeypatch.setenv("X_BETA_LEVEL", "7")  # put back: the run goes on
    assert main(fake_argv("ab", again, manifest, launcher_arg, out)) == 0


def test_the_refusal_names_each_changed_variable_and_the_command_that_puts_it_back(tmp_path):
    from bench.runner import patch_env_changed

    msg = patch_env_changed(tmp_path, {}, {"SGLANG_OEA_K0": "3"})
    assert "none (the manifest's defaults)" in msg and "unset SGLANG_OEA_K0" in msg and "export" not in msg
    msg = patch_env_changed(tmp_path, {"A": "1", "B": "2"}, {"A": "1", "B": "5", "C": "x"})
    assert "(B, C changed)" in msg and "export B=2; unset C" in msg and "A=1" in msg
