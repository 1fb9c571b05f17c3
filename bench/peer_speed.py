"""This tool against its peers on the pinned SGLang tree, side by side in one run, paired and interleaved.

Per patch set (the real one, and synthetic sets of N one-hunk patches on disjoint or shared files):
  cycle   ours `apply --all` + `revert --all`  |  quilt `push -a` + `pop -a`  |  StGit `stg push -a` + `stg pop -a`
          |  plain `git apply` of the whole stack once each way
  status  ours `status`  |  `quilt applied`
  check   ours `check` (no peer has one: its growth with N is the figure); `check-cold` the same with the
          compile verdicts of earlier runs removed before each run (what a fresh CI machine pays)
Each repetition runs every tool once, in an order rotated per repetition, so drift in the machine's speed hits all
of them alike; a ratio is taken per repetition (ours / peer) and its median printed. Every run is a fresh process
(interpreter start-up included, bytecode cached as an installed package has it: a warm-up run writes it).
Peak memory is each child's ru_maxrss (os.wait4), the largest over the runs; CPU time is the child's user + system
time (its own git children included), which a busy machine changes less than the wall time.

The peers get the same change as ours: the real set is exported as a stack of git diffs by applying our patches
one by one in a scratch clone (overlay files included, the identity file left out), so quilt and StGit push
exactly the bytes `apply --all` writes.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .engine_speed import EngineSpeedError

REPO = Path(__file__).resolve().parent.parent
IDENTITY = "python/sglang/_overlay_build.py"
ENV = {"LC_ALL": "C", "QUILT_PATCHES": "patches", "QUILTRC": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
GIT_ID = ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]


@dataclass
class Timing:
    runs_s: list[float] = field(default_factory=list)
    peak_kib: int = 0
    cpu_s: list[float] = field(default_factory=list)  # user + system of the child and what it waited for

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "QUILT"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(ENV)
    env["HOME"] = env.get("BENCH_PEER_HOME", env.get("HOME", "/root"))
    return env


def run_timed(cmd: list[str], cwd: Path, ok=(0,)) -> tuple[float, int, float]:
    """(wall seconds, peak RSS KiB, CPU seconds) of one child process; a failing command is an error, not a
    figure. The CPU time is the figure that other load on a shared machine disturbs least."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)  # reaped here, not by Popen: its rusage is this child's alone
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode not in ok:
            out.seek(0)
            raise EngineSpeedError(f"`{' '.join(cmd)}` in {cwd} exited {p.returncode}:\n{out.read()[-3000:]!r}")
    return dt, ru.ru_maxrss, ru.ru_utime + ru.ru_stime


def sh(cmd: list[str], cwd: Path, **kw) -> str:
    p = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, check=False, **kw)
    if p.returncode != 0:
        raise EngineSpeedError(f"`{' '.join(cmd)}` in {cwd} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


# ------------------------------------------------------------------------------------------------ patch sets
@dataclass
class PatchSet:
    label: str
    manifest: Path  # our project's manifest
    stack: list[tuple[str, str]]  # (name, git diff) in manifest order, each on top of the ones before
    n: int


def _pin_block(manifest: Path) -> str:
    text = manifest.read_text()
    start = text.index("\npin:") + 1
    end = text.index("\npatches:")
    return "schema: 1\n\n" + text[start:end].rstrip() + "\n"


def synthetic(work: Path, pristine: Path, n: int, shared: bool, pin_manifest: Path) -> PatchSet:
    """N patches of one inserted comment line each: on N distinct files, or five patches to a file (shared).

    The shared set's patches on one file are 60 lines apart, so they compose in any order (zero fuzz)."""
    label = f"synth-{n}-{'shared' if shared else 'disjoint'}"
    proj = work / label
    (proj / "patches").mkdir(parents=True)
    per_file = 5 if shared else 1
    need = -(-n // per_file)
    files = []
    for f in sorted((pristine / "python/sglang/srt").rglob("*.py")):
        if f.stat().st_size > 20_000 and len(f.read_bytes().splitlines()) > 60 * per_file + 40:
            files.append(f.relative_to(pristine).as_posix())
        if len(files) == need:
            break
    if len(files) < need:
        raise EngineSpeedError(f"the tree has only {len(files)} files large enough for {label}")
    scratch = work / f"{label}-gen"
    sh(["git", "clone", "-q", "--shared", str(pristine), str(scratch)], work)
    entries, stack = [], []
    for k in range(n):
        rel = files[k // per_file]
        at = 20 + 60 * (k % per_file)
        path = scratch / rel
        orig = path.read_bytes()
        lines = orig.splitlines(keepends=True)
        lines.insert(at, f"# sglang-overlay synthetic patch {k}\n".encode())
        path.write_bytes(b"".join(lines))
        diff = sh(["git", "diff", "--", rel], scratch)
        path.write_bytes(orig)
        name = f"syn{k:03d}"
        (proj / "patches" / f"{name}.patch").write_text(f"Description: synthetic patch {k}\n---\n{diff}")
        entries.append(
            f"  - name: {name}\n    description: synthetic {k}\n    kind: diff\n    category: experimental\n"
        )
        stack.append((name, diff))
    shutil.rmtree(scratch)
    (proj / "manifest.yaml").write_text(_pin_block(pin_manifest) + "\npatches:\n" + "".join(entries))
    return PatchSet(label, proj / "manifest.yaml", stack, n)


def real(work: Path, pristine: Path, tool: list[str], manifest: Path) -> PatchSet:
    """Our real set as a stack: apply one more patch at a time in a scratch clone, commit, diff each step."""
    scratch = work / "real-gen"
    sh(["git", "clone", "-q", "--shared", str(pristine), str(scratch)], work)
    st = json.loads(sh([*tool, "--manifest", str(manifest), "--tree", str(scratch), "status", "--json"], REPO))
    names = [r["name"] for r in st["patches"] if r["state"] == "not-applied"]
    stack, done = [], []
    for name in names:
        done.append(name)
        sh([*tool, "--manifest", str(manifest), "--tree", str(scratch), "apply", *done], REPO)
        sh(["git", "add", "-A", "--", ".", f":!{IDENTITY}", ":!.sglang-overlay"], scratch)
        diff = sh(["git", "diff", "--cached", "--binary"], scratch)
        sh(["git", *GIT_ID, "commit", "-q", "--allow-empty", "-m", name], scratch)
        stack.append((name, diff))
    shutil.rmtree(scratch)
    return PatchSet("real", manifest, stack, len(names))


# ------------------------------------------------------------------------------------------------ the tools
def prepare(work: Path, pristine: Path, ps: PatchSet) -> dict[str, Path]:
    """One fresh clone per tool, each holding the set in that tool's own form, nothing applied."""
    trees = {}
    for tool in ("ours", "quilt", "stgit", "git"):
        t = work / f"{ps.label}-{tool}"
        sh(["git", "clone", "-q", str(pristine), str(t)], work)
        trees[tool] = t
    q = trees["quilt"] / "patches"
    q.mkdir()
    for name, diff in ps.stack:
        (q / f"{name}.patch").write_text(diff)
    (q / "series").write_text("".join(f"{name}.patch\n" for name, _ in ps.stack))
    (trees["git"] / ".git" / "stack.patch").write_text("".join(d for _, d in ps.stack))
    s = trees["stgit"]
    sh(["git", "checkout", "-q", "-b", "bench"], s)
    sh(["git", *GIT_ID, "config", "user.name", "bench"], s)
    sh(["git", "config", "user.email", "bench@localhost"], s)
    sh(["stg", "init"], s)
    for name, diff in ps.stack:
        pf = work / f"{ps.label}-{name}.stg.patch"
        pf.write_text(f"{name}\n\n{diff}")
        sh(["stg", "import", "--name", name, str(pf)], s)
        pf.unlink()
    sh(["stg", "pop", "-a"], s)
    return trees


def commands(ps: PatchSet, trees: dict[str, Path], tools: dict[str, list[str]]) -> dict[str, dict[str, list]]:
    """op -> contender -> [(argv, cwd, exit codes accepted), ...] (run in sequence: one timed figure)."""
    ops: dict[str, dict[str, list]] = {"cycle": {}, "status": {}, "check": {}, "check-cold": {}}
    for who, tool in tools.items():
        base = [*tool, "--manifest", str(ps.manifest), "--tree", str(trees["ours"])]
        ops["cycle"][who] = [([*base, "apply", "--all"], REPO, (0,)), ([*base, "revert", "--all"], REPO, (0,))]
        ops["status"][who] = [([*base, "status"], REPO, (0,))]
        ops["check"][who] = [([*tool, "--manifest", str(ps.manifest), "check"], REPO, (0,))]
        ops["check-cold"][who] = ops["check"][who]
    ops["cycle"]["quilt"] = [
        (["quilt", "push", "-aq"], trees["quilt"], (0,)),
        (["quilt", "pop", "-aq"], trees["quilt"], (0,)),
    ]
    ops["cycle"]["stgit"] = [
        (["stg", "push", "-a"], trees["stgit"], (0,)),
        (["stg", "pop", "-a"], trees["stgit"], (0,)),
    ]
    gp = str(trees["git"] / ".git" / "stack.patch")
    ops["cycle"]["git-apply"] = [
        (["git", "apply", "--whitespace=nowarn", gp], trees["git"], (0,)),
        (["git", "apply", "-R", "--whitespace=nowarn", gp], trees["git"], (0,)),
    ]
    ops["status"]["quilt"] = [(["quilt", "applied"], trees["quilt"], (0, 1))]  # 1: "No patches applied"
    return ops


def measure(
    contenders: dict[str, list], runs: int, warmup: int = 1, before: Callable[[], None] | None = None
) -> dict[str, Timing]:
    """`before` (untimed) runs ahead of each contender's every run."""
    out = {who: Timing() for who in contenders}
    names = list(contenders)
    for rep in range(-warmup, runs):
        k = rep % len(names)
        for who in names[k:] + names[:k]:  # rotated: none always runs first, after a tool that warmed the cache
            if before is not None:
                before()
            total, peak, cpu = 0.0, 0, 0.0
            for argv, cwd, ok in contenders[who]:
                dt, rss, used = run_timed(argv, cwd, ok)
                total, peak, cpu = total + dt, max(peak, rss), cpu + used
            if rep >= 0:
                out[who].runs_s.append(total)
                out[who].cpu_s.append(cpu)
                out[who].peak_kib = max(out[who].peak_kib, peak)
    return out


def forget_compile_verdicts() -> None:
    """What `check-cold` removes before each run: the verdicts `check` keeps between runs (compilecache)."""
    from sglang_overlay.compilecache import verdict_file

    shutil.rmtree(verdict_file().parent, ignore_errors=True)


def ratios(res: dict[str, Timing], ours: str, what: str = "runs_s") -> dict[str, float]:
    """Median of the per-repetition ratios ours/peer (paired: the same repetition, back to back), of the wall
    times or (`what="cpu_s"`) of the CPU times."""
    a = getattr(res[ours], what)
    return {
        who: statistics.median(x / y for x, y in zip(a, getattr(t, what)) if y > 0)
        for who, t in res.items()
        if who != ours
    }


def radar_peak(tool: list[str], manifest: Path, versions: list[str], runs: int) -> Timing:
    t = Timing()
    for _ in range(runs + 1):
        dt, rss, cpu = run_timed([*tool, "--manifest", str(manifest), "check", "--against", *versions], REPO)
        t.runs_s.append(dt)
        t.cpu_s.append(cpu)
        t.peak_kib = max(t.peak_kib, rss)
    t.runs_s, t.cpu_s = t.runs_s[1:], t.cpu_s[1:]
    return t


# ------------------------------------------------------------------------------------------------ CLI
def add_cli(sub) -> None:
    p = sub.add_parser("peers", help="our apply/revert/status/check vs quilt, StGit and git apply, interleaved")
    p.add_argument("--pristine", type=Path, default=None, help="a pristine checkout of the pin (default: embedded)")
    p.add_argument("--tool", default="apply.py", help="our entry point (path to apply.py)")
    p.add_argument("--tool-before", default=None, help="a second apply.py (e.g. main's) timed in the same loop")
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--sets", default="real", help="comma list: real, 10, 30, 100 (disjoint), 10s, 30s, 100s (shared)")
    p.add_argument("--ops", default="cycle,status,check", help="comma list: cycle, status, check, check-cold")
    p.add_argument("--check-runs", type=int, default=3, help="repetitions of `check` (slow on big sets)")
    p.add_argument("--peers", default="quilt,stgit,git-apply", help="which peers (quilt's cycle at 100 takes ~10 s)")
    p.add_argument("--radar", default=None, help="comma list of releases: peak memory of `check --against` them")
    p.add_argument("--out", type=Path, default=None)
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    for exe in ("quilt", "stg", "git"):
        if shutil.which(exe) is None:
            print(f"bench peers: {exe} is not installed (apt-get install -y quilt stgit)", file=sys.stderr)
            return 2
    manifest = REPO / "manifest.yaml"
    pin = manifest.read_text().split("version:", 1)[1].split()[0]
    pristine = a.pristine or REPO / ".sglang" / f"sglang-{pin}"
    tools = {"ours": [sys.executable, str(Path(a.tool).resolve())]}
    if a.tool_before:
        tools["before"] = [sys.executable, str(Path(a.tool_before).resolve())]
    work = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    payload: dict = {"python": sys.version, "tools": {k: v[1] for k, v in tools.items()}, "sets": {}}
    payload["loadavg_start"] = os.getloadavg()
    try:
        for spec in [s for s in a.sets.split(",") if s]:
            if spec == "real":
                ps = real(work, pristine, tools["ours"], manifest)
            else:
                ps = synthetic(work, pristine, int(spec.rstrip("s")), spec.endswith("s"), manifest)
            trees = prepare(work, pristine, ps)
            ops = commands(ps, trees, tools)
            keep = set(tools) | set(a.peers.split(","))
            ops = {op: {who: c for who, c in cs.items() if who in keep} for op, cs in ops.items()}
            rec: dict[str, object] = {"patches": ps.n}
            payload["sets"][ps.label] = rec
            for op in [o for o in a.ops.split(",") if o]:
                cold = forget_compile_verdicts if op == "check-cold" else None
                res = measure(ops[op], a.check_runs if op.startswith("check") else a.runs, before=cold)
                rat, cpu_rat = ratios(res, "ours"), ratios(res, "ours", "cpu_s")
                rec[op] = {
                    who: {
                        "median_s": t.median_s,
                        "runs_s": t.runs_s,
                        "cpu_median_s": statistics.median(t.cpu_s),
                        "cpu_s": t.cpu_s,
                        "peak_mib": round(t.peak_kib / 1024, 1),
                    }
                    for who, t in res.items()
                } | {"ratio_ours_over": rat, "cpu_ratio_ours_over": cpu_rat, "loadavg": os.getloadavg()}
                row = "  ".join(f"{who} {t.median_s * 1e3:8.1f} ms" for who, t in res.items())
                print(f"{ps.label:20s} {op:6s} {row}", flush=True)
                if rat:
                    print(
                        f"{'':20s} {'':6s} ours/peer (median of paired ratios): "
                        + "  ".join(f"{w} {r:.2f}" for w, r in rat.items()),
                        flush=True,
                    )
                    print(
                        f"{'':20s} {'':6s} cpu ours/peer (paired): "
                        + "  ".join(f"{w} {r:.2f}" for w, r in cpu_rat.items())
                        + "   cpu medians: "
                        + "  ".join(f"{w} {statistics.median(t.cpu_s) * 1e3:.1f} ms" for w, t in res.items()),
                        flush=True,
                    )
        if a.radar:
            versions = a.radar.split(",")
            for who, tool in tools.items():
                t = radar_peak(tool, manifest, versions, 1)
                payload.setdefault("radar", {})[who] = {
                    "versions": versions,
                    "median_s": t.median_s,
                    "peak_mib": round(t.peak_kib / 1024, 1),
                }
                print(f"radar {who} against {','.join(versions)}: {t.median_s:.2f} s, peak {t.peak_kib / 1024:.1f} MiB")
    except EngineSpeedError as e:
        print(f"bench peers: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload["loadavg_end"] = os.getloadavg()
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 0
