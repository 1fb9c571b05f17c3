"""bench peers' own parts, without quilt or StGit: the synthetic sets it times are real, valid patch sets on the
real 0.5.17 tree (each passes `check`, and shared ones do share files), and its ratios are paired."""

from __future__ import annotations

import sys

from bench.peer_speed import REPO, Timing, forget_compile_verdicts, measure, ratios, synthetic
from sglang_overlay.compat import check_pin, file_groups
from sglang_overlay.compilecache import verdict_file
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.manifest import load_manifest


def test_synthetic_sets_are_valid_and_shaped_as_named(sglang_tree, tmp_path, project_manifest):
    read = WheelSource(pinned_wheel(project_manifest.pin)).read
    for shared, groups in ((False, 7), (True, 2)):
        ps = synthetic(tmp_path / str(shared), sglang_tree, 7, shared, REPO / "manifest.yaml")
        m = load_manifest(ps.manifest)
        assert len(m.patches) == ps.n == len(ps.stack) == 7
        assert len(set(file_groups(m).values())) == groups  # five patches a file when shared: 5 + 2
        rep = check_pin(m, read, "0.5.17")
        assert rep.ok and not rep.offsets, [i for i in rep.items if not i.ok]
        assert sum(i.what == "pair" for i in rep.items) == (10 + 1 if shared else 0)


def test_ratios_are_taken_pair_by_pair():
    # a slow moment (the third repetition) hits both tools: paired, it cancels; medians alone would say 1.5
    res = {"ours": Timing([1.0, 3.0, 10.0]), "peer": Timing([2.0, 1.0, 100.0])}
    assert ratios(res, "ours") == {"peer": 0.5}
    assert res["ours"].median_s / res["peer"].median_s == 1.5
    # the CPU times are paired the same way (a run with no CPU time to divide by is left out)
    res = {"ours": Timing([1.0], cpu_s=[0.2, 0.3, 0.9]), "peer": Timing([1.0], cpu_s=[0.4, 0.0, 0.3])}
    assert ratios(res, "ours", "cpu_s") == {"peer": 1.75}


def test_measure_runs_before_untimed_ahead_of_each_run_and_keeps_cpu(tmp_path):
    calls = []
    spin = [sys.executable, "-c", "import time; t = time.process_time()\nwhile time.process_time() - t < 0.05: pass"]
    res = measure({"a": [(spin, tmp_path, (0,))], "b": [(["true"], tmp_path, (0,))]}, 2, before=lambda: calls.append(1))
    assert len(calls) == 2 * 3  # two contenders, a warm-up and two runs each
    assert len(res["a"].cpu_s) == len(res["a"].runs_s) == 2
    assert min(res["a"].cpu_s) >= 0.05 > max(res["b"].cpu_s)  # the child's own CPU, not the bench's


def test_check_cold_forgets_only_the_compile_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(tmp_path))
    verdicts = verdict_file()
    verdicts.parent.mkdir(parents=True)
    verdicts.write_text("0" * 64 + "\n")
    (tmp_path / "wheels").mkdir()
    forget_compile_verdicts()
    assert not verdicts.parent.exists() and (tmp_path / "wheels").is_dir()
