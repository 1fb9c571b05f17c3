"""Shared fixtures: the real pinned SGLang tree (fetched once), resettable working copies, fixture projects."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# CI's two test workers share two cores: torch's default of a thread per core made each process's small CPU
# matmuls wait on threads the other worker kept busy (the tiny draft's training ran 2-3x slower). One thread a
# process, read by torch at import, here and in the commands the tests start; results are the same.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# With PYTHONDONTWRITEBYTECODE=1 (CI's machines set it) no command a test starts writes the tool's bytecode, so
# each compiled the package again (150 ms a command): compile it once, as pip does for an installed package.
compileall.compile_dir(ROOT / "sglang_overlay", quiet=1)
compileall.compile_dir(ROOT / "bench", quiet=1, maxlevels=0)

from faultlib import FAULT_COUNTS, reproduce  # noqa: E402

from sglang_overlay.fetch import ensure_embedded  # noqa: E402
from sglang_overlay.manifest import load_manifest  # noqa: E402

# The 0.5.23 pin's SGLang tests import another `sglang` than tests/sglang_patches: their own process (.ci/run
# runs `pytest tests/sglang_patches_0523`; a path given on the command line is collected).
collect_ignore = ["sglang_patches_0523"]

# The Ctrl-C tests send SIGINT to the commands they start. A shell that starts pytest in the background (`cmd &`
# without job control) hands it SIGINT ignored, every child inherits that, and those commands then run on and
# exit 0: the tests would fail on the launcher, not on the code. A user's Ctrl-C comes to a process that has not
# ignored it, so the tests' children start from Python's own handler (reset to the default by exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_terminal_summary(terminalreporter):
    if not FAULT_COUNTS:
        return
    terminalreporter.section("fault injection: points tried / passed")
    terminalreporter.write_line(reproduce())
    for c in FAULT_COUNTS:
        terminalreporter.write_line(
            f"{c['command']:<15} {c['fault']:<14} {c['passed']:>4} / {c['points']:<4} "
            f"{' '.join(f'{k}={v}' for k, v in sorted(c['by_syscall'].items()))}"
        )
    out = os.environ.get("SGLANG_OVERLAY_FAULT_REPORT")
    if out:
        Path(out).write_text(json.dumps(FAULT_COUNTS, indent=1) + "\n")


@pytest.fixture(scope="session")
def project_manifest():
    return load_manifest(ROOT / "manifest.yaml")


@pytest.fixture(scope="session")
def pinned_tree(project_manifest) -> Path:
    """The embedded default tree of the real pinned release (downloaded once, then cached in .sglang/)."""
    tree, _ = ensure_embedded(ROOT, project_manifest.pin)
    return tree.root


@pytest.fixture(scope="session")
def _sglang_copy(pinned_tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("sglang") / "sglang-0.5.17"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(pinned_tree), str(dst)], check=True)
    return dst


@pytest.fixture
def sglang_tree(_sglang_copy) -> Path:
    """A git checkout of the real SGLang 0.5.17 source, reset to pristine for every test."""
    return reset_tree(_sglang_copy)


def pristine(tree: Path, rel: str) -> bytes:
    """A file of the pinned release as it shipped: the embedded tree's working files carry the user's set
    (quickstart.sh applies the default)."""
    return subprocess.run(["git", "show", f"v0.5.17:{rel}"], cwd=tree, check=True, capture_output=True).stdout


def reset_tree(tree: Path) -> Path:
    """The checkout back to the pristine release (a table-driven test's cases each start from it)."""
    subprocess.run(["git", "reset", "-q", "--hard", "v0.5.17"], cwd=tree, check=True)
    subprocess.run(["git", "clean", "-q", "-fdx"], cwd=tree, check=True)
    return tree


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, check_rc: int | None = None):
    """The CLI as a user runs it: a real process, so exit codes, kills and stderr are real."""
    full_env = dict(os.environ)
    full_env.pop("SGLANG_OVERLAY_TREE", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), *args], cwd=cwd or ROOT, capture_output=True, text=True, env=full_env
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def each(cases, check) -> None:
    """A table-driven test: check(*case) for every (name, case) pair, one assertion naming every case that failed
    (each case is still run on its own; the table is one collected test)."""
    failed = []
    for name, case in cases:
        try:
            check(*case)
        except AssertionError as e:
            failed.append(f"[{name}] {e}")
    assert not failed, f"{len(failed)} case(s) failed:\n" + "\n\n".join(failed)


def tree_snapshot(root: Path) -> dict[str, bytes]:
    """Every file of a tree except git's and the tool's own bookkeeping: what 'byte-identical' compares."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", ".sglang-overlay", "__pycache__")]
        for f in filenames:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def copy_project(dst: Path) -> Path:
    """A copy of this project's manifest, patches and overlay, for tests that edit them."""
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "manifest.yaml", dst / "manifest.yaml")
    for d in ("patches", "overlay"):
        if (ROOT / d).exists():
            shutil.copytree(ROOT / d, dst / d)
    return dst


# The tool's memos (sglang_overlay/memo.py) off: a fault sweep counts a command's calls, and a memo one run
# wrote and the next found would shift them. tests/test_memo.py turns them on for itself.
os.environ["SGLANG_OVERLAY_NO_MEMO"] = "1"


@pytest.fixture(autouse=True)
def _own_bench_warm_dir(tmp_path_factory, monkeypatch):
    """The bench's warm-machine markers per test: a start one test served must not skip another's throwaway."""
    monkeypatch.setenv("SGLANG_OVERLAY_BENCH_WARM_DIR", str(tmp_path_factory.mktemp("bench-warm")))
