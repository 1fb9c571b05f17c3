"""bench speed's own parts: paired ratios and targets, the peak-memory column (each contender's own, not the
bench's), synthetic sets that really apply, and the refusals (exit 2, a message naming the option)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from bench import speed
from bench.speed import REPO, SpeedError, Timing, measure, ratios, record, run_timed, synthetic, verdicts
from sglang_overlay.manifest import load_manifest


def test_ratios_are_taken_pair_by_pair_and_decide_the_targets():
    # a slow moment (the third repetition) hits both tools: paired, it cancels; medians alone would say 1.5
    res = {"ours": Timing([1.0, 3.0, 10.0]), "stgit": Timing([2.0, 1.0, 100.0])}
    assert ratios(res) == {"stgit": 0.5}
    assert res["ours"].median_s / res["stgit"].median_s == 1.5
    assert verdicts("cycle", res, ratios(res)) == ["cycle ours/stgit 0.50 < 1.0: met"]
    assert verdicts("status", res, {"stgit": 1.0}) == ["status ours/stgit 1.00 <= 1.0: met"]
    assert verdicts("cycle", res, {"stgit": 1.0}) == ["cycle ours/stgit 1.00 < 1.0: MISSED"]
    assert verdicts("version", {"ours": Timing([0.036])}, {}) == ["--version 36.0 ms <= 35 ms: MISSED"]
    # CPU times pair the same way; a run with no CPU time to divide by is left out
    res = {"ours": Timing([1.0], cpu_s=[0.2, 0.3, 0.9]), "quilt": Timing([1.0], cpu_s=[0.4, 0.0, 0.3])}
    assert ratios(res, what="cpu_s") == {"quilt": 1.75}


def test_peak_memory_is_each_contenders_own(tmp_path):
    big = [sys.executable, "-c", "b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096])"]
    res = measure({"small": [(["true"], tmp_path, (0,))], "big": [(big, tmp_path, (0,))]}, runs=2)
    own_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # `true` is a few hundred KiB: what the bench itself holds (tens of MiB, pytest's) must not show in its column
    assert res["small"].peak_kib < min(8 << 10, own_kib / 2), (res["small"].peak_kib, own_kib)
    assert res["big"].peak_kib >= 96 << 10
    assert len(res["big"].cpu_s) == len(res["big"].runs_s) == 2 and min(res["big"].cpu_s) > 0
    rec = record(res)
    assert rec["big"]["peak_mib"] >= 96 > rec["small"]["peak_mib"]
    # what the column used to show: measured directly, a child of this process carries this process's size
    _, direct_kib, _ = run_timed(["true"], tmp_path, gnu_time=None)
    assert direct_kib > res["small"].peak_kib


def test_a_failing_contender_is_an_error_not_a_figure(tmp_path):
    with pytest.raises(SpeedError, match="exited 1"):
        run_timed(["false"], tmp_path)


def test_synthetic_sets_apply_on_the_real_tree(sglang_tree, tmp_path):
    for shared in (False, True):
        ps = synthetic(tmp_path / str(shared), sglang_tree, 7, shared, REPO / "manifest.yaml")
        m = load_manifest(ps.manifest)
        assert [p.name for p in m.patches] == [name for name, _ in ps.stack] and ps.n == 7
        assert len({f for p in m.patches for f in p.files}) == (2 if shared else 7)  # five patches a file: 5 + 2
        stack = tmp_path / f"{shared}.patch"
        stack.write_text("".join(d for _, d in ps.stack))
        subprocess.run(["git", "apply", "--check", str(stack)], cwd=sglang_tree, check=True)


@pytest.mark.parametrize(
    "argv, said",
    [
        (["peers", "--sets", "real,many"], "--sets: 'many'"),
        (["peers", "--peers", "quilt,darcs"], "--peers: 'darcs'"),
        (["peers", "--ops", "cycle,push"], "--ops: 'push'"),
        (["peers", "--tool-before", "/nonexistent/apply.py", "--sets", "3"], "--tool-before: /nonexistent"),
        (["peers", "--pristine", "/nonexistent", "--sets", "3"], "/nonexistent is no SGLang tree"),
        (["engine", "--ops", "fly"], "--ops: 'fly'"),
        (["rebase", "0.5.x"], "'0.5.x' is not a release version"),
    ],
)
def test_bad_input_is_exit_2_naming_it(argv, said, capsys):
    assert speed.main(argv) == 2
    assert said in capsys.readouterr().err


def test_usage_errors_are_exit_2_without_a_traceback(capsys):
    assert speed.main(["peers", "--runs", "0"]) == 2
    assert "'0' is not a positive whole number" in capsys.readouterr().err
    from bench.cli import main as bench_main

    assert bench_main(["speed", "nothing"]) == 2


def test_engine_refuses_to_drop_an_applied_set(tmp_path, capsys):
    tool = tmp_path / "carrying.py"
    tool.write_text("print('fingerprint abc   applied 2 of 5 patches')\n")
    assert speed.main(["engine", "--ops", "apply-revert", "--tool", str(tool)]) == 2
    assert "carries 2 patch(es)" in capsys.readouterr().err


def test_engine_fails_a_tool_that_imports_torch(tmp_path, capsys):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    tool = tmp_path / "tool.py"
    tool.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport torch\n")
    out = tmp_path / "e.json"
    assert speed.main(["engine", "--ops", "status", "--runs", "1", "--tool", str(tool), "--out", str(out)]) == 1
    assert "FORBIDDEN IMPORTS: torch" in capsys.readouterr().out
    assert json.loads(out.read_text())["ops"]["status"]["forbidden_imports"] == ["torch"]
