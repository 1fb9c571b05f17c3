#!/usr/bin/env python3
"""sglang-overlay command line: `python apply.py --help`."""
from sglang_overlay.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
