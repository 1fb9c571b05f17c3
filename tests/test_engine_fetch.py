"""`fetch` under a kill, twice at once, and with a damaged cache: the next fetch succeeds, the tree is whole,
and nothing a killed fetch was making is left in .sglang/ or the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from faultlib import STRACE, Point, hold

WHEEL_NAME = "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl"


@pytest.fixture
def project(tmp_path, pinned_tree):
    from sglang_overlay.fetch import cache_dir

    wheel = cache_dir() / "wheels" / WHEEL_NAME  # the session fetched it for pinned_tree
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("manifest.yaml", "patches", "overlay"):
        src = ROOT / name
        shutil.copytree(src, proj / name) if src.is_dir() else shutil.copy(src, proj / name)
    return proj, wheel, tmp_path / "cache"


def fetch_argv(proj: Path, wheel: Path) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "apply.py"),
        "--manifest",
        str(proj / "manifest.yaml"),
        "fetch",
        "--wheel",
        str(wheel),
    ]


def env_for(cache: Path) -> dict:
    return dict(os.environ, SGLANG_OVERLAY_CACHE=str(cache))


def assert_whole(proj: Path, cache: Path) -> None:
    tree = proj / ".sglang" / "sglang-0.5.17"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout == ""
    assert (
        subprocess.run(
            ["git", "rev-parse", "-q", "--verify", "refs/tags/v0.5.17"], cwd=tree, capture_output=True
        ).returncode
        == 0
    )
    assert (tree / "python/sglang/srt/server_args.py").is_file() and oct(tree.stat().st_mode & 0o777) != "0o700"
    left = [p.name for d in (proj / ".sglang", cache) for p in d.iterdir() if p.name.startswith(".tmp-")]
    assert left == [], left
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == [WHEEL_NAME]


@pytest.mark.parametrize("after_s", [1.0])  # any moment: the strace test below stops it at the last step
def test_fetch_killed_at_a_moment_then_fetched_again(project, after_s):
    proj, wheel, cache = project
    p = subprocess.Popen(
        fetch_argv(proj, wheel), env=env_for(cache), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    time.sleep(after_s)
    p.kill()
    p.wait()
    again = subprocess.run(fetch_argv(proj, wheel), env=env_for(cache), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert_whole(proj, cache)


@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
def test_fetch_killed_just_before_the_tree_is_renamed_into_place(project):
    """Everything unpacked and committed, held at the chmod right before the rename, then killed: no tree (it
    appears whole or not at all), and the next fetch makes it. Only the command itself is traced (no -f): its
    git children make chmod calls of their own, which strace would count separately."""
    proj, wheel, cache = project
    held = hold(fetch_argv(proj, wheel), env_for(cache), proj, proj.parent / "hold.log", Point("chmod", 1, "chmod"))
    held.kill()
    assert not (proj / ".sglang" / "sglang-0.5.17").exists()
    assert [n.name for n in (proj / ".sglang").iterdir() if n.name.startswith(".tmp-")]  # what the next one removes
    again = subprocess.run(fetch_argv(proj, wheel), env=env_for(cache), capture_output=True, text=True)
    assert again.returncode == 0 and "fetched" in again.stdout, again.stderr
    assert_whole(proj, cache)


def test_two_fetches_at_once(project):
    proj, wheel, cache = project
    ps = [
        subprocess.Popen(
            fetch_argv(proj, wheel), env=env_for(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate() for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert sorted(o[0].split()[0] for o in outs) == ["cached", "fetched"]
    assert_whole(proj, cache)


def test_damaged_cached_wheel_is_replaced(project):
    proj, wheel, cache = project
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / WHEEL_NAME).write_bytes(b"half a wheel")  # what an old, non-atomic copy could leave
    res = subprocess.run(fetch_argv(proj, wheel), env=env_for(cache), capture_output=True, text=True)
    assert res.returncode == 0 and "is damaged (sha256 mismatch): fetching it again" in res.stderr, res.stderr
    assert_whole(proj, cache)
