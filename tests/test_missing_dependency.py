"""A dependency missing from the interpreter is the user's environment, not a bug in the tool: exit 2 and the
pip command that fixes it (a GPU machine whose bundles lacked unidiff got "internal error (a bug in sglang-overlay)"
from `apply.py fetch`). Another module's ImportError stays an internal error with its saved traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RUN = """
import sys
sys.path.insert(0, {root!r})  # the checkout's package, whether or not this interpreter has it installed
sys.modules[{module!r}] = None  # `import {module}` raises ModuleNotFoundError, as when it is not installed
sys.argv = [{apply!r}]
from pathlib import Path
from sglang_overlay.cli import main
raise SystemExit(main(["--manifest", {manifest!r}, "status"], home=Path({root!r})))
"""


def _run(tmp_path: Path, module: str) -> subprocess.CompletedProcess:
    from sglang_overlay.cachedir import CACHE_ENV

    code = RUN.format(module=module, apply=str(ROOT / "apply.py"), manifest=str(ROOT / "manifest.yaml"), root=str(ROOT))
    # an empty cache: the patches are parsed now (a warm parse cache never imports unidiff)
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_missing_dependency_is_exit_2_naming_the_package_and_the_fix(tmp_path):
    p = _run(tmp_path, "unidiff")
    assert p.returncode == 2, p.stderr
    assert "the Python package unidiff (module 'unidiff.errors') is not installed" in p.stderr
    assert "pip install -r requirements.txt" in p.stderr and "Traceback" not in p.stderr
    assert not list(tmp_path.glob("sglang-overlay-crash-*.log"))


def test_a_module_that_is_no_dependency_is_still_an_internal_error(tmp_path):
    p = _run(tmp_path, "fcntl")  # imported by the lock, after main() began
    assert p.returncode not in (0, 2), p.stderr
    assert "internal error (a bug in sglang-overlay)" in p.stderr
