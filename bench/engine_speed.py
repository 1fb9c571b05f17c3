"""Time the tool itself on the pinned SGLang tree, and prove its hot paths never import torch or sglang.

Each run spawns `python apply.py ...` exactly as a user would (so interpreter start-up and imports are part of
the figure): `apply --all` + `revert --all` (one round trip), `status`, optionally `check`. One extra run per
operation under `python -X importtime` lists every module imported; torch/sglang (or anything under them)
appearing there is a failure, because those imports cost seconds and need a GPU stack the tool must not need.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORBIDDEN = ("torch", "sglang")
# `python -X importtime` stderr: "import time:       123 |        456 | package.module"
_IMPORT_RE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s*(\S+)\s*$")

OPS = {
    "apply-revert": (["apply", "--all"], ["revert", "--all"]),
    "status": (["status"],),
    "check": (["check"],),
}


class EngineSpeedError(RuntimeError):
    pass


@dataclass
class OpResult:
    op: str
    runs_s: list[float] = field(default_factory=list)
    forbidden_imports: list[str] = field(default_factory=list)
    import_total_ms: float = 0.0
    top_imports: list[tuple[str, float]] = field(default_factory=list)  # (module, cumulative ms)

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)

    @property
    def min_s(self) -> float:
        return min(self.runs_s)


def parse_importtime(stderr: str) -> list[tuple[str, int, int]]:
    out = []
    for line in stderr.splitlines():
        m = _IMPORT_RE.match(line)
        if m:
            out.append((m.group(3), int(m.group(1)), int(m.group(2))))
    return out


def forbidden(modules: list[str], names=FORBIDDEN) -> list[str]:
    return sorted({m for m in modules if m.split(".")[0] in names})


def _run(cmd: list[str], cwd: str | None, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(extra_env or {}))
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise EngineSpeedError(
            f"`{' '.join(shlex.quote(c) for c in cmd)}` exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
    return p


def measure(
    tool: list[str],
    global_opts: list[str],
    ops: list[str],
    runs: int,
    cwd: str | None = None,
    python: str = sys.executable,
) -> list[OpResult]:
    """`tool` is the command prefix after the interpreter (e.g. ["apply.py"])."""
    results = []
    for op in ops:
        if op not in OPS:
            raise EngineSpeedError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        r = OpResult(op)
        steps = [[python, *tool, *global_opts, *s] for s in OPS[op]]
        for _ in range(runs):
            t0 = time.perf_counter()
            for cmd in steps:
                _run(cmd, cwd)
            r.runs_s.append(time.perf_counter() - t0)
        mods: list[tuple[str, int, int]] = []
        for cmd in steps:
            p = _run([python, "-X", "importtime", *cmd[1:]], cwd)
            mods.extend(parse_importtime(p.stderr))
        r.forbidden_imports = forbidden([m for m, _, _ in mods])
        # top-level entries (no leading spaces in the name column) carry the cumulative time of their subtree
        r.import_total_ms = sum(cum for m, _, cum in mods if "." not in m) / 1e3 / len(steps)
        r.top_imports = [(m, cum / 1e3) for m, _, cum in sorted(mods, key=lambda x: -x[2])[:8]]
        results.append(r)
    return results


def applied_count(
    tool: list[str], global_opts: list[str], cwd: str | None = None, python: str = sys.executable
) -> int | None:
    """How many patches the tree carries now (from `status`), None if the output is not understood."""
    out = _run([python, *tool, *global_opts, "status"], cwd).stdout
    m = re.search(r"applied (\d+) of \d+", out)
    return int(m.group(1)) if m else None


def interpreter_baseline(runs: int, python: str = sys.executable) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def add_cli(sub) -> None:
    p = sub.add_parser("engine", help="time apply.py apply/revert/status/check; check no torch/sglang import")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--ops", default="apply-revert,status", help=f"comma list of {', '.join(OPS)}")
    p.add_argument("--tool", default="apply.py", help="script (and args) after the interpreter")
    p.add_argument("--tree", default=None)
    p.add_argument("--manifest", default=None)
    p.add_argument("--out", type=Path, default=None, help="JSON output file")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    glob = (["--manifest", a.manifest] if a.manifest else []) + (["--tree", a.tree] if a.tree else [])
    base = interpreter_baseline(min(a.runs, 5))
    try:
        if "apply-revert" in a.ops:
            # `revert --all` would silently drop a set someone applied on purpose: refuse instead.
            n = applied_count(shlex.split(a.tool), glob)
            if n:
                raise EngineSpeedError(
                    f"the tree carries {n} patch(es); apply --all + revert --all would leave it "
                    f"with none. Revert them first or pass --tree to a scratch copy."
                )
        res = measure(shlex.split(a.tool), glob, [o for o in a.ops.split(",") if o], a.runs)
    except EngineSpeedError as e:
        print(f"bench engine: {e}", file=sys.stderr)
        return 1
    bad = False
    print(f"interpreter start-up (python -c pass): {base * 1e3:.0f} ms")
    for r in res:
        flag = f"  FORBIDDEN IMPORTS: {', '.join(r.forbidden_imports)}" if r.forbidden_imports else ""
        bad |= bool(r.forbidden_imports)
        print(
            f"{r.op:13s} median {r.median_s * 1e3:7.1f} ms  min {r.min_s * 1e3:7.1f} ms  over {len(r.runs_s)} runs;"
            f" imports {r.import_total_ms:.0f} ms{flag}"
        )
    payload = {
        "interpreter_s": base,
        "ops": [dict(asdict(r), median_s=r.median_s, min_s=r.min_s) for r in res],
        "tool": a.tool,
        "global_opts": glob,
        "python": sys.version,
    }
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 2 if bad else 0
