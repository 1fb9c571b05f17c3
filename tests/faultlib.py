"""Fault injection with strace: list every write-side system call a command makes, then stop or fail it there.

`trace_points` runs the command once under strace and returns one Point per call of the syscalls in SYSCALLS
made by the command's own process (openat only when it opens for writing); `inject` runs it again with
strace's `-e inject=SYSCALL:...:when=N`, which acts on exactly the N-th call of that syscall. A signal is
injected without `-f` (strace 6.1 does not deliver injected signals under --seccomp-bpf, and children are then
not touched); an error with `-f --seccomp-bpf` (fast), except where a child process would reach its own N-th
call first (strace counts per process), where `-f` is left out so the command's own call is the one hit.

A Case is one command from one starting tree: `before` and `after` snapshots of every file the command may
touch plus the listings of the directories where it could leave something, and `check` compares a tree with
them: byte-equal to one of the two, nothing else anywhere (no temp file, no journal, no unreferenced saved
copy, no scratch directory in $TMPDIR, no new directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRACE = shutil.which("strace")
SYSCALLS = ("openat", "write", "rename", "fsync", "syncfs", "unlink", "unlinkat", "rmdir", "mkdir", "fchmod")
# a mode set on a path, not on the temp file's descriptor (fchmod): traced where a sweep asks for it, the engine's,
# so that an exec bit ever set in place would be swept too (the rebase sweeps' fetch makes one, left as it was)
PATH_CHMOD = ("chmod", "fchmodat")
ERROR_SYSCALLS = {  # where each error is one the kernel really returns
    "ENOSPC": ("openat", "write", "fsync", "syncfs", "mkdir", "rename"),  # syncfs: a write-back error
    "EROFS": ("openat", "mkdir", "rename", "unlink", "unlinkat", "rmdir", "fchmod", "chmod", "fchmodat"),
    "EACCES": ("openat", "mkdir", "rename", "unlink", "unlinkat", "rmdir", "fchmod", "chmod", "fchmodat"),
}
ERRNO_TEXT = {"ENOSPC": "No space left on device", "EROFS": "Read-only file system", "EACCES": "Permission denied"}
STATE_DIR = ".sglang-overlay"
STATE_NAMES = {"lock", ".gitignore", "state.json", "objects", "logs", "backups"}
_CALL = re.compile(r"^(\d+) +(\w+)\((.*)$")


@dataclass(frozen=True)
class Point:
    syscall: str
    n: int  # strace's when=N: the N-th call of `syscall` by the command's own process
    call: str  # the traced line, to say where a failure happened
    child_first: bool = False  # a child reaches its own N-th call of `syscall` before the command does

    def __str__(self) -> str:
        return f"{self.syscall}#{self.n} {self.call[:150]}"


def quiet_memos(env: dict) -> dict:
    """The tool's memos off: a memo one run wrote and the next found would change the calls counted."""
    return {**env, "SGLANG_OVERLAY_NO_MEMO": "1"}


def trace_points(
    argv: list[str], env: dict, cwd: Path, log: Path, syscalls: tuple[str, ...] = SYSCALLS
) -> tuple[list[Point], subprocess.CompletedProcess]:
    proc = subprocess.run(
        [STRACE, "-f", "--seccomp-bpf", "-o", str(log), "-e", "trace=" + ",".join(syscalls), *argv],
        cwd=cwd,
        env=quiet_memos(env),
        capture_output=True,
        text=True,
    )
    lines = log.read_text().splitlines()
    main = _main_pid(lines)
    counts: dict[tuple[str, str], int] = {}
    first_at: dict[tuple[str, int], str] = {}  # (syscall, n) -> pid that made its n-th call first
    points = []
    for line in lines:
        m = _CALL.match(line)
        if not m:  # "<... resumed>", signals, exits
            continue
        pid, name, args = m.groups()
        if name not in syscalls:
            continue
        n = counts[(pid, name)] = counts.get((pid, name), 0) + 1
        first_at.setdefault((name, n), pid)
        if pid != main or (name == "openat" and not re.search(r"O_WRONLY|O_RDWR|O_CREAT", args)):
            continue
        points.append(Point(name, n, f"{name}({args}", first_at[(name, n)] != main))
    return points, proc


def is_output(point: Point) -> bool:
    """A write to the command's stdout or stderr: an error there can only cost the message, not the tree."""
    return point.syscall == "write" and point.call.startswith(("write(1,", "write(2,"))


def error_points(points: list[Point], action: str) -> list[Point]:
    """The points where the kernel can return the error `action` names ("error=ENOSPC")."""
    return [p for p in points if p.syscall in ERROR_SYSCALLS[action.split("=", 1)[1]]]


# -- sampling ---------------------------------------------------------------------------------------------------
# Points fall into kinds (syscall x the step it serves: the journal, the state, a tree file, its temp file, a
# scratch directory, the output...). By default a sweep tries PER_SWEEP kinds, one point each, drawn with a seed:
# each run tries others, and CI stays within its time. FAULTS=kinds tries one point of every kind, FAULTS=all
# every point, FAULTS=N N kinds.
FAULTS_ENV, SEED_ENV = "SGLANG_OVERLAY_FAULTS", "SGLANG_OVERLAY_FAULTS_SEED"
_MODE = os.environ.get(FAULTS_ENV, "")
EVERY_POINT = _MODE == "all"
PER_SWEEP = None if _MODE == "kinds" else int(_MODE) if _MODE.isdigit() and int(_MODE) > 0 else 4
SEED = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(10**6))
_STATE_FILE = re.compile(r"/\.sglang-overlay/([^/\"]+)")
TMP_MARK = ".sglang-overlay-tmp"


def reproduce() -> str:
    """What a failing sweep prints: how to run the same points again, or all of them."""
    if EVERY_POINT:
        return f"every point was tried ({FAULTS_ENV}=all)"
    per = "one point of every kind" if PER_SWEEP is None else f"{PER_SWEEP} kinds a sweep"
    return (
        f"points sampled ({per}) with {SEED_ENV}={SEED}: set it to try the same again; "
        f"{FAULTS_ENV}=kinds for every kind, =all for every point"
    )


def kind(point: Point, path: str, places: dict[str, str]) -> tuple[str, str]:
    """(syscall, step): `path` is what the call names, or the file its descriptor was opened on; `places` maps a
    directory (the scratch $TMPDIR, the project, the cache) to its step."""
    if is_output(point):
        return point.syscall, "output"
    m = _STATE_FILE.search(path)
    if m:  # the state directory's own files, named without their digits (backups, objects, pids)
        return point.syscall, "state " + re.sub(r"[0-9a-f]{6,}|\d+", "N", m.group(1))
    place = next((places[d] for d in sorted(places, key=len, reverse=True) if d in path), "tree")
    what = "temp" if TMP_MARK in path else "dir" if point.syscall in ("mkdir", "rmdir") else "file"
    return point.syscall, f"{place} {what}"


def sample(points: list[Point], label: str, places: dict[str, str] | None = None) -> list[Point]:
    """One point of each of PER_SWEEP kinds (every kind with FAULTS=kinds), drawn with SEED and `label` (each sweep
    its own draw); all with FAULTS=all."""
    if EVERY_POINT:
        return points
    fds: dict[str, str] = {}
    groups: dict[tuple[str, str], list[Point]] = {}
    for p in points:
        path = p.call
        if p.syscall == "openat" and (fd := re.search(r"= (\d+)$", p.call)):
            fds[fd.group(1)] = p.call
        elif fd := re.match(r"(?:write|fsync|fchmod)\((\d+)", p.call):
            path = fds.get(fd.group(1), p.call)
        groups.setdefault(kind(p, path, places or {}), []).append(p)
    rng = random.Random(f"{SEED} {label}")
    kinds = sorted(groups)
    if PER_SWEEP is not None and len(kinds) > PER_SWEEP:
        kinds = sorted(rng.sample(kinds, PER_SWEEP))
    chosen = {(p.syscall, p.n) for k in kinds for p in [rng.choice(groups[k])]}
    return [p for p in points if (p.syscall, p.n) in chosen]


FAULT_COUNTS: list[dict] = []  # filled by the sweeps: what each tried and what passed (conftest prints it)


def record(command: str, fault: str, points: list[Point], failed: int) -> None:
    by_call: dict[str, int] = {}
    for p in points:
        by_call[p.syscall] = by_call.get(p.syscall, 0) + 1
    FAULT_COUNTS.append(
        {
            "command": command,
            "fault": fault,
            "points": len(points),
            "passed": len(points) - failed,
            "by_syscall": by_call,
        }
    )


@dataclass
class Injected:
    point: Point
    action: str
    rc: int
    stdout: str
    stderr: str
    hit: bool  # strace reports the injection in the command's own process


def inject(
    argv: list[str],
    env: dict,
    cwd: Path,
    log: Path,
    point: Point,
    action: str,
    persistent: bool = False,
    times: int = 1,
) -> Injected:
    """`action`: "signal=KILL", "signal=INT", "error=ENOSPC", ... at exactly that call (or from it on; or at it and
    the `times - 1` calls of that syscall after it: a caller that retries, as zipfile's open does)."""
    signal_ = action.startswith("signal=")
    follow = [] if signal_ or point.child_first else ["-f", "--seccomp-bpf"]
    when = f"{point.n}+" if persistent else f"{point.n}..{point.n + times - 1}" if times > 1 else str(point.n)
    cmd = [
        STRACE,
        *follow,
        "-o",
        str(log),
        "-e",
        f"trace={point.syscall}",
        "-e",
        f"inject={point.syscall}:{action}:when={when}",
        *argv,
    ]
    proc = subprocess.run(cmd, cwd=cwd, env=quiet_memos(env), capture_output=True, text=True, timeout=120)
    text = log.read_text()
    if signal_:
        sig = action.split("=", 1)[1]
        hit = (f"killed by SIG{sig}" in text) if sig == "KILL" else (f"--- SIG{sig} " in text)
    else:
        own = [line for line in text.splitlines() if "(INJECTED)" in line]
        if follow:
            main = _main_pid(text.splitlines())
            own = [line for line in own if line.split(None, 1)[0] == main]
        hit = bool(own)
    return Injected(point, action, proc.returncode, proc.stdout, proc.stderr, hit)


@dataclass
class Held:
    """A command stopped (SIGSTOP) just after one of its calls returned, until the test resumes it."""

    strace: subprocess.Popen
    pid: int  # the command's own process

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.strace.wait()


def hold(argv: list[str], env: dict, cwd: Path, log: Path, point: Point) -> Held:
    """Start `argv` and return once it is stopped right after `point`: a second process then acts at that
    moment on any machine, however loaded (a delay would be a bet on speed). Only the command's own process
    is traced, as `inject` does for a signal."""
    action = f"inject={point.syscall}:signal=SIGSTOP:when={point.n}"
    cmd = [STRACE, "-o", str(log), "-e", f"trace={point.syscall}", "-e", action, *argv]
    log.unlink(missing_ok=True)  # a log of an earlier hold would say "stopped" already
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=quiet_memos(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while not (log.is_file() and "--- stopped by SIGSTOP ---" in log.read_text()):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"{point}: never reached (rc {proc.returncode})\n{err[-1500:]}")
        time.sleep(0.02)  # polls a condition, with no deadline: the stop comes however slow the machine
    (pid,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return Held(proc, int(pid))


def _main_pid(lines: list[str]) -> str | None:
    # The command waits for its children, so its own exit is the log's last line.
    return lines[-1].split(None, 1)[0] if lines else None


# -- snapshots --------------------------------------------------------------------------------------------------
def sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


@dataclass
class Snapshot:
    files: dict[str, str | None]  # tree-relative path -> sha256 (None: absent)
    listings: dict[str, tuple[str, ...]]  # watched directory -> sorted names (missing: ())
    state: bytes | None
    backups: tuple[str, ...]
    project: dict[str, str | None]  # project files a command may rewrite (refresh)
    modes: dict[str, int | None] = field(default_factory=dict)  # tree-relative path -> permission bits

    def same_tree(self, other: Snapshot) -> bool:
        # the mode too: a change may be an exec bit only (a diff's `new file mode 100755`)
        return (
            self.files == other.files
            and self.modes == other.modes
            and self.state == other.state
            and self.project == other.project
        )


@dataclass
class Layout:
    """Where one command can write: the files it may change and the directories to look for leftovers in."""

    tree: Path
    tmpdir: Path
    files: tuple[str, ...]  # tree-relative paths
    project_files: tuple[Path, ...] = ()
    dirs: tuple[Path, ...] = field(init=False)

    def __post_init__(self):
        dirs = set()
        for f in self.files:
            p = (self.tree / f).parent
            while p != self.tree and self.tree in p.parents:
                dirs.add(p)
                p = p.parent
        dirs |= {p.parent for p in self.project_files}
        self.dirs = tuple(sorted(dirs))

    def snapshot(self) -> Snapshot:
        files = {f: sha(_read(self.tree / f)) for f in self.files}
        listings = {str(d): tuple(sorted(os.listdir(d))) if d.is_dir() else () for d in self.dirs}
        sd = self.tree / STATE_DIR
        # a backup directory is named by time and pid: compare what each holds, not the names
        backups = (
            tuple(
                sorted(
                    str(p.relative_to(sd / "backups")).split("/", 1)[1] + " " + sha(p.read_bytes())
                    for p in (sd / "backups").rglob("*")
                    if p.is_file()
                )
            )
            if (sd / "backups").is_dir()
            else ()
        )
        return Snapshot(
            files,
            listings,
            _read(sd / "state.json"),
            backups,
            {str(p): sha(_read(p)) for p in self.project_files},
            {f: _mode(self.tree / f) for f in self.files},
        )


def _mode(p: Path) -> int | None:
    try:
        return stat.S_IMODE(os.lstat(p).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read(p: Path) -> bytes | None:
    try:
        return p.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def leftovers(layout: Layout, now: Snapshot, like: Snapshot) -> list[str]:
    """What is in the tree, its state directory or $TMPDIR that neither the start nor the end of the command has."""
    out = []
    for d, names in now.listings.items():
        if names != like.listings[d]:
            out.append(f"{d}: {sorted(set(names) ^ set(like.listings[d]))}")
    sd = layout.tree / STATE_DIR
    if sd.is_dir():
        out += [f"{sd}/{n}" for n in os.listdir(sd) if n not in STATE_NAMES]
        state = json.loads(now.state) if now.state else {"files": {}}
        bases = {r["base"] for r in state["files"].values() if r["base"]}
        objects = set(os.listdir(sd / "objects")) if (sd / "objects").is_dir() else set()
        # copies beyond the state's stay (the last change's, or a killed one's) while whole: the next change
        # takes them for saved (ObjectStore)
        out += [f"objects/{n}" for n in sorted(objects - bases) if sha(_read(sd / "objects" / n)) != n]
        out += [f"missing objects/{n}" for n in sorted(bases - objects)]
    if now.backups != like.backups:
        out.append(f"backups: {now.backups} (expected {like.backups})")
    out += [f"$TMPDIR/{n}" for n in os.listdir(layout.tmpdir)]
    return out


def consistent(layout: Layout, snap: Snapshot) -> list[str]:
    """The state describes the tree: every managed file holds what the state says was written."""
    if not snap.state:
        return []
    state = json.loads(snap.state)
    bad = []
    for f, rec in state["files"].items():
        rel = f[len("python/") :] if (layout.tree / "sglang").is_dir() else f
        if snap.files.get(rel, sha(_read(layout.tree / rel))) != rec["applied"]:
            bad.append(f"{f}: holds something else than state.json records")
    return bad


# -- restoring a starting tree ----------------------------------------------------------------------------------
@dataclass
class Saved:
    """Everything a command may change, byte for byte, so the next injection starts from the same tree."""

    files: dict[Path, bytes | None]
    state_dir: dict[str, bytes | None] | None  # relative path -> bytes (None: a directory); None: no state dir
    modes: dict[Path, int | None]

    @classmethod
    def take(cls, layout: Layout) -> Saved:
        files = {layout.tree / f: _read(layout.tree / f) for f in layout.files}
        files.update({p: _read(p) for p in layout.project_files})
        sd = layout.tree / STATE_DIR
        tree = None
        if sd.is_dir():
            tree = {str(p.relative_to(sd)): None if p.is_dir() else p.read_bytes() for p in sorted(sd.rglob("*"))}
        return cls(files, tree, {p: _mode(p) for p in files})

    def restore(self, layout: Layout, listings: dict[str, tuple[str, ...]]) -> None:
        sd = layout.tree / STATE_DIR
        shutil.rmtree(sd, ignore_errors=True)
        if self.state_dir is not None:
            sd.mkdir()
        for rel, data in (self.state_dir or {}).items():
            p = sd / rel
            if data is None:
                p.mkdir(parents=True, exist_ok=True)
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        for p, data in self.files.items():
            if data is None:
                if p.exists() or p.is_symlink():
                    p.unlink()
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                if _read(p) != data:
                    p.write_bytes(data)
                mode = self.modes[p]
                if mode is not None and _mode(p) != mode:
                    os.chmod(p, mode)
        for d, names in sorted(listings.items(), key=lambda kv: -len(kv[0])):
            d = Path(d)
            if not names and d.is_dir() and not os.listdir(d):
                d.rmdir()
            elif d.is_dir():
                for n in set(os.listdir(d)) - set(names):
                    q = d / n
                    shutil.rmtree(q) if q.is_dir() and not q.is_symlink() else q.unlink()
        for n in os.listdir(layout.tmpdir):
            q = layout.tmpdir / n
            shutil.rmtree(q) if q.is_dir() else q.unlink()


def python_argv(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "apply.py"), *args]
