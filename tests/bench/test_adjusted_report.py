"""A report read another way (`bench report DIR --adjust host`) states one verdict everywhere: the Conclusion,
the Comparisons table, the bisect and ablate findings, the plot's title.

The recorded run is an excerpt of the H200 profhost run (eagle_profiling on vs not applied, 3 starts each, the
host probe beside every start: /work/team/gpu5/profhost of session 5), the run itself read unadjusted.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest
from bench_fixtures import DATA, fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures

from bench import report, store
from bench.replication import Policy
from bench.report import ArmRow, build_markdown, readjusted
from bench.stats import REGRESSION

PROFHOST = DATA / "profhost"


@pytest.fixture
def profhost(tmp_path) -> Path:
    d = tmp_path / "profhost"
    shutil.copytree(PROFHOST, d)
    return d


def _primary_row(md: str) -> str:
    return next(ln for ln in md.splitlines() if "(primary)" in ln)


def _conclusion_line(md: str) -> str:
    body = md[md.index("## Conclusion") :]
    return next(ln for ln in body.splitlines() if ln.startswith("- notapplied vs on"))


# the run read start medians (-3.1% [-49.3, +85.2]); start values (geometric means of the repetitions) read
@pytest.mark.parametrize("adjust, change, interval", [(None, "-0.1", "-41.0, +69.1"), ("host", "-0.1", "-41.0, +69.1")])
def test_the_conclusion_states_the_comparisons_figure_on_the_recorded_run(profhost, adjust, change, interval):
    md = build_markdown(profhost, adjust)
    row, concl = _primary_row(md), _conclusion_line(md)
    assert f"{change}% [{interval}]" in row
    m = re.search(r"\(([+-]\d+\.\d+)% \[([^\]]+)\]", concl)
    assert m is not None, concl
    assert f"{float(m.group(1)):+.1f}" == change and m.group(2) == interval
    # the run's own reading is said once, as what the run concluded, not as this report's verdict
    assert "its own conclusion: notapplied vs on cannot tell (-3.08% [-49.3, +85.2])" in md
    assert "the run itself read them with " + ("`--adjust none` and " if adjust else "") + "start medians" in md
    if adjust == "host":
        # the probe was 8.6 % lower in notapplied's 3 starts: too loosely bounded to adjust (it was +5.7 %
        # [-29.4, +58.2] while the gate was a difference test), so the unadjusted figure, cannot tell, and why
        assert "- notapplied vs on: per repetition: mixed model" in md and "**not admissible, cannot tell**: " in md


def test_an_adjustment_whose_covariate_was_not_recorded_says_so(profhost):
    # session 5's run predates the contention counters: --adjust steal cannot adjust, and says so, and the
    # Conclusion and the table both state the unadjusted figure
    md = build_markdown(profhost, "steal")
    assert "- notapplied vs on: **not adjusted**: `host_steal_pct` is missing on some repetition" in md
    assert "-0.1% [-41.0, +69.1]" in _primary_row(md) and "(-0.10% [-41.0, +69.1]; 3 vs 3 starts)" in _conclusion_line(
        md
    )
    assert "- notapplied vs on: per repetition: mixed model" in build_markdown(profhost, "host")


def test_the_adjusted_report_has_its_own_plot_and_leaves_the_runs_alone(profhost):
    pytest.importorskip("matplotlib")
    before = (profhost / "plot.png").read_bytes() if (profhost / "plot.png").exists() else None
    out = report.write_report(profhost, "host")
    assert out.name == "report-adjust-host.md"
    assert (profhost / "plot-adjust-host.png").stat().st_size > 10_000
    assert "![plot](plot-adjust-host.png)" in out.read_text()
    assert ((profhost / "plot.png").read_bytes() if (profhost / "plot.png").exists() else None) == before


# -- bisect and ablate conclusions, read again ------------------------------------------------------------------


def _row(name: str, values: list[tuple[float, float]]) -> ArmRow:
    units = [
        store.Unit(
            arm_key=name,
            round=i,
            start_id=f"{name}{i}",
            arm=name,
            reps=[{"step_ms_b1": y}],
            host_probe={"start": {"py_us": p}},
        )
        for i, (y, p) in enumerate(values)
    ]
    return ArmRow(name, name, name, units)


def _starts(
    rng: random.Random, n: int, effect: float, host: list[float], probe_noise: float = 0.001
) -> list[tuple[float, float]]:
    """n starts on a host whose slowness per start is `host` (the step and the probe move with it). The probe is
    quiet: the adjustment is admissible only where the arms' probe difference is bounded tightly."""
    return [
        (4.0 * h * (1 + effect) * (1 + rng.gauss(0, 0.005)), 400.0 * h * (1 + rng.gauss(0, probe_noise)))
        for h in host[:n]
    ]


def _bisect_conclusion(culprit: str = "p2") -> dict:
    probe = {"toward_bad": 1.0, "place": "bad", "starts": 4, "vs_good": {}, "vs_bad": {}}
    return {
        "type": "conclusion",
        "kind": "bisect",
        "good": "good",
        "bad": "bad",
        "metric": "step_ms_b1",
        "endpoint": {"verdict": REGRESSION},
        "culprit": culprit,
        "partner": None,
        "outcome": "culprit",
        "reason": f"bad without {culprit} is good and good with {culprit} is bad",
        "candidates": ["p1", "p2"],
        "probes": [
            {**probe, "arm": "probe1", "role": "prefix 1 of 2", "patches": ["p1"]},
            {
                **probe,
                "arm": "probe2",
                "role": "confirm: bad - p2",
                "patches": ["p1"],
                "block": "confirm1",
                "good": "good",
                "bad": "bad",
                "place": "good",
            },
            {
                **probe,
                "arm": "probe3",
                "role": "confirm: good + p2",
                "patches": ["p2"],
                "block": "confirm1",
                "good": "good",
                "bad": "bad",
            },
        ],
        "max_search_probes": 1,
    }


def _bisect_rows(rng: random.Random, culprit_effect: float, host_of_bad: float) -> dict[str, ArmRow]:
    """good, bad and the probes; bad's and good + p2's starts all ran on a host `host_of_bad` times slower."""
    slow, fast = [host_of_bad] * 4, [1.0] * 4
    return {
        "good": _row("good", _starts(rng, 4, 0.0, fast)),
        "bad": _row("bad", _starts(rng, 4, culprit_effect, slow)),
        "probe1": _row("probe1", _starts(rng, 4, 0.0, fast)),
        "probe2": _row("probe2", _starts(rng, 4, 0.0, fast)),
        "probe3": _row("probe3", _starts(rng, 4, culprit_effect, slow)),
    }


def test_a_culprit_the_host_made_is_withdrawn_under_the_adjustment():
    # bad and good + p2 measured in the host's slow stretch: the run (unadjusted) named p2; at a fixed host speed
    # there is nothing left (the probe differs between the arms: cannot tell), so no culprit
    c = readjusted(_bisect_conclusion(), _bisect_rows(random.Random(1), 0.0, 1.3), Policy(4, 4, adjust="host"))
    assert c["culprit"] is None and c["outcome"] == "culprit p2 withdrawn"
    assert "bad vs good is cannot tell" in c["reason"]
    lines = "\n".join(report._bisect_lines(c))
    assert "**No culprit named: culprit p2 withdrawn**" in lines and "read again this way" in lines


def test_a_real_culprit_stands_under_the_adjustment():
    c = readjusted(_bisect_conclusion(), _bisect_rows(random.Random(2), 0.10, 1.0), Policy(4, 4, adjust="host"))
    assert c["culprit"] == "p2" and c["endpoint"]["verdict"] == REGRESSION
    assert c["probes"][1]["vs_bad"]["verdict"] == "improvement" and c["probes"][2]["vs_good"]["verdict"] == REGRESSION


def test_a_confirmation_that_fails_when_adjusted_withdraws_the_culprit():
    rows = _bisect_rows(random.Random(3), 0.10, 1.0)
    rows["probe2"] = _row("probe2", _starts(random.Random(4), 4, 0.10, [1.0] * 4))  # bad - p2 as slow as bad
    c = readjusted(_bisect_conclusion(), rows, Policy(4, 4, adjust="host"))
    assert c["culprit"] is None and "bad - p2 vs bad is same (must be improvement)" in c["reason"]


def test_the_deciding_confirmation_block_is_the_last_one_by_number():
    # blocks 2..10: block 10 decided (a shared block refuted, measured again fresh); "confirm9" sorts after it
    rows = _bisect_rows(random.Random(9), 0.10, 1.0)
    stored = _bisect_conclusion()
    stale = [{**p, "block": "confirm9", "arm": "probe1"} for p in stored["probes"][1:]]  # probe1: like good
    stored["probes"] = stored["probes"][:1] + stale + [{**p, "block": "confirm10"} for p in stored["probes"][1:]]
    c = readjusted(stored, rows, Policy(4, 4, adjust="host"))
    assert c["culprit"] == "p2", c["reason"]  # block 9's good + p2 (probe1, like good) would withdraw it


def test_a_bisect_that_named_nothing_names_nothing_when_adjusted():
    stored = _bisect_conclusion() | {"culprit": None, "outcome": "cannot tell", "reason": "probe stayed undecided"}
    c = readjusted(stored, _bisect_rows(random.Random(5), 0.10, 1.0), Policy(4, 4, adjust="host"))
    assert c["culprit"] is None and c["outcome"].startswith("cannot tell under this reading (endpoints: ")
    assert "(the search as the run read it; endpoints now " in c["reason"]


def _no_regression(verdict: str = "same") -> dict:
    return _bisect_conclusion() | {
        "culprit": None,
        "outcome": "no regression",
        "reason": "bad vs good on step_ms_b1: same (+0.1%) after 4 and 4 starts",
        "endpoint": {"verdict": verdict},
        "probes": [],
    }


def _exact(effect: float) -> dict[str, ArmRow]:
    """good and bad on one steady host (the probe identical in every start: the adjustment is admissible)."""
    steps = [4.0, 4.004, 3.996, 4.002]
    return {
        "good": _row("good", [(y, 400.0) for y in steps]),
        "bad": _row("bad", [(y * (1 + effect), 400.0) for y in steps]),
    }


def test_a_no_regression_bisect_whose_endpoints_regress_when_adjusted_cannot_tell():
    # the run read "no regression"; read again, the endpoints regress: the headline must not keep the run's words
    c = readjusted(_no_regression(), _exact(0.10), Policy(4, 4, adjust="host"))
    assert c["endpoint"]["verdict"] == REGRESSION
    assert c["outcome"] == "cannot tell under this reading (endpoints: regression; the search was not re-run)"
    lines = "\n".join(report._bisect_lines(c))
    assert "**No culprit named: cannot tell under this reading (endpoints: regression" in lines
    assert "No culprit named: no regression" not in lines
    assert "not ruled out under this reading: a regression beyond 2% on step_ms_b1" in c["reason"]


def test_a_no_regression_bisect_stands_when_the_reading_rules_the_regression_out():
    c = readjusted(_no_regression(), _exact(0.0), Policy(4, 4, adjust="host"))
    assert c["endpoint"]["verdict"] == "same" and c["outcome"] == "no regression"
    assert "No culprit named: no regression" in "\n".join(report._bisect_lines(c))


def test_a_no_regression_bisect_whose_covariate_is_refused_cannot_tell():
    # the arms' probe differs (bad on a slower host): the adjusted endpoints are "cannot tell", so is the outcome
    rows = _bisect_rows(random.Random(7), 0.0, 1.3)
    c = readjusted(_no_regression(), rows, Policy(4, 4, adjust="host"))
    assert c["endpoint"]["verdict"] == "cannot tell"
    assert c["outcome"].startswith("cannot tell under this reading (endpoints: cannot tell;")


def test_ablate_findings_are_taken_anew_from_the_adjusted_sides():
    rng = random.Random(6)
    # a steady host in two stretches, 30 % slower in one, the probe exact: within a stretch the arms' probe
    # difference is 0 (admissible); across them it is the host's 30 % (refused: cannot tell)
    fast, slow = [1.0] * 4, [1.3] * 4

    def row(name: str, effect: float, host: list[float]) -> ArmRow:
        return _row(name, _starts(rng, 4, effect, host, probe_noise=0.0))

    rows = {
        "base": row("base", 0.0, fast),
        "+p": row("+p", 0.0, slow),  # only the host: not p
        "full": row("full", 0.0, slow),
        "-p": row("-p", 0.0, fast),
        "+q": row("+q", 0.10, fast),  # q's own +10 %
        "-q": row("-q", -0.09, slow),
    }
    stored = {
        "type": "conclusion",
        "kind": "ablate",
        "metric": "step_ms_b1",
        "culprits": ["p", "q"],
        "patches": [
            {"patch": x, "alone": "regression", "left_out": "improvement", "finding": "culprit", "sentence": "s"}
            for x in ("p", "q")
        ],
    }
    c = readjusted(stored, rows, Policy(4, 4, adjust="host"))
    assert c["culprits"] == ["q"]
    assert [r["finding"] for r in c["patches"]] == ["cannot tell", "culprit"]


# -- end to end: a stored bisect and ablate of the fake server, read with --adjust host -------------------------


@pytest.mark.parametrize(
    "kind, args",
    [("bisect", ["--good", "base", "--bad", "full"]), ("ablate", ["--base", "base", "--patches", "planted,beta"])],
)
def test_a_fake_run_read_adjusted_names_only_what_the_run_named(
    tmp_path, manifest, launcher_arg, monkeypatch, kind, args
):
    import json

    from bench.cli import main

    monkeypatch.setenv("FAKE_BENCH", json.dumps({"costs": {"planted": 0.05}, "noise": 0.002}))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / "run"
    assert main(fake_argv(kind, [*args, "--host-probe"], manifest, launcher_arg, out)) == 0
    stored = [r for r in store.read(out / "results.jsonl") if r["type"] == "conclusion"][-1]
    md = build_markdown(out, "host")
    body = md[md.index("## Conclusion") : md.index("## Arms")]
    assert "its own conclusion: " in body
    if kind == "bisect":
        assert stored["culprit"] == "planted"
        assert "**Culprit: planted** (confirmed)" in body or "**No culprit named: culprit planted withdrawn**" in body
        ep = next(
            ln for ln in md.splitlines() if ln.startswith("| bisect endpoints | good | bad |") and "(primary)" in ln
        )
        interval = ep.split(" | ")[5].split("% ")[1]
        assert "Endpoints on `step_ms_b1`: bad vs good " in body and interval in body
        assert "No culprit named: no regression" not in body
    else:
        assert stored["culprits"] == ["planted"]
        line = next(ln for ln in body.splitlines() if ln.startswith("On `step_ms_b1`: "))
        assert line in ("On `step_ms_b1`: **culprit(s): planted**", "On `step_ms_b1`: no culprit named")
        assert "| beta |" in body and "| beta | regression" not in body


def test_a_fake_bisect_that_found_no_regression_read_adjusted_keeps_its_words_only_if_the_reading_agrees(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    import json

    from bench.cli import main

    monkeypatch.setenv("FAKE_BENCH", json.dumps({"costs": {}, "noise": 0.002}))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / "run"
    argv = fake_argv("bisect", ["--good", "base", "--bad", "full", "--host-probe"], manifest, launcher_arg, out)
    assert main(argv) == 0
    stored = [r for r in store.read(out / "results.jsonl") if r["type"] == "conclusion"][-1]
    assert stored["culprit"] is None
    md = build_markdown(out, "host")
    body = md[md.index("## Conclusion") : md.index("## Arms")]
    # on a loaded machine the fake's phases can move and bisect follow one of them: any metric's endpoint line
    ep = re.search(r"Endpoints on `\w+`: bad vs good .* -> (.+)", body)
    assert ep is not None, body
    if "No culprit named: no regression" in body:
        assert stored["outcome"] == "no regression" and ep.group(1) == stored["endpoint"]["verdict"]
    else:
        assert "No culprit named: cannot tell under this reading (endpoints: " + ep.group(1) in body
