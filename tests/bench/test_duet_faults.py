"""`bench ab --duet` under faults: the OS refusing its writes (strace, tests/faultlib.py), a signal at the moments
a duet is most exposed (its second server starting, between its repetitions, its report being written), a
read-only or full out dir, and a second process on the same out dir.

What must hold after each: both servers of the duet are gone (the fake server logs its pid), there is no
traceback, and `--resume` counts whole duets only: three duets at the end, each of one round with one start per
arm whose measured repetitions are all its own. The run is 3 duets of 3 repetitions per arm, no throwaway start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures
from faultlib import STRACE, Point, inject, trace_points

from bench import store

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"noise": 0.002}
ARMS = ["--arms", "a=base", "b=base", "--arm-env", "b:BENCH_NULL=1"]
SERVER = ("--tp", "1", "--port", "31000", "--mem-fraction-static", "0.3")
DUETS = 3


class Duet:
    """One duet run's command and environment in tmp_path: its trees, its out dir, the fake servers' log."""

    def __init__(self, tmp_path: Path, manifest: Path, launcher_arg: str, fake: dict | None = None, out=None):
        self.base = tmp_path
        self.out = Path(out) if out else tmp_path / "duet"
        self.log = tmp_path / "fake-starts.jsonl"
        for t in ("tree-a", "tree-b"):
            (tmp_path / t).mkdir(exist_ok=True)
        trees = ["--tree", str(tmp_path / "tree-a"), "--duet", str(tmp_path / "tree-b")]
        bounds = ["--restarts", str(DUETS), "--max-starts", str(DUETS), "--no-warmup-start"]
        args = fake_argv("ab", [*ARMS, *bounds, *trees], manifest, launcher_arg, self.out, SERVER)
        self.argv = [sys.executable, "-m", "bench", *args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
        self.env = env | {
            "PYTHONPATH": str(ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "FAKE_BENCH": json.dumps({**QUIET, **(fake or {})}),
            "FAKE_BENCH_LOG": str(self.log),
            "BENCH_GPU_NAME": "NVIDIA H200",
            "SGLANG_OVERLAY_BENCH_WARM_DIR": str(tmp_path / "warm"),
            "MPLCONFIGDIR": str(tmp_path / "mpl"),
        }

    def run(self, *extra: str, argv=None, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv or [*self.argv, *extra], cwd=self.base, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def resume(self) -> subprocess.CompletedProcess:
        return self.run(argv=[sys.executable, "-m", "bench", "ab", "--resume", str(self.out)])

    def pids(self) -> list[int]:
        return [json.loads(x)["pid"] for x in self.log.read_text().splitlines()] if self.log.exists() else []

    def records(self) -> list[dict]:
        return list(store.read(self.out / "results.jsonl"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not re.search(r"^State:\s+Z", f.read(), re.M)
    except FileNotFoundError:
        return False


def left_running(d: Duet, wait_s: float = 15.0) -> list[int]:
    """The fake servers still running `wait_s` after the bench ended (a stop takes a moment, longer on a loaded 2-core machine)."""
    deadline = time.monotonic() + wait_s
    while (running := [p for p in d.pids() if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in running:  # never leave one behind for the next test
        os.kill(p, signal.SIGKILL)
    return running


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


def whole_duets(d: Duet, n: int = DUETS) -> None:
    """The store holds exactly `n` completed duets, each of one round with one start of each arm, whose measured
    repetitions are all its own, in the swap order; the conclusion counted n."""
    recs = d.records()
    v = store.view(recs)
    keys = [a["key"] for a in v.runs[0]["arms"]]
    rounds = [{u.round for u in v.units_of(k)} for k in keys]
    both = sorted(rounds[0] & rounds[1])
    assert len(both) == n, (rounds, [r["type"] for r in recs])
    for i, r in enumerate(both):
        units = [v.units[(k, r)] for k in keys]
        assert {u.duet["index"] for u in units} == {i} and {u.duet["position"] for u in units} == {0, 1}
        for u in units:
            own = [x for x in recs if x["type"] == "rep" and x["start_id"] == u.start_id and not x["warmup"]]
            assert len(own) == len(u.reps) == 3
    c = [r for r in recs if r["type"] == "conclusion"][-1]["comparisons"][0]
    assert c["comparison"]["n_ref"] == n


def finish(d: Duet) -> None:
    """--resume until the plan is done (a budget stop resumes too); then whole duets."""
    for _ in range(3):
        p = d.resume()
        no_traceback(p)
        if p.returncode == 0:
            break
    assert p.returncode == 0, p.stderr[-2000:]
    assert not left_running(d)
    whole_duets(d)


def needs_strace() -> None:
    if STRACE is None:
        pytest.fail("strace is not installed: `apt-get install -y strace` (.ci/run does it)")


# -- the store's writes, traced once ------------------------------------------------------------------------------
def store_points(d: Duet) -> tuple[list[Point], list[dict]]:
    """Every write-side call of an uninterrupted duet run's own process, and the records it wrote (in order: the
    k-th write into results.jsonl is the k-th record)."""
    pts, proc = trace_points(d.argv, d.env, d.base, d.base / "trace.log")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return pts, d.records()


def _store_writes(pts: list[Point], out_dir: Path) -> list[tuple[Point, Point]]:
    """(openat, write) of each append to results.jsonl, in order: store.append opens it and writes next (under
    -f an openat's result may be on a later "resumed" line, so the fd is not matched)."""
    out, opened = [], None
    path = f'"{out_dir / "results.jsonl"}", O_RDWR'  # the lock opens it O_WRONLY and never writes
    for p in pts:
        if p.syscall == "openat" and path in p.call:
            opened = p
        elif p.syscall == "write" and opened is not None:
            out.append((opened, p))
            opened = None
    return out


# -- signals ------------------------------------------------------------------------------------------------------
def _start_and_wait(d: Duet, until, timeout: float = 30.0) -> subprocess.Popen:
    proc = subprocess.Popen(d.argv, cwd=d.base, env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.02)
    assert until(), "the moment never came"
    return proc


def _second_start_begun(d: Duet, duet: int):
    """The fake server of duet `duet`'s second position has logged its start (it sleeps before its url line)."""
    return lambda: sum(1 for _ in d.pids()) >= 2 * duet + 2


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signal_while_the_second_server_of_a_duet_starts_leaves_no_server_and_resume_counts_whole_duets(
    sig, tmp_path, manifest, launcher_arg
):
    """Duet 2's second server takes 1.5 s to announce itself; the bench gets SIGINT (Ctrl-C) or SIGKILL (a
    device call's time limit) meanwhile. Both servers of the duet must be gone: after SIGINT the bench stops
    them itself (exit 130); after SIGKILL their launchers must die with it. --resume then measures duet 2 again."""
    d = Duet(tmp_path, manifest, launcher_arg, {"tree_start_s": {"tree-b": 1.5}})
    proc = _start_and_wait(d, _second_start_begun(d, 1))
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    assert len(d.pids()) == 4 and not left_running(d), f"servers left running after {sig.name}"
    finish(d)


# -- the out dir --------------------------------------------------------------------------------------------------
def test_a_second_bench_on_the_same_out_dir_is_refused_naming_the_dir(tmp_path, manifest, launcher_arg):
    """Two `bench ab --duet` (or a --resume beside a running one) on one out dir would both take the next free
    round and pair each other's starts into duets, and start servers on the same ports: the second is refused
    with exit 2 naming the dir, before it writes or starts anything, and the first ends as if alone."""
    d = Duet(tmp_path, manifest, launcher_arg, {"tree_start_s": {"tree-b": 0.5}})
    first = _start_and_wait(d, lambda: (d.out / "results.jsonl").exists())
    for argv in (d.argv, [sys.executable, "-m", "bench", "ab", "--resume", str(d.out)]):
        before = (d.out / "results.jsonl").read_bytes()
        second = d.run(argv=argv)
        no_traceback(second)
        assert second.returncode == 2 and str(d.out) in second.stderr, second.stderr[-2000:]
        assert first.poll() is None, "the first run ended before the second was tried"
        assert (d.out / "results.jsonl").read_bytes()[: len(before)] == before
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-2000:]
    assert not left_running(d)
    whole_duets(d)
    runs = [r for r in d.records() if r["type"] == "run"]
    assert len(runs) == 1 and len(d.pids()) == 2 * DUETS  # the refused ones started no server


@contextmanager
def mounted(*args: str):
    """As tests/test_engine_filesystems.py: a real mount where the machine allows one (root), else skipped saying
    why; the same errors are injected by strace below on any machine."""
    target = Path(args[-1])
    res = subprocess.run(["mount", *args], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"this machine does not let the tests mount ({res.stderr.strip()})")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_a_read_only_out_dir_is_refused_with_exit_2_naming_it(tmp_path, manifest, launcher_arg):
    """A new run and a --resume into a read-only mount: exit 2, a message naming the dir and the error, no
    traceback, no server started, the recorded run as it was."""
    d = Duet(tmp_path, manifest, launcher_arg)
    d.out.mkdir()
    with mounted("--bind", str(d.out), str(d.out)):
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(d.out)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only")
        r = d.run()
        no_traceback(r)
        assert r.returncode == 2 and str(d.out) in r.stderr and "Read-only file system" in r.stderr, r.stderr
        assert not d.pids() and os.listdir(d.out) == []
    assert d.run().returncode == 0  # a finished run, then the same dir read-only
    before = {p.name: p.read_bytes() for p in d.out.iterdir() if p.is_file()}
    n = len(d.pids())
    with mounted("--bind", str(d.out), str(d.out)):
        subprocess.run(["mount", "-o", "remount,ro,bind", str(d.out)], check=True)
        r = d.resume()
        no_traceback(r)
        assert r.returncode == 2 and str(d.out) in r.stderr and "Read-only file system" in r.stderr, r.stderr
        assert len(d.pids()) == n
    assert {p.name: p.read_bytes() for p in d.out.iterdir() if p.is_file()} == before


# -- the store's writes: a kill, Ctrl-C or a full disk at each moment of a duet ------------------------------------
@pytest.fixture(scope="module")
def traced(tmp_path_factory, request):
    """One uninterrupted duet run under strace: its write-side calls and the records they wrote."""
    needs_strace()
    base = tmp_path_factory.mktemp("duet-trace")
    from bench_fixtures import FAKE

    (base / "m").mkdir()
    m = request.getfixturevalue("manifest_for_module")
    d = Duet(base, m, f"{sys.executable} {FAKE}")
    pts, recs = store_points(d)
    return pts, recs, d.out


@pytest.fixture(scope="module")
def manifest_for_module(tmp_path_factory):
    import bench_fixtures

    return bench_fixtures.manifest.__wrapped__(tmp_path_factory.mktemp("duet-manifest"))


MOMENTS = {  # the records of duet 2 (round 1) at whose write the fault comes, and the conclusion
    "both servers up": lambda r: r["type"] == "start" and r["round"] == 1 and r["duet"]["position"] == 1,
    "between B and A": lambda r: r["type"] == "rep" and r["round"] == 1 and r.get("duet_slot") == 3,
    "first unit_done": lambda r: r["type"] == "unit_done" and r["round"] == 1,
    "conclusion": lambda r: r["type"] == "conclusion",
}


def _moment(traced, name: str, which: str = "write") -> Point:
    """The traced run's call at that moment (its n-th call of the kind: a run in another dir makes the same)."""
    pts, recs, out = traced
    if name == "report":
        p = next(p for p in pts if p.syscall == "rename" and "report.md" in p.call)
        return Point(p.syscall, p.n, p.call, child_first=True)
    writes = _store_writes(pts, out)
    assert len(writes) == len(recs), (len(writes), len(recs))
    k = next(i for i, r in enumerate(recs) if MOMENTS[name](r))
    if name == "first unit_done":
        assert recs[k + 1]["type"] == "unit_done"  # the second is the next record
    p = writes[k][0 if which == "openat" else 1]
    return Point(p.syscall, p.n, p.call, child_first=True)  # the bench's own calls: its servers untraced


CASES = [  # (fault, moment): every moment under a full disk; a kill and Ctrl-C where a duet is half done
    *[("error=ENOSPC", m) for m in ("both servers up", "between B and A", "first unit_done", "conclusion")],
    ("signal=KILL", "first unit_done"),
    ("signal=INT", "between B and A"),
    ("signal=INT", "report"),
]


@pytest.mark.parametrize(("action", "name"), CASES)
def test_a_fault_at_a_store_write_of_a_duet_leaves_no_server_and_resume_counts_whole_duets(
    action, name, traced, tmp_path, manifest, launcher_arg
):
    """At the write of that moment's record (of the report: its first open): SIGKILL, SIGINT, or ENOSPC from the
    kernel. Afterwards no server is running, there was no traceback (a kill aside), a full disk's message names
    the store and the error, the store ends on a whole line, and --resume ends with exactly 3 whole duets."""
    d = Duet(tmp_path, manifest, launcher_arg)
    point = _moment(traced, name)
    r = inject(d.argv, d.env, d.base, d.base / "inj.log", point, action)
    assert r.hit, f"{point}: not reached (rc {r.rc})\n{r.stderr[-1500:]}"
    assert not left_running(d), f"{action} at {name}: servers left running"
    if action != "signal=KILL":
        no_traceback(r)
    if action == "signal=INT":
        assert r.rc == 130, r.stderr[-1500:]
    if action == "error=ENOSPC":
        assert r.rc != 0 and "No space left on device" in r.stderr and "results.jsonl" in r.stderr, r.stderr[-1500:]
    data = (d.out / "results.jsonl").read_bytes()
    assert data.endswith(b"\n"), "a cut line at the store's end"
    finish(d)


# 24: the console logs fill first (the log's reader died on ENOSPC, stopped draining, and the start hung)
@pytest.mark.parametrize("free_kb", [56, 24])
def test_a_full_out_dir_stops_the_run_with_a_message_and_resume_after_freeing_it_counts_whole_duets(
    free_kb, tmp_path, manifest, launcher_arg
):
    """The out dir on a real tmpfs with `free_kb` KB left (the store, the servers' console logs and the report
    share it; the kernel's short writes at the last page are real): the run stops with a message naming the error,
    no traceback and no server left; the store ends on a whole line; with the space freed, --resume ends with 3
    whole duets."""
    d = Duet(tmp_path, manifest, launcher_arg)
    d.out.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d.out)):
        filler = d.out / "filler"
        filler.write_bytes(b"\0" * (shutil.disk_usage(d.out).free - free_kb * 1024))
        r = d.run()
        no_traceback(r)
        assert r.returncode != 0 and "No space left on device" in r.stderr, r.stderr[-2000:]
        assert not left_running(d)
        data = (d.out / "results.jsonl").read_bytes()
        assert not data or data.endswith(b"\n"), data[-300:]
        filler.unlink()
        finish(d)
