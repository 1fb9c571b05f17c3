"""Measure what each patch does to a real SGLang server: ab, ablate, bisect, report (and the GPU checks' tools)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sglang_overlay.errors import EXIT_BAD_INPUT, OverlayError

from .errors import EXIT_ABORTED, EXIT_BUDGET, RecordError, UsageError
from .launcher import DEFAULT_LAUNCHER
from .machine import MODES
from .replication import METRICS, WARM_START_ESTIMATE_S

PIP_EXTRA = "pip install 'sglang-overlay[bench]'"
# What the [bench] extra brings: a missing one is exit 2 naming PIP_EXTRA, never a traceback.
EXTRA_MODULES = ("scipy", "numpy", "matplotlib", "tokenizers", "transformers", "safetensors")
MEASURE = ("ab", "ablate", "bisect")


@dataclass(frozen=True)
class Context:
    """What the tool's `bench` command knows: the project dir (default --out goes under PROJECT/bench/results)."""

    project: Path | None = None


def _split_server_args(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _kv(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    return k, v


def _add_run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tool and server")
    g.add_argument("--manifest", default="manifest.yaml", help="manifest for set names (passed to the tool)")
    g.add_argument("--tree", default=None, help="SGLang tree (passed to the tool's --tree)")
    g.add_argument("--pin", default=None, metavar="VERSION", help="another pin's patch set (the tool's --pin)")
    launcher = " ".join(shlex.quote(x) for x in DEFAULT_LAUNCHER)
    g.add_argument("--launcher", default=launcher, help="command with the `launch` contract (default: %(default)s)")
    g.add_argument("--health-timeout", type=float, default=900.0)
    g.add_argument("--env", type=_kv, action="append", default=[], metavar="K=V", help="environment of every server")
    g.add_argument("--arm-env", action="append", default=[], metavar="ARM:K=V", help="environment of one arm")
    g.add_argument("--no-phase-timing", action="store_true", help="do not set SGLANG_EAGLE_PHASE_TIMING=1")
    g.add_argument(
        "--cpu-placement",
        choices=MODES,
        default="spread",
        help="spread: the scheduler's main thread on a core of its own (default; BENCH_CPU_PLACEMENT per arm)",
    )
    m = p.add_argument_group("method: the server start is the unit; a start's value is its repetitions' geomean")
    m.add_argument("--restarts", type=int, default=3, metavar="N", help="starts per arm before the first look (3)")
    m.add_argument(
        "--max-starts", type=int, default=None, metavar="N", help="starts per arm at most (8); then 'cannot tell'"
    )
    m.add_argument("--reps-per-start", type=int, default=5, help="measured repetitions per start (5)")
    m.add_argument("--warmup-reps", type=int, default=2, help="discarded repetitions after each start (2)")
    m.add_argument("--no-warmup-start", action="store_true", help="skip the throwaway first start (JIT, graphs)")
    m.add_argument("--max-new-tokens", type=int, default=128)
    m.add_argument("--b1-requests", type=int, default=2)
    m.add_argument("--concurrency", type=int, default=8)
    m.add_argument("--ttft-requests", type=int, default=4, help="one-token requests per repetition (prefill); 0: none")
    metrics = [x for x, _, _ in METRICS]
    m.add_argument("--metric", default="step_ms_b1", choices=metrics, help="primary metric (eagle_*: eagle_profiling)")
    m.add_argument("--no-follow", action="store_true", help="bisect: do not follow another metric that regressed")
    m.add_argument("--alpha", type=float, default=0.05, help="1 - confidence of the intervals (0.05)")
    m.add_argument("--spending", choices=["obf", "pocock", "bonferroni"], default="pocock", help="alpha over looks")
    m.add_argument("--look-step", type=int, default=1, metavar="N", help="starts per arm between looks (1)")
    m.add_argument(
        "--confirm", choices=["shared", "fresh"], default="shared", help="bisect: fresh measures good and bad again"
    )
    m.add_argument("--min-effect", type=float, default=0.02, help="smallest change called (0.02 = 2%%)")
    m.add_argument("--time-budget", type=float, default=None, metavar="S", help="stop before a start past S seconds")
    m.add_argument(
        "--warm-start-estimate",
        type=float,
        default=WARM_START_ESTIMATE_S,
        metavar="S",
        help="seconds a warm start is taken to cost before one was seen (%(default)s)",
    )
    o = p.add_argument_group("results")
    o.add_argument("--out", type=Path, default=None, help="run dir (PROJECT/bench/results/DATE-GPU/KIND-TIME)")
    o.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="continue a run (its recorded command)")
    o.add_argument("--dry-run", action="store_true", help="print the arms, commands and server starts; run nothing")
    o.add_argument(
        "--reuse", type=Path, action="append", default=[], metavar="JSONL", help="pool starts from another store"
    )
    p.epilog = "Server arguments for `python -m sglang.launch_server` go after `--`."


def build_parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    from . import server_seqs, tinymodel, train_draft

    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ab", help="compare named arms (first arm is the reference)")
    p.add_argument(
        "--arms",
        nargs="+",
        required=True,
        metavar="NAME=SET[@PROFILE]",
        help="SET: preset | a,b | preset-a | preset+b | none; @PROFILE: the tool's --env-profile",
    )
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
    sub.add_parser(
        "speed", help="the tool's own speed against quilt, StGit and git (bench speed --help)", add_help=False
    )
    tinymodel.add_cli(sub)
    server_seqs.add_cli(sub)
    train_draft.add_cli(sub)
    return ap


def _options_not_taken(given: list[str], recorded: list[str]) -> list[str]:
    """A --resume call's options that differ from the recorded command's (--out and --time-budget aside)."""

    def options(xs: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        key = None
        for x in xs:
            if x.startswith("--"):
                k, eq, v = x.partition("=")
                key = k
                out[key] = [v] if eq else []
            elif key is not None:
                out[key].append(x)
        return out

    g, r = options(given), options(recorded)
    return [
        " ".join([k, *v]) for k, v in g.items() if k not in ("--out", "--time-budget", "--resume") and r.get(k) != v
    ]


def _reuse_store(given: str) -> Path:
    """A --reuse path as a store file (a run dir: its results.jsonl); a path that names none is refused."""
    p = Path(given)
    if p.is_dir():
        p = p / "results.jsonl"
    if not p.is_file():
        raise UsageError(f"--reuse {given}: no such store (give a run directory or its results.jsonl)")
    return p


def default_out(kind: str, project: Path, now: datetime | None = None) -> Path:
    """PROJECT/bench/results/DATE-GPU/KIND-TIME: the project's, wherever the bench is installed."""
    from .machine import gpu_names, gpu_slug

    now = now or datetime.now()
    return project / "bench" / "results" / f"{now:%Y-%m-%d}-{gpu_slug(gpu_names())}" / f"{kind}-{now:%H%M%S}"


def _make_config(kind: str, a, server_args: list[str], argv: list[str], context: Context):
    from .launcher import LaunchConfig
    from .runner import RunConfig
    from .workload import Workload

    out = a.resume or a.out
    if out is None:
        out = default_out(kind, context.project or Path(a.manifest).resolve().parent)
    launch = LaunchConfig(
        launcher=tuple(shlex.split(a.launcher)),
        tree=a.tree,
        manifest=a.manifest,
        pin=a.pin,
        server_args=tuple(server_args),
        health_timeout_s=a.health_timeout,
        start_timeout_s=a.health_timeout + 60,
    )
    for n, v in (
        ("--restarts", a.restarts),
        ("--reps-per-start", a.reps_per_start),
        ("--max-starts", 1 if a.max_starts is None else a.max_starts),
        ("--look-step", a.look_step),
    ):
        if v < 1:
            raise UsageError(f"{n} must be >= 1")
    # given both, a ceiling below the first look had been raised quietly to it: the run spent more starts than asked
    if a.max_starts is not None and a.max_starts < a.restarts:
        raise UsageError(
            f"--max-starts {a.max_starts} is below --restarts {a.restarts}: the first look alone takes "
            f"{a.restarts} starts per arm (raise --max-starts or lower --restarts)"
        )
    max_starts = max(8, a.restarts) if a.max_starts is None else a.max_starts
    if not 0 < a.alpha < 1:
        raise UsageError("--alpha must be in (0, 1)")
    # each of these had been taken: a negative minimum effect called a null pair a regression, -1 crashed after
    # measuring, a budget of 0 let each --resume spend its one start on the throwaway
    if not 0 <= a.min_effect < 1:
        raise UsageError(f"--min-effect {a.min_effect:g}: give a relative change from 0 to below 1 (0.02 = 2%)")
    if a.time_budget is not None and not a.time_budget > 0:
        raise UsageError(f"--time-budget {a.time_budget:g}: give seconds above 0, or leave it out (no budget)")
    for n, v, low in (
        ("--warmup-reps", a.warmup_reps, 0),
        ("--max-new-tokens", a.max_new_tokens, 1),
        ("--b1-requests", a.b1_requests, 1),
        ("--concurrency", a.concurrency, 1),
    ):
        if v < low:
            raise UsageError(f"{n} {v}: must be >= {low}")
    if not a.health_timeout > 0:
        raise UsageError(f"--health-timeout {a.health_timeout:g}: give seconds above 0")
    if a.ttft_requests < 0:
        raise UsageError("--ttft-requests must be >= 0 (0: no time-to-first-token phase)")
    return RunConfig(
        kind=kind,
        out_dir=Path(out),
        argv=argv,
        launch=launch,
        workload=Workload(a.max_new_tokens, a.b1_requests, a.concurrency, ttft_requests=a.ttft_requests),
        initial_starts=a.restarts,
        max_starts=max_starts,
        reps_per_start=a.reps_per_start,
        warmup_reps=a.warmup_reps,
        warmup_start=not a.no_warmup_start,
        cpu_placement=a.cpu_placement,
        phase_timing=not a.no_phase_timing,
        env=dict(a.env),
        metric=a.metric,
        follow=not a.no_follow,
        confidence=1 - a.alpha,
        min_effect=a.min_effect,
        spending=a.spending,
        look_step=a.look_step,
        confirm=a.confirm,
        reuse=[Path(x) for x in a.reuse] if a.resume else [_reuse_store(x) for x in a.reuse],  # a resume imports none
        time_budget_s=a.time_budget,
        warm_start_estimate_s=a.warm_start_estimate,
    )


def _arm_env(a, name: str) -> tuple[tuple[str, str], ...]:
    out = []
    for spec in a.arm_env:
        arm, sep, kv = spec.partition(":")
        if not sep:
            raise UsageError(f"--arm-env expects ARM:K=V, got {spec!r}")
        if arm == name:
            try:
                out.append(_kv(kv))
            except argparse.ArgumentTypeError as e:
                raise UsageError(f"--arm-env {spec}: {e}") from None
    return tuple(out)


def _refuse_unknown_arm_env(a, arms) -> None:
    unknown = sorted({spec.partition(":")[0] for spec in a.arm_env} - {x.name for x in arms})
    if unknown:
        raise UsageError(f"--arm-env names no arm: {', '.join(unknown)} (arms: {', '.join(x.name for x in arms)})")


def _arms_and_comparisons(kind: str, a, catalog):
    """(arms, comparisons as (section, ref name, arm name), plan extras) for the kind."""
    from .launcher import ArmSpec, SetError, resolve

    def arm(name: str, expr: str, profile=None) -> ArmSpec:
        if profile is not None:
            try:  # an unknown profile had been found by apply.py launch, after the other arms' starts
                catalog.manifest.env_profile(profile)
            except OverlayError as e:
                raise UsageError(f"arm {name}: {e}" + (f" ({e.hint})" if e.hint else "")) from None
        return ArmSpec(name, resolve(catalog, expr), profile, _arm_env(a, name))

    if kind == "ab":
        arms: list[ArmSpec] = []
        for spec in a.arms:
            name, sep, rest = spec.partition("=")
            if not sep or not name:
                raise UsageError(f"--arms expects NAME=SET[@PROFILE], got {spec!r}")
            expr, _, profile = rest.partition("@")
            arms.append(arm(name, expr, profile or None))
        if len({x.name for x in arms}) != len(arms):
            raise UsageError("arm names must be unique")
        _refuse_unknown_arm_env(a, arms)
        # any two, not only against the first: arms with one key share their starts, so `c` would be read from
        # `b`'s starts and agree with it by construction
        for i, first in enumerate(arms):
            same = [y.name for y in arms[i + 1 :] if y.key == first.key]
            if same:
                raise UsageError(
                    f"arms {first.name} and {', '.join(same)} are the same measurement (same set, profile "
                    f"and env); for a null comparison give one of them a harmless --arm-env"
                )
        return arms, [("ab", arms[0].name, x.name) for x in arms[1:]], {}
    if kind == "ablate":
        base, full = arm("base", a.base, a.env_profile), arm("full", a.full, a.env_profile)
        extra = [p for p in full.pset.patches if p not in base.pset.patches]
        if a.patches:
            cands = [p.strip() for p in a.patches.split(",") if p.strip()]
            unknown = [p for p in cands if p not in extra]
            if unknown:
                raise UsageError(f"--patches {','.join(unknown)}: not in full minus base ({','.join(extra)})")
        else:
            cands = list(catalog.changing(extra))
        if not cands:
            raise UsageError(f"nothing to ablate: full minus base is {extra or 'empty'}")
        alone: dict[str, ArmSpec | None] = {}
        leave: dict[str, ArmSpec | None] = {}
        skipped: list[str] = []
        for p in cands:
            for table, name, expr in ((alone, f"+{p}", f"{a.base}+{p}"), (leave, f"-{p}", f"{a.full}-{p}")):
                try:
                    table[p] = arm(name, expr, a.env_profile)
                except SetError as e:
                    table[p] = None
                    skipped.append(f"{name}: {e}")
        arms = [base, full]
        arms += [x for p in cands for x in (alone[p], leave[p]) if x is not None]
        _refuse_unknown_arm_env(a, arms)
        comps = [("full vs base", "base", "full")]
        comps += [("alone", "base", x.name) for p in cands if (x := alone[p]) is not None]
        comps += [("leave-out", "full", x.name) for p in cands if (x := leave[p]) is not None]
        return arms, comps, {"ablated": cands, "skipped": skipped, "mode": a.mode, "alone": alone, "leave": leave}
    good, bad = arm("good", a.good, a.env_profile), arm("bad", a.bad, a.env_profile)
    # refused here, before any start: found by the search, after the endpoints' starts, it had ended in a traceback
    _refuse_unknown_arm_env(a, [good, bad])
    if good.pset.patches == bad.pset.patches:  # an --arm-env apart or not: no patch lies between them
        raise UsageError(f"--good {a.good} and --bad {a.bad} are the same set: there is nothing between them")
    extra = [p for p in good.pset.patches if p not in bad.pset.patches]
    if extra:
        raise UsageError(
            f"--good {a.good} holds {', '.join(extra)}, which --bad {a.bad} does not: bisect searches the "
            "patches bad adds to good (swapped endpoints?)"
        )
    return [good, bad], [("bisect endpoints", "good", "bad")], {}


def _settings(cfg):
    from .plans import Settings
    from .replication import Policy

    pol = Policy(
        cfg.initial_starts,
        cfg.max_starts,
        cfg.confidence,
        cfg.min_effect,
        cfg.spending,
        cfg.look_step,
    )
    return Settings(pol, cfg.metric, cfg.follow, cfg.confirm)


def _run_plan(kind: str, runner, lab, catalog, arms, comps, extra) -> dict:
    from . import plans
    from .launcher import ArmSpec, PatchSet

    s = _settings(runner.cfg)
    by_name = {x.name: x for x in arms}
    if kind == "ab":
        return plans.run_ab(lab, arms, [(sec, by_name[r], by_name[x]) for sec, r, x in comps], s)
    if kind == "ablate":
        base, full = by_name["base"], by_name["full"]
        return plans.run_ablate(lab, base, full, extra["alone"], extra["leave"], extra["mode"], s)
    good, bad = arms
    names: dict[str, int] = {}

    def make_arm(patches: tuple[str, ...], role: str) -> ArmSpec:
        closed = catalog.closure(patches)
        for a in runner.arms:
            if a.pset.patches == closed and a.env_profile == bad.env_profile and a.env == bad.env:
                return a
        names.setdefault(role, len(names) + 1)
        return ArmSpec(f"probe{names[role]}", PatchSet(",".join(closed) or "none", closed), bad.env_profile, bad.env)

    return plans.run_bisect(lab, good, bad, make_arm, catalog.dependents, s)


def run_measurement(
    kind: str, argv_full: list[str], prog: str = "python -m bench", context: Context = Context()
) -> int:
    from . import store
    from .errors import BudgetExhausted, RunAborted, SetError, WriteFailed
    from .launcher import Catalog
    from .report import write_report
    from .runner import Runner, StoreLab, progress

    ap = build_parser(prog)
    again = f"{prog} {kind} --resume"
    own, server_args = _split_server_args(argv_full)
    if "--resume" in own:
        # Everything comes from the recorded command but the run dir and this call's --time-budget (a budget is
        # per call: a device call's seconds). Other options given are not used: said so, not silently.
        i = own.index("--resume")
        if i + 1 >= len(own):
            raise UsageError("--resume needs the run dir")
        resume_dir = Path(own[i + 1]).resolve()
        given = own[:i] + own[i + 2 :]
        only_budget = argparse.ArgumentParser(prog=f"{prog} {kind}", add_help=False)
        only_budget.add_argument("--time-budget", type=float, default=None)
        budget = only_budget.parse_known_args(given)[0].time_budget
        recs = [r for r in store.read(resume_dir / "results.jsonl") if r.get("type") == "run"]
        if not recs:
            raise UsageError(f"--resume {resume_dir}: no results.jsonl with a run record there")
        if recs[0].get("kind") not in (None, kind):
            raise UsageError(f"--resume {resume_dir}: that directory holds a `{recs[0]['kind']}` run, not `{kind}`")
        argv_full = _recorded_args(recs[0]["argv"], kind)
        given_server = server_args
        own, server_args = _split_server_args(argv_full)
        ignored = _options_not_taken(given, own)
        if given_server and given_server != server_args:
            ignored.append("-- " + " ".join(given_server))
        if ignored:
            print(
                f"bench: --resume continues the recorded command ({resume_dir / 'command.txt'}); not used from this "
                f"one: {' '.join(ignored)} (to change them, start a new --out)",
                file=sys.stderr,
            )
        # the recorded command's relative paths (--manifest, --tree) are its own directory's
        cwd = recs[0].get("cwd")
        if cwd and Path(cwd).is_dir() and Path(cwd).resolve() != Path.cwd().resolve():
            os.chdir(cwd)
        a = ap.parse_args([kind, *own])
        a.resume = resume_dir
        if budget is not None:
            a.time_budget = budget
    else:
        a = ap.parse_args([kind, *own])
    try:
        catalog = Catalog.from_manifest(a.manifest)
        arms, comps, extra = _arms_and_comparisons(kind, a, catalog)
    except SetError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    head = [sys.executable, "-m", "bench"] if prog == "python -m bench" else shlex.split(prog)
    argv = [*head, kind, *argv_full]
    cfg = _make_config(kind, a, server_args, argv, context)
    if a.dry_run:
        return _dry_run(kind, cfg, arms, extra)
    record_extra = {k: v for k, v in extra.items() if k in ("ablated", "skipped", "mode")}
    store.hold_run_dir(cfg.out_dir)  # before the first write into it: a second process is refused, not interleaved
    try:
        runner = Runner(cfg, arms, comps, extra_run_fields=record_extra)
    except (RunAborted, WriteFailed) as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the run dir's records were written: each is whole (store.append)
        print(f"bench: interrupted; continue with `{again} {cfg.out_dir}`", file=sys.stderr)
        return 130
    for s in extra.get("skipped", []):
        progress(f"skipped arm {s}")
    progress(
        f"run dir {cfg.out_dir} ({len(arms)} arms, {cfg.initial_starts} to {cfg.max_starts} starts each, "
        f"{cfg.reps_per_start} rep(s) per start" + (", after one throwaway start)" if cfg.warmup_start else ")")
    )
    lab = StoreLab(runner)
    rc = 0
    try:
        conclusion = _run_plan(kind, runner, lab, catalog, arms, comps, extra)
        conclusion["server_starts_this_run"] = runner.units_started
        conclusion["elapsed_s"] = round(runner.elapsed(), 1)
        runner.rec(conclusion)
        progress(_summary(conclusion))
        if conclusion.get("budget_exhausted"):
            print(
                f"bench: time budget: {conclusion['budget_message']}; continue with `{again} {cfg.out_dir}`",
                file=sys.stderr,
            )
            rc = EXIT_BUDGET
    except RunAborted as e:
        print(f"bench: aborted: {e}", file=sys.stderr)
        rc = EXIT_ABORTED
    except WriteFailed as e:  # the store refused a record (a full disk): the servers are stopped, the run resumes
        print(f"bench: {e}", file=sys.stderr)
        rc = e.exit_code
    except BudgetExhausted as e:  # a start refused outside a plan's own handling
        print(f"bench: time budget: {e}; continue with `{again} {cfg.out_dir}`", file=sys.stderr)
        rc = EXIT_BUDGET
    except KeyboardInterrupt:
        print(
            f"bench: interrupted; what was measured is in {cfg.store_path}; continue with `{again} {cfg.out_dir}`",
            file=sys.stderr,
        )
        rc = 130
    try:
        report = write_report(cfg.out_dir)
    except WriteFailed as e:  # what was measured is in the store: the report can be written again from it
        print(f"bench: {e}", file=sys.stderr)
        return rc or e.exit_code
    except KeyboardInterrupt:  # the report is written whole or not at all (store.write_whole)
        print(f"bench: interrupted writing the report; `{prog} report {cfg.out_dir}` writes it", file=sys.stderr)
        return 130
    progress(f"report {report}")
    return rc


def _summary(c: dict) -> str:
    if c["kind"] == "bisect":
        who = c.get("culprit")
        if c.get("partner"):
            who = f"{c['partner']} + {who} (interaction)"
        return f"bisect on {c['metric']}: {c['outcome']}: {who or 'no culprit named'} ({c['reason']})"
    if c["kind"] == "ablate":
        return f"ablate on {c['metric']}: culprits {', '.join(c['culprits']) or 'none'}"
    return "ab on {}: {}".format(
        c["metric"], "; ".join(f"{r['arm']} vs {r['ref']}: {r['verdict']}" for r in c["comparisons"])
    )


def _dry_run(kind, cfg, arms, extra) -> int:
    from .bisect import candidates_between
    from .launcher import launch_command

    for a in arms:
        print(
            f"arm {a.name}: {a.pset.label}"
            + (f" @{a.env_profile}" if a.env_profile else "")
            + (f" env {dict(a.env)}" if a.env else "")
        )
        print("   " + " ".join(shlex.quote(c) for c in launch_command(cfg.launch, a, Path("LOG"))))
    for s in extra.get("skipped", []):
        print(f"skipped {s}")
    first = len({a.key for a in arms})
    if kind == "ablate" and extra.get("mode") != "both":
        first = 1 + len(extra["ablated"])
    lo, hi = first * cfg.initial_starts, first * cfg.max_starts
    more = ""
    if kind == "bisect":
        cands = candidates_between(arms[0].pset.patches, arms[1].pset.patches)
        probes = (len(cands) - 1).bit_length() if len(cands) > 1 else 0
        hi += (probes + 2) * cfg.max_starts
        more = (
            f"\ncandidates: {', '.join(cands) or '(none)'}; up to {probes} search probe(s) + 2 confirmations "
            f"(+ a partner search for an interaction), each {cfg.initial_starts} to {cfg.max_starts} starts"
        )
    warm = 1 if cfg.warmup_start else 0
    each = cfg.warm_start_estimate_s
    print(
        f"server starts: {warm} throwaway + {lo} to {hi} measured ({first} arm(s) x {cfg.initial_starts} to "
        f"{cfg.max_starts} starts; more only for undecided comparisons); at {each:.0f} s a start "
        f"(--warm-start-estimate) that is {(warm + lo) * each / 60:.0f} to {(warm + hi) * each / 60:.0f} min"
        f"{more}\n{cfg.reps_per_start} rep(s) + {cfg.warmup_reps} warm-up each; out: {cfg.out_dir}"
    )
    return 0


def _recorded_args(argv: list[str], kind: str) -> list[str]:
    """The arguments after KIND of a recorded command (`python -m bench KIND ...`, or the tool's)."""
    return argv[argv.index(kind) + 1 :] if kind in argv else argv[4:]


def _missing_extra(e: ImportError) -> str | None:
    name = (e.name or "").partition(".")[0]
    return name if name in EXTRA_MODULES else None


def main(argv: list[str] | None = None, prog: str = "python -m bench", context: Context | None = None) -> int:
    """The bench's command line; `prog` and `context` are the tool's when `sglang-overlay bench` calls it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    context = context or Context()
    if argv[:1] == ["speed"]:  # its own parser (bench/speed.py); loaded only when asked for
        import importlib

        return importlib.import_module(".speed", __package__).main(argv[1:])
    try:
        return _main(argv, prog, context)
    except ImportError as e:
        if (name := _missing_extra(e)) is None:
            raise
        print(f"bench: this command needs {name}, from the bench extra: {PIP_EXTRA}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _main(argv: list[str], prog: str, context: Context) -> int:
    if argv[:1] and argv[0] in (*MEASURE, "report") and not {"-h", "--help"} & set(argv):
        import numpy  # noqa: F401  # the extra, asked for before any server starts
        import scipy  # noqa: F401
    if argv and argv[0] in MEASURE:
        try:
            return run_measurement(argv[0], argv[1:], prog, context)
        except (UsageError, RecordError) as e:  # bad arguments or store: the message and exit 2, never a traceback
            print(f"bench: {e}", file=sys.stderr)
            return e.exit_code
    # server-seqs starts a server too: its args after `--` are the server's, as for ab
    own, server_args = _split_server_args(argv) if argv[:1] == ["server-seqs"] else (argv, [])
    a = build_parser(prog).parse_args(own)
    if server_args:
        a.server_args = server_args
    try:
        if a.cmd == "report":
            from .report import write_report

            print(write_report(a.run_dir))
            return 0
        return a.func(a)
    except OverlayError as e:  # every subcommand's bad input or failure: the message, not a traceback
        print(f"bench: {e}", file=sys.stderr)
        return e.exit_code
