"""Runs arms: server starts interleaved across arms, repetitions per start, results into the JSONL store.

Unit of work = one server start of one arm ("unit" = (arm key, round)). Rounds interleave arms (A B A B ...)
so slow drift on the host hits every arm alike. Within a start: `warmup_reps` discarded repetitions, then
`reps_per_start` measured ones. Step time is bimodal across restarts on this stack (perf-anchors.md), so
several starts per arm (`restarts`) are the honest replication unit; reps within a start are cheaper
(a start costs 1-2.5 min of GPU) and the report always says which mix was used.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import launcher, store
from .bisect import BisectResult, Verdict, bisect_culprit
from .hostinfo import host_record
from .launcher import ArmSpec, LaunchConfig
from .sets import Catalog, PatchSet
from .stats import REGRESSION, compare
from .workload import RepMetrics, Workload, WorkloadError, run_rep

# Environment every measured server gets: step times in /server_info; EAGLE phase timing (only has an effect
# when the eagle_profiling patch is applied).
STEP_TIME_ENV = {"SGLANG_RECORD_STEP_TIME": "1"}
PHASE_TIMING_ENV = {"SGLANG_EAGLE_PHASE_TIMING": "1"}


@dataclass
class RunConfig:
    kind: str  # ab | ablate | bisect
    out_dir: Path
    argv: list[str]
    launch: LaunchConfig
    workload: Workload = field(default_factory=Workload)
    restarts: int = 9
    reps_per_start: int = 1
    warmup_reps: int = 1
    phase_timing: bool = True
    env: dict[str, str] = field(default_factory=dict)
    metric: str = "step_ms_b1"
    alpha: float = 0.01
    min_effect: float = 0.02
    reuse: list[Path] = field(default_factory=list)
    run_id: str = ""
    time_budget_s: float | None = None  # wall seconds for this invocation; None = unlimited

    @property
    def store_path(self) -> Path:
        return self.out_dir / "results.jsonl"

    def signature(self) -> str:
        """What must match for two measurements of the same arm to be pooled (across runs via --reuse)."""
        sig = {"workload": self.workload.to_dict(), "server_args": list(self.launch.server_args),
               "tree": self.launch.tree, "phase_timing": self.phase_timing, "env": sorted(self.env.items()),
               "warmup_reps": self.warmup_reps}
        return hashlib.sha256(json.dumps(sig, sort_keys=True).encode()).hexdigest()[:16]


class RunAborted(RuntimeError):
    pass


class BudgetExhausted(RuntimeError):
    """The next server start would not finish within --time-budget: stop cleanly, keep everything."""


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
                        out.append(line[line.index(NCCL_ENV_MARK):].strip())
        except OSError:
            continue
        if out:
            break
    return out[:limit]


def lower_is_better(metric: str) -> bool:
    return not metric.startswith("tok_s")


def identity_warnings(overlay, printed_fp: str, patches: tuple[str, ...]) -> list[str]:
    """Does the running server say it carries what this arm asked for? (overlay_identity patch)

    `apply.py launch` prints the launch fingerprint (set + env profile), which the server reports as
    overlay.launch_fingerprint; overlay.fingerprint is the tree's. Mismatches are recorded and shown in the
    report rather than aborting: the launcher made the tree carry the set itself, and GPU time is scarce.
    """
    if not isinstance(overlay, dict):
        return ["server_info has no overlay identity (is the overlay_identity patch in this set?)"]
    if "error" in overlay:
        return [f"could not read server_info: {overlay['error']}"]
    out = []
    fps = {overlay.get("launch_fingerprint"), overlay.get("fingerprint")} - {None}
    if fps and printed_fp not in fps:
        out.append(f"launcher printed fingerprint {printed_fp}, server reports {sorted(fps)}")
    if overlay.get("patches") is not None and set(overlay["patches"]) != set(patches):
        out.append(f"server carries {sorted(overlay['patches'])}, arm asked for {sorted(patches)}")
    return out


def progress(msg: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Runner:
    def __init__(self, cfg: RunConfig, arms: list[ArmSpec], comparisons: list[tuple[str, str, str]],
                 extra_run_fields: dict | None = None):
        self.cfg = cfg
        self.arms = arms
        self.comparisons = comparisons  # (section, reference arm name, arm name)
        self.sig = cfg.signature()
        self.t_start = time.monotonic()
        self.units_started = 0
        self.started_ids: set[str] = set()
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        (cfg.out_dir / "raw").mkdir(exist_ok=True)
        resumed = cfg.store_path.exists() and any(r.get("type") == "run" for r in store.read(cfg.store_path))
        if resumed:
            prev = [r for r in store.read(cfg.store_path) if r.get("type") == "run"]
            cfg.run_id = prev[0]["run_id"]
            if prev[0].get("signature") != self.sig:
                raise RunAborted(f"{cfg.store_path} was measured under another configuration "
                                 f"(signature {prev[0].get('signature')} != {self.sig}); use a new --out")
        else:
            cfg.run_id = cfg.run_id or uuid.uuid4().hex[:12]
            (cfg.out_dir / "command.txt").write_text(
                "cd " + shlex.quote(os.getcwd()) + " && " + " ".join(shlex.quote(a) for a in cfg.argv) + "\n")
            self._import_reused()
        self.host = host_record()
        run_rec = {"type": "run", "run_id": cfg.run_id, "kind": cfg.kind, "resumed": resumed,
                   "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "argv": cfg.argv,
                   "signature": self.sig, "host": self.host,
                   "config": {"restarts": cfg.restarts, "reps_per_start": cfg.reps_per_start,
                              "warmup_reps": cfg.warmup_reps, "phase_timing": cfg.phase_timing,
                              "metric": cfg.metric, "alpha": cfg.alpha, "min_effect": cfg.min_effect,
                              "workload": cfg.workload.to_dict(), "server_args": list(cfg.launch.server_args),
                              "env": cfg.env, "tree": cfg.launch.tree, "manifest": cfg.launch.manifest},
                   "arms": [{"name": a.name, "key": a.key, "expr": a.pset.expr, "patches": list(a.pset.patches),
                             "env_profile": a.env_profile, "env": dict(a.env)} for a in arms],
                   "comparisons": [list(c) for c in comparisons]}
        run_rec.update(extra_run_fields or {})
        store.append(cfg.store_path, run_rec)

    # -- store helpers ---------------------------------------------------------------------------------------
    def _import_reused(self) -> None:
        """Copy completed units measured under the same signature from other stores into this one."""
        for path in self.cfg.reuse:
            recs = list(store.read(Path(path)))
            v = store.view(recs, signature=self.sig)
            keep = {u.start_id for u in v.units.values()}
            n = 0
            for r in recs:
                if r.get("type") in ("start", "rep", "unit_done") and r.get("start_id") in keep:
                    store.append(self.cfg.store_path, {**r, "run_id": "reused", "signature": self.sig,
                                                       "reused_from": str(path)})
                    n += r.get("type") == "unit_done"
            progress(f"reused {n} completed server start(s) from {path}")

    def view(self) -> store.StoreView:
        return store.view(store.read(self.cfg.store_path), signature=self.sig)

    def rec(self, record: dict) -> None:
        store.append(self.cfg.store_path, {"run_id": self.cfg.run_id, "signature": self.sig, **record})

    # -- one unit ----------------------------------------------------------------------------------------------
    def server_env(self, arm: ArmSpec) -> dict[str, str]:
        env = dict(os.environ)
        env.update(STEP_TIME_ENV)
        if self.cfg.phase_timing:
            env.update(PHASE_TIMING_ENV)
            # The timer's window (default 1000 steps) would mix the b1 and concurrent phases: keep it shorter
            # than one phase so each snapshot describes the phase that just ran.
            env["SGLANG_EAGLE_PHASE_TIMING_WINDOW"] = str(max(16, self.cfg.workload.max_new_tokens // 2))
        env.update(self.cfg.env)
        env.update(dict(arm.env))
        return env

    def _check_budget(self, arm: ArmSpec) -> None:
        if self.cfg.time_budget_s is None or self.units_started == 0:
            return  # the first start of an invocation always runs, or a small budget could never progress
        units = self.view().units
        # Estimate one more start from the starts of this invocation: a machine's first start pays the JIT
        # compile and CUDA-graph caches (366 s against 85 s warm on an H200), and counting a cold start from an
        # earlier invocation or a --reuse store refused every warm start that would have fitted.
        here = [u.wall_s for u in units.values() if u.start_id in self.started_ids and u.wall_s]
        walls = here or [u.wall_s for u in units.values() if u.wall_s]
        need = max(walls) if walls else 0.0
        if self.elapsed() + need > self.cfg.time_budget_s:
            raise BudgetExhausted(f"{self.elapsed():.0f}s used of --time-budget {self.cfg.time_budget_s:.0f}s; "
                                  f"the next start ({arm.name}) needs ~{need:.0f}s")

    def run_unit(self, arm: ArmSpec, rnd: int, label: str) -> list[RepMetrics]:
        self._check_budget(arm)
        sid = uuid.uuid4().hex[:12]
        console = self.cfg.out_dir / "raw" / f"{arm.name}-r{rnd}-{sid}.log"
        t0 = time.monotonic()
        self.units_started += 1
        self.started_ids.add(sid)
        progress(f"{label} arm {arm.name} round {rnd + 1}: starting server ({arm.pset.label})")
        try:
            srv = launcher.start(self.cfg.launch, arm, self.server_env(arm), console)
        except launcher.LaunchError as e:
            self.rec({"type": "failure", "arm": arm.name, "arm_key": arm.key, "round": rnd, "stage": "launch",
                      "error": str(e).splitlines()[0], "log_tail": str(e)[-4000:]})
            raise RunAborted(f"arm {arm.name}: {e}") from e
        info_version = None
        reps: list[RepMetrics] = []
        try:
            try:
                from .workload import server_info
                si = server_info(srv.url)
                info_version = si.get("version")
                overlay = si.get("overlay")
            except Exception as e:  # noqa: BLE001 - recorded, and the first rep will fail loudly if it persists
                overlay = {"error": repr(e)}
            self.rec({"type": "start", "start_id": sid, "arm": arm.name, "arm_key": arm.key, "round": rnd,
                      "patches": list(arm.pset.patches), "fingerprint": srv.fingerprint, "url": srv.url,
                      "server_log": srv.log, "console_log": str(console), "startup_s": round(srv.startup_s, 2),
                      "server_version": info_version, "overlay": overlay, "cmd": srv.cmd})
            warnings = identity_warnings(overlay, srv.fingerprint, arm.pset.patches)
            if warnings:
                self.rec({"type": "identity_warning", "start_id": sid, "arm": arm.name, "warnings": warnings})
                for w in warnings:
                    progress(f"WARNING arm {arm.name}: {w}")
            total = self.cfg.warmup_reps + self.cfg.reps_per_start
            for i in range(total):
                warm = i < self.cfg.warmup_reps
                m = run_rep(srv.url, self.cfg.workload)
                self.rec({"type": "rep", "start_id": sid, "arm": arm.name, "arm_key": arm.key, "round": rnd,
                          "rep": i - self.cfg.warmup_reps, "warmup": warm, "metrics": m.to_dict()})
                if not warm:
                    self._check_rep(arm, m)
                    reps.append(m)
        except (WorkloadError, OSError) as e:
            self.rec({"type": "failure", "arm": arm.name, "arm_key": arm.key, "round": rnd, "stage": "workload",
                      "start_id": sid, "error": str(e), "log_tail": srv.tail_text()[-4000:]})
            launcher.stop(srv, self.cfg.launch)
            raise RunAborted(f"arm {arm.name} round {rnd + 1}: {e}") from e
        except BaseException:
            launcher.stop(srv, self.cfg.launch)  # Ctrl-C or an abort: never leave a server holding the GPU
            raise
        rc = launcher.stop(srv, self.cfg.launch)
        wall = time.monotonic() - t0
        self.rec({"type": "unit_done", "start_id": sid, "arm_key": arm.key, "round": rnd, "n_reps": len(reps),
                  "wall_s": round(wall, 2), "launcher_rc": rc,
                  "nccl_env_lines": nccl_env_lines([Path(srv.log)] if srv.log else [], console)})
        self._progress_line(arm, rnd, srv.startup_s, wall, label)
        return reps

    def _check_rep(self, arm: ArmSpec, m: RepMetrics) -> None:
        value = getattr(m, self.cfg.metric, None)
        if self.cfg.metric.startswith("eagle_") and value is None:
            raise WorkloadError(f"metric {self.cfg.metric} missing for arm {arm.name}: the set needs "
                                f"eagle_profiling, the server SGLANG_EAGLE_PHASE_TIMING=1 (not --no-phase-timing) "
                                f"and an EAGLE speculative algorithm")
        if m.n_steps_b1 == 0 and self.cfg.metric.endswith("_b1"):
            raise WorkloadError(
                f"no step-time entry for batch 1 in the b1 phase: {self.cfg.workload.b1_requests} requests x "
                f"{self.cfg.workload.max_new_tokens} tokens are fewer steps than the server's "
                f"--decode-log-interval (default 40); raise --max-new-tokens or pass --decode-log-interval 8")

    def _progress_line(self, arm: ArmSpec, rnd: int, startup: float, wall: float, label: str) -> None:
        v = self.view()
        xs = v.samples(arm.key, self.cfg.metric)
        hashes = {u.reps[0].get("hash_b1") for u in v.units_of(arm.key) if u.reps}
        from .stats import cv
        med = statistics.median(xs) if xs else float("nan")
        tok = v.samples(arm.key, "tok_s_b1")
        acc = v.samples(arm.key, "accept_len_b1")
        progress(f"{label} arm {arm.name} round {rnd + 1} done: start {startup:.0f}s, unit {wall:.0f}s | "
                 f"{self.cfg.metric} median {med:.3f} over {len(xs)} reps (cv {cv(xs) * 100:.1f}%) | "
                 f"tok/s b1 {statistics.median(tok) if tok else float('nan'):.1f} | "
                 f"accept {statistics.median(acc) if acc else float('nan'):.2f} | "
                 f"outputs {'same' if len(hashes) <= 1 else 'DIFFER across starts'} | "
                 f"elapsed {time.monotonic() - self.t_start:.0f}s")

    # -- plans ---------------------------------------------------------------------------------------------------
    def unique_arms(self) -> list[ArmSpec]:
        seen, out = set(), []
        for a in self.arms:
            if a.key not in seen:
                seen.add(a.key)
                out.append(a)
        return out

    def run_interleaved(self, arms: list[ArmSpec] | None = None, rounds: int | None = None) -> None:
        arms = arms or self.unique_arms()
        rounds = self.cfg.restarts if rounds is None else rounds
        plan = [(rnd, a) for rnd in range(rounds) for a in arms]
        done = self.view().units
        todo = [(rnd, a) for rnd, a in plan if (a.key, rnd) not in done]
        if len(todo) < len(plan):
            progress(f"{len(plan) - len(todo)} of {len(plan)} server starts already measured; {len(todo)} to go")
        for i, (rnd, a) in enumerate(todo, 1):
            self.run_unit(a, rnd, f"[{i}/{len(todo)}]")

    def measure_set(self, arm: ArmSpec) -> list[float]:
        """Make sure `restarts` units of this arm exist (measuring what is missing); return its samples."""
        self.run_interleaved([arm])
        return self.view().samples(arm.key, self.cfg.metric)

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start


def bisect_run(runner: Runner, catalog: Catalog, good: ArmSpec, bad: ArmSpec) -> BisectResult:
    """Reference arms good/bad measured interleaved first, then probes good + prefix of the candidates.

    A probe is BAD when its median is nearer the bad set's median than the good set's: with one culprit the
    probes are bimodal between the two references, and "nearest" needs no extra threshold. The bad endpoint
    itself must first show a called REGRESSION (MWU p < alpha and at least the minimum effect) against good,
    so noise is never bisected.
    """
    cfg = runner.cfg
    runner.run_interleaved([good, bad])
    v = runner.view()
    g, b = v.samples(good.key, cfg.metric), v.samples(bad.key, cfg.metric)
    lower = lower_is_better(cfg.metric)
    endpoint = compare(g, b, alpha=cfg.alpha, min_effect=cfg.min_effect, lower_is_better=lower)
    mg, mb = statistics.median(g), statistics.median(b)
    probes_meta: list[dict] = []

    def measure(patches: tuple[str, ...]) -> Verdict:
        if set(patches) == set(bad.pset.patches):
            verdict = Verdict.BAD if endpoint.verdict == REGRESSION else Verdict.GOOD
            probes_meta.append({"patches": list(patches), "arm": bad.name, "key": bad.key, "median": mb,
                                "vs_good": endpoint.to_dict(), "verdict": verdict.value})
            return verdict
        closed = catalog.closure(patches)
        arm = ArmSpec(name=f"probe{len(probes_meta)}", pset=PatchSet(",".join(closed) or "none", closed),
                      env_profile=bad.env_profile, env=bad.env)
        runner.arms.append(arm)
        xs = runner.measure_set(arm)
        m = statistics.median(xs)
        verdict = Verdict.BAD if abs(m - mb) < abs(m - mg) else Verdict.GOOD
        probes_meta.append({"patches": list(closed), "arm": arm.name, "key": arm.key, "median": m,
                            "vs_good": compare(g, xs, alpha=cfg.alpha, min_effect=cfg.min_effect,
                                               lower_is_better=lower).to_dict(),
                            "verdict": verdict.value})
        progress(f"bisect probe {arm.name} ({arm.pset.label}): median {m:.4f} vs good {mg:.4f} / bad {mb:.4f} "
                 f"-> {verdict.value}")
        return verdict

    result = bisect_culprit(good.pset.patches, bad.pset.patches, measure)
    runner.rec({"type": "bisect", "good": good.name, "bad": bad.name, "culprit": result.culprit,
                "reason": result.reason, "candidates": list(result.candidates), "probes": probes_meta,
                "n_probes": result.n_measured, "max_expected_probes": result.max_expected_probes(),
                "endpoint": endpoint.to_dict(), "server_starts_this_run": runner.units_started,
                "elapsed_s": round(runner.elapsed(), 1)})
    return result
