"""The bench's writers outside its results store, faulted with strace (tests/faultlib.py) at their own calls:
`bench report` (report.md, plot.png) and the command.txt of `bench ab`; and two writers on one run dir.

A SIGKILL at each write-side call of the command's own process leaves every file it derives byte-equal to the
previous one or whole and new, never cut short; what else it leaves beside them is at most a writer's temp
(bench.store.is_temp), and the same command run again ends as an uninterrupted run ends, with nothing left. ENOSPC at each call the kernel fails with it exits with the command's own status for a
refused write and a message naming the error and the file, never a traceback, and leaves the previous file and
no temp. Calls that look alike to a fault are tried once each: the same system call on the same file in the
same opening of it (a kill at the second write into a temp cuts it short as the first does), in $TMPDIR, and
on stdout/stderr. Not tried: a kill at an fsync (it changes nothing a reader sees: the next call's kill leaves
the same), a full disk on stdout/stderr (pipes here) or at an open that creates nothing, and the calls of the
writer's children (the probe, the servers). The sweeps run on two workers."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench_fixtures import DATA, fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures
from faultlib import ERRNO_TEXT, STRACE, Injected, Point, error_points, inject, is_output, record, trace_points

from bench.store import is_temp as is_tmp_name

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2
OLD = b"an earlier file of this name: a kill or a full disk must leave these bytes or a whole new file\n"


@dataclass(frozen=True)
class Writer:
    """One command that writes: its arguments (run in its work dir), the files it derives (relative to the
    work dir) and what a whole new one of each is."""

    name: str
    argv: tuple[str, ...]
    outputs: tuple[str, ...]
    whole: Callable[[str, bytes], bool]  # (output, bytes) -> a whole file as the command writes it
    fail_rcs: tuple[int, ...]  # its exit status when the OS refuses a write
    ok_rc: int = 0  # its exit status without a fault
    children: bool = False  # it starts processes of its own (the probe, the servers): they are not under test


class Work:
    """One worker's directory: the starting state and the copy each run works on, its own $TMPDIR."""

    def __init__(self, base: Path, index: int, start: Path, env: dict):
        self.base = base / f"w{index}"
        self.start, self.dir, self.tmp, self.log = start, self.base / "work", self.base / "tmp", self.base / "s.log"
        self.env = {**env, "TMPDIR": str(self.tmp)}
        self.base.mkdir(parents=True)

    def reset(self) -> None:
        for d in (self.dir, self.tmp):
            shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.start, self.dir)
        self.tmp.mkdir()

    def run(self, w: Writer) -> subprocess.CompletedProcess:
        return subprocess.run(w.argv, cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=120)

    def names(self) -> set[str]:
        return {str(p.relative_to(self.dir)) for p in self.dir.rglob("*")}

    def read(self, rel: str) -> bytes | None:
        p = self.dir / rel
        return p.read_bytes() if p.exists() else None


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    return env | {"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def _works(base: Path, start: Path, env: dict) -> list[Work]:
    if STRACE is None:
        pytest.fail("strace is not installed: `apt-get install -y strace` (.ci/run does it)")
    return [Work(base, i, start, env) for i in range(WORKERS)]


_traced: dict[str, list[Point]] = {}  # per writer: its calls, traced once for all its sweeps


def _fault_points(work: Work, w: Writer, action: str, only: Callable[[str], bool] = lambda where: True) -> list[Point]:
    """The command's own write-side calls, once per (system call, file, time the file was opened): a write,
    fsync or fchmod is on the file its descriptor was opened on; every file under $TMPDIR is one. `only`: the
    files to fault at."""
    if w.name not in _traced:
        work.reset()
        pts, proc = trace_points(list(w.argv), work.env, work.dir, work.log)
        assert proc.returncode == w.ok_rc, proc.stderr
        _traced[w.name] = pts
    out, seen, fds, opened = [], set(), {}, {}
    for p in _traced[w.name]:
        target = p.call
        if p.syscall == "openat" and (fd := re.search(r"= (\d+)$", p.call)):
            fds[fd.group(1)] = p.call
            if "O_CREAT" in p.call:
                opened[p.call.split('"')[1]] = opened.get(p.call.split('"')[1], 0) + 1
        elif p.syscall in ("write", "fsync", "fchmod") and (fd := re.match(r"\w+\((\d+)", p.call)):
            target = fds.get(fd.group(1), p.call)
        if " = -1 " in p.call:
            continue  # it failed by itself: nothing changed there
        if action == "signal=KILL" and p.syscall == "fsync":
            continue  # it changes nothing a reader sees: a kill there leaves what a kill at the next call leaves
        if action.startswith("error=") and (is_output(p) or not error_points([p], action)):
            continue
        if action == "error=ENOSPC" and p.syscall == "openat" and "O_CREAT" not in p.call:
            continue  # the kernel fails an open with ENOSPC only where it creates the file
        path = re.search(r'"([^"]*)"', target)
        where = "output" if is_output(p) else path.group(1) if path else target
        if where.startswith(str(work.tmp)) or (p.syscall == "unlinkat" and not p.call.startswith("unlinkat(AT_FDCWD")):
            where = "$TMPDIR"  # an unlinkat relative to an open directory: rmtree of a TemporaryDirectory
        # a name opened again is another write of it (a probe, then the file itself): its calls are others
        key = (p.syscall, where, opened.get(where, 0))
        if only(where) and key not in seen:
            seen.add(key)
            # strace's when=N counts per process: with -f a child (the probe, a server) would be failed at its
            # own N-th call too, so a writer's children are left untraced (slower: no --seccomp-bpf)
            out.append(dataclasses.replace(p, child_first=True) if w.children else p)
    return out


def _files(work: Work, w: Writer, names_before: set[str], allow_tmp: bool) -> list[str]:
    """What is wrong with the derived files and the work dir now: a file neither the previous nor whole, and
    anything new that is not an output (with `allow_tmp`, fsio's fixed-name temp of an output is allowed)."""
    bad = []
    for rel in w.outputs:
        data = work.read(rel)
        before = (work.start / rel).read_bytes() if (work.start / rel).exists() else None
        if data != before and (data is None or not w.whole(rel, data)):
            bad.append(f"{rel}: {'missing' if data is None else f'{len(data)} bytes, neither the previous nor whole'}")
    for name in sorted(work.names() - names_before - set(w.outputs)):
        if not (allow_tmp and is_tmp_name(Path(name).name)):
            bad.append(f"left behind: {name}")
    return bad


def _after_kill(work: Work, w: Writer, r: Injected, names_before: set[str], explored: set) -> list[str]:
    bad = _files(work, w, names_before, allow_tmp=True)
    # a temp is left: the next run must take it away (once per state met: what follows depends on it alone)
    state = tuple(sorted(work.names() - names_before)), tuple(work.read(rel) == OLD for rel in w.outputs)
    if set(state[0]) - set(w.outputs) and state not in explored:
        explored.add(state)
        again = work.run(w)
        # the run after ends as an uninterrupted run ends (seqs_compare's answer "they differ" is exit 1)
        bad += [f"the run after: rc {again.returncode}\n{again.stderr[-600:]}"] if again.returncode != w.ok_rc else []
        bad += [f"the run after: {b}" for b in _files(work, w, names_before, allow_tmp=False)]
        bad += [f"the run after: {rel} is not new" for rel in w.outputs if work.read(rel) == OLD]
    return bad


def _after_enospc(work: Work, w: Writer, r: Injected, names_before: set[str], explored: set) -> list[str]:
    bad = [f"rc {r.rc}, traceback:\n{r.stderr[-1200:]}"] if "Traceback" in r.stderr else []
    if r.rc not in (0, *w.fail_rcs):
        bad.append(f"rc {r.rc} (expected one of {w.fail_rcs}):\n{r.stderr[-600:]}")
    elif r.rc and not (
        ERRNO_TEXT["ENOSPC"] in r.stderr
        and (any(Path(f).name in r.stderr for f in w.outputs) or str(work.tmp) in r.stderr)
    ):
        # the message names the file (as the user named it: `bench report .` says report.md), or the scratch
        # file in $TMPDIR that could not be written
        bad.append(f"rc {r.rc} and no message naming the error and the file:\n{r.stderr[-600:]}")
    bad += _files(work, w, names_before, allow_tmp=False)
    bad += [f"$TMPDIR: {n}" for n in os.listdir(work.tmp)]
    return bad


def sweep(works: list[Work], w: Writer, action: str) -> int:
    """Fault `w` at each of its points with `action`, on the workers; returns how many points were tried."""
    points = _fault_points(works[0], w, action)
    assert points, f"{w.name}: strace saw no write-side calls"
    names_before = {str(p.relative_to(works[0].start)) for p in works[0].start.rglob("*")}
    check = _after_kill if action == "signal=KILL" else _after_enospc
    explored: set = set()  # shared by the workers: at worst a state is met twice at once and run after twice

    def one(work: Work, point: Point) -> list[str]:
        work.reset()
        r = inject(list(w.argv), work.env, work.dir, work.log, point, action)
        return check(work, w, r, names_before, explored) if r.hit else [f"not reached (rc {r.rc})"]

    def run(i: int) -> list[str]:
        return [f"{p}: {b}" for p in points[i::WORKERS] for b in one(works[i], p)]

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = [f for chunk in pool.map(run, range(WORKERS)) for f in chunk]
    record(w.name, action, points, len({f.split(": ", 1)[0] for f in failed}))
    assert not failed, f"{len(failed)} problems at {len(points)} points:\n" + "\n".join(failed[:12])
    return len(points)


# -- bench report -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def report_works(tmp_path_factory):
    """`bench report` of a recorded run, with an earlier report and plot beside it (placeholders: their bytes
    stand for any earlier file); matplotlib's cache made once, so that no run writes it."""
    base = tmp_path_factory.mktemp("report-faults")
    start = base / "start"
    shutil.copytree(DATA / "profhost", start)
    outputs = ("report.md", "plot.png")
    for name in outputs:
        (start / name).write_bytes(OLD)
    works = _works(base, start, _env() | {"MPLCONFIGDIR": str(base / "mpl")})
    works[0].reset()
    argv = (sys.executable, "-m", "bench", "report", ".")
    proc = subprocess.run(argv, cwd=works[0].dir, env=works[0].env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    new = {rel: works[0].read(rel) for rel in outputs}
    # the report is a function of the store: a whole new file is byte-equal to the uninterrupted run's
    return works, Writer("bench report", argv, outputs, lambda rel, data: data == new[rel], (1,))


def test_a_kill_at_every_write_of_bench_report_leaves_the_previous_report_and_plot_or_the_new(report_works):
    works, w = report_works
    assert sweep(works, w, "signal=KILL") >= 7  # openat, write, rename of each file, and stdout


def test_a_full_disk_at_every_write_of_bench_report_is_exit_1_naming_the_file_and_the_previous_files_stay(
    report_works,
):
    works, w = report_works
    assert sweep(works, w, "error=ENOSPC") >= 8


# -- bench ab's command.txt -------------------------------------------------------------------------------------
def test_a_kill_writing_command_txt_of_bench_ab_leaves_none_and_the_next_run_writes_it_whole(
    tmp_path,
    manifest,
    launcher_arg,
):
    """The run's command (what a reader repeats) from an ab whose servers exit at once (exit 3, nothing
    measured), killed at its first write into command.txt (or its temp): the old write_text had truncated
    the name by then. No command.txt, at most a temp beside it, and the same command again writes it whole
    and takes the temp away. (Its other calls are store.write_whole's, swept on `bench report`.)"""
    (tmp_path / "start").mkdir()
    argv = fake_argv("ab", ["--arms", "a=base", "b=full"], manifest, launcher_arg, Path("run"))
    env = _env() | {"FAKE_BENCH": json.dumps({"fail": ["alpha"]}), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    (work,) = _works(tmp_path, tmp_path / "start", env)[:1]
    w = Writer(
        "bench ab", (sys.executable, "-m", "bench", *argv), ("run/command.txt",), lambda rel, d: False, (1,), 3, True
    )
    points = _fault_points(work, w, "signal=KILL", only=lambda where: "command.txt" in where)
    whole = work.read("run/command.txt")
    assert whole is not None and whole.startswith(f"cd {work.dir} && ".encode()) and whole.endswith(b" 1\n")
    first_write = next(p for p in points if p.syscall == "write")
    work.reset()
    assert inject(list(w.argv), work.env, work.dir, work.log, first_write, "signal=KILL").hit
    beside = [n for n in os.listdir(work.dir / "run") if "command.txt" in n]
    record(w.name, "signal=KILL", [first_write], int(beside and not all(is_tmp_name(n) for n in beside)))
    assert all(is_tmp_name(n) for n in beside), f"{first_write}: left {beside}: a cut command.txt"
    assert work.run(w).returncode == 3
    assert work.read("run/command.txt") == whole and [n for n in os.listdir(work.dir / "run") if "command" in n] == [
        "command.txt"
    ]


# -- two writers on one run dir (issue 40, class 2) ---------------------------------------------------------------
PAUSED_WRITER = """
import os, signal, sys
from bench import cli
rename = os.rename
def paused(src, dst, *a, **k):
    if os.path.basename(os.fspath(dst)) == "report.md":
        os.kill(os.getpid(), signal.SIGSTOP)  # whole temp written, not yet renamed: resumed by the test
    return rename(src, dst, *a, **k)
os.rename = paused
sys.exit(cli.main(["report", sys.argv[1]]))
"""


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_two_report_writers_on_one_run_dir_leave_one_whole_report_and_both_exit_0(tmp_path):
    """Writer A pauses between its whole temp and the rename; writer B writes the same report.md to the end;
    then A goes on. With one fixed temp name B took A's temp (or A's rename moved B's), and one writer failed
    although the report was whole. Each writer's own temp: both exit 0, one whole report, no temp left."""
    run = tmp_path / "run"
    shutil.copytree(DATA / "profhost", run)
    env = _env() | {"MPLCONFIGDIR": str(tmp_path / "mpl")}
    a = subprocess.Popen([sys.executable, "-c", PAUSED_WRITER, str(run)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        while _state(a.pid) != "T":  # synchronised on A's own stop, however slow the machine
            assert a.poll() is None, "writer A ended without pausing before its rename"
            time.sleep(0.01)
        b = subprocess.run([sys.executable, "-m", "bench", "report", str(run)], env=env, capture_output=True, text=True)
        assert b.returncode == 0, b.stderr
        after_b = (run / "report.md").read_bytes()
    finally:
        os.kill(a.pid, signal.SIGCONT)
    out, _ = a.communicate(timeout=300)
    assert a.returncode == 0, out
    assert (run / "report.md").read_bytes() == after_b and after_b.startswith(b"# ")
    assert [n for n in os.listdir(run) if is_tmp_name(n)] == []
