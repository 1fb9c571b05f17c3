"""Start and stop one server through the tool's CLI contract (`apply.py launch`), and nothing else.

Contract (apply.py): `python apply.py [--tree DIR] [--manifest PATH] launch (--set P | --patches a,b)
[--env-profile NAME] [--log FILE] [--health-timeout S] -- <sglang.launch_server args>` makes the tree carry
exactly that set, starts the server, waits for /health, prints `sglang-overlay: url URL`,
`sglang-overlay: fingerprint HEX`, `sglang-overlay: log PATH`, stays in the foreground and forwards
SIGINT/SIGTERM to the server's process group. `launch_command` is the one place that builds this command, so
tests substitute a stand-in (tests/bench/fake_apply.py) through `LaunchConfig.launcher`. An arm's set is
read in the package's one patch-set grammar (PRESET, a,b, PRESET-x, PRESET+x,y, none) through Catalog.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sglang_overlay.errors import OverlayError, PatchSetError
from sglang_overlay.manifest import Manifest, UpstreamedPatch, load_manifest
from sglang_overlay.patchset import PatchSet
from sglang_overlay.patchset import resolve as _resolve
from sglang_overlay.server import Announcements, start_group, stop_group

from .errors import SetError

__all__ = ["ArmSpec", "Catalog", "LaunchConfig", "PatchSet", "SetError", "launch_command", "resolve"]

# The installed tool, whatever the current directory (not an apply.py beside it).
DEFAULT_LAUNCHER = (sys.executable, "-m", "sglang_overlay")


class LaunchError(RuntimeError):
    pass


@dataclass(frozen=True)
class LaunchConfig:
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER  # replaced in tests by a stand-in script
    tree: str | None = None
    manifest: str | None = None
    pin: str | None = None
    server_args: tuple[str, ...] = ()
    health_timeout_s: float = 900.0
    start_timeout_s: float = 960.0  # our own bound on seeing the url line, a little above health_timeout
    stop_timeout_s: float = 90.0
    cwd: str | None = None


@dataclass(frozen=True)
class ArmSpec:
    name: str
    pset: PatchSet
    env_profile: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # extra environment for this arm's server
    # A measurement block: the same server as the arm without it, but its own starts (bisect's confirmations
    # measure good and bad afresh, interleaved with the sets they confirm). Never passed to the server.
    block: str = ""

    @property
    def key(self) -> str:
        """What makes two arms the same measurement (names differ between runs; sets, profile, env don't)."""
        env = ";".join(f"{k}={v}" for k, v in sorted(self.env))
        key = f"patches={','.join(self.pset.patches)}|profile={self.env_profile or ''}|env={env}"
        return key + (f"|block={self.block}" if self.block else "")


def launch_command(cfg: LaunchConfig, arm: ArmSpec, log_path: Path | None) -> list[str]:
    cmd = list(cfg.launcher)
    if cfg.tree:
        cmd += ["--tree", cfg.tree]
    if cfg.manifest:
        cmd += ["--manifest", cfg.manifest]
    if cfg.pin:
        cmd += ["--pin", cfg.pin]
    cmd += ["launch", *arm.pset.launch_flags()]
    if arm.env_profile:
        cmd += ["--env-profile", arm.env_profile]
    if log_path is not None:
        cmd += ["--log", str(log_path)]
    cmd += ["--health-timeout", str(int(cfg.health_timeout_s)), "--", *cfg.server_args]
    return cmd


@dataclass
class Server:
    proc: subprocess.Popen[str]
    cmd: list[str]
    output: Announcements
    launched: float = 0.0  # time.monotonic() at the spawn
    startup_s: float = 0.0

    @property
    def url(self) -> str:
        return self.output.values.get("url", "").rstrip("/")

    @property
    def fingerprint(self) -> str:
        return self.output.values.get("fingerprint", "")

    @property
    def log(self) -> str:
        return self.output.values.get("log", "")

    def tail_text(self) -> str:
        return self.output.tail_text()


def start(cfg: LaunchConfig, arm: ArmSpec, env: dict[str, str], console_log: Path) -> Server:
    """Launch and block until the url and fingerprint lines arrive; LaunchError (with the output tail) if not."""
    return wait_ready(spawn(cfg, arm, env, console_log), cfg)


def spawn(cfg: LaunchConfig, arm: ArmSpec, env: dict[str, str], console_log: Path) -> Server:
    """Launch without waiting for it; wait_ready waits for it."""
    console_log.parent.mkdir(parents=True, exist_ok=True)
    cmd = launch_command(cfg, arm, console_log.with_suffix(".server.log"))
    t0 = time.monotonic()
    # The package's own process handling: a new session (the launcher and what it starts form one group, to
    # signal as a last resort), its output drained into the console log, its announcements collected.
    # A launcher outliving a killed bench (a device call's time limit sends SIGKILL) would hold the GPU and the
    # port the resumed run starts on: it gets SIGTERM then, and stops its server as on any stop.
    proc = start_group(cmd, env=env, stdout=subprocess.PIPE, cwd=cfg.cwd, text=True, die_with_parent=True)
    try:
        output = Announcements(proc, console_log)
    except OSError:
        stop_group(proc, cfg.stop_timeout_s)
        raise
    srv = Server(proc=proc, cmd=cmd, output=output, launched=t0)
    return srv


def wait_ready(srv: Server, cfg: LaunchConfig) -> Server:
    """Block until a spawned server's url and fingerprint lines arrive; LaunchError (with the output tail) if not.
    Its start-up seconds count from its spawn, however long the caller took to come here."""
    cmd, proc = srv.cmd, srv.proc
    left = max(1.0, cfg.start_timeout_s - (time.monotonic() - srv.launched))
    try:
        announced = srv.output.wait_for(("url", "fingerprint"), left)
    except BaseException:
        # Ctrl-C while it starts (the longest wait of a run): the caller has no Server to stop yet, and the
        # launcher's own session keeps the terminal's SIGINT from it
        stop(srv, cfg)
        raise
    if not announced:
        if not srv.output.ended:
            stop(srv, cfg)
            raise LaunchError(
                f"no url/fingerprint line within {cfg.start_timeout_s:.0f}s from: {' '.join(cmd)}\n"
                f"--- last output ---\n{srv.tail_text()}"
            )
        rc = proc.wait(timeout=30)
        raise LaunchError(
            f"launcher exited with {rc} before printing url and fingerprint: {' '.join(cmd)}\n"
            f"--- last output ---\n{srv.tail_text()}"
        )
    # when its url line arrived, not when this wait returned: a block waits for its servers one after another
    srv.startup_s = srv.output.arrived.get("url", time.monotonic()) - srv.launched
    return srv


def stop(srv: Server, cfg: LaunchConfig) -> int | None:
    """SIGTERM the launcher's group (it forwards to the server's group and waits for it); SIGKILL if stuck."""
    stop_group(srv.proc, cfg.stop_timeout_s)
    srv.output.join(timeout=10)
    return srv.proc.returncode


# -- arms' sets ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalog:
    """The loaded manifest, with the facts the bench asks of it."""

    manifest: Manifest

    @classmethod
    def from_manifest(cls, path: str | Path) -> Catalog:
        try:
            return cls(load_manifest(path))
        except OverlayError as e:  # ManifestError and friends: one clear line, not a traceback
            raise SetError(f"{e}" + (f" ({e.hint})" if e.hint else "")) from e

    @property
    def names(self) -> tuple[str, ...]:
        return self.manifest.names

    @property
    def presets(self):
        return self.manifest.presets

    def closure(self, names) -> tuple[str, ...]:
        """`names` plus what they require, in manifest order (conflicts refused)."""
        return resolve(self, ",".join(names) or "none").patches

    def dependents(self, name: str) -> set[str]:
        """The patches that require `name`, directly or through others (they cannot stay when it leaves)."""
        req = {p.name: set(p.requires) for p in self.manifest.patches}
        out: set[str] = set()
        todo = [name]
        while todo:
            x = todo.pop()
            for n, r in req.items():
                if x in r and n not in out:
                    out.add(n)
                    todo.append(n)
        return out

    def changing(self, names) -> tuple[str, ...]:
        """The members that change code (upstreamed entries apply nothing: measuring them wastes GPU time)."""
        return tuple(n for n in names if not isinstance(self.manifest.patch(n), UpstreamedPatch))


def resolve(catalog: Catalog, expr: str) -> PatchSet:
    try:
        return _resolve(catalog.manifest, expr, flag="set")
    except PatchSetError as e:
        raise SetError(f"{e}" + (f" ({e.hint})" if e.hint else "")) from e
