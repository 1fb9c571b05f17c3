"""Issue 40's failure classes of the engine (round 3), one test each (class 2 is the bench's, in its own tests):
damaged state that must not delete, output that fails after a change, hand edits during a command, `diff` after
a kill, a path listed twice, late signals, scratch of a killed check, and the messages of class 12. Last, what a
second adversarial round found around a rollback: links (to outside, to themselves, over the state's own
directories) and a directory where a journaled file was; each fix given is run as a user pastes it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

FIX = ROOT / "tests" / "fixtures" / "engine"
TOPK = "python/sglang/srt/layers/moe/topk.py"
ARGS = "python/sglang/srt/server_args.py"
STATE = ".sglang-overlay/state.json"
JOURNAL = ".sglang-overlay/journal.json"


@pytest.fixture
def project(tmp_path) -> Path:
    dst = tmp_path / "proj"
    shutil.copytree(FIX, dst)
    return dst


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The command's environment: its own cache (a shared parse cache would hide what this code parses) and
    scratch directory (what a killed check leaves is counted there)."""
    e = dict(os.environ)
    e.pop("SGLANG_OVERLAY_TREE", None)
    (tmp_path / "scratch").mkdir()
    e.update(
        SGLANG_OVERLAY_CACHE=str(tmp_path / "cache"),
        SGLANG_OVERLAY_CUDA_CAPABILITY="9.0",
        TMPDIR=str(tmp_path / "scratch"),
    )
    return e


def argv(project: Path, tree: Path | None, *args: str) -> list[str]:
    where = ["--manifest", str(project / "manifest.yaml")] + (["--tree", str(tree)] if tree else [])
    return [sys.executable, str(ROOT / "apply.py"), *where, *args]


def ov(env, project: Path, tree: Path | None, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv(project, tree, *args), env=env, capture_output=True, text=True, **kw)


def fails(res, rc: int, *texts: str) -> str:
    out = res.stdout + res.stderr
    assert res.returncode == rc, f"rc {res.returncode}, expected {rc}:\n{out}"
    assert "Traceback" not in out, out
    for t in texts:
        assert t in out, f"{t!r} not in:\n{out}"
    return out


def carries(env, project, tree) -> dict:
    st = ov(env, project, tree, "status", "--json")
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)


# -- 1: every key of every record is required ---------------------------------------------------------------------
def test_state_record_without_base_deletes_nothing(project, sglang_tree, env):
    ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    st = sglang_tree / STATE
    doc = json.loads(st.read_text())
    del doc["files"][TOPK]["base"]  # read as null it meant "the file did not exist": revert deleted topk.py
    st.write_text(json.dumps(doc))
    before = (sglang_tree / TOPK).read_bytes()
    for args in (["revert", "--all"], ["status"]):
        fails(ov(env, project, sglang_tree, *args), 2, str(st), f"'files' -> '{TOPK}' -> 'base'", "missing")
    assert (sglang_tree / TOPK).read_bytes() == before


def test_journal_entry_without_before_deletes_nothing(project, sglang_tree, env):
    ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    st = sglang_tree / STATE
    entry = {"path": TOPK, "mode": 0o644, "after": None}  # no 'before': read as null, recover deleted the file
    doc = {"version": 1, "op": "apply", "pid": 1, "files": [entry], "new_dirs": [], "state_before": st.read_text()}
    j = sglang_tree / JOURNAL
    j.write_text(json.dumps(doc))
    before = (sglang_tree / TOPK).read_bytes()
    fails(ov(env, project, sglang_tree, "recover"), 2, str(j), "'files'[0] -> 'before'", "missing")
    assert (sglang_tree / TOPK).read_bytes() == before and j.exists()


def test_journal_without_state_before_keeps_the_state(project, sglang_tree, env):
    ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    st = sglang_tree / STATE
    doc = {"version": 1, "op": "apply", "pid": 1, "files": [], "new_dirs": []}  # absent read as "none": unlinked
    (sglang_tree / JOURNAL).write_text(json.dumps(doc))
    fails(ov(env, project, sglang_tree, "recover"), 2, "'state_before'", "missing")
    assert st.exists()


# -- 3: output that fails after the change was made ----------------------------------------------------------------
def _shell(env, project, tree, args: str, redirect: str) -> subprocess.CompletedProcess[str]:
    cmd = " ".join(map(shlex_quote, argv(project, tree, *args.split()))) + " " + redirect
    return subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True)


def shlex_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


@pytest.mark.parametrize(
    "args, redirect",
    [("apply --set default", ">&-"), ("apply --set default", ">/dev/full"), ("revert fx_topk", ">/dev/full")],
    ids=["stdout-closed", "stdout-full", "revert-stdout-full"],
)
def test_output_lost_after_the_change_is_exit_4(project, sglang_tree, env, args, redirect):
    if args.startswith("revert"):
        ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    r = _shell(env, project, sglang_tree, args, redirect)
    out = fails(r, 4, "the change was made", "its output could not be written")
    assert "internal error" not in out and "no change" not in out and "nothing was changed" not in out
    applied = carries(env, project, sglang_tree)["applied"]
    assert applied == [] if args.startswith("revert") else "fx_topk" in applied


def test_stderr_closed_after_the_change_is_not_a_failure(project, sglang_tree, env):
    ov(env, project, sglang_tree, "apply", "--set", "default").check_returncode()
    r = _shell(env, project, sglang_tree, "revert --all", "2>&-")
    assert r.returncode in (0, 4), r.stdout  # 4 only where a note for stderr was lost
    assert "reverted" in r.stdout and "internal error" not in r.stdout
    assert carries(env, project, sglang_tree)["applied"] == []


# -- 9: an overlay path listed twice ------------------------------------------------------------------------------
def test_overlay_path_listed_twice_is_refused_at_validation(project, sglang_tree, env):
    m = project / "manifest.yaml"
    once = "overlay: [python/sglang/srt/fx_overlay_module.py]"
    m.write_text(m.read_text().replace(once, once[:-1] + ", python/sglang/srt/fx_overlay_module.py]"))
    for args in (["status"], ["apply", "fx_overlay"]):
        fails(ov(env, project, sglang_tree, *args), 2, str(m), "fx_overlay", "listed twice")
    assert not (sglang_tree / "python/sglang/srt/fx_overlay_module.py").exists()


# -- 10: a signal after the outcome is decided ---------------------------------------------------------------------
def test_signal_after_the_change_is_ignored(project, sglang_tree, env, tmp_path):
    """SIGINT as the command ends (sent by a hook that runs after its work: an exit handler), not 130."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import atexit, os, signal\natexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
    )
    e = dict(env, PYTHONPATH=str(hook))
    r = ov(e, project, sglang_tree, "apply", "fx_topk")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert "fixture" in (sglang_tree / TOPK).read_text()


def test_signal_in_mains_finally_is_ignored(project, sglang_tree, env, tmp_path):
    hook = tmp_path / "hook"
    hook.mkdir()
    # the Python API's hints are reset in main()'s finally: a signal there once gave a traceback
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sglang_overlay.progname as p\n"
        "real = p.set_where\n"
        "def hit(**kw):\n"
        "    if kw == {'project': None, 'manifest': None, 'pin': None}:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(**kw)\n"
        "p.set_where = hit\n"
    )
    e = dict(env, PYTHONPATH=f"{hook}:{ROOT}")
    r = ov(e, project, sglang_tree, "apply", "fx_topk")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr)


# -- 4: a hand edit made while a command runs ---------------------------------------------------------------------
def _hook(tmp_path: Path, code: str) -> str:
    """A sitecustomize that runs `code` in the command's process: a deterministic point inside it."""
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(code)
    return f"{hook}:{ROOT}"


def test_hand_edit_during_the_command_stays_in_the_file(project, sglang_tree, env, tmp_path):
    f = sglang_tree / TOPK
    hook = _hook(
        tmp_path,
        "from pathlib import Path\n"
        "import sglang_overlay.transaction as t\n"
        "real = t.Transaction._stage\n"
        "def stage(self, paths, *a):\n"
        "    real(self, paths, *a)\n"
        f"    f = Path({str(f)!r})\n"
        "    f.write_text(f.read_text() + '# my edit meanwhile\\n')\n"
        "t.Transaction._stage = stage\n",
    )
    r = ov(dict(env, PYTHONPATH=hook), project, sglang_tree, "apply", "fx_topk")
    out = fails(r, 1, str(f), "changed while this command ran", "left in place")
    assert "nothing was changed" not in out
    assert f.read_text().endswith("# my edit meanwhile\n")  # not moved to backups/, not overwritten
    assert not (sglang_tree / ".sglang-overlay/backups").exists()
    assert carries(env, project, sglang_tree)["applied"] == []


# -- 8: `diff` on a tree a kill left with a journal ---------------------------------------------------------------
KILL_AFTER_FIRST_FILE = (
    "import os, signal\n"
    "import sglang_overlay.transaction as t\n"
    "real = t.Transaction._replace\n"
    "def replace(self, f, *a):\n"
    "    real(self, f, *a)\n"
    f"    if f == {TOPK!r}:\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "t.Transaction._replace = replace\n"
)


def test_diff_reads_a_killed_tree_as_status_does(project, sglang_tree, env, tmp_path):
    killed = ov(dict(env, PYTHONPATH=_hook(tmp_path, KILL_AFTER_FIRST_FILE)), project, sglang_tree, "apply", "fx_topk")
    assert killed.returncode == -9 and (sglang_tree / JOURNAL).exists()
    assert "fixture" in (sglang_tree / TOPK).read_text()  # the kill left the patched file
    st = ov(env, project, sglang_tree, "status", "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["interrupted_transaction"], st.stderr
    d = ov(env, project, sglang_tree, "diff", "fx_topk")
    assert d.returncode == 0, d.stderr
    assert "+" in d.stdout and "fixture" in d.stdout and "not applied" in d.stderr
    assert (sglang_tree / JOURNAL).exists()  # a read-only command leaves the rollback to the next change


# -- 11: scratch of a killed check --------------------------------------------------------------------------------
KILL_AFTER_SCRATCH = (
    "import os, signal\n"
    "import sglang_overlay.scratch as s\n"
    "real = s.make\n"
    "def make(*a, **k):\n"
    "    d = real(*a, **k)\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "s.make = make\n"
)


@pytest.mark.parametrize("kind", ["compose", "compose-many"])
def test_scratch_of_a_killed_check_is_reaped_by_the_next_check(project, sglang_tree, env, tmp_path, kind):
    scratch = Path(env["TMPDIR"])
    killed = ov(dict(env, PYTHONPATH=_hook(tmp_path, KILL_AFTER_SCRATCH)), project, sglang_tree, "check")
    assert killed.returncode == -9 and list(scratch.iterdir()), killed.stderr
    # and one of each kind under a name a dead process of this namespace gave it (check --all-pins' compose-many)
    dead = _dead_pid()
    ns = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    (scratch / f"sglang-overlay-{kind}-{ns}.{dead}-abc123").mkdir()
    r = ov(env, project, sglang_tree, "check")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    assert list(scratch.iterdir()) == [], list(scratch.iterdir())


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# -- 12: messages ---------------------------------------------------------------------------------------------------
def test_inode_exhaustion_hints_df_i(monkeypatch, tmp_path):
    import errno

    from sglang_overlay import errors

    class NoInodes:
        f_files, f_favail, f_bavail, f_frsize, f_flag = 1000, 0, 10**6, 4096, 0

    monkeypatch.setattr(errors.os, "statvfs", lambda _p: NoInodes())
    err = errors.os_failure(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "f")), "cannot write", "x")
    assert f"df -i {tmp_path}" in (err.hint or "") and "df -h" not in err.render().replace("whatever `df -h`", "")


def test_empty_tree_env_is_refused_like_an_empty_tree_option(project, env):
    for e, said in ((dict(env, SGLANG_OVERLAY_TREE=""), "SGLANG_OVERLAY_TREE"), (env, "--tree")):
        args = ["--tree", ""] if said == "--tree" else []
        r = subprocess.run(
            [sys.executable, str(ROOT / "apply.py"), "--manifest", str(project / "manifest.yaml"), *args, "status"],
            env=e,
            capture_output=True,
            text=True,
        )
        fails(r, 2, said, "empty (an unset shell variable?)")


def test_status_of_a_tree_of_unknown_version(project, sglang_tree, env, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["git", "clone", "-q", "--no-tags", str(sglang_tree), str(copy)], check=True)
    (copy / "python/sglang/_version.py").unlink(missing_ok=True)
    r = ov(env, project, copy, "status")
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "sglang None" not in out and "Traceback" not in out, out
    assert "version unknown" in r.stdout, out


def test_a_long_manifest_without_aliases_is_no_alias_bomb(tmp_path):
    from sglang_overlay.yamlfile import parse

    entry = "  - {{name: p{0}, description: d, kind: diff, category: compat, default: false, requires: [], conflicts: []}}\n"
    text = "schema: 1\npatches:\n" + "".join(entry.format(i) for i in range(8000))
    data = parse(tmp_path / "manifest.yaml", text)
    assert len(data["patches"]) == 8000


# -- a sweep of kills and Ctrl-C around the new paths (output lost, late signals) ----------------------------------
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (installed by .ci/run)")
@pytest.mark.parametrize("action", ["signal=KILL", "signal=INT"])
def test_kill_or_ctrl_c_at_every_point_from_the_commit_on_of_a_change_whose_output_is_lost(
    project, sglang_tree, env, tmp_path, action
):
    from faultlib import inject, trace_points

    f = sglang_tree / TOPK
    pristine = f.read_bytes()
    cmd = ["sh", "-c", 'exec "$0" "$@" >/dev/full', *argv(project, sglang_tree, "apply", "fx_topk")]
    subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True)  # warm: the parse cache then stays as it is
    ov(env, project, sglang_tree, "revert", "--all").check_returncode()
    points, done = trace_points(cmd, env, tmp_path, tmp_path / "trace.log")
    assert done.returncode == 4, done.stderr
    # from just before the change becomes final (the journal's removal) to the end: where the output is lost
    # and the late signals come (the earlier points are the engine sweep's, test_engine_faults)
    final = next(i for i, p in enumerate(points) if p.syscall in ("unlink", "unlinkat") and "journal.json" in p.call)
    points = points[max(final - 3, 0) :]
    patched = f.read_bytes()
    ov(env, project, sglang_tree, "revert", "--all").check_returncode()
    problems, hits = [], 0
    for point in points:
        r = inject(cmd, env, tmp_path, tmp_path / "inject.log", point, action)
        if not r.hit:
            continue
        hits += 1
        rec = ov(env, project, sglang_tree, "recover")
        now = f.read_bytes()
        ok_rc = {-9} if action == "signal=KILL" else {130, 4}
        if r.rc not in ok_rc or "Traceback" in r.stderr or rec.returncode != 0 or now not in (pristine, patched):
            problems.append(f"{point}: rc {r.rc}, recover rc {rec.returncode}: {r.stderr[-300:]}{rec.stderr[-300:]}")
        if r.rc == 4 and now != patched:
            problems.append(f"{point}: exit 4 but the change is not in the tree")
        if (sglang_tree / JOURNAL).exists():
            problems.append(f"{point}: a journal is left after recover")
        ov(env, project, sglang_tree, "revert", "--all").check_returncode()
    assert hits >= 3 and not problems, f"{hits} point(s) hit\n" + "\n".join(problems[:10])


# -- links and odd files met by a rollback (an adversarial round on e3c3810) -------------------------------------
MOE = "python/sglang/srt/layers/moe"
_FIX = re.compile(r"rm (\S+) && (?:mv|cp -a) \S+ \S+")


def _killed(env, project, tree, tmp_path, *args: str) -> None:
    """`args` killed just after it replaced topk.py: the tree keeps a journal."""
    r = ov(dict(env, PYTHONPATH=_hook(tmp_path, KILL_AFTER_FIRST_FILE)), project, tree, *args)
    assert r.returncode == -9 and (tree / JOURNAL).exists(), r.stderr


def _follow_the_hint(out: str) -> None:
    """Run the fix the message gives, as a user pastes it."""
    fix = _FIX.search(out)
    assert fix, f"no `rm LINK && mv|cp -a ...` fix in:\n{out}"
    subprocess.run(fix.group(0), shell=True, check=True)


def _linked_away(path: Path, away: Path) -> None:
    os.rename(path, away)
    os.symlink(away, path)


def _recovers_to(env, project, tree, rel: str, data: bytes) -> None:
    r = ov(env, project, tree, "recover")
    assert r.returncode == 0 and "rolled back" in r.stderr, r.stdout + r.stderr
    assert (tree / rel).read_bytes() == data and not (tree / JOURNAL).exists()
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True).stdout


def test_a_linked_state_dir_with_a_journal_is_put_back_not_dropped(project, sglang_tree, env, tmp_path):
    """ "remove the link" left the journal outside: the tree stayed half-patched and the tool forgot it."""
    before = (sglang_tree / TOPK).read_bytes()
    _killed(env, project, sglang_tree, tmp_path, "apply", "fx_topk")
    sd = sglang_tree / ".sglang-overlay"
    _linked_away(sd, tmp_path / "away")
    _follow_the_hint(fails(ov(env, project, sglang_tree, "recover"), 2, str(sd)))
    _recovers_to(env, project, sglang_tree, TOPK, before)


def test_linked_saved_copies_are_put_back_not_dropped(project, sglang_tree, env, tmp_path):
    before = (sglang_tree / TOPK).read_bytes()
    ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    objects = sglang_tree / ".sglang-overlay/objects"
    _linked_away(objects, tmp_path / "away")
    _follow_the_hint(fails(ov(env, project, sglang_tree, "revert", "fx_topk"), 2, str(objects)))
    ov(env, project, sglang_tree, "revert", "fx_topk").check_returncode()
    assert (sglang_tree / TOPK).read_bytes() == before


def test_a_link_looping_on_itself_is_refused_naming_it(project, sglang_tree, env, tmp_path):
    """Path.resolve() raised RuntimeError on a loop: exit 3 "internal error", and `recover` crashed every time."""
    before, moe = (sglang_tree / TOPK).read_bytes(), sglang_tree / MOE

    def loop() -> None:
        os.rename(moe, tmp_path / "moe")
        os.symlink("moe", moe)

    def unloop() -> None:
        os.unlink(moe)
        os.rename(tmp_path / "moe", moe)

    loop()
    try:
        out = fails(ov(env, project, sglang_tree, "apply", "fx_topk"), 2, str(moe), "loops")
    finally:
        unloop()
    assert "internal error" not in out and not (sglang_tree / JOURNAL).exists()
    _killed(env, project, sglang_tree, tmp_path, "apply", "fx_topk")
    loop()
    try:
        fails(ov(env, project, sglang_tree, "recover"), 2, str(moe), "loops", "journal", "is kept")
    finally:
        unloop()
    _recovers_to(env, project, sglang_tree, TOPK, before)


def test_recover_meeting_a_link_out_of_the_tree_keeps_the_journal(project, sglang_tree, env, tmp_path):
    """It said neither that the journal is kept nor to run recover again; "replace the link with a real
    directory", done literally, made recover roll back into an empty directory: 55 files deleted."""
    before, moe = (sglang_tree / TOPK).read_bytes(), sglang_tree / MOE
    _killed(env, project, sglang_tree, tmp_path, "apply", "fx_topk")
    patched = (sglang_tree / TOPK).read_bytes()
    _linked_away(moe, tmp_path / "away")
    try:
        out = fails(ov(env, project, sglang_tree, "recover"), 2, str(moe), "outside the tree", "journal", "is kept")
        assert (tmp_path / "away/topk.py").read_bytes() == patched  # nothing written through the link
        _follow_the_hint(out)
    finally:
        if moe.is_symlink():
            os.unlink(moe)
            os.rename(tmp_path / "away", moe)
    _recovers_to(env, project, sglang_tree, TOPK, before)


def test_a_directory_where_a_journaled_file_was_is_named(project, sglang_tree, env, tmp_path):
    """read_bytes read through a descriptor, and the error named its number: "cannot write 4"."""
    before, f = (sglang_tree / TOPK).read_bytes(), sglang_tree / TOPK
    _killed(env, project, sglang_tree, tmp_path, "apply", "fx_topk")
    f.unlink()
    f.mkdir()
    fails(ov(env, project, sglang_tree, "recover"), 1, f"{f}: Is a directory", "is kept")
    f.rmdir()
    _recovers_to(env, project, sglang_tree, TOPK, before)


@pytest.mark.parametrize("level", ["backups", "backups/NAME"])
def test_a_linked_backup_is_refused_before_the_rollback_deletes_it(project, sglang_tree, env, tmp_path, level):
    """The rollback removes the backup it restored: through a link it deleted outside the tree (`backups`), or
    stopped with "cannot write ?" (`backups/NAME`)."""
    f = sglang_tree / TOPK
    ov(env, project, sglang_tree, "apply", "fx_topk").check_returncode()
    f.write_bytes(f.read_bytes() + b"# my edit\n")
    edited = f.read_bytes()
    _killed(env, project, sglang_tree, tmp_path, "revert", "fx_topk", "--force")
    backups = sglang_tree / ".sglang-overlay/backups"
    (name,) = os.listdir(backups)
    link = backups if level == "backups" else backups / name
    _linked_away(link, tmp_path / "away")
    out = fails(ov(env, project, sglang_tree, "recover"), 2, str(link))
    assert os.listdir(tmp_path / "away"), "the rollback deleted outside the tree"
    _follow_the_hint(out)
    r = ov(env, project, sglang_tree, "recover")
    assert r.returncode == 0 and "rolled back" in r.stderr, r.stderr
    assert f.read_bytes() == edited and not (backups / name).exists()
