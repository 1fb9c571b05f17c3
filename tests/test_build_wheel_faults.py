"""build-wheel's output directory and $TMPDIR under faults, injected with strace at the real calls (faultlib): a
full disk or a read-only file system is exit 1 naming the path being written (--out, or $TMPDIR) and a fix that
applies to it (--out DIR or TMPDIR, not --tree), and leaves no partial file; a killed build's partial file is
removed by a later build, whatever wheel that one writes, but never one a live build holds, another host's, or an
earlier version's; two builds at once into one --out both finish; a failed fsync of --out after the rename names
the wheel written; a kill or Ctrl-C during the cleanup leaves --out usable."""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from faultlib import ERRNO_TEXT, ERROR_SYSCALLS, STRACE, Point, hold, inject, python_argv, trace_points
from small_wheel import cache_with, make_small_wheel, pin_manifest
from test_engine_filesystems import mounted
from test_launch import make_project  # the small real project: the pin and overlay_identity

from sglang_overlay.fetch import pinned_wheel

PART = re.compile(r"^\..+\.whl\..*part$")  # build-wheel's own partial files, whatever their naming


@pytest.fixture(scope="module")
def rig(pinned_tree, project_manifest, tmp_path_factory):
    if STRACE is None:
        pytest.fail("strace is not installed: `apt-get install -y strace` (.ci/run does it)")
    base = tmp_path_factory.mktemp("wheelfaults")
    (base / "proj").mkdir()
    proj = make_project(base / "proj")
    (base / "tmp").mkdir()
    # The faults are in the steps around the archive, not in its size: a small copy of the pinned wheel (its real
    # entries for the patched file, the metadata, a library larger than a 1 MiB file system), pinned by sha256.
    wheel = make_small_wheel(pinned_wheel(project_manifest.pin), base / "wheel")
    pin_manifest(proj / "manifest.yaml", wheel)
    # A cache of its own, warmed below: a run that fills the parse and compile caches makes more mkdir and
    # openat calls than the next one, so a point traced cold was another call when injected warm.
    cache = cache_with(wheel, base / "cache")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLANG_OVERLAY", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"))
    }
    # no bytecode written by the runs, and a $TMPDIR of its own: every run makes the same calls
    env.update(
        TMPDIR=str(base / "tmp"),
        SGLANG_OVERLAY_CACHE=str(cache),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        LC_ALL="C",
    )
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "sglang_overlay")], check=True, capture_output=True
    )
    warm = subprocess.run(_argv(proj, base / "out-warm"), cwd=base, env=env, capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    shutil.rmtree(base / "out-warm")
    return base, proj, env


def _argv(proj: Path, out: Path, *chosen: str) -> list[str]:
    chosen = chosen or ("--patches", "overlay_identity")
    return python_argv("--manifest", str(proj / "manifest.yaml"), "build-wheel", *chosen, "--out", str(out))


def _parts(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if PART.match(n)) if d.is_dir() else []


def _points(rig, out: Path) -> list[Point]:
    base, proj, env = rig
    pts, proc = trace_points(_argv(proj, out), env, base, base / "trace.log")
    assert proc.returncode == 0, proc.stderr
    return pts


@pytest.fixture(scope="module")
def out_trace(rig) -> tuple[Path, list[Point]]:
    """One traced build into an --out not made yet: the cases that inject into its steps share its points (a run
    from the same start makes the same calls), each removing --out's parent before it runs."""
    base, _, _ = rig
    out = base / "out-traced" / "dist"
    pts = _points(rig, out)
    shutil.rmtree(out.parent)
    return out, pts


def _at(pts: list[Point], where: str, out: Path) -> Point:
    part = next(i for i, p in enumerate(pts) if p.syscall == "openat" and ".part" in p.call)
    if where == "mkdir --out":  # its last: the first is answered ENOENT (its parent is made first)
        return [p for p in pts if p.syscall == "mkdir" and f'"{out}"' in p.call][-1]
    if where == "open the partial file":
        return pts[part]
    if where == "write the partial file":
        return next(p for p in pts[part:] if p.syscall == "write" and not p.call.startswith(("write(1,", "write(2,")))
    return next(p for p in pts if p.syscall == "rename" and ".part" in p.call)  # "rename it into place"


@pytest.mark.parametrize(
    "where", ["mkdir --out", "open the partial file", "write the partial file", "rename it into place"]
)
@pytest.mark.parametrize("error", ["ENOSPC", "EROFS"])
def test_out_dir_os_error_names_the_path_and_a_fix_that_applies(rig, out_trace, where, error):
    base, proj, env = rig
    out, pts = out_trace
    point = _at(pts, where, out)
    shutil.rmtree(out.parent, ignore_errors=True)  # the same calls again: from no output directory
    res = inject(_argv(proj, out), env, base, base / "inject.log", point, f"error={error}")
    assert res.hit, f"{point}: not injected"
    err = res.stderr
    assert res.rc == 1 and "Traceback" not in err, err
    assert ERRNO_TEXT[error] in err and " ?:" not in err, err
    mkdir = where == "mkdir --out"
    wrote = f"cannot make the output directory {out}:" if mkdir else f"cannot write the wheel {out}/sglang-0.5.17+ovl."
    assert wrote in err and "no wheel was written" in err, err  # what the user named, not the partial file
    assert "--tree" not in err and "--out DIR" in err, err  # the tree is not what is read-only or full
    if error == "ENOSPC":
        assert f"df -h {out.parent if mkdir else out}`" in err, err  # an existing directory on that file system
    assert _parts(out) == [], _parts(out)


def test_a_full_disk_hint_names_a_directory_that_exists(rig):
    """`--out new/dist` (relative, neither there yet) full at `mkdir new`: `df -h new` only says new does not
    exist; the hint names the nearest directory that does (here the working directory)."""
    base, proj, env = rig
    cwd = base / "relative-out"
    cwd.mkdir()
    argv = python_argv("--manifest", str(proj / "manifest.yaml"), "build-wheel", "--out", "new/dist")
    pts, proc = trace_points(argv, env, cwd, base / "rel.log")
    assert proc.returncode == 0, proc.stderr
    point = next(p for p in pts if p.syscall == "mkdir" and p.call.startswith('mkdir("new",'))
    shutil.rmtree(cwd / "new")
    res = inject(argv, env, cwd, base / "rel-inject.log", point, "error=ENOSPC")
    assert res.hit and res.rc == 1, res.stderr
    assert "cannot make the output directory new:" in res.stderr, res.stderr
    assert "(`df -h .`)" in res.stderr and "df -h new" not in res.stderr, res.stderr


# how a partial file names its build: `<host>.<pid namespace>.<pid>.<build>`, the host being this boot's kernel, the
# build the process's count (the version before wrote no build: still this host's)
BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
NS = re.sub(r"\D", "", os.readlink("/proc/self/ns/pid"))
OTHER_HOST = "f" * 32
WHEEL = ".sglang-0.5.17+ovl.0123456789ab-cp312-cp312-manylinux_2_34_x86_64.whl"
AN_HOUR_AGO = 3600


def _write_parts(out: Path, names: list[str], age: float = AN_HOUR_AGO) -> None:
    then = time.time() - age
    for name in names:
        (out / name).write_text("a partial file")
        os.utime(out / name, (then, then))


def _notes(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if "note:" in line)


def test_a_later_build_removes_a_killed_builds_partial_file(rig, out_trace):
    """A kill while the archive is written leaves its partial file; the next build removes it even when it
    writes another wheel (another set), and leaves alone what is not provably a dead build's of this host."""
    base, proj, env = rig
    out, pts = out_trace
    point = _at(pts, "write the partial file", out)
    shutil.rmtree(out.parent, ignore_errors=True)
    res = inject(_argv(proj, out), env, base, base / "kill.log", point, "signal=KILL")
    assert res.hit and res.rc != 0, res.stderr
    left = _parts(out)
    assert len(left) == 1 and f".{BOOT}.{NS}." in left[0], os.listdir(out)
    ended = _ended_pid()
    stale = [
        f"{WHEEL}.{BOOT}.{NS}.{ended}.part",  # this host's, its process ended
        f"{WHEEL}.{BOOT}.{NS}.{ended}.3.part",  # the same, the fourth build of that process
        f"{WHEEL}.{BOOT}.1{NS}.{ended}.part",  # this host's other pid namespace: unlocked, and not new
    ]
    kept = [
        ".notes.part",
        f".other-1.0-py3-none-any.whl.{BOOT}.{NS}.{ended}.part",  # another distribution's: only its name is not ours
        "sglang-draft.whl.part",
        f"{WHEEL}.{BOOT}.{NS}.{os.getpid()}.part",  # a build that still runs (before it took its lock)
        f"{WHEEL}.{BOOT}.{NS}.{os.getpid()}.1.part",  # another build of that process
    ]
    unproven = [  # may be a running build: a note names them, and the user removes them
        f"{WHEEL}.{OTHER_HOST}.{NS}.{ended}.part",  # another host's (NFS): a pid of there means nothing here
        f"{WHEEL}.{ended}.part",  # an earlier version's names: no host, no lock; maybe another host's
        f"{WHEEL}.{NS}.{ended}.part",
    ]
    _write_parts(out, stale + kept + unproven)
    fresh = f"{WHEEL}.{BOOT}.2{NS}.{ended}.part"  # this host's other pid namespace, made just now: maybe not locked yet
    _write_parts(out, [fresh], age=0)
    done = subprocess.run(_argv(proj, out, "--set", "none"), env=env, capture_output=True, text=True)  # another name
    assert done.returncode == 0, done.stderr
    assert sorted(n for n in os.listdir(out) if n.endswith("part")) == sorted(kept + unproven + [fresh])
    notes = _notes(done.stderr)
    assert all(str(out / n) in notes for n in unproven), done.stderr
    assert not any(str(out / n) in notes for n in kept + [fresh]), done.stderr
    assert "once no build writes" in notes, done.stderr


HOLD = """import fcntl, os, sys, time
for path in sys.argv[1:]:
    fcntl.flock(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(600)
"""


def test_a_part_whose_lock_is_held_survives_and_is_removed_once_its_holder_is_killed(rig):
    """A build holds an exclusive flock on its partial file for its whole life: a live holder keeps the file,
    whatever its name says of its pid, and SIGKILL of the holder (the kernel drops its lock) lets the next
    build remove it. The earlier version's name (namespace.pid: the same init namespace on every host) held
    by a build of another host, whose pid is not alive here, was removed under it."""
    base, proj, env = rig
    out = base / "out-held"
    out.mkdir()
    ended = _ended_pid()
    legacy = f"{WHEEL}.{NS}.{ended}.part"  # another host's build of an earlier version
    ours = [
        f"{WHEEL}.{BOOT}.{NS}.{ended}.part",  # this host's: the pid is not the holder's, only the lock tells
        f"{WHEEL}.{BOOT}.1{NS}.{ended}.part",  # this host's other pid namespace
    ]
    _write_parts(out, [legacy, *ours])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, *(str(out / n) for n in [legacy, *ours])], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        done = subprocess.run(_argv(proj, out), env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert _parts(out) == sorted([legacy, *ours]), os.listdir(out)
    finally:
        holder.kill()
        holder.wait()
    done = subprocess.run(_argv(proj, out), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _parts(out) == [legacy], os.listdir(out)  # no lock proves an earlier version's build dead
    assert str(out / legacy) in _notes(done.stderr), done.stderr


def test_two_builds_at_once_into_one_out_dir(rig, out_trace):
    """Two real builds of one set into one --out: one is stopped half-way through writing its archive while the
    other runs from start to end; both succeed, the final name never holds a half-written wheel (each is written
    beside it, then renamed over it), and no partial file stays. The stop is a traced call, not a race."""
    base, proj, env = rig
    out, pts = out_trace
    shutil.rmtree(out.parent, ignore_errors=True)
    first = hold(_argv(proj, out), env, base, base / "held.log", _at(pts, "write the partial file", out))
    try:
        (writing,) = _parts(out)
        second = subprocess.run(_argv(proj, out), env=env, capture_output=True, text=True)
        assert second.returncode == 0, second.stderr
        assert _parts(out) == [writing], os.listdir(out)  # the held build's file, locked: not the other's to remove
        (wheel,) = out.glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            assert z.namelist()[-1].endswith(".dist-info/RECORD") and z.testzip() is None
        done = wheel.read_bytes()
        first.resume()
        _, err = first.strace.communicate()
    finally:
        if first.strace.poll() is None:
            first.kill()
    assert first.strace.returncode == 0, err
    assert _parts(out) == [] and not [n for n in os.listdir(out) if n.startswith(".")], os.listdir(out)
    assert [p.name for p in out.glob("*.whl")] == [wheel.name] and wheel.read_bytes() == done  # the same set


def test_the_wheel_is_on_disk_before_its_final_name_is(out_trace):
    """A power loss after the rename must not leave the final name on a file whose blocks never reached the
    disk (a zero-length or partial wheel): the partial file is fsynced before it is renamed into place, and the
    directory after (so the new name itself is durable)."""
    _, pts = out_trace
    opened = next(p for p in pts if p.syscall == "openat" and ".part" in p.call)
    fd = re.search(r"= (\d+)$", opened.call).group(1)
    renamed = next(i for i, p in enumerate(pts) if p.syscall == "rename" and ".part" in p.call)
    between = pts[pts.index(opened) : renamed]
    assert any(p.syscall == "fsync" and p.call.startswith(f"fsync({fd})") for p in between), between
    assert any(p.syscall == "fsync" for p in pts[renamed:]), pts[renamed:]


@pytest.mark.parametrize("error", ["EIO", "ENOSPC"])
def test_a_failed_fsync_of_out_after_the_rename_names_the_wheel_written(rig, out_trace, error):
    """The fsync of --out that makes the wheel's new name durable failed, after the rename: the error said "no
    wheel was written", and the wheel was there under its final name. It names the wheel written and says that
    its directory's fsync failed (a power loss may yet lose the name), exit 1 as for other OS errors."""
    base, proj, env = rig
    out, pts = out_trace
    renamed = next(i for i, p in enumerate(pts) if p.syscall == "rename" and ".part" in p.call)
    point = next(p for p in pts[renamed:] if p.syscall == "fsync")
    shutil.rmtree(out.parent, ignore_errors=True)
    res = inject(_argv(proj, out), env, base, base / "dir-fsync.log", point, f"error={error}")
    assert res.hit, f"{point}: not injected"
    err = res.stderr
    assert res.rc == 1 and "Traceback" not in err, err
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.testzip() is None
    assert f"wrote the wheel {wheel}, but could not fsync its directory {out}: " in err, err
    assert f"{os.strerror(getattr(errno, error))} ({error})" in err and "power loss" in err, err
    assert "no wheel was written" not in err, err
    assert _parts(out) == [], _parts(out)


def _leave_a_killed_builds_files(out: Path, tmp: Path) -> str:
    """What a build killed earlier leaves: its partial wheel in --out, its scratch directory in $TMPDIR."""
    ended = _ended_pid()
    out.mkdir(exist_ok=True)
    part = f"{WHEEL}.{BOOT}.{NS}.{ended}.part"
    _write_parts(out, [part])
    stale = tmp / f"sglang-overlay-wheel-{NS}.{ended}-x1y2z3"
    stale.mkdir(parents=True)
    (stale / "METADATA").write_text("a file the killed build extracted")
    return part


@pytest.mark.parametrize("signal", ["KILL", "INT"])
def test_a_kill_or_ctrl_c_during_the_cleanup_leaves_the_out_dir_usable(rig, signal):
    """A signal at each unlink/rmdir of the cleanup of a killed build's files (its partial wheel, its scratch
    directory): the command stops (Ctrl-C: exit 130, no traceback), and the next build removes the rest and
    writes the wheel, leaving nothing behind."""
    base, proj, env = rig
    out, tmp = base / f"out-reap-{signal}", base / f"tmp-reap-{signal}"
    env = {**env, "TMPDIR": str(tmp)}
    part = _leave_a_killed_builds_files(out, tmp)
    pts, proc = trace_points(_argv(proj, out), env, base, base / "reap.log")
    assert proc.returncode == 0 and part not in os.listdir(out), proc.stderr
    made = next(i for i, p in enumerate(pts) if p.syscall == "mkdir" and "sglang-overlay-wheel-" in p.call)
    cleanup = [p for p in pts[:made] if p.syscall in ("unlink", "unlinkat", "rmdir")]
    assert {p.syscall for p in cleanup} == {"unlink", "unlinkat", "rmdir"}, cleanup  # the part, the scratch
    for point in cleanup:
        shutil.rmtree(out)
        shutil.rmtree(tmp)
        tmp.mkdir()
        _leave_a_killed_builds_files(out, tmp)
        res = inject(_argv(proj, out), env, base, base / "reap-inject.log", point, f"signal={signal}")
        assert res.hit, f"{point}: not injected"
        if signal == "INT":
            assert res.rc == 130 and "interrupted" in res.stderr and "Traceback" not in res.stderr, res.stderr
        else:
            assert res.rc == -9, res.stderr
        assert not list(out.glob("*.whl")), f"{point}: a wheel was written"
        again = subprocess.run(_argv(proj, out), env=env, capture_output=True, text=True)
        assert again.returncode == 0, f"{point}: {again.stderr}"
        assert [n for n in os.listdir(out) if not n.endswith(".whl")] == [], f"{point}: {os.listdir(out)}"
        assert os.listdir(tmp) == [], f"{point}: {os.listdir(tmp)}"


def _tmpdir_refused(rc: int, err: str, tmp: Path, error: str, out: Path) -> None:
    """A full or read-only $TMPDIR: exit 1 naming $TMPDIR (not `?`, not the tree) and a fix that works there."""
    assert rc == 1 and "Traceback" not in err, err
    assert f" {tmp}: {ERRNO_TEXT[error]} ({error})" in err and " ?:" not in err, err
    hint = err.split("hint:", 1)[-1]
    assert "TMPDIR" in hint and "--tree" not in err, err
    if error == "ENOSPC":
        assert f"`df -h {tmp}`" in hint, err
    assert os.listdir(tmp) == [], os.listdir(tmp)
    assert not out.is_dir() or os.listdir(out) == [], os.listdir(out)


# where the build writes in $TMPDIR: its scratch copy of the wheel, the patched files' composition, the switch
TMP_POINTS = {
    "make the scratch copy": lambda p, tmp: p.syscall == "mkdir" and f'"{tmp}/sglang-overlay-wheel-' in p.call,
    "extract a file": lambda p, tmp: (
        p.syscall == "openat" and "sglang-overlay-wheel-" in p.call and "O_TRUNC" in p.call
    ),
    "make the composition's scratch": lambda p, tmp: p.syscall == "mkdir" and "sglang-overlay-compose-" in p.call,
    "write the composition's copy": lambda p, tmp: p.syscall == "openat" and "sglang-overlay-compose-" in p.call,
    "take the switch's lock": lambda p, tmp: p.syscall == "openat" and "/.sglang-overlay/lock" in p.call,
    "write the switch's journal": lambda p, tmp: p.syscall == "openat" and ".journal.json.sglang-overlay-tmp" in p.call,
    "write a patched file": lambda p, tmp: p.syscall == "openat" and ".http_server.py.sglang-overlay-tmp" in p.call,
    "rename the switch's state": lambda p, tmp: p.syscall == "rename" and ".state.json.sglang-overlay-tmp" in p.call,
}


@pytest.fixture(scope="module")
def tmp_points(rig) -> tuple[Path, list[Point]]:
    base, proj, env = rig
    tmp = base / "tmp-faults"
    tmp.mkdir()
    out = base / "out-tmp-trace"
    pts, proc = trace_points(_argv(proj, out), {**env, "TMPDIR": str(tmp)}, base, base / "tmp.log")
    assert proc.returncode == 0, proc.stderr
    return tmp, pts


@pytest.mark.parametrize("error", ["ENOSPC", "EROFS"])
def test_a_full_or_read_only_tmpdir_names_it_and_a_fix(rig, tmp_points, error):
    base, proj, env = rig
    tmp, pts = tmp_points
    failed = []
    for where, at in TMP_POINTS.items():
        point = next(p for p in pts if at(p, tmp))
        assert point.syscall in ERROR_SYSCALLS[error]  # an error the kernel really returns there
        out = base / f"out-tmp-{error}-{where.replace(' ', '_')}"
        argv, tmp_env = _argv(proj, out), {**env, "TMPDIR": str(tmp)}
        res = inject(argv, tmp_env, base, base / "tmp-inject.log", point, f"error={error}")
        try:
            assert res.hit, "not injected"
            _tmpdir_refused(res.rc, res.stderr, tmp, error, out)
        except AssertionError as e:
            failed.append(f"{where} ({point}): {e}")
    assert not failed, "\n\n".join(failed)


def test_a_full_write_in_tmpdir_names_it_and_a_fix(rig, tmp_points):
    """A write() names no file: the first one into an extracted file, full."""
    base, proj, env = rig
    tmp, pts = tmp_points
    opened = next(i for i, p in enumerate(pts) if TMP_POINTS["extract a file"](p, tmp))
    point = next(p for p in pts[opened:] if p.syscall == "write")
    out = base / "out-tmp-write"
    res = inject(_argv(proj, out), {**env, "TMPDIR": str(tmp)}, base, base / "tmp-inject.log", point, "error=ENOSPC")
    assert res.hit, f"{point}: not injected"
    _tmpdir_refused(res.rc, res.stderr, tmp, "ENOSPC", out)


def test_full_tmpdir_on_a_real_file_system(rig):
    base, proj, env = rig
    tmp = base / "small-tmp"
    tmp.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tmp)):  # the unpacked wheel is far larger
        res = subprocess.run(
            _argv(proj, base / "out-small-tmp"), env={**env, "TMPDIR": str(tmp)}, capture_output=True, text=True
        )
        _tmpdir_refused(res.returncode, res.stderr, tmp, "ENOSPC", base / "out-small-tmp")


def test_read_only_tmpdir_on_a_real_file_system(rig):
    base, proj, env = rig
    tmp = base / "ro-tmp"
    tmp.mkdir()
    with mounted("--bind", str(tmp), str(tmp)):
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(tmp)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only; test_a_full_or_read_only_tmpdir_names_it_and_a_fix injects EROFS")
        res = subprocess.run(
            _argv(proj, base / "out-ro-tmp"), env={**env, "TMPDIR": str(tmp)}, capture_output=True, text=True
        )
        _tmpdir_refused(res.returncode, res.stderr, tmp, "EROFS", base / "out-ro-tmp")


def _ended_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# -- the same on real file systems, where this machine lets the tests mount (test_engine_filesystems.py's way) ---
def test_full_out_dir_on_a_real_file_system(rig):
    base, proj, env = rig
    mnt = base / "small"
    mnt.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)):  # the wheel is larger
        res = subprocess.run(_argv(proj, mnt / "dist"), env=env, capture_output=True, text=True)
        assert res.returncode == 1, res.stderr
        assert f"cannot write the wheel {mnt}/dist/sglang-0.5.17+ovl." in res.stderr, res.stderr
        assert "(ENOSPC)" in res.stderr and f"df -h {mnt}/dist`" in res.stderr and "--out DIR" in res.stderr
        assert os.listdir(mnt / "dist") == [], os.listdir(mnt / "dist")


def test_read_only_out_dir_on_a_real_file_system(rig):
    base, proj, env = rig
    out = base / "ro"
    out.mkdir()
    with mounted("--bind", str(out), str(out)):
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(out)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only")
        res = subprocess.run(_argv(proj, out), env=env, capture_output=True, text=True)
        assert res.returncode == 1, res.stderr
        assert f"cannot write the wheel {out}/sglang-0.5.17+ovl." in res.stderr, res.stderr
        assert "(EROFS)" in res.stderr and "--out DIR" in res.stderr and "--tree" not in res.stderr, res.stderr
