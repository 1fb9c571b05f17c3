"""The warm-machine marker that lets a resumed invocation skip its throwaway start (bench.runner)."""

from __future__ import annotations

import json

from bench import runner


def test_a_start_served_here_marks_the_machine_warm(tmp_path, monkeypatch):
    monkeypatch.setenv(runner.WARM_DIR_ENV, str(tmp_path))
    assert runner.warm_machine_age("sig") is None
    runner.mark_warm_machine("sig")
    age = runner.warm_machine_age("sig")
    assert age is not None and 0 <= age < 5
    assert runner.warm_machine_age("another-measurement") is None


def test_another_boot_an_old_or_a_broken_marker_is_not_warm(tmp_path, monkeypatch):
    monkeypatch.setenv(runner.WARM_DIR_ENV, str(tmp_path))
    runner.mark_warm_machine("sig")
    marker = tmp_path / "sig"
    rec = json.loads(marker.read_text())
    marker.write_text(json.dumps({**rec, "boot_id": "another-boot"}))
    assert runner.warm_machine_age("sig") is None
    marker.write_text(json.dumps({**rec, "time": rec["time"] - runner.WARM_MAX_AGE_S - 1}))
    assert runner.warm_machine_age("sig") is None
    marker.write_text(json.dumps({**rec, "time": rec["time"] + 3600}))  # a clock that went back
    assert runner.warm_machine_age("sig") is None
    for junk in ("", "{", "[]", '{"time": "x", "boot_id": "b"}'):
        marker.write_text(junk)
        assert runner.warm_machine_age("sig") is None


def test_an_unwritable_marker_dir_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(runner.WARM_DIR_ENV, str(blocker / "sub"))
    runner.mark_warm_machine("sig")  # best effort: the measurement goes on
    assert runner.warm_machine_age("sig") is None


def test_a_marker_write_killed_midway_leaves_nothing_the_next_write_keeps(tmp_path, monkeypatch):
    from sglang_overlay.fsio import tmp_path as tmp_of

    monkeypatch.setenv(runner.WARM_DIR_ENV, str(tmp_path))
    torn = tmp_of(tmp_path / "sig")
    torn.write_text('{"boot_')  # what a kill between write and rename leaves
    assert runner.warm_machine_age("sig") is None  # never read as a marker
    runner.mark_warm_machine("sig")
    assert runner.warm_machine_age("sig") is not None and not torn.exists()
