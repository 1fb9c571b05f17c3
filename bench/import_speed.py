"""How long a server process's imports take from source and from the bench's bytecode cache (CPU, no GPU).

    python -m bench.import_speed --tree .sglang/sglang-0.5.17/python --runs 5 [--standin tests/sglang_patches]

Each run is a fresh interpreter importing `--module` (default: SGLang's scheduler module, what the scheduler process
imports before its first log line), in turn: `source` with PYTHONDONTWRITEBYTECODE=1 and an empty bytecode prefix
(every module compiled, as on a machine whose packages were installed with --no-compile and whose environment
forbids writing bytecode), then `cached` under bench.runner.bytecode_env with a cache the warm-up filled. Prints
each arm's median and range and the paired ratio. `--standin DIR` puts the torchvision import stand-in of the
CPU tests (DIR/_torchvision_standin.py) in front: PyPI's torchvision cannot load against a CPU torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .runner import bytecode_env


def _once(module: str, env: dict[str, str], standin: str | None) -> float:
    pre = (
        f"import sys; sys.path.insert(0, {standin!r}); from _torchvision_standin import install; install(); "
        if standin
        else ""
    )
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", f"{pre}import {module}"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"import_speed: `import {module}` failed:\n{p.stderr[-2000:]}")
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.import_speed")
    ap.add_argument("--tree", required=True, help="the directory holding the `sglang` package")
    ap.add_argument("--module", default="sglang.srt.managers.scheduler")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--standin", default=None)
    a = ap.parse_args(argv)
    base = {**os.environ, "PYTHONPATH": str(Path(a.tree).resolve())}
    standin = str(Path(a.standin).resolve()) if a.standin else None
    with tempfile.TemporaryDirectory() as tmp:
        source = {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(Path(tmp) / "none")}
        base.pop("PYTHONPYCACHEPREFIX", None)
        cached = bytecode_env({**base, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pyc")})
        _once(a.module, cached, standin)  # the warm-up: fills the cache (the throwaway start's job in a run)
        src, hit = [], []
        for _ in range(a.runs):
            src.append(_once(a.module, source, standin))
            hit.append(_once(a.module, cached, standin))
    ratios = [s / c for s, c in zip(src, hit)]
    print(f"import {a.module} from {a.tree}, {a.runs} runs each, alternating (python {sys.version.split()[0]})")
    for name, xs in (("source (no bytecode)", src), ("cached (bench bytecode_env)", hit)):
        print(f"  {name:28s} median {statistics.median(xs):6.2f} s  (min {min(xs):.2f}, max {max(xs):.2f})")
    print(
        f"  ratio source/cached per pair: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
