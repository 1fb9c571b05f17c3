"""The duet design (bench/duet.py) end to end on the CPU: two live fake servers (tests/bench/fake_apply.py) on two
ports and two trees, ABBA repetitions, the records a duet leaves, --resume after the time budget, the memory
refusal, and the report of a duet run."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures

from bench import store
from bench.cli import main
from bench.duet import abba, check_server_args, second_server_args
from bench.errors import EXIT_ABORTED, EXIT_BUDGET, UsageError

QUIET = {"noise": 0.002}
NULL = ["--arms", "a=base", "b=base", "--arm-env", "b:BENCH_NULL=1"]


def _duet(
    tmp_path,
    manifest,
    launcher_arg,
    monkeypatch,
    args,
    fake,
    memf="0.3",
    rc=0,
    out_name="duet",
    trees=None,
    server=None,
):
    log = tmp_path / "fake-starts.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    out = tmp_path / out_name
    for t in ("tree-a", "tree-b"):
        (tmp_path / t).mkdir(exist_ok=True)
    trees = trees or ["--tree", str(tmp_path / "tree-a"), "--duet", str(tmp_path / "tree-b")]
    server = server or ("--tp", "1", "--port", "31000") + (("--mem-fraction-static", memf) if memf else ())
    assert main(fake_argv("ab", [*args, *trees], manifest, launcher_arg, out, server)) == rc
    starts = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return out, list(store.read(out / "results.jsonl")), starts


def test_abba_order_alternates_and_balances():
    assert abba(5) == (0, 1, 1, 0, 0, 1, 1, 0, 0, 1)
    assert all(Counter(abba(n)) == {0: n, 1: n} for n in range(1, 9))
    assert second_server_args(["--port", "30000", "--tp", "1"]) == ("--port", "30500", "--tp", "1")
    assert second_server_args(["--tp", "1"]) == ("--tp", "1", "--port", "30500")


def test_duet_runs_both_servers_live_in_abba_order_and_swaps_trees(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, starts = _duet(tmp_path, manifest, launcher_arg, monkeypatch, NULL, QUIET)
    tree_a, tree_b = str(tmp_path / "tree-a"), str(tmp_path / "tree-b")
    # the throwaway start (reference, first tree), then per duet the first tree's server, then the second's
    assert [s["tree"] for s in starts] == [tree_a] + [tree_a, tree_b] * 3
    assert all(s["server_args"][-2:] == ["--mem-fraction-static", "0.3"] for s in starts)
    ports = [s["server_args"][s["server_args"].index("--port") + 1] for s in starts[1:]]
    assert ports == ["31000", "31500"] * 3
    measured = [r for r in recs if r["type"] == "start" and not r["warmup_start"]]
    assert [(r["duet"]["index"], r["duet"]["position"], r["arm"]) for r in measured] == [
        (0, 0, "a"),
        (0, 1, "b"),
        (1, 0, "b"),  # the arms swap trees on alternate duets
        (1, 1, "a"),
        (2, 0, "a"),
        (2, 1, "b"),
    ]
    assert [r["duet"]["tree"] for r in measured] == [tree_a, tree_b] * 3
    by_sid = {r["start_id"]: r for r in measured}
    for d in range(3):
        first, second = (r for r in measured if r["duet"]["index"] == d)
        assert first["url"] != second["url"]  # two servers, live together
        reps = [r for r in recs if r["type"] == "rep" and r["start_id"] in (first["start_id"], second["start_id"])]
        # both servers warm up before the first measured repetition; then A B B A A B
        assert [r["warmup"] for r in reps] == [True, True] + [False] * 6
        served = [by_sid[r["start_id"]]["duet"]["position"] for r in reps if not r["warmup"]]
        assert served == [0, 1, 1, 0, 0, 1]
        assert [r["duet_slot"] for r in reps if not r["warmup"]] == list(range(6))
        # the duet counts only once both servers stopped: both unit_done records come after every repetition
        sids = (first["start_id"], second["start_id"])
        done = [i for i, r in enumerate(recs) if r["type"] == "unit_done" and r["start_id"] in sids]
        last_rep = max(i for i, r in enumerate(recs) if r["type"] == "rep" and r["start_id"] in sids)
        assert len(done) == 2 and min(done) > last_rep
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["method"] == "duet" and c["comparisons"][0]["verdict"] == "same"
    assert c["comparisons"][0]["comparison"]["n_ref"] == 3
    run = next(r for r in recs if r["type"] == "run")
    assert run["config"]["duet"] == tree_b
    assert main(["report", str(out), "--adjust", "host"]) == 2  # no covariate reading of a duet run
    md = (out / "report.md").read_text()
    assert "## Duets" in md and "duet-to-duet CV" in md
    assert "Duet design" in md  # the Method section says how it was measured
    table = md.split("## Duets", 1)[1].split("Spread:", 1)[0]
    rows = [ln.split("|") for ln in table.splitlines() if ln.startswith(("| 1 |", "| 2 |", "| 3 |"))]
    assert [r[3].strip() for r in rows] == [f"`{t}`" for t in (tree_a, tree_b, tree_a)]  # the reference's tree
    assert all(0.9 < float(r[6]) < 1.1 and 0.9 < float(r[7]) < 1.1 for r in rows)  # a null pair's ratios


def test_duet_finds_a_planted_slowdown(tmp_path, manifest, launcher_arg, monkeypatch):
    _, recs, _ = _duet(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        ["--arms", "ref=full-planted", "slow=full"],
        {"costs": {"planted": 0.05}, **QUIET},
    )
    c = next(r for r in recs if r["type"] == "conclusion")["comparisons"][0]
    assert c["verdict"] == "regression" and 0.04 < c["comparison"]["change"] < 0.06


def test_duet_resumes_after_the_time_budget(tmp_path, manifest, launcher_arg, monkeypatch):
    out, recs, _ = _duet(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        # no throwaway start: after one, the budget is checked before the first duet too (and 0.5 s is spent)
        [*NULL, "--time-budget", "0.5", "--no-warmup-start"],
        QUIET,
        rc=EXIT_BUDGET,
    )
    first = [r["start_id"] for r in recs if r["type"] == "unit_done" and not r["warmup_start"]]
    assert len(first) == 2  # one duet: its two starts
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["budget_exhausted"] and c["comparisons"][0]["verdict"] == "too few starts"
    # the recorded command carries the budget: resumed invocations each measure one more duet
    rc = EXIT_BUDGET
    for _ in range(3):
        rc = main(["ab", "--resume", str(out)])
        if rc == 0:
            break
    assert rc == 0
    recs = list(store.read(out / "results.jsonl"))
    done = [r for r in recs if r["type"] == "unit_done" and not r["warmup_start"]]
    assert [r["start_id"] for r in done[:2]] == first  # the first duet is kept, not measured again
    assert sorted(Counter(r["round"] for r in done).values()) == [2, 2, 2]
    measured = {r["start_id"]: r for r in recs if r["type"] == "start" and not r["warmup_start"]}
    ref_pos = [measured[r["start_id"]]["duet"]["position"] for r in done if r["arm_key"] == done[0]["arm_key"]]
    assert ref_pos == [0, 1, 0]  # the swap follows the duet's place in the plan across invocations
    c = [r for r in recs if r["type"] == "conclusion"][-1]
    assert c["comparisons"][0]["verdict"] == "same" and c["comparisons"][0]["comparison"]["n_ref"] == 3
    assert "## Duets" in (out / "report.md").read_text()
    # a kill between a duet's two unit_done records: that duet no longer counts, its round is not reused
    lines = (out / "results.jsonl").read_text().splitlines()
    last = max(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "unit_done")
    (out / "results.jsonl").write_text("\n".join(lines[:last]) + "\n")
    assert main(["ab", "--resume", str(out)]) == 0
    done = [r for r in store.read(out / "results.jsonl") if r["type"] == "unit_done" and not r["warmup_start"]]
    rounds = Counter(r["round"] for r in done)
    assert rounds == {0: 2, 1: 2, 2: 1, 3: 2}


def test_duet_refuses_a_memory_share_that_does_not_fit_twice(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    _duet(tmp_path, manifest, launcher_arg, monkeypatch, NULL, QUIET, memf="0.6", rc=2)
    err = capsys.readouterr().err
    assert "--mem-fraction-static 0.6" in err and "0.45 or less" in err and "Traceback" not in err
    _duet(tmp_path, manifest, launcher_arg, monkeypatch, NULL, QUIET, memf=None, rc=2, out_name="d2")
    assert "--mem-fraction-static F" in capsys.readouterr().err
    assert not (tmp_path / "fake-starts.jsonl").exists()  # refused before any server start


def test_duet_needs_two_arms_and_two_trees(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    three = ["--arms", "a=base", "b=base+beta", "c=full"]
    _duet(tmp_path, manifest, launcher_arg, monkeypatch, three, QUIET, rc=2)
    assert "exactly two arms" in capsys.readouterr().err


def _by_duet(recs, metric="step_ms_b1"):
    """{duet index: (reference start's arm, ratio arm / reference of the start medians)} from the store's
    completed units, read by arm key (not by position): what the verdict must agree with."""
    v = store.view(recs)
    ref_key, arm_key = (a["key"] for a in v.runs[0]["arms"])
    arm_by = {u.round: u for u in v.units_of(arm_key)}
    out = {}
    for u in v.units_of(ref_key):
        w = arm_by[u.round]
        assert u.duet["index"] == w.duet["index"] and u.duet["position"] != w.duet["position"]
        med = sorted(r[metric] for r in u.reps)[len(u.reps) // 2]
        wmed = sorted(r[metric] for r in w.reps)[len(w.reps) // 2]
        out[u.duet["index"]] = (u.duet["tree"], wmed / med)
    return out


def test_duet_a_ten_percent_slower_arm_keeps_its_sign_on_either_tree(tmp_path, manifest, launcher_arg, monkeypatch):
    """Arm B truly 10 % slower (its patch's cost, whatever tree it runs on): every duet, even (reference on the
    --tree) and odd (reference on TREE_B), reads B / A near 1.10, and the verdict over an odd number of duets is
    a regression of about +10 %; the arms the other way round read an improvement of about -9 %."""
    bounds = ["--restarts", "3", "--max-starts", "3"]
    fake = {"costs": {"planted": 0.10}, **QUIET}
    for arms, verdict, change, out_name in (
        (["--arms", "ref=full-planted", "slow=full"], "regression", 0.10, "slow"),
        (["--arms", "ref=full", "fast=full-planted"], "improvement", 1 / 1.1 - 1, "fast"),
    ):
        _, recs, starts = _duet(
            tmp_path, manifest, launcher_arg, monkeypatch, [*arms, *bounds], fake, out_name=out_name
        )
        per = _by_duet(recs)
        assert sorted(per) == [0, 1, 2]
        assert [t for t, _ in per.values()] == [str(tmp_path / x) for x in ("tree-a", "tree-b", "tree-a")]
        assert all(abs(r - (1 + change)) < 0.02 for _, r in per.values()), per
        c = next(r for r in recs if r["type"] == "conclusion")["comparisons"][0]
        assert c["verdict"] == verdict and abs(c["comparison"]["change"] - change) < 0.015
        assert c["comparison"]["n_ref"] == 3
        # each start record carries its own arm's patches and fingerprint, on whichever tree it ran
        measured = [r for r in recs if r["type"] == "start" and not r["warmup_start"]]
        for name in {r["arm"] for r in measured}:
            mine = [r for r in measured if r["arm"] == name]
            assert len({r["fingerprint"] for r in mine}) == 1 and len({r["duet"]["tree"] for r in mine}) == 2
        # what the fake servers themselves were started with: the planted arm on the --tree in alternate duets
        ref_planted = "planted" in measured[0]["patches"] if measured[0]["arm"] == "ref" else None
        assert ref_planted is not None
        planted_on_a = [s["tree"] == str(tmp_path / "tree-a") for s in starts[-6:] if "planted" in s["patches"]]
        assert planted_on_a == [ref_planted, not ref_planted, ref_planted]
        (tmp_path / "fake-starts.jsonl").unlink()


def test_duet_a_tree_effect_cancels_and_names_nothing(tmp_path, manifest, launcher_arg, monkeypatch):
    """A null pair where TREE_B's server is 10 % slower (the tree, or the second position): the swap puts it on
    each arm every other duet, so the mean over 4 duets is ~0 and nothing is named."""
    fake = {"tree_costs": {"tree-b": 0.10}, **QUIET}
    _, recs, _ = _duet(
        tmp_path, manifest, launcher_arg, monkeypatch, [*NULL, "--restarts", "4", "--max-starts", "4"], fake
    )
    per = _by_duet(recs)
    assert [round(r, 1) for _, r in per.values()] == [1.1, 0.9, 1.1, 0.9]  # the tree's effect, visible per duet
    c = next(r for r in recs if r["type"] == "conclusion")["comparisons"][0]
    assert c["verdict"] not in ("regression", "improvement") and abs(c["comparison"]["change"]) < 0.01


def test_duet_reads_the_equals_forms_of_memory_share_and_port(tmp_path, manifest, launcher_arg, monkeypatch):
    """`--mem-fraction-static=0.3` and `--port=31000` are how many write them: the duet runs (the share is read),
    and the second server gets port 31500 (not the first's port plus an appended default)."""
    assert second_server_args(["--port=31000", "--tp", "1"]) == ("--port=31500", "--tp", "1")
    # SGLang's argparse takes the last --port: an appended default beside a `--port=30500` would put both on 30500
    assert second_server_args(["--port=30500"]) == ("--port=31000",)
    server = ("--tp", "1", "--port=31000", "--mem-fraction-static=0.3")
    _, recs, starts = _duet(tmp_path, manifest, launcher_arg, monkeypatch, NULL, QUIET, server=server)
    measured = [r for r in recs if r["type"] == "start" and not r["warmup_start"]]
    assert [r["duet"]["port"] for r in measured] == [31000, 31500] * 3
    assert [s["server_args"][2] for s in starts[1:]] == ["--port=31000", "--port=31500"] * 3
    for bad in (("--mem-fraction-static=0.6",), ("--mem-fraction-static=",), ("--mem-fraction-static",)):
        with pytest.raises(UsageError):
            check_server_args(bad)
    with pytest.raises(UsageError):
        check_server_args(("--mem-fraction-static", "0.3", "--port=x"))


def test_duet_refuses_trees_it_cannot_run_two_servers_on(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    """A TREE_B that does not exist or is a file, and the --tree itself under another spelling (trailing slash,
    symlink, relative path): refused with exit 2 before any server starts, never a traceback."""
    a = tmp_path / "tree-a"
    a.mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(a)
    monkeypatch.chdir(tmp_path)
    cases = [
        (str(tmp_path / "missing"), "not a directory"),
        (str(tmp_path / "file"), "not a directory"),
        (str(a) + "/", "same directory"),
        (str(tmp_path / "link"), "same directory"),
        ("tree-a", "same directory"),
        ("./tree-a/../tree-a", "same directory"),
    ]
    for i, (b, msg) in enumerate(cases):
        trees = ["--tree", str(a), "--duet", b]
        _duet(tmp_path, manifest, launcher_arg, monkeypatch, NULL, QUIET, rc=2, out_name=f"d{i}", trees=trees)
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (b, err)
    assert not (tmp_path / "fake-starts.jsonl").exists()


@pytest.mark.parametrize("kind", ["ablate", "bisect"])
def test_duet_is_refused_by_ablate_and_bisect(kind, tmp_path, manifest, launcher_arg, capsys):
    args = ["--good", "base", "--bad", "full"] if kind == "bisect" else []
    argv = fake_argv(
        kind, [*args, "--tree", str(tmp_path), "--duet", str(tmp_path)], manifest, launcher_arg, tmp_path / "o"
    )
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "--duet" in capsys.readouterr().err


@pytest.mark.parametrize("cut", ["first_up", "both_up", "mid_reps", "between_unit_done"])
def test_duet_resume_after_a_kill_at_any_point_of_a_duet_counts_whole_duets_once(
    cut, tmp_path, manifest, launcher_arg, monkeypatch
):
    """The store cut inside the last of 3 duets (first server up, both up, mid repetitions, between its two
    unit_done records), then --resume: exactly 3 duets counted, each of one round with one start per arm whose
    measured repetitions are all its own, the re-measured duet keeps its place in the swap, and no round's
    repetitions come from two attempts."""
    out, recs, _ = _duet(
        tmp_path, manifest, launcher_arg, monkeypatch, [*NULL, "--restarts", "3", "--max-starts", "3"], QUIET
    )
    lines = (out / "results.jsonl").read_text().splitlines()
    last = [i for i, r in enumerate(recs) if r.get("round") == 2 and r["type"] in ("start", "rep", "unit_done")]
    kinds = [recs[i]["type"] for i in last]
    at = {
        "first_up": last[kinds.index("start")],
        "both_up": last[[i for i, k in enumerate(kinds) if k == "start"][1]],
        "mid_reps": last[[i for i, k in enumerate(kinds) if k == "rep"][4]],
        "between_unit_done": last[kinds.index("unit_done")],
    }[cut]
    (out / "results.jsonl").write_text("\n".join(lines[: at + 1]) + "\n")
    assert main(["ab", "--resume", str(out)]) == 0
    recs = list(store.read(out / "results.jsonl"))
    v = store.view(recs)
    keys = [a["key"] for a in v.runs[0]["arms"]]
    rounds = [{u.round for u in v.units_of(k)} for k in keys]
    both = sorted(rounds[0] & rounds[1])
    assert len(both) == 3 and both[:2] == [0, 1]
    c = [r for r in recs if r["type"] == "conclusion"][-1]["comparisons"][0]
    assert c["comparison"]["n_ref"] == 3
    for k in keys:
        for u in v.units_of(k):
            own = [r for r in recs if r["type"] == "rep" and r["start_id"] == u.start_id and not r["warmup"]]
            assert len(own) == len(u.reps) == 3
    redone = [v.units[(k, both[2])] for k in keys]
    assert [u.duet["index"] for u in redone] == [2, 2] and redone[0].duet["position"] == 0  # ref first, as duet 3
    # a duet's two starts: one round, two start ids, neither reused from the cut attempt
    cut_ids = {r["start_id"] for r in recs[: at + 1] if r.get("round") == 2 and r["type"] == "start"}
    assert not cut_ids & {u.start_id for u in redone}


def test_duet_a_failure_while_the_second_server_starts_is_its_arm_s(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """An OSError while the second server starts (here: its launch) names that server's arm, and no failure is
    recorded against the first server's arm, which was healthy."""
    from bench import launcher

    real = launcher.spawn  # the Runner launches through spawn (then waits), a block's servers all at once

    def spawn(cfg, arm, env, console):
        if cfg.tree and cfg.tree.endswith("tree-b"):
            raise OSError("cannot open the console log")
        return real(cfg, arm, env, console)

    monkeypatch.setattr(launcher, "spawn", spawn)
    _duet(tmp_path, manifest, launcher_arg, monkeypatch, [*NULL, "--no-warmup-start"], QUIET, rc=EXIT_ABORTED)
    err = capsys.readouterr().err
    assert "[duet 1] arm b: cannot open the console log" in err
    recs = list(store.read(tmp_path / "duet" / "results.jsonl"))
    assert not [r for r in recs if r["type"] == "failure" and r["arm"] == "a"]


def test_duet_and_sequential_runs_count_their_starts_alike(tmp_path, manifest, launcher_arg, monkeypatch):
    """Each invocation's Runner counts exactly the servers it started, duets and sequential starts alike, on a
    first run and on --resume: its units_started and started_ids are the start records between its run record
    and its conclusion, whose server_starts_this_run says the same. check_budget and next_unit_estimate read
    that count, so a start path that kept it another way would move where --time-budget stops."""
    from bench import runner as runner_mod

    made: list[runner_mod.Runner] = []

    class Counted(runner_mod.Runner):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(runner_mod, "Runner", Counted)
    budget = ["--restarts", "3", "--max-starts", "3", "--time-budget", "0.5"]  # a paired design reads 3 first
    duet, _, _ = _duet(tmp_path, manifest, launcher_arg, monkeypatch, [*NULL, *budget], QUIET, rc=EXIT_BUDGET)
    seq = tmp_path / "seq"
    assert main(fake_argv("ab", [*NULL, *budget], manifest, launcher_arg, seq)) == EXIT_BUDGET
    for out in (duet, seq):
        for _ in range(4):
            if main(["ab", "--resume", str(out)]) == 0:
                break
    for out in (duet, seq):
        recs = list(store.read(out / "results.jsonl"))
        runs = [i for i, r in enumerate(recs) if r["type"] == "run"]
        invocations = [recs[i:j] for i, j in zip(runs, [*runs[1:], len(recs)])]
        runners = [r for r in made if r.cfg.out_dir == out]
        assert len(runners) == len(invocations) >= 2  # a first run and at least one --resume
        for runner, segment in zip(runners, invocations):
            started = {r["start_id"] for r in segment if r["type"] == "start"}
            conclusion = next(r for r in segment if r["type"] == "conclusion")
            assert started and runner.started_ids == started
            assert runner.units_started == len(started) == conclusion["server_starts_this_run"]
