"""A rebase killed (SIGKILL, strace) at every step of its own process, then recovered: the next `rebase
--continue` (or, with no progress recorded yet, the same `rebase VERSION` again) ends exactly where an
uninterrupted run ends, with nothing left behind; `--abort` after a killed start leaves the project as before.

Two phases of one rebase on a fixture release made from the real 0.5.17 files: the start up to the first
conflict (making the release tree, the staging directory, the progress file, the conflict written into the
tree through its journal) and `--continue` after the resolution to the end (capture, the tree put back, the
remaining patches, the manifest last, the rename of the new pin into place). Kill points: every rename,
unlink, mkdir and rmdir of the command's own process that succeeds, the calls after which the disk looks
different (a kill at a write or an fsync leaves the disk a kill at the next of those leaves); calls that look
alike to a kill (in scratch directories, inside a removal, inside an unpacking) once each: the sweep stays
about a minute on two cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, tree_snapshot
from faultlib import STRACE, inject, python_argv, trace_points
from test_rebase import SARGS, make_release, pin_text, project

from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.fsio import TMP_SUFFIX

VERSION = "9.1.0"
WORKERS = 2
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

    def state(self) -> dict:
        """What an end state is made of: the project's files (progress without its start time), the release
        tree's files and journal, and anything a kill may leave behind (temp files, stale directories)."""
        out: dict = {}
        for p in sorted(self.proj.rglob("*")):
            rel = str(p.relative_to(self.proj))
            if not p.is_file() or rel.startswith(".sglang/"):
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
        out.append(
            {
                "start": (b.template, ["rebase", VERSION], stopped),
                "continue": (stopped_at, ["rebase", "--continue"], finished),
            }
        )
    return out


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


@pytest.mark.parametrize("phase", ["start", "continue"])
def test_a_kill_at_every_step_of_a_rebase_is_recovered(benches, phases, phase):
    start, args, _ = phases[0][phase]
    points = _points(benches[0], start, args)
    assert len(points) > 10, points

    def run(i: int) -> list[str]:
        b, problems = benches[i], []
        start_i, _, expected = phases[i][phase]
        for point in points[i::WORKERS]:
            b.reset(start_i)
            r = inject(python_argv(*args), b.env, b.proj, b.log, point, "signal=KILL")
            if not r.hit:
                problems.append(f"{point}: not reached (rc {r.rc})")
                continue
            # recovery: go on when a rebase is recorded, else start it again
            if (b.proj / "pins" / f".rebase-{VERSION}.json").exists():
                again = b.cli("rebase", "--continue")
            else:
                again = b.cli(*args) if phase == "start" else b.cli("rebase", "--status")
            if "Traceback" in again.stderr:
                problems.append(f"{point}: traceback\n{again.stderr[-1200:]}")
            got = b.state()
            if got != expected:
                diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
                problems.append(f"{point}: after recovery (rc {again.returncode}) differs in {diff[:6]}")
        return problems

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = [p for chunk in pool.map(run, range(WORKERS)) for p in chunk]
    assert not failed, f"{len(failed)} of {len(points)} kill points failed:\n" + "\n".join(failed[:12])


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
