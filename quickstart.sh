#!/usr/bin/env bash
# The main job on a fresh machine: install the tool, fetch the pinned SGLang release into .sglang/,
# apply the default patch set, and show the status. Safe to run again (every step is cached or a no-op).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
.venv/bin/python apply.py fetch
.venv/bin/python apply.py apply --set default
.venv/bin/python apply.py status
