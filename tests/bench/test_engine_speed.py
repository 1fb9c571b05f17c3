"""engine_speed against a stand-in tool: timings recorded, forbidden imports caught."""

from __future__ import annotations

import json

import pytest

from bench import engine_speed as es


def _tool(tmp_path, imports: str):
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch" / "__init__.py").write_text("")  # a fake heavy package on the path
    script = tmp_path / "tool.py"
    script.write_text(f"import sys, json\n{imports}\nassert sys.argv[1] in ('apply', 'revert', 'status', 'check')\n")
    return script


def test_clean_tool_is_timed_and_passes(tmp_path, monkeypatch):
    script = _tool(tmp_path, "")
    monkeypatch.chdir(tmp_path)
    res = es.measure([str(script)], [], ["apply-revert", "status"], runs=2, cwd=str(tmp_path))
    assert [r.op for r in res] == ["apply-revert", "status"]
    assert all(len(r.runs_s) == 2 and 0 < r.min_s <= r.median_s < 5 for r in res)
    assert res[0].forbidden_imports == [] and res[1].forbidden_imports == []
    assert res[0].import_total_ms > 0


def test_torch_import_is_caught_and_cli_fails(tmp_path, monkeypatch, capsys):
    script = _tool(tmp_path, "import torch")
    monkeypatch.chdir(tmp_path)
    res = es.measure([str(script)], [], ["status"], runs=1, cwd=str(tmp_path))
    assert res[0].forbidden_imports == ["torch"]
    from bench.cli import main

    out = tmp_path / "e.json"
    assert main(["engine", "--runs", "1", "--ops", "status", "--tool", str(script), "--out", str(out)]) == 2
    assert "FORBIDDEN IMPORTS: torch" in capsys.readouterr().out
    assert json.loads(out.read_text())["ops"][0]["forbidden_imports"] == ["torch"]


def test_failing_tool_is_an_error(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(es.EngineSpeedError, match="exited 3"):
        es.measure([str(script)], [], ["status"], runs=1)


def test_parse_importtime_and_forbidden():
    err = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   sglang.srt.utils\nimport time:  5 | 900 | torch\n"
        "import time:  5 | 9 | torchvision\n"
    )
    mods = es.parse_importtime(err)
    assert [m for m, _, _ in mods] == ["sglang.srt.utils", "torch", "torchvision"]
    assert es.forbidden([m for m, _, _ in mods]) == ["sglang.srt.utils", "torch"]


def test_refuses_to_drop_an_applied_set(tmp_path, capsys):
    script = tmp_path / "carrying.py"
    script.write_text("import sys\nprint('fingerprint abc   applied 2 of 5 patches')\n")
    from bench.cli import main

    assert main(["engine", "--runs", "1", "--ops", "apply-revert", "--tool", str(script)]) == 1
    assert "carries 2 patch(es)" in capsys.readouterr().err
