"""Fault injection at every write-side system call of every command that changes a tree, and of recovery.

For each command (from a starting tree where it has real work to do, an exec bit alone included) strace lists
every rename, fsync, unlink, unlinkat, rmdir, mkdir, fchmod (chmod, fchmodat), write, and open-for-write its own
process makes; the command is then run again with a SIGKILL, a SIGINT (Ctrl-C) or an error (ENOSPC, EROFS,
EACCES) injected at exactly one call, for one call of each of four kinds drawn with a seed (faultlib.sample;
every kind with SGLANG_OVERLAY_FAULTS=kinds, every call with =all). After each: SIGINT and errors have rolled back by
themselves (exit 130 / exit 1 naming the OS error), a SIGKILL is rolled back by the next command (`recover`);
then the tree is byte-equal to the state before or after the command (modes included), the state describes
it, and nothing is left anywhere (temp files, journal, unused saved copies, new directories, scratch in
$TMPDIR). Points run on two workers, each with its own copy of the tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT
from faultlib import (
    ERRNO_TEXT,
    PATH_CHMOD,
    STATE_DIR,
    STRACE,
    SYSCALLS,
    Layout,
    Point,
    Saved,
    Snapshot,
    consistent,
    error_points,
    inject,
    is_output,
    leftovers,
    python_argv,
    record,
    reproduce,
    sample,
    trace_points,
)

FIX = ROOT / "tests" / "fixtures" / "engine"
WORKERS = 3
NEWDIR_FILE = "python/sglang/srt/fx_newpkg/sub/fx_new.py"  # an overlay file in directories the tree lacks
NEWDIR_ENTRY = """  - name: fx_newdir
    description: adds a module in a new package
    kind: overlay
    category: experimental
    overlay: [python/sglang/srt/fx_newpkg/sub/fx_new.py]
presets:"""
TOOL = "python/sglang/srt/fx_tool.sh"  # a file a diff creates executable: the smallest there is
EXEC_MANIFEST = "manifest_exec.yaml"  # the sweep's manifest plus fx_exec (kept out of the others' `--all`)
EXEC_ENTRY = """  - name: fx_exec
    description: adds an executable file
    kind: diff
    category: experimental
presets:"""
# the sweep's manifest pinning a release the tree is not (its pin moved on, or removed): `revert --all` then works
# from what the tree recorded (recorded.py), the one write path that reads no pin
OTHER_PIN_MANIFEST = "manifest_other_pin.yaml"
EXEC_PATCH = (
    "Description: Fixture fx_exec: a new file mode 100755\nOrigin: vendor\nForwarded: not-needed\n"
    f"Last-Update: 2026-12-02\n---\ndiff --git a/{TOOL} b/{TOOL}\nnew file mode 100755\nindex 0000000..1111111\n"
    f"--- /dev/null\n+++ b/{TOOL}\n@@ -0,0 +1,1 @@\n+#!/bin/sh\n"
)
MANAGED = (
    "python/sglang/srt/layers/moe/topk.py",
    "python/sglang/srt/server_args.py",
    "python/sglang/srt/utils/common.py",
    "python/sglang/srt/fx_overlay_module.py",
    "python/sglang/srt/fx_hopper_only.py",
    "python/sglang/_overlay_build.py",
    NEWDIR_FILE,
    TOOL,
    "python/sglang/_version.py",  # no command writes it, but a case's upgrade does: each case restores its own
)
SERVER_ARGS = "python/sglang/srt/server_args.py"


def _edit_args_a(tree: Path) -> None:
    f = tree / SERVER_ARGS
    f.write_text(f.read_text().replace("    # fixture a: top of ServerArgs\n", "    # fixture a: edited by hand\n"))


def _chmod_tool_off(tree: Path) -> None:
    (tree / TOOL).chmod(0o644)  # apply's only change is then the exec bit: bytes and state stay


def _edit_topk(tree: Path) -> None:
    f = tree / "python/sglang/srt/layers/moe/topk.py"
    f.write_text(f.read_text() + "# a hand edit\n")


def _upgrade_to_0_5_99(tree: Path) -> None:
    """An upgrade under the applied patches: _version.py and server_args.py are the new release's; the other
    files still hold what the tool wrote (go back), server_args.py is left as it is."""
    v = tree / "python/sglang/_version.py"
    v.write_text(v.read_text().replace("0.5.17", "0.5.99").replace("(0, 5, 17)", "(0, 5, 99)"))
    (tree / SERVER_ARGS).write_text("# the upgrade's own server_args.py\n")


@dataclass(frozen=True)
class Command:
    setup: tuple[tuple[str, ...], ...]  # run normally first: the starting tree
    args: tuple[str, ...]
    edit: object = None  # a hand edit made after the setup
    pending: bool = False  # start from a journal a kill left (the command under test is the recovery)
    manifest: str = "manifest.yaml"
    setup_manifest: str | None = None  # the setup's, when not `manifest` (a pin the tree is not: it cannot apply)
    rerun: bool = False  # after each fault (and recover), running the command again must reach `after`


COMMANDS = {
    "apply --all": Command((), ("apply", "--all")),
    "apply --set": Command((("apply", "--set", "args"),), ("apply", "--set", "default")),
    "revert --all": Command((("apply", "--all"),), ("revert", "--all")),
    "revert --force": Command((("apply", "--all"),), ("revert", "--all", "--force"), edit=_edit_topk),
    "toggle": Command((("apply", "--set", "default"),), ("toggle", "fx_overlay")),
    "refresh": Command((("apply", "--set", "args"),), ("refresh", "fx_args_a"), edit=_edit_args_a),
    "launch": Command(
        (("apply", "--set", "default"),),
        # an interpreter `which` finds but exec cannot start: refused at the start, after the switch under test
        # (one that is not there at all is refused before the tree changes)
        ("launch", "--patches", "fx_topk,fx_newdir", "--python", str(ROOT / "tests/fixtures/unstartable_python"))
        + ("--", "--port", "1"),
    ),
    "recover": Command((("apply", "--set", "default"),), ("recover",), pending=True),
    # the mode-only write path: the same bytes written again (temp, fchmod, rename) for the exec bit alone
    "apply exec bit": Command(
        (("apply", "fx_exec"),), ("apply", "fx_exec"), edit=_chmod_tool_off, manifest=EXEC_MANIFEST, rerun=True
    ),
    "apply new 100755": Command((), ("apply", "fx_exec"), manifest=EXEC_MANIFEST, rerun=True),
    # a tree of another release: the pin it was applied with is gone (a hand edit, so --force and its backup too),
    # or the tree was upgraded under its patches (a file left as the new release has it)
    "revert --all recorded": Command(
        (("apply", "--all"),),
        ("revert", "--all", "--force"),
        edit=_edit_topk,
        manifest=OTHER_PIN_MANIFEST,
        setup_manifest="manifest.yaml",
    ),
    "revert --all upgraded": Command((("apply", "--all"),), ("revert", "--all"), edit=_upgrade_to_0_5_99),
}


@dataclass
class Prepared:
    layout: Layout
    saved: Saved
    before: Snapshot
    after: Snapshot
    argv: list[str]
    rc: int  # of the command run without a fault


class Worker:
    def __init__(self, index: int, pinned_tree: Path, base: Path):
        self.dir = base / f"w{index}"
        self.tree = self.dir / "sglang-0.5.17"
        self.tmpdir = self.dir / "tmp"
        self.tmpdir.mkdir(parents=True)
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(self.tree)], check=True)
        self.project = self.dir / "proj"
        shutil.copytree(FIX, self.project)
        man = self.project / "manifest.yaml"
        # `--all` must be appliable here: the fixture's one conflict is left out
        man.write_text(
            man.read_text().replace("presets:", NEWDIR_ENTRY, 1).replace("    conflicts: [fx_topk_gated]\n", "")
        )
        (self.project / EXEC_MANIFEST).write_text(man.read_text().replace("presets:", EXEC_ENTRY, 1))
        other = man.read_text().replace("0.5.17", "0.5.99")  # the version, the wheel's name, the tag
        (self.project / OTHER_PIN_MANIFEST).write_text(other)
        (self.project / "patches" / "fx_exec.patch").write_text(EXEC_PATCH)
        new = self.project / "overlay" / NEWDIR_FILE
        new.parent.mkdir(parents=True)
        new.write_text("FX_NEW = True\n")
        self.pristine_project = {p: p.read_bytes() for p in self.project.rglob("*") if p.is_file()}
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SGLANG_OVERLAY", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"))
        }
        self.env.update(
            TMPDIR=str(self.tmpdir),
            PYTHONHASHSEED="0",
            PYTHONDONTWRITEBYTECODE="1",
            SGLANG_OVERLAY_CUDA_CAPABILITY="9.0",
            LC_ALL="C",
        )
        self.log = self.dir / "strace.log"
        self.cases: dict[str, Prepared] = {}

    def argv(self, *args: str, manifest: str = "manifest.yaml") -> list[str]:
        return python_argv("--manifest", str(self.project / manifest), "--tree", str(self.tree), *args)

    def cli(self, *args: str, check: bool = True, manifest: str = "manifest.yaml") -> subprocess.CompletedProcess:
        p = subprocess.run(
            self.argv(*args, manifest=manifest), cwd=self.dir, env=self.env, capture_output=True, text=True
        )
        assert not check or p.returncode == 0, f"{args}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p

    def prepare(self, name: str, kill_point: Point | None = None) -> Prepared:
        c = COMMANDS[name]
        subprocess.run(["git", "reset", "-q", "--hard", "v0.5.17"], cwd=self.tree, check=True)
        subprocess.run(["git", "clean", "-q", "-fdx"], cwd=self.tree, check=True)
        for p, data in self.pristine_project.items():
            p.write_bytes(data)
        for step in c.setup:
            self.cli(*step, manifest=c.setup_manifest or c.manifest)
        if c.edit:
            c.edit(self.tree)
        if c.pending:  # a kill just before the journal of `apply --all` is removed: all of it to roll back
            r = inject(self.argv("apply", "--all"), self.env, self.dir, self.log, kill_point, "signal=KILL")
            assert r.hit and (self.tree / STATE_DIR / "journal.json").exists(), r.stderr
        # the patch refresh rewrites, for every case: each starts from the project as shipped
        layout = Layout(self.tree, self.tmpdir, MANAGED, (self.project / "patches" / "fx_args_a.patch",))
        saved, before = Saved.take(layout), layout.snapshot()
        done = self.cli(*c.args, check=False, manifest=c.manifest)
        assert done.returncode == (2 if name == "launch" else 0), f"{name}: {done.stderr}"  # 2: cannot start it
        after = layout.snapshot()
        assert not leftovers(layout, after, after), leftovers(layout, after, after)
        assert not after.same_tree(before), f"{name} changed nothing: not a useful case"
        saved.restore(layout, before.listings)
        assert layout.snapshot().same_tree(before)
        prepared = Prepared(layout, saved, before, after, self.argv(*c.args, manifest=c.manifest), done.returncode)
        self.cases[name] = prepared
        return prepared

    # -- one injection -----------------------------------------------------------------------------------------
    def run_point(self, name: str, point: Point, action: str, persistent: bool) -> list[str]:
        case = self.cases[name]
        case.saved.restore(case.layout, case.before.listings)
        r = inject(case.argv, self.env, self.dir, self.log, point, action, persistent)
        where = f"{name} {action}{'+' if persistent else ''} at {point}"
        if not r.hit:
            return [f"{where}: the point was not reached (rc {r.rc}); the command's calls changed"]
        problems = [] if "Traceback" not in r.stderr else [f"traceback:\n{r.stderr[-1500:]}"]
        now = case.layout.snapshot()
        journal = (self.tree / STATE_DIR / "journal.json").exists()
        states = {"before": case.before, "after": case.after}
        found = self.which(name, case, now)
        output = is_output(point)
        if action == "signal=KILL":
            if r.rc != -9:
                problems.append(f"rc {r.rc}, expected a kill")
        elif action == "signal=INT":
            pending = name == "recover" and found == "before"  # stopped before the recovery began
            # once launch has started the server, a signal is the server's (forwarded to it)
            server = name == "launch" and found == "after" and r.rc == case.rc
            # a signal while the report of a finished change is written is ignored (issue 40 class 10)
            reported = output and found == "after" and r.rc == case.rc
            if (r.rc != 130 and not server and not reported) or (journal and not pending) or found is None:
                problems.append(f"rc {r.rc} (expected 130), journal left {journal}, tree is {found or 'neither'}")
        else:
            errno_name = action.split("=", 1)[1]
            done_anyway = output or "the tree carries the set" in r.stderr  # failed after the change was final
            if r.rc == 4 and output and found == "after":  # done; only its report was lost (EXIT_OUTPUT_LOST)
                pass
            elif r.rc not in (case.rc, 1) or (r.rc == case.rc != 1 and found != "after"):
                problems.append(f"rc {r.rc}, tree is {found or 'neither'}")
            elif r.rc == 1:
                # a lasting write error fails the writes to stderr too: then the exit code is all there is
                mute = output or (persistent and point.syscall == "write")
                if not mute and (ERRNO_TEXT[errno_name] not in r.stderr or "hint:" not in r.stderr):
                    problems.append(f"the message does not name the error and a fix:\n{r.stderr[-800:]}")
                kept = journal and ("is kept" in r.stderr or mute)
                if not kept and found not in ("before", "patch written") and not (done_anyway and found == "after"):
                    problems.append(f"exit 1 but the tree is {found or 'neither'} (journal {journal})")
        final = now
        if (
            action == "signal=KILL"
            or journal
            or found not in ("before", "after")
            or leftovers(case.layout, now, states[found])
        ):
            # A SIGINT or an error rolls back by itself; whatever it could not is the next command's to finish.
            rec = self.cli("recover", check=False)
            if rec.returncode != 0 or "Traceback" in rec.stderr:
                problems.append(f"the next command failed: rc {rec.returncode}\n{rec.stderr[-1500:]}")
            final = case.layout.snapshot()
        found = self.which(name, case, final)
        if found == "patch written":  # the tree's change was rolled back after the patch file was replaced
            again = self.cli("refresh", "fx_args_a", check=False)  # running refresh again finishes it
            final = case.layout.snapshot()
            found = "after" if again.returncode == 0 and final.same_tree(case.after) else None
        if found is None or (name == "recover" and found != "after"):
            problems.append(f"after `recover` the tree is {found or 'neither the state before nor after'}")
        else:
            problems += leftovers(case.layout, final, states[found])
            if consistent(case.layout, final) != consistent(case.layout, states[found]):  # a hand edit is expected
                problems += consistent(case.layout, final)
        c = COMMANDS[name]
        if c.rerun and not problems:
            again = self.cli(*c.args, check=False, manifest=c.manifest)
            snap = case.layout.snapshot()
            if (
                again.returncode != case.rc
                or not snap.same_tree(case.after)
                or leftovers(case.layout, snap, case.after)
            ):
                problems.append(f"running it again does not converge: rc {again.returncode}\n{again.stderr[-800:]}")
        return [f"{where}: {p}" for p in problems]

    @staticmethod
    def which(name: str, case: Prepared, snap: Snapshot) -> str | None:
        for label, s in (("before", case.before), ("after", case.after)):
            if snap.same_tree(s):
                return label
        if (
            name == "refresh"
            and snap.files == case.before.files
            and snap.state == case.before.state
            and snap.project == case.after.project
        ):
            return "patch written"
        return None


@pytest.fixture(scope="module")
def workers(pinned_tree, tmp_path_factory):
    if STRACE is None:
        pytest.fail("strace is not installed: `apt-get install -y strace` (.ci/run does it)")
    base = tmp_path_factory.mktemp("faults")
    # The runs do not write bytecode (so every run makes the same calls): compile it once, here.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "sglang_overlay")], check=True, capture_output=True
    )
    with ThreadPoolExecutor(WORKERS) as pool:
        ws = list(pool.map(lambda i: Worker(i, pinned_tree, base), range(WORKERS)))
    return ws


_points: dict[str, list[Point]] = {}


def journal_removal(w: Worker, setup) -> Point:
    """The call that removes the journal of `apply --all` from the tree `setup` makes: a kill there leaves the
    most to roll back (every file and the state written)."""
    subprocess.run(["git", "reset", "-q", "--hard", "v0.5.17"], cwd=w.tree, check=True)
    subprocess.run(["git", "clean", "-q", "-fdx"], cwd=w.tree, check=True)
    for step in setup:
        w.cli(*step)
    pts, _ = trace_points(w.argv("apply", "--all"), w.env, w.dir, w.log)
    return next(p for p in pts if p.syscall == "unlink" and "journal.json" in p.call)


def points_of(name: str, workers) -> list[Point]:
    if name not in _points:
        w = workers[0]
        kill = journal_removal(w, COMMANDS[name].setup) if COMMANDS[name].pending else None
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(lambda wk: wk.prepare(name, kill), workers))
        w.cases[name].saved.restore(w.cases[name].layout, w.cases[name].before.listings)
        pts, proc = trace_points(w.cases[name].argv, w.env, w.dir, w.log, SYSCALLS + PATH_CHMOD)
        assert proc.returncode == w.cases[name].rc, proc.stderr
        assert pts, f"{name}: strace saw no write-side calls"
        _points[name] = pts
    return _points[name]


def sweep(workers, name: str, action: str, persistent: bool = False) -> list[str]:
    """The sampled points of one fault (faultlib.sample), on the workers: what failed, worded."""
    fault = action + ("+" if persistent else "")
    pts = points_of(name, workers)
    if action.startswith("error="):
        pts = error_points(pts, action)
    w = workers[0]
    pts = sample(pts, f"{name} {fault}", {str(w.tmpdir): "scratch", str(w.project): "project"})

    def run(i: int) -> list[list[str]]:
        return [workers[i].run_point(name, p, action, persistent) for p in pts[i::WORKERS]]

    with ThreadPoolExecutor(WORKERS) as pool:
        results = [r for chunk in pool.map(run, range(WORKERS)) for r in chunk]
    failed = [r for r in results if r]
    record(name, fault, pts, len(failed))
    if not failed:
        return []
    return [f"{fault}: {len(failed)} of {len(pts)} points failed:\n" + "\n".join(f[0] for f in failed[:15])] + [
        "\n".join(failed[0])
    ]


ACTIONS = ("signal=KILL", "signal=INT", "error=ENOSPC", "error=EROFS", "error=EACCES")
# A case whose other sweeps would repeat another's: a new 100755 file is written as `apply --all` writes its new
# files, but for the mode given to its fchmod, which a kill and an error there cover.
ONLY = {"apply new 100755": ("signal=KILL", "error=EROFS")}
# an error that goes on from its call (a disk that stays full): where rollback itself fails
LASTING = {"apply --all", "revert --all", "revert --all recorded", "recover"}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_fault_at_every_kind_of_point(workers, name):
    """A SIGKILL, a SIGINT and each OS error at one call of each kind; for LASTING commands ENOSPC and EROFS
    from that call on too (rollback fails as well, the journal is kept, and once the condition is gone the next
    command rolls back)."""
    failed = [f for action in ONLY.get(name, ACTIONS) for f in sweep(workers, name, action)]
    if name in LASTING:
        failed += [f for action in ("error=ENOSPC", "error=EROFS") for f in sweep(workers, name, action, True)]
    assert not failed, f"{reproduce()}\n" + "\n\n".join(failed)


def test_ctrl_c_at_start_up(workers):
    """A SIGINT at every file the command opens from its first line of Python to taking the tree's lock (the
    imports, the manifest, the patches): exit 130, one line, no traceback, nothing changed."""
    w = workers[0]
    case = w.prepare("apply --all")
    opens = list(_all_opens(w, case))
    # from the last time Python opens the script (to read it): before its first line runs, Python's own
    # start-up answers a signal, and no code of this tool can be there to catch it
    start = max(i for i, p in enumerate(opens) if p.call.split(",")[1].strip().strip('"').endswith("/apply.py"))
    stop = next(i for i, p in enumerate(opens) if "/.sglang-overlay/lock" in p.call)
    points = opens[start + 1 : stop + 1]
    assert len(points) > 100, points
    # one open per directory read from (the interpreter's modules, each package of the tool's, the project)
    points = sample(points, "INT at start-up", {d: d for p in points for d in [os.path.dirname(p.call.split('"')[1])]})

    def run(i: int) -> list[str]:
        out = []
        wk = workers[i]
        c = wk.cases.setdefault("apply --all", wk.prepare("apply --all") if i else case)
        for p in points[i::WORKERS]:
            c.saved.restore(c.layout, c.before.listings)
            r = inject(c.argv, wk.env, wk.dir, wk.log, p, "signal=INT")
            snap = c.layout.snapshot()
            if (
                not r.hit
                or r.rc != 130
                or "Traceback" in r.stderr
                or r.stderr.strip() != "interrupted"
                or not snap.same_tree(c.before)
            ):
                out.append(f"{p}: rc {r.rc}, hit {r.hit}, stderr {r.stderr[-600:]!r}")
        return out

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = [f for chunk in pool.map(run, range(WORKERS)) for f in chunk]
    record("apply --all", "INT at start-up", points, len(failed))
    assert not failed, f"{reproduce()}\n" + "\n".join(failed[:10])


def _all_opens(w: Worker, case: Prepared) -> list[Point]:
    """Every openat of the command's own process, reading or writing (start-up opens mostly read)."""
    case.saved.restore(case.layout, case.before.listings)
    proc = subprocess.run(
        [STRACE, "-o", str(w.log), "-e", "trace=openat", *case.argv],
        cwd=w.dir,
        env=w.env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in w.log.read_text().splitlines() if line.startswith("openat(")]
    return [Point("openat", n, line) for n, line in enumerate(lines, 1)]
