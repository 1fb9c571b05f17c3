"""engine_env_respect: values the user set win over the ones SGLang's engine forces, in the real engine code run
in a spawned launcher process, with the scheduler process it spawns logging them (nccl_env_log); and `launch`
warning when a profile sets a forced variable without the patch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import _nccl_child
import pytest
from test_sglang_nccl_env import HERE, ROOT, _spawn

USER = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}
CASES = [
    (USER, {}, True),  # an env profile for a PCIe host, plain server flags: each rank sees the user's values
    (USER, {"enable_symm_mem": True}, False),  # a flag that needs other values: kept, with a warning
    ({}, {"enable_symm_mem": True}, False),  # nothing set by the user: SGLang's values, as upstream
]


@pytest.fixture(scope="module")
def engine_runs(sglang_patched, pristine_sglang_tree):
    patched = _spawn(_nccl_child.run_engine_env, str(sglang_patched), str(HERE), CASES)
    pristine = _spawn(_nccl_child.run_engine_env, str(pristine_sglang_tree / "python"), str(HERE), CASES)
    assert Path(patched["engine_file"]).resolve().is_relative_to(Path(sglang_patched).resolve())
    assert Path(pristine["engine_file"]).resolve().is_relative_to(pristine_sglang_tree.resolve())
    return patched["cases"], pristine["cases"]


def test_pristine_engine_overwrites_what_the_user_set(engine_runs):
    """What the review found: an env profile cannot set these on unpatched 0.5.17."""
    _, pristine = engine_runs
    assert pristine[0]["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert pristine[1]["env"]["NCCL_CUMEM_ENABLE"] == "1" and pristine[1]["env"]["NCCL_NVLS_ENABLE"] == "1"


def test_user_values_win_and_every_rank_logs_them(engine_runs):
    patched, pristine = engine_runs
    first = patched[0]
    assert first["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    # not set by the user: SGLang's value (0.5.17 writes AUTO, 0.5.23 nothing), as unpatched
    assert first["env"]["CUDA_MODULE_LOADING"] == pristine[0]["env"]["CUDA_MODULE_LOADING"]
    assert first["env"]["NCCL_NVLS_ENABLE"] == "0" and first["env"]["NCCL_CUMEM_ENABLE"] == "0"
    kept = [m for lvl, m in first["log"] if "engine_env_respect" in m]
    assert kept == [
        "sglang-overlay engine_env_respect: CUDA_DEVICE_MAX_CONNECTIONS=1 from the environment kept "
        "(SGLang would set 8)"
    ]
    (line,) = [m for m in first["scheduler"]["log"] if m.startswith("sglang-overlay nccl_env")]
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in line and "NCCL_NVLS_ENABLE=0" in line and "NCCL_CUMEM_ENABLE=0" in line


def test_a_kept_value_that_defeats_a_flag_is_warned(engine_runs):
    patched, _ = engine_runs
    symm = patched[1]
    assert symm["env"]["NCCL_CUMEM_ENABLE"] == "0" and symm["env"]["NCCL_NVLS_ENABLE"] == "0"
    warnings = sorted(m for lvl, m in symm["log"] if lvl == "WARNING" and "engine_env_respect" in m)
    assert warnings == [
        "sglang-overlay engine_env_respect: --enable-symm-mem asks for NCCL_CUMEM_ENABLE=1, but the environment's "
        "NCCL_CUMEM_ENABLE=0 is kept: unset it, or drop the flag",
        "sglang-overlay engine_env_respect: --enable-symm-mem asks for NCCL_NVLS_ENABLE=1, but the environment's "
        "NCCL_NVLS_ENABLE=0 is kept: unset it, or drop the flag",
    ]


def test_without_user_values_the_patched_engine_is_upstream(engine_runs):
    patched, pristine = engine_runs
    assert patched[2]["env"] == pristine[2]["env"]
    assert not [m for _, m in patched[2]["log"] if "engine_env_respect" in m]


# ---------------------------------------------------------------- launch's profile check
PROFILE_MANIFEST = """\
schema: 1
extends: {root}/manifest.yaml
env_profiles:
  pcie_tuned:
    description: test profile
    vars:
      CUDA_DEVICE_MAX_CONNECTIONS: {{value: "1", why: "test"}}
      NCCL_NVLS_ENABLE: {{value: "0", why: "test"}}
      SGLANG_OEA_K0: {{value: "3", why: "test"}}
"""


def _dry_launch(tmp_path, tree, patches, *server_args):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(PROFILE_MANIFEST.format(root=ROOT))
    cmd = [
        sys.executable,
        str(ROOT / "apply.py"),
        "--manifest",
        str(manifest),
        "--tree",
        str(tree),
        "launch",
        "--patches",
        patches,
        "--env-profile",
        "pcie_tuned",
        "--dry-run",
        "--",
        "--model-path",
        "M",
        *server_args,
    ]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_launch_warns_when_a_profile_sets_what_sglang_overwrites(tmp_path, pristine_sglang_tree):
    p = _dry_launch(tmp_path, pristine_sglang_tree, "overlay_identity")
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("sglang-overlay: warning:")]
    assert warnings == [
        "sglang-overlay: warning: env profile pcie_tuned sets CUDA_DEVICE_MAX_CONNECTIONS=1, but SGLang overwrites "
        "it (always) unless engine_env_respect is applied: add it to the set (--patches ...,engine_env_respect) or "
        "drop CUDA_DEVICE_MAX_CONNECTIONS from the profile",
        "sglang-overlay: warning: env profile pcie_tuned sets SGLANG_OEA_K0=3, which only oea_topk reads, and the "
        "set does not carry it: the variable has no effect",
    ]  # NCCL_NVLS_ENABLE: SGLang keeps it without --enable-nccl-nvls / --enable-symm-mem
    flagged = _dry_launch(tmp_path, pristine_sglang_tree, "overlay_identity", "--enable-nccl-nvls")
    assert "sets NCCL_NVLS_ENABLE=0, but SGLang overwrites it (--enable-nccl-nvls)" in flagged.stderr


def test_launch_is_quiet_when_the_set_carries_the_readers(tmp_path, pristine_sglang_tree):
    p = _dry_launch(tmp_path, pristine_sglang_tree, "engine_env_respect,oea_topk", "--enable-symm-mem")
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr and "CUDA_DEVICE_MAX_CONNECTIONS=1" in p.stdout


def test_a_bad_sglang_forces_is_refused_naming_file_and_key(tmp_path, pristine_sglang_tree):
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(f"""\
schema: 1
extends: {ROOT}/manifest.yaml
patches:
  - name: site_env
    description: test
    kind: overlay
    category: compat
    overlay: [python/sglang/site_env.py]
    env:
      CUDA_DEVICE_MAX_CONNECTIONS: {{help: h, sglang_forces: sometimes}}
""")
    (tmp_path / "overlay/python/sglang").mkdir(parents=True)
    (tmp_path / "overlay/python/sglang/site_env.py").write_text("")
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(manifest),
            "--tree",
            str(pristine_sglang_tree),
            "status",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"{manifest}: patches[0] (site_env).env.CUDA_DEVICE_MAX_CONNECTIONS.sglang_forces" in p.stderr
    assert "`sglang_forces: always`" in p.stderr
