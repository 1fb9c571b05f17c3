"""A rebase faulted (strace) at every step of its own process: a SIGKILL, a Ctrl-C (SIGINT), ENOSPC, EROFS or
EACCES at one call, ENOSPC from one call on (a disk that stays full); and a second process beside it.

Four commands of one rebase on a fixture release made from the real 0.5.17 files, a small synthetic pin pair
with a 3-way merge (fx_args_b's file) and a conflict stop: the start up to the first conflict (the release
tree unpacked, the staging directory, the progress file, the conflict written into the tree through its
journal), `--continue` after the resolution to the end (capture, the tree put back, the remaining patches,
the manifest last, the rename of the new pin into place), `--skip` from the same stop, and `--abort`.

After a kill, the next command (`--continue`, the same start again, `--skip` or `--abort` again) ends
exactly where an uninterrupted run ends, with nothing left behind. After a Ctrl-C the command exits 130 with
one line; after an OS error it exits 1 naming the error and a fix (or ends as without it), never with a
traceback; then `rebase --status` tells the truth (a patch it calls done has its staged files, one it calls
stopped is in the release tree), `--abort` leaves the project as before the rebase, and the way on ends where
an uninterrupted run ends. Points: the calls after which the disk looks different for a kill; every call of
the kinds the kernel fails with that error for the others; calls that look alike (in scratch directories,
the release cache, an unpacking, a removal) once each; of those, one point of each of four kinds drawn with a
seed (faultlib.sample; every kind with SGLANG_OVERLAY_FAULTS=kinds, all with =all). The sweeps run on three workers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, tree_snapshot
from faultlib import (
    ERRNO_TEXT,
    STRACE,
    Held,
    Point,
    error_points,
    hold,
    inject,
    is_output,
    python_argv,
    record,
    reproduce,
    sample,
    trace_points,
)
from test_rebase import SARGS, make_release, pin_text, project

from sglang_overlay import scratch
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.fsio import TMP_SUFFIX

VERSION = "9.1.0"
WORKERS = 3
VISIBLE = ("rename", "unlink", "unlinkat", "mkdir", "rmdir")  # the calls after which the disk looks different


@pytest.fixture(scope="module")
def pin_source(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin))


class Bench:
    """One worker's directory: a template (cache + project) and the copy each run works on."""

    def __init__(self, base: Path, pin_source, index: int):
        self.base = base / f"w{index}"
        self.template = self.base / "template"
        cache = self.template / "cache"
        (cache / "wheels").mkdir(parents=True)
        os.symlink(pin_source.wheel, cache / "wheels" / pin_source.wheel.name)
        src = pin_text(pin_source, SARGS).replace(
            "def prepare_server_args(argv: List[str]) -> ServerArgs:\n",
            "def prepare_server_args(argv: List[str]) -> ServerArgs:\n    # upstream wrote something else here\n",
        )
        make_release(cache, pin_source, VERSION, **{SARGS: src.encode()})
        project(self.template)
        self.work = self.base / "work"
        self.tmp = self.base / "tmp"
        self.log = self.base / "strace.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
        self.env.update(
            SGLANG_OVERLAY_CACHE=str(self.work / "cache"), TMPDIR=str(self.tmp), PYTHONDONTWRITEBYTECODE="1"
        )

    @property
    def proj(self) -> Path:
        return self.work / "proj"

    def reset(self, start: Path) -> None:
        for d in (self.work, self.tmp):
            shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(start, self.work, symlinks=True)
        self.tmp.mkdir()

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            python_argv(*args), check=False, cwd=self.proj, env=self.env, capture_output=True, text=True
        )

    def resolve(self) -> None:
        f = self.proj / ".sglang" / f"sglang-{VERSION}" / SARGS
        text = f.read_text()
        start, end = text.index("<<<<<<<"), text.index("\n", text.index(">>>>>>> patched")) + 1
        f.write_text(
            text[:start] + "    # upstream wrote something else here\n    # fixture b: resolved\n" + text[end:]
        )

    def key(self, state: dict) -> str:
        """A state and the release tree's own bookkeeping (state, journal, saved copies): what a command that
        comes next can see."""
        h = hashlib.sha256(repr(sorted(state.items())).encode())
        own = self.proj / ".sglang" / f"sglang-{VERSION}" / ".sglang-overlay"
        for p in sorted(own.rglob("*")) if own.is_dir() else ():
            h.update(str(p.relative_to(own)).encode() + (p.read_bytes() if p.is_file() and p.name != "lock" else b""))
        return h.hexdigest()

    def state(self, reaped: bool = False) -> dict:
        """What an end state is made of: the project's files (progress without its start time), the release
        tree's files and journal, and anything a kill may leave behind (temp files, stale directories).
        `reaped`: the scratch directories of processes that are gone removed first, as the next command that
        changes a tree does (an error can stop their own removal: $TMPDIR is not the user's project)."""
        if reaped:
            scratch.reap(self.tmp)
        out: dict = {"kept": []}
        for p in sorted(self.proj.rglob("*")):
            rel = str(p.relative_to(self.proj))
            if not p.is_file() or rel.startswith(".sglang/"):
                continue
            if rel.startswith(f"pins/.rebase-{VERSION}.aborted-"):  # an abort's copy of work done by hand
                out["kept"].append(rel.split("/", 2)[2])
                continue
            data = p.read_bytes()
            if rel.startswith("pins/.rebase-") and rel.endswith(".json"):
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "started"}).encode()
            out[rel] = data
        tree = self.proj / ".sglang" / f"sglang-{VERSION}"
        if tree.is_dir():
            out |= {f"tree:{k}": v for k, v in tree_snapshot(tree).items()}
            out["tree:journal"] = (tree / ".sglang-overlay" / "journal.json").exists()
        out["leftovers"] = sorted(
            str(p) for p in self.work.rglob("*") if p.name.endswith(TMP_SUFFIX) or p.name.startswith(".tmp-")
        ) + sorted(os.listdir(self.tmp))
        return out


@pytest.fixture(scope="module")
def benches(tmp_path_factory, pin_source):
    if STRACE is None:
        pytest.fail("strace is not installed: `apt-get install -y strace` (.ci/run does it)")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "sglang_overlay")], check=True, capture_output=True
    )
    base = tmp_path_factory.mktemp("rebase-faults")
    return [Bench(base, pin_source, i) for i in range(WORKERS)]


@pytest.fixture(scope="module")
def phases(benches):
    """Per worker and phase: where it starts, its arguments, the state it ends in without a fault."""
    out = []
    for b in benches:
        b.reset(b.template)
        stopped_at = b.base / "stopped"
        start = b.cli("rebase", VERSION)
        assert start.returncode == 1 and "fx_args_b: conflict" in start.stdout, start.stderr
        stopped = b.state()
        b.resolve()
        shutil.copytree(b.work, stopped_at, symlinks=True)
        done = b.cli("rebase", "--continue")
        assert done.returncode == 0, done.stderr
        finished = b.state()
        assert not finished["leftovers"] and any(k.startswith(f"pins/{VERSION}/") for k in finished)
        b.reset(stopped_at)
        skip = b.cli("rebase", "--skip")
        assert skip.returncode == 0 and "skipped          fx_args_b" in skip.stdout, skip.stderr
        skipped = b.state()
        b.reset(stopped_at)
        aborted = b.cli("rebase", "--abort")
        assert aborted.returncode == 0, aborted.stderr
        b.aborted = b.state()
        out.append(
            {
                "start": (b.template, ["rebase", VERSION], stopped),
                "continue": (stopped_at, ["rebase", "--continue"], finished),
                "skip": (stopped_at, ["rebase", "--skip"], skipped),
                "abort": (stopped_at, ["rebase", "--abort"], b.aborted),
            }
        )
        b.phases, b.rcs = out[-1], {"start": 1, "continue": 0, "skip": 0, "abort": 0}
    return out


def _places(b: Bench) -> dict[str, str]:
    """Where a rebase writes, for faultlib.sample: a point of each kind in each."""
    return {
        str(b.tmp): "scratch",
        str(b.work / "cache"): "cache",
        str(b.proj / "pins"): "pins",
        str(b.proj / "pins" / f".rebase-{VERSION}.json"): "progress",
        str(b.proj / "pins" / f".rebase-{VERSION}"): "staging",
        str(b.proj / "pins" / VERSION): "new pin",
        str(b.proj / ".sglang"): "release tree",
        str(b.proj / "manifest.yaml"): "manifest",
    }


def _points(b: Bench, start: Path, args: list[str]):
    b.reset(start)
    pts, proc = trace_points(python_argv(*args), b.env, b.proj, b.log)
    assert proc.returncode in (0, 1), proc.stderr
    visible = [p for p in pts if p.syscall in VISIBLE and " = -1 " not in p.call]  # a failed call changed nothing
    # Calls that look alike to a kill are tried once each: inside scratch directories under $TMPDIR, inside a
    # directory being removed (rmtree's unlinkat relative to an open directory), inside a tree being unpacked.
    alike = {
        "scratch": lambda p: str(b.tmp) in p.call,
        "rmtree": lambda p: p.syscall == "unlinkat" and not p.call.startswith("unlinkat(AT_FDCWD"),
        "unpack": lambda p: "/.tmp-" in p.call and p.syscall == "mkdir",
    }
    out, seen = [], set()
    for p in visible:
        kind = next((k for k, test in alike.items() if test(p)), None)
        if kind is None or kind not in seen:
            out.append(p)
            seen.add(kind)
    return out


@pytest.mark.parametrize("phase", ["start", "continue", "skip", "abort"])
def test_a_kill_at_every_step_of_a_rebase_is_recovered(benches, phases, phase):
    start, args, _ = phases[0][phase]
    points = _points(benches[0], start, args)
    assert len(points) > 10, points
    points = sample(points, f"rebase {phase} KILL", _places(benches[0]))

    def run(i: int) -> list[str]:
        b, problems = benches[i], []
        start_i, _, expected = phases[i][phase]
        for point in points[i::WORKERS]:
            b.reset(start_i)
            r = inject(python_argv(*args), b.env, b.proj, b.log, point, "signal=KILL")
            if not r.hit:
                problems.append(f"{point}: not reached (rc {r.rc})")
                continue
            again = _way_on(b, phase, args)
            if "Traceback" in again.stderr:
                problems.append(f"{point}: traceback\n{again.stderr[-1200:]}")
            got = b.state()
            if got != expected:
                diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
                problems.append(f"{point}: after recovery (rc {again.returncode}) differs in {diff[:6]}")
        return problems

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = [p for chunk in pool.map(run, range(WORKERS)) for p in chunk]
    record(f"rebase {phase}", "signal=KILL", points, len({f.split(": ", 1)[0] for f in failed}))
    assert not failed, f"{len(failed)} of {len(points)} kill points failed ({reproduce()}):\n" + "\n".join(failed[:12])


def _way_on(b: Bench, phase: str, args: list[str]) -> subprocess.CompletedProcess:
    """What the user runs next to get where the command was going: the same again when the rebase still
    stands where it stood (a start without progress, a stop not yet skipped, an abort), else `--continue`."""
    progress = b.proj / "pins" / f".rebase-{VERSION}.json"
    if not progress.exists():
        return b.cli(*args) if phase == "start" else b.cli("rebase", "--status")
    stopped = json.loads(progress.read_text())["stop"] is not None
    if phase == "abort" or (phase == "skip" and stopped):
        return b.cli(*args)
    return b.cli("rebase", "--continue")


def test_abort_after_a_killed_start_leaves_the_project_as_before(benches):
    b = benches[0]
    b.reset(b.template)
    before = b.state()
    pts = _points(b, b.template, ["rebase", VERSION])
    commit = next(p for p in pts if p.syscall == "rename" and "journal.json" in p.call)  # mid-transaction
    b.reset(b.template)
    assert inject(python_argv("rebase", VERSION), b.env, b.proj, b.log, commit, "signal=KILL").hit
    assert b.cli("rebase", "--abort").returncode == 0
    after = b.state()
    assert {k: v for k, v in after.items() if not k.startswith("tree:")} == before
    tree = b.proj / ".sglang" / f"sglang-{VERSION}"
    assert (
        subprocess.run(["git", "status", "--porcelain"], check=False, cwd=tree, capture_output=True, text=True).stdout
        == ""
    )


# -- Ctrl-C and OS errors ---------------------------------------------------------------------------------------
def _fault_points(b: Bench, start: Path, args: list[str], action: str, persistent: bool = False) -> list[Point]:
    """Every call where the fault can happen, but once each among calls that look alike to it: per system
    call in a scratch directory, in the release cache, in a tree being unpacked, in a directory being removed,
    on the terminal; and for a signal (held until the file is whole) or a lasting error (the first call fails
    the rest) the first call of each atomic write. A call that failed by itself is left out: the kernel
    answers EEXIST before ENOSPC or EROFS, and a signal there finds nothing changed. A lasting error starts at
    every write, fsync, mkdir and rename, not at an open (strace cannot fail only the opens that create)."""
    b.reset(start)
    pts, proc = trace_points(python_argv(*args), b.env, b.proj, b.log)
    assert proc.returncode in (0, 1), proc.stderr
    alike = {
        "scratch": lambda p, path: str(b.tmp) in path,
        "cache": lambda p, path: str(b.work / "cache") in path,
        "unpack": lambda p, path: "/.tmp-" in path,
        "rmtree": lambda p, path: p.syscall == "unlinkat" and not p.call.startswith("unlinkat(AT_FDCWD"),
        "output": lambda p, path: is_output(p),
    }
    whole = action.startswith("signal=") or persistent
    out, seen, fds, writes = [], set(), {}, set()
    for p in pts:
        path = p.call
        if p.syscall == "openat" and (fd := re.search(r"= (\d+)$", p.call)):
            fds[fd.group(1)] = p.call
        elif p.syscall in ("write", "fsync", "fchmod"):  # a call on a descriptor: where it was opened
            # the descriptor is the first argument: "write(5, ...)" and "fsync(5) = 0" alike
            path = fds.get(fd.group(1), p.call) if (fd := re.match(r"\w+\((\d+)", p.call)) else p.call
        if " = -1 " in p.call or (action.startswith("error=") and not error_points([p], action)):
            continue
        if persistent and p.syscall == "openat":
            continue  # strace would fail every later open, reads and imports too: a full disk does not
        tmp = re.search(rf'"([^"]*{re.escape(TMP_SUFFIX)})"', path)
        if whole and tmp:
            if tmp.group(1) in writes:
                continue  # inside an atomic write, after its first call
            writes.add(tmp.group(1))
        kind = next((k for k, test in alike.items() if test(p, path)), None)
        if kind is None or (kind, p.syscall) not in seen:
            out.append(p)
            seen.add((kind, p.syscall))
    return out


def _status_lies(b: Bench, out: str, finished: dict) -> list[str]:
    """What `rebase --status` says against what is on disk: a patch it calls done has its staged files as the
    uninterrupted rebase writes them; the patch it calls stopped has its files in the release tree."""
    lies = []
    staging = b.proj / "pins" / f".rebase-{VERSION}"
    if not staging.is_dir():  # the new pin was renamed into place: what is done is there
        staging = b.proj / "pins" / VERSION
    for line in out.splitlines():
        words = line.split()
        if line.startswith("  done ") and len(words) >= 3:
            key = f"pins/{VERSION}/patches/{words[2].rstrip(':')}.patch"
            if key in finished:
                staged = staging / "patches" / f"{words[2].rstrip(':')}.patch"
                if not staged.is_file() or staged.read_bytes() != finished[key]:
                    lies.append(f"says {words[2]} is done, but {staged} is {'wrong' if staged.exists() else 'missing'}")
        elif line.startswith("  stopped ") and len(words) >= 3:
            text = (b.proj / ".sglang" / f"sglang-{VERSION}" / SARGS).read_text()
            if "<<<<<<<" not in text and "fixture b: resolved" not in text:
                lies.append(f"says {words[2]} stopped at a conflict, but the release tree does not carry it")
    return lies


def _fault(b: Bench, phase: str, point: Point, action: str, persistent: bool, explored: set) -> list[str]:
    start, args, expected = b.phases[phase]
    b.reset(start)
    r = inject(python_argv(*args), b.env, b.proj, b.log, point, action, persistent)
    if not r.hit:
        return [f"not reached (rc {r.rc})"]
    problems = [f"rc {r.rc}, traceback:\n{r.stderr[-1200:]}"] if "Traceback" in r.stderr or r.rc == 3 else []
    now = b.state(reaped=True)
    if action == "signal=INT":
        if r.rc != 130 or not r.stderr.rstrip().endswith("interrupted"):
            problems.append(f"rc {r.rc} (expected 130), stderr ends {r.stderr[-300:]!r}")
    else:
        mute = is_output(point) or (persistent and point.syscall == "write")  # stderr itself fails
        said = ERRNO_TEXT[action.split("=", 1)[1]] in r.stderr and "hint:" in r.stderr and str(b.base) in r.stderr
        if r.rc not in (1, b.rcs[phase]) and not (r.rc == 4 and mute):  # 4: done, its report lost
            problems.append(f"rc {r.rc}:\n{r.stderr[-600:]}")
        elif now != expected and not said and not mute:
            problems.append(
                f"rc {r.rc}, short of its end, and no message names the file, the error and a fix:\n{r.stderr[-600:]}"
            )
    # What follows depends on the state alone (files, the tree's own bookkeeping): once per state met.
    key = b.key(now)
    if key in explored:
        return problems
    explored.add(key)
    st = b.cli("rebase", "--status")
    if "Traceback" in st.stderr or st.returncode not in (0, 2):
        problems.append(f"`rebase --status`: rc {st.returncode}\n{st.stderr[-800:]}")
    final = b.phases["skip" if phase == "skip" else "continue"][2]
    problems += [f"`rebase --status` {lie}" for lie in _status_lies(b, st.stdout, final)]
    if (b.proj / "pins" / f".rebase-{VERSION}.json").exists():  # --abort from here (on a copy)
        copy = b.base / "abort-copy"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(b.work, copy, symlinks=True)
        # the new pin in place: the rebase is finished, and an abort refuses to delete a pin, changing nothing
        finished = (b.proj / "pins" / VERSION).is_dir() and not (b.proj / "pins" / f".rebase-{VERSION}").exists()
        was = b.state(reaped=True)
        ab = b.cli("rebase", "--abort")
        got = b.state(reaped=True)
        if finished:
            if ab.returncode != 2 or "does not delete a finished pin" not in ab.stderr or got != was:
                problems.append(f"`rebase --abort` of a finished rebase: rc {ab.returncode}\n{ab.stderr[-400:]}")
        else:
            # fx_args_b resolved and carried before the cut: the abort keeps that work aside, the rest as before
            kept, progress = got["kept"], was.get(f"pins/.rebase-{VERSION}.json")
            resolved = progress is not None and json.loads(progress)["results"].get("fx_args_b", {}).get("status")
            if resolved == "resolved" and "patches/fx_args_b.patch" not in kept:
                problems.append(f"`rebase --abort` kept {kept[:6]}, not the resolved and carried fx_args_b.patch")
            elif resolved != "resolved" and kept:
                problems.append(f"`rebase --abort` kept {kept[:6]} with no work done by hand to keep")
            got = got | {"kept": []}
            if ab.returncode != 0 or "Traceback" in ab.stderr or got != b.aborted:
                diff = sorted(k for k in set(got) | set(b.aborted) if got.get(k) != b.aborted.get(k))
                problems.append(f"`rebase --abort`: rc {ab.returncode}, differs in {diff[:6]}\n{ab.stderr[-400:]}")
        shutil.rmtree(b.work)
        os.rename(copy, b.work)
    again = _way_on(b, phase, args)  # and the way on ends where an uninterrupted run ends
    if "Traceback" in again.stderr:
        problems.append(f"the next command: traceback\n{again.stderr[-1200:]}")
    got = b.state(reaped=True)
    if got != expected:
        diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
        problems.append(f"after the next command (rc {again.returncode}) differs in {diff[:6]}\n{again.stderr[-400:]}")
    return problems


def _sweep(benches, phase: str, fault: str, persistent: bool = False) -> list[str]:
    """`fault`: one action, or two with `|` that take turns over the points (EROFS|EACCES: the same calls fail
    with either, and the command's handling differs only in the fix it names)."""
    start, args, _ = benches[0].phases[phase]
    actions = ["error=" + e for e in fault.removeprefix("error=").split("|")] if "|" in fault else [fault]
    points = _fault_points(benches[0], start, args, actions[0], persistent)
    points = sample(points, f"rebase {phase} {fault}{'+' if persistent else ''}", _places(benches[0]))
    turns = [(point, actions[n % len(actions)]) for n, point in enumerate(points)]

    def run(i: int) -> list[str]:
        b, explored = benches[i], set()
        return [
            f"{action} {point}: {p}"
            for point, action in turns[i::WORKERS]
            for p in _fault(b, phase, point, action, persistent, explored)
        ]

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = [p for chunk in pool.map(run, range(WORKERS)) for p in chunk]
    for action in actions:
        mine = [p for p, a in turns if a == action]
        bad = {f.split(": ", 1)[0] for f in failed if f.startswith(action + " ")}
        record(f"rebase {phase}", action + ("+" if persistent else ""), mine, len(bad))
    fault += "+" if persistent else ""
    return [f"{fault}: {len(failed)} problems at {len(points)} points:\n" + "\n".join(failed[:12])] if failed else []


@pytest.mark.parametrize("phase", ["start", "continue", "skip", "abort"])
def test_ctrl_c_or_an_os_error_at_every_step_of_a_rebase(benches, phases, phase):
    """Exit 130 on Ctrl-C, 1 naming the error and a fix on an OS error, never a traceback; `--status` then
    tells the truth, `--abort` leaves the project as before, and the way on ends where an uninterrupted run
    ends. For the start and --continue, ENOSPC from that call on too (the cleanup fails as well): once space
    is free, the way on still works."""
    failed = [
        f for action in ("signal=INT", "error=ENOSPC", "error=EROFS|EACCES") for f in _sweep(benches, phase, action)
    ]
    if phase in ("start", "continue"):
        failed += _sweep(benches, phase, "error=ENOSPC", persistent=True)
    assert not failed, f"{reproduce()}\n" + "\n\n".join(failed)


# -- a second process -------------------------------------------------------------------------------------------
def _held(b: Bench) -> Held:
    """`rebase --continue` from the stopped state, stopped once its first journal is in place (the release
    tree's lock held, a transaction in flight) until the test resumes it."""
    start, args, _ = b.phases["continue"]
    point = next(p for p in _points(b, start, args) if p.syscall == "rename" and "journal.json" in p.call)
    b.reset(start)
    return hold(python_argv(*args), b.env, b.proj, b.base / "held.log", point)


def _popen(b: Bench, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        python_argv(*args), cwd=b.proj, env=b.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


SECOND = {  # the second command -> (its exit code, words it says, whether it waits for the first)
    ("rebase", "--continue"): (0, f"no rebase to {VERSION} in progress; ", True),
    ("rebase", "--abort"): (1, f"no rebase to {VERSION} in progress; ", True),
    ("rebase", "--skip"): (1, f"no rebase to {VERSION} in progress; ", True),
    ("rebase", VERSION): (2, f"a rebase to {VERSION} is already in progress", False),
    ("rebase", "--status"): (0, "done     resolved         fx_args_b", False),  # as it is at that moment
}


@pytest.mark.parametrize("second", list(SECOND), ids=" ".join)
def test_a_second_rebase_command_while_one_runs_waits_or_is_refused(benches, phases, second):
    """`--continue` held in the middle of putting the release tree back (its journal in place, the tree's lock
    held): the second command waits for the lock and then finds the rebase done, or is refused at once; either
    way the first one's result is whole, nothing lost."""
    b = benches[0]
    rc, words, waits = SECOND[second]
    first = _held(b)
    proc = _popen(b, *second)
    said = ""
    if waits:  # it says it waits, and does: only once the first one goes on can it end
        while "waiting for another command" not in said and (line := proc.stderr.readline()):
            said += line
        assert "waiting for another command" in said and proc.poll() is None, said
        first.resume()
    out, err = proc.communicate(timeout=300)  # a fail-safe: a refusal comes at once, the first one stopped
    if not waits:
        first.resume()
    _, first_err = first.strace.communicate()
    assert first.strace.returncode == 0, first_err
    assert proc.returncode == rc and words in out + said + err, (out, said + err)
    assert ("waiting for another command" in said + err) == waits, said + err
    assert "Traceback" not in err
    assert b.state() == b.phases["continue"][2]


def test_apply_revert_and_status_on_the_source_pin_run_beside_a_rebase(benches, phases, pinned_tree, tmp_path):
    """The source pin's own tree has its own lock: a rebase held mid-step does not hold them up, and neither
    changes what the other ends with."""
    b = benches[0]
    tree = tmp_path / "sglang-0.5.17"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(tree)], check=True)
    first = _held(b)
    for cmd in (("apply", "--set", "default"), ("status",), ("revert", "--all"), ("apply", "fx_topk")):
        # the rebase stays stopped until they are done: one that waited for it would never end (a fail-safe)
        r = subprocess.run(
            python_argv("--tree", str(tree), *cmd), cwd=b.proj, env=b.env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0 and "waiting" not in r.stderr, (cmd, r.stderr)
    first.resume()
    _, err = first.strace.communicate()
    assert first.strace.returncode == 0, err
    assert b.state() == b.phases["continue"][2]
    assert "[x] fx_topk" in b.cli("--tree", str(tree), "status").stdout


def test_a_refresh_of_the_source_pin_while_a_rebase_runs_is_not_lost(benches, phases):
    """A second process rewrites a source patch (as `refresh` does) while `--continue` is held mid-step: the
    rebase refuses to make the new pin of what it read before, and goes on once the file is as it was."""
    b = benches[0]
    first = _held(b)
    patch = b.proj / "patches" / "fx_common.patch"
    old = patch.read_bytes()
    patch.write_bytes(old.replace(b"Description: ", b"Description: refreshed. ", 1))
    first.resume()
    _, err = first.strace.communicate()
    assert first.strace.returncode == 1 and "the source pin changed" in err and "patches/fx_common.patch" in err, err
    assert not (b.proj / "pins" / VERSION).exists()
    patch.write_bytes(old)
    done = b.cli("rebase", "--continue")
    assert done.returncode == 0, done.stderr
    assert b.state() == b.phases["continue"][2]


def test_a_rebase_killed_once_its_new_pin_is_in_place_leaves_the_pin_and_its_tree_to_the_user(tmp_path, pin_source):
    """Killed between the rename of the new pin into place and the removal of the progress file. Meanwhile the
    user works on the new pin (`--pin V apply`, hand edits, a new module, `--pin V refresh`): `rebase --abort`
    refuses to delete the finished pin, and `rebase --continue` removes the progress file only, the tree and
    the pin left as the user left them."""
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    os.symlink(pin_source.wheel, cache / "wheels" / pin_source.wheel.name)
    make_release(cache, pin_source, "9.0.1")
    proj = project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    env.update(SGLANG_OVERLAY_CACHE=str(cache), PYTHONDONTWRITEBYTECODE="1")

    def cli(*args: str, argv: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = (argv or []) + python_argv(*args)
        return subprocess.run(cmd, check=False, cwd=proj, env=env, capture_output=True, text=True)

    progress, new = proj / "pins" / ".rebase-9.0.1.json", proj / "pins" / "9.0.1"
    kill = [STRACE, "-f", "-qq", "-o", os.devnull, "-e", "trace=unlink", "-P", str(progress)]
    killed = cli("rebase", "9.0.1", argv=[*kill, "-e", "inject=unlink:signal=SIGKILL:when=1"])
    assert killed.returncode != 0 and progress.is_file() and new.is_dir(), killed.stderr
    assert "is in place" in cli("rebase", "--status").stdout
    tree = proj / ".sglang" / "sglang-9.0.1"
    assert cli("--pin", "9.0.1", "apply", "fx_topk").returncode == 0
    topk = tree / "python/sglang/srt/layers/moe/topk.py"
    topk.write_text(topk.read_text() + "# refreshed into the new pin\n")
    assert cli("--pin", "9.0.1", "refresh", "fx_topk").returncode == 0
    (tree / SARGS).write_text((tree / SARGS).read_text() + "# a hand edit\n")
    (tree / "python/sglang/srt/my_module.py").write_text("X = 1\n")
    mine = {p: p.read_bytes() for p in (topk, tree / SARGS, tree / "python/sglang/srt/my_module.py")}
    pin = {str(p): p.read_bytes() for p in new.rglob("*") if p.is_file()}
    assert "# refreshed into the new pin" in (new / "patches" / "fx_topk.patch").read_text()
    ab = cli("rebase", "--abort")
    assert ab.returncode == 2 and "does not delete a finished pin" in ab.stderr and f"{new}" in ab.stderr, ab.stderr
    assert progress.is_file() and {str(p): p.read_bytes() for p in new.rglob("*") if p.is_file()} == pin
    done = cli("rebase", "--continue")
    assert done.returncode == 0 and "rebased 0.5.17 -> 9.0.1" in done.stdout, done.stderr
    assert not progress.exists() and {str(p): p.read_bytes() for p in new.rglob("*") if p.is_file()} == pin
    assert {p: p.read_bytes() for p in mine} == mine
    assert "[x] fx_topk" in cli("--pin", "9.0.1", "status").stdout
