"""Project discovery (like pre-commit's config: --project DIR, else the nearest manifest.yaml upward) and hints
that name the command the user ran."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_overlay.progname import detect

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "engine"


def _run(*args: str, cwd: Path, module: bool = True, env: dict | None = None):
    """`python -m sglang_overlay` (no entry-script home) or `python ROOT/apply.py`, run from `cwd`."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY_")}
    full["PYTHONPATH"] = str(ROOT)
    full.update(env or {})
    head = ["-m", "sglang_overlay"] if module else [str(ROOT / "apply.py")]
    return subprocess.run([sys.executable, *head, *args], cwd=cwd, capture_output=True, text=True, env=full)


@pytest.fixture(scope="module")
def fx_project(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("proj") / "fx"
    shutil.copytree(FIXTURE, dst, ignore=shutil.ignore_patterns("make_fixtures.py"))
    (dst / "deep" / "er").mkdir(parents=True)
    return dst


def _fingerprint(res) -> dict:
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_nearest_manifest_upward_from_a_subdirectory(fx_project):
    found = _fingerprint(_run("fingerprint", "--set", "default", "--json", cwd=fx_project / "deep" / "er"))
    assert found["patches"] == ["fx_topk", "fx_args_a"]
    named = _fingerprint(_run("--project", str(fx_project), "fingerprint", "--set", "default", "--json", cwd=ROOT))
    assert named == found  # --project wins over the manifest.yaml in the current directory (ROOT's)


def test_embedded_tree_is_placed_in_the_discovered_project(fx_project):
    res = _run("status", cwd=fx_project / "deep")
    assert res.returncode == 2
    assert f"{fx_project}/.sglang/sglang-0.5.17 does not exist yet" in res.stderr
    assert "`python -m sglang_overlay fetch`" in res.stderr


@pytest.mark.parametrize("flag", ["--project", "--manifest"])
def test_a_hint_carries_the_project_the_user_named(fx_project, tmp_path, flag):
    """Pasted from elsewhere without the user's --project/--manifest, a hint's command would act on the nearest
    manifest.yaml (or none): the hint repeats it, quoted as the shell needs."""
    spaced = tmp_path / "my proj"
    shutil.copytree(fx_project, spaced)
    named = str(spaced) if flag == "--project" else str(spaced / "manifest.yaml")
    res = _run(flag, named, "status", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"`python -m sglang_overlay {flag} '{named}' fetch`" in res.stderr, res.stderr
    res = _run(flag, named, "--pin", "0.5.17", "status", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert f"`python -m sglang_overlay {flag} '{named}' --pin 0.5.17 fetch`" in res.stderr, res.stderr


def test_the_hint_that_names_a_manifest_does_not_also_carry_the_users_project(fx_project, tmp_path):
    """`--project child rebase V` where child's manifest extends another: the hint names the manifest that holds
    the pin; with the user's `--project` beside it the pasted command was refused (the two options exclude each
    other), and a path with a space split in two."""
    spaced = tmp_path / "my proj"
    shutil.copytree(fx_project, spaced)
    child = tmp_path / "child"
    child.mkdir()
    (child / "manifest.yaml").write_text(f"schema: 1\nextends: {spaced / 'manifest.yaml'}\n")
    res = _run("--project", str(child), "rebase", "0.5.99", cwd=tmp_path)
    assert res.returncode == 2 and "extends another manifest" in res.stderr, res.stderr
    hint = f"`python -m sglang_overlay --manifest '{spaced / 'manifest.yaml'}' rebase 0.5.99`"
    assert hint in res.stderr, res.stderr


def test_the_damaged_state_hint_names_the_tree_and_moves_it_aside(fx_project, tmp_path):
    """The hint for a damaged state file said `rm -rf .sglang`: relative to wherever it is pasted (another
    project's trees), and deleting the tree's backups with it. It names the tree by its path, moved aside."""
    tree = fx_project / ".sglang" / "sglang-0.5.17"
    state = tree / ".sglang-overlay" / "state.json"
    state.parent.mkdir(parents=True)
    (tree / "python" / "sglang").mkdir(parents=True)
    try:
        state.write_text("{not json")
        res = _run("--project", str(fx_project), "status", cwd=tmp_path)
        assert res.returncode == 2 and str(state) in res.stderr, res.stderr
        assert f"`mv {tree} {tree}.damaged && python -m sglang_overlay --project {fx_project} fetch`" in res.stderr
        assert "rm -rf" not in res.stderr
    finally:
        shutil.rmtree(fx_project / ".sglang")


def test_no_manifest_anywhere_is_exit_2_naming_the_search_and_the_fix(tmp_path):
    res = _run("status", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"no manifest.yaml in {tmp_path} or any directory above it" in res.stderr
    assert "--project DIR" in res.stderr and "run python -m sglang_overlay inside a project" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--project", "{tmp}", "status"], "--project {tmp}: there is no {tmp}/manifest.yaml"),
        (["--project", "", "status"], "--project is empty"),
        (["--project", "{tmp}", "--manifest", "{tmp}/m.yaml", "status"], "not allowed with argument"),
    ],
)
def test_bad_project_arguments_are_exit_2(tmp_path, args, message):
    res = _run(*(a.format(tmp=tmp_path) for a in args), cwd=tmp_path)
    assert res.returncode == 2 and message.format(tmp=tmp_path) in res.stderr, res.stderr


def test_apply_py_from_elsewhere_works_on_its_own_project(tmp_path):
    """Outside any project, `python /path/to/apply.py` falls back to the project holding that apply.py."""
    res = _run("fingerprint", "--set", "default", "--json", cwd=tmp_path, module=False)
    assert _fingerprint(res)["patches"]  # ROOT's default preset
    bad = _run("apply", cwd=tmp_path, module=False)
    assert bad.returncode == 2 and f"`python {ROOT}/apply.py apply deepseek_v2`" in bad.stderr, bad.stderr
    assert f"usage: python {ROOT}/apply.py apply" in _run("apply", "--help", cwd=tmp_path, module=False).stdout


def test_a_project_found_upward_beats_apply_py_home(fx_project):
    res = _run("fingerprint", "--set", "default", "--json", cwd=fx_project, module=False)
    assert _fingerprint(res)["patches"] == ["fx_topk", "fx_args_a"]


@pytest.mark.parametrize(
    "argv0, cwd, expected",
    [
        ("/usr/local/bin/sglang-overlay", "/x", "sglang-overlay"),
        ("sglang-overlay", "/x", "sglang-overlay"),
        ("apply.py", "/x", "python apply.py"),
        ("/proj/apply.py", "/proj", "python apply.py"),
        ("/my proj/apply.py", "/x", "python '/my proj/apply.py'"),
        ("/p/sglang_overlay/__main__.py", "/x", "python -m sglang_overlay"),
    ],
)
def test_program_name_is_what_the_user_typed(argv0, cwd, expected, monkeypatch):
    monkeypatch.setattr(os.path, "realpath", lambda p: os.path.normpath(os.path.join("/x", p)))
    assert detect(argv0, cwd) == expected


def test_no_hint_hard_codes_the_entry_script():
    """Every hint goes through progname.prog(); only the modules that explain the entry points name apply.py."""
    offenders = []
    for f in (ROOT / "sglang_overlay").rglob("*.py"):
        if f.name in ("progname.py", "project.py", "__init__.py"):  # the modules that explain the entry points
            continue
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"python apply\.py|`apply\.py ", line):
                offenders.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
