"""The engine on the real SGLang 0.5.17 source: round trips, order independence, drift, kills, user edits."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, tree_snapshot

FIX = ROOT / "tests" / "fixtures" / "engine" / "manifest.yaml"
CHANGING = ["fx_topk", "fx_args_a", "fx_args_b", "fx_common", "fx_overlay"]
SERVER_ARGS = "python/sglang/srt/server_args.py"


def cli(tree: Path, *args, rc: int | None = 0, env=None):
    return run_cli(
        "--manifest",
        str(FIX),
        "--tree",
        str(tree),
        *args,
        check_rc=rc,
        env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0", **(env or {})},
    )


def git_status(tree: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout


def test_round_trip_every_patch_alone_and_all(sglang_tree):
    pristine = tree_snapshot(sglang_tree)
    for name in CHANGING:
        cli(sglang_tree, "apply", name)
        assert tree_snapshot(sglang_tree) != pristine, name
        cli(sglang_tree, "revert", "--all")
        assert tree_snapshot(sglang_tree) == pristine, f"{name}: revert is not byte-identical"
    cli(sglang_tree, "apply", *CHANGING)
    cli(sglang_tree, "revert", "--all")
    assert tree_snapshot(sglang_tree) == pristine
    assert git_status(sglang_tree) == ""


def test_random_subsets_in_random_orders_give_identical_trees(sglang_tree):
    rng = random.Random(1234)
    expected: dict[frozenset, dict] = {}
    for _ in range(6):
        subset = rng.sample(CHANGING, rng.randint(1, len(CHANGING)))
        if "fx_common" in subset and "fx_args_a" not in subset:
            subset.append("fx_args_a")  # fx_common requires it; apply would add it anyway
        cli(sglang_tree, "revert", "--all")
        for name in subset:  # one at a time, in random order
            cli(sglang_tree, "apply", name)
        # and back out the others in reverse to reach the same subset another way
        snap = tree_snapshot(sglang_tree)
        key = frozenset(subset)
        if key in expected:
            assert snap == expected[key]
        expected[key] = snap
        cli(sglang_tree, "revert", "--all")
        cli(sglang_tree, "apply", *reversed(subset))
        assert tree_snapshot(sglang_tree) == snap, f"order changed the tree for {sorted(subset)}"
        # Reaching the subset from the full set by reverting the rest must give the same bytes too.
        cli(sglang_tree, "apply", *CHANGING)
        rest = [n for n in CHANGING if n not in subset]
        if rest:
            cli(sglang_tree, "revert", *rest)
        assert tree_snapshot(sglang_tree) == snap, f"revert path differs for {sorted(subset)}"


def test_apply_twice_is_a_no_op_with_a_message(sglang_tree):
    cli(sglang_tree, "apply", "fx_topk")
    snap = tree_snapshot(sglang_tree)
    out = cli(sglang_tree, "apply", "fx_topk").stdout
    assert "already applied: fx_topk" in out and "nothing to do" in out
    assert tree_snapshot(sglang_tree) == snap


def test_requires_pulls_in_and_blocks_revert(sglang_tree):
    out = cli(sglang_tree, "apply", "fx_common").stdout
    assert "applied  fx_args_a, fx_common" in out
    err = cli(sglang_tree, "revert", "fx_args_a", rc=2).stderr
    assert "cannot revert fx_args_a: fx_common requires it" in err


def test_conflicting_patches_refused(sglang_tree):
    cli(sglang_tree, "apply", "fx_common")
    err = cli(sglang_tree, "apply", "fx_topk_gated", rc=2).stderr
    assert "fx_common conflicts with fx_topk_gated" in err


def test_hardware_gate(sglang_tree):
    res = run_cli(
        "--manifest",
        str(FIX),
        "--tree",
        str(sglang_tree),
        "apply",
        "fx_topk_gated",
        env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "12.0"},
        check_rc=2,
    )
    assert "needs compute capability 9.0, this machine has 12.0" in res.stderr
    st = json.loads(
        run_cli(
            "--manifest",
            str(FIX),
            "--tree",
            str(sglang_tree),
            "status",
            "--json",
            env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "12.0"},
            check_rc=0,
        ).stdout
    )
    assert {p["name"]: p["state"] for p in st["patches"]}["fx_topk_gated"] == "unavailable"


def test_user_edits_elsewhere_survive_every_command(sglang_tree):
    other = sglang_tree / "python/sglang/srt/models/llama.py"
    other.write_text(other.read_text() + "\n# my own edit\n")
    untracked = sglang_tree / "python/sglang/my_notes.txt"
    untracked.write_text("mine")
    edited = other.read_bytes()
    for args in (
        ["apply", "--all"],
        ["revert", "fx_topk"],
        ["toggle", "fx_topk"],
        ["revert", "--all"],
        ["apply", "--set", "default"],
        ["status"],
    ):
        if args == ["apply", "--all"]:
            args = ["apply", *CHANGING]
        cli(sglang_tree, *args)
        assert other.read_bytes() == edited and untracked.read_text() == "mine", args


def test_drift_refused_then_force_saves_a_backup(sglang_tree):
    cli(sglang_tree, "apply", "fx_args_a", "fx_args_b")
    f = sglang_tree / SERVER_ARGS
    f.write_text(f.read_text() + "# hand edit\n")
    edited = f.read_bytes()
    for args in (["revert", "fx_args_a"], ["toggle", "fx_args_b"], ["revert", "--all"]):
        res = cli(sglang_tree, *args, rc=1)
        assert (
            f"{SERVER_ARGS}: changed by hand since sglang-overlay wrote it (patches: fx_args_a, fx_args_b)"
            in res.stderr
        )
        assert "refresh" in res.stderr and "--force" in res.stderr
        assert f.read_bytes() == edited
    st = json.loads(cli(sglang_tree, "status", "--json").stdout)
    states = {p["name"]: p["state"] for p in st["patches"]}
    assert states["fx_args_a"] == states["fx_args_b"] == "drifted" and st["drifted_files"] == [SERVER_ARGS]
    # A change that does not touch the drifted file goes ahead and leaves it alone.
    cli(sglang_tree, "apply", "fx_topk")
    assert f.read_bytes() == edited
    res = cli(sglang_tree, "revert", "--all", "--force")
    backup = next(line for line in res.stderr.splitlines() if "saved 1 hand-edited file(s) under" in line).split()[-1]
    assert (Path(backup) / SERVER_ARGS).read_bytes() == edited
    assert git_status(sglang_tree) == ""


def test_refresh_captures_hand_edits_and_keeps_the_header(sglang_tree, tmp_path):
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(FIX.parent, proj)
    man = proj / "manifest.yaml"

    def run(*a, rc=0):
        return run_cli("--manifest", str(man), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_args_a", "fx_args_b")
    f = sglang_tree / SERVER_ARGS
    text = f.read_text().replace(
        "    # fixture a: top of ServerArgs\n", "    # fixture a: top of ServerArgs (edited)\n"
    )
    f.write_text(text)
    out = run("refresh", "fx_args_a").stdout
    assert "refreshed fx_args_a" in out
    patch = (proj / "patches" / "fx_args_a.patch").read_text()
    assert (
        patch.startswith("Description: Fixture fx_args_a") and "+    # fixture a: top of ServerArgs (edited)" in patch
    )
    assert "fixture b" not in patch, "fx_args_b's change leaked into fx_args_a"
    st = json.loads(run("status", "--json").stdout)
    assert {p["name"]: p["state"] for p in st["patches"]}["fx_args_a"] == "applied"
    run("revert", "--all")
    assert git_status(sglang_tree) == ""
    run("apply", "fx_args_a")
    assert "(edited)" in f.read_text()


def test_stale_when_patch_file_changes_after_apply(sglang_tree, tmp_path):
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(FIX.parent, proj)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_overlay")
    src = proj / "overlay/python/sglang/srt/fx_overlay_module.py"
    src.write_text(src.read_text() + "CHANGED = 1\n")
    st = json.loads(run("status", "--json").stdout)
    assert {p["name"]: p["state"] for p in st["patches"]}["fx_overlay"] == "stale"
    run("apply", "--set", "default")
    run("apply", "fx_overlay")
    assert "CHANGED = 1" in (sglang_tree / "python/sglang/srt/fx_overlay_module.py").read_text()


def test_status_json_shape(sglang_tree):
    cli(sglang_tree, "apply", "--set", "default")
    st = json.loads(cli(sglang_tree, "status", "--json").stdout)
    assert st["pin"] == {
        "package": "sglang",
        "version": "0.5.17",
        "wheel": "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl",
    }
    assert st["tree"]["path"] == str(sglang_tree) and st["tree"]["kind"] == "checkout"
    assert len(st["fingerprint"]) == 64 and st["applied"] == ["fx_topk", "fx_args_a"]
    states = {p["name"]: p["state"] for p in st["patches"]}
    assert states == {
        "fx_topk": "applied",
        "fx_args_a": "applied",
        "fx_args_b": "not-applied",
        "fx_common": "not-applied",
        "fx_overlay": "not-applied",
        "fx_topk_gated": "not-applied",
        "fx_kimi": "upstreamed",
    }
    fp = cli(sglang_tree, "fingerprint").stdout.strip()
    assert fp == st["fingerprint"] == cli(sglang_tree, "fingerprint", "--set", "default").stdout.strip()
    ident = (sglang_tree / "python/sglang/_overlay_build.py").read_text()
    assert f"FINGERPRINT = '{fp}'" in ident and "PATCHES = ('fx_topk', 'fx_args_a')" in ident


def test_diff_shows_the_patch_in_the_current_tree(sglang_tree):
    cli(sglang_tree, "apply", "fx_args_a")
    out = cli(sglang_tree, "diff", "fx_args_b")
    assert "+    # fixture b: inside prepare_server_args" in out.stdout and "not applied" in out.stderr
    assert "fixture a" not in out.stdout


def test_wrong_version_refused_with_both_versions(sglang_tree):
    (sglang_tree / "python/sglang/_version.py").write_text("__version__ = version = '0.5.18'\n")
    err = cli(sglang_tree, "apply", "fx_topk", rc=2).stderr
    assert "this tree is SGLang 0.5.18, the manifest pins 0.5.17" in err


def test_conflicting_tree_is_named_by_hunk_and_symbol(sglang_tree):
    f = sglang_tree / SERVER_ARGS
    f.write_text(
        f.read_text().replace(
            "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
            "def prepare_server_args(argv: list) -> ServerArgs:\n",
        )
    )
    err = cli(sglang_tree, "apply", "fx_args_b", rc=1).stderr
    assert "fx_args_b does not apply cleanly (zero fuzz)" in err
    assert "hunk #1 @@ -9342,6 +9342,7 @@" in err and "prepare_server_args" in err
    assert "fixture b" not in f.read_text()  # nothing was written


def test_installed_package_tree(sglang_tree, tmp_path):
    import shutil

    site = tmp_path / "site-packages"
    shutil.copytree(sglang_tree / "python" / "sglang", site / "sglang")
    pristine = tree_snapshot(site)
    res = cli(site, "apply", "fx_topk", "fx_overlay")
    assert (site / "sglang/srt/fx_overlay_module.py").is_file()
    st = json.loads(cli(site, "status", "--json").stdout)
    assert st["tree"]["kind"] == "installed" and st["applied"] == ["fx_topk", "fx_overlay"]
    assert (site / "sglang" / ".sglang-overlay" / "state.json").is_file() and not (site / ".sglang-overlay").exists()
    cli(site, "revert", "--all")
    assert tree_snapshot(site) == pristine
    del res


def test_refresh_captures_edits_of_an_overlay_file(sglang_tree, tmp_path):
    import shutil

    proj = tmp_path / "proj"
    shutil.copytree(FIX.parent, proj)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_overlay")
    f = sglang_tree / "python/sglang/srt/fx_overlay_module.py"
    f.write_text(f.read_text() + "EDITED = True\n")
    assert "refreshed fx_overlay: 1 file(s) updated" in run("refresh", "fx_overlay").stdout
    assert "EDITED = True" in (proj / "overlay/python/sglang/srt/fx_overlay_module.py").read_text()
    st = json.loads(run("status", "--json").stdout)
    assert {p["name"]: p["state"] for p in st["patches"]}["fx_overlay"] == "applied"
    run("revert", "--all")
    assert git_status(sglang_tree) == ""
    assert "no hand edits" in (run("apply", "fx_overlay") and run("refresh", "fx_overlay")).stdout


def _project_cli(proj: Path, tree: Path):
    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(tree), *a, check_rc=rc)

    return run


DSV2 = "python/sglang/srt/models/deepseek_v2.py"


def test_refresh_under_a_later_patch_that_writes_other_files_too(sglang_tree, tmp_path):
    """The `oea` preset: oea_topk shares deepseek_v2.py with deepseek_v2 and writes five other files. Taking it
    off the edited file to isolate deepseek_v2's edits needs those files as the set made them: refresh had
    refused every edit of deepseek_v2 under that preset ("the file is not in the tree")."""
    from conftest import copy_project

    proj = copy_project(tmp_path / "proj")
    run = _project_cli(proj, sglang_tree)
    run("apply", "--set", "oea")
    oea_before = (proj / "patches/oea_topk.patch").read_bytes()
    f = sglang_tree / DSV2
    lines = f.read_text().splitlines(keepends=True)
    f.write_text("".join(lines[:5] + ["# my edit\n"] + lines[5:]))
    assert "refreshed deepseek_v2: 1 file(s) updated" in run("refresh", "deepseek_v2").stdout
    assert "\n+# my edit\n" in (proj / "patches/deepseek_v2.patch").read_text()
    assert (proj / "patches/oea_topk.patch").read_bytes() == oea_before
    st = json.loads(run("status", "--json").stdout)
    assert st["drifted_files"] == [] and "oea_topk" in st["applied"]
    run("revert", "--all")
    assert git_status(sglang_tree) == ""
    run("apply", "--set", "oea")
    assert "# my edit\n" in f.read_text()


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_refresh_refuses_a_file_that_is_not_regular_before_writing_any_patch(sglang_tree, tmp_path, kind):
    """A directory (or a link) where the patch's file was read as no file: refresh rewrote the patch as that file's
    deletion, then exited 2; put back, the "stale" patch deleted the file on the next apply."""
    from conftest import copy_project

    proj = copy_project(tmp_path / "proj")
    run = _project_cli(proj, sglang_tree)
    run("apply", "llama_eagle3")
    before = (proj / "patches/llama_eagle3.patch").read_bytes()
    f = sglang_tree / "python/sglang/srt/models/llama_eagle3.py"
    keep = tmp_path / "kept.py"
    f.rename(keep)
    if kind == "directory":
        f.mkdir()
    else:
        f.symlink_to(keep)
    res = run("refresh", "llama_eagle3", rc=2)
    assert "llama_eagle3.py" in res.stderr and "Traceback" not in res.stderr
    assert (proj / "patches/llama_eagle3.patch").read_bytes() == before
    f.rmdir() if kind == "directory" else f.unlink()
    keep.rename(f)
    st = json.loads(run("status", "--json").stdout)
    assert st["drifted_files"] == [] and {p["name"]: p["state"] for p in st["patches"]}["llama_eagle3"] == "applied"


def test_refresh_and_diff_keep_a_carriage_return(sglang_tree, tmp_path):
    """A line ending in CR LF: git's output was read with newline translation, so refresh wrote the line
    without its CR, then refused (drift) with a hint to run refresh again."""
    from conftest import copy_project

    proj = copy_project(tmp_path / "proj")
    run = _project_cli(proj, sglang_tree)
    run("apply", "llama_eagle3")
    f = sglang_tree / "python/sglang/srt/models/llama_eagle3.py"
    f.write_bytes(f.read_bytes() + b"X = 1\r\n")
    run("refresh", "llama_eagle3")
    assert b"\n+X = 1\r\n" in (proj / "patches/llama_eagle3.patch").read_bytes()
    assert json.loads(run("status", "--json").stdout)["drifted_files"] == []
    run("revert", "--all")
    run("apply", "llama_eagle3")
    assert f.read_bytes().endswith(b"X = 1\r\n")


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (installed by .ci/run)")
def test_the_next_command_undoes_a_killed_one_then_decides_on_what_is_left(sglang_tree, tmp_path):
    """Killed as the journal of `revert --all` is removed (all files and the state already written): the next
    `revert fx_topk` rolls the whole revert back first, then reverts only fx_topk, as asked."""
    from faultlib import inject, python_argv, trace_points

    cli(sglang_tree, "apply", "fx_topk", "fx_args_a", "fx_overlay")
    args = python_argv("--manifest", str(FIX), "--tree", str(sglang_tree), "revert", "--all")
    env = dict(os.environ, SGLANG_OVERLAY_CUDA_CAPABILITY="9.0", PYTHONHASHSEED="0")
    files = {SERVER_ARGS: (sglang_tree / SERVER_ARGS).read_bytes()}
    pts, _ = trace_points(args, env, tmp_path, tmp_path / "trace.log")
    cli(sglang_tree, "apply", "fx_topk", "fx_args_a", "fx_overlay")  # the traced run reverted them
    last = next(p for p in pts if p.syscall == "unlink" and "journal.json" in p.call)
    killed = inject(args, env, tmp_path, tmp_path / "kill.log", last, "signal=KILL")
    assert killed.hit and (sglang_tree / ".sglang-overlay/journal.json").exists()
    assert "fixture" not in (sglang_tree / SERVER_ARGS).read_text()  # the revert had written everything
    res = cli(sglang_tree, "revert", "fx_topk")
    assert "rolled back an interrupted `revert`" in res.stderr and "reverted fx_topk" in res.stdout
    assert "not applied" not in res.stdout
    st = json.loads(cli(sglang_tree, "status", "--json").stdout)
    assert st["applied"] == ["fx_args_a", "fx_overlay"] and st["drifted_files"] == []
    assert (sglang_tree / SERVER_ARGS).read_bytes() == files[SERVER_ARGS]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (installed by .ci/run)")
def test_an_edit_made_after_a_kill_survives_the_rollback(sglang_tree, tmp_path):
    """Killed with every file written; the user then edits one of them before any command runs: the rollback
    puts the old bytes back, but saves the edit first and says where."""
    from faultlib import inject, python_argv, trace_points

    args = python_argv("--manifest", str(FIX), "--tree", str(sglang_tree), "apply", "fx_args_a")
    env = dict(os.environ, SGLANG_OVERLAY_CUDA_CAPABILITY="9.0", PYTHONHASHSEED="0")
    pristine = (sglang_tree / SERVER_ARGS).read_bytes()
    pts, _ = trace_points(args, env, tmp_path, tmp_path / "trace.log")
    cli(sglang_tree, "revert", "--all")
    last = next(p for p in pts if p.syscall == "unlink" and "journal.json" in p.call)
    assert inject(args, env, tmp_path, tmp_path / "kill.log", last, "signal=KILL").hit
    f = sglang_tree / SERVER_ARGS
    f.write_text(f.read_text() + "# my edit after the crash\n")
    err = cli(sglang_tree, "recover").stderr
    line = next(line for line in err.splitlines() if "were edited after the interrupted `apply`" in line)
    saved = Path(line.rsplit(" under ", 1)[1].split(" before rolling back")[0]) / SERVER_ARGS
    assert saved.read_text().endswith("# my edit after the crash\n")
    assert f.read_bytes() == pristine


# -- file modes: a diff's `new file mode 100755` / `deleted file mode 100755` --------------------------------------
TOOL = "python/sglang/srt/fx_tool.sh"
SMALL = "python/sglang/multimodal_gen/runtime/disaggregation/__init__.py"  # a small file to delete whole
NEW_TOOL = (
    f"diff --git a/{TOOL} b/{TOOL}\nnew file mode 100755\nindex 0000000..1111111\n--- /dev/null\n+++ b/{TOOL}\n"
    "@@ -0,0 +1,2 @@\n+#!/bin/sh\n+echo fixture tool\n"
)


def mode_project(tmp_path: Path, diff: str) -> Path:
    """The fixture project plus fx_exec, a diff entry with `diff` as its change."""
    proj = tmp_path / "proj"
    shutil.copytree(FIX.parent, proj)
    header = (
        "Description: Fixture fx_exec: a file mode\nOrigin: vendor\nForwarded: not-needed\nLast-Update: 2026-12-02\n"
    )
    (proj / "patches/fx_exec.patch").write_text(header + "---\n" + diff)
    m = proj / "manifest.yaml"
    entry = "  - name: fx_exec\n    description: a file mode\n    kind: diff\n    category: experimental\n"
    m.write_text(m.read_text().replace("presets:\n", entry + "presets:\n", 1))
    return proj


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def umask_of_this_process() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def test_a_new_executable_file_lands_executable_and_revert_removes_it(sglang_tree, tmp_path):
    # it had landed 0644: `new file mode 100755` was parsed as a plain new file and written with the default mode
    proj = mode_project(tmp_path, NEW_TOOL)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    pristine = tree_snapshot(sglang_tree)
    run("apply", "fx_exec", "fx_overlay")
    assert mode_of(sglang_tree / TOOL) == 0o777 & ~umask_of_this_process()  # git's rule: 0755 under umask 022
    assert mode_of(sglang_tree / "python/sglang/srt/fx_overlay_module.py") == 0o666 & ~umask_of_this_process()
    st = json.loads(run("status", "--json").stdout)
    assert st["drifted_files"] == [] and "fx_exec" in st["applied"]
    assert "nothing to do" in run("apply", "fx_exec").stdout  # the mode it has is the mode it should have
    run("revert", "--all")
    assert not (sglang_tree / TOOL).exists() and tree_snapshot(sglang_tree) == pristine
    assert git_status(sglang_tree) == ""
    old = os.umask(0o077)  # the CLI inherits it: exec bits only where the umask leaves read bits
    try:
        run("apply", "fx_exec")
    finally:
        os.umask(old)
    assert mode_of(sglang_tree / TOOL) == 0o700
    run("revert", "fx_exec")
    assert git_status(sglang_tree) == ""


def test_a_patch_whose_new_file_becomes_executable_is_stale_and_apply_sets_the_bit(sglang_tree, tmp_path):
    # the mode line is part of the patch's content: another fingerprint, `stale`, and apply brings the tree to it
    proj = mode_project(tmp_path, NEW_TOOL.replace("new file mode 100755", "new file mode 100644"))

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_exec")
    assert mode_of(sglang_tree / TOOL) & 0o111 == 0
    before = (sglang_tree / TOOL).read_bytes()
    fp_plain = run("fingerprint", "--patches", "fx_exec").stdout
    p = proj / "patches/fx_exec.patch"
    p.write_text(p.read_text().replace("new file mode 100644", "new file mode 100755"))
    assert run("fingerprint", "--patches", "fx_exec").stdout != fp_plain
    st = json.loads(run("status", "--json").stdout)
    assert {q["name"]: q["state"] for q in st["patches"]}["fx_exec"] == "stale"
    res = run("apply", "--patches", "fx_exec")
    assert f"{TOOL}: made executable, as its patch's diff says" in res.stderr
    assert "2 file(s) written" in res.stdout  # the tool (its mode) and the identity module (its fingerprint)
    assert mode_of(sglang_tree / TOOL) == 0o777 & ~umask_of_this_process()
    assert (sglang_tree / TOOL).read_bytes() == before  # only the mode changed
    st = json.loads(run("status", "--json").stdout)
    assert {q["name"]: q["state"] for q in st["patches"]}["fx_exec"] == "applied"
    p.write_text(p.read_text().replace("new file mode 100755", "new file mode 100644"))  # and back off
    run("apply", "--patches", "fx_exec")
    assert mode_of(sglang_tree / TOOL) & 0o111 == 0
    run("revert", "--all")
    assert git_status(sglang_tree) == ""


def test_status_reports_a_hand_chmod_of_a_created_file_as_drift_and_apply_sets_it_back(sglang_tree, tmp_path):
    # a `chmod -x` of a file a diff creates 100755 had shown `applied`, though the next apply rewrites it
    from sglang_overlay import api

    proj = mode_project(tmp_path, NEW_TOOL)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_exec", "fx_args_a")
    tool = sglang_tree / TOOL
    tool.chmod(mode_of(tool) & ~0o111)
    st = json.loads(run("status", "--json").stdout)  # drift is shown, not an error: exit 0, as for a hand edit
    row = {q["name"]: q for q in st["patches"]}["fx_exec"]
    assert row["state"] == "drifted" and row["detail"] == f"exec bit changed by hand: {TOOL} (apply sets it back)"
    assert row["drifted_files"] == row["mode_drifted_files"] == [TOOL]
    assert st["drifted_files"] == st["mode_drifted_files"] == [TOOL]
    assert {q["name"]: q["state"] for q in st["patches"]}["fx_args_a"] == "applied"
    assert "[!] fx_exec" in run("status").stdout
    lib = api.status(manifest=proj / "manifest.yaml", tree=sglang_tree)
    assert lib.patch("fx_exec").state == "drifted" and lib.mode_drifted_files == (TOOL,)
    # a hand edit of its bytes too: both said, in the one row
    written = tool.read_bytes()
    tool.write_bytes(written + b"echo mine\n")
    row = {q["name"]: q for q in json.loads(run("status", "--json").stdout)["patches"]}["fx_exec"]
    assert row["detail"] == f"edited by hand: {TOOL}; exec bit changed by hand: {TOOL} (apply sets it back)"
    assert row["drifted_files"] == row["mode_drifted_files"] == [TOOL]
    # apply (its bytes for the file are the same as before, so the hand edit stays) sets the bit back only
    run("apply", "fx_exec", "fx_args_a")
    st = json.loads(run("status", "--json").stdout)
    assert st["drifted_files"] == [TOOL] and st["mode_drifted_files"] == [] and mode_of(tool) & 0o100
    assert {q["name"]: q for q in st["patches"]}["fx_exec"]["detail"] == f"edited by hand: {TOOL}"
    tool.write_bytes(written)
    # only the bit: apply sets it back, says so, and status is clean again
    tool.chmod(mode_of(tool) & ~0o111)
    res = run("apply", "fx_exec", "fx_args_a")
    assert f"{TOOL}: made executable, as its patch's diff says" in res.stderr
    st = json.loads(run("status", "--json").stdout)
    assert st["drifted_files"] == [] and {q["name"]: q["state"] for q in st["patches"]}["fx_exec"] == "applied"
    # and the other way: chmod +x of a file its diff creates 100644
    p = proj / "patches/fx_exec.patch"
    p.write_text(p.read_text().replace("new file mode 100755", "new file mode 100644"))
    run("apply", "fx_exec", "fx_args_a")
    tool.chmod(mode_of(tool) | 0o100)
    row = {q["name"]: q for q in json.loads(run("status", "--json").stdout)["patches"]}["fx_exec"]
    assert row["state"] == "drifted" and row["mode_drifted_files"] == [TOOL]
    run("revert", "--all")
    assert git_status(sglang_tree) == ""


def test_revert_of_a_deletion_brings_an_executable_file_back_executable(sglang_tree, tmp_path):
    # the state keeps a base's bytes, not its mode: the diff's `deleted file mode 100755` says it was executable
    f = sglang_tree / SMALL
    lines = f.read_text().splitlines()
    diff = (
        f"diff --git a/{SMALL} b/{SMALL}\ndeleted file mode 100755\n--- a/{SMALL}\n+++ /dev/null\n"
        f"@@ -1,{len(lines)} +0,0 @@\n" + "".join(f"-{line}\n" for line in lines)
    )
    proj = mode_project(tmp_path, diff)
    f.chmod(0o755)
    subprocess.run(["git", "commit", "-qam", "executable", "--no-verify"], cwd=sglang_tree, check=True)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_exec")
    assert not f.exists()
    run("revert", "fx_exec")
    assert mode_of(f) == 0o777 & ~umask_of_this_process()
    assert git_status(sglang_tree) == ""


def test_refresh_and_diff_keep_a_new_files_executable_mode(sglang_tree, tmp_path):
    # both regenerate the diff from bytes: the mode line came back as `new file mode 100644`
    proj = mode_project(tmp_path, NEW_TOOL)

    def run(*a, rc=0):
        return run_cli("--manifest", str(proj / "manifest.yaml"), "--tree", str(sglang_tree), *a, check_rc=rc)

    run("apply", "fx_exec")
    assert "new file mode 100755" in run("diff", "fx_exec").stdout
    tool = sglang_tree / TOOL
    tool.write_text(tool.read_text() + "echo edited\n")
    run("refresh", "fx_exec")
    text = (proj / "patches/fx_exec.patch").read_text()
    assert "new file mode 100755" in text and "+echo edited" in text
    run("revert", "--all")
    run("apply", "fx_exec")
    assert mode_of(tool) == 0o777 & ~umask_of_this_process() and tool.read_text().endswith("echo edited\n")
    run("revert", "--all")
    assert git_status(sglang_tree) == ""


def test_a_hand_edit_of_the_identity_module_is_shown_with_the_way_out_that_works(sglang_tree):
    """A formatter run over the tree edits the identity module too: status showed nothing wrong, while revert
    refused with a hint to refresh, which answered "no hand edits to capture"."""
    cli(sglang_tree, "apply", "fx_topk")
    f = sglang_tree / "python/sglang/_overlay_build.py"
    f.write_text(f.read_text() + "# reformatted\n")
    out = cli(sglang_tree, "status").stdout
    assert "[!] python/sglang/_overlay_build.py: changed by hand" in out and "revert --all --force" in out
    res = cli(sglang_tree, "revert", "--all", rc=1)
    assert "the one sglang-overlay writes for every set" in res.stderr and "refresh" not in res.stderr
    res = cli(sglang_tree, "launch", "--dry-run", "--", "--port", "30999", rc=1)
    assert "the one sglang-overlay writes for every set" in res.stderr and "refresh" not in res.stderr
    cli(sglang_tree, "revert", "--all", "--force")
    assert git_status(sglang_tree) == ""
