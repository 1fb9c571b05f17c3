"""Launch the patched SGLang server: make the tree carry exactly the set (one transaction), export the env
profile, start `python -m sglang.launch_server ARGS` so that it imports this tree, wait for /health, print
the URL, fingerprint and log path, and stay in the foreground until the server exits (with its exit code).

  %(prog)s --set full --env-profile nccl_pcie -- --model-path M --tp 8

Everything after `--` goes to sglang.launch_server unchanged (multi-host: --nnodes, --node-rank,
--dist-init-addr included); `--host 127.0.0.1` is added when no --host is given.

Environment rule (nothing stale): the server gets the launcher's environment, minus every variable that some
env profile of the manifest sets, plus the chosen profile's variables, plus SGLANG_OVERLAY_FINGERPRINT (the
fingerprint including the env profile) and SGLANG_OVERLAY_ENV_PROFILE (unset without a profile). A checkout
or the embedded tree is imported by putting its python/ directory first on PYTHONPATH; an installed tree by
that environment's own interpreter (derived from the site-packages path, or --python).

Without --set/--patches the tree keeps the set it carries now. SGLANG_OVERLAY_SERVER_MODULE replaces the
module that is run (default sglang.launch_server); it exists so the tests can stand in a small HTTP server.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shlex
import shutil
import socket
import sys
import time
import urllib.parse
from pathlib import Path

from ..api import said_after
from ..env_overrides import warn_profile
from ..errors import BadInput, Drift, os_failure
from ..fingerprint import fingerprint
from ..pathlen import path_arg
from ..progname import prog
from ..switch import check_gates, drift_hint, switch, target_patches
from ..tree import Tree
from ..treepin import check_tree_version
from ..treeread import drifted_files, reading
from ._common import add_selection, open_tree, selection, tell

NAME = "launch"
HELP = "apply a set and launch the patched SGLang server (args after --)"

SERVER_MODULE_ENV = "SGLANG_OVERLAY_SERVER_MODULE"
DEFAULT_MODULE = "sglang.launch_server"
FINGERPRINT_ENV = "SGLANG_OVERLAY_FINGERPRINT"
PROFILE_ENV = "SGLANG_OVERLAY_ENV_PROFILE"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000


def add_arguments(p) -> None:
    add_selection(p, positional=False, set_help="carry exactly this set: PRESET, a,b, PRESET+x, PRESET-x or none")
    p.add_argument("--env-profile", metavar="NAME", help="export this env profile of the manifest")
    p.add_argument(
        "--revert-on-exit",
        action="store_true",
        help="when the server exits, put the tree back to the set it carried before",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the environment delta and the command; start nothing, change nothing",
    )
    p.add_argument(
        "--health-timeout",
        type=_seconds,
        default=1800.0,
        metavar="S",
        help="seconds to wait for GET /health (default 1800)",
    )
    p.add_argument(
        "--grace",
        type=functools.partial(_seconds, zero=True),
        default=30.0,
        metavar="S",
        help="seconds between a forwarded SIGINT/SIGTERM and SIGKILL (default 30)",
    )
    p.add_argument("--log", type=path_arg, metavar="FILE", help="server log (default: <tree state dir>/logs/...)")
    p.add_argument(
        "--python",
        metavar="EXE",
        help="interpreter that runs the server (default: this one for a "
        "checkout/embedded tree, the environment's own for an installed one)",
    )
    p.add_argument("--force", action="store_true", help="as for apply: overwrite hand-edited files (backed up)")
    p.add_argument("--ignore-hardware", action="store_true", help="as for apply")
    p.add_argument(
        "server_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="arguments for sglang.launch_server"
    )


def _seconds(text: str, *, zero: bool = False) -> float:
    """A wait in seconds: -1 had started the server only to stop it at once, and nan made every wait end at once
    (no comparison with nan is true)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 <= value < math.inf) or (value == 0 and not zero):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds {'from' if zero else 'above'} 0")
    return value


# -- pieces (pure, tested directly) --------------------------------------------------------------------------
def passthrough(raw: list[str]) -> list[str]:
    args = list(raw)
    if args and args[0] == "--":
        args = args[1:]
    elif args:
        raise BadInput(
            f"launch: put the server's arguments after `--` (got {args[0]!r})",
            hint=f"e.g. `{prog()} launch --set full -- --model-path M`",
        )
    return args


def _option(args: list[str], name: str) -> str | None:
    """The last value of --name (as `--name V` or `--name=V`), as argparse in the server would see it."""
    value = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


def with_host(args: list[str]) -> list[str]:
    return args if _option(args, "--host") is not None else [*args, "--host", DEFAULT_HOST]


def server_url(args: list[str]) -> str:
    host = _option(args, "--host") or DEFAULT_HOST
    port = _option(args, "--port") or str(DEFAULT_PORT)
    if not re.fullmatch(r"\d+", port) or not 0 < int(port) < 65536:
        raise BadInput(f"launch: --port {port!r} is not a port number", hint="give one from 1 to 65535")
    if host in ("0.0.0.0", "", "::"):
        host = DEFAULT_HOST  # listening everywhere: reach it (and report it) on this host's loopback
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def refuse_a_taken_port(url: str) -> None:
    """Before the tree changes: a server already answering there would pass the health check as this one (which
    then fails to bind), and its URL and fingerprint would be announced for a server that is not the set's."""
    u = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((u.hostname, u.port), timeout=2):
            pass
    except OSError:
        return
    raise BadInput(
        f"launch: something already listens on {u.hostname}:{u.port} (another server?): its /health would answer "
        "for this one; the tree is unchanged",
        hint="stop it, or give this server another --port",
    )


def refuse_what_cannot_start(python: str, log: Path | None) -> None:
    """Before the tree changes: an interpreter that is not there, or a log path that is a directory, had been
    found only when the server was started, with the tree already switched to the new set."""
    if shutil.which(python) is None:
        raise BadInput(f"launch: cannot run {python}: no such executable; the tree is unchanged", hint="check --python")
    if log is not None and log.is_dir():
        raise BadInput(f"launch: --log {log} is a directory; the tree is unchanged", hint="name a file to write")


def refuse_hand_edits(tree: Tree, state, force: bool) -> None:
    """A hand-edited file the set does not rewrite is kept by the switch (as apply keeps it), but a server started
    on it is not the set its fingerprint names: launch refuses it, as it refuses the files the switch rewrites."""
    edited = drifted_files(tree, state)
    if edited and not force:
        lines = [f"  {f}: changed by hand since sglang-overlay wrote it" for f in sorted(edited)]
        raise Drift(
            f"refusing to launch: {len(edited)} file(s) drifted in {tree.root}: the server would run the edits, "
            "while the fingerprint it announces is the set's without them\n" + "\n".join(lines),
            hint=drift_hint(edited, "pass --force to launch with them"),
        )


def interpreter(tree: Tree, explicit: str | None) -> str:
    if explicit is not None:
        if not explicit.strip():  # `--python "$PY"` with PY unset had quietly meant the default interpreter
            raise BadInput("--python is empty (an unset shell variable?)", hint="name an interpreter, or leave it out")
        return explicit
    if tree.kind != "installed":
        return sys.executable
    # A tree this interpreter already imports from (a --target dir on PYTHONPATH, our own site-packages).
    on_path = {os.path.realpath(p) for p in sys.path if p}
    if os.path.realpath(tree.root) in on_path:
        return sys.executable
    # site-packages of an environment: <prefix>/lib/pythonX.Y/site-packages -> <prefix>/bin/pythonX.Y
    root = tree.root
    m = re.fullmatch(r"python(\d+\.\d+)", root.parent.name)
    if root.name in ("site-packages", "dist-packages") and m:
        for cand in (root.parents[2] / "bin" / f"python{m.group(1)}", root.parents[2] / "bin" / "python3"):
            if cand.exists():
                return str(cand)
    raise BadInput(
        f"{root}: cannot tell which interpreter owns this installed tree",
        hint="pass --python /path/to/that/environment/bin/python",
    )


def child_env(
    base: dict[str, str], manifest, profile, fp: str, tree: Tree
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(environment, variables set, variables removed). See the module docstring for the rule."""
    env = dict(base)
    profile_vars = profile.as_env() if profile else {}
    managed = {v.name for p in manifest.env_profiles.values() for v in p.vars} | {PROFILE_ENV}
    removed = sorted(k for k in managed if k in env and k not in profile_vars)
    for k in removed:
        del env[k]
    sets = dict(profile_vars)
    sets[FINGERPRINT_ENV] = fp
    if profile:
        sets[PROFILE_ENV] = profile.name
    if tree.kind != "installed":
        old = base.get("PYTHONPATH")
        sets["PYTHONPATH"] = str(tree.python_path) + (os.pathsep + old if old else "")
    env.update(sets)
    return env, sets, removed


def default_log(tree: Tree) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime())
    return tree.state_dir / "logs" / f"launch-{stamp}-{os.getpid()}.log"


# -- the command ---------------------------------------------------------------------------------------------
def _wanted(ctx, args) -> tuple[str, ...] | None:
    """The set asked for, or None: keep the set the tree carries."""
    chosen = selection(ctx, args, verb="launch")
    return None if chosen is None else chosen.patches


def run(ctx, args) -> int:
    m = ctx.manifest
    wanted = _wanted(ctx, args)  # bad input is refused before any tree is looked at
    server_args = with_host(passthrough(args.server_args))
    url = server_url(server_args)
    tree = ctx.tree
    check_tree_version(ctx)
    profile = m.env_profile(args.env_profile) if args.env_profile is not None else None
    module = os.environ.get(SERVER_MODULE_ENV) or DEFAULT_MODULE
    argv = [interpreter(tree, args.python), "-m", module, *server_args]

    if args.dry_run:
        with reading(tree) as view:
            previous = view.state.applied
            refuse_hand_edits(tree, view.state, args.force)
        if wanted is None:
            m.check_carried(previous)
        names = wanted if wanted is not None else m.closure(previous)
        warn_profile(m, names, profile, server_args)
        fp = fingerprint(m, names, profile)
        env, sets, removed = child_env(dict(os.environ), m, profile, fp, tree)
        if not args.ignore_hardware:  # refuse what the real run would refuse, by the switch's own check
            check_gates(target_patches(m, names), tuple(n for n in names if n not in previous))
        for k in removed:
            print(f"unset {k}")
        for k in sorted(sets):
            print(f"{k}={shlex.quote(sets[k])}")
        print(shlex.join(argv))
        return 0

    refuse_a_taken_port(url)
    refuse_what_cannot_start(argv[0], args.log)
    with open_tree(ctx) as txn:  # the set is decided on the state as it is under the lock
        previous = txn.state.applied
        if wanted is None:
            m.check_carried(previous)
        names = wanted if wanted is not None else m.closure(previous)
        refuse_hand_edits(tree, txn.state, args.force)
        outcome = switch(txn, m, names, op="launch", force=args.force, ignore_hardware=args.ignore_hardware)
        tell(outcome.notes)
        kept = sorted(drifted_files(tree, txn.state))  # --force: the edits the switch did not overwrite
    if kept:
        print(
            f"sglang-overlay: warning: launching with hand edits in {', '.join(kept)} (--force): the fingerprint "
            "announced below does not cover them",
            file=sys.stderr,
        )
    warn_profile(m, names, profile, server_args)
    fp = fingerprint(m, names, profile)
    env, sets, removed = child_env(dict(os.environ), m, profile, fp, tree)
    if outcome.added or outcome.removed:
        print(f"sglang-overlay: tree now carries {', '.join(outcome.target) or 'no patches'}", file=sys.stderr)
    for note in said_after(ctx, outcome, []):  # stderr: stdout is the url/fingerprint/log lines scripts read
        print(note, file=sys.stderr)
    log_path = (args.log or default_log(tree)).resolve()
    from ..server import ServerProcess, Stopped

    server = ServerProcess(argv, env, log_path, grace=args.grace)
    print(f"sglang-overlay: starting {shlex.join(argv)}\nsglang-overlay: log {log_path}", file=sys.stderr, flush=True)
    code: int | None = None
    try:
        try:
            server.start()
        except OSError as e:
            if e.filename != argv[0]:  # the log could not be written
                raise os_failure(e, "cannot write", "the tree carries the set; the server was not started") from None
            raise BadInput(f"cannot start {argv[0]}: {e.strerror}", hint="check --python") from None
        try:
            server.wait_healthy(url, args.health_timeout)
        except Stopped as stopped:
            code = stopped.code
        else:
            print(
                f"sglang-overlay: url {url}\nsglang-overlay: fingerprint {fp}\nsglang-overlay: log {log_path}",
                flush=True,
            )
            code = server.wait()
            print(f"sglang-overlay: the server exited with code {code}", file=sys.stderr, flush=True)
    finally:
        server.ensure_stopped()
        server.restore_signals()
        if args.revert_on_exit:
            with open_tree(ctx) as txn:
                back = switch(txn, m, previous, op="revert-on-exit", force=False, ignore_hardware=True)
            tell(back.notes)
            print(
                f"sglang-overlay: --revert-on-exit: tree carries {', '.join(back.target) or 'no patches'} again",
                file=sys.stderr,
            )
            # the note said at the start was of the launched set; what pip names may be wrong only now
            for note in said_after(ctx, back, []):
                print(note, file=sys.stderr)
    return code
