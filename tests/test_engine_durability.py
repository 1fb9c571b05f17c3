"""The order in which a commit makes its writes durable (Transaction.commit's steps 1-5), read from the system
calls of a real `apply --all` and `revert --all` on the real tree; and the fallback where syncfs(2) is missing,
which fsyncs every path a barrier covers. A kill loses nothing written (tests/test_engine_faults.py); what these
guard is the order across a power loss, which no test can cut: a name durable only after its bytes, the journal
durable before the tree changes and until all of the change is."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from faultlib import STRACE

from sglang_overlay import api, fsio
from sglang_overlay.fsio import TMP_SUFFIX, tmp_path

STATE = ".sglang-overlay"
_LINE = re.compile(r"^(\w+)\((.*)\) += (-?\d+)")


def _calls(tree: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(syscall, arguments) of the command's own process, in order, file descriptors shown as their paths; of
    the opens only those that create (a temp file, the lock)."""
    log = tmp_path / "strace.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")} | (env or {})
    p = subprocess.run(
        [STRACE, "-y", "-o", str(log), "-e", "trace=openat,rename,syncfs,fsync,unlink"]
        + [sys.executable, str(ROOT / "apply.py"), "--tree", str(tree), *args],
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    out = []
    for line in log.read_text().splitlines():
        m = _LINE.match(line)
        if m and int(m.group(3)) >= 0 and (m.group(1) != "openat" or "O_CREAT" in m.group(2)):
            out.append((m.group(1), m.group(2)))
    return out


def _index(calls: list[tuple[str, str]], name: str, needle: str, *, last: bool = False) -> int:
    hits = [i for i, (n, a) in enumerate(calls) if n == name and needle in a]
    assert hits, f"no {name}(...{needle}...) in {calls}"
    return hits[-1] if last else hits[0]


def _fsynced(calls: list[tuple[str, str]], path: str, start: int, end: int) -> bool:
    """A barrier for `path` between the two calls: a syncfs, or an fsync of `path` itself (fsio.Barrier fsyncs
    each path of a small flush)."""
    return any(n == "syncfs" or (n == "fsync" and f"<{path}>" in a) for n, a in calls[start + 1 : end])


def _opened(a: str) -> str:
    return a.split('"')[1]


@pytest.mark.skipif(STRACE is None, reason="needs strace (`apt-get install -y strace`; .ci/run installs it)")
@pytest.mark.parametrize("op", ["apply", "revert"])
def test_each_name_becomes_durable_only_after_its_bytes_and_the_journal_brackets_the_change(sglang_tree, tmp_path, op):
    if op == "revert":
        subprocess.run(
            [sys.executable, str(ROOT / "apply.py"), "--tree", str(sglang_tree), "apply", "--all"], check=True
        )
    calls = _calls(sglang_tree, tmp_path, op, "--all")
    state_dir = f"{sglang_tree.resolve()}/{STATE}"
    journal_tmp = _index(calls, "openat", f"/.journal.json{TMP_SUFFIX}")
    journal_in = _index(calls, "rename", f'/{STATE}/journal.json"')
    journal_out = _index(calls, "unlink", f"/{STATE}/journal.json")
    # step 2: the journal's directory fsynced right after its rename, before anything in the tree is opened
    assert calls[journal_in + 1][0] == "fsync" and f"/{STATE}>" in calls[journal_in + 1][1]
    root = f'"{sglang_tree.resolve()}/'
    tree_opens = [i for i, (n, a) in enumerate(calls) if n == "openat" and root in a and f"/{STATE}/" not in a]
    assert tree_opens and min(tree_opens) > journal_in + 1
    # step 1: every saved copy's bytes durable before its name, its name (the directory) before the journal's
    copies = [i for i, (n, a) in enumerate(calls) if n == "rename" and f"/{STATE}/objects/." in a]
    assert copies, "no saved copy was written: not the case this test is about"
    objects_synced = _index(calls, "fsync", f"<{state_dir}/objects>")
    for i in copies:
        tmp = _opened(calls[i][1])
        written = _index(calls, "openat", tmp, last=True)
        assert _fsynced(calls, tmp, written, i), f"{calls[i]}: renamed before its bytes were durable"
        assert i < objects_synced < journal_in, f"{calls[i]}: not durable before the journal's name"
    assert _fsynced(calls, _opened(calls[journal_tmp][1]), journal_tmp, journal_in), (
        "the journal renamed before its bytes were durable"
    )
    # step 3: every file of the tree (and the state) renamed after a barrier that follows its bytes
    renames = [(i, a) for i, (n, a) in enumerate(calls) if n == "rename" and i > journal_in]
    assert len(renames) >= 2
    for i, a in renames:
        tmp = a.split('"')[1]
        written = _index(calls, "openat", tmp, last=True)
        assert _fsynced(calls, tmp, written, i), f"{a}: renamed before its bytes were made durable"
        # step 4: the name durable before the journal goes
        dst = a.split('"')[3]
        assert _fsynced(calls, os.path.dirname(dst), i, journal_out), f"{a}: not durable before the journal's removal"
    # and after its removal, the state directory fsynced: the removal itself is durable when the command ends
    assert any(n == "fsync" and f"/{STATE}>" in a for n, a in calls[journal_out:])
    # the point of it: a handful of flushes for the whole change, not 2.4 per file
    flushes = sum(1 for n, _ in calls if n in ("fsync", "syncfs"))
    assert flushes <= 8, calls


@pytest.mark.skipif(STRACE is None, reason="needs strace (`apt-get install -y strace`; .ci/run installs it)")
def test_a_cycle_saves_no_copy_it_saved_before(sglang_tree, tmp_path):
    """After one apply --all and revert --all, the next cycle finds every copy it needs (ObjectStore keeps the
    last change's): it writes none, removes none, and its first barrier is the journal's fsync alone."""
    for op in ("apply", "revert"):
        subprocess.run([sys.executable, str(ROOT / "apply.py"), "--tree", str(sglang_tree), op, "--all"], check=True)
    objects = sglang_tree / STATE / "objects"
    kept = sorted(os.listdir(objects))
    for op in ("apply", "revert"):
        calls = _calls(sglang_tree, tmp_path, op, "--all")
        assert not [a for n, a in calls if f"/{STATE}/objects/" in a and n in ("openat", "rename", "unlink")], calls
        journal_tmp = _index(calls, "openat", f"/.journal.json{TMP_SUFFIX}")
        journal_in = _index(calls, "rename", f'/{STATE}/journal.json"')
        between = [(n, a) for n, a in calls[journal_tmp + 1 : journal_in] if n in ("fsync", "syncfs")]
        assert between[0][0] == "fsync" and f"/.journal.json{TMP_SUFFIX}>" in between[0][1], between
        assert sorted(os.listdir(objects)) == kept
    state = json.loads((sglang_tree / STATE / "state.json").read_text())
    assert not state["files"] and len(kept) > 10


def test_without_syncfs_every_path_a_barrier_covers_is_fsynced(sglang_tree, monkeypatch):
    """Where syncfs is missing (another OS, no ctypes), the barrier is the per-file fsync again: every temp file
    before its rename, and the directories whose names changed."""
    monkeypatch.setattr(fsio, "_SYNCFS", [None])
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    renamed: list[tuple[str, int]] = []  # (destination, how many fsyncs had been made by then)
    real_rename = os.rename

    def rename(src: str | Path, dst: str | Path) -> None:
        if str(src).endswith(TMP_SUFFIX):
            assert os.path.realpath(src) in synced, f"{src} renamed before it was fsynced"
        renamed.append((str(dst), len(synced)))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    done = api.apply(all=True, project=ROOT, tree=sglang_tree)
    assert len(done.written) > 10
    state_dir = str(sglang_tree.resolve() / STATE)
    journal_at = next(n for dst, n in renamed if dst.endswith("/journal.json"))
    assert all(str(sglang_tree.resolve() / f) not in synced[:journal_at] for f in done.written)
    for f in done.written:
        path = sglang_tree.resolve() / f
        assert str(tmp_path(path)) in synced[journal_at:], f"{f}: its bytes were not fsynced after the journal"
        assert str(path.parent) in synced, f"{f}: its directory was not fsynced"
    assert f"{state_dir}/objects" in synced[:journal_at] and state_dir in synced
    bases = {r["base"] for r in json.loads(Path(state_dir, "state.json").read_text())["files"].values() if r["base"]}
    copies = {str(tmp_path(Path(state_dir, "objects", b))) for b in bases}
    assert len(bases) >= 10 and copies <= set(synced[:journal_at]), "a copy was not fsynced before the journal's rename"
    assert api.status(project=ROOT, tree=sglang_tree).applied == done.applied


@pytest.mark.skipif(STRACE is None, reason="needs strace (`apt-get install -y strace`; .ci/run installs it)")
def test_a_hand_edit_saved_by_force_is_durable_before_the_file_is_replaced(sglang_tree, tmp_path):
    """`--force` on one file: the step-3 barrier is small (the file and the state: fsio.FEW fsyncs each), yet
    the backup's names (its directories) must be durable before the edited file is renamed over, or a power
    loss could keep the new bytes and lose the only copy of the edit."""
    fix = ["--manifest", str(ROOT / "tests" / "fixtures" / "engine" / "manifest.yaml")]
    env = {"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0"}  # as tests/test_engine.py runs the fixture manifest
    apply = [sys.executable, str(ROOT / "apply.py"), "--tree", str(sglang_tree), *fix]
    subprocess.run([*apply, "apply", "fx_args_a"], check=True, env=os.environ | env, capture_output=True)
    f = sglang_tree / "python/sglang/srt/server_args.py"
    f.write_text(f.read_text() + "# hand edit\n")
    calls = _calls(sglang_tree, tmp_path, *fix, "revert", "fx_args_a", "--force", env=env)
    backups = f"{sglang_tree.resolve()}/{STATE}/backups"
    replaced = _index(calls, "rename", f'"{f.resolve()}"')
    saved = [i for i, (n, a) in enumerate(calls) if n == "rename" and f'"{backups}/' in a.split(", ")[-1]]
    assert saved and max(saved) < replaced
    dirs = set()
    for i in saved:  # every directory from the saved file's up to the state directory: each holds a new name
        d = os.path.dirname(calls[i][1].split('"')[3])
        while d != os.path.dirname(backups):
            dirs.add(d)
            d = os.path.dirname(d)
    for d in sorted(dirs | {os.path.dirname(backups)}):
        assert _fsynced(calls, d, max(saved), replaced), f"{d}: the backup's name not durable before {f} changed"
