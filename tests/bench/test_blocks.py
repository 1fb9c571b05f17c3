"""The block design (bench/blocks.py, bench/block_runner.py) end to end on the CPU: every arm of a round live at
once (fake servers, tests/bench/fake_apply.py), one tree and one port each, --sleep-on-idle added, repetitions
served round by round; ab and ablate read paired comparisons; a planted slowdown is found and named by ablate,
a null pair names nothing; --resume; the refusals; the pool of trees made from a wheel; the report."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures

from bench import store
from bench.block_trees import pool_trees
from bench.blocks import arrangement, check_server_args, serving_order
from bench.cli import main
from bench.errors import EXIT_BUDGET, UsageError

QUIET = {"noise": 0.002}
SERVER = ("--tp", "1", "--port", "31000", "--mem-fraction-static", "0.3", "--max-total-tokens", "4096")


def _run(
    tmp_path, manifest, launcher_arg, monkeypatch, kind, args, fake, n_trees=4, rc=0, out_name="blk", server=SERVER
):
    log = tmp_path / "fake-starts.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    trees = []
    for k in range(n_trees):
        (tmp_path / f"t{k}").mkdir(exist_ok=True)
        trees.append(str(tmp_path / f"t{k}"))
    out = tmp_path / out_name
    argv = fake_argv(kind, [*args, "--concurrent", "--trees", ",".join(trees)], manifest, launcher_arg, out, server)
    assert main(argv) == rc
    starts = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return out, list(store.read(out / "results.jsonl")) if (out / "results.jsonl").exists() else [], starts


def test_order_and_arrangement_balance_positions():
    assert serving_order(3, 2) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
    assert Counter(k for _, k in serving_order(4, 6)) == {0: 6, 1: 6, 2: 6, 3: 6}
    # over n blocks every arm takes every position once
    assert sorted(tuple(arrangement(3, i)) for i in range(3)) == [(0, 1, 2), (1, 2, 0), (2, 0, 1)]


def test_server_args_need_a_memory_share_and_a_fixed_kv_pool():
    check_server_args(["--mem-fraction-static", "0.3", "--max-total-tokens", "4096"])
    for bad, words in (
        (["--max-total-tokens", "4096"], "--mem-fraction-static F"),
        (["--mem-fraction-static", "0.6", "--max-total-tokens", "4096"], "0.45 or less"),
        (["--mem-fraction-static", "0.3"], "--max-total-tokens N"),
        (["--mem-fraction-static", "0.3", "--max-total-tokens", "lots"], "--max-total-tokens N"),
        (["--mem-fraction-static=0.3", "--max-total-tokens=4096", "--port", "x"], "not a number"),
    ):
        with pytest.raises(UsageError, match=words):
            check_server_args(bad)


def test_a_block_runs_every_arm_live_at_once_on_its_own_tree_and_port(tmp_path, manifest, launcher_arg, monkeypatch):
    args = ["--arms", "a=base", "b=base+beta", "c=base+delta", "--restarts", "3", "--max-starts", "3"]
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, QUIET)
    assert all("--sleep-on-idle" in s["server_args"] for s in starts)  # added once, to every server
    assert all(s["server_args"].count("--sleep-on-idle") == 1 for s in starts)
    # each server its own torch.distributed port beside its HTTP port: SGLang's random pick could collide
    for s in starts:
        a = s["server_args"]
        assert int(a[a.index("--nccl-port") + 1]) == int(a[a.index("--port") + 1]) + 50
    measured = [r for r in recs if r["type"] == "start" and not r["warmup_start"]]
    assert len(measured) == 9 and Counter(r["round"] for r in measured) == {0: 3, 1: 3, 2: 3}
    for rnd in range(3):
        block = [r for r in measured if r["round"] == rnd]
        assert sorted(r["block"]["position"] for r in block) == [0, 1, 2]
        assert len({r["url"] for r in block}) == 3 and len({r["block"]["tree"] for r in block}) == 3
        assert sorted(r["block"]["port"] for r in block) == [31000, 31500, 32000]
        # the positions rotate: block i puts arm (k + i) mod 3 at position k
        arms = [r["arm"] for r in sorted(block, key=lambda r: r["block"]["position"])]
        assert arms == [["a", "b", "c"][(k + rnd) % 3] for k in range(3)]
        sids = {r["start_id"]: r["block"]["position"] for r in block}
        reps = [r for r in recs if r["type"] == "rep" and r["start_id"] in sids]
        # every server warms up first, then the measured repetitions go round by round: 0 1 2, 2 1 0, 0 1 2
        assert [r["warmup"] for r in reps] == [True] * 3 + [False] * 9
        assert [sids[r["start_id"]] for r in reps if not r["warmup"]] == [0, 1, 2, 2, 1, 0, 0, 1, 2]
        assert [r["block_slot"] for r in reps if not r["warmup"]] == list(range(9))
        # a block counts once every server stopped: its unit_done records come after its last repetition
        done = [i for i, r in enumerate(recs) if r["type"] == "unit_done" and r["start_id"] in sids]
        last = max(i for i, r in enumerate(recs) if r["type"] == "rep" and r["start_id"] in sids)
        assert len(done) == 3 and min(done) > last
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["method"] == "block" and [r["verdict"] for r in c["comparisons"]] == ["same", "same"]
    assert all(r["comparison"]["n_ref"] == 3 for r in c["comparisons"])
    run = next(r for r in recs if r["type"] == "run")
    assert run["config"]["concurrent"] is True
    md = (out / "report.md").read_text()
    assert "Block design" in md and "## Blocks" in md and "block-to-block CV" in md
    assert "3 blocks" in md


def test_a_planted_slowdown_is_named_by_ablate_and_confirmed_alone(tmp_path, manifest, launcher_arg, monkeypatch):
    """ablate --mode leave-out of the bad set: every leave-one-out in one block with the full set; the patch whose
    removal improves it is measured alone on the base (the confirmation), in blocks of its own, and named."""
    args = ["--base", "base", "--full", "base+beta,planted,delta", "--mode", "leave-out", "--max-starts", "4"]
    out, recs, starts = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "ablate", args, {"costs": {"planted": 0.08}, **QUIET}, n_trees=5
    )
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["culprits"] == ["planted"] and c["method"] == "block"
    rows = {r["patch"]: r for r in c["patches"]}
    assert rows["planted"]["left_out"] == "improvement" and rows["planted"]["alone"] == "regression"
    assert {rows[p]["left_out"] for p in ("beta", "delta")} == {"same"}
    v = store.view(recs)
    blocks = Counter(u.round for u in v.units.values())
    sizes = sorted(blocks.values())
    # the first blocks hold the full set, its three leave-outs and the base (the full set's reference); the
    # confirmation's hold base and base+planted
    assert sizes.count(5) >= 3 and sizes.count(2) >= 3
    for u in v.units.values():
        assert set(u.block["arms"]) == {w.arm_key for w in v.units.values() if w.round == u.round}


def test_a_null_pair_names_nothing(tmp_path, manifest, launcher_arg, monkeypatch):
    args = ["--arms", "a=base", "b=base", "--arm-env", "b:BENCH_NULL=1", "--restarts", "3", "--max-starts", "4"]
    _, recs, _ = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, {"noise": 0.05}, n_trees=2)
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["comparisons"][0]["verdict"] in ("same", "cannot tell")


def test_blocks_resume_after_the_time_budget_and_after_a_cut_block(tmp_path, manifest, launcher_arg, monkeypatch):
    args = ["--arms", "a=base", "b=base+beta", "--restarts", "3", "--max-starts", "3"]
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ab",
        [*args, "--time-budget", "0.5", "--no-warmup-start"],
        QUIET,
        n_trees=2,
        rc=EXIT_BUDGET,
    )
    first = [r["start_id"] for r in recs if r["type"] == "unit_done"]
    assert len(first) == 2  # one block of two
    rc = EXIT_BUDGET
    for _ in range(4):
        rc = main(["ab", "--resume", str(out)])
        if rc == 0:
            break
    assert rc == 0
    recs = list(store.read(out / "results.jsonl"))
    done = [r for r in recs if r["type"] == "unit_done"]
    assert [r["start_id"] for r in done[:2]] == first  # the first block is kept, not measured again
    assert sorted(Counter(r["round"] for r in done).values()) == [2, 2, 2]
    # a kill between a block's unit_done records: that block no longer counts, and its round is not reused
    lines = (out / "results.jsonl").read_text().splitlines()
    last = max(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "unit_done")
    (out / "results.jsonl").write_text("\n".join(lines[:last]) + "\n")
    assert main(["ab", "--resume", str(out)]) == 0
    done = [r for r in store.read(out / "results.jsonl") if r["type"] == "unit_done"]
    assert Counter(r["round"] for r in done) == {0: 2, 1: 2, 2: 1, 3: 2}
    c = [r for r in store.read(out / "results.jsonl") if r["type"] == "conclusion"][-1]
    assert c["comparisons"][0]["comparison"]["n_ref"] == 3


def test_a_server_that_fails_to_start_stops_the_whole_block(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    args = ["--arms", "a=base", "b=base+beta", "--no-warmup-start"]
    _, recs, starts = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, {"fail": ["beta"], **QUIET}, n_trees=2, rc=3
    )
    assert "aborted" in capsys.readouterr().err
    f = next(r for r in recs if r["type"] == "failure")
    assert f["arm"] == "b" and f["stage"] == "launch"
    assert not [r for r in recs if r["type"] == "unit_done"]
    import os

    for s in starts:  # every server of the block is gone, the one that started too
        with pytest.raises(ProcessLookupError):
            os.kill(s["pid"], 0)


@pytest.mark.parametrize(
    ("kind", "args", "extra", "words"),
    [
        ("bisect", ["--good", "base", "--bad", "full"], [], "ablate --concurrent"),
        ("ab", ["--arms", "a=base", "b=full"], ["--tree", "/tmp"], "drop --tree"),
        ("ab", ["--arms", "a=base", "b=full"], ["--host-probe"], "no host covariate"),
        ("ab", ["--arms", "a=base", "b=full", "c=empty"], [], "names 2 tree"),
    ],
)
def test_refusals(tmp_path, manifest, launcher_arg, monkeypatch, capsys, kind, args, extra, words):
    _run(tmp_path, manifest, launcher_arg, monkeypatch, kind, [*args, *extra], QUIET, n_trees=2, rc=2)
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "fake-starts.jsonl").exists()  # refused before any server start


def test_the_same_tree_twice_is_refused(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    (tmp_path / "t").mkdir()
    monkeypatch.setenv("FAKE_BENCH", json.dumps(QUIET))
    t = str(tmp_path / "t")
    argv = fake_argv(
        "ab",
        ["--arms", "a=base", "b=full", "--concurrent", "--trees", f"{t},{t}/"],
        manifest,
        launcher_arg,
        tmp_path / "o",
        SERVER,
    )
    assert main(argv) == 2
    assert "same directory" in capsys.readouterr().err


def _wheel(tmp_path: Path) -> tuple[Path, str]:
    w = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang/_version.py", "__version__ = '9.9.9'\n")
        z.writestr("sglang/srt/x.py", "X = 1\n")
        z.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n")
    return w, hashlib.sha256(w.read_bytes()).hexdigest()


def test_the_pool_makes_pristine_installed_trees_from_the_pinned_wheel_once(tmp_path, monkeypatch):
    w, sha = _wheel(tmp_path)
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / w.name).write_bytes(w.read_bytes())
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(cache))
    m = tmp_path / "manifest.yaml"
    pin = {"package": "sglang", "version": "9.9.9", "git_tag": "v9.9.9", "wheel": w.name, "sha256": sha}
    m.write_text(yaml.safe_dump({"schema": 1, "pin": pin, "patches": []}))
    trees = pool_trees(str(m), 3, tmp_path / "pool")
    assert len(set(trees)) == 3
    for t in trees:
        assert (Path(t) / "python" / "sglang" / "_version.py").read_text() == "__version__ = '9.9.9'\n"
        assert not (Path(t) / "python" / "sglang-9.9.9.dist-info").exists()
    (Path(trees[0]) / "python" / "sglang" / "srt" / "x.py").write_text("X = 2\n")  # a tree a launch switched since
    again = pool_trees(str(m), 4, tmp_path / "pool")
    assert again[:3] == trees and (Path(trees[0]) / "python" / "sglang" / "srt" / "x.py").read_text() == "X = 2\n"
    # a tree left half made (no sglang/__init__.py) is made again; no temporary directory is left behind
    (Path(again[3]) / "python" / "sglang" / "__init__.py").unlink()
    pool_trees(str(m), 4, tmp_path / "pool")
    assert (Path(again[3]) / "python" / "sglang" / "__init__.py").is_file()
    assert not [p for p in Path(again[0]).parent.iterdir() if p.name.startswith(".tmp-")]
    # another manifest gets its own pool: a tree's state names the patches of the manifest that applied them
    m2 = tmp_path / "other" / "manifest.yaml"
    m2.parent.mkdir()
    m2.write_text(m.read_text())
    assert Path(pool_trees(str(m2), 1, tmp_path / "pool")[0]).parent != Path(trees[0]).parent


def test_the_pool_says_how_to_get_the_wheel(tmp_path, monkeypatch):
    _, sha = _wheel(tmp_path)
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no download in a test
    m = tmp_path / "manifest.yaml"
    pin = {
        "package": "sglang",
        "version": "9.9.9",
        "git_tag": "v9.9.9",
        "wheel": "sglang-9.9.9-py3-none-any.whl",
        "sha256": sha,
    }
    m.write_text(yaml.safe_dump({"schema": 1, "pin": pin, "patches": []}))
    with pytest.raises(UsageError, match="--trees"):
        pool_trees(str(m), 2, tmp_path / "pool")


def test_a_pool_tree_of_the_real_pin_launches_with_its_own_sglang_first(tmp_path):
    """The real pinned wheel (fetch's cache) made into a pool tree: `apply.py launch --dry-run` runs it with this
    interpreter and puts the tree's python/ first on the server's PYTHONPATH, so the server imports that tree's
    patched sglang, not the environment's (an installed-layout tree would have been refused: no interpreter)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    (t,) = pool_trees(str(root / "manifest.yaml"), 1, tmp_path / "pool")
    p = subprocess.run(
        [
            sys.executable,
            str(root / "apply.py"),
            "--tree",
            t,
            "launch",
            "--dry-run",
            "--set",
            "default",
            "--",
            "--model-path",
            "m",
        ],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert p.returncode == 0, p.stderr
    env = dict(ln.split("=", 1) for ln in p.stdout.splitlines() if "=" in ln and not ln.startswith(("unset", "/")))
    assert env["PYTHONPATH"].split(":")[0] == str(Path(t) / "python")
    assert p.stdout.splitlines()[-1].startswith(f"{sys.executable} -m sglang.launch_server")
    s = subprocess.run(
        [sys.executable, str(root / "apply.py"), "--tree", t, "status", "--json"],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert s.returncode == 0, s.stderr


def _pairs_of(recs: list[dict]) -> tuple[store.StoreView, dict[int, frozenset[str]]]:
    v = store.view(recs)
    by_round: dict[int, set[str]] = {}
    for u in v.units.values():
        by_round.setdefault(u.round, set()).add(u.arm_key)
    return v, {r: frozenset(k) for r, k in by_round.items()}


def test_block_pairs_measure_each_comparison_in_blocks_of_its_two_arms_and_name_the_plant(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    """--block-pairs: every block holds one comparison's reference and arm only (the leave-outs with the full set,
    the full set with the base, the confirmation's plant with the base), two trees suffice, and the plant is named
    and confirmed as in blocks of all arms."""
    args = ["--base", "base", "--full", "base+beta,planted,delta", "--mode", "leave-out", "--max-starts", "4"]
    out, recs, _ = _run(
        tmp_path,
        manifest,
        launcher_arg,
        monkeypatch,
        "ablate",
        [*args, "--block-pairs"],
        {"costs": {"planted": 0.08}, **QUIET},
        n_trees=2,
    )
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["culprits"] == ["planted"] and c["method"] == "block"
    run = next(r for r in recs if r["type"] == "run")
    assert run["config"]["block_pairs"] is True
    arms = {a["name"]: a["key"] for a in run["arms"]}
    names = {k: n for n, k in arms.items()}
    v, blocks = _pairs_of(recs)
    assert blocks and all(len(k) == 2 for k in blocks.values()), blocks
    # a block is one of the comparisons the plan decides (full / a leave-out, base / the confirmation's patch
    # alone), never two unrelated arms, and never base / full: a leave-out ablate does not read that comparison,
    # and the H200 run spent a block on it (bench/results/2026-12-03-h200-pairs)
    for k in blocks.values():
        pair = {names[x] for x in k}
        other = pair - {"base", "full"}
        assert ("base" in pair and other and next(iter(other)).startswith("+")) or (
            "full" in pair and other and next(iter(other)).startswith("-")
        ), pair
    # every leave-out met the full set in blocks of their own, at least the first look's 3 times
    full = arms["full"]
    for name, key in arms.items():
        if name.startswith("-"):
            assert sum(1 for k in blocks.values() if k == frozenset((full, key))) >= 3, name
    assert "With --block-pairs a block holds one comparison's two arms only" in (out / "report.md").read_text()


def test_block_pairs_resume_replays_the_stored_pairs_and_measures_nothing_again(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    args = ["--arms", "a=base", "b=base+beta", "c=base+delta", "--restarts", "3", "--max-starts", "3", "--block-pairs"]
    out, recs, starts = _run(tmp_path, manifest, launcher_arg, monkeypatch, "ab", args, QUIET, n_trees=2)
    _, blocks = _pairs_of(recs)
    assert len(blocks) == 6 and all(len(k) == 2 for k in blocks.values())  # (a, b) and (a, c), three rounds each
    n = len(starts)
    out2, recs2, starts2 = _run(
        tmp_path, manifest, launcher_arg, monkeypatch, "ab", [*args, "--resume", str(out)], QUIET, n_trees=2
    )
    assert len(starts2) == n  # the fake's start log: no server started again
    c1 = next(r for r in recs if r["type"] == "conclusion")
    c2 = [r for r in recs2 if r["type"] == "conclusion"][-1]
    assert [x["verdict"] for x in c1["comparisons"]] == [x["verdict"] for x in c2["comparisons"]]


def test_block_pairs_need_concurrent(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    argv = fake_argv("ab", ["--arms", "a=base", "b=base+beta", "--block-pairs"], manifest, launcher_arg, tmp_path / "o")
    assert main(argv) == 2
    assert "--block-pairs are the block design's: add --concurrent" in capsys.readouterr().err
