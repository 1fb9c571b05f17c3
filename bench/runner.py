"""Server starts: one unit of work = one start of one arm, its repetitions, and its records in the JSONL store.

A start goes through the tool's `launch` (bench.launcher), waits for the url line, places the server's
processes on CPUs (bench.machine), runs `warmup_reps` discarded and `reps_per_start` measured repetitions
(bench.workload), records where the start-up seconds went (bench.machine) and stops the server.

StoreLab is the bench.replication.Lab over this: it serves starts from the store when they are there (--resume,
--reuse) and measures only what is missing. An invocation's first real start follows one throwaway start (a
machine's first start pays JIT and CUDA-graph compilation: 361 s against 62-77 s warm on an H200), unless this
boot served a start of the same measurement minutes ago (a marker keyed by signature and boot id).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from . import launcher, machine, store
from .errors import BudgetExhausted, RunAborted, WriteFailed
from .launcher import ArmSpec, LaunchConfig
from .replication import WARM_START_ESTIMATE_S
from .stats import START_VALUE, cv
from .workload import RepMetrics, Workload, WorkloadError, run_rep, server_info

# Every measured server: step times in /server_info; EAGLE phase timing (with the eagle_profiling patch).
STEP_TIME_ENV = {"SGLANG_RECORD_STEP_TIME": "1"}
PHASE_TIMING_ENV = {"SGLANG_EAGLE_PHASE_TIMING": "1"}
# Set and dict orders then match between starts; ASLR and the rest still vary (several starts per arm).
HASH_SEED_ENV = {"PYTHONHASHSEED": "0"}
# Our SIGTERM reaches the scheduler first; SGLang takes it for a crash and sleeps 5 s before its diagnostics.
QUIET_STOP_ENV = {"SGLANG_PYSPY_DUMP_BEFORE_CRASH": "0", "SGLANG_CUDA_COREDUMP_BEFORE_CRASH": "0"}
# Bytecode: where PYTHONDONTWRITEBYTECODE is set or a tree is read-only, each server process compiles SGLang again
# at every start (30-32 s against 13-16 s on a CPU: bench/results/pycache_cpu). The bench keeps a cache of its own;
# a prefix the user set is kept, and --env may still set PYTHONDONTWRITEBYTECODE.
PYCACHE_DIR_ENV = "SGLANG_OVERLAY_BENCH_PYCACHE"  # where the bench's bytecode cache is (tests point it elsewhere)


def bytecode_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with bytecode caching on: PYTHONDONTWRITEBYTECODE dropped, PYTHONPYCACHEPREFIX set unless given."""
    import tempfile

    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not out.get("PYTHONPYCACHEPREFIX"):
        out["PYTHONPYCACHEPREFIX"] = os.environ.get(PYCACHE_DIR_ENV) or str(
            Path(tempfile.gettempdir()) / "sglang-overlay-bench-pycache"
        )
    return out


@dataclass
class RunConfig:
    kind: str  # ab | ablate | bisect
    out_dir: Path
    argv: list[str]
    launch: LaunchConfig
    workload: Workload = field(default_factory=Workload)
    initial_starts: int = 3
    max_starts: int = 8
    reps_per_start: int = 5
    warmup_reps: int = 2
    warmup_start: bool = True
    cpu_placement: str = "spread"
    phase_timing: bool = True
    env: dict[str, str] = field(default_factory=dict)
    metric: str = "step_ms_b1"
    follow: bool = True
    confidence: float = 0.95
    min_effect: float = 0.02
    spending: str = "pocock"  # bench.sequential: how alpha is spent over the looks
    look_step: int = 1  # starts per arm between planned looks
    confirm: str = "shared"  # bisect's confirmations: bench.plans.Settings.confirm
    reuse: list[Path] = field(default_factory=list)
    run_id: str = ""
    time_budget_s: float | None = None  # wall seconds for this invocation; None = unlimited
    warm_start_estimate_s: float = WARM_START_ESTIMATE_S

    @property
    def store_path(self) -> Path:
        return self.out_dir / "results.jsonl"

    def signature(self) -> str:
        """What must match for two measurements of the same arm to be pooled (across runs via --reuse)."""
        sig = {
            "workload": self.workload.to_dict(),
            "server_args": list(self.launch.server_args),
            "tree": self.launch.tree,
            "phase_timing": self.phase_timing,
            "env": sorted(self.env.items()),
            "warmup_reps": self.warmup_reps,
            "reps_per_start": self.reps_per_start,
            "cpu_placement": self.cpu_placement,
        }
        return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()[:16]


def launch_fingerprinter(manifest: str | None):
    """(patches, env profile) -> the fingerprint `apply.py launch` prints for them now (pin, the patches'
    content, the profile): stored starts of an arm whose patch was edited since carry another one. None when the
    manifest does not load here (then stored starts are taken as they are)."""
    try:
        from sglang_overlay.fingerprint import fingerprint
        from sglang_overlay.manifest import load_manifest

        m = load_manifest(manifest or "manifest.yaml")
    except Exception:
        return None

    def fp(patches, profile) -> str | None:
        try:
            return fingerprint(m, list(patches), m.env_profile(profile) if profile else None)
        except Exception:
            return None

    return fp


def patch_env_in_effect(manifest: str | None, environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """The manifest's declared patch variables (SGLANG_OEA_K0, a plant's delay, ...) that the bench's own
    environment sets: every server inherits them, and neither the arms' fingerprints nor --env record them, so a"""
    import os

    try:
        from sglang_overlay.manifest import load_manifest

        m = load_manifest(manifest or "manifest.yaml")
    except Exception:
        return None
    env = os.environ if environ is None else environ
    declared = {v.name for p in m.patches for v in p.env}
    return {k: env[k] for k in sorted(declared) if k in env}


def patch_env_changed(out_dir: Path, was: dict[str, str], now: dict[str, str]) -> str:
    """Why a --resume is refused when the patch variables in the bench's environment changed: every server
    inherits them, so the new starts would measure another thing beside the stored ones."""

    def show(env: dict[str, str]) -> str:
        return ", ".join(f"{k}={v}" for k, v in env.items()) or "none (the manifest's defaults)"

    changed = sorted(k for k in {*was, *now} if was.get(k) != now.get(k))
    fix = " ".join(f"{k}={was[k]}" for k in changed if k in was)
    drop = " ".join(k for k in changed if k not in was)
    steps = [f"export {fix}" if fix else "", f"unset {drop}" if drop else ""]
    return (
        f"{out_dir} was measured with the patch variables {show(was)} set in the bench's environment, and they "
        f"are {show(now)} now ({', '.join(changed)} changed): every server inherits them, so the new starts would "
        f"not measure what the stored ones did. Put them back ({'; '.join(x for x in steps if x)}) and resume, or "
        "measure into a new --out"
    )


PLAN_EXTRA = ("ablated", "mode")  # ablate's run fields that change what is measured


PRE_SEQUENTIAL = {"spending": "bonferroni", "look_step": 1, "confirm": "fresh"}


def plan_differences(prev_run: dict, plan: dict) -> list[str]:
    """The plan fields of a stored run record that differ from `plan` (keys an older record lacks are skipped)."""

    def norm(x):
        return json.loads(json.dumps(x, sort_keys=True, default=str))

    out = []
    for k, v in plan.items():
        if k == "config":
            old = prev_run.get("config", {})
            if "initial_starts" in old:
                old = {**PRE_SEQUENTIAL, **old}
            if "metric" in old:
                # older records read start medians: a replay would not take their decisions again
                old = {"start_value": "median", **old}
            out += [f"{n} {old[n]!r} -> {x!r}" for n, x in v.items() if n in old and norm(old[n]) != norm(x)]
        elif k in prev_run and norm(prev_run[k]) != norm(v):
            out.append(f"{k} differ" if k in ("arms", "comparisons") else f"{k} {prev_run[k]!r} -> {v!r}")
    return out


NCCL_ENV_MARK = "sglang-overlay nccl_env"


def nccl_env_lines(logs: list[Path], console: Path, limit: int = 64) -> list[str]:
    """The nccl_env_log patch's per-rank lines ("sglang-overlay nccl_env tp_rank=.. NAME=VALUE ..."), so the
    report can show that every rank saw the env profile. Empty when the patch is not applied."""
    out: list[str] = []
    for path in [*logs, console]:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    if NCCL_ENV_MARK in line:
                        out.append(line[line.index(NCCL_ENV_MARK) :].strip())
        except OSError:
            continue
        if out:
            break
    return out[:limit]


def identity_warnings(overlay, printed_fp: str, patches: tuple[str, ...]) -> list[str]:
    """Does the running server say it carries what this arm asked for? (overlay_identity patch)"""
    if not isinstance(overlay, dict):
        return ["server_info has no overlay identity (is the overlay_identity patch in this set?)"]
    if "error" in overlay:
        return [f"could not read server_info: {overlay['error']}"]
    out = []
    fps = {f for f in (overlay.get("launch_fingerprint"), overlay.get("fingerprint")) if f is not None}
    if fps and printed_fp not in fps:
        out.append(f"launcher printed fingerprint {printed_fp}, server reports {sorted(fps)}")
    if overlay.get("patches") is not None and set(overlay["patches"]) != set(patches):
        out.append(f"server carries {sorted(overlay['patches'])}, arm asked for {sorted(patches)}")
    return out


def progress(msg: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class StartedServer:
    """A server this invocation started and counted (Runner.start_server): what its records need."""

    sid: str
    srv: launcher.Server
    console: Path
    launched_at: float  # wall clock before the launch: the start-up breakdown is cut from here
    ready_at: float  # wall clock at its url line


class Runner:
    def __init__(
        self,
        cfg: RunConfig,
        arms: list[ArmSpec],
        comparisons: list[tuple[str, str, str]],
        extra_run_fields: dict | None = None,
    ):
        self.cfg = cfg
        self.arms = arms
        self.comparisons = comparisons  # (section, reference arm name, arm name)
        self.sig = cfg.signature()
        self.t_start = time.monotonic()
        self._units_started = 0
        self._started_ids: set[str] = set()
        self.warmed = not cfg.warmup_start
        self._view: store.StoreView | None = None
        self._own_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        (cfg.out_dir / "raw").mkdir(exist_ok=True)
        prev = [r for r in store.read(cfg.store_path) if r.get("type") == "run"]
        resumed = bool(prev)
        self._patch_env = patch_env_in_effect(cfg.launch.manifest)
        if resumed:
            cfg.run_id = prev[0]["run_id"]
            if prev[0].get("signature") != self.sig:
                raise RunAborted(
                    f"{cfg.store_path} was measured under another configuration "
                    f"(signature {prev[0].get('signature')} != {self.sig}); use a new --out"
                )
            differs = plan_differences(prev[0], self.plan(extra_run_fields))
            if differs:
                # one run dir, one plan: a second plan's verdicts would contradict the first run record's
                raise RunAborted(
                    f"{cfg.out_dir} holds a run of another plan ({'; '.join(differs)}); continue "
                    f"it with --resume {cfg.out_dir}, or pool its starts into a new run with "
                    f"--reuse {cfg.store_path} --out NEW_DIR"
                )
            was = (prev[0].get("config") or {}).get("patch_env")
            if was is not None and self._patch_env is not None and was != self._patch_env:
                raise RunAborted(patch_env_changed(cfg.out_dir, was, self._patch_env))
        else:
            cfg.run_id = cfg.run_id or uuid.uuid4().hex[:12]
            command = "cd " + shlex.quote(os.getcwd()) + " && " + " ".join(shlex.quote(a) for a in cfg.argv) + "\n"
            try:
                store.write_whole(cfg.out_dir / "command.txt", command.encode(), "free space or choose another --out")
            except WriteFailed as e:
                raise RunAborted(str(e)) from None
        self._fingerprint = launch_fingerprinter(cfg.launch.manifest)
        if resumed:
            stale = self._stale(self.view())
            # the unchanged arms' first: a kill after them leaves the edited arm's stale for the next resume
            self._set_aside_unpaired(stale)
            for u, now in stale:
                self._set_aside(u, now)
                progress(
                    f"arm {u.arm} start {u.round + 1} was measured with fingerprint {u.fingerprint[:12]}, the "
                    f"arm launches {now[:12]} now (a patch changed): left out, measured again"
                )
        else:
            self._import_reused()
        self.host = machine.host_record()
        run_rec = {
            "type": "run",
            "run_id": cfg.run_id,
            "kind": cfg.kind,
            "resumed": resumed,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "argv": cfg.argv,
            "cwd": os.getcwd(),
            "signature": self.sig,
            "host": self.host,
            "config": {
                "initial_starts": cfg.initial_starts,
                "max_starts": cfg.max_starts,
                "reps_per_start": cfg.reps_per_start,
                "warmup_reps": cfg.warmup_reps,
                "warmup_start": cfg.warmup_start,
                "cpu_placement": cfg.cpu_placement,
                "phase_timing": cfg.phase_timing,
                "metric": cfg.metric,
                "follow": cfg.follow,
                "confidence": cfg.confidence,
                "min_effect": cfg.min_effect,
                "spending": cfg.spending,
                "look_step": cfg.look_step,
                "confirm": cfg.confirm,
                "workload": cfg.workload.to_dict(),
                "server_args": list(cfg.launch.server_args),
                "env": cfg.env,
                "patch_env": self._patch_env,
                "tree": cfg.launch.tree,
                "manifest": cfg.launch.manifest,
                "time_budget_s": cfg.time_budget_s,
                "start_value": START_VALUE,
            },
            "arms": [self.arm_record(a) for a in arms],
            "comparisons": [list(c) for c in comparisons],
        }
        run_rec.update(extra_run_fields or {})
        store.append(cfg.store_path, run_rec)

    def plan(self, extra_run_fields: dict | None) -> dict:
        """What the plan's decisions depend on, in the run record's shape (the signature covers the measurement)."""
        c = self.cfg
        return {
            "kind": c.kind,
            "arms": [self.arm_record(a) for a in self.arms],
            "comparisons": [list(x) for x in self.comparisons],
            "config": {
                "initial_starts": c.initial_starts,
                "max_starts": c.max_starts,
                "metric": c.metric,
                "follow": c.follow,
                "confidence": c.confidence,
                "min_effect": c.min_effect,
                "spending": c.spending,
                "look_step": c.look_step,
                "confirm": c.confirm,
                "start_value": START_VALUE,
            },
            **{k: v for k, v in (extra_run_fields or {}).items() if k in PLAN_EXTRA},
        }

    @staticmethod
    def arm_record(a: ArmSpec) -> dict:
        return {
            "name": a.name,
            "key": a.key,
            "expr": a.pset.expr,
            "patches": list(a.pset.patches),
            "env_profile": a.env_profile,
            "env": dict(a.env),
            "block": a.block,
        }

    # -- store helpers ---------------------------------------------------------------------------------------
    def _import_reused(self) -> None:
        """Copy completed units measured under the same signature from other stores into this one."""
        have = store.view(store.read(self.cfg.store_path))
        seen = {u.start_id for u in have.units.values()}
        next_round: dict[str, int] = {}
        for u in have.units.values():
            next_round[u.arm_key] = max(next_round.get(u.arm_key, 0), u.round + 1)
        for path in self.cfg.reuse:
            recs = list(store.read(Path(path)))
            v = store.view(recs, signature=self.sig)
            rounds: dict[str, int] = {}
            stale = {u.start_id for u, _ in self._stale(v)}
            for u in sorted(v.units.values(), key=lambda u: (u.arm_key, u.round)):
                if u.start_id not in seen and u.start_id not in stale:
                    seen.add(u.start_id)
                    rounds[u.start_id] = next_round.get(u.arm_key, 0)
                    next_round[u.arm_key] = rounds[u.start_id] + 1
            n = 0
            for r in recs:
                if r.get("type") in ("start", "rep", "unit_done") and r.get("start_id") in rounds:
                    store.append(
                        self.cfg.store_path,
                        {
                            **r,
                            "round": rounds[r["start_id"]],
                            "run_id": "reused",
                            "signature": self.sig,
                            "reused_from": str(path),
                        },
                    )
                    n += r.get("type") == "unit_done"
            # one line: two lines ("not reusing 6", "reused 6") read as a contradiction on the device
            aside = f"; {len(stale)} not: their patches changed since (another fingerprint)" if stale else ""
            progress(f"reused {n} completed server start(s) from {path}{aside}")

    def _set_aside(self, u: store.Unit, now: str, why: str | None = None) -> None:
        """A `stale` record: the start stays in the store, out of every statistic."""
        rec = {
            "type": "stale",
            "start_id": u.start_id,
            "arm": u.arm,
            "arm_key": u.arm_key,
            "round": u.round,
            "fingerprint": u.fingerprint,
            "now": now,
        }
        self.rec(rec | ({"why": why} if why else {}))

    def _set_aside_unpaired(self, stale: list[tuple[store.Unit, str]]) -> None:
        """An arm measured again after an edit is compared with starts of the same invocation, not another
        time's (a fresh CI clone showed tok/s -22 % between two invocations of identical fake servers): every
        earlier start is set aside too and the arms are measured again together, interleaved."""
        if not stale:
            return
        gone = {u.start_id for u, _ in stale}
        others = [u for u in self.view().units.values() if u.start_id not in gone]
        for u in others:
            self._set_aside(u, u.fingerprint, "unpaired")
        if others:
            progress(
                f"{len(others)} earlier start(s) of the unchanged arms set aside as well, and measured again: an "
                "arm measured again is compared with starts of the same invocation, not with another time's"
            )

    def _stale(self, v: store.StoreView) -> list[tuple[store.Unit, str]]:
        """Completed units of `v` whose recorded fingerprint differs from what their arm launches now."""
        if self._fingerprint is None:
            return []
        arms = {a["key"]: a for a in v.arms} | {a.key: self.arm_record(a) for a in self.arms}
        out = []
        for u in v.units.values():
            a = arms.get(u.arm_key)
            now = self._fingerprint(a["patches"], a.get("env_profile")) if a and u.fingerprint else None
            if now is not None and now != u.fingerprint:
                out.append((u, now))
        return out

    def view(self) -> store.StoreView:
        # plans read start values many times per decision: parse the store once per change
        if self._view is None:
            self._view = store.view(store.read(self.cfg.store_path), signature=self.sig)
        return self._view

    def rec(self, record: dict) -> None:
        store.append(self.cfg.store_path, {"run_id": self.cfg.run_id, "signature": self.sig, **record})
        self._view = None

    # -- one unit ----------------------------------------------------------------------------------------------
    def server_env(self, arm: ArmSpec) -> dict[str, str]:
        env = bytecode_env(dict(os.environ))
        env.update(STEP_TIME_ENV)
        env.update(HASH_SEED_ENV)
        env.update(QUIET_STOP_ENV)
        if self.cfg.phase_timing:
            env.update(PHASE_TIMING_ENV)
            # shorter than one phase: each snapshot then describes the phase that just ran
            env["SGLANG_EAGLE_PHASE_TIMING_WINDOW"] = str(max(16, self.cfg.workload.max_new_tokens // 2))
        env.update(self.cfg.env)
        env.update(dict(arm.env))
        return env

    def placement_of(self, arm: ArmSpec) -> str:
        env = machine.PLACEMENT_ENV
        return dict(arm.env).get(env) or self.cfg.env.get(env) or self.cfg.cpu_placement

    @property
    def units_started(self) -> int:
        """Servers this invocation started (throwaway and failed launches included); counted by start_server."""
        return self._units_started

    def check_budget(self, arm: ArmSpec) -> None:
        """BudgetExhausted when one more start would overrun the budget. An invocation's first start always
        runs, or a small budget could never progress."""
        if self.cfg.time_budget_s is None or self._units_started == 0:
            return
        v = self.view()
        need = unit_estimate(list(v.units.values()), v.warmup_units, self._started_ids, self.cfg.warm_start_estimate_s)
        if self.elapsed() + need > self.cfg.time_budget_s:
            raise BudgetExhausted(
                f"{self.elapsed():.0f}s used of --time-budget {self.cfg.time_budget_s:.0f}s; "
                f"the next start ({arm.name}) needs ~{need:.0f}s"
            )

    def warmup(self, arm: ArmSpec) -> None:
        """The invocation's throwaway start (JIT, graph caches, page cache); recorded, never measured."""
        if self.warmed:
            return
        self.warmed = True
        age = warm_machine_age(self.sig)
        if age is not None:
            progress(f"[warm-up start] skipped: this machine served a start of this measurement {age:.0f}s ago")
            self.rec({"type": "warmup_skipped", "age_s": round(age, 1), "arm_key": arm.key})
            return
        self.run_unit(arm, -1, "[warm-up start]", warmup=True)

    def run_unit(self, arm: ArmSpec, rnd: int, label: str, warmup: bool = False) -> list[RepMetrics]:
        if not warmup:
            self.check_budget(arm)
        t0 = time.monotonic()
        machine_warm = warm_machine_age(self.sig) is not None
        announce = f"{label} arm {arm.name} start {rnd + 1}: starting server ({arm.pset.label})"
        started = self.start_server(self.cfg.launch, arm, rnd, announce, warmup)
        sid, srv, console = started.sid, started.srv, started.console
        reps: list[RepMetrics] = []
        try:
            info_version, overlay = self.identity(srv)
            placed = machine.place(srv.proc.pid, self.placement_of(arm), client_pid=os.getpid())
            self.record_start(
                sid,
                arm,
                rnd,
                srv,
                console,
                warmup,
                machine_warm,
                (info_version, overlay),
                placed,
                started.launched_at,
                started.ready_at,
            )
            total = self.cfg.warmup_reps + (0 if warmup else self.cfg.reps_per_start)
            for i in range(max(total, 1)):
                warm = warmup or i < self.cfg.warmup_reps
                m = self.rep(srv, sid, arm, rnd, i - self.cfg.warmup_reps, warm)
                if not warm:
                    reps.append(m)
        except (WorkloadError, OSError) as e:
            self.record_failure(arm, rnd, sid, srv, warmup, e)
            self.stop_server(srv)
            raise RunAborted(f"arm {arm.name} start {rnd + 1}: {e}") from e
        except BaseException:
            self.stop_server(srv)  # Ctrl-C or an abort: never leave a server holding the GPU
            raise
        rc = self.stop_server(srv)
        wall = time.monotonic() - t0
        self.rec(
            {
                "type": "unit_done",
                "start_id": sid,
                "arm_key": arm.key,
                "round": rnd,
                "n_reps": len(reps),
                "wall_s": round(wall, 2),
                "launcher_rc": rc,
                "warmup_start": warmup,
                "nccl_env_lines": nccl_env_lines([Path(srv.log)] if srv.log else [], console),
            }
        )
        self._progress_line(arm, rnd, srv.startup_s, wall, label, warmup)
        mark_warm_machine(self.sig)
        return reps

    def start_server(
        self, launch: LaunchConfig, arm: ArmSpec, rnd: int, announce: str, warmup: bool = False
    ) -> StartedServer:
        """One server of `arm` started and counted (check_budget reads the count). It counts before the launch:
        a launch that fails spent its time too. A failure is recorded (the launch's output tail): RunAborted."""
        sid = uuid.uuid4().hex[:12]
        console = self.cfg.out_dir / "raw" / f"{arm.name}-r{rnd}-{sid}.log"
        launched_at = time.time()
        self._units_started += 1
        self._started_ids.add(sid)
        progress(announce)
        srv = launcher.spawn(launch, arm, self.server_env(arm), console)
        try:
            launcher.wait_ready(srv, launch)
        except launcher.LaunchError as e:
            self.rec(
                {
                    "type": "failure",
                    "arm": arm.name,
                    "arm_key": arm.key,
                    "round": rnd,
                    "stage": "launch",
                    "warmup_start": warmup,
                    "error": str(e).splitlines()[0],
                    "log_tail": str(e)[-4000:],
                }
            )
            raise RunAborted(f"arm {arm.name}: {e}") from e
        return StartedServer(sid, srv, console, launched_at, time.time())

    @staticmethod
    def identity(srv: launcher.Server) -> tuple[object, object]:
        """(server version, overlay identity) from /server_info; the error in place of the identity if unread."""
        try:
            si = server_info(srv.url)
            return si.get("version"), si.get("overlay")
        except Exception as e:
            return None, {"error": repr(e)}

    def record_start(
        self,
        sid: str,
        arm: ArmSpec,
        rnd: int,
        srv: launcher.Server,
        console: Path,
        warmup: bool,
        machine_warm: bool,
        ident: tuple[object, object],
        placed: dict,
        launched_at: float,
        ready_at: float,
        extra: dict | None = None,
    ) -> None:
        """The start record, and the identity warnings of a measured start."""
        info_version, overlay = ident
        self.rec(
            {
                "type": "start",
                "start_id": sid,
                "arm": arm.name,
                "arm_key": arm.key,
                "round": rnd,
                "warmup_start": warmup,
                "machine_warm": machine_warm,
                "patches": list(arm.pset.patches),
                "fingerprint": srv.fingerprint,
                "url": srv.url,
                "server_log": srv.log,
                "console_log": str(console),
                "startup_s": round(srv.startup_s, 2),
                "server_version": info_version,
                "overlay": overlay,
                "cmd": srv.cmd,
                "placement": placed,
                "startup": machine.startup_from_file(srv.log, launched_at, ready_at) if srv.log else {},
                **(extra or {}),
            }
        )
        warnings = identity_warnings(overlay, srv.fingerprint, arm.pset.patches)
        if warnings and not warmup:
            self.rec({"type": "identity_warning", "start_id": sid, "arm": arm.name, "warnings": warnings})
            for w in warnings:
                progress(f"WARNING arm {arm.name}: {w}")

    def rep(self, srv: launcher.Server, sid: str, arm: ArmSpec, rnd: int, index: int, warm: bool) -> RepMetrics:
        """One repetition on a live server, recorded and checked."""
        m = run_rep(srv.url, self.cfg.workload)
        self.rec(
            {
                "type": "rep",
                "start_id": sid,
                "arm": arm.name,
                "arm_key": arm.key,
                "round": rnd,
                "rep": index,
                "warmup": warm,
                "metrics": m.to_dict(),
            }
        )
        if not warm:
            self._check_rep(arm, m)
        return m

    def record_failure(
        self, arm: ArmSpec, rnd: int, sid: str, srv: launcher.Server, warmup: bool, e: BaseException
    ) -> None:
        self.rec(
            {
                "type": "failure",
                "arm": arm.name,
                "arm_key": arm.key,
                "round": rnd,
                "stage": "workload",
                "warmup_start": warmup,
                "start_id": sid,
                "error": str(e),
                "log_tail": srv.tail_text()[-4000:],
            }
        )

    def stop_server(self, srv: launcher.Server) -> int | None:
        """Stop `srv` and put the bench client back on its own CPUs (the placement narrowed them)."""
        rc = launcher.stop(srv, self.cfg.launch)
        if self._own_cpus is not None:
            machine.pin_process(os.getpid(), self._own_cpus)
        return rc

    def _check_rep(self, arm: ArmSpec, m: RepMetrics) -> None:
        value = getattr(m, self.cfg.metric, None)
        if self.cfg.metric.startswith("eagle_") and value is None:
            raise WorkloadError(
                f"metric {self.cfg.metric} missing for arm {arm.name}: the set needs "
                f"eagle_profiling, the server SGLANG_EAGLE_PHASE_TIMING=1 (not --no-phase-timing) "
                f"and an EAGLE speculative algorithm"
            )
        if m.n_steps_b1 == 0 and self.cfg.metric.endswith("_b1"):
            raise WorkloadError(
                f"no step-time entry for batch 1 in the b1 phase: {self.cfg.workload.b1_requests} requests x "
                f"{self.cfg.workload.max_new_tokens} tokens are fewer steps than the server's "
                f"--decode-log-interval (default 40); raise --max-new-tokens or pass --decode-log-interval 8"
            )

    def _progress_line(self, arm: ArmSpec, rnd: int, startup_s: float, wall: float, label: str, warmup: bool) -> None:
        if warmup:
            progress(f"{label} done: start {startup_s:.0f}s, unit {wall:.0f}s (not measured)")
            return
        meds = store.start_values(self.view().units_of(arm.key), self.cfg.metric)
        progress(
            f"{label} arm {arm.name} start {rnd + 1} done: start {startup_s:.0f}s, unit {wall:.0f}s | "
            f"{self.cfg.metric} start values {', '.join(f'{x:.4g}' for x in meds)} "
            f"(start-to-start cv {cv(meds) * 100:.1f}%) | elapsed {self.elapsed():.0f}s"
        )

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start


def unit_estimate(
    units: Sequence[store.Unit], warmup_units: Sequence[store.Unit], started: set[str], warm_start_s: float
) -> float:
    """Seconds one more unit (start, repetitions, stop) will take, from the units measured so far.

    This invocation's starts where there are any (an earlier one may have paid the JIT caches); a throwaway
    only when nothing measured was seen. Only cold starts seen: their start-up is capped at `warm_start_s`
    (a machine's first start ran 350-440 s on an H200, a warm one 57-83 s: bench/results/2026-12-01-h200-run4)."""
    here = [u for u in units if u.start_id in started and u.wall_s]
    seen = here or [u for u in units if u.wall_s]
    if not seen:
        seen = [u for u in warmup_units if u.start_id in started and u.wall_s]
    warm = [u.wall_s for u in seen if u.machine_warm]
    if warm:
        return max(warm)
    return max((u.wall_s - u.startup_s + min(u.startup_s, warm_start_s) for u in seen), default=0.0)


class StoreLab:
    """bench.replication.Lab over a Runner: starts come from the store first, new ones are measured."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.cursor: dict[str, int] = {}

    def _at(self, key: str) -> int:
        if key not in self.cursor:
            units = self.runner.view().units_of(key)
            self.cursor[key] = next(
                (i for i, u in enumerate(units) if not u.invocation.startswith("reused from")), len(units)
            )
        return self.cursor[key]

    def _units(self, arm: ArmSpec) -> list[store.Unit]:
        return self.runner.view().units_of(arm.key)[: self._at(arm.key)]

    def n_starts(self, arm: ArmSpec) -> int:
        return len(self._units(arm))

    def start_values(self, arm: ArmSpec, metric: str) -> list[float]:
        return store.start_values(self._units(arm), metric)

    def add_starts(self, arms: Sequence[ArmSpec]) -> None:
        for arm in arms:
            rnd = self._at(arm.key)
            stored = {u.round for u in self.runner.view().units_of(arm.key)}
            if rnd not in stored:
                if arm.key not in {a.key for a in self.runner.arms}:
                    self.runner.arms.append(arm)
                    self.runner.rec({"type": "arm", **Runner.arm_record(arm)})
                self.runner.check_budget(arm)
                self.runner.warmup(arm)
                self.runner.run_unit(arm, rnd, f"[start {self.runner.units_started + 1}]")
            self.cursor[arm.key] = rnd + 1

    def note(self, record: dict) -> None:
        self.runner.rec(record)


WARM_MAX_AGE_S = 20 * 60  # a session's calls follow each other within seconds; a machine idle longer is given back


WARM_DIR_ENV = "SGLANG_OVERLAY_BENCH_WARM_DIR"  # tests point it at their own dir: one test's starts warm no other


def _warm_marker(sig: str) -> Path:
    import tempfile

    return Path(os.environ.get(WARM_DIR_ENV) or Path(tempfile.gettempdir()) / "sglang-overlay-bench-warm") / sig


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def mark_warm_machine(sig: str) -> None:
    """Note that this machine (this boot) has served a start of measurement `sig`; best effort."""
    from sglang_overlay.fsio import atomic_write

    m = _warm_marker(sig)
    try:
        m.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(m, json.dumps({"boot_id": _boot_id(), "time": time.time()}).encode())
    except OSError:
        pass


def warm_machine_age(sig: str) -> float | None:
    """Seconds since this boot served a start of `sig`, or None (never, another boot, too long ago, unreadable)."""
    try:
        rec = json.loads(_warm_marker(sig).read_text())
        age = time.time() - float(rec["time"])
        boot = rec["boot_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not boot or boot != _boot_id() or not 0 <= age <= WARM_MAX_AGE_S:
        return None
    return age
