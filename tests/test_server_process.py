"""The process handling the launch command and the bench's launcher share (sglang_overlay/server.py): a child in
its own group, its announcements read back from a drained stdout, the group stopped with SIGKILL after grace."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

from sglang_overlay.server import Announcements, start_group, stop_group


def child(code: str) -> subprocess.Popen[str]:
    return start_group([sys.executable, "-c", code], env=os.environ, stdout=subprocess.PIPE, text=True)


def test_announcements_arrive_while_a_noisy_child_keeps_writing(tmp_path):
    # More than a pipe holds before and after the lines: an undrained pipe would block the child.
    proc = child(
        "import sys, time\n"
        "print('x' * 200000)\n"
        "print('sglang-overlay: url http://127.0.0.1:1/ ')\n"
        "print('sglang-overlay: fingerprint abc')\n"
        "sys.stdout.flush()\n"
        "print('y' * 200000, flush=True)\n"
        "print('sglang-overlay: log /x.log', flush=True)\n"
        "time.sleep(60)\n"
    )
    out = Announcements(proc, tmp_path / "console.log")
    try:
        assert out.wait_for(("url", "fingerprint"), timeout=300)
        assert (out.values["url"], out.values["fingerprint"]) == ("http://127.0.0.1:1/", "abc") and not out.ended
        assert out.wait_for(("log",), timeout=300)  # written after the second 200 kB line
    finally:
        assert stop_group(proc, grace=5) == 128 + 15  # SIGTERM, as a shell reports it
        out.join(timeout=300)
    assert out.ended and (tmp_path / "console.log").stat().st_size > 400000


def test_a_child_that_exits_before_announcing_ends_the_wait_at_once(tmp_path):
    proc = child("print('sglang-overlay: url http://h:1'); print('boom')")
    out = Announcements(proc, tmp_path / "c.log")
    # a wait far past any start: it returns at all only because the child's end ended it
    assert not out.wait_for(("url", "fingerprint"), timeout=3600)
    assert out.ended and "boom" in out.tail_text()
    assert proc.wait(timeout=300) == 0


def test_the_wait_times_out_and_the_group_is_killed_after_grace(tmp_path):
    # The child ignores SIGTERM and so does a grandchild in its group: SIGKILL after grace ends both.
    proc = child(
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        'signal.signal(signal.SIGTERM, signal.SIG_IGN); print("ready", flush=True); time.sleep(120)\'])\n'
        "print('grandchild', g.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    out = Announcements(proc, tmp_path / "c.log")
    assert not out.wait_for(("url",), timeout=1.0) and not out.ended
    while "ready" not in out.tail_text():  # the grandchild's SIGTERM handler is in place
        assert not out.ended, out.tail_text()
        time.sleep(0.05)
    grandchild = int(next(line.split()[1] for line in out.tail_text().splitlines() if line.startswith("grandchild")))
    t0 = time.monotonic()
    assert stop_group(proc, grace=1.0) == 128 + 9
    assert time.monotonic() - t0 > 0.9  # not before the grace
    deadline = time.monotonic() + 300  # a fail-safe: the group's SIGKILL has been sent
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)  # gone, or a zombie of the init process at most
        except ProcessLookupError:
            break
        with open(f"/proc/{grandchild}/stat") as f:
            if f.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        raise AssertionError(f"grandchild {grandchild} outlived the group's SIGKILL")


def test_a_console_log_on_a_full_disk_keeps_the_pipe_drained_and_the_start_announced():
    # /dev/full refuses every write with ENOSPC, as a full disk does: the reader used to die on its first
    # flush, the child then blocked on its full pipe and the wait for its url ran to the timeout.
    proc = child(
        "import sys, time\n"
        "print('x' * 200000, flush=True)\n"
        "print('sglang-overlay: url http://127.0.0.1:1/ ', flush=True)\n"
        "time.sleep(60)\n"
    )
    out = Announcements(proc, Path("/dev/full"))
    try:
        assert out.wait_for(("url",), timeout=300)
        assert out.values["url"] == "http://127.0.0.1:1/"
        assert isinstance(out.log_error, OSError) and out.log_error.errno == errno.ENOSPC
        assert "console log /dev/full: write failed" in out.tail_text()
    finally:
        stop_group(proc, grace=5)
        out.join(timeout=300)
    assert out.ended
