"""The bench's own input, from an independent review: each case had been taken (a verdict from a negative
minimum effect, a third arm read from another arm's starts, a bisect of swapped endpoints that measured 16
starts and crashed, a malformed store as a traceback) or had read a subset of the evidence (--reuse order)."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from bench_fixtures import FAKE, fake_argv, launcher_arg, make_manifest, manifest  # noqa: F401 - pytest fixtures

from bench import store
from bench.cli import main

QUIET = {"noise": 0.002}


def _run(tmp_path, manifest, launcher_arg, monkeypatch, kind, args, fake, name=None, rc=0):
    log = tmp_path / f"fake-starts-{name or kind}.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / f"run-{name or kind}"
    assert main(fake_argv(kind, args, manifest, launcher_arg, out)) == rc
    starts = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    recs = list(store.read(out / "results.jsonl")) if (out / "results.jsonl").exists() else []
    return out, recs, starts


AB = ["--arms", "a=base", "b=base+beta"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([*AB, "--min-effect", "-0.05"], "--min-effect -0.05: give a relative change from 0 to below 1"),
        ([*AB, "--min-effect", "-1"], "--min-effect -1"),
        ([*AB, "--time-budget", "0"], "--time-budget 0: give seconds above 0"),
        ([*AB, "--health-timeout", "-1"], "--health-timeout -1: give seconds above 0"),
        (["--arms", "a=base", "b=base+beta", "c=base+beta"], "arms b and c are the same measurement"),
        ([*AB, "--arm-env", "typo:K=V"], "--arm-env names no arm: typo"),
        ([*AB, "--arm-env", "b:NOEQ"], "--arm-env b:NOEQ: expected KEY=VALUE"),
        (["--arms", "a=base", "b=base@nope"], "arm b:"),
        ([*AB, "--reuse", "/nonexistent/results.jsonl"], "--reuse /nonexistent/results.jsonl: no such store"),
        ([*AB, "--restarts", "4", "--max-starts", "3"], "--max-starts 3 is below --restarts 4"),
    ],
)
def test_bad_input_is_exit_2_before_any_start(tmp_path, manifest, launcher_arg, monkeypatch, capsys, args, says):
    _, _, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, {}, rc=2)
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    assert starts == []


@pytest.mark.parametrize(
    ("good", "bad", "says"),
    [
        ("full", "full", "are the same set"),
        ("full", "full-planted", "holds planted, which --bad full-planted does not"),
    ],
)
def test_bisect_endpoints_that_bound_nothing_are_refused_before_any_start(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys, good, bad, says
):
    for dry in ([], ["--dry-run"]):
        _, _, starts = _run(
            tmp_path, manifest, launcher_arg, monkeypatch, "bisect", ["--good", good, "--bad", bad, *dry], {}, rc=2
        )
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and starts == [], err


def test_reused_stores_are_read_whole_whatever_their_order(tmp_path, manifest, launcher_arg, monkeypatch):
    """Two stores of one measurement, one with a 10 % plant and one without: the plan had stopped on the first
    three starts of whichever store was named first (regression one way, same the other), while the report's
    table read all eight. Now the first look reads every reused start, in either order, and measures none."""
    arms = ["--arms", "ref=full-planted", "slow=full"]
    run = lambda *a, **k: _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", *a, **k)  # noqa: E731
    a, _, _ = run([*arms, "--max-starts", "3"], {"noise": 0.002, "costs": {"planted": 0.10}}, name="A")
    b, _, _ = run([*arms, "--restarts", "5", "--max-starts", "5"], QUIET, name="B")
    verdicts = []
    for name, order in (("AB", (a, b)), ("BA", (b, a))):
        reuse = [x for d in order for x in ("--reuse", str(d / "results.jsonl"))]
        _, recs, starts = run([*arms, *reuse, "--max-starts", "8"], QUIET, name=name)
        assert len(starts) <= 1, starts  # the throwaway start at most: every measured one is reused
        (c,) = next(r for r in recs if r["type"] == "conclusion")["comparisons"]
        c = c["comparison"]
        assert (c["n_ref"], c["n_arm"]) == (8, 8), c
        verdicts.append((c["verdict"], round(c["change"], 6)))
    assert verdicts[0] == verdicts[1], verdicts


@pytest.fixture(scope="module")
def ab_store(tmp_path_factory) -> Path:
    """One finished 3-start ab's run dir, made once: each malformed-store case edits its own copy of it."""
    base = tmp_path_factory.mktemp("ab_store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(base / "warm"))
        launcher = f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"
        out, _, _ = _run(base, make_manifest(base), launcher, mp, "ab", [*AB, "--max-starts", "3"], QUIET)
    return out


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"type": "rep", "sta', "corrupt JSONL line in the middle of the store"),
        ("null", "not a record (a JSON object), but NoneType"),
        ("[]", "not a record (a JSON object), but list"),
        ('{"type": "start"}', "a 'start' record without a valid 'start_id'"),
        ('{"type": "run"}', "a 'run' record without a valid 'run_id'"),
    ],
)
def test_a_malformed_store_is_exit_2_naming_its_line(tmp_path, ab_store, capsys, line, says):
    out = tmp_path / "run"
    shutil.copytree(ab_store, out)
    lines = (out / "results.jsonl").read_text().splitlines()
    lines.insert(5, line)
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"results.jsonl:6: {says}" in err and "Traceback" not in err, err


def test_report_of_a_directory_without_a_run_is_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "no run record" in capsys.readouterr().err


def test_resume_says_which_options_it_does_not_take_and_takes_this_calls_budget(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """--resume continues the recorded command: other options had been dropped without a word, and the call's
    own --time-budget (a device call's seconds) too."""
    out, _, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", [*AB, "--max-starts", "3"], QUIET)
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # another directory: the recorded command's relative paths are its own
    assert main(["ab", "--resume", str(out), "--max-starts", "8", "--time-budget", "1e-3"]) in (0, 4)
    err = capsys.readouterr().err
    assert "not used from this one: --max-starts 8" in err and "--time-budget" not in err.split("not used")[1]
    run_recs = [r for r in store.read(out / "results.jsonl") if r["type"] == "run"]
    assert run_recs[-1]["resumed"] and run_recs[-1]["config"]["time_budget_s"] == 1e-3
    assert run_recs[-1]["config"]["max_starts"] == 3
    assert main(["ablate", "--resume", str(out)]) == 2
    assert "holds a `ab` run, not `ablate`" in capsys.readouterr().err


def test_a_malformed_store_is_exit_2_for_every_command_that_reads_it(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """report was exit 2; --resume, a fresh run into the directory, --reuse and draft_compare (whose exit 1 means
    "not lossless") met it as a traceback."""
    from bench import draft_compare

    out, _, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", [*AB, "--max-starts", "3"], QUIET)
    lines = (out / "results.jsonl").read_text().splitlines()
    lines.insert(3, '{"type": "start"}')
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    for argv in (
        ["ab", "--resume", str(out)],
        fake_argv("ab", [*AB, "--reuse", str(out)], manifest, launcher_arg, tmp_path / "other"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "results.jsonl:4: a 'start' record without a valid 'start_id'" in err and "Traceback" not in err
    assert draft_compare.main(["--plain", str(out), "--eagle", str(out)]) == 2
    assert "results.jsonl:4:" in capsys.readouterr().err


def test_resume_names_only_the_options_that_differ_and_the_server_args(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    out, _, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", [*AB, "--max-starts", "3"], QUIET)
    capsys.readouterr()
    assert main(["ab", "--resume", str(out), "--max-starts", "3", "--", "--tp", "1"]) == 0
    assert "not used" not in capsys.readouterr().err  # the same values: nothing to say
    assert main(["ab", "--resume", str(out), "--max-starts", "3", "--", "--tp", "2", "--port", "31000"]) == 0
    err = capsys.readouterr().err
    assert "not used from this one: -- --tp 2 --port 31000" in err and "--max-starts" not in err


def test_bisect_and_ablate_check_their_arm_env_and_bisect_its_sets(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    cases = [
        ("bisect", ["--good", "full", "--bad", "full", "--arm-env", "bad:X=1"], "are the same set"),
        ("bisect", ["--good", "base", "--bad", "full", "--arm-env", "typo:X=1"], "--arm-env names no arm: typo"),
        ("ablate", ["--base", "base", "--full", "full", "--arm-env", "typo:X=1"], "--arm-env names no arm: typo"),
    ]
    for kind, args, says in cases:
        _, _, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, kind, args, {}, name=kind, rc=2)
        err = capsys.readouterr().err
        assert says in err and starts == [], (kind, args, err)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--restarts", "10"], "x 10 to 10 starts"),
        ([], "x 3 to 8 starts"),
        (["--restarts", "4", "--max-starts", "4"], "x 4 to 4 starts"),
    ],
)
def test_max_starts_left_out_rises_to_the_first_look(tmp_path, manifest, launcher_arg, capsys, args, says):
    """Left out, the ceiling is 8 or the first look's starts; given below them it is refused (above)."""
    argv = fake_argv("ab", [*AB, *args, "--dry-run"], manifest, launcher_arg, tmp_path / "run")
    assert main(argv) == 0
    assert says in capsys.readouterr().out
