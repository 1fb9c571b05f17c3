"""Argument parsing and the ab / ablate / bisect / report commands (`python -m bench ...`)."""
from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime
from pathlib import Path

RESULTS_ROOT = Path(__file__).resolve().parent / "results"
EXIT_ABORTED = 3
EXIT_BUDGET = 4


def _split_server_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _kv(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    return k, v


def _add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tool and server")
    g.add_argument("--manifest", default="manifest.yaml", help="manifest for set names (and passed to apply.py)")
    g.add_argument("--tree", default=None, help="passed to apply.py --tree")
    g.add_argument("--launcher", default=f"{shlex.quote(sys.executable)} apply.py",
                   help="command that implements the `launch` contract (default: %(default)s)")
    g.add_argument("--health-timeout", type=float, default=900.0)
    g.add_argument("--env", type=_kv, action="append", default=[], metavar="K=V",
                   help="extra environment for every server")
    g.add_argument("--arm-env", action="append", default=[], metavar="ARM:K=V", help="environment for one arm")
    g.add_argument("--no-phase-timing", action="store_true",
                   help="do not set SGLANG_EAGLE_PHASE_TIMING=1 (it is set by default; no effect without the "
                        "eagle_profiling patch)")
    m = p.add_argument_group("method")
    m.add_argument("--restarts", type=int, default=9, help="server starts per arm (default %(default)s)")
    m.add_argument("--reps-per-start", type=int, default=1, help="measured repetitions per start")
    m.add_argument("--warmup-reps", type=int, default=1, help="discarded repetitions after each start")
    m.add_argument("--max-new-tokens", type=int, default=256)
    m.add_argument("--b1-requests", type=int, default=4)
    m.add_argument("--concurrency", type=int, default=8)
    m.add_argument("--metric", default="step_ms_b1",
                   choices=["step_ms_b1", "step_ms_bc", "tok_s_b1", "tok_s_bc", "eagle_verify_ms_b1",
                            "eagle_draft_ms_b1", "eagle_draft_extend_ms_b1", "eagle_step_ms_b1"],
                   help="primary metric for verdicts and bisect (eagle_*: needs eagle_profiling + phase timing)")
    m.add_argument("--alpha", type=float, default=0.01)
    m.add_argument("--min-effect", type=float, default=0.02, help="relative; 0.02 = 2%%")
    m.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="stop before a server start that would end past S seconds (keeps data; --resume later)")
    o = p.add_argument_group("results")
    o.add_argument("--out", type=Path, default=None, help="run dir (default bench/results/<date>-<gpu>/<kind>-<time>)")
    o.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue an interrupted run with its recorded command")
    o.add_argument("--dry-run", action="store_true",
                   help="print the arms, their sets and launch commands, and the number of server starts; run nothing")
    o.add_argument("--reuse", type=Path, action="append", default=[], metavar="JSONL",
                   help="pool completed starts of identical arms from another store (same workload/server args)")
    p.epilog = "Server arguments for `python -m sglang.launch_server` go after `--`."


def build_parser() -> argparse.ArgumentParser:
    from . import engine_speed, oea_micro, tinymodel

    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ab", help="compare named arms (first arm is the reference)")
    p.add_argument("--arms", nargs="+", required=True, metavar="NAME=SET[@PROFILE]",
                   help="SET: preset | a,b | preset-a | preset+b | none; @PROFILE: apply.py --env-profile")
    _add_run_options(p)
    p = sub.add_parser("ablate", help="each patch alone on the base set, and each left out of the full set")
    p.add_argument("--base", default="none", help="set the single patches are added to (default: pristine)")
    p.add_argument("--full", default="full")
    p.add_argument("--patches", default=None, help="comma list to ablate (default: full minus base, code-changing)")
    p.add_argument("--mode", choices=["both", "alone", "leave-out"], default="both")
    p.add_argument("--env-profile", default=None)
    _add_run_options(p)
    p = sub.add_parser("bisect", help="find the patch that makes --bad slower than --good")
    p.add_argument("--good", required=True)
    p.add_argument("--bad", required=True)
    p.add_argument("--env-profile", default=None)
    _add_run_options(p)
    p = sub.add_parser("report", help="(re)write report.md + plot.png of a run dir")
    p.add_argument("run_dir", type=Path)
    tinymodel.add_cli(sub)
    oea_micro.add_cli(sub)
    engine_speed.add_cli(sub)
    return ap


def _make_config(kind: str, a, server_args: list[str], argv: list[str]):
    from .hostinfo import gpu_names, gpu_slug
    from .launcher import LaunchConfig
    from .runner import RunConfig
    from .workload import Workload

    out = a.resume or a.out
    if out is None:
        now = datetime.now()
        out = RESULTS_ROOT / f"{now:%Y-%m-%d}-{gpu_slug(gpu_names())}" / f"{kind}-{now:%H%M%S}"
    launch = LaunchConfig(launcher=tuple(shlex.split(a.launcher)), tree=a.tree, manifest=a.manifest,
                          server_args=tuple(server_args), health_timeout_s=a.health_timeout,
                          start_timeout_s=a.health_timeout + 60)
    for n, v in (("--restarts", a.restarts), ("--reps-per-start", a.reps_per_start)):
        if v < 1:
            raise SystemExit(f"{n} must be >= 1")
    return RunConfig(kind=kind, out_dir=Path(out), argv=argv, launch=launch,
                     workload=Workload(a.max_new_tokens, a.b1_requests, a.concurrency),
                     restarts=a.restarts, reps_per_start=a.reps_per_start, warmup_reps=a.warmup_reps,
                     phase_timing=not a.no_phase_timing, env=dict(a.env), metric=a.metric, alpha=a.alpha,
                     min_effect=a.min_effect, reuse=list(a.reuse), time_budget_s=a.time_budget)


def _arm_env(a, name: str) -> tuple[tuple[str, str], ...]:
    out = []
    for spec in a.arm_env:
        arm, sep, kv = spec.partition(":")
        if not sep:
            raise SystemExit(f"--arm-env expects ARM:K=V, got {spec!r}")
        if arm == name:
            out.append(_kv(kv))
    return tuple(out)


def _arms_and_comparisons(kind: str, a, catalog):
    from .launcher import ArmSpec
    from .sets import SetError, resolve

    def arm(name: str, expr: str, profile=None) -> ArmSpec:
        return ArmSpec(name, resolve(catalog, expr), profile, _arm_env(a, name))

    if kind == "ab":
        arms = []
        for spec in a.arms:
            name, sep, rest = spec.partition("=")
            if not sep or not name:
                raise SystemExit(f"--arms expects NAME=SET[@PROFILE], got {spec!r}")
            expr, _, profile = rest.partition("@")
            arms.append(arm(name, expr, profile or None))
        if len({x.name for x in arms}) != len(arms):
            raise SystemExit("arm names must be unique")
        return arms, [("ab", arms[0].name, x.name) for x in arms[1:]], {}
    if kind == "ablate":
        base, full = arm("base", a.base, a.env_profile), arm("full", a.full, a.env_profile)
        extra = [p for p in full.pset.patches if p not in base.pset.patches]
        if a.patches:
            cands = [p.strip() for p in a.patches.split(",") if p.strip()]
            bad = [p for p in cands if p not in extra]
            if bad:
                raise SystemExit(f"--patches {','.join(bad)}: not in full minus base ({','.join(extra)})")
        else:
            cands = list(catalog.changing(extra))
        if not cands:
            raise SystemExit(f"nothing to ablate: full minus base is {extra or 'empty'}")
        arms, comps, skipped = [base, full], [("full vs base", "base", "full")], []
        for p in cands:
            for mode, name, expr, ref in (("alone", f"+{p}", f"{a.base}+{p}", "base"),
                                          ("leave-out", f"-{p}", f"{a.full}-{p}", "full")):
                if a.mode not in ("both", mode):
                    continue
                try:
                    arms.append(arm(name, expr, a.env_profile))
                    comps.append((mode, ref, name))
                except SetError as e:
                    skipped.append(f"{name}: {e}")
        if a.mode == "alone":
            arms.remove(full)
            comps = [c for c in comps if c[0] != "full vs base"]
        elif a.mode == "leave-out":
            arms.remove(base)
            comps = [c for c in comps if c[0] != "full vs base"]
        return arms, comps, {"ablated": cands, "skipped": skipped}
    good, bad = arm("good", a.good, a.env_profile), arm("bad", a.bad, a.env_profile)
    return [good, bad], [("bisect endpoints", "good", "bad")], {}


def run_measurement(kind: str, argv_full: list[str]) -> int:
    from . import store
    from .report import write_report
    from .runner import BudgetExhausted, Runner, RunAborted, bisect_run, progress
    from .sets import Catalog, SetError

    ap = build_parser()
    own, server_args = _split_server_args(argv_full)
    if "--resume" in own:
        # Everything comes from the recorded command; only the run dir is taken from this one.
        i = own.index("--resume")
        if i + 1 >= len(own):
            raise SystemExit("--resume needs the run dir")
        resume_dir = Path(own[i + 1])
        recs = [r for r in store.read(resume_dir / "results.jsonl") if r.get("type") == "run"]
        if not recs:
            raise SystemExit(f"--resume {resume_dir}: no results.jsonl with a run record there")
        argv_full = recs[0]["argv"][4:]  # [python, -m, bench, kind, ...]
        own, server_args = _split_server_args(argv_full)
        a = ap.parse_args([kind, *own])
        a.resume = resume_dir
    else:
        a = ap.parse_args([kind, *own])
    try:
        catalog = Catalog.from_manifest(a.manifest)
        arms, comps, extra = _arms_and_comparisons(kind, a, catalog)
    except SetError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "bench", kind, *argv_full]
    cfg = _make_config(kind, a, server_args, argv)
    if a.dry_run:
        return _dry_run(kind, cfg, arms, catalog, extra)
    runner = Runner(cfg, arms, comps, extra_run_fields=extra)
    for s in extra.get("skipped", []):
        progress(f"skipped arm {s}")
    progress(f"run dir {cfg.out_dir} ({len(runner.unique_arms())} arms x {cfg.restarts} start(s) x "
             f"{cfg.reps_per_start} rep(s))")
    rc = 0
    try:
        if kind == "bisect":
            res = bisect_run(runner, catalog, arms[0], arms[1])
            progress(f"bisect: culprit {res.culprit or 'none'} ({res.reason}); {runner.units_started} starts, "
                     f"{runner.elapsed() / 60:.1f} min")
        else:
            runner.run_interleaved()
    except RunAborted as e:
        print(f"bench: aborted: {e}", file=sys.stderr)
        rc = EXIT_ABORTED
    except BudgetExhausted as e:
        print(f"bench: time budget: {e}; continue with `python -m bench {kind} --resume {cfg.out_dir}`",
              file=sys.stderr)
        rc = EXIT_BUDGET
    except KeyboardInterrupt:
        print(f"bench: interrupted; what was measured is in {cfg.store_path}; continue with "
              f"`python -m bench {kind} --resume {cfg.out_dir}`", file=sys.stderr)
        rc = 130
    report = write_report(cfg.out_dir)
    progress(f"report {report}")
    return rc


def _dry_run(kind, cfg, arms, catalog, extra) -> int:
    import math

    from .bisect import candidates_between
    from .launcher import launch_command

    uniq = {a.key: a for a in arms}
    for a in arms:
        print(f"arm {a.name}: {a.pset.label}" + (f" @{a.env_profile}" if a.env_profile else "")
              + (f" env {dict(a.env)}" if a.env else ""))
        print("   " + " ".join(shlex.quote(c) for c in launch_command(cfg.launch, a, Path("LOG"))))
    for s in extra.get("skipped", []):
        print(f"skipped {s}")
    starts = len(uniq) * cfg.restarts
    if kind == "bisect":
        cands = candidates_between(arms[0].pset.patches, arms[1].pset.patches)
        probes = (math.ceil(math.log2(len(cands))) if len(cands) > 1 else 0)
        print(f"candidates: {', '.join(cands) or '(none)'}; at most {probes} probe set(s) after the references")
        starts += probes * cfg.restarts
    print(f"server starts (before --reuse): {starts} (x {cfg.reps_per_start} rep(s) + {cfg.warmup_reps} warm-up each); "
          f"out: {cfg.out_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("ab", "ablate", "bisect"):
        return run_measurement(argv[0], argv[1:])
    a = build_parser().parse_args(argv)
    if a.cmd == "report":
        from .report import write_report

        print(write_report(a.run_dir))
        return 0
    return a.func(a)
