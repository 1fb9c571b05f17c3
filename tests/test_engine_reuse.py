"""A damaged object store meets the reuse of kept copies (ObjectStore.holds): whatever sits under a copy's name,
a command finishes or refuses with the file and the fix, and never restores wrong bytes."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, tree_snapshot

OBJECTS = ".sglang-overlay/objects"


def cli(tree, *args: str) -> subprocess.CompletedProcess:
    # the timeout only ends a hang (the failure this file is about); a command takes seconds
    return subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), "--tree", str(tree), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "SGLANG_OVERLAY_TREE"},
    )


def _cycle_then_replace_copies(tree, make) -> list[str]:
    for op in ("apply", "revert"):
        assert cli(tree, op, "--all").returncode == 0
    names = sorted(os.listdir(tree / OBJECTS))
    for name in names:
        (tree / OBJECTS / name).unlink()
        make(tree / OBJECTS / name)
    return names


def test_a_fifo_under_a_copys_name_neither_blocks_nor_is_reused(sglang_tree):
    """open(2) of a FIFO waits for a writer, and Ctrl-C is held during a commit: the command would hang."""
    pristine = tree_snapshot(sglang_tree)
    _cycle_then_replace_copies(sglang_tree, os.mkfifo)
    for op in ("apply", "revert"):
        res = cli(sglang_tree, op, "--all")
        assert res.returncode == 0, res.stderr
    assert tree_snapshot(sglang_tree) == pristine


def test_a_directory_under_a_copys_name_is_refused_naming_it(sglang_tree):
    pristine = tree_snapshot(sglang_tree)
    names = _cycle_then_replace_copies(sglang_tree, os.mkdir)
    res = cli(sglang_tree, "apply", "--all")
    assert res.returncode == 2, res.stderr
    assert f"{OBJECTS}/" in res.stderr and "rm -r" in res.stderr and any(n in res.stderr for n in names)
    assert tree_snapshot(sglang_tree) == pristine and "Traceback" not in res.stderr
    for name in names:
        os.rmdir(sglang_tree / OBJECTS / name)
    for op in ("apply", "revert"):
        assert cli(sglang_tree, op, "--all").returncode == 0
    assert tree_snapshot(sglang_tree) == pristine
