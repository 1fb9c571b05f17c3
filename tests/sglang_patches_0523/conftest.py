"""The patched SGLang 0.5.23 tree (pins/0.5.23), imported on the CPU.

The same fixtures as tests/sglang_patches (the 0.5.17 pin), built by the same helper (pintree.py) from
pins/0.5.23/manifest.yaml, so the 0.5.17 tests whose property holds unchanged run here against 0.5.23 as
they are (imported by name), next to the 0.5.23 versions of those whose code moved.

Runs in the 0.5.17 virtualenv (requirements-sglang-cpu.txt: torch 2.13.0 CPU): the code under test is the
pin's own patched modules, imported from its tree; what they import of torch is the same in 2.13 and 2.14.
Its own process (.ci/run: `pytest tests/sglang_patches_0523`): `import sglang` is one release per process, so
a plain `pytest tests` does not collect this directory (tests/conftest.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARED = HERE.parent / "sglang_patches"
for _p in (ROOT, SHARED):  # the engine; the shared helpers and the 0.5.17 tests reused here
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import pintree  # noqa: E402

# The module fixtures the reused 0.5.17 tests ask for, resolved here against this directory's tree.
from test_sglang_eagle_profiling import timer_mod  # noqa: E402, F401
from test_sglang_engine_env import engine_runs  # noqa: E402, F401
from test_sglang_models import dsv2, eagle3, kvstep, mla  # noqa: E402, F401
from test_sglang_oea import oea, topk_mods  # noqa: E402, F401

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # as for 0.5.17: routing semantics, not inductor

PIN = "0.5.23"
MANIFEST = ROOT / "pins" / PIN / "manifest.yaml"
PRESET = "full"


@pytest.fixture(scope="session")
def pristine_sglang_tree() -> Path:
    """The engine's embedded pristine 0.5.23 tree (a git checkout tagged v0.5.23)."""
    return pintree.pristine_tree(MANIFEST)


@pytest.fixture(scope="session")
def patched_sglang_tree(pristine_sglang_tree, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("sglang_patched") / f"sglang-{PIN}"
    return pintree.patched_tree(pristine_sglang_tree, dst, MANIFEST, PRESET)


@pytest.fixture(scope="session")
def sglang_patched(patched_sglang_tree):
    return pintree.import_patched(patched_sglang_tree)


@pytest.fixture(scope="session")
def patched(sglang_patched):
    return pintree.module_loader()


@pytest.fixture(scope="session")
def pristine_module(pristine_sglang_tree, sglang_patched):
    return pintree.pristine_loader(pristine_sglang_tree)
