"""What a command reuses instead of looking again: kept copies (ObjectStore.holds) and directory checks
(Tree.path_of). Whatever sits under a copy's name, a command finishes or refuses with the file and the fix,
never restores wrong bytes, and never writes through a link that appeared since it looked."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, tree_snapshot

from sglang_overlay import api
from sglang_overlay.errors import OverlayError
from sglang_overlay.fsio import TMP_SUFFIX

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


def test_a_rollback_does_not_write_through_a_link_swapped_in_during_the_commit(sglang_tree, tmp_path, monkeypatch):
    """The commit looked at each directory once; a directory swapped for a link to outside the tree after that,
    then a failed write: the rollback must look again, not restore a file through the link."""
    tree = sglang_tree.resolve()
    outside = tmp_path / "outside"
    real_rename, seen, patched = os.rename, [], {}

    def rename(src, dst) -> None:
        dst = os.fspath(dst)
        if os.fspath(src).endswith(TMP_SUFFIX) and dst.startswith(f"{tree}/python/") and "/.sglang-overlay/" not in dst:
            if seen and os.path.dirname(dst) != os.path.dirname(seen[0]):
                first = os.path.dirname(seen[0])
                patched[seen[0]] = Path(seen[0]).read_bytes()
                os.makedirs(outside)
                real_rename(first, outside / "moved")  # the replaced file goes with its directory
                os.symlink(outside / "moved", first)
                raise OSError(errno.EIO, "injected", dst)
            seen.append(dst)
        real_rename(src, dst)

    pristine = tree_snapshot(sglang_tree)
    monkeypatch.setattr(os, "rename", rename)
    try:
        with pytest.raises(OverlayError) as e:
            api.apply(all=True, project=ROOT, tree=sglang_tree)
        monkeypatch.undo()
        moved = outside / "moved" / os.path.basename(seen[0])
        assert moved.read_bytes() == patched[seen[0]], "the rollback wrote through the link"
        assert not [n for n in os.listdir(outside / "moved") if TMP_SUFFIX in n]
        said = str(e.value) + (e.value.hint or "")
        assert "outside the tree" in said and "journal" in said and "replace the link" in said
    finally:  # the fix the message gives, which also keeps the shared checkout whole for the next test
        monkeypatch.undo()
        if patched and os.path.islink(os.path.dirname(seen[0])):
            os.unlink(os.path.dirname(seen[0]))
            os.rename(outside / "moved", os.path.dirname(seen[0]))
    res = cli(sglang_tree, "recover")
    assert res.returncode == 0 and "rolled back" in res.stderr, res.stderr
    assert tree_snapshot(sglang_tree) == pristine
