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


def test_resume_from_brings_back_nested_run_dirs_and_keeps_what_the_machine_has(tmp_path):
    """RESUME_FROM=record: every run dir with a store, a step's own (kimi_null) or one level below it
    (kimi_speed/eagle, kimi_speed/plain: the review found those left behind); one the warm machine already has
    is kept, and a dir without a store is not a run."""
    tree = _device_copy(tmp_path / "t", install_sh=True)
    (tree / "out").mkdir()
    rec, res = tmp_path / "record", tmp_path / "res"
    for d, text in [
        ("kimi_null", "old\n"),
        ("kimi_speed/eagle", "e\n"),
        ("kimi_speed/plain", "p\n"),
        ("train", ""),
    ]:
        (rec / d).mkdir(parents=True)
        (rec / d / "results.jsonl").write_text(text)
    (res / "kimi_null").mkdir(parents=True)
    (res / "kimi_null" / "results.jsonl").write_text("the machine's own\n")
    # what a call killed mid-copy left: the copy goes beside and is renamed, so a cut one is never kept
    (res / "kimi_speed/eagle.part").mkdir(parents=True)
    (res / "kimi_speed/eagle.part/results.jsonl").write_text('{"cut')
    env_extra = {"DRY": "1", "RES": str(res), "RESUME_FROM": str(rec)}
    env = {"PATH": f"{_python3_without_sglang(tmp_path)}:/usr/bin:/bin", "OUT": str(tree / "out"), "HOME": str(tree)}
    p = subprocess.run(
        ["bash", str(tree / "bench/gpu_device.sh"), "run"],
        cwd=tree,
        env={**env, **env_extra},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert (res / "kimi_speed/eagle/results.jsonl").read_text() == "e\n"
    assert (res / "kimi_speed/plain/results.jsonl").read_text() == "p\n"
    assert (res / "kimi_null/results.jsonl").read_text() == "the machine's own\n"
    assert not (res / "train").exists()
    assert not (res / "kimi_speed/eagle.part").exists()
    assert "resuming kimi_speed/eagle from" in p.stdout and "resuming kimi_null" not in p.stdout
