"""`launch` with real processes: dry-run output, the env profile rule, /health, signals, exit codes, failures.

A small real HTTP server (tests/fixtures/fake_server.py) stands in for sglang.launch_server through the
documented SGLANG_OVERLAY_SERVER_MODULE hook; everything else (switch on the real 0.5.17 tree, PYTHONPATH,
process group, forwarding) is what a user gets.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, tree_snapshot

FIXTURES = ROOT / "tests" / "fixtures"
MANIFEST = """schema: 1
pin:
  package: sglang
  version: 0.5.17
  git_tag: v0.5.17
  wheel: sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl
  sha256: fb4cba478a5dca5ee146550b39f33add1c4e475d21ee11810b86ed1c58068093
patches:
  - name: overlay_identity
    description: identity in the server
    kind: diff
    category: diagnostic
    default: true
presets:
  default: [overlay_identity]
env_profiles:
  alpha:
    description: sets FOO and BAR
    vars:
      FOO: {value: "1", why: "test"}
      BAR: {value: "a b", why: "needs quoting"}
  beta:
    description: sets FOO and NCCL_DEBUG
    vars:
      FOO: {value: "2", why: "test"}
      NCCL_DEBUG: {value: "INFO", why: "test"}
"""


def make_project(d: Path) -> Path:
    """A small real project: the pin, overlay_identity, and two env profiles."""
    (d / "manifest.yaml").write_text(MANIFEST)
    (d / "patches").mkdir()
    shutil.copy(ROOT / "patches" / "overlay_identity.patch", d / "patches")
    return d


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("launchproj"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGLANG_OVERLAY_TREE")}
    env.update({"SGLANG_OVERLAY_SERVER_MODULE": "fake_server", "PYTHONPATH": str(FIXTURES)})
    env.update(extra)
    return env


def launcher(project: Path, tree: Path, *args, env: dict, server_args=()) -> subprocess.Popen:
    cmd = [
        sys.executable,
        str(ROOT / "apply.py"),
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(tree),
        "launch",
        *args,
        "--",
        *server_args,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def read_ready(proc: subprocess.Popen) -> dict[str, str]:
    """The three lines launch prints once healthy: {'url': ..., 'fingerprint': ..., 'log': ...} (read as they
    come: however slow the start, a launch that ends early ends the read)."""
    out = {}
    while len(out) < 3:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"launch ended early rc={proc.wait()}\nstderr:\n{proc.stderr.read()}")
        key, _, value = line.strip().removeprefix("sglang-overlay: ").partition(" ")
        out[key] = value
    return out


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it has exited all the same
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_dry_run_output_is_exact_and_changes_nothing(project, sglang_tree):
    before = tree_snapshot(sglang_tree)
    env = base_env(NCCL_DEBUG="WARN", FOO="stale")
    env.pop("PYTHONPATH")
    fp = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "fingerprint",
        "--set",
        "default",
        "--env-profile",
        "alpha",
        check_rc=0,
    ).stdout.strip()
    proc = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(sglang_tree),
        "launch",
        "--set",
        "default",
        "--env-profile",
        "alpha",
        "--dry-run",
        "--",
        "--model-path",
        "/models/m",
        "--tp",
        "8",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--dist-init-addr",
        "10.0.0.1:5000",
        "--port",
        "31000",
        env=env,
        check_rc=0,
    )
    python = shlex.quote(sys.executable)
    assert proc.stdout.splitlines() == [
        "unset NCCL_DEBUG",  # set by profile beta only: stale here
        "BAR='a b'",
        "FOO=1",
        f"PYTHONPATH={sglang_tree}/python",
        "SGLANG_OVERLAY_ENV_PROFILE=alpha",
        f"SGLANG_OVERLAY_FINGERPRINT={fp}",
        f"{python} -m fake_server --model-path /models/m --tp 8 --nnodes 2 --node-rank 1 "
        f"--dist-init-addr 10.0.0.1:5000 --port 31000 --host 127.0.0.1",
    ]
    assert tree_snapshot(sglang_tree) == before
    assert not (sglang_tree / ".sglang-overlay").exists()


def test_user_host_is_kept_and_arguments_need_the_separator(project, sglang_tree):
    args = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree), "launch", "--dry-run")
    out = run_cli(*args, "--", "--host", "0.0.0.0", env=base_env(), check_rc=0).stdout.splitlines()[-1]
    assert out.endswith("-m fake_server --host 0.0.0.0")
    err = run_cli(*args, "--", "--model-path", "m", "--host=10.1.2.3", env=base_env(), check_rc=0).stdout
    assert err.splitlines()[-1].endswith("--model-path m --host=10.1.2.3")


def test_launch_env_identity_signal_forwarding_and_revert_on_exit(project, sglang_tree):
    pristine = tree_snapshot(sglang_tree)
    port = free_port()
    proc = launcher(
        project,
        sglang_tree,
        "--set",
        "default",
        "--env-profile",
        "alpha",
        "--revert-on-exit",
        server_args=["--model-path", "m", "--port", str(port)],
        env=base_env(NCCL_DEBUG="WARN", FOO="stale", KEEP_ME="yes"),
    )
    try:
        ready = read_ready(proc)
        assert ready["url"] == f"http://127.0.0.1:{port}"
        fp = run_cli(
            "--manifest",
            str(project / "manifest.yaml"),
            "fingerprint",
            "--set",
            "default",
            "--env-profile",
            "alpha",
            check_rc=0,
        ).stdout.strip()
        assert ready["fingerprint"] == fp
        assert Path(ready["log"]).is_file() and str(sglang_tree / ".sglang-overlay" / "logs") in ready["log"]
        info = get_json(ready["url"] + "/get_server_info")
        env = info["env"]
        assert env["FOO"] == "1" and env["BAR"] == "a b" and env["KEEP_ME"] == "yes"
        assert "NCCL_DEBUG" not in env  # another profile's variable: removed, nothing stale
        assert env["SGLANG_OVERLAY_ENV_PROFILE"] == "alpha" and env["SGLANG_OVERLAY_FINGERPRINT"] == fp
        # the patched tree is what `import sglang` finds, ahead of anything else on the path
        assert info["overlay"]["package_dir"] == str(sglang_tree / "python" / "sglang")
        assert info["overlay"]["patches"] == ["overlay_identity"]
        assert info["overlay"]["launch_fingerprint"] == fp
        tree_fp = run_cli(
            "--manifest", str(project / "manifest.yaml"), "fingerprint", "--set", "default", check_rc=0
        ).stdout.strip()
        assert info["overlay"]["fingerprint"] == tree_fp
        assert "_overlay_identity" in (sglang_tree / "python/sglang/srt/entrypoints/http_server.py").read_text()
        assert info["argv"][-2:] == ["--host", "127.0.0.1"]
        assert info["pgid"] == info["pid"] != os.getpgid(0)  # its own process group

        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=300)
        stderr = proc.stderr.read()
        assert rc == 7, stderr  # the server's own exit code
        assert "forwarding SIGTERM" in stderr
        # the grandchild ignores nothing: it ends once the signal reaches it (a fail-safe bound, not a bet)
        deadline = time.monotonic() + 300
        while pid_alive(info["grandchild_pid"]):
            assert time.monotonic() < deadline, "the signal did not reach the whole process group"
            time.sleep(0.05)
        assert tree_snapshot(sglang_tree) == pristine  # --revert-on-exit
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigint_then_sigkill_after_grace_when_the_server_ignores_it(project, sglang_tree):
    port = free_port()
    proc = launcher(
        project,
        sglang_tree,
        "--set",
        "default",
        "--grace",
        "1",
        server_args=["--port", str(port)],
        env=base_env(FAKE_SERVER_MODE="ignore_term"),
    )
    try:
        ready = read_ready(proc)
        info = get_json(ready["url"] + "/get_server_info")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=300)  # a fail-safe: the server ignores SIGINT, only the SIGKILL ends it
        stderr = proc.stderr.read()
        assert rc == 128 + signal.SIGKILL, stderr
        assert time.monotonic() - t0 > 0.9  # not before the grace
        assert "forwarding SIGINT" in stderr and "SIGKILL" in stderr
        assert not pid_alive(info["pid"]) and not pid_alive(info["grandchild_pid"])
        # without --revert-on-exit the tree keeps the set
        assert (
            "overlay_identity"
            in run_cli(
                "--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree), "status", check_rc=0
            ).stdout
        )
    finally:
        if proc.poll() is None:
            proc.kill()


def test_server_that_dies_before_healthy_exits_1_with_the_log_tail(project, sglang_tree, tmp_path):
    log = tmp_path / "server.log"
    proc = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(sglang_tree),
        "launch",
        "--log",
        str(log),
        "--",
        "--port",
        str(free_port()),
        env=base_env(FAKE_SERVER_MODE="die"),
    )
    assert proc.returncode == 1, proc.stderr
    assert "exited with code 3" in proc.stderr
    assert "fake: failing on purpose before serving" in proc.stderr  # the tail of the log, printed
    assert str(log) in proc.stderr and log.is_file()
    assert proc.stdout == ""  # never healthy: no url/fingerprint lines


def test_health_timeout_stops_the_server_and_exits_1(project, sglang_tree):
    proc = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(sglang_tree),
        "launch",
        "--health-timeout",
        "2",
        "--",
        "--port",
        str(free_port()),
        env=base_env(FAKE_SERVER_MODE="never_healthy"),
    )
    assert proc.returncode == 1, proc.stderr
    assert "did not answer within 2s" in proc.stderr and "fake: starting" in proc.stderr


@pytest.mark.parametrize(
    "option,value,message",
    [
        ("--health-timeout", "-1", "'-1': expected a number of seconds above 0"),  # started a server to stop it
        ("--health-timeout", "nan", "'nan': expected a number of seconds above 0"),  # every wait ended at once
        ("--health-timeout", "0", "'0': expected a number of seconds above 0"),
        ("--grace", "inf", "'inf': expected a number of seconds from 0"),
        ("--grace", "soon", "'soon': expected a number of seconds from 0"),
        ("--python", "", "--python is empty (an unset shell variable?)"),  # had quietly meant this interpreter
    ],
)
def test_bad_option_values_are_exit_2(project, sglang_tree, option, value, message):
    res = run_cli(
        "--manifest",
        str(project / "manifest.yaml"),
        "--tree",
        str(sglang_tree),
        "launch",
        "--dry-run",
        option,
        value,
        env=base_env(),
    )
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_port_that_already_answers_is_refused_before_the_tree_changes(project, sglang_tree):
    """Another server on the port (yesterday's, another set's) answered /health for the new one, whose URL and
    fingerprint were then announced, before it failed to bind."""
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "fake_server", "--port", str(port)],
        env=base_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # until it answers, however slow its start
            assert other.poll() is None, "the other server ended"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        before = tree_snapshot(sglang_tree)
        man = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree))
        res = run_cli(*man, "launch", "--set", "default", "--", "--port", str(port), env=base_env())
        assert res.returncode == 2 and f"already listens on 127.0.0.1:{port}" in res.stderr, res.stderr
        assert res.stdout == "" and tree_snapshot(sglang_tree) == before
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
def test_a_port_out_of_range_is_exit_2(project, sglang_tree, port):
    man = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree))
    res = run_cli(*man, "launch", "--dry-run", "--", "--port", port, env=base_env())
    assert res.returncode == 2 and f"--port '{port}' is not a port number" in res.stderr, res.stderr


def test_hand_edits_stop_launch_unless_forced(project, sglang_tree, tmp_path):
    """docs/launch.md: hand-edited files stop it. The switch keeps an edit the set does not rewrite (as apply
    does), and the server had started on it under the clean set's fingerprint."""
    man = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree))
    run_cli(*man, "apply", "--set", "default", check_rc=0)
    f = sglang_tree / "python/sglang/srt/entrypoints/http_server.py"  # overlay_identity's file
    f.write_text(f.read_text() + "# by hand\n")
    for dry in (["--dry-run"], []):
        res = run_cli(*man, "launch", *dry, "--set", "default", "--", "--port", str(free_port()), env=base_env())
        assert res.returncode == 1 and "refusing to launch: 1 file(s) drifted" in res.stderr, res.stderr
        assert "--force" in res.stderr and res.stdout == ""
    assert f.read_text().endswith("# by hand\n")
    log = tmp_path / "s.log"
    res = run_cli(
        *man,
        "launch",
        "--force",
        "--log",
        str(log),
        "--",
        "--port",
        str(free_port()),
        env=base_env(FAKE_SERVER_MODE="die"),
    )
    assert "warning: launching with hand edits in" in res.stderr and "does not cover them" in res.stderr
    assert f.read_text().endswith("# by hand\n")


@pytest.mark.parametrize("bad", ["python", "log"])
def test_an_interpreter_or_log_that_cannot_work_is_refused_before_the_tree_changes(project, sglang_tree, tmp_path, bad):
    man = ("--manifest", str(project / "manifest.yaml"), "--tree", str(sglang_tree))
    before = tree_snapshot(sglang_tree)
    extra = ["--python", str(tmp_path / "no-python")] if bad == "python" else ["--log", str(tmp_path)]
    res = run_cli(*man, "launch", "--set", "default", *extra, "--", "--port", str(free_port()), env=base_env())
    assert res.returncode == 2 and "the tree is unchanged" in res.stderr, res.stderr
    assert tree_snapshot(sglang_tree) == before


def test_launch_says_when_pips_version_no_longer_names_the_set(project, sglang_tree, tmp_path):
    """As apply/revert/toggle do (distinfo.py): a wheel of build-wheel installed, launched with another set, pip
    still names the wheel's set; launch said nothing of it. Said on stderr before the server starts; not said when
    the tree carries the wheel's own set."""
    man = ("--manifest", str(project / "manifest.yaml"))
    site = tmp_path / "site"  # an installed tree: the package's files overlay_identity needs, and a dist-info
    for rel in ("__init__.py", "_version.py", "srt/entrypoints/http_server.py"):
        (site / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_tree / "python" / "sglang" / rel, site / "sglang" / rel)
    wheel_set = run_cli(*man, "fingerprint", "--set", "none", "--short", check_rc=0).stdout.strip()
    info = site / f"sglang-0.5.17+ovl.{wheel_set}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17+ovl.{wheel_set}\n")
    cli = (*man, "--tree", str(site), "launch", "--python", sys.executable)
    env = base_env(FAKE_SERVER_MODE="die")  # exits before serving: the output up to the start is the point
    res = run_cli(*cli, "--set", "default", "--", "--port", str(free_port()), env=env)
    assert res.returncode == 1 and "tree now carries overlay_identity" in res.stderr, res.stderr
    note = f"note: pip still reports sglang 0.5.17+ovl.{wheel_set} ({info.name}:"
    assert note in res.stderr and "build-wheel --patches overlay_identity" in res.stderr, res.stderr
    assert res.stderr.index(note) < res.stderr.index("sglang-overlay: starting "), res.stderr
    assert "pip still reports" not in res.stdout, res.stdout
    res = run_cli(*cli, "--set", "none", "--", "--port", str(free_port()), env=env)
    assert res.returncode == 1 and "tree now carries no patches" in res.stderr, res.stderr
    assert "pip still reports" not in res.stderr + res.stdout, res.stderr  # the wheel's own set again


def test_revert_on_exit_says_when_pips_version_no_longer_names_the_set(project, sglang_tree, tmp_path):
    """--revert-on-exit switches the tree back after the server exits: the pip-version note was said for the set
    launched, not for the set the tree is left carrying. A wheel of `default` installed: launching `default` says
    nothing; taking it back out leaves pip naming `default`, and that is said after the tree is switched back."""
    man = ("--manifest", str(project / "manifest.yaml"))
    site = tmp_path / "site"
    for rel in ("__init__.py", "_version.py", "srt/entrypoints/http_server.py"):
        (site / "sglang" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sglang_tree / "python" / "sglang" / rel, site / "sglang" / rel)
    wheel_set = run_cli(*man, "fingerprint", "--set", "default", "--short", check_rc=0).stdout.strip()
    info = site / f"sglang-0.5.17+ovl.{wheel_set}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17+ovl.{wheel_set}\n")
    cli = (*man, "--tree", str(site), "launch", "--python", sys.executable, "--revert-on-exit", "--set", "default")
    res = run_cli(*cli, "--", "--port", str(free_port()), env=base_env(FAKE_SERVER_MODE="die"))
    back = "sglang-overlay: --revert-on-exit: tree carries no patches again"
    note = f"note: pip still reports sglang 0.5.17+ovl.{wheel_set} ({info.name}:"
    assert res.returncode == 1 and back in res.stderr and note in res.stderr, res.stderr
    assert res.stderr.count("pip still reports") == 1 and res.stderr.index(back) < res.stderr.index(note), res.stderr
    assert "--force-reinstall sglang==0.5.17" in res.stderr and "pip still reports" not in res.stdout, res.stderr
