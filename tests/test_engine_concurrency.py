"""Two commands at once on one tree: every pair of different changing commands, started together, ends in the
state of one of the two serial orders (no lost update, no exit 0 for an effect that is not there), byte for
byte; a reader never sees half a change; a waiting command takes over cleanly from one killed mid-change."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from faultlib import STRACE, Held, hold, trace_points

FIX = ROOT / "tests" / "fixtures" / "engine" / "manifest.yaml"
ENV = {"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0"}
MANAGED = (
    "python/sglang/srt/layers/moe/topk.py",
    "python/sglang/srt/server_args.py",
    "python/sglang/srt/utils/common.py",
    "python/sglang/srt/fx_overlay_module.py",
    "python/sglang/_overlay_build.py",
)
START = frozenset({"fx_topk", "fx_args_a"})  # preset default

# command -> what it makes of the applied set (the manifest's requires: fx_common needs fx_args_a)
COMMANDS = {
    ("apply", "fx_overlay"): lambda s: s | {"fx_overlay"},
    ("apply", "fx_common"): lambda s: s | {"fx_common", "fx_args_a"},
    ("revert", "fx_topk"): lambda s: s - {"fx_topk"},
    ("toggle", "fx_args_b"): lambda s: s ^ {"fx_args_b"},
    ("toggle", "fx_topk"): lambda s: s ^ {"fx_topk"},
    ("apply", "--set", "args"): lambda s: frozenset({"fx_args_a", "fx_args_b"}),
    ("revert", "--all"): lambda s: frozenset(),
    ("apply", "fx_args_b", "fx_overlay"): lambda s: s | {"fx_args_b", "fx_overlay"},
}


def argv(tree: Path, *args: str) -> list[str]:
    import sys

    return [sys.executable, str(ROOT / "apply.py"), "--manifest", str(FIX), "--tree", str(tree), *args]


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    e.update(ENV)
    return e


def cli(tree: Path, *args: str, rc: int = 0):
    return run_cli("--manifest", str(FIX), "--tree", str(tree), *args, env=ENV, check_rc=rc)


def managed(tree: Path) -> dict[str, bytes | None]:
    return {f: (tree / f).read_bytes() if (tree / f).exists() else None for f in MANAGED}


def applied(tree: Path) -> frozenset[str]:
    return frozenset(json.loads((tree / ".sglang-overlay/state.json").read_text())["applied"])


_reference: dict[frozenset, dict] = {}


def reference(tree: Path, names: frozenset) -> dict:
    """The bytes a tree carrying exactly `names` holds (made once per set, by commands run one at a time)."""
    if names not in _reference:
        cli(tree, "revert", "--all")
        if names:
            cli(tree, "apply", *sorted(names))
        _reference[names] = managed(tree)
    return _reference[names]


@pytest.fixture(scope="module")
def ref_tree(pinned_tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("ref") / "sglang-0.5.17"
    subprocess.run(["git", "clone", "-q", str(pinned_tree), str(dst)], check=True)
    return dst


def test_every_pair_of_commands_started_together(sglang_tree, ref_tree):
    lost = []
    for a, b in itertools.permutations(COMMANDS, 2):
        if a > b:  # each unordered pair once; both serial orders are allowed outcomes
            continue
        cli(sglang_tree, "apply", "--set", "default")
        procs = [
            subprocess.Popen(
                argv(sglang_tree, *c), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for c in (a, b)
        ]
        outs = [p.communicate() + (p.returncode,) for p in procs]
        for c, (out, err, rc) in zip((a, b), outs):
            assert rc == 0 and "Traceback" not in err, f"{c}: rc {rc}\n{out}\n{err}"
        allowed = {COMMANDS[b](COMMANDS[a](START)), COMMANDS[a](COMMANDS[b](START))}
        got = applied(sglang_tree)
        if got not in allowed:
            lost.append(
                f"{' '.join(a)} & {' '.join(b)}: carries {sorted(got)}, "
                f"a serial order gives {[sorted(s) for s in allowed]}"
            )
        elif managed(sglang_tree) != reference(ref_tree, got):
            lost.append(f"{' '.join(a)} & {' '.join(b)}: the files are not those of {sorted(got)}")
    assert not lost, "\n".join(lost)


def test_a_reader_never_sees_half_a_change(sglang_tree):
    cli(sglang_tree, "apply", "--set", "default")
    for _ in range(6):
        writer = subprocess.Popen(
            argv(sglang_tree, "apply", "fx_args_b", "fx_overlay", "fx_common"),
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        readers = [
            subprocess.run(argv(sglang_tree, "status", "--json"), env=env(), capture_output=True, text=True)
            for _ in range(3)
        ]
        assert writer.wait() == 0, writer.stderr.read()
        for r in readers:
            st = json.loads(r.stdout)
            assert st["drifted_files"] == [] and not st["interrupted_transaction"], r.stdout
            assert set(st["applied"]) in (
                {"fx_topk", "fx_args_a"},
                {"fx_topk", "fx_args_a", "fx_args_b", "fx_common", "fx_overlay"},
            )
        cli(sglang_tree, "apply", "--set", "default")


def _held_in_its_change(tree: Path, *args: str) -> Held:
    """Start a command and return once it is stopped inside its change (journal written, the first file's new
    bytes opened beside it, not yet renamed into the tree), holding the lock, until the test resumes or kills it."""
    log = tree.parent / "hold.log"
    cli(tree, "apply", "--set", "default")
    pts, _ = trace_points(argv(tree, *args), env(), tree.parent, log)
    subprocess.run(["git", "reset", "-q", "--hard", "v0.5.17"], cwd=tree, check=True)
    subprocess.run(["git", "clean", "-q", "-fdx"], cwd=tree, check=True)
    cli(tree, "apply", "--set", "default")
    first = next(i for i, p in enumerate(pts) if p.syscall == "rename" and "/python/sglang/" in p.call.split(",")[1])
    held = hold(argv(tree, *args), env(), tree.parent, log, pts[first - 1])
    assert (tree / ".sglang-overlay" / "journal.json").exists(), "held before its change"
    return held


def _waiting(tree: Path, *args: str) -> subprocess.Popen:
    """A second command, returned once it says it waits for the lock (it cannot end before: the holder is stopped)."""
    proc = subprocess.Popen(argv(tree, *args), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = ""
    while "waiting for another command" not in said and (line := proc.stderr.readline()):
        said += line
    assert "waiting for another command" in said and proc.poll() is None, said
    return proc


@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
def test_a_waiting_command_takes_over_from_one_killed_mid_change(sglang_tree, ref_tree):
    first = _held_in_its_change(sglang_tree, "apply", "fx_args_b", "fx_overlay")
    second = _waiting(sglang_tree, "revert", "fx_topk")
    first.kill()
    out, err = second.communicate(timeout=300)  # a fail-safe: it goes on once the lock is free
    assert second.returncode == 0, err
    assert "rolled back an interrupted `apply`" in err
    # decided on the state after the rollback: the killed apply left no trace, the revert took effect
    assert applied(sglang_tree) == {"fx_args_a"}
    assert managed(sglang_tree) == reference(ref_tree, frozenset({"fx_args_a"}))


@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
def test_ctrl_c_while_waiting_for_the_lock(sglang_tree):
    first = _held_in_its_change(sglang_tree, "apply", "fx_overlay")
    before_state = (sglang_tree / ".sglang-overlay" / "journal.json").read_bytes()
    second = _waiting(sglang_tree, "revert", "--all")
    second.send_signal(signal.SIGINT)
    out, err = second.communicate(timeout=300)
    assert second.returncode == 130 and "Traceback" not in err and "interrupted" in err, err
    assert (sglang_tree / ".sglang-overlay" / "journal.json").read_bytes() == before_state  # it changed nothing
    first.kill()
    cli(sglang_tree, "recover")
    assert applied(sglang_tree) == START


@pytest.mark.skipif(STRACE is None, reason="needs strace (installed by .ci/run)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_change_rolls_back_and_exits_130(sglang_tree, sig):
    first = _held_in_its_change(sglang_tree, "apply", "fx_args_b", "fx_overlay")
    before = managed(sglang_tree)
    os.kill(first.pid, sig)  # arrives while the change is half made; acted on at the next step
    first.resume()
    out, err = first.strace.communicate(timeout=300)
    assert first.strace.returncode == 130 and "Traceback" not in err, err
    assert "interrupted: rolled back" in err
    assert not (sglang_tree / ".sglang-overlay" / "journal.json").exists()
    assert managed(sglang_tree) == before and applied(sglang_tree) == START


def test_two_forced_reverts_in_one_second_keep_both_edits(sglang_tree):
    f = sglang_tree / "python/sglang/srt/layers/moe/topk.py"
    saved = []
    for edit in ("# first hand edit\n", "# second hand edit\n"):
        cli(sglang_tree, "apply", "fx_topk")
        f.write_text(f.read_text() + edit)
        err = cli(sglang_tree, "revert", "fx_topk", "--force").stderr
        line = next(line for line in err.splitlines() if "--force: saved 1 hand-edited file(s) under" in line)
        saved.append(Path(line.split(" under ", 1)[1]))
    assert saved[0] != saved[1] and all(d.is_dir() for d in saved)
    assert [
        (d / "python/sglang/srt/layers/moe/topk.py").read_text().endswith(e)
        for d, e in zip(saved, ("# first hand edit\n", "# second hand edit\n"))
    ] == [True, True]


def test_force_over_a_file_deleted_by_hand_names_no_backup(sglang_tree):
    cli(sglang_tree, "apply", "fx_topk")
    topk = sglang_tree / "python/sglang/srt/layers/moe/topk.py"
    topk.unlink()
    cli(sglang_tree, "revert", "--all", rc=1)  # drift: the deleted file would be written back
    err = cli(sglang_tree, "revert", "--all", "--force").stderr
    assert "was deleted by hand; nothing to save" in err and "saved" not in err
    assert not (sglang_tree / ".sglang-overlay" / "backups").exists()
    assert topk.is_file() and "fixture" not in topk.read_text()  # back to the release's bytes
