"""Time `apply.py rebase VERSION` of the real patch set up to its first stop, with the releases cached (the
target <= 10 s), side by side with what git alone does in the same time: `git apply --3way` of each patch in
manifest order on a git repo of the release, up to the first that fails.

Each round copies the project (manifest.yaml, patches/, overlay/) into a scratch directory that keeps the
release's embedded tree from an untimed first run (as a user's project keeps .sglang/), runs `rebase VERSION`
as a user would (a fresh process: start-up and imports are in the figure), then `rebase --abort`, also timed.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _copy_project(dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "manifest.yaml", dst / "manifest.yaml")
    for d in ("patches", "overlay"):
        shutil.rmtree(dst / d, ignore_errors=True)
        shutil.copytree(ROOT / d, dst / d)


def _run(cwd: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), *args], check=False, cwd=cwd, capture_output=True, text=True
    )
    return time.perf_counter() - t0, proc


def _git_peer(tree: Path, work: Path) -> tuple[float, str]:
    """git alone: a clone of the release tree, `git apply --3way` of each diff in manifest order, to the first
    failure (what an engineer without the tool types)."""
    sys.path.insert(0, str(ROOT))
    from sglang_overlay.manifest import UpstreamedPatch, load_manifest

    m = load_manifest(ROOT / "manifest.yaml")
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(tree), str(work)], check=True)
    t0 = time.perf_counter()
    for p in m.patches:
        if isinstance(p, UpstreamedPatch) or p.diff is None or not p.diff.body:
            continue
        res = subprocess.run(
            ["git", "apply", "--3way", str(p.diff.path)], check=False, cwd=work, capture_output=True, text=True
        )
        if res.returncode != 0:
            return time.perf_counter() - t0, p.name
    return time.perf_counter() - t0, "(none)"


def measure(version: str, rounds: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="bench-rebase-"))
    try:
        proj = scratch / "proj"
        _copy_project(proj)
        first_s, proc = _run(proj, "rebase", version)  # makes the release's tree (once per project)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"rebase {version} failed: {proc.stderr[-800:]}")
        _run(proj, "rebase", "--abort")
        stops, aborts, stopped_at = [], [], ""
        for _ in range(rounds):
            _copy_project(proj)
            s, proc = _run(proj, "rebase", version)
            if proc.returncode not in (0, 1):
                raise RuntimeError(f"rebase {version} failed: {proc.stderr[-800:]}")
            stops.append(s)
            stopped_at = next(
                (line.split(":")[0] for line in proc.stdout.splitlines() if ": conflict on" in line), "(none)"
            )
            a, _ = _run(proj, "rebase", "--abort")
            aborts.append(a)
        peer = [_git_peer(proj / ".sglang" / f"sglang-{version}", scratch / "peer") for _ in range(rounds)]
        return {
            "version": version,
            "rounds": rounds,
            "first_run_s": first_s,
            "to_first_stop_s": stops,
            "to_first_stop_median_s": statistics.median(stops),
            "stopped_at": stopped_at,
            "abort_s": aborts,
            "abort_median_s": statistics.median(aborts),
            "git_apply_3way_to_first_failure_s": [p[0] for p in peer],
            "git_apply_3way_median_s": statistics.median(p[0] for p in peer),
            "git_failed_at": peer[0][1],
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def add_cli(sub) -> None:
    p = sub.add_parser("rebase", help="time `apply.py rebase VERSION` of the real set up to its first stop (cached)")
    p.add_argument("version", nargs="?", default="0.5.23")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="JSON output file")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    res = measure(a.version, a.rounds)
    print(f"first run (makes the release's tree): {res['first_run_s']:.2f} s")
    print(
        f"rebase {a.version} to the first stop ({res['stopped_at']}): median {res['to_first_stop_median_s']:.2f} s "
        f"over {a.rounds} runs (min {min(res['to_first_stop_s']):.2f}, max {max(res['to_first_stop_s']):.2f}); "
        f"target <= 10 s: {'met' if res['to_first_stop_median_s'] <= 10 else 'NOT MET'}"
    )
    print(f"rebase --abort: median {res['abort_median_s']:.2f} s")
    print(
        f"git alone (git apply --3way per patch, to the first failure, {res['git_failed_at']}): "
        f"median {res['git_apply_3way_median_s']:.2f} s (no symbol, no intent, no resumable state)"
    )
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["to_first_stop_median_s"] <= 10 else 1
