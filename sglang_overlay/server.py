"""The server as a child process: its own process group, a log file, a /health wait, signal forwarding.

Kept apart from `commands/launch.py` (which decides *what* to run) so the process mechanics read on their own:

- the server starts in a new session (its own process group), so SGLang's scheduler and detokenizer children
  belong to that group and a terminal's Ctrl-C reaches only the launcher, which forwards it;
- SIGINT/SIGTERM received by the launcher go to the whole group; after `grace` seconds (or at a second signal)
  the group gets SIGKILL;
- the exit code is the server's (a server killed by signal N reads as 128+N, as a shell reports it).

The bench's launcher (bench/launcher.py) starts and stops the `launch` command with the same pieces: start_group,
stop_group and Announcements (the `sglang-overlay: url|fingerprint|log` lines launch prints once healthy).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any, TextIO

from .errors import ChildFailed

FORWARDED = (signal.SIGINT, signal.SIGTERM)
POLL_S = 0.25
# `launch` tells the program that started it where the server is: `sglang-overlay: url URL`, `... fingerprint HEX`,
# `... log PATH` on stdout, once healthy. Announcements (below) reads them back.
ANNOUNCE_PREFIX = "sglang-overlay: "


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            tail = deque(f.read().decode(errors="replace").splitlines(), maxlen=lines)
    except OSError:
        return ""
    return "\n".join(tail)


def _last_line(path: Path) -> str:
    for line in reversed(log_tail(path, 5).splitlines()):
        if line.strip():
            return line.strip()
    return ""


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


# -- a child in its own process group: the one way this package and the bench start and stop servers ---------
def start_group(
    argv: list[str],
    *,
    env: Mapping[str, str],
    stdout: int | IO[Any],
    cwd: str | Path | None = None,
    text: bool = False,
    die_with_parent: bool = False,
) -> subprocess.Popen[Any]:
    """Start `argv` in a new session: it and whatever it starts form one group that can be signalled at once.
    `die_with_parent`: on Linux the child gets SIGTERM when this process dies, even by SIGKILL (its own session
    keeps every other signal of ours from it), so that a launcher forwards the stop to its server."""
    return subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=text,
        bufsize=1 if text else -1,
        preexec_fn=_term_with_parent() if die_with_parent and sys.platform == "linux" else None,
    )


def _term_with_parent() -> Callable[[], None]:
    """The child's side of die_with_parent, resolved here: between fork and exec nothing may import or allocate
    much (the parent's other threads may hold locks), only call prctl(PR_SET_PDEATHSIG)."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def in_child() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)

    return in_child


def signal_group(proc: subprocess.Popen[Any], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the child leads its own session: its pid is the group id
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen[Any], grace: float, sig: int = signal.SIGTERM) -> int:
    """`sig` to the group, SIGKILL after `grace` seconds; the exit code (as a shell reports it)."""
    if proc.poll() is None:
        signal_group(proc, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()
    return exit_code(proc.returncode)


class Announcements:
    """Drains a child's text stdout for its whole life (a full pipe would block it) into a log file and a tail,
    and collects its `sglang-overlay: KEY VALUE` lines."""

    def __init__(self, proc: subprocess.Popen[str], log_path: Path, tail_lines: int = 60):
        assert proc.stdout is not None, "start the child with stdout=subprocess.PIPE, text=True"
        self.values: dict[str, str] = {}
        self.arrived: dict[str, float] = {}  # time.monotonic() when each key's line arrived
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self._stream = proc.stdout
        self._log = open(log_path, "a")  # noqa: SIM115 - closed by the reader thread; opened here: a log that cannot be written fails the start, not a thread
        self._changed = threading.Condition()
        self.ended = False
        self.log_error: OSError | None = None  # the first write the log refused (a full disk): later lines are not kept
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        log: TextIO | None = self._log
        try:
            for line in self._stream:
                if log is not None:
                    log = self._logged(log, line)
                with self._changed:
                    self.tail.append(line)
                    if line.startswith(ANNOUNCE_PREFIX):
                        key, _, value = line[len(ANNOUNCE_PREFIX) :].strip().partition(" ")
                        self.values.setdefault(key, value)
                        self.arrived.setdefault(key, time.monotonic())
                        self._changed.notify_all()
        finally:
            if log is not None:
                with contextlib.suppress(OSError):
                    log.close()
            with self._changed:
                self.ended = True
                self._changed.notify_all()

    def _logged(self, log: TextIO, line: str) -> TextIO | None:
        """Write one line to the log; on a refused write keep draining without it. A reader that died on a full
        disk stopped draining: the child blocked on its full pipe and its start hung until the wait's timeout."""
        try:
            log.write(line)
            log.flush()
            return log
        except OSError as e:
            self.log_error = e
            with contextlib.suppress(OSError):
                log.close()
            with self._changed:
                self.tail.append(
                    f"{ANNOUNCE_PREFIX.strip()} console log {self._log.name}: write failed ({e}); no more lines kept\n"
                )
            return None

    def wait_for(self, keys: Iterable[str], timeout: float) -> bool:
        """True once every key was announced; False when the output ends first or `timeout` seconds pass."""
        wanted = tuple(keys)
        with self._changed:
            return self._changed.wait_for(
                lambda: self.ended or all(k in self.values for k in wanted), timeout=timeout
            ) and all(k in self.values for k in wanted)

    def tail_text(self) -> str:
        with self._changed:
            return "".join(self.tail)

    def join(self, timeout: float) -> None:
        self._reader.join(timeout=timeout)


class ServerProcess:
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, *, grace: float = 30.0):
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.grace = grace
        self.proc: subprocess.Popen[bytes] | None = None
        self.stop_requested_at: float | None = None
        self.stop_signal: int | None = None
        self._killed = False
        self._old_handlers: dict[int, signal._HANDLER] = {}

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for sig in FORWARDED:  # installed first: a signal during start-up is forwarded too, never lost
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        with open(self.log_path, "ab", buffering=0) as log:
            self.proc = start_group(self.argv, env=self.env, stdout=log)

    def restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_requested_at is not None:  # a second signal: no more waiting
            print(
                f"sglang-overlay: second signal ({signal.Signals(signum).name}): killing the server's process group",
                file=sys.stderr,
                flush=True,
            )
            self._kill_group(signal.SIGKILL)
            return
        self.stop_requested_at = time.monotonic()
        self.stop_signal = signum
        print(
            f"sglang-overlay: forwarding {signal.Signals(signum).name} to the server's process group "
            f"(SIGKILL after {self.grace:g}s)",
            file=sys.stderr,
            flush=True,
        )
        self._kill_group(signum)

    def _kill_group(self, sig: int) -> None:
        if self.proc is None:
            return
        signal_group(self.proc, sig)
        if sig == signal.SIGKILL:
            self._killed = True

    def _escalate_if_due(self) -> None:
        if (
            self.stop_requested_at is not None
            and not self._killed
            and time.monotonic() - self.stop_requested_at > self.grace
        ):
            print(
                f"sglang-overlay: the server did not stop within {self.grace:g}s: SIGKILL", file=sys.stderr, flush=True
            )
            self._kill_group(signal.SIGKILL)

    def group_alive(self) -> bool:
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    # -- waiting ---------------------------------------------------------------------------------------------
    def wait_healthy(self, url: str, timeout: float) -> None:
        """Return once GET url/health answers 200. ChildFailed if the server dies first or the time runs out."""
        assert self.proc is not None
        t0 = time.monotonic()
        tty = sys.stderr.isatty()
        last_report = 0.0
        while True:
            rc = self.proc.poll()
            elapsed = time.monotonic() - t0
            if rc is not None:
                self._end_progress(tty)
                if self.stop_requested_at is not None:
                    raise Stopped(exit_code(rc))
                tail = log_tail(self.log_path)
                raise ChildFailed(
                    f"the server exited with code {exit_code(rc)} after {elapsed:.1f}s, before "
                    f"{url}/health answered; last lines of {self.log_path}:\n{tail}",
                    hint="the full log is at the path above",
                )
            if self.stop_requested_at is None and healthy(url):
                self._end_progress(tty)
                print(f"sglang-overlay: healthy after {elapsed:.1f}s", file=sys.stderr, flush=True)
                return
            if self.stop_requested_at is None and elapsed > timeout:
                self._end_progress(tty)
                self.stop_requested_at = time.monotonic()
                self._kill_group(signal.SIGTERM)
                self.wait()
                raise ChildFailed(
                    f"{url}/health did not answer within {timeout:g}s; the server was stopped. "
                    f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}",
                    hint="raise --health-timeout for a slow start (large models, first compile)",
                )
            self._escalate_if_due()
            if tty or elapsed - last_report >= 10:
                last_report = elapsed
                line = f"sglang-overlay: waiting for {url}/health ({elapsed:.0f}s) | {_last_line(self.log_path)}"
                if tty:
                    width = max(40, _term_width() - 1)
                    sys.stderr.write("\r" + line[:width].ljust(width))
                else:
                    sys.stderr.write(line + "\n")
                sys.stderr.flush()
            time.sleep(POLL_S)

    @staticmethod
    def _end_progress(tty: bool) -> None:
        if tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def wait(self) -> int:
        """Wait for the server to exit (forwarding signals meanwhile); return its exit code."""
        assert self.proc is not None
        while True:
            try:
                rc = self.proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                self._escalate_if_due()
        # The leader is gone; whatever it left in its group is an orphan of a finished server.
        if self.group_alive():
            self._kill_group(signal.SIGTERM)
            deadline = time.monotonic() + min(self.grace, 5.0)
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.group_alive():
                self._kill_group(signal.SIGKILL)
        return exit_code(rc)

    def ensure_stopped(self) -> None:
        """Last resort (the launcher itself failed): the server must not outlive it unnoticed."""
        if self.proc is not None:
            stop_group(self.proc, self.grace)


class Stopped(Exception):
    """A signal stopped the server before it was healthy: exit with its code, not as a failure to start."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _term_width() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except OSError:
        return 100
