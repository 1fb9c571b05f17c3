"""`bench simulate`: bisect's error rates on simulated servers (bench.simulate), or the named adversarial
scenarios (bench.scenarios), printed as figures and markdown rows.

A command module of its own, above both: bench.scenarios builds on bench.simulate's worlds, and the command
reads both.
"""

from __future__ import annotations

import sys

from .errors import UsageError
from .simulate import World, bisect_rates, duet_rates, host_slowdown, recorded_starts


def add_cli(sub) -> None:
    p = sub.add_parser("simulate", help="error rates of bisect on simulated servers (CPU; choose budgets)")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--candidates", type=int, default=3, help="patches between good and bad")
    p.add_argument("--effect", type=float, default=0.05, help="planted step-time regression (0 = a null run)")
    p.add_argument("--start-cv", type=float, default=0.01)
    p.add_argument("--rep-cv", type=float, default=0.01)
    p.add_argument("--bimodal-p", type=float, default=0.0)
    p.add_argument("--bimodal-shift", type=float, default=0.0)
    p.add_argument("--initial", type=int, default=3)
    p.add_argument("--max-starts", type=int, default=8)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--min-effect", type=float, default=0.02)
    p.add_argument(
        "--spending",
        choices=["obf", "pocock", "bonferroni"],
        default="pocock",
        help="alpha over the looks (bench/sequential.py); bonferroni = the method before 2026-12-01's fourth session",
    )
    p.add_argument("--look-step", type=int, default=1, help="starts per arm between planned looks")
    p.add_argument(
        "--adjust",
        choices=["none", "host", "steal", "state"],
        default="none",
        help="verdicts at a fixed host speed (bench.covariate; the host-regime scenarios carry the covariates)",
    )
    p.add_argument(
        "--from-record",
        metavar="RESULTS_JSONL",
        help="draw each start from a recorded GPU run's starts (its noise, not a model of it); "
        "--start-cv/--rep-cv/--bimodal-* are then unused",
    )
    p.add_argument("--record-set", metavar="A,B", help="with --from-record: the patch set whose starts to draw")
    p.add_argument(
        "--confirm",
        choices=["fresh", "shared"],
        default="shared",
        help="bisect's confirmations: a block of fresh good/bad starts, or the endpoints' and probes' starts "
        "shared (bench/plans.py Settings.confirm)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help="run a named adversarial scenario instead (bench/scenarios.py; 'all', or 'list' to print them); "
        "repeatable; prints one markdown row each with Clopper-Pearson intervals",
    )
    p.add_argument(
        "--plan",
        choices=["bisect", "ablate"],
        default="bisect",
        help="with --scenario: the plan to run (ablate: both modes over the candidates on g; outcomes count each "
        "patch's finding)",
    )
    d = p.add_argument_group("duet (bench/duet.py): an A/B run sequentially and as duets on a host that changes state")
    d.add_argument(
        "--duet",
        action="store_true",
        help="compare `ab` of a null (or --effect) pair sequentially and as duets on the same simulated machines",
    )
    d.add_argument(
        "--concurrent",
        action="store_true",
        help="ablate --mode leave-out over --candidates (the last one carrying --effect) sequentially and as blocks "
        "(bench/blocks.py) on the same simulated machines",
    )
    d.add_argument("--host-slow", type=float, default=0.6, help="the slow state's slowdown (run7: ~4.4 vs 7-8 ms)")
    d.add_argument("--host-stay", type=float, default=0.95, help="probability the state holds over one repetition")
    d.add_argument("--host-ticks", type=int, default=10, help="chain steps while one server starts")
    d.add_argument(
        "--host-per-server",
        action="store_true",
        help="--concurrent: each server of a block on its own chain (the H200's blocks of two: the j-th repetitions "
        "of two servers were no more alike than any two; bench/results/2026-12-03-h200-pairs: --host-slow 0.4 "
        "--host-stay 0.65 --rep-cv 0.05 match its 15-19 %% spread of repetitions within a start)",
    )
    d.add_argument(
        "--block-pairs", action="store_true", help="--concurrent: one block per comparison, two servers each"
    )
    d.add_argument("--duet-value", choices=["medians", "pairs"], default="pairs")
    d.add_argument("--reps", type=int, default=5, help="measured repetitions per start")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    from .plans import Settings
    from .replication import Policy

    _check_bounds(a)
    settings = Settings(
        Policy(a.initial, a.max_starts, a.confidence, a.min_effect, a.spending, a.look_step, adjust=a.adjust),
        confirm=a.confirm,
    )
    if a.scenario:
        return _scenarios(a, settings)
    if a.duet:
        return _duet(a, settings)
    if a.concurrent:
        from .simulate_blocks import rates_text

        print(rates_text(a, settings))
        return 0
    culprit = f"p{a.candidates - 1}" if a.effect else None
    plants = [host_slowdown(culprit, a.effect)] if culprit else []

    pool = recorded_starts(a.from_record, a.record_set) if a.from_record else ()
    if (why := _unread_covariate(pool, a)) is not None:
        print(why, file=sys.stderr)
        return 2

    def world(_t: int) -> World:
        return World(plants, a.start_cv, a.rep_cv, a.bimodal_p, a.bimodal_shift, pool=pool)

    r = bisect_rates(world, a.candidates, culprit, a.trials, settings)
    noise = (
        f"starts drawn from the {len(pool)} recorded in {a.from_record}"
        if pool
        else f"start cv {a.start_cv * 100:.1f}%, rep cv {a.rep_cv * 100:.1f}%, bimodal p {a.bimodal_p} "
        f"shift {a.bimodal_shift * 100:+.0f}%"
    )
    print(
        f"bisect over {a.candidates} candidates, planted step effect {a.effect * 100:+.1f}% "
        f"({noise}), {a.trials} trials, {a.initial} to {a.max_starts} starts per arm:"
    )
    print(
        f"  right culprit {r['right']} ({r['right'] / a.trials:.1%}), wrong culprit {r['wrong']} "
        f"({r['wrong'] / a.trials:.1%}), none named {r['none']} ({r['none'] / a.trials:.1%}); "
        f"median server starts {r['median_starts']:.0f} (max {max(r['starts'])})"
    )
    return 0


def _scenarios(a, settings) -> int:
    from . import scenarios as sc

    if "list" in a.scenario:
        for x in sc.catalogue():
            print(f"{x.name}: {x.note}" + (" (needs --from-record)" if x.needs_record else ""))
        return 0
    names = [x.name for x in sc.catalogue()] if "all" in a.scenario else a.scenario
    known = {x.name for x in sc.catalogue()}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"bench simulate: unknown scenario {', '.join(unknown)}; `--scenario list` names them", file=sys.stderr)
        return 2
    pool = tuple(recorded_starts(a.from_record, a.record_set)) if a.from_record else ()
    # only the scenarios that draw recorded starts read the record's covariates
    why = _unread_covariate(pool, a)
    if why is not None and any(sc.by_name(n).needs_record for n in names):
        print(why if "all" not in a.scenario else f"{why} (its scenarios are left out of 'all')", file=sys.stderr)
        if "all" not in a.scenario:
            return 2
    pol = settings.policy
    method = f"{pol.spending}, {settings.confirm} confirmations, {pol.initial}-{pol.max_starts} starts/arm, adjust {pol.adjust}"
    if a.plan == "ablate":
        method = f"ablate (both), {pol.spending}, {pol.initial}-{pol.max_starts} starts/arm, adjust {pol.adjust}"
    run = sc.run_ablate if a.plan == "ablate" else sc.run
    print(
        f"{a.plan}, {a.trials} seeded trials each, alpha {1 - pol.confidence:.2g}, minimum effect {pol.min_effect:.1%}"
    )
    print(sc.HEADER)
    for n in names:
        x = sc.by_name(n)
        if x.needs_record and (not pool or why is not None):
            if "all" not in a.scenario:
                print(f"bench simulate: scenario {n} draws recorded starts: give --from-record", file=sys.stderr)
                return 2
            continue
        print(sc.row(n, method, run(x, settings, a.trials, pool)), flush=True)
    return 0


def _check_bounds(a) -> None:
    """Values no simulated machine has: refused with their flag (an effect of -100 % divided by zero)."""
    bad = [
        ("--trials", a.trials, a.trials >= 1, ">= 1"),
        ("--effect", a.effect, a.effect > -1, "> -1 (a relative change of the step time)"),
        # the bench's own bounds: rates printed for a design the bench never runs would be taken as its rates
        ("--initial", a.initial, a.initial >= 1, ">= 1"),
        ("--max-starts", a.max_starts, a.max_starts >= a.initial, f">= --initial ({a.initial})"),
        ("--confidence", a.confidence, 0 < a.confidence < 1, "in (0, 1)"),
        ("--min-effect", a.min_effect, 0 <= a.min_effect < 1, "from 0 to below 1"),
        ("--look-step", a.look_step, a.look_step >= 1, ">= 1"),
        ("--bimodal-p", a.bimodal_p, 0 <= a.bimodal_p <= 1, "in [0, 1] (a probability)"),
        ("--candidates", a.candidates, a.candidates >= 1, ">= 1"),
        ("--start-cv", a.start_cv, a.start_cv >= 0, ">= 0"),
        ("--rep-cv", a.rep_cv, a.rep_cv >= 0, ">= 0"),
    ]
    if a.duet or a.concurrent:
        bad += [
            ("--host-slow", a.host_slow, a.host_slow > -1, "> -1 (the slow state's relative slowdown)"),
            ("--host-stay", a.host_stay, 0 <= a.host_stay <= 1, "in [0, 1] (a probability)"),
            ("--host-ticks", a.host_ticks, a.host_ticks >= 0, ">= 0"),
            ("--reps", a.reps, a.reps >= 1, ">= 1"),
        ]
    for flag, value, ok, want in bad:
        if not ok:
            raise UsageError(f"bench simulate {flag} {value}: must be {want}")


def _duet(a, settings) -> int:
    plants = [host_slowdown("p", a.effect)] if a.effect else []

    def world(_t: int) -> World:
        return World(
            plants,
            a.start_cv,
            a.rep_cv,
            reps=a.reps,
            host_slow=a.host_slow,
            host_stay=a.host_stay,
            host_ticks_per_start=a.host_ticks,
        )

    r = duet_rates(world, a.trials, settings, bool(a.effect), a.duet_value)
    pol = settings.policy
    print(
        f"ab, step effect {a.effect * 100:+.1f}%, start cv {a.start_cv:.1%}, rep cv {a.rep_cv:.1%}, host x"
        f"{1 + a.host_slow:.2f} while slow, holding {a.host_stay:.2f} per repetition, {a.host_ticks} steps per start; "
        f"{a.trials} seeded trials, {pol.initial} to {pol.max_starts} units, alpha {1 - pol.confidence:.2g}, "
        f"minimum effect {pol.min_effect:.1%}; duet ratio of {a.duet_value}:"
    )
    for name, spread in (("sequential", "start-to-start CV"), ("duet", "duet-to-duet CV of the ratio")):
        x = r[name]
        v = ", ".join(f"{k} {n} ({n / a.trials:.1%})" for k, n in sorted(x["verdicts"].items()))
        print(
            f"  {name}: {v}; median units {x['median_units']:.0f}, median final interval width "
            f"{x['median_width'] * 100:.1f} points, median {spread} {x['median_cv'] * 100:.1f}%"
        )
    return 0


def _unread_covariate(pool, a) -> str | None:
    """Why --adjust cannot be simulated on these recorded starts (None: it can). A pool only carries the probe
    measured on the scheduler's own CPU (bench.simulate.recorded_starts); without it the adjusted reading would
    silently read the raw values, and the rates printed would be the unadjusted ones under the adjusted name."""
    from .store import PROBE_METRIC

    if not pool or a.adjust == "none":
        return None
    if a.adjust == "steal":
        return (
            f"bench simulate: --adjust steal on recorded starts: the steal counters of {a.from_record} are not "
            "drawn; simulate the record with --adjust none, or --adjust steal on a parametric world (without "
            "--from-record)"
        )
    have = sum(PROBE_METRIC in st for st in pool)
    if have == len(pool):
        return None
    host = (
        " (the simulator presents a drawn probe as run on the scheduler's CPU, so a probe that ran on a spare "
        "CPU is not drawn, though `bench report --adjust host` reads it)"
        if a.adjust == "host"
        else ""
    )
    return (
        f"bench simulate: --adjust {a.adjust} needs the host probe on the scheduler's CPU in every recorded start: "
        f"{have} of the {len(pool)} starts drawn from {a.from_record} carry it (a start without it was recorded "
        "without --host-probe --host-probe-at scheduler, or has a repetition without its probe or a metric)"
        f"{host}; simulate it with --adjust none, or give a record made with the probe there"
    )
