"""The fake SGLang of fake_apply.py as a server module for the REAL `apply.py launch`.

Run by launch as `python -m fake_bench_server --port P ...` when SGLANG_OVERLAY_SERVER_MODULE=fake_bench_server
and tests/bench is on PYTHONPATH. The patch set comes from the tree's identity module (sglang/_overlay_build.py,
located on sys.path without importing sglang), the env profile from the environment launch exports; /server_info
carries "overlay" only when overlay_identity is applied, as the real patched server does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from fake_apply import log_start, make_server, wait_for_signal


def _identity() -> dict | None:
    spec = importlib.util.find_spec("sglang")
    path = Path(spec.origin).parent / "_overlay_build.py" if spec and spec.origin else None
    if path is None or not path.exists():
        return None
    ns: dict = {}
    exec(path.read_text(), ns)
    return {
        "pin": ns.get("PIN"),
        "fingerprint": ns.get("FINGERPRINT"),
        "patches": list(ns.get("PATCHES", ())),
        "env_profile": os.environ.get("SGLANG_OVERLAY_ENV_PROFILE") or None,
        "launch_fingerprint": os.environ.get("SGLANG_OVERLAY_FINGERPRINT") or None,
    }


def _opt(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def main() -> int:
    args = sys.argv[1:]
    cfg = json.loads(os.environ.get("FAKE_BENCH", "{}"))
    ident = _identity()
    patches = ident["patches"] if ident else []
    log_start(patches, os.environ.get("SGLANG_OVERLAY_ENV_PROFILE"), args, dict(os.environ))
    overlay = ident if "overlay_identity" in patches else None
    srv = make_server(
        patches,
        dict(os.environ),
        args,
        cfg,
        overlay,
        _opt(args, "--host", "127.0.0.1"),
        int(_opt(args, "--port", "30000")),
    )
    print(f"fake_bench_server: serving {patches} on {srv.server_address}", flush=True)
    wait_for_signal(srv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
