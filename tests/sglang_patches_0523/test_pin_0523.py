"""The 0.5.23 set as a whole (pins/0.5.23): `check` green on its pin, the radar against 0.5.23 all clean or
upstreamed, every rewritten proof inside the symbols it names, and the engine environment patch in the real
0.5.23 engine code (a spawned launcher, as in the 0.5.17 tests)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import MANIFEST, PIN, ROOT
from test_sglang_engine_env import (  # noqa: F401
    test_a_kept_value_that_defeats_a_flag_is_warned,
    test_pristine_engine_overwrites_what_the_user_set,
    test_user_values_win_and_every_rank_logs_them,
    test_without_user_values_the_patched_engine_is_upstream,
)
from test_sglang_patchset import ENTRIES, check_proofs_lie_in_their_symbols


def _apply(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "apply.py"), "--manifest", str(MANIFEST), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_on_the_pin_is_green(pristine_sglang_tree):
    """Zero fuzz alone, together, leave-one-out and in any order; byte-compiles; upstreamed proofs hold."""
    proc = _apply("--tree", str(pristine_sglang_tree), "check", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], [i for i in report["items"] if not i["ok"]]
    subjects = {i["subject"] for i in report["items"]}
    for name, kind in ENTRIES.items():
        assert (name if kind == "upstreamed" else f"alone: {name}") in subjects, name


def test_radar_of_the_set_against_its_release_is_clean_or_upstreamed(pristine_sglang_tree):
    proc = _apply("check", "--against", PIN, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {v["patch"]: v["status"] for v in json.loads(proc.stdout)["verdicts"] if v["version"] == PIN}
    assert set(rows) >= set(ENTRIES)
    assert set(rows.values()) <= {"clean", "upstreamed"}, rows
    assert all(rows[n] == "upstreamed" for n, kind in ENTRIES.items() if kind == "upstreamed")


def test_every_proof_line_lies_in_a_symbol_the_proof_names(pristine_sglang_tree):
    """The rewritten proofs (communicator -> add_norm.py, server_args_glm4 -> arg_groups/model_hook.py, the
    SM120 gate through get_platform()) quote code inside the symbols they name."""
    check_proofs_lie_in_their_symbols(MANIFEST, pristine_sglang_tree)


def test_sm120_proof_rests_on_is_sm100_being_major_10(sglang_patched):
    """flashinfer_mla_sm120's 0.5.23 proof quotes `if get_platform().is_sm100: cutlass`: that excludes SM120
    only because the platform fact is_sm100 is the probe is_sm100_supported, compute capability major 10."""
    from sglang.srt import runtime_context
    from sglang.srt.utils import common

    assert runtime_context._PLATFORM_PROBES["is_sm100"] == "is_sm100_supported"
    assert common.is_sm100_supported.__wrapped__.keywords["device_capability_majors"] == [10]
    assert common.is_sm120_supported.__wrapped__.keywords["device_capability_majors"] == [12]


def test_0523_no_longer_forces_cuda_module_loading(engine_runs):
    """Why pins/0.5.23 dropped CUDA_MODULE_LOADING from engine_env_respect: unpatched 0.5.23 leaves it alone."""
    _, pristine = engine_runs
    assert [case["env"]["CUDA_MODULE_LOADING"] for case in pristine] == [None, None, None]
