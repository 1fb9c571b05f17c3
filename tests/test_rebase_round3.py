"""Issue 40's failure classes of `rebase` (round 3): a linked staging directory, an unreadable release file,
what a killed start or continue leaves, and the version and progress checks of class 12."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from faultlib import STRACE, inject, python_argv, trace_points
from test_rebase import (  # noqa: F401 - cache and pin_source are fixtures
    SARGS,
    TOPK,
    _conflicting_release,
    cache,
    cli,
    make_release,
    pin_source,
    pin_text,
    project,
    project_files,
    tree_is_pristine,
    with_insert_after,
)

V = "9.0.2"


def _stopped(tmp_path, cache, pin_source):
    _conflicting_release(cache, pin_source, V)
    proj = project(tmp_path)
    cli(proj, cache, "rebase", V, rc=1)
    return proj


# -- 5: the staging directory as a symbolic link -----------------------------------------------------------------
def test_a_linked_staging_directory_is_refused_and_abort_removes_only_the_link(tmp_path, cache, pin_source):
    proj = _stopped(tmp_path, cache, pin_source)
    staging, outside = proj / "pins" / f".rebase-{V}", tmp_path / "outside"
    staging.rename(outside)
    staging.symlink_to(outside)
    before = {str(p.relative_to(outside)): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    for args in (["--skip", "--reason", "x"], ["--continue"]):
        res = cli(proj, cache, "rebase", *args, rc=2)
        assert str(staging) in res.stderr and "symbolic link" in res.stderr and "Traceback" not in res.stderr
    assert not (proj / "pins" / V).exists()
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    assert "Errno None" not in res.stdout + res.stderr and "removed the symbolic link" in res.stdout
    assert not os.path.lexists(staging)
    assert {str(p.relative_to(outside)): p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


# -- 6: a release file that cannot be read -----------------------------------------------------------------------
@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
def test_an_unreadable_release_file_is_a_permission_error(tmp_path, cache, pin_source):
    proj = _stopped(tmp_path, cache, pin_source)
    cli(proj, cache, "rebase", "--abort", rc=0)  # the release tree stays, pristine
    f = proj / ".sglang" / f"sglang-{V}" / SARGS
    assert tree_is_pristine(proj, V) and f.is_file()
    os.utime(f, (1, 1))  # its index entry stale: git must read the file to tell whether it changed
    # every open of that one file fails with EACCES, git's included: what a file of another user does
    env = dict(os.environ, SGLANG_OVERLAY_CACHE=str(cache))
    env.pop("SGLANG_OVERLAY_TREE", None)
    res = subprocess.run(
        [
            STRACE,
            "-f",
            "-qq",
            "-o",
            os.devnull,
            "-P",
            str(f),
            "-P",
            SARGS,
            "-e",
            "trace=openat",
            "-e",
            "inject=openat:error=EACCES",
        ]
        + [sys.executable, str(ROOT / "apply.py"), "rebase", V],
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1, res.stderr + res.stdout
    assert str(f) in res.stderr and "Permission denied" in res.stderr and "carries changes" not in res.stderr
    assert "revert --all" not in res.stderr and not (proj / "pins" / f".rebase-{V}.json").exists()


# -- 7: leftovers of a killed start and of a killed --continue --------------------------------------------------
def test_a_start_killed_before_its_progress_file_is_tidied_by_the_next_rebase_command(tmp_path, cache, pin_source):
    proj = _stopped(tmp_path, cache, pin_source)
    before = project_files(proj)
    cli(proj, cache, "rebase", "--abort", rc=0)
    # what the kill left: the staging directory made, the progress file's temp not renamed yet
    pins = proj / "pins"
    (pins / f".rebase-{V}").mkdir(parents=True)
    (pins / f"..rebase-{V}.json.sglang-overlay-tmp").write_text("{")
    for args in (["--status"], ["--abort"]):
        res = cli(proj, cache, "rebase", *args)
        assert "Traceback" not in res.stderr and res.returncode in (0, 2), res.stderr
    assert not pins.exists(), sorted(p.name for p in pins.iterdir())
    assert project_files(proj) == {k: v for k, v in before.items() if not k.startswith("pins/")}


def test_abort_after_a_killed_continue_keeps_no_temp_file_in_the_copy_it_hands_over(tmp_path, cache, pin_source):
    """fx_topk resolved and carried by `--continue` (the user's work: an abort keeps the staging directory
    aside), with a temp file a killed `--continue` left in it."""
    topk = with_insert_after(pin_text(pin_source, TOPK), 2055)
    src = pin_text(pin_source, SARGS).replace(
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
        "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # upstream wrote something else here\n",
    )
    make_release(cache, pin_source, "9.0.14", **{TOPK: topk.encode(), SARGS: src.encode()})
    proj = project(tmp_path)
    assert "fx_topk: conflict" in cli(proj, cache, "rebase", "9.0.14", rc=1).stdout
    tree = proj / ".sglang" / "sglang-9.0.14"
    text = (tree / TOPK).read_text()
    start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
    (tree / TOPK).write_text(text[:start] + "# upstream inserted this\n# fixture: marks select_experts\n" + text[end:])
    assert "fx_args_b: conflict" in cli(proj, cache, "rebase", "--continue", rc=1).stdout
    staging = proj / "pins" / ".rebase-9.0.14"
    (staging / "patches" / ".fx_args_b.patch.sglang-overlay-tmp").write_text("half")  # a write the kill cut
    res = cli(proj, cache, "rebase", "--abort", rc=0)
    kept = sorted((proj / "pins").glob(".rebase-9.0.14.aborted-*"))
    assert len(kept) == 1 and (kept[0] / "patches" / "fx_topk.patch").is_file(), res.stdout
    assert not [p for p in kept[0].rglob("*") if p.name.endswith(".sglang-overlay-tmp")]


# -- 12: the version named, and where a progress file points --------------------------------------------------
def test_a_version_with_a_leading_zero_is_refused_before_any_download(tmp_path, cache):
    proj = project(tmp_path)
    res = cli(proj, cache, "rebase", "0.5.018", rc=2)
    assert "'0.5.018' is not a release version" in res.stderr
    assert not (cache / "releases" / "0.5.18").exists() and not (proj / "pins").exists()


def test_a_progress_file_whose_source_escapes_the_project_is_refused(tmp_path, cache, pin_source):
    proj = _stopped(tmp_path, cache, pin_source)
    progress = proj / "pins" / f".rebase-{V}.json"
    data = json.loads(progress.read_text())
    progress.write_text(json.dumps(data | {"source": "../../manifest.yaml"}))
    for args in (["--continue"], ["--status"]):
        res = cli(proj, cache, "rebase", *args, rc=2)
        assert str(progress) in res.stderr and "'source'" in res.stderr and "inside the project" in res.stderr


@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
def test_a_kill_at_every_point_of_the_tidy_leaves_it_to_the_next_command(tmp_path, cache, pin_source):
    """The tidy of a start killed before its progress file, killed itself at each write-side call: the next
    rebase command finishes it."""
    proj = _stopped(tmp_path, cache, pin_source)
    before = project_files(proj)
    cli(proj, cache, "rebase", "--abort", rc=0)
    pins = proj / "pins"

    def leftovers() -> None:
        (pins / f".rebase-{V}").mkdir(parents=True, exist_ok=True)
        (pins / f"..rebase-{V}.json.sglang-overlay-tmp").write_text("{")

    env = dict(os.environ, SGLANG_OVERLAY_CACHE=str(cache))
    env.pop("SGLANG_OVERLAY_TREE", None)
    leftovers()
    argv = python_argv("rebase", "--abort")
    points, _ = trace_points(argv, env, proj, tmp_path / "trace.log")
    points = [p for p in points if ".rebase-" in p.call or "sglang-overlay" in p.call]
    assert points, "the tidy made no write-side call"
    for point in points:
        leftovers()
        r = inject(argv, env, proj, tmp_path / "kill.log", point, "signal=KILL")
        assert r.hit, point
        again = cli(proj, cache, "rebase", "--abort")
        assert again.returncode in (0, 2) and "Traceback" not in again.stderr, (point, again.stderr)
        assert not pins.exists(), (point, sorted(p.name for p in pins.iterdir()))
    assert project_files(proj) == {k: v for k, v in before.items() if not k.startswith("pins/")}
