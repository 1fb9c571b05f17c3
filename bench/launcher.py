"""Start and stop one server through the tool's CLI contract (`apply.py launch`), and nothing else.

Contract (apply.py): `python apply.py [--tree DIR] [--manifest PATH] launch (--set P | --patches a,b)
[--env-profile NAME] [--log FILE] [--health-timeout S] -- <sglang.launch_server args>` makes the tree carry
exactly that set, starts the server, waits for /health, prints `sglang-overlay: url URL`,
`sglang-overlay: fingerprint HEX`, `sglang-overlay: log PATH`, stays in the foreground and forwards
SIGINT/SIGTERM to the server's process group. `launch_command` is the one place that builds this command, so
tests substitute a stand-in (tests/bench/fake_apply.py) through `LaunchConfig.launcher`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .sets import PatchSet

PREFIX = "sglang-overlay: "


class LaunchError(RuntimeError):
    pass


@dataclass(frozen=True)
class LaunchConfig:
    launcher: tuple[str, ...] = (sys.executable, "apply.py")  # replaced in tests by a stand-in script
    tree: str | None = None
    manifest: str | None = None
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
    cmd += ["launch", *arm.pset.launch_flags()]
    if arm.env_profile:
        cmd += ["--env-profile", arm.env_profile]
    if log_path is not None:
        cmd += ["--log", str(log_path)]
    cmd += ["--health-timeout", str(int(cfg.health_timeout_s)), "--", *cfg.server_args]
    return cmd


@dataclass
class Server:
    proc: subprocess.Popen
    cmd: list[str]
    url: str = ""
    fingerprint: str = ""
    log: str = ""
    startup_s: float = 0.0
    tail: deque = field(default_factory=lambda: deque(maxlen=60))
    _reader: threading.Thread | None = None

    def tail_text(self) -> str:
        return "".join(self.tail)


def start(cfg: LaunchConfig, arm: ArmSpec, env: dict[str, str], console_log: Path) -> Server:
    """Launch and block until the url and fingerprint lines arrive; LaunchError (with the output tail) if not."""
    console_log.parent.mkdir(parents=True, exist_ok=True)
    cmd = launch_command(cfg, arm, console_log.with_suffix(".server.log"))
    t0 = time.monotonic()
    # New session: the launcher and everything it starts form one group we can signal as a last resort.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cfg.cwd,
        start_new_session=True,
        text=True,
        bufsize=1,
    )
    srv = Server(proc=proc, cmd=cmd)
    ready = threading.Event()
    fh = console_log.open("a")

    def pump() -> None:
        # Drain stdout for the whole life of the process: a full pipe would block the server.
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            fh.flush()
            srv.tail.append(line)
            if line.startswith(PREFIX):
                key, _, val = line[len(PREFIX) :].strip().partition(" ")
                if key == "url":
                    srv.url = val.rstrip("/")
                elif key == "fingerprint":
                    srv.fingerprint = val
                elif key == "log":
                    srv.log = val
                if srv.url and srv.fingerprint:
                    ready.set()
        fh.close()
        ready.set()

    srv._reader = threading.Thread(target=pump, daemon=True)
    srv._reader.start()
    deadline = t0 + cfg.start_timeout_s
    while not ready.wait(timeout=1.0):
        if time.monotonic() > deadline:
            stop(srv, cfg)
            raise LaunchError(
                f"no url/fingerprint line within {cfg.start_timeout_s:.0f}s from: {' '.join(cmd)}\n"
                f"--- last output ---\n{srv.tail_text()}"
            )
    if not (srv.url and srv.fingerprint):
        rc = proc.wait(timeout=30)
        raise LaunchError(
            f"launcher exited with {rc} before printing url and fingerprint: {' '.join(cmd)}\n"
            f"--- last output ---\n{srv.tail_text()}"
        )
    srv.startup_s = time.monotonic() - t0
    return srv


def stop(srv: Server, cfg: LaunchConfig) -> int | None:
    """SIGTERM the launcher (it forwards to the server group and waits for it); SIGKILL the group if stuck."""
    p = srv.proc
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=cfg.stop_timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=30)
    if srv._reader is not None:
        srv._reader.join(timeout=10)
    return p.returncode
