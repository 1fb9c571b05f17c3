"""An adversary's tests of the block design (bench/blocks.py, bench/block_runner.py, bench/block_trees.py, the
`--concurrent` wiring in bench/cli.py, the blocked branch of bench/replication.py, the block report).

Each test states the behaviour it pins; those that fail show a defect (the docstring says what goes wrong).
The runs use the fake server (tests/bench/fake_apply.py); signals and kills run the bench as a subprocess and
check, as tests/bench/test_duet_faults.py does, that no server outlives it and that --resume counts whole blocks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from bench_fixtures import fake_argv, launcher_arg, manifest  # noqa: F401 - pytest fixtures

from bench import store
from bench.block_runner import block_estimate
from bench.blocks import NCCL_PORT_OFFSET, arrangement, server_args_at
from bench.cli import main
from bench.errors import EXIT_ABORTED

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_apply.py")
QUIET = {"noise": 0.002}
SERVER = ("--tp", "1", "--port", "31000", "--mem-fraction-static", "0.3", "--max-total-tokens", "4096")
AB3 = ["--arms", "a=base", "b=base+beta", "c=base+delta"]


# -- helpers --------------------------------------------------------------------------------------------------------
def _trees(tmp_path: Path, n: int) -> list[str]:
    out = []
    for k in range(n):
        (tmp_path / f"t{k}").mkdir(exist_ok=True)
        out.append(str(tmp_path / f"t{k}"))
    return out


def _env(monkeypatch, tmp_path: Path, fake: dict) -> Path:
    log = tmp_path / "fake-starts.jsonl"
    monkeypatch.setenv("FAKE_BENCH", json.dumps(fake))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(log))
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200")
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(tmp_path / "warm"))  # no other test's warm machine
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    return log


def _argv(tmp_path, manifest, launcher, kind, args, n_trees, out_name="blk", server=SERVER):
    trees = _trees(tmp_path, n_trees)
    out = tmp_path / out_name
    return out, fake_argv(kind, [*args, "--concurrent", "--trees", ",".join(trees)], manifest, launcher, out, server)


def _records(out: Path) -> list[dict]:
    return list(store.read(out / "results.jsonl"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not re.search(r"^State:\s+Z", f.read(), re.M)
    except FileNotFoundError:
        return False


def _pids(log: Path) -> list[int]:
    return [json.loads(x)["pid"] for x in log.read_text().splitlines()] if log.exists() else []


def _left_running(log: Path, wait_s: float = 15.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while (running := [p for p in _pids(log) if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in running:  # never leave one behind for the next test
        os.kill(p, signal.SIGKILL)
    return running


def _cut_store(out: Path, keep) -> None:
    """Keep the store's lines up to (not including) the first line for which keep(index, record) is False."""
    lines = (out / "results.jsonl").read_text().splitlines()
    kept = []
    for i, ln in enumerate(lines):
        if not keep(i, json.loads(ln)):
            break
        kept.append(ln)
    (out / "results.jsonl").write_text("\n".join(kept) + "\n")


def _whole_blocks(recs: list[dict]) -> dict[int, set[str]]:
    """round -> arm keys of every block all of whose servers have their unit_done."""
    v = store.view(recs)
    by_round: dict[int, dict] = {}
    for u in v.units.values():
        by_round.setdefault(u.round, {})[u.arm_key] = u
    return {r: set(us) for r, us in by_round.items() if set(next(iter(us.values())).block["arms"]) == set(us)}


# == pure helpers ===================================================================================================
def test_a_user_nccl_port_is_given_to_every_server_of_a_block():
    """bench/blocks.py server_args_at: each position gets its own --port (+500 k), but a user's --nccl-port is kept
    as is for every position, so every server of the block binds the same torch.distributed port (the collision
    the per-position --nccl-port was added to prevent). Expected: a port of its own per position (offset like
    --port), or the flag refused with --concurrent."""
    args = [*SERVER, "--nccl-port", "40000"]
    got = [server_args_at(args, k) for k in range(3)]

    def nccl(a):
        return a[a.index("--nccl-port") + 1]

    assert len({nccl(a) for a in got}) == 3, [nccl(a) for a in got]


def test_without_a_user_nccl_port_each_position_has_its_own_ports():
    """(pins) ports + 500 k, --nccl-port beside each, both `--port P` and `--port=P` rewritten."""
    for server in (list(SERVER), ["--port=31000", "--mem-fraction-static", "0.3"]):
        got = [server_args_at(server, k) for k in range(4)]
        ports = []
        for a in got:
            p = [x.split("=", 1)[1] for x in a if x.startswith("--port=")] or [a[a.index("--port") + 1]]
            assert len(p) == 1
            ports.append(int(p[0]))
            assert int(a[a.index("--nccl-port") + 1]) == ports[-1] + NCCL_PORT_OFFSET
        assert ports == [31000, 31500, 32000, 32500]


def test_a_block_whose_ports_pass_65535_is_refused_before_any_server(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """Position k listens on --port + 500 k (and + 50 for NCCL): with --port 65000 and three arms the third server
    is given port 66000, which no OS can bind; the run starts the block's first servers and only then fails (on a
    GPU: after minutes of start-up). Bad input: expected exit 2 naming --port, before anything starts (here with
    --dry-run, which checks the --concurrent arguments too)."""
    _env(monkeypatch, tmp_path, QUIET)
    server = ("--tp", "1", "--port", "65000", "--mem-fraction-static", "0.3", "--max-total-tokens", "4096")
    _, argv = _argv(tmp_path, manifest, launcher_arg, "ab", [*AB3, "--dry-run"], 3, server=server)
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert rc == 2 and "--port" in err, (rc, err[-800:])


# == the time budget's estimate (bench.block_runner.block_estimate) ==================================================
def _fake_runner(records: list[dict], started: set[str], warm_estimate: float = 120.0):
    v = store.view(records)
    return SimpleNamespace(
        view=lambda: v, started_ids=frozenset(started), cfg=SimpleNamespace(warm_start_estimate_s=warm_estimate)
    )


def _block_records(rnd: int, keys: list[str], wall: float, startup: float, machine_warm: bool = True) -> list[dict]:
    out = []
    for pos, k in enumerate(keys):
        sid = f"s{rnd}-{k}"
        out.append(
            {
                "type": "start",
                "start_id": sid,
                "arm": k,
                "arm_key": k,
                "round": rnd,
                "warmup_start": False,
                "machine_warm": machine_warm,
                "startup_s": startup,
                "block": {"index": rnd, "position": pos, "arms": keys},
            }
        )
        out.append(
            {
                "type": "unit_done",
                "start_id": sid,
                "arm_key": k,
                "round": rnd,
                "wall_s": round(wall / len(keys), 2),
                "block_wall_s": wall,
            }
        )
    return out


def test_the_estimate_of_a_smaller_block_is_not_the_largest_block_seen():
    """ablate --mode leave-out runs blocks of 2 + n servers, then its confirmations in blocks of 2 (base, base+p).
    block_estimate scales a seen block's wall time up to a larger block, never down: after blocks of 5 that took
    50 s each (10 s start-up, 40 s of five servers' repetitions), a block of 2 is taken to need 50 s, not about
    10 + 2/5 x 40 = 26 s, and --time-budget refuses confirmations that fit (the culprit is then never named)."""
    recs = [r for i in range(3) for r in _block_records(i, ["full", "-p0", "-p1", "-p2", "base"], 50.0, 10.0)]
    r = _fake_runner(recs, {x["start_id"] for x in recs if x["type"] == "start"})
    assert block_estimate(r, 5) == pytest.approx(50.0)
    assert block_estimate(r, 2) < 40.0, block_estimate(r, 2)


def test_the_estimate_after_a_cold_first_block_is_a_warm_block():
    """With --no-warmup-start on a fresh machine the first block pays the cold start-up (350-440 s on an H200,
    a warm one 57-83 s: bench/results/2026-12-01-h200-run4). Runner.next_unit_estimate replaces a cold start-up by
    --warm-start-estimate for exactly this reason; block_estimate reads the cold block's wall time as it is and
    refuses the next block although most of the budget is left (the run4 bug, back for blocks)."""
    recs = _block_records(0, ["a", "b"], 430.0, 400.0, machine_warm=False)
    r = _fake_runner(recs, {x["start_id"] for x in recs if x["type"] == "start"}, warm_estimate=120.0)
    # 30 s of repetitions and stops, plus a warm start-up of at most 120 s
    assert block_estimate(r, 2) <= 30.0 + 120.0 + 1.0, block_estimate(r, 2)


def test_the_estimate_from_the_throwaway_start_counts_the_measured_repetitions():
    """Before the first block the estimate is "one start-up plus n servers' repetitions" from the throwaway start,
    but the throwaway serves only --warmup-reps repetitions: with 2 warm-up and 8 measured repetitions a server
    of the block serves 10, five times what the throwaway's (wall - start-up) holds, so a block of 2 that needs
    ~20 + 2 x 50 = 120 s is estimated at 20 + 2 x 10 = 40 s and allowed to overrun the budget."""
    recs = [
        {"type": "start", "start_id": "w", "arm": "a", "arm_key": "a", "round": -1, "warmup_start": True},
        {"type": "unit_done", "start_id": "w", "arm_key": "a", "round": -1, "wall_s": 30.0, "warmup_start": True},
    ]
    recs[0]["startup_s"] = 20.0
    r = _fake_runner(recs, {"w"})
    r.cfg.reps_per_start, r.cfg.warmup_reps = 8, 2
    assert block_estimate(r, 2) >= 20.0 + 2 * 10.0 * (8 + 2) / 2 - 1.0, block_estimate(r, 2)


# == the plan over blocks (bench.replication's blocked branch) =======================================================
def test_no_block_of_a_single_server_is_ever_measured():
    """A block pairs what it holds; one server alone pairs nothing. replicate_until adds starts to each arm it was
    asked about until that arm's own count is at a planned look (Policy.at_look). In ablate --mode leave-out the
    base is in every first-phase block (the full set's reference) and then in every confirmation block, so its
    count runs ahead of base+p's: with --look-step 2 (looks at 3, 5, 7, 9 blocks) base+p reaches a look while the
    base does not, and the base is sent on alone: a block of one server, a whole start-up and its repetitions,
    that no comparison reads. Simulated (bench.simulate_blocks.SimBlockLab, the same blocked lab semantics as
    BlockStoreLab.add_starts); seed 1 measures [5, 5, 5, 3, 3, 3, 2, 2, 1]."""
    from bench.plans import Settings, run_ablate
    from bench.replication import Policy
    from bench.simulate import World, host_slowdown, sim_arm
    from bench.simulate_blocks import SimBlockLab

    cands = ["p0", "p1", "p2"]
    base, full = sim_arm("base", ("g",)), sim_arm("full", ("g", *cands))
    alone = {p: sim_arm(f"+{p}", ("g", p)) for p in cands}
    leave = {p: sim_arm(f"-{p}", ("g", *[q for q in cands if q != p])) for p in cands}
    comps = [(base, full), *((base, alone[p]) for p in cands), *((full, leave[p]) for p in cands)]
    s = Settings(Policy(3, 9, 0.95, 0.02, "pocock", 2))
    lone = {}
    for seed in range(12):
        w = World([host_slowdown("p2", 0.10), host_slowdown("p0", 0.035)], 0.003, 0.01)
        lab = SimBlockLab(w, comps, seed=seed)
        run_ablate(lab, base, full, alone, leave, "leave-out", s)
        sizes = [len(b) for b in lab.blocks]
        if 1 in sizes:
            lone[seed] = sizes
    assert not lone, f"blocks of one server (seed: block sizes): {lone}"


def test_ablate_confirmation_blocks_pair_the_base_with_base_plus_p_only(tmp_path, manifest, launcher_arg, monkeypatch):
    """(pins) ablate --mode leave-out: every block that holds base+planted holds the base too (the comparison's
    reference), and the conclusion's alone-on-base comparison counts exactly those blocks."""
    _env(monkeypatch, tmp_path, {"costs": {"planted": 0.08}, **QUIET})
    args = ["--base", "base", "--full", "base+beta,planted", "--mode", "leave-out", "--max-starts", "3"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ablate", [*args, "--no-warmup-start"], 4)
    assert main(argv) == 0
    recs = _records(out)
    arms = {a["name"]: a["key"] for r in recs if r["type"] in ("run", "arm") for a in r.get("arms", [r])}
    blocks = _whole_blocks(recs)
    with_p = [ks for ks in blocks.values() if arms["+planted"] in ks]
    assert with_p and all(arms["base"] in ks for ks in with_p)
    c = next(r for r in recs if r["type"] == "conclusion")
    assert c["culprits"] == ["planted"]


# == bad input ======================================================================================================
def _fake_wheel_manifest(tmp_path: Path, manifest: Path, monkeypatch) -> Path:
    """The fixture manifest with the pin of a small fake wheel in a cache of its own."""
    w = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nVersion: 9.9.9\n")
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / w.name).write_bytes(w.read_bytes())
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(cache))
    data = yaml.safe_load(manifest.read_text())
    data["pin"] = {
        "package": "sglang",
        "version": "9.9.9",
        "git_tag": "v9.9.9",
        "wheel": w.name,
        "sha256": hashlib.sha256(w.read_bytes()).hexdigest(),
    }
    m = manifest.with_name("manifest-fakepin.yaml")
    m.write_text(yaml.safe_dump(data))
    return m


def test_a_tree_pool_that_cannot_be_made_is_refused_with_exit_2(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    """--tree-pool naming a file (or an unwritable dir): block_trees._locked's mkdir raises FileExistsError /
    NotADirectoryError / PermissionError, which nothing turns into a message: the bench dies with a traceback
    (bench.cli.main catches UsageError only). Bad input: expected exit 2 naming --tree-pool."""
    _env(monkeypatch, tmp_path, QUIET)
    m = _fake_wheel_manifest(tmp_path, manifest, monkeypatch)
    not_a_dir = tmp_path / "pool-file"
    not_a_dir.write_text("x")
    argv = fake_argv(
        "ab",
        ["--arms", "a=base", "b=base+beta", "--concurrent", "--tree-pool", str(not_a_dir)],
        m,
        launcher_arg,
        tmp_path / "o",
        SERVER,
    )
    try:
        rc = main(argv)
    except Exception as e:  # what a user sees as a traceback
        pytest.fail(f"traceback instead of a message: {type(e).__name__}: {e}")
    err = capsys.readouterr().err
    assert rc == 2 and "--tree-pool" in err, (rc, err[-800:])


def test_pool_trees_are_made_from_the_pin_and_a_run_on_them_completes(tmp_path, manifest, launcher_arg, monkeypatch):
    """(pins) without --trees the bench makes its own pristine trees from the pinned wheel and runs on them."""
    log = _env(monkeypatch, tmp_path, QUIET)
    m = _fake_wheel_manifest(tmp_path, manifest, monkeypatch)
    args = ["--arms", "a=base", "b=base+beta", "--concurrent", "--tree-pool", str(tmp_path / "pool"), "--restarts", "3"]
    argv = fake_argv("ab", [*args, "--max-starts", "3", "--no-warmup-start"], m, launcher_arg, tmp_path / "o", SERVER)
    assert main(argv) == 0
    trees = {json.loads(x)["tree"] for x in log.read_text().splitlines()}
    assert len(trees) == 2 and all(str(tmp_path / "pool") in t for t in trees)


# == --resume and the report ========================================================================================
def _primary_row(md: str, ref: str, arm: str) -> str:
    rows = [ln for ln in md.splitlines() if ln.startswith(f"| ab | {ref} | {arm} |") and "(primary)" in ln]
    assert len(rows) == 1, rows
    return rows[0]


def test_the_report_of_a_resumed_run_reads_the_blocks_the_verdicts_read(tmp_path, manifest, launcher_arg, monkeypatch):
    """A block of three (a, b, c) cut between its unit_done records, after c's and a's: the plan leaves it out (a
    block counts only whole) and --resume measures it again under a new round. The conclusion reads 3 blocks for
    c vs a; the report (bench.report._compare / duet_report.block_lines: duet.unit_pairs over every completed unit
    of the two arms) also pairs a and c of the cut block, and prints n = 4, another interval and possibly another
    verdict than the run concluded. Expected: the report reads whole blocks only, as the plan does."""
    _env(monkeypatch, tmp_path, QUIET)
    args = [*AB3, "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ab", args, 3)
    assert main(argv) == 0
    recs = _records(out)
    last = [i for i, r in enumerate(recs) if r["type"] == "unit_done" and r["round"] == 2]
    assert len(last) == 3
    # block index 2 puts arms (c, a, b) at positions 0, 1, 2: their unit_done records come in that order
    assert arrangement(3, 2) == [2, 0, 1]
    _cut_store(out, lambda i, r: i < last[2])  # killed before b's unit_done
    assert main(["ab", "--resume", str(out)]) == 0
    recs = _records(out)
    c = [r for r in recs if r["type"] == "conclusion"][-1]
    by_arm = {r["arm"]: r["comparison"] for r in c["comparisons"]}
    assert by_arm["c"]["n_ref"] == 3 and by_arm["b"]["n_ref"] == 3  # the plan: whole blocks only
    md = (out / "report.md").read_text()
    for arm in ("b", "c"):
        row = _primary_row(md, "a", arm)
        assert "| 3 / 3 |" in row, row


def test_a_block_killed_before_its_first_unit_done_is_measured_again_under_a_new_round(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    """bench/block_runner.py's docstring: an interrupted block leaves nothing the statistics read and --resume
    measures it again under a new round. The new round is max(rounds of completed units, failures, consumed) + 1:
    a block killed (SIGKILL, or a full disk at its first unit_done) after its servers' start and rep records but
    before any unit_done leaves its round in no completed unit, so the resumed block takes the same round, and the
    store then holds two blocks' start records (different servers, different trees) under one (arm, round)."""
    _env(monkeypatch, tmp_path, QUIET)
    args = ["--arms", "a=base", "b=base+beta", "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ab", args, 2)
    assert main(argv) == 0
    recs = _records(out)
    first_done_r2 = next(i for i, r in enumerate(recs) if r["type"] == "unit_done" and r["round"] == 2)
    _cut_store(out, lambda i, r: i < first_done_r2)
    killed = {r["start_id"] for r in _records(out) if r["type"] == "start" and r["round"] == 2}
    assert len(killed) == 2
    assert main(["ab", "--resume", str(out)]) == 0
    recs = _records(out)
    before = {x.get("start_id") for x in recs[:first_done_r2]}
    again = [r for r in recs if r["type"] == "start" and not r["warmup_start"] and r["start_id"] not in before]
    assert len(again) == 2
    assert {r["round"] for r in again} != {2}, "the killed block's round was reused"
    c = [r for r in recs if r["type"] == "conclusion"][-1]
    assert c["comparisons"][0]["comparison"]["n_ref"] == 3


def test_resume_replays_stored_blocks_in_order_and_measures_nothing_again(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    """(pins) a finished ablate block run resumed: the plan takes the same decisions from the stored blocks
    (first phase of 4 servers, confirmations of 2), starts no server and concludes the same."""
    log = _env(monkeypatch, tmp_path, {"costs": {"planted": 0.08}, **QUIET})
    args = ["--base", "base", "--full", "base+beta,planted", "--mode", "leave-out", "--max-starts", "3"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ablate", [*args, "--no-warmup-start"], 4)
    assert main(argv) == 0
    n = len(_pids(log))
    first = [r for r in _records(out) if r["type"] == "conclusion"][-1]
    assert main(["ablate", "--resume", str(out)]) == 0
    assert len(_pids(log)) == n
    again = [r for r in _records(out) if r["type"] == "conclusion"][-1]
    assert again["patches"] == first["patches"] and again["culprits"] == first["culprits"] == ["planted"]


# == failures and signals during a block =============================================================================
# The fake server, with two changes: it can die mid-repetitions (DIE_PATCH, DIE_AFTER_REQUESTS), and its wait for
# SIGTERM is signal-safe. fake_apply.wait_for_signal calls Event.set() from the SIGTERM handler while its main
# thread sits in Event.wait(): a handler that runs while that thread holds the Event's (non-reentrant) condition
# lock blocks on it forever, and the fake server outlives the bench (seen in 2 of 20 SIGKILLs of a block here,
# also with a polling Event.wait(0.05)). A test-fixture flake (tests/bench/fake_apply.py; test_duet_faults and
# test_blocks use it too), not the bench's: the real launcher (sglang_overlay.server.ServerProcess) takes no lock
# in its handler.
WRAPPED = """
import os, signal, sys, time
sys.path.insert(0, {tests!r})
import fake_apply

N = int(os.environ.get("DIE_AFTER_REQUESTS", "0"))
DIE = set(os.environ.get("DIE_PATCH", "").split(","))
orig = fake_apply.make_server


def make_server(patches, *a, **k):
    srv = orig(patches, *a, **k)
    if N and DIE & set(patches):
        base = srv.RequestHandlerClass
        seen = [0]

        class H(base):
            def do_POST(self):
                seen[0] += 1
                if seen[0] > N:  # the server process dies mid-repetitions (an OOM kill, a crash)
                    os._exit(9)
                return base.do_POST(self)

        srv.RequestHandlerClass = H
    return srv


def wait_for_signal(srv):
    stop = []  # a plain flag: Event.set() in a handler can deadlock on the Event's own lock (see above)
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    while not stop:
        time.sleep(0.05)
    srv.shutdown()


fake_apply.make_server = make_server
fake_apply.wait_for_signal = wait_for_signal
sys.exit(fake_apply.main())
"""


def _wrapped_launcher(tmp_path: Path) -> str:
    p = tmp_path / "wrapped_apply.py"
    p.write_text(WRAPPED.format(tests=str(FAKE.parent)))
    return f"{sys.executable} {p}"


def test_a_server_dying_mid_repetitions_is_recorded_against_its_arm_and_stops_the_whole_block(
    tmp_path, manifest, monkeypatch, capsys
):
    """(pins) the server of arm c (base+delta) dies after a few requests, in the middle of the block's measured
    repetitions: exit 3 naming the block and the arm, one failure record for c (stage workload, its start id, the
    block's round), no unit_done for that block, every server of the block gone; --resume measures that block
    again under another round and ends with three whole blocks."""
    log = _env(monkeypatch, tmp_path, QUIET)
    monkeypatch.setenv("DIE_PATCH", "delta")
    monkeypatch.setenv("DIE_AFTER_REQUESTS", "30")  # warm-up and a few measured repetitions of the first block
    args = [*AB3, "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    out, argv = _argv(tmp_path, manifest, _wrapped_launcher(tmp_path), "ab", args, 3)
    assert main(argv) == EXIT_ABORTED
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[block 1] arm c" in err, err[-1500:]
    assert not _left_running(log)
    recs = _records(out)
    (f,) = [r for r in recs if r["type"] == "failure"]
    starts = {r["start_id"]: r for r in recs if r["type"] == "start"}
    assert f["arm"] == "c" and f["stage"] == "workload" and starts[f["start_id"]]["arm"] == "c"
    assert f["round"] == 0 and not [r for r in recs if r["type"] == "unit_done"]
    monkeypatch.setenv("DIE_AFTER_REQUESTS", "0")
    assert main(["ab", "--resume", str(out)]) == 0
    blocks = _whole_blocks(_records(out))
    assert len(blocks) == 3 and 0 not in blocks
    assert not _left_running(log)


def test_a_launch_that_cannot_be_made_names_its_arm_and_stops_the_servers_already_launched(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """(pins) an OSError launching the block's second server (position 1, tree t1): exit 3 naming that arm, no
    failure recorded against another arm, and the first server, already launched, stopped."""
    from bench import launcher

    log = _env(monkeypatch, tmp_path, QUIET)
    real = launcher.spawn
    spawned = []

    def spawn(cfg, arm, env, console):
        if cfg.tree and cfg.tree.endswith("t1"):
            raise OSError("cannot open the console log")
        spawned.append(real(cfg, arm, env, console))
        return spawned[-1]

    monkeypatch.setattr(launcher, "spawn", spawn)
    args = [*AB3, "--no-warmup-start"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ab", args, 3)
    assert main(argv) == EXIT_ABORTED
    err = capsys.readouterr().err
    assert "[block 1] arm b: cannot open the console log" in err and "Traceback" not in err, err[-800:]
    assert not [r for r in _records(out) if r["type"] == "failure" and r["arm"] != "b"]
    assert len(spawned) == 1 and spawned[0].proc.poll() is not None  # the launcher (its group) was stopped
    assert not _left_running(log, wait_s=5)


class Proc:
    """A block run as its own process (as a user or a device call's time limit would signal it)."""

    def __init__(
        self, tmp_path: Path, manifest: Path, args: list[str], fake: dict, n_trees: int, name: str = "blk", env=None
    ):
        self.base, self.out, self.log = tmp_path, tmp_path / name, tmp_path / f"fake-starts-{name}.jsonl"
        launcher = _wrapped_launcher(tmp_path)
        where = ["--trees", ",".join(_trees(tmp_path, n_trees))] if n_trees else []
        argv = fake_argv("ab", [*args, "--concurrent", *where], manifest, launcher, self.out, SERVER)
        self.argv = [sys.executable, "-m", "bench", *argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")} | (env or {})
        self.env = env | {
            "PYTHONPATH": str(ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "FAKE_BENCH": json.dumps({**QUIET, **fake}),
            "FAKE_BENCH_LOG": str(self.log),
            "BENCH_GPU_NAME": "NVIDIA H200",
            "SGLANG_OVERLAY_BENCH_WARM_DIR": str(tmp_path / "warm"),
            "MPLCONFIGDIR": str(tmp_path / "mpl"),
        }

    def start_until(self, until, timeout: float = 60.0) -> subprocess.Popen:
        proc = subprocess.Popen(
            self.argv, cwd=self.base, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.02)
        assert until(), "the moment never came"
        return proc

    def resume(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "bench", "ab", "--resume", str(self.out)],
            cwd=self.base,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def records(self) -> list[dict]:
        return list(store.read(self.out / "results.jsonl"))


def _reps_of_round(p: Proc, rnd: int, n: int):
    def until() -> bool:
        if not (p.out / "results.jsonl").exists():
            return False
        return sum(1 for r in p.records() if r["type"] == "rep" and r["round"] == rnd and not r["warmup"]) >= n

    return until


def _signal_then_resume(p: Proc, proc: subprocess.Popen, sig: signal.Signals, moment: str) -> list[dict]:
    """Send `sig` now; the run exits as it should (SIGINT: 130 and no traceback), leaves no server, and block 2
    (round 1) has no unit_done; then --resume completes without a traceback or a server left: its records."""
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err[-2000:]
    if sig == signal.SIGINT:
        assert "Traceback" not in err, err[-3000:]
    assert not _left_running(p.log), f"servers left running after {sig.name} ({moment})"
    assert not [r for r in p.records() if r["type"] == "unit_done" and r["round"] == 1]
    r = p.resume()
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not _left_running(p.log)
    return p.records()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
@pytest.mark.parametrize("moment", ["the last server starting", "between repetitions"])
def test_a_signal_during_a_block_leaves_no_server_and_resume_counts_whole_blocks(sig, moment, tmp_path, manifest):
    """(pins) block 2 of three arms: SIGINT (Ctrl-C) or SIGKILL (a device call's limit) while its last server is
    still starting (it takes 1 s more to announce itself), or between its measured repetitions. Every server of
    the block is gone afterwards (SIGINT: exit 130, no traceback); --resume ends with two whole blocks."""
    fake = {"tree_start_s": {"t2": 1.0}} if moment == "the last server starting" else {"time_scale": 0.1}
    args = [*AB3, "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    p = Proc(tmp_path, manifest, args, fake, 3)
    if moment == "the last server starting":
        proc = p.start_until(lambda: len(_pids(p.log)) >= 6)
        time.sleep(0.3)
    else:
        proc = p.start_until(_reps_of_round(p, 1, 4))
    recs = _signal_then_resume(p, proc, sig, moment)
    blocks = _whole_blocks(recs)
    assert len(blocks) == 3 and all(len(ks) == 3 for ks in blocks.values())
    c = [r for r in recs if r["type"] == "conclusion"][-1]
    assert all(x["comparison"]["n_ref"] == 3 for x in c["comparisons"])


def test_two_runs_at_once_do_not_share_the_pool_s_trees(tmp_path, manifest, monkeypatch):
    """bench/block_trees.py locks the pool only while it makes trees; every run is handed the same t0..tN. Two
    block runs at once on one machine (bench/gpu_device.sh runs streams in parallel, one per GPU, and
    blocks_profiling / blocks_ablate use the default pool with the same manifest) start servers on the same
    trees: the second run's `apply.py launch` switches the patches of a tree a live server of the first runs
    from (and whose modules it imports lazily). Expected: a tree is leased to one run at a time (another tree
    made, or the second run refused with exit 2); here run B took the trees of run A's live servers."""
    m = _fake_wheel_manifest(tmp_path, manifest, monkeypatch)
    env = {"SGLANG_OVERLAY_CACHE": os.environ["SGLANG_OVERLAY_CACHE"]}
    pool = ["--tree-pool", str(tmp_path / "pool"), "--no-warmup-start", "--max-starts", "3"]
    args = ["--arms", "a=base", "b=base+beta", *pool]
    a = Proc(tmp_path, m, [*args, "--restarts", "3"], {"time_scale": 0.3}, 0, name="A", env=env)
    b = Proc(tmp_path, m, [*args, "--restarts", "3"], {}, 0, name="B", env=env)
    proc_a = a.start_until(
        lambda: (a.out / "results.jsonl").exists() and any(r["type"] == "rep" and not r["warmup"] for r in a.records())
    )
    try:
        done_b = subprocess.run(b.argv, cwd=b.base, env=b.env, capture_output=True, text=True, timeout=120)
        a_live = proc_a.poll() is None
        trees = {
            who: {json.loads(x)["tree"] for x in p.log.read_text().splitlines()} for who, p in (("A", a), ("B", b))
        }
    finally:
        proc_a.send_signal(signal.SIGINT)
        proc_a.communicate(timeout=60)
        _left_running(a.log)
        _left_running(b.log)
    assert a_live, "run A ended before run B: the test did not overlap them"
    if done_b.returncode == 2:
        return  # refused: fine
    assert not trees["A"] & trees["B"], f"both runs' live servers on {sorted(trees['A'] & trees['B'])}"


# == start-up times of a block's servers =============================================================================
def test_a_block_server_s_start_up_is_its_own_not_the_wait_for_the_servers_before_it(
    tmp_path, manifest, launcher_arg, monkeypatch
):
    """run_block launches every server, then awaits them in position order; launcher.wait_ready sets startup_s to
    the moment the *bench* returned from the wait, not the moment the server's url line arrived (Announcements
    keeps no time). A server that was up in 0.3 s behind a position-0 server that took 1.5 s more is recorded as
    taking as long as position 0: every later position's start-up (and its start-up breakdown, cut at
    launched_at + startup_s) is the max over the positions before it. Here tree t0 (always position 0) starts
    3 s late; positions 1 and 2 must still be recorded as quick (a 1.5 s delay with a 1 s margin failed once on a
    loaded two-core CI machine, where a fake server took 0.8 s to start)."""
    _env(monkeypatch, tmp_path, {"tree_start_s": {"t0": 3.0}, **QUIET})
    args = [*AB3, "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ab", args, 3)
    assert main(argv) == 0
    starts = [r for r in _records(out) if r["type"] == "start" and not r["warmup_start"]]
    for rnd in range(3):
        by_pos = {r["block"]["position"]: r["startup_s"] for r in starts if r["round"] == rnd}
        assert by_pos[0] >= 3.0
        assert by_pos[1] < by_pos[0] - 1.5 and by_pos[2] < by_pos[0] - 1.5, by_pos


def test_the_block_report_compares_no_start_up_times(tmp_path, manifest, launcher_arg, monkeypatch):
    """bench/README.md: what a block cannot measure is start-up time alone (its servers start together and share
    the machine while they do). The duet's report leaves start-up out of its comparisons; the block's goes through
    report._comparisons, which adds a "server start-up s" row per comparison (Welch, and a "server start-up moved"
    note when it is called), read from start records whose start-up is each server's share of a crowded start
    (and, above, the wait for the servers before it)."""
    _env(monkeypatch, tmp_path, QUIET)
    args = ["--arms", "a=base", "b=base+beta", "--restarts", "3", "--max-starts", "3"]
    out, argv = _argv(tmp_path, manifest, launcher_arg, "ab", args, 2)
    assert main(argv) == 0
    md = (out / "report.md").read_text()
    table = md.split("## Comparisons", 1)[1].split("\n## ", 1)[0]
    assert "server start-up s" not in table, [ln for ln in table.splitlines() if "start-up" in ln]


# == input the run should take =======================================================================================
def test_trees_enough_for_the_largest_block_are_accepted(tmp_path, manifest, launcher_arg, monkeypatch, capsys):
    """cli.block_size counts ablate's blocks as 2 + 2 x (candidates) servers, but a candidate whose set cannot
    exist is skipped (here full - alpha: gamma requires alpha), so the largest block holds 5 servers: base, full,
    +alpha, +beta, -beta. Five --trees are refused ("names 5 tree(s); ... up to 6"), and without --trees the pool
    makes (and unpacks a whole sglang into) a tree no block uses. The run must get past the tree check (its
    servers are made to fail at once here, to keep the test short: exit 3, not 2)."""
    _env(monkeypatch, tmp_path, {"fail": ["alpha"], **QUIET})
    args = ["--base", "empty", "--full", "full", "--patches", "alpha,beta", "--no-warmup-start"]
    _, argv = _argv(tmp_path, manifest, launcher_arg, "ablate", args, 5)
    rc = main(argv)
    err = capsys.readouterr().err
    assert "names 5 tree(s)" not in err, err[-600:]
    assert rc == EXIT_ABORTED and "skipped arm -alpha" in err, (rc, err[-600:])


def test_the_pool_removes_what_a_killed_unpack_left(tmp_path, monkeypatch):
    """unpack_tree makes a tree beside its place (.tmp-tK-XXXX) and renames it; a SIGKILL meanwhile (a device
    call's time limit) leaves the temporary tree, a whole unpacked sglang, behind. pool_trees makes t0 again but
    never removes it: every killed unpack leaks one (hundreds of MB each for the real wheel) in the pool, which
    outlives runs by design."""
    from bench.block_trees import pool_dir, pool_trees

    data = yaml.safe_load(
        textwrap.dedent("""\
        schema: 1
        patches: []
        """)
    )
    w = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("sglang/__init__.py", "")
    sha = hashlib.sha256(w.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / w.name).write_bytes(w.read_bytes())
    monkeypatch.setenv("SGLANG_OVERLAY_CACHE", str(cache))
    data["pin"] = {"package": "sglang", "version": "9.9.9", "git_tag": "v9.9.9", "wheel": w.name, "sha256": sha}
    m = tmp_path / "manifest.yaml"
    m.write_text(yaml.safe_dump(data))
    d = pool_dir(tmp_path / "pool", sha, str(m))
    left = d / ".tmp-t0-killed"
    (left / "python" / "sglang").mkdir(parents=True)
    (left / "python" / "sglang" / "__init__.py").write_text("")
    (t0,) = pool_trees(str(m), 1, tmp_path / "pool")
    assert Path(t0).is_dir()
    assert not [p.name for p in d.iterdir() if p.name.startswith(".tmp-")], "a killed unpack's tree left in the pool"


def test_ablate_alone_confirmation_blocks_fit_the_trees_the_run_was_given(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys
):
    """ablate --mode alone: cli.block_size says its blocks hold 1 + n servers (the base and each base + p), and
    --trees (or the pool) is sized by that. A patch that moves alone is then confirmed left out of the full set:
    decide_pairs([(full, full - p)]) asks for a block of full and full - p, and BlockStoreLab adds full's own
    reference, the base ("full vs base"): 3 servers with n = 1. run_block indexes trees[2] of a 2-tree list:
    IndexError, a traceback in the middle of the run (its servers were never started: the index fails first).
    Expected: the largest block counted (or the confirmation block not holding the base), the culprit named."""
    _env(monkeypatch, tmp_path, {"costs": {"planted": 0.08}, **QUIET})
    args = ["--base", "base", "--full", "base+beta,planted", "--patches", "planted", "--mode", "alone"]
    # two trees: refused up front (exit 2, the count named), before any server, not a traceback mid-run
    _, argv = _argv(tmp_path, manifest, launcher_arg, "ablate", [*args, "--max-starts", "3", "--no-warmup-start"], 2)
    try:
        rc = main(argv)
    except Exception as e:  # what a user sees as a traceback
        pytest.fail(f"traceback in the middle of the run: {type(e).__name__}: {e}")
    err = capsys.readouterr().err
    assert rc == 2 and "up to 3 servers" in err, (rc, err[-800:])
    # three: the confirmation's block (full, full - planted and the base) fits, and the culprit is named
    _, argv = _argv(tmp_path, manifest, launcher_arg, "ablate", [*args, "--max-starts", "3", "--no-warmup-start"], 3)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 0 and "culprits planted" in err, (rc, err[-800:])


@pytest.mark.parametrize("bounds", [("1", "1"), ("1", "4")])
def test_fewer_than_two_blocks_first_is_run_or_refused_never_a_traceback(
    tmp_path, manifest, launcher_arg, monkeypatch, capsys, bounds
):
    """--restarts 1 is accepted ("fewer than 3 are never read: more are added"), and a sequential run takes it.
    With --concurrent the first look after one block reads compare_blocks -> Policy.paired_confidence(1) ->
    sequential.paired_t_quantiles((1, ...)), which raises ValueError("unit counts must increase from 2"): a
    traceback after the first block was measured (the duet shares the path). Expected: the run goes on (no
    verdict below 3 blocks) or --restarts is refused up front with exit 2 naming it."""
    _env(monkeypatch, tmp_path, QUIET)
    args = ["--arms", "a=base", "b=base+beta", "--restarts", bounds[0], "--max-starts", bounds[1]]
    _, argv = _argv(tmp_path, manifest, launcher_arg, "ab", [*args, "--no-warmup-start"], 2)
    try:
        rc = main(argv)
    except Exception as e:  # what a user sees as a traceback
        pytest.fail(f"traceback: {type(e).__name__}: {e}")
    err = capsys.readouterr().err
    assert rc == 0 or (rc == 2 and "--restarts" in err), (rc, err[-600:])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signal_inside_a_block_of_two_leaves_no_server_and_resume_ends_with_whole_pairs(sig, tmp_path, manifest):
    """--block-pairs (one comparison per block, its two arms): a signal between the second block's measured
    repetitions. Both of its servers are gone; the block counts for neither comparison; --resume ends with every
    comparison measured in whole pairs (3 each), and no block holds an arm of another comparison."""
    args = [*AB3, "--block-pairs", "--restarts", "3", "--max-starts", "3", "--no-warmup-start"]
    p = Proc(tmp_path, manifest, args, {"time_scale": 0.1}, 2, name="pairs")
    recs = _signal_then_resume(p, p.start_until(_reps_of_round(p, 1, 3)), sig, "between repetitions")
    blocks = _whole_blocks(recs)
    keys = {a["name"]: a["key"] for a in next(x for x in recs if x["type"] == "run")["arms"]}
    pairs = sorted(tuple(sorted(ks)) for ks in blocks.values())
    want = [tuple(sorted((keys["a"], keys[x]))) for x in ("b", "c")]
    assert set(pairs) == set(want) and all(pairs.count(w) == 3 for w in want), pairs
    v = store.view(recs)
    assert all(len(u.block["arms"]) == 2 for u in v.units.values())
    c = [x for x in recs if x["type"] == "conclusion"][-1]
    assert len(c["comparisons"]) == 2 and all(x["comparison"]["n_ref"] == 3 for x in c["comparisons"])
