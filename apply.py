#!/usr/bin/env python3
"""sglang-overlay command line, in a checkout: `python apply.py --help` (installed: `sglang-overlay --help`).
Run from anywhere, it works on the project that holds it unless a manifest.yaml is found from the current
directory upward (or --project / --manifest names one)."""

import _signal  # type: ignore[import-not-found]  # typeshed has no stub for it; built in, unlike `signal`: the handlers are in place before a single file is read
import os


def _interrupted_at_start(
    signum: int, frame: object
) -> None:  # nothing is written before main() installs its own handlers
    os.write(2, b"interrupted\n")
    os._exit(130)


for _sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
    _signal.signal(_sig, _interrupted_at_start)

from sglang_overlay.entry import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main(home=os.path.dirname(os.path.realpath(__file__))))
