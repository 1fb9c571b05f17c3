"""The tool's own speed: against its peers (`peers`), its imports (`engine`), and `rebase` of the real set.

    python -m bench speed peers [--sets real,30,100] [--tool-before OTHER/apply.py] [--out speed.json]
    python -m bench speed engine      # fails if a command imports torch or sglang
    python -m bench speed rebase 0.5.23

`peers` times on the pinned tree, per patch set (the real one; N one-hunk patches on N files, or on N/5 with `Ns`):
  cycle    ours `apply --all` + `revert --all` | quilt `push -a` + `pop -a` | StGit `push -a` + `pop -a` | git apply
  status   ours `status` | `quilt applied` | `stg series`, each with the whole stack applied
  version  ours `--version` | `quilt --version` | `stg --version`
  check    ours `check` (no peer has one)
Each repetition runs every contender once, in an order rotated per repetition; a ratio is taken per repetition
(ours / peer, the same moment of a shared machine) and its median reported. Every run is a fresh process, with
bytecode cached as an installed package has it. CPU time is the child's user + system time, its own children
included. Peak memory is the contender's own: each run goes through GNU time, a small process that forks the
command. Measured directly, a child started by this (Python) process carries the bench's resident size into its
ru_maxrss (vfork shares the bench's memory until exec), and every contender showed the bench's 25 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IDENTITY = "python/sglang/_overlay_build.py"
GNU_TIME = "/usr/bin/time"
ENV = {"LC_ALL": "C", "QUILT_PATCHES": "patches", "QUILTRC": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
GIT_ID = ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]
OPS = ("cycle", "status", "version", "check")
PEERS = ("quilt", "stgit", "git-apply")
# issue 40's targets: ours/StGit per repetition (median) below 1.0 for the cycle, at most 1.0 for status
# against `stg series`; `--version` at most 35 ms of wall time (median)
TARGETS = {"cycle": ("stgit", 1.0, "<"), "status": ("stgit", 1.0, "<=")}
VERSION_MS = 35.0
FORBIDDEN = ("torch", "sglang")  # imports that cost seconds and need a GPU stack: no command may make them


class SpeedError(RuntimeError):
    """A contender failed or the setup cannot be made: the bench stops, with this message (exit 1)."""


@dataclass
class Timing:
    runs_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # user + system of the command and what it waited for
    peak_kib: int = 0  # the command's own largest resident size over the runs (0: not measured)

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "QUILT"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode: so does every run here
    env.update(ENV)
    return env


def run_timed(cmd: list[str], cwd: Path, ok=(0,), gnu_time: str | None = GNU_TIME) -> tuple[float, int, float]:
    """(wall s, peak RSS KiB, CPU s) of one run; a failing command is an error, not a figure. With `gnu_time`
    the peak is the command's own (GNU time forks it from its own small image; see the module's note)."""
    with tempfile.TemporaryDirectory(prefix="bench-speed-") as tmp:
        peak_file = Path(tmp) / "peak"
        argv = [gnu_time, "-q", "-f", "%M", "-o", str(peak_file), *cmd] if gnu_time else cmd
        with open(Path(tmp) / "out", "w+b") as out:
            t0 = time.perf_counter()
            p = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=out, stderr=subprocess.STDOUT)
            _, status, ru = os.wait4(p.pid, 0)  # reaped here, not by Popen: the rusage is this child's alone
            dt = time.perf_counter() - t0
            p.returncode = code = os.waitstatus_to_exitcode(status)
            if code not in ok:
                out.seek(0)
                raise SpeedError(
                    f"`{' '.join(cmd)}` in {cwd} exited {code}:\n{out.read()[-3000:].decode(errors='replace')}"
                )
        peak = int(peak_file.read_text().split()[-1]) if gnu_time else ru.ru_maxrss
    return dt, peak, ru.ru_utime + ru.ru_stime


def sh(cmd: list[str], cwd: Path) -> str:
    p = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SpeedError(f"`{' '.join(cmd)}` in {cwd} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


# ------------------------------------------------------------------------------------------------ patch sets
@dataclass(frozen=True)
class PatchSet:
    label: str
    manifest: Path  # our project's manifest
    stack: tuple[tuple[str, str], ...]  # (name, git diff) in manifest order, each on top of the ones before

    @property
    def n(self) -> int:
        return len(self.stack)


def _pin_block(manifest: Path) -> str:
    text = manifest.read_text()
    return "schema: 1\n\n" + text[text.index("\npin:") + 1 : text.index("\npatches:")].rstrip() + "\n"


def synthetic(work: Path, pristine: Path, n: int, shared: bool, pin_manifest: Path) -> PatchSet:
    """N patches of one inserted comment line each: on N distinct files, or five patches to a file (shared),
    60 lines apart so that they compose in any order."""
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
        raise SpeedError(f"the tree has only {len(files)} files large enough for {label}")
    entries, stack = [], []
    for k in range(n):
        rel = files[k // per_file]
        lines = (pristine / rel).read_text().splitlines(keepends=True)
        at = 20 + 60 * (k % per_file)
        # a unified diff of one inserted line, three lines of context either side
        ctx_a, ctx_b = lines[at - 3 : at], lines[at : at + 3]
        hunk = f"@@ -{at - 2},6 +{at - 2},7 @@\n" + "".join(
            [" " + s for s in ctx_a] + [f"+# sglang-overlay synthetic patch {k}\n"] + [" " + s for s in ctx_b]
        )
        diff = f"diff --git a/{rel} b/{rel}\n--- a/{rel}\n+++ b/{rel}\n{hunk}"
        name = f"syn{k:03d}"
        (proj / "patches" / f"{name}.patch").write_text(f"Description: synthetic patch {k}\n---\n{diff}")
        entries.append(
            f"  - name: {name}\n    description: synthetic {k}\n    kind: diff\n    category: experimental\n"
        )
        stack.append((name, diff))
    (proj / "manifest.yaml").write_text(_pin_block(pin_manifest) + "\npatches:\n" + "".join(entries))
    return PatchSet(label, proj / "manifest.yaml", tuple(stack))


def real(work: Path, pristine: Path, tool: list[str], manifest: Path) -> PatchSet:
    """Our real set as a stack: apply one more patch at a time in a scratch clone, commit, diff each step
    (overlay files included, the identity file left out), so the peers push exactly the bytes we write."""
    scratch = work / "real-gen"
    sh(["git", "clone", "-q", "--shared", str(pristine), str(scratch)], work)
    st = json.loads(sh([*tool, "--manifest", str(manifest), "--tree", str(scratch), "status", "--json"], REPO))
    names = [r["name"] for r in st["patches"] if r["state"] == "not-applied"]
    stack = []
    for k, name in enumerate(names):
        sh([*tool, "--manifest", str(manifest), "--tree", str(scratch), "apply", *names[: k + 1]], REPO)
        sh(["git", "add", "-A", "--", ".", f":!{IDENTITY}", ":!.sglang-overlay"], scratch)
        diff = sh(["git", "diff", "--cached", "--binary"], scratch)
        sh(["git", *GIT_ID, "commit", "-q", "--allow-empty", "-m", name], scratch)
        stack.append((name, diff))
    shutil.rmtree(scratch)
    return PatchSet("real", manifest, tuple(stack))


# ------------------------------------------------------------------------------------------------ contenders
def prepare(work: Path, pristine: Path, ps: PatchSet, peers: tuple[str, ...], ours: tuple[str, ...]) -> dict[str, Path]:
    """One fresh clone per tool (`ours`: each version of ours), each holding the set in that tool's own form,
    nothing applied."""
    trees = {}
    for tool in (*ours, *peers):
        trees[tool] = work / f"{ps.label}-{tool}"
        sh(["git", "clone", "-q", "--shared", str(pristine), str(trees[tool])], work)
    if "quilt" in trees:
        q = trees["quilt"] / "patches"
        q.mkdir()
        for name, diff in ps.stack:
            (q / f"{name}.patch").write_text(diff)
        (q / "series").write_text("".join(f"{name}.patch\n" for name, _ in ps.stack))
    if "git-apply" in trees:
        (trees["git-apply"] / ".git" / "stack.patch").write_text("".join(d for _, d in ps.stack))
    if "stgit" in trees:
        s = trees["stgit"]
        sh(["git", "checkout", "-q", "-b", "bench"], s)
        sh(["git", "config", "user.name", "bench"], s)
        sh(["git", "config", "user.email", "bench@localhost"], s)
        sh(["stg", "init"], s)
        for name, diff in ps.stack:
            pf = work / f"{ps.label}-{name}.stg.patch"
            pf.write_text(f"{name}\n\n{diff}")
            sh(["stg", "import", "--name", name, str(pf)], s)
            pf.unlink()
        sh(["stg", "pop", "-a"], s)
    return trees


Steps = list[tuple[list[str], Path, tuple[int, ...]]]  # run in sequence: one timed figure


def commands(ps: PatchSet, trees: dict[str, Path], tools: dict[str, list[str]]) -> dict[str, dict[str, Steps]]:
    """op -> contender -> steps. Each of our tools works on its own tree: on a shared one each version would
    find the saved copies the other one kept or pruned, not its own."""
    ops: dict[str, dict[str, Steps]] = {op: {} for op in OPS}
    for who, tool in tools.items():
        base = [*tool, "--manifest", str(ps.manifest), "--tree", str(trees[who])]
        ops["cycle"][who] = [([*base, "apply", "--all"], REPO, (0,)), ([*base, "revert", "--all"], REPO, (0,))]
        ops["status"][who] = [([*base, "status"], REPO, (0,))]
        ops["version"][who] = [([*tool, "--version"], REPO, (0,))]
        ops["check"][who] = [([*tool, "--manifest", str(ps.manifest), "check"], REPO, (0,))]
    if "quilt" in trees:
        q = trees["quilt"]
        ops["cycle"]["quilt"] = [(["quilt", "push", "-aq"], q, (0,)), (["quilt", "pop", "-aq"], q, (0,))]
        ops["status"]["quilt"] = [(["quilt", "applied"], q, (0,))]
        ops["version"]["quilt"] = [(["quilt", "--version"], q, (0,))]
    if "stgit" in trees:
        s = trees["stgit"]
        ops["cycle"]["stgit"] = [(["stg", "push", "-a"], s, (0,)), (["stg", "pop", "-a"], s, (0,))]
        ops["status"]["stgit"] = [(["stg", "series"], s, (0,))]
        ops["version"]["stgit"] = [(["stg", "--version"], s, (0,))]
    if "git-apply" in trees:
        g = trees["git-apply"]
        gp = str(g / ".git" / "stack.patch")
        ops["cycle"]["git-apply"] = [
            (["git", "apply", "--whitespace=nowarn", gp], g, (0,)),
            (["git", "apply", "-R", "--whitespace=nowarn", gp], g, (0,)),
        ]
    return ops


def stack_steps(ps: PatchSet, trees: dict[str, Path], tools: dict[str, list[str]], push: bool) -> Steps:
    """What puts the whole stack on (or takes it off) every tree, untimed: `status` is timed on a full stack."""
    op = "apply" if push else "revert"
    steps: Steps = [
        ([*tool, "--manifest", str(ps.manifest), "--tree", str(trees[who]), op, "--all"], REPO, (0,))
        for who, tool in tools.items()
    ]
    if "quilt" in trees:
        steps.append((["quilt", "push" if push else "pop", "-aq"], trees["quilt"], (0,)))
    if "stgit" in trees:
        steps.append((["stg", "push" if push else "pop", "-a"], trees["stgit"], (0,)))
    return steps


def measure(
    contenders: dict[str, Steps], runs: int, warmup: int = 1, gnu_time: str | None = GNU_TIME
) -> dict[str, Timing]:
    """Every contender once per repetition, the order rotated, so that no one always runs first."""
    out = {who: Timing() for who in contenders}
    names = list(contenders)
    for rep in range(-warmup, runs):
        k = rep % len(names)
        for who in names[k:] + names[:k]:
            total, peak, cpu = 0.0, 0, 0.0
            for argv, cwd, ok in contenders[who]:
                dt, rss, used = run_timed(argv, cwd, ok, gnu_time)
                total, peak, cpu = total + dt, max(peak, rss), cpu + used
            if rep >= 0:
                out[who].runs_s.append(total)
                out[who].cpu_s.append(cpu)
                out[who].peak_kib = max(out[who].peak_kib, peak)
    return out


def ratios(res: dict[str, Timing], ours: str = "ours", what: str = "runs_s") -> dict[str, float]:
    """Median of the per-repetition ratios ours/peer (paired: the same repetition, back to back), of the wall
    times or (`what="cpu_s"`) of the CPU times; a pair with nothing to divide by is left out."""
    a = getattr(res[ours], what)
    out = {}
    for who, t in res.items():
        pairs = [x / y for x, y in zip(a, getattr(t, what)) if y > 0]
        if who != ours and pairs:
            out[who] = statistics.median(pairs)
    return out


def verdicts(op: str, res: dict[str, Timing], rat: dict[str, float]) -> list[str]:
    """Issue 40's targets that this op's figures decide: 'met' or 'MISSED', each with its figure."""
    if op == "version" and "ours" in res:
        ms = res["ours"].median_s * 1e3
        return [f"--version {ms:.1f} ms <= {VERSION_MS:.0f} ms: {'met' if ms <= VERSION_MS else 'MISSED'}"]
    if op not in TARGETS or TARGETS[op][0] not in rat:
        return []
    peer, bound, rel = TARGETS[op]
    r = rat[peer]
    ok = r < bound if rel == "<" else r <= bound
    return [f"{op} ours/{peer} {r:.2f} {rel} {bound}: {'met' if ok else 'MISSED'}"]


def record(res: dict[str, Timing]) -> dict[str, object]:
    return {
        who: {
            "median_s": t.median_s,
            "runs_s": t.runs_s,
            "cpu_median_s": statistics.median(t.cpu_s),
            "cpu_s": t.cpu_s,
            "peak_mib": round(t.peak_kib / 1024, 1) if t.peak_kib else None,
        }
        for who, t in res.items()
    }


def peers(a: argparse.Namespace) -> int:
    need = {"git": "git", "quilt": "quilt", "stgit": "stg"}
    chosen = tuple(p for p in a.peers.split(",") if p)
    for p in chosen:
        if p not in PEERS:
            return _bad(f"--peers: {p!r} is not one of {', '.join(PEERS)}")
    ops = [o for o in a.ops.split(",") if o]
    for o in ops:
        if o not in OPS:
            return _bad(f"--ops: {o!r} is not one of {', '.join(OPS)}")
    exes = [GNU_TIME, "git", *(need[p] for p in chosen if p in need)]
    for exe in exes:
        if shutil.which(exe) is None:
            return _bad(f"{exe} is not installed (apt-get install -y time quilt stgit)")
    manifest = REPO / "manifest.yaml"
    pin = manifest.read_text().split("version:", 1)[1].split()[0]
    pristine = (a.pristine or REPO / ".sglang" / f"sglang-{pin}").resolve()
    if not (pristine / "python" / "sglang").is_dir():
        return _bad(f"{pristine} is no SGLang tree: run `python apply.py fetch`, or pass --pristine")
    tools = {"ours": [sys.executable, str(Path(a.tool).resolve())]}
    if a.tool_before:
        before = Path(a.tool_before).resolve()
        if not before.is_file():
            return _bad(f"--tool-before: {before} is not a file (the apply.py of another checkout)")
        tools["before"] = [sys.executable, str(before)]
    specs = [s for s in a.sets.split(",") if s]
    for s in specs:
        if s != "real" and not re.fullmatch(r"[1-9][0-9]*s?", s):
            return _bad(f"--sets: {s!r} is neither `real` nor a count of patches (30, or 30s for shared files)")
    # Python peers run on their own interpreter: ours on a slower build (pyenv's lacks PGO) or with an editable
    # install's import hook measured 1.5-2x slower (bench/results/2026-12-07-speed), so both are printed
    interp = {"ours": sys.executable, **{p: _interpreter(need[p]) for p in chosen if p in need}}
    print("interpreters: " + "  ".join(f"{k} {v}" for k, v in interp.items() if v), flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-speed-"))
    payload: dict = {"python": sys.version, "interpreters": interp, "tools": {k: v[1] for k, v in tools.items()}}
    payload["sets"] = {}
    payload["loadavg_start"] = os.getloadavg()
    try:
        for spec in specs:
            if spec == "real":
                ps = real(work, pristine, tools["ours"], manifest)
            else:
                ps = synthetic(work, pristine, int(spec.rstrip("s")), spec.endswith("s"), manifest)
            trees = prepare(work, pristine, ps, chosen, tuple(tools))
            table = commands(ps, trees, tools)
            rec: dict[str, object] = {"patches": ps.n}
            payload["sets"][ps.label] = rec
            for op in ops:
                if op == "status":
                    for argv, cwd, ok in stack_steps(ps, trees, tools, push=True):
                        run_timed(argv, cwd, ok, None)
                res = measure(table[op], a.check_runs if op == "check" else a.runs)
                if op == "status":
                    for argv, cwd, ok in stack_steps(ps, trees, tools, push=False):
                        run_timed(argv, cwd, ok, None)
                rat, cpu_rat = ratios(res), ratios(res, what="cpu_s")
                said = verdicts(op, res, rat)
                rec[op] = record(res) | {
                    "ratio_ours_over": rat,
                    "cpu_ratio_ours_over": cpu_rat,
                    "targets": said,
                    "loadavg": os.getloadavg(),
                }
                _print(ps.label, op, res, rat, cpu_rat, said)
        payload["loadavg_end"] = os.getloadavg()
        _write(a.out, payload)  # before the clean-up, which takes minutes on a busy disk
    except SpeedError as e:
        print(f"bench speed peers: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _interpreter(exe: str) -> str:
    """The interpreter of a peer that is a Python script (its #! line), or "" for a binary."""
    path = shutil.which(exe)
    try:
        with open(path or "", "rb") as f:
            head = f.readline(200)
    except OSError:
        return ""
    return head[2:].decode(errors="replace").strip() if head.startswith(b"#!") and b"python" in head else ""


def _print(label: str, op: str, res: dict[str, Timing], rat: dict, cpu_rat: dict, said: list[str]) -> None:
    print(f"{label:20s} {op:7s} " + "  ".join(f"{w} {t.median_s * 1e3:7.1f} ms" for w, t in res.items()), flush=True)
    pad = " " * 29
    print(pad + "cpu " + "  ".join(f"{w} {statistics.median(t.cpu_s) * 1e3:.1f} ms" for w, t in res.items()))
    print(pad + "peak " + "  ".join(f"{w} {t.peak_kib / 1024:.1f} MiB" for w, t in res.items()))
    if rat:
        print(pad + "ours/peer (median of paired ratios) " + "  ".join(f"{w} {r:.2f}" for w, r in rat.items()))
        print(pad + "cpu ours/peer " + "  ".join(f"{w} {r:.2f}" for w, r in cpu_rat.items()))
    for s in said:
        print(pad + "target: " + s, flush=True)


# ------------------------------------------------------------------------------------------------ engine
_IMPORT_RE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s*(\S+)\s*$")
ENGINE_OPS = {
    "apply-revert": (["apply", "--all"], ["revert", "--all"]),
    "status": (["status"],),
    "version": (["--version"],),
}


def parse_importtime(stderr: str) -> list[tuple[str, int, int]]:
    """`python -X importtime`'s lines as (module, self us, cumulative us)."""
    return [(m.group(3), int(m.group(1)), int(m.group(2))) for m in map(_IMPORT_RE.match, stderr.splitlines()) if m]


def forbidden(modules: list[str]) -> list[str]:
    return sorted({m for m in modules if m.split(".")[0] in FORBIDDEN})


def engine(a: argparse.Namespace) -> int:
    """Each op's runs (fresh processes) and one more under -X importtime: torch or sglang imported fails it."""
    glob = (["--manifest", a.manifest] if a.manifest else []) + (["--tree", a.tree] if a.tree else [])
    tool = [sys.executable, str(Path(a.tool).resolve())]
    ops = [o for o in a.ops.split(",") if o]
    for o in ops:
        if o not in ENGINE_OPS:
            return _bad(f"--ops: {o!r} is not one of {', '.join(ENGINE_OPS)}")
    try:
        if "apply-revert" in ops:  # `revert --all` would drop a set someone applied on purpose
            out = sh([*tool, *glob, "status"], REPO)
            m = re.search(r"applied (\d+) of \d+", out)
            if m and int(m.group(1)):
                return _bad(
                    f"the tree carries {m.group(1)} patch(es); apply --all + revert --all would leave it with "
                    "none: revert them first, or pass --tree a scratch copy"
                )
        ops_out: dict[str, dict[str, object]] = {}
        payload = {"tool": tool[1], "global_opts": glob, "python": sys.version, "ops": ops_out}
        bad = False
        for op in ops:
            steps: list[tuple[list[str], Path, tuple[int, ...]]] = [
                ([*tool, *glob, *s], REPO, (0,)) for s in ENGINE_OPS[op]
            ]
            t = measure({"ours": steps}, a.runs, gnu_time=None)["ours"]
            mods = []
            for argv, cwd, _ in steps:
                p = subprocess.run(
                    [argv[0], "-X", "importtime", *argv[1:]], cwd=cwd, env=_env(), capture_output=True, text=True
                )
                mods += parse_importtime(p.stderr)
            hit = forbidden([m for m, _, _ in mods])
            bad |= bool(hit)
            top = sorted(mods, key=lambda x: -x[2])[:8]
            ops_out[op] = {
                "runs_s": t.runs_s,
                "median_s": t.median_s,
                "forbidden_imports": hit,
                "top_imports_ms": [(m, c / 1e3) for m, _, c in top],
            }
            flag = f"  FORBIDDEN IMPORTS: {', '.join(hit)}" if hit else ""
            print(f"{op:13s} median {t.median_s * 1e3:7.1f} ms  min {min(t.runs_s) * 1e3:7.1f} ms{flag}")
    except SpeedError as e:
        print(f"bench speed engine: {e}", file=sys.stderr)
        return 1
    _write(a.out, payload)
    return 1 if bad else 0


# ------------------------------------------------------------------------------------------------ rebase
def rebase(a: argparse.Namespace) -> int:
    """`rebase VERSION` of the real set up to its first stop, with the release's tree already made (the
    target <= 10 s), then `rebase --abort`; each round in a fresh copy of the project."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)+", a.version):
        return _bad(f"{a.version!r} is not a release version (e.g. 0.5.23)")
    tool = [sys.executable, str(REPO / "apply.py")]
    scratch = Path(tempfile.mkdtemp(prefix="bench-speed-rebase-"))
    try:
        proj = scratch / "proj"
        stops, aborts = [], []
        for k in range(a.rounds + 1):  # round 0 makes the release's tree, untimed
            proj.mkdir(exist_ok=True)
            shutil.copy(REPO / "manifest.yaml", proj / "manifest.yaml")
            for d in ("patches", "overlay"):
                shutil.rmtree(proj / d, ignore_errors=True)
                shutil.copytree(REPO / d, proj / d)
            s, _, _ = run_timed([*tool, "rebase", a.version], proj, (0, 1), None)
            t, _, _ = run_timed([*tool, "rebase", "--abort"], proj, (0,), None)
            if k:
                stops.append(s)
                aborts.append(t)
    except SpeedError as e:
        print(f"bench speed rebase: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    med = statistics.median(stops)
    print(
        f"rebase {a.version} to its first stop: median {med:.2f} s over {a.rounds} (target <= 10 s: "
        f"{'met' if med <= 10 else 'MISSED'}); --abort median {statistics.median(aborts):.2f} s"
    )
    _write(a.out, {"version": a.version, "to_first_stop_s": stops, "abort_s": aborts, "median_s": med})
    return 0 if med <= 10 else 1


# ------------------------------------------------------------------------------------------------ CLI
def _bad(msg: str) -> int:
    print(f"bench speed: {msg}", file=sys.stderr)
    return 2


def _write(out: Path | None, payload: dict) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=1) + "\n")
        os.replace(tmp, out)
        print(f"wrote {out}")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench speed", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peers", help="cycle/status/--version/check against quilt, StGit and git apply")
    p.add_argument("--pristine", type=Path, default=None, help="a pristine checkout of the pin (default: embedded)")
    p.add_argument("--tool", default=str(REPO / "apply.py"), help="our entry point (an apply.py)")
    p.add_argument("--tool-before", default=None, help="a second apply.py (e.g. main's) timed in the same loop")
    p.add_argument("--runs", type=_positive, default=11)
    p.add_argument("--check-runs", type=_positive, default=3, help="repetitions of `check` (slow on big sets)")
    p.add_argument("--sets", default="real,30,100", help="comma list: real, N (disjoint files), Ns (shared)")
    p.add_argument("--ops", default="cycle,status,version", help=f"comma list of {', '.join(OPS)}")
    p.add_argument("--peers", default=",".join(PEERS), help="which peers")
    p.add_argument("--out", type=Path, default=None)
    p.set_defaults(func=peers)
    p = sub.add_parser("engine", help="time apply/revert/status/--version; fail if torch or sglang is imported")
    p.add_argument("--runs", type=_positive, default=10)
    p.add_argument("--ops", default="apply-revert,status,version", help=f"comma list of {', '.join(ENGINE_OPS)}")
    p.add_argument("--tool", default=str(REPO / "apply.py"))
    p.add_argument("--tree", default=None)
    p.add_argument("--manifest", default=None)
    p.add_argument("--out", type=Path, default=None)
    p.set_defaults(func=engine)
    p = sub.add_parser("rebase", help="time `rebase VERSION` of the real set up to its first stop")
    p.add_argument("version", nargs="?", default="0.5.23")
    p.add_argument("--rounds", type=_positive, default=5)
    p.add_argument("--out", type=Path, default=None)
    p.set_defaults(func=rebase)
    return ap


def main(argv: list[str]) -> int:
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse's usage errors: 2, its --help: 0
        return int(e.code or 0)
    return int(a.func(a))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
