"""Hostile or malformed input, one test per class: the exact exit code, a message naming the file (and key or
line) and the fix, no traceback, and the tree, the files outside it and the state untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, each, reset_tree, run_cli

FIX = ROOT / "tests" / "fixtures" / "engine"
TOPK = "python/sglang/srt/layers/moe/topk.py"
STATE = ".sglang-overlay/state.json"


@pytest.fixture
def project(tmp_path) -> Path:
    dst = tmp_path / "proj"
    shutil.copytree(FIX, dst)
    return dst


def ov(project: Path, tree: Path | None, *args: str, manifest: Path | None = None):
    glob = ["--manifest", str(manifest or project / "manifest.yaml")] + (["--tree", str(tree)] if tree else [])
    return run_cli(*glob, *args, env={"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0"})


def fails(res, rc: int, *texts: str) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == rc, f"rc {res.returncode}, expected {rc}:\n{out}"
    assert "Traceback" not in out, out
    for t in texts:
        assert t in out, f"{t!r} not in:\n{out}"
    return out


def git_clean(tree: Path) -> bool:
    out = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout
    return out == ""


def replace_in_manifest(project: Path, old: str, new: str) -> Path:
    m = project / "manifest.yaml"
    text = m.read_text()
    assert old in text
    m.write_text(text.replace(old, new, 1))
    return m


# -- the manifest ------------------------------------------------------------------------------------------------
def test_alias_bomb_is_refused_quickly(project):
    lines = ["schema: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (project / "manifest.yaml").write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    fails(ov(project, None, "status"), 2, "manifest.yaml: line", "more than 100 alias uses", "hint:")
    # the message says it stopped counting at 100; expanding 9**10 nodes would take hours (a fail-safe bound)
    assert time.monotonic() - t0 < 300


def test_recursive_alias_is_refused(project):
    (project / "manifest.yaml").write_text("schema: 1\nloop: &a [*a]\n")
    fails(ov(project, None, "status"), 2, "manifest.yaml: line")


def test_deep_nesting_is_refused(project):
    (project / "manifest.yaml").write_text("schema: 1\nx: " + "[" * 200 + "]" * 200 + "\n")
    fails(ov(project, None, "status"), 2, "nesting deeper than 64 levels")


def test_duplicate_top_level_key(project):
    m = project / "manifest.yaml"
    m.write_text(m.read_text() + "patches: []\n")
    fails(ov(project, None, "status"), 2, f"{m}: line", "duplicate key 'patches' (first at line 9)", "keep one of them")


def test_duplicate_key_in_an_entry(project):
    replace_in_manifest(project, "  - name: fx_topk\n", "  - name: fx_topk\n    kind: upstreamed\n")
    fails(ov(project, None, "status"), 2, "duplicate key 'kind'")


def test_name_with_a_trailing_newline(project):
    replace_in_manifest(project, "  - name: fx_topk\n", '  - name: "fx_topk\\n"\n')
    fails(ov(project, None, "status"), 2, "patches[0].name", "'fx_topk\\n' is not a valid name")


def test_manifest_that_is_a_directory(project):
    fails(ov(project, None, "status", manifest=project), 2, f"{project}: is a directory", "hint:")


def test_manifest_that_is_not_utf8(project):
    m = project / "manifest.yaml"
    m.write_bytes(m.read_bytes().replace(b"comment above", b"comment \xff above"))
    fails(ov(project, None, "status"), 2, f"{m}: not UTF-8 text", "save the manifest as UTF-8")


def test_cuda_capability_as_a_scalar(project):
    replace_in_manifest(project, 'hardware: {cuda_capability: ["9.0"]}', "hardware: {cuda_capability: 9.0}")
    fails(ov(project, None, "status"), 2, "fx_topk_gated).hardware.cuda_capability", "expected a list, got 9.0")


def test_extends_a_directory(project, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(f"schema: 1\nextends: {project}\n")
    fails(ov(project, None, "status", manifest=site), 2, f"{project}: is a directory")


def test_schema_true_is_not_schema_1(project):
    replace_in_manifest(project, "schema: 1", "schema: true")
    fails(ov(project, None, "status"), 2, "schema True is not supported")


def test_empty_manifest_option(project):
    fails(run_cli("--manifest", "", "status"), 2, "--manifest is empty")


# -- patch files -------------------------------------------------------------------------------------------------
def test_crlf_patch(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    fails(ov(project, None, "status"), 2, f"{p}: the diff has Windows (CRLF) line endings", "dos2unix")


def test_diff_without_prefixes_creating_a_file(project, sglang_tree):
    p = project / "patches" / "fx_new.patch"
    p.write_text(
        "Description: creates a file\n---\ndiff --git python/sglang/srt/fx_x.py python/sglang/srt/fx_x.py\n"
        "new file mode 100644\n--- /dev/null\n+++ python/sglang/srt/fx_x.py\n@@ -0,0 +1 @@\n+X = 1\n"
    )
    m = project / "manifest.yaml"
    m.write_text(
        m.read_text().replace(
            "presets:", "  - name: fx_new\n    description: d\n    kind: diff\n    category: experimental\npresets:", 1
        )
    )
    fails(
        ov(project, sglang_tree, "apply", "fx_new"),
        2,
        f"{p}: the diff names 'python/sglang/srt/fx_x.py' without git's 'b/' prefix",
        "not --no-prefix",
    )
    assert git_clean(sglang_tree)


def test_patch_creating_the_identity_module(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_text(
        p.read_text() + "diff --git a/python/sglang/_overlay_build.py b/python/sglang/_overlay_build.py\n"
        "new file mode 100644\n--- /dev/null\n+++ b/python/sglang/_overlay_build.py\n"
        "@@ -0,0 +1 @@\n+PIN = 'mine'\n"
    )
    fails(ov(project, None, "status"), 2, f"{p}: python/sglang/_overlay_build.py is reserved", "name the file")


def test_overlay_in_the_state_directory(project):
    replace_in_manifest(
        project,
        "overlay: [python/sglang/srt/fx_overlay_module.py]",
        "overlay: [python/sglang/.sglang-overlay/state.json]",
    )
    fails(ov(project, None, "status"), 2, "python/sglang/.sglang-overlay/state.json is reserved")


def test_binary_diff(project):
    p = project / "patches" / "fx_topk.patch"
    p.write_text(
        "Description: bin\n---\ndiff --git a/python/sglang/x.bin b/python/sglang/x.bin\n"
        "new file mode 100644\nindex 0000000..1111111\nBinary files /dev/null and b/python/sglang/x.bin differ\n"
    )
    fails(ov(project, None, "status"), 2, "a binary diff", "overlay file")


# -- the tree and the command line ------------------------------------------------------------------------------
def test_empty_tree_option(project):
    fails(ov(project, None, "--tree", "", "status"), 2, "--tree is empty (an unset shell variable?)")


@pytest.mark.parametrize("names", ["", "fx_topk,,fx_args_a", ","])
def test_empty_patch_name(project, sglang_tree, names):
    fails(ov(project, sglang_tree, "apply", names), 2, "holds an empty patch name")
    assert git_clean(sglang_tree)


def test_symlinked_managed_file(project, sglang_tree):
    f = sglang_tree / TOPK
    real = f.with_name("topk_real.py")
    f.rename(real)
    f.symlink_to(real.name)
    fails(ov(project, sglang_tree, "apply", "fx_topk"), 2, f"{f} is a symbolic link", "replace the link with a copy")
    assert f.is_symlink() and "fixture" not in real.read_text()


def test_managed_path_is_a_directory(project, sglang_tree):
    d = sglang_tree / "python/sglang/srt/fx_overlay_module.py"
    d.mkdir()
    fails(ov(project, sglang_tree, "apply", "fx_overlay"), 2, f"{d} is not a regular file")
    assert d.is_dir()


def test_version_file_that_is_not_utf8(project, sglang_tree, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(sglang_tree / "python" / "sglang", site / "sglang")
    (site / "sglang" / "_version.py").write_bytes(b"__version__ = '\xff'\n")
    fails(ov(project, site, "apply", "fx_topk"), 2, f"{site}: this tree is SGLang", "the manifest pins 0.5.17")


# -- the tool's own files in the tree ---------------------------------------------------------------------------
def _applied(project, tree) -> Path:
    ov(project, tree, "apply", "fx_topk")
    return tree / STATE


def test_truncated_state_file(project, sglang_tree):
    st = _applied(project, sglang_tree)
    st.write_text(st.read_text()[:40])
    for args in (["status"], ["apply", "fx_args_a"], ["recover"]):
        fails(ov(project, sglang_tree, *args), 2, f"{st}: state file is not valid JSON", "truncated?", "move it aside")


WRONG_SHAPES = [
    (lambda d: d.update(files=[]), "key 'files': expected dict"),
    (lambda d: d.update(version=2), "state version 2, this tool reads 1"),
    (lambda d: d.update(applied="fx_topk"), "key 'applied': expected list"),
    (lambda d: d.update(extra=1), "unknown key(s) 'extra'"),
    (lambda d: d["files"][TOPK].update(base="zz"), "expected a sha256 hex digest or null, got 'zz'"),
    (lambda d: d["files"].update({"python/sglang/../../../../tmp/x.py": d["files"][TOPK]}), "escapes the tree"),
    (lambda d: d["files"].update({"/tmp/evil.py": d["files"][TOPK]}), "'/tmp/evil.py' is absolute"),
]
WRONG_SHAPES_IDS = ["files-list", "version", "applied-str", "unknown-key", "bad-digest", "dotdot", "absolute"]


def test_state_file_of_the_wrong_shape(project, sglang_tree):
    def check(change, message) -> None:
        reset_tree(sglang_tree)
        st = _applied(project, sglang_tree)
        data = json.loads(st.read_text())
        change(data)
        st.write_text(json.dumps(data))
        for args in (["status"], ["revert", "--all"]):
            fails(ov(project, sglang_tree, *args), 2, f"{st}: ", message)
        assert "fixture" in (sglang_tree / TOPK).read_text()  # nothing reverted on a state it does not trust

    each(zip(WRONG_SHAPES_IDS, WRONG_SHAPES), check)


def test_state_file_that_is_a_directory(project, sglang_tree):
    st = _applied(project, sglang_tree)
    st.unlink()
    st.mkdir()
    fails(ov(project, sglang_tree, "status"), 2, f"{st}: the state file cannot be read")


def _journal(project, tree, mutate) -> Path:
    st = _applied(project, tree)
    j = st.with_name("journal.json")
    entry = {"path": TOPK, "before": json.loads(st.read_text())["files"][TOPK]["base"], "mode": 0o644}
    doc = {
        "version": 1,
        "op": "apply",
        "pid": 1,
        "files": [entry],
        "new_dirs": [],
        "state_before": None,
        "backup": None,
    }
    mutate(doc)
    j.write_text(json.dumps(doc) if isinstance(doc, dict) else doc)
    return j


UNTRUSTED_JOURNALS = [
    (lambda d: d["files"][0].update(path="python/sglang/../../../outside.py"), "escapes the tree"),
    (lambda d: d["files"][0].update(path=str(Path("/tmp") / "evil.py")), "is absolute"),
    (lambda d: d.update(new_dirs=["/etc"]), "is absolute"),
    (lambda d: d.update(backup="../../x"), "is not a backup directory name"),
    (lambda d: d["files"][0].update(before="0" * 64), "a saved copy the state needs is missing"),
    (lambda d: d["files"][0].update(mode=0o777777), "is not a permission mode"),
    (lambda d: d.update(state_before="{}"), "state version None"),
    (lambda d: d.pop("files"), "key 'files': missing"),
]
UNTRUSTED_JOURNALS_IDS = ["dotdot", "absolute", "new-dir", "backup", "missing-copy", "mode", "old-state", "no-files"]


def test_journal_that_cannot_be_trusted(project, sglang_tree, tmp_path):
    def check(mutate, message) -> None:
        reset_tree(sglang_tree)
        j = _journal(project, sglang_tree, mutate)
        before = (sglang_tree / TOPK).read_bytes()
        for args in (["recover"], ["apply", "fx_args_a"], ["status"]):
            fails(ov(project, sglang_tree, *args), 2, str(j), message)
        assert (sglang_tree / TOPK).read_bytes() == before and j.exists()
        assert not (tmp_path / "evil.py").exists() and not (sglang_tree.parent / "outside.py").exists()

    each(zip(UNTRUSTED_JOURNALS_IDS, UNTRUSTED_JOURNALS), check)


def test_journal_that_is_garbage(project, sglang_tree):
    st = _applied(project, sglang_tree)
    j = st.with_name("journal.json")
    j.write_bytes(b"\x00\x01garbage")
    fails(ov(project, sglang_tree, "recover"), 2, f"{j}: journal is not valid JSON", "move it aside")


def test_symlinked_state_directory(project, sglang_tree, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (sglang_tree / ".sglang-overlay").symlink_to(elsewhere)
    for args in (["status"], ["apply", "fx_topk"], ["recover"]):
        fails(ov(project, sglang_tree, *args), 2, ".sglang-overlay is a symbolic link", "keeps a tree's state")
    assert list(elsewhere.iterdir()) == [] and "fixture" not in (sglang_tree / TOPK).read_text()


@pytest.mark.parametrize("name", ["objects", "lock", "backups"])
def test_symlink_inside_the_state_directory(project, sglang_tree, tmp_path, name):
    _applied(project, sglang_tree)
    target = tmp_path / "target"
    target.mkdir()
    p = sglang_tree / ".sglang-overlay" / name
    shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    p.symlink_to(target)
    (sglang_tree / TOPK).write_text((sglang_tree / TOPK).read_text() + "# edited\n")  # --force makes a backup
    fails(ov(project, sglang_tree, "revert", "--all", "--force"), 2, f"{p} is a symbolic link")
    assert list(target.iterdir()) == []


def test_corrupt_saved_copy(project, sglang_tree):
    st = _applied(project, sglang_tree)
    base = json.loads(st.read_text())["files"][TOPK]["base"]
    (st.parent / "objects" / base).write_bytes(b"not the base")
    fails(ov(project, sglang_tree, "revert", "--all"), 2, f"objects/{base}: a saved copy is corrupt")
    assert "fixture" in (sglang_tree / TOPK).read_text()


def test_stale_lock_file_of_a_dead_process(project, sglang_tree):
    """A lock file is only a name for flock: a process that died holding it holds nothing."""
    sd = sglang_tree / ".sglang-overlay"
    sd.mkdir()
    holder = subprocess.Popen(
        [
            "python3",
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(sd / "lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    res = ov(project, sglang_tree, "apply", "fx_topk")
    assert res.returncode == 0 and "waiting" not in res.stderr, res.stderr


# -- more hostile input: links, pipes, encodings, names the set grammar cannot name ------------------------------
@pytest.mark.parametrize("mode,kind", [("120000", "symbolic link"), ("160000", "submodule")])
def test_patch_that_makes_a_link_is_refused(project, sglang_tree, mode, kind):
    # git apply made python/sglang/evil a link to /etc/passwd, and the tool then stored what it read through it
    p = project / "patches" / "fx_topk.patch"
    p.write_text(
        "Description: a link\n---\ndiff --git a/python/sglang/evil b/python/sglang/evil\n"
        f"new file mode {mode}\nindex 0000000..1111111\n--- /dev/null\n+++ b/python/sglang/evil\n"
        "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    fails(ov(project, sglang_tree, "apply", "fx_topk"), 2, f"{p}: line 4: the diff makes a {kind} (mode {mode})")
    assert git_clean(sglang_tree) and not (sglang_tree / "python/sglang/evil").exists()


def test_patch_with_a_byte_order_mark_applies(project, sglang_tree):
    p = project / "patches" / "fx_topk.patch"
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())  # was "the DEP-3 header has no Description"
    ov(project, sglang_tree, "apply", "fx_topk").check_returncode()
    assert "fixture" in (sglang_tree / TOPK).read_text()


def test_refresh_of_a_file_that_is_not_utf8(project, sglang_tree):
    ov(project, sglang_tree, "apply", "fx_topk").check_returncode()
    f, p = sglang_tree / TOPK, project / "patches" / "fx_topk.patch"
    edited, patch = f.read_bytes() + b"# caf\xe9\n", p.read_bytes()
    f.write_bytes(edited)
    fails(ov(project, sglang_tree, "refresh", "fx_topk"), 2, f"{TOPK}: not UTF-8 text (byte ", "save the file as UTF-8")
    assert f.read_bytes() == edited and p.read_bytes() == patch


def test_manifest_that_is_a_symlink_loop(project):
    m = project / "manifest.yaml"
    m.unlink()
    m.symlink_to("manifest.yaml")
    fails(ov(project, None, "status"), 2, f"{m}: the manifest is a symbolic link that loops")


def test_manifest_that_is_a_pipe(project):
    m = project / "manifest.yaml"
    m.unlink()
    os.mkfifo(m)
    res = subprocess.run(  # reading it waited for a writer forever
        [sys.executable, str(ROOT / "apply.py"), "--manifest", str(m), "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    fails(res, 2, f"{m}: not a regular file")


def test_removed_current_directory(project, sglang_tree, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    cmd = [sys.executable, str(ROOT / "apply.py"), "--manifest", str(project / "manifest.yaml"), "--tree"]
    res = subprocess.run(  # was "cannot access ?: ... (ENOENT)", exit 1
        ["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), *cmd, str(sglang_tree), "status"],
        capture_output=True,
        text=True,
    )
    fails(res, 2, "the current directory no longer exists", "cd to an existing directory")


@pytest.mark.parametrize("command", [["launch", "--dry-run"], ["fingerprint"]])
def test_empty_env_profile_option(project, sglang_tree, command):
    # `--env-profile "$P"` with P unset had quietly meant no profile
    fails(ov(project, sglang_tree, *command, "--env-profile", ""), 2, "--env-profile is empty", "fx_profile")


def test_build_wheel_out_that_is_a_file(project, pinned_tree, tmp_path):
    out = tmp_path / "dist"
    out.write_text("not a directory")  # was exit 1, "cannot access ...: File exists (EEXIST)"
    fails(ov(project, None, "build-wheel", "--out", str(out)), 2, f"--out {out}: is a file, not a directory")
    assert out.read_text() == "not a directory"


@pytest.mark.parametrize("make,said", [(os.mkdir, "is a directory, not a file"), (os.mkfifo, "is not a regular file")])
def test_patch_file_that_is_not_a_file(project, make, said):
    p = project / "patches" / "fx_topk.patch"
    p.unlink()
    make(p)  # both had been "does not exist"
    fails(ov(project, None, "status"), 2, "patches[0] (fx_topk).file", f"patch file {p} {said}")


# -- files of the project outside it, names too long for the OS, a chmod-only diff --------------------------------
@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_patch_file_outside_the_project(project, sglang_tree, tmp_path, how):
    # a valid patch outside the project: it had been read and applied (with /etc/passwd, its text was shown)
    outside = tmp_path / "elsewhere" / "fx_args_b.patch"
    outside.parent.mkdir()
    outside.write_bytes((project / "patches" / "fx_args_b.patch").read_bytes())
    if how == "link":
        (project / "patches" / "fx_args_b.patch").unlink()
        (project / "patches" / "fx_args_b.patch").symlink_to(outside)
    else:
        rel = str(outside) if how == "absolute" else "../elsewhere/fx_args_b.patch"
        replace_in_manifest(project, "  - name: fx_args_b\n", f"  - name: fx_args_b\n    file: {rel}\n")
    res = ov(project, sglang_tree, "apply", "fx_args_b")
    fails(res, 2, "manifest.yaml: patches[2] (fx_args_b).file: ", "must be a path inside the project")
    assert git_clean(sglang_tree)


def test_overlay_directory_outside_the_project(project, sglang_tree, tmp_path):
    (project / "overlay").rename(tmp_path / "overlay")
    (project / "overlay").symlink_to(tmp_path / "overlay")  # each file below was checked, overlay/ itself not
    res = ov(project, sglang_tree, "apply", "fx_overlay")
    fails(res, 2, "patches[4] (fx_overlay).overlay: ", "must be a path inside the project")
    assert git_clean(sglang_tree)


LONG = "x" * 300  # NAME_MAX is 255: open() fails with ENAMETOOLONG (had been exit 1, naming no option)


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--tree", f"/tmp/{LONG}", "status"], "--tree"),
        (["--manifest", f"/tmp/{LONG}/manifest.yaml", "status"], "--manifest"),
        (["--project", f"/tmp/{LONG}", "status"], "--project"),
        (["build-wheel", "--out", f"/tmp/{LONG}"], "--out"),
        (["build-wheel", "--wheel", f"/tmp/{LONG}.whl"], "--wheel"),
        (["fetch", "--wheel", f"/tmp/{LONG}.whl"], "--wheel"),
        (["launch", "--dry-run", "--log", f"/tmp/{LONG}.log"], "--log"),
    ],
)
def test_path_option_with_a_name_too_long(project, args, flag):
    manifest = [] if flag in ("--manifest", "--project") else ["--manifest", str(project / "manifest.yaml")]
    res = run_cli(*manifest, *args)
    fails(res, 2, f"argument {flag}: the name xxxx", "bytes long; a file name may have at most 255")


@pytest.mark.parametrize("env", ["SGLANG_OVERLAY_TREE", "SGLANG_OVERLAY_MANIFEST", "SGLANG_OVERLAY_CACHE"])
def test_path_variable_with_a_name_too_long(project, env):
    manifest = [] if env == "SGLANG_OVERLAY_MANIFEST" else ["--manifest", str(project / "manifest.yaml")]
    command = "fetch" if env == "SGLANG_OVERLAY_CACHE" else "status"
    res = run_cli(*manifest, command, cwd=Path("/"), env={env: f"/tmp/{LONG}"})
    fails(res, 2, f"{env}: the name xxxx", "bytes long")


@pytest.mark.parametrize(
    "old,new,key",
    [
        (
            "  - name: fx_args_b\n",
            f"  - name: fx_args_b\n    file: patches/{LONG}.patch\n",
            "patches[2] (fx_args_b).file",
        ),
        ("python/sglang/srt/fx_overlay_module.py]", f"python/sglang/srt/{LONG}.py]", "patches[4] (fx_overlay).overlay"),
    ],
)
def test_manifest_path_with_a_name_too_long(project, old, new, key):
    replace_in_manifest(project, old, new)
    fails(ov(project, None, "status"), 2, f"manifest.yaml: {key}: ", "bytes long; a file name may have at most 255")


def test_patch_that_changes_only_a_file_mode(project, sglang_tree):
    p = project / "patches" / "fx_topk.patch"
    args = "python/sglang/srt/server_args.py"
    p.write_text(p.read_text() + f"diff --git a/{args} b/{args}\nold mode 100644\nnew mode 100755\n")
    res = ov(project, sglang_tree, "apply", "fx_topk")  # was "has no valid hunk (a damaged '@@' line?)"
    fails(res, 2, f"{p}: the diff of {args} changes only its file mode (100644 -> 100755)", "does not carry")
    fails(res, 2, f"drop that file's section (from 'diff --git a/{args}'")
    assert git_clean(sglang_tree)


def test_patch_that_changes_a_file_mode_besides_its_content(project, sglang_tree):
    p = project / "patches" / "fx_topk.patch"
    p.write_text(p.read_text().replace("index 02b4264..16eab1a 100644\n", "old mode 100644\nnew mode 100755\n"))
    res = ov(project, sglang_tree, "apply", "fx_topk")  # had applied, the tree's file left at 100644
    fails(res, 2, f"{p}: the diff of {TOPK} changes its file mode (100644 -> 100755, besides its content)")
    fails(res, 2, "delete the lines 'old mode 100644' and 'new mode 100755'")
    assert git_clean(sglang_tree)


def test_name_too_long_that_no_check_named(project):
    # a file system with a lower NAME_MAX than Linux's 255 (eCryptfs: 143) passes the checks above, then fails in
    # the OS: still bad input (exit 2, the path named), not "the OS refused a write" (exit 1)
    probe = (
        "import errno, sys\nfrom sglang_overlay import commands\nfrom sglang_overlay.cli import main\n"
        "def run(ctx, args):\n    raise OSError(errno.ENAMETOOLONG, 'File name too long', '/fs/' + 'y' * 150)\n"
        "commands.load('status').run = run\nraise SystemExit(main(sys.argv[1:]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe, "--manifest", str(project / "manifest.yaml"), "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    fails(res, 2, f"/fs/{'y' * 150}: a name in this path is longer than the file system allows")


@pytest.mark.parametrize("command", [["--pin", "0.5.23", "status"], ["check", "--all-pins"]])
def test_pin_directory_outside_the_project(project, tmp_path, command):
    outside = tmp_path / "elsewhere-0.5.23"
    shutil.copytree(FIX, outside)
    m = outside / "manifest.yaml"
    m.write_text(m.read_text().replace("0.5.17", "0.5.23"))
    (project / "pins").mkdir()
    (project / "pins" / "0.5.23").symlink_to(outside)  # had been loaded (and its files read) as a pin of the project
    res = run_cli("--manifest", str(project / "manifest.yaml"), *command)
    fails(res, 2, f"{project / 'pins' / '0.5.23'} must be a path inside the project", f"it leads to {outside}")


def test_tree_carrying_an_entry_the_manifest_lost(project, sglang_tree):
    ov(project, sglang_tree, "apply", "fx_topk", "fx_args_a").check_returncode()
    m = project / "manifest.yaml"
    m.write_text(m.read_text().replace("fx_topk", "fx_topq"))  # renamed after it was applied
    (project / "patches" / "fx_topk.patch").rename(project / "patches" / "fx_topq.patch")
    said = "the tree carries fx_topk, which " + str(project / "manifest.yaml") + " does not name"
    for command in (["apply", "fx_overlay"], ["revert", "fx_args_a"], ["toggle", "fx_args_a"]):
        fails(ov(project, sglang_tree, *command), 2, said, "revert --all` takes the tree back")  # was "no patch named"
    for command in (["refresh", "fx_args_a"], ["diff", "fx_args_a"], ["launch", "--dry-run"]):
        fails(ov(project, sglang_tree, *command), 2, said)
    status = ov(project, sglang_tree, "status")  # had counted it in "applied 2" and listed it nowhere
    assert status.returncode == 0 and "note: the tree carries fx_topk" in status.stdout, status.stdout
    revert = ov(project, sglang_tree, "revert", "--all")  # had been "no patch named 'fx_topk'" too
    assert revert.returncode == 0, revert.stderr
    assert git_clean(sglang_tree)


def test_file_mode_refused_with_an_old_parse_cached(project, sglang_tree, tmp_path):
    # a cache written by the tool before the refusal (parse format 1) holds this diff's structure as accepted
    import hashlib

    from sglang_overlay.patchfile import _structure, split_header

    p = project / "patches" / "fx_topk.patch"
    structure = _structure(p, split_header(p.read_text())[1])  # what format 1 kept: mode lines were ignored
    p.write_text(p.read_text().replace("index 02b4264..16eab1a 100644\n", "old mode 100644\nnew mode 100755\n"))
    key = hashlib.sha256(split_header(p.read_text())[1].encode()).hexdigest()
    entry = tmp_path / "cache" / "parsed" / "patch" / f"{key}.json"
    entry.parent.mkdir(parents=True)
    entry.write_text(json.dumps({"format": 1, "sha256": key, "data": structure}))
    glob = ["--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree)]
    res = run_cli(*glob, "apply", "fx_topk", env={"SGLANG_OVERLAY_CACHE": str(tmp_path / "cache")})
    fails(res, 2, "changes its file mode (100644 -> 100755, besides its content)")  # had applied (rc 0)
    assert git_clean(sglang_tree)


@pytest.mark.parametrize("inner", ["python", "python/sglang"])
def test_tree_option_inside_a_checkout(project, sglang_tree, inner):
    # read as an installed package, it kept its own state: apply through the root then failed to apply (exit 1)
    ov(project, sglang_tree, "apply", "fx_topk").check_returncode()
    fails(
        ov(project, sglang_tree / inner, "status"),
        2,
        "is the python/ directory of the checkout",
        f"--tree {sglang_tree}",
    )
    assert not (sglang_tree / "python" / "sglang" / ".sglang-overlay").exists()


@pytest.mark.parametrize("leftover", ["empty", "lock", "nothing-applied"])
def test_tree_option_inside_a_checkout_with_a_leftover_state_dir(project, sglang_tree, leftover):
    # a state directory under python/sglang/ let the address through: read as a package, with a state of its own
    inner = sglang_tree / "python" / "sglang" / ".sglang-overlay"
    inner.mkdir()
    if leftover == "lock":
        (inner / "lock").write_bytes(b"")
    if leftover == "nothing-applied":
        (inner / "state.json").write_text(json.dumps({"version": 1, "applied": [], "digests": {}, "files": {}}))
    for address in ("python", "python/sglang"):
        fails(
            ov(project, sglang_tree / address, "apply", "fx_topk"),
            2,
            "is the python/ directory of the checkout",
            f"pass --tree {sglang_tree};",
            f"{inner} carries no patch (a leftover): remove it (rm -r {inner})",
        )
    shutil.rmtree(inner)  # the hint's removal: nothing else had been written
    assert git_clean(sglang_tree)


def test_tree_option_inside_a_checkout_that_carries_patches_applied_there(project, sglang_tree):
    # what an earlier sglang-overlay left, which accepted the address: the checkout's files carry fx_topk, and
    # python/sglang/.sglang-overlay records it (the same repo paths and copies a state at the root would hold)
    ov(project, sglang_tree, "apply", "fx_topk").check_returncode()
    root, inner = sglang_tree / ".sglang-overlay", sglang_tree / "python" / "sglang" / ".sglang-overlay"
    root.rename(inner)
    out = fails(
        ov(project, sglang_tree / "python", "status"),
        2,
        "is the python/ directory of the checkout",
        f"{inner} holds what was applied through this address",
        ": fx_topk",
        f"`mv {inner} {root}`, then use --tree {sglang_tree}",
    )
    assert "revert --all` there takes them out" in out
    ov(project, sglang_tree, "apply", "fx_args_a").check_returncode()  # the root's own state carries one too
    fails(
        ov(project, sglang_tree / "python", "apply", "fx_args_b"),
        2,
        f"the checkout's own state {root} carries fx_args_a too: take those out first",
        f"--tree {sglang_tree} revert --all`), then",
        f"`rm -r {root} && mv {inner} {root}`",
    )
    ov(project, sglang_tree, "revert", "--all").check_returncode()
    shutil.rmtree(root)
    inner.rename(root)  # the hint's move
    st = json.loads(ov(project, sglang_tree, "status", "--json").stdout)
    assert st["applied"] == ["fx_topk"] and st["drifted_files"] == []
    ov(project, sglang_tree, "revert", "--all").check_returncode()
    assert git_clean(sglang_tree)


def test_patch_that_copies_a_file(project):
    p = project / "patches" / "fx_args_b.patch"
    a, b = "python/sglang/srt/server_args.py", "python/sglang/srt/server_args2.py"
    p.write_text(
        f"Description: a copy\n---\ndiff --git a/{a} b/{b}\nsimilarity index 100%\ncopy from {a}\ncopy to {b}\n"
    )
    fails(ov(project, None, "status"), 2, f"{p}: copies are not supported ({a} -> {b})", "as an overlay file")


@pytest.mark.parametrize("value", ["x", "9.0 10.0", "9.0,sm90"])
def test_capability_variable_that_is_not_one(project, sglang_tree, value):
    # had been taken as the machine's capability: "needs 9.0, this machine has x", as if the GPU were wrong
    glob = ["--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree)]
    res = run_cli(*glob, "apply", "fx_topk_gated", env={"SGLANG_OVERLAY_CUDA_CAPABILITY": value})
    fails(res, 2, f"SGLANG_OVERLAY_CUDA_CAPABILITY={value!r}: ", "is not a compute capability like 9.0")
    assert git_clean(sglang_tree)


@pytest.mark.parametrize("version", ["", "../x", "0.5.23 "])
def test_against_version_that_is_not_one(project, version):
    res = ov(project, None, "check", "--against", "0.5.17", version)  # had gone to pip ("downloading sglang==../x")
    out = fails(res, 2, f"check --against: {version!r} is not a release version")
    assert "downloading" not in out
