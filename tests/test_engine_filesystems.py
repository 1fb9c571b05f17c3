"""Real file systems that refuse writes: a read-only mount, a full one, an immutable directory, a directory
without write permission, a full $TMPDIR. Each change is refused (before the first write, or rolled back) with
exit 1 and a message naming the place, the OS error and the fix; what only reads still works.

These need root (mount, chattr, dropping CAP_DAC_OVERRIDE); where the machine does not allow one, that test is
skipped and says why. The same errors are injected at every call by test_engine_faults.py on any machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import ROOT, pristine

FIX = ROOT / "tests" / "fixtures" / "engine" / "manifest.yaml"
FILES = (
    "python/sglang/__init__.py",
    "python/sglang/_version.py",
    "python/sglang/srt/layers/moe/topk.py",
    "python/sglang/srt/server_args.py",
    "python/sglang/srt/utils/common.py",
    "python/sglang/srt/models/kimi_k25.py",
)


def ov(tree: Path, *args: str, env: dict | None = None, prefix: list[str] | None = None):
    import sys

    cmd = [*(prefix or []), sys.executable, str(ROOT / "apply.py"), "--manifest", str(FIX), "--tree", str(tree), *args]
    e = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_OVERLAY")}
    # Memos off: a memo hit from an earlier test composes nothing, so a full $TMPDIR would go untested.
    e.update({"SGLANG_OVERLAY_CUDA_CAPABILITY": "9.0", "SGLANG_OVERLAY_NO_MEMO": "1"}, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=e)


def refused(res, *texts: str) -> None:
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out
    for t in texts:
        assert t in out, f"{t!r} not in:\n{out}"


def small_tree(pinned_tree: Path, dst: Path) -> Path:
    """An installed-package tree holding the real files the engine fixtures patch (and the version file)."""
    for f in FILES:
        (dst / f[len("python/") :]).parent.mkdir(parents=True, exist_ok=True)
        (dst / f[len("python/") :]).write_bytes(pristine(pinned_tree, f))
    return dst


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".sglang-overlay" not in p.parts
    }


@contextmanager
def mounted(*args: str):
    target = Path(args[-1])
    res = subprocess.run(["mount", *args], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(
            f"this machine does not let the tests mount ({res.stderr.strip()}); the errors are injected by "
            f"test_engine_faults.py instead"
        )
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_read_only_tree(pinned_tree, tmp_path):
    tree = small_tree(pinned_tree, tmp_path / "site")
    assert ov(tree, "apply", "--set", "default").returncode == 0
    before = snapshot(tree)
    with mounted("--bind", str(tree), str(tree)):
        remount = subprocess.run(["mount", "-o", "remount,ro,bind", str(tree)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
        st = ov(tree, "status")
        assert st.returncode == 0 and "[x] fx_topk" in st.stdout, st.stderr  # reading needs no write
        assert ov(tree, "apply", "fx_topk").returncode == 0  # already carried: nothing to write, so no refusal
        refused(
            ov(tree, "apply", "fx_overlay"),
            "Read-only file system (EROFS)",
            "nothing was changed",
            "remount it read-write",
        )
        refused(ov(tree, "revert", "--all"), "Read-only file system (EROFS)")
    assert snapshot(tree) == before


def test_full_file_system(pinned_tree, tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)):
        tree = small_tree(pinned_tree, mnt / "site")
        free = shutil.disk_usage(mnt).free
        (mnt / "filler").write_bytes(b"\0" * max(free - 300 * 1024, 0))  # leave less than the change needs
        before = snapshot(tree)
        refused(
            ov(tree, "apply", "fx_topk", "fx_args_a", "fx_common"),
            "not enough free space",
            "(ENOSPC)",
            "nothing was changed",
            "df -h",
        )
        assert snapshot(tree) == before
        assert not (tree / "sglang/.sglang-overlay/journal.json").exists()
        (mnt / "filler").unlink()
        assert ov(tree, "apply", "fx_topk", "fx_args_a", "fx_common").returncode == 0


def test_full_tmpdir(pinned_tree, tmp_path):
    tree = small_tree(pinned_tree, tmp_path / "site")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with mounted("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tmp)):
        before = snapshot(tree)
        res = ov(tree, "apply", "fx_args_a", env={"TMPDIR": str(tmp)})  # server_args.py is 420 KB
        refused(res, "No space left on device (ENOSPC)", str(tmp), "free space")
        assert snapshot(tree) == before and os.listdir(tmp) == []


def test_immutable_directory(pinned_tree, tmp_path):
    tree = small_tree(pinned_tree, tmp_path / "site")
    moe = tree / "sglang/srt/layers/moe"
    res = subprocess.run(["chattr", "+i", str(moe)], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"chattr +i is not possible here: {res.stderr.strip()}")
    try:
        before = snapshot(tree)
        refused(ov(tree, "apply", "fx_args_a", "fx_topk"), str(moe), "Operation not permitted (EPERM)", "chattr -i")
        assert snapshot(tree) == before  # server_args.py, allowed on its own, was not written either
    finally:
        subprocess.run(["chattr", "-i", str(moe)], check=True)
    assert ov(tree, "apply", "fx_args_a", "fx_topk").returncode == 0


def test_directory_without_write_permission(pinned_tree, tmp_path):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop the permission override")
    tree = small_tree(pinned_tree, tmp_path / "site")
    assert ov(tree, "apply", "fx_args_a").returncode == 0  # the state directory exists, writable
    moe = tree / "sglang/srt/layers/moe"
    moe.chmod(0o555)
    try:
        before = snapshot(tree)
        no_override = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
        refused(ov(tree, "apply", "fx_topk", prefix=no_override), str(moe), "(EACCES)", "permissions")
        assert snapshot(tree) == before
        assert ov(tree, "status", prefix=no_override).returncode == 0
    finally:
        moe.chmod(0o755)
