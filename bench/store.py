"""The JSONL result store: one JSON object per line, appended and fsync'ed as soon as it is measured.

Record types (field "type"):
  run        the command, argv, config, signature and host of a run (again on each --resume)
  arm        an arm a plan added while running (a bisect probe, an ablate confirmation)
  start      one server start: arm, arm key, round, fingerprint, url, startup seconds and their breakdown,
             CPU placement, server version; warmup_start: the invocation's throwaway start
  rep        one repetition's metrics (warmup: true ones are kept for transparency, never used in statistics)
  unit_done  a server start whose repetitions all completed (only these units count)
  identity_warning  the server's overlay identity disagrees with the arm (or is missing)
  stale      a completed start whose fingerprint is not what its arm launches now (a patch was edited since):
             left out of every statistic, its round measured again; with "why": "unpaired", a sequential start
             of an unchanged arm set aside beside them (compared across starts, it would set another
             invocation's time against the re-measured arm's)
  failure    what went wrong and the launcher's output tail
  conclusion what the plan concluded (ab verdicts, ablate findings, the bisection and its confirmations)
A run interrupted mid-unit leaves rep records without a unit_done: they stay in the file and are ignored by
statistics; --resume re-runs that unit.

Derived files (report.md, plot.png, command.txt) are written whole (write_whole); one process measures into a
run dir at a time (hold_run_dir).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sglang_overlay.scratch import alive

from .errors import RecordError, UsageError, WriteFailed
from .stats import start_value

TAIL = 1 << 20  # how far back a cut last line is looked for (a record is a few KB)


def append(path: Path, record: dict) -> None:
    """One record as one whole line, fsync'ed; WriteFailed (naming the file and the error) when the OS refuses it,
    with the store as it was: a full disk's short write is cut back off, so that the line a resumed run appends
    next is not glued onto half a record (which read() would then find in the middle of the store)."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    size = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = _whole_lines(fd)
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            if size is not None:
                try:
                    os.ftruncate(fd, size)  # truncating frees space: it works on a full disk
                except OSError:
                    pass
            raise
        finally:
            os.close(fd)
    except OSError as e:
        raise WriteFailed(
            f"cannot write {path}: {e.strerror or e}; free space (or make it writable) and continue with "
            f"--resume {path.parent}: the store holds every whole record before this one"
        ) from None


def _whole_lines(fd: int) -> int:
    """The store's size, after cutting off a last line without its newline (a crash or full disk mid-write)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = max(0, size - TAIL)
    nl = os.pread(fd, size - start, start).rfind(b"\n")
    if nl < 0 and start > 0:
        return size  # not found in the tail: leave it (read() reports it)
    os.ftruncate(fd, start + nl + 1)
    return start + nl + 1


# the keys view() reads without a default, per record type: a record lacking one is refused with its line, not
# met later as a KeyError deep in a report
_NEEDS: dict[str, tuple[tuple[str, type | tuple[type, ...]], ...]] = {
    "run": (("run_id", str),),
    "start": (("start_id", str), ("arm_key", str), ("arm", str), ("round", int)),
    "rep": (("start_id", str), ("metrics", dict)),
    "unit_done": (("start_id", str),),
    "arm": (("key", str), ("name", str), ("patches", list)),
}


def _checked(path: Path, n: int, rec: object) -> dict:
    if not isinstance(rec, dict):
        raise RecordError(f"{path}:{n}: not a record (a JSON object), but {type(rec).__name__}: {json.dumps(rec)[:80]}")
    for key, kind in _NEEDS.get(str(rec.get("type")), ()):
        if not isinstance(rec.get(key), kind) or isinstance(rec.get(key), bool):
            raise RecordError(
                f"{path}:{n}: a {rec['type']!r} record without a valid {key!r} (got {rec.get(key)!r}): the line "
                "was edited or comes from another tool; remove it, or restore the store from its copy"
            )
    return rec


def read(path: Path) -> Iterator[dict]:
    if not path.exists():
        return
    if not path.is_file():
        raise RecordError(f"{path}: not a file (the store is a run directory's results.jsonl)")
    with path.open() as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # A line cut by a kill -9 mid-write: everything before it is intact.
                if f.read().strip():
                    raise RecordError(
                        f"{path}:{n}: corrupt JSONL line in the middle of the store (not one a kill cuts, which is "
                        "always the last): remove that line to read the rest"
                    ) from None
                return
            yield _checked(path, n, rec)


@dataclass
class Unit:
    arm_key: str
    round: int
    start_id: str
    arm: str
    fingerprint: str = ""
    reps: list[dict] = field(default_factory=list)  # metrics dicts of non-warmup reps
    wall_s: float = 0.0
    startup_s: float = 0.0
    nccl_env_lines: list[str] = field(default_factory=list)
    startup: dict = field(default_factory=dict)  # bench.startup.breakdown of this start
    placement: dict = field(default_factory=dict)
    machine_warm: bool = True  # False: this boot's first start of the measurement (JIT, graph caches cold)
    # which invocation measured it: "reused from PATH", or "invocation N" (the Nth run record: a --resume adds one)
    invocation: str = ""

    def value(self, metric: str) -> float | None:
        """The start's value of `metric` (bench.stats.start_value of its measured repetitions)."""
        return start_value([r.get(metric) for r in self.reps])


def start_values(units: Iterable[Unit], metric: str) -> list[float]:
    """One value per start that has the metric, in the order given."""
    return [v for u in units if (v := u.value(metric)) is not None]


@dataclass
class StoreView:
    runs: list[dict]
    units: dict[tuple[str, int], Unit]  # completed units only
    failures: list[dict]
    conclusions: list[dict]
    partial_reps: int  # reps of starts that never completed (interrupted)
    identity_warnings: list[dict] = field(default_factory=list)
    warmup_units: list[Unit] = field(default_factory=list)  # throwaway starts: start-up times only
    arms: list[dict] = field(default_factory=list)  # the run's arms and those plans added

    def units_of(self, arm_key: str) -> list[Unit]:
        return [u for (k, _), u in sorted(self.units.items(), key=lambda kv: kv[0][1]) if k == arm_key]


def view(records: Iterable[dict], signature: str | None = None) -> StoreView:
    """Completed units; with `signature`, only units measured under that measurement signature."""
    records = list(records)
    sig_of_run = {r["run_id"]: r.get("signature") for r in records if r.get("type") == "run"}
    starts, reps, done = {}, defaultdict(list), {}
    stale = {r.get("start_id") for r in records if r.get("type") == "stale"}
    invocation: dict[str, str] = {}
    n_runs = 0
    for r in records:
        t = r.get("type")
        n_runs += t == "run"
        if r.get("start_id") in stale:
            continue
        if t == "start":
            starts[r["start_id"]] = r
            invocation[r["start_id"]] = (
                f"reused from {r['reused_from']}" if r.get("reused_from") else f"invocation {max(n_runs, 1)}"
            )
        elif t == "rep" and not r.get("warmup"):
            reps[r["start_id"]].append(r)
        elif t == "unit_done":
            done[r["start_id"]] = r
    units: dict[tuple[str, int], Unit] = {}
    warm: list[Unit] = []
    for sid, d in done.items():
        s = starts.get(sid)
        if s is None:
            continue
        if signature is not None and sig_of_run.get(s.get("run_id"), s.get("signature")) != signature:
            continue
        u = Unit(
            arm_key=s["arm_key"],
            round=s["round"],
            start_id=sid,
            arm=s["arm"],
            fingerprint=s.get("fingerprint", ""),
            reps=with_late([x["metrics"] for x in reps[sid]]),
            wall_s=d.get("wall_s", 0.0),
            startup_s=s.get("startup_s", 0.0),
            nccl_env_lines=d.get("nccl_env_lines") or [],
            startup=s.get("startup") or {},
            placement=s.get("placement") or {},
            machine_warm=s.get("machine_warm", True),
            invocation=invocation[sid],
        )
        if s.get("warmup_start"):
            warm.append(u)
        else:
            units.setdefault((u.arm_key, u.round), u)
    partial = sum(len(v) for sid, v in reps.items() if sid not in done)
    runs = [r for r in records if r.get("type") == "run"]
    arms: dict[str, dict] = {}
    for r in runs[:1] + [r for r in records if r.get("type") == "arm"]:
        for a in r.get("arms", [r] if r.get("type") == "arm" else []):
            arms.setdefault(a["key"], a)
    return StoreView(
        runs=runs,
        units=units,
        failures=[r for r in records if r.get("type") == "failure"],
        conclusions=[r for r in records if r.get("type") == "conclusion"],
        partial_reps=partial,
        identity_warnings=[r for r in records if r.get("type") == "identity_warning"],
        warmup_units=warm,
        arms=list(arms.values()),
    )


# Derived repetition metrics: a metric's value in the later half of a start's measured repetitions, under a
# name of its own, so that its start value compares what a start looks like after serving most of its
# requests. A cost that grows over a start (a leak) or appears only after some requests (a cache that fills)
# moves it at full size, while in the start value over every repetition it is diluted by the earlier half.
LATE = {"step_ms_b1_late": "step_ms_b1"}


def late_from(n_reps: int) -> int:
    """The first repetition of the later half (with an odd count the middle one is left out)."""
    return (n_reps + 1) // 2


def with_late(reps: list[dict]) -> list[dict]:
    """Each repetition of the later half with LATE's metrics added (the earlier half has none of them)."""
    first = late_from(len(reps))
    return [r if i < first else {**r, **{k: r[b] for k, b in LATE.items() if b in r}} for i, r in enumerate(reps)]


# -- derived files: written whole or not at all ------------------------------------------------------------------

TMP_SUFFIX = ".tmp"


def is_temp(name: str) -> bool:
    """Whether a file name is a write_whole temp (`.NAME.PID-RAND.tmp`): readers and listings skip these."""
    if not (name.startswith(".") and name.endswith(TMP_SUFFIX)):
        return False
    pid = name[: -len(TMP_SUFFIX)].rpartition(".")[2].partition("-")[0]
    return pid.isdigit()


def _reap(path: Path) -> None:
    """Remove the temps of `path` whose writer is dead (a kill between write and rename)."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for n in names:
        if n.startswith(prefix) and is_temp(n):
            pid = int(n[len(prefix) :].partition("-")[0])
            if pid != os.getpid() and not alive(pid):
                try:
                    os.unlink(path.parent / n)
                except OSError:
                    pass


def write_whole(path: Path, data: bytes, fix: str) -> None:
    """Write `path` through a temp of this writer's own beside it, fsync'ed, renamed over it. Two writers of one
    file each rename a whole file of their own, so the last rename wins and neither fails (issue 40, class 2).
    An OS error is WriteFailed naming the file and `fix`, with the previous file as it was."""
    from sglang_overlay import interrupts

    path = Path(path)
    tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{TMP_SUFFIX}"
    try:
        with interrupts.held():
            _reap(path)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            _after_temp(tmp)
            os.rename(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise WriteFailed(f"cannot write {path}: {e.strerror or e}; {fix}; {path} is as it was") from None


def _after_temp(tmp: Path) -> None:
    """A seam for tests: called with the whole temp, just before its rename."""


def png_bytes(fig, dpi: int) -> bytes:
    """A matplotlib figure as PNG bytes, for write_whole (savefig to a name would truncate it first)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def check_writable(out_dir: Path) -> None:
    """Refuse (exit 2) before any server starts when the run dir cannot take its files."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out_dir}: {e.strerror or e}; make it writable or choose another --out") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out_dir}: not writable; make it writable or choose another --out")


_HELD: list[int] = []  # never closed: the lock lasts as long as the process


def hold_run_dir(out_dir: Path) -> None:
    """One measuring process per run dir: an flock on its results.jsonl until this process exits (the kernel
    drops it on any death). A second process is refused (exit 2), never interleaved into the same rounds."""
    while _HELD:  # a process measures one run at a time (tests call main() again)
        os.close(_HELD.pop())
    check_writable(out_dir)
    store = out_dir / "results.jsonl"
    try:
        fd = os.open(store, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise UsageError(
            f"--out {out_dir}: cannot write {store}: {e.strerror or e}; free space, make it writable or choose "
            "another --out (nothing was started)"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(
            f"--out {out_dir}: another bench run is measuring into it (it holds {store}); wait for it to end, "
            "then --resume it, or choose another --out"
        ) from None
    _HELD.append(fd)
