"""bench/gpu_device.sh stops at once, with the fix, on the two call mistakes that cost run8 device time: a call that
did not carry .gpu/install.sh, and a call that landed on a fresh machine (the warm one was given back after idling)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _device_copy(tmp_path: Path, install_sh: bool) -> Path:
    """The script in a tree of its own: it cds to its parent's parent and reads .gpu/ and manifest.yaml there."""
    (tmp_path / "bench").mkdir(parents=True)
    shutil.copy(ROOT / "bench/gpu_device.sh", tmp_path / "bench/gpu_device.sh")
    shutil.copy(ROOT / "manifest.yaml", tmp_path / "manifest.yaml")
    if install_sh:
        (tmp_path / ".gpu").mkdir()
        (tmp_path / ".gpu/install.sh").write_text("export PYTHONPATH=${PYTHONPATH:-}\n")
    return tmp_path


def _python3_without_sglang(tmp_path: Path) -> Path:
    """A python3 first on PATH that behaves like this one, except that sglang does not import (a bare machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "python3"
    shim.write_text(
        f'#!/usr/bin/env bash\ncase "$*" in *"import sglang"*) exit 1 ;; esac\nexec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return bin_dir


def _run(tree: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(tree / "out"), "HOME": str(tree)}
    return subprocess.run(
        ["bash", str(tree / "bench/gpu_device.sh"), *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_call_without_install_sh_stops_with_the_carry_to_add(tmp_path):
    tree = _device_copy(tmp_path / "t", install_sh=False)
    p = _run(tree, _python3_without_sglang(tmp_path), "run", "0:duet_profiling")
    assert p.returncode == 2, p.stdout + p.stderr
    assert ".gpu/install.sh is missing: carry it in every call" in p.stderr
    assert not (tree / "out").exists() or not any((tree / "out").iterdir())


def test_a_run_on_a_bare_machine_stops_before_any_step(tmp_path):
    tree = _device_copy(tmp_path / "t", install_sh=True)
    p = _run(tree, _python3_without_sglang(tmp_path), "run", "0:duet_profiling")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "sglang does not import here: a fresh machine? install the bundles again" in p.stderr
    assert "=== " not in p.stdout + p.stderr  # no step started
