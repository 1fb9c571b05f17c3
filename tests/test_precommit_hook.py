"""The hook of .pre-commit-hooks.yaml, run by a real pre-commit in a temporary git repository that carries a
project: it runs only when the manifest, a patch or an overlay file is staged, passes on a sound set, and fails the
commit on a patch that no longer applies.

The hook repository is a fresh git repository holding what pre-commit installs from this checkout (the hook file,
pyproject.toml, README.md, sglang_overlay/), so uncommitted work is what is tested; pre-commit builds the hook's
venv from it with a real `pip install` once (PRE_COMMIT_HOME is per module), then runs three commits' worth of
hooks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOOK_ID = "sglang-overlay-check"


def _git(*args: str, cwd: Path) -> str:
    env = dict(
        os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"
    )
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    base = tmp_path_factory.mktemp("precommit")
    hooks = base / "hook-repo"
    hooks.mkdir()
    for name in (".pre-commit-hooks.yaml", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, hooks / name)
    for package in ("sglang_overlay", "bench"):  # bench: installed as sglang_overlay_bench
        shutil.copytree(ROOT / package, hooks / package, ignore=shutil.ignore_patterns("__pycache__", "results"))
    _git("init", "-q", cwd=hooks)
    _git("add", "-A", cwd=hooks)
    _git("commit", "-qm", "hooks", cwd=hooks)
    rev = _git("rev-parse", "HEAD", cwd=hooks)

    repo = base / "my-patches"
    shutil.copytree(ROOT / "tests" / "fixtures" / "engine", repo, ignore=shutil.ignore_patterns("make_fixtures.py"))
    (repo / "NOTES.md").write_text("notes\n")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hooks}\n    rev: {rev}\n    hooks:\n      - id: {HOOK_ID}\n"
    )
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-qm", "project", cwd=repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_") and k != "PYTHONPATH"}
    env["SGLANG_OVERLAY_CACHE"] = os.environ.get("SGLANG_OVERLAY_CACHE") or str(Path.home() / ".cache/sglang-overlay")
    env["PRE_COMMIT_HOME"] = str(base / "pre-commit-home")
    return repo, env


def _precommit(repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`pre-commit run` on what is staged, as `git commit` would run it."""
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--color", "never"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=env,
    )


def _hook_line(out: str) -> str:
    return next((line for line in out.splitlines() if line.startswith("sglang-overlay check")), "")


@pytest.mark.install
def test_hook_runs_check_only_on_project_changes_and_fails_a_broken_patch(user_repo):
    repo, env = user_repo

    (repo / "NOTES.md").write_text("notes, edited\n")
    _git("add", "NOTES.md", cwd=repo)
    res = _precommit(repo, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _hook_line(res.stdout).endswith("Skipped"), res.stdout  # nothing of the project staged
    _git("commit", "-qm", "notes", cwd=repo)

    patch = repo / "patches" / "fx_topk.patch"
    sound = patch.read_text()
    patch.write_text(sound.replace(" def select_experts(", " def select_expertz("))  # a context line upstream lacks
    _git("add", "patches/fx_topk.patch", cwd=repo)
    res = _precommit(repo, env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert _hook_line(res.stdout).endswith("Failed"), res.stdout
    assert "fx_topk does not apply cleanly" in res.stdout and "does not hold on sglang 0.5.17" in res.stdout, res.stdout

    patch.write_text(sound)
    manifest = repo / "manifest.yaml"
    manifest.write_text(manifest.read_text() + "# reviewed\n")
    _git("add", "patches/fx_topk.patch", "manifest.yaml", cwd=repo)
    res = _precommit(repo, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _hook_line(res.stdout).endswith("Passed"), res.stdout


def test_hook_file_runs_check_through_the_console_script():
    import yaml

    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == HOOK_ID and hook["entry"] == "sglang-overlay" and hook["args"] == ["check"]
    assert hook["language"] == "python" and hook["pass_filenames"] is False
