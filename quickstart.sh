#!/usr/bin/env bash
# The main job on a fresh machine: install the tool, fetch the pinned SGLang release into .sglang/,
# apply the default patch set, and show the status. Run again, it keeps the set the tree carries.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# The package itself (pyproject.toml: its dependencies and the sglang-overlay command in .venv/bin). Not editable:
# that install's import hook runs at every interpreter start (~30 ms a command). Run this again after a pull.
.venv/bin/python -m pip install -q --disable-pip-version-check .
.venv/bin/sglang-overlay fetch
# A tree that has state was set up before: its set is the user's choice, never reset here.
if ! ls .sglang/sglang-*/.sglang-overlay/state.json >/dev/null 2>&1; then
  .venv/bin/sglang-overlay apply --set default
fi
.venv/bin/sglang-overlay status
