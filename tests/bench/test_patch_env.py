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
