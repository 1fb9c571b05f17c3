"""Fixtures for bench tests (imported by the test modules: a conftest.py here would shadow tests/conftest.py for `from conftest import ...`): a small real manifest and the fake launcher command."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

FAKE = Path(__file__).with_name("fake_apply.py")
DATA = Path(__file__).resolve().parent / "data"
PATCHES = ("alpha", "beta", "eagle_profiling", "planted", "gamma", "delta", "epsilon", "zeta", "nccl_env_log")


@pytest.fixture
def manifest(tmp_path) -> Path:
    return make_manifest(tmp_path)


def make_manifest(tmp_path: Path) -> Path:
    """A small real manifest (the pin is the project's) with PATCHES as overlay entries, under tmp_path/m."""
    d = tmp_path / "m"
    entries = []
    for name in PATCHES:
        f = d / "overlay" / "python" / "sglang" / "srt" / f"x_{name}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"# {name}\n")
        req = "\n    requires: [alpha]" if name == "gamma" else ""
        entries.append(f"""  - name: {name}
    description: test entry {name}
    kind: overlay
    category: experimental
    overlay: [python/sglang/srt/x_{name}.py]{req}""")
    body = "\n".join(entries)
    # The pin is copied from the project's manifest: the loader validates it against the real release.
    pin = json.dumps(yaml.safe_load((ROOT / "manifest.yaml").read_text())["pin"])
    (d / "manifest.yaml").write_text(
        textwrap.dedent("""\
        schema: 1
        pin: PIN
        patches:
        """).replace("PIN", pin)
        + body
        + textwrap.dedent("""
        presets:
          base: [alpha]
          full: [alpha, beta, eagle_profiling, planted, gamma, delta, epsilon, zeta]
          empty: []
        env_profiles:
          nccl_pcie:
            description: test profile
            vars:
              NCCL_P2P_DISABLE: {value: "1", why: test}
        """)
    )
    return d / "manifest.yaml"


@pytest.fixture
def launcher_arg() -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE))}"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A finished run directory: the store and command of a synthetic A/B recorded before oea_stats existed."""
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(DATA / "synthetic_ab.jsonl", d / "results.jsonl")
    shutil.copy(DATA / "synthetic_ab.command.txt", d / "command.txt")
    return d


def fake_argv(kind: str, args, manifest: Path, launcher_arg: str, out: Path, server_args=("--tp", "1")) -> list[str]:
    """A bench command line against the fake server: short workload, few repetitions (every e2e test's shape)."""
    return [
        kind,
        *args,
        "--manifest",
        str(manifest),
        "--launcher",
        launcher_arg,
        "--out",
        str(out),
        "--max-new-tokens",
        "64",
        "--b1-requests",
        "2",
        "--concurrency",
        "4",
        "--reps-per-start",
        "3",
        "--warmup-reps",
        "1",
        "--",
        *server_args,
    ]
