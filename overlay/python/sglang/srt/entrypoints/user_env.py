"""sglang-overlay engine_env_respect: values the user set win over the ones the engine forces.

engine._set_envs_and_config runs in the launching process before the scheduler,
detokenizer and tokenizer processes are spawned (they inherit os.environ). In SGLang
0.5.17 it always writes CUDA_DEVICE_MAX_CONNECTIONS=8 and CUDA_MODULE_LOADING=AUTO,
and overwrites NCCL_CUMEM_ENABLE (with --enable-symm-mem), NCCL_NVLS_ENABLE (with
--enable-nccl-nvls or --enable-symm-mem) and NCCL_GRAPH_MIXING_SUPPORT (with
--enable-symm-mem and --dcp-size > 1) even when the user set them, so neither a shell
export nor an env profile can set them. snapshot_user_env() takes what the user set
before that code runs; restore_user_env() puts those values back right after it and
logs each one the engine had changed. Variables the user did not set keep SGLang's
values, so without user values the result is upstream's, byte for byte.
"""

import logging
import os

logger = logging.getLogger(__name__)

RESPECTED = (
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING",
    "NCCL_CUMEM_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_GRAPH_MIXING_SUPPORT",
)

# The NCCL values a server flag needs (what the engine would have written): keeping
# another value the user set is their call, but it may defeat the flag, so say so.
_FLAG_NEEDS = (
    ("enable_symm_mem", "--enable-symm-mem", {"NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}),
    ("enable_nccl_nvls", "--enable-nccl-nvls", {"NCCL_NVLS_ENABLE": "1"}),
)


def snapshot_user_env() -> dict[str, str]:
    return {name: os.environ[name] for name in RESPECTED if name in os.environ}


def restore_user_env(user: dict[str, str], server_args=None) -> list[str]:
    """Put the user's values back; returns the names the engine had overwritten."""
    kept = []
    for name, value in user.items():
        forced = os.environ.get(name)
        if forced == value:
            continue
        os.environ[name] = value
        kept.append(name)
        logger.info(
            "sglang-overlay engine_env_respect: %s=%s from the environment kept (SGLang would set %s)",
            name,
            value,
            forced,
        )
    for attr, flag, needs in _FLAG_NEEDS:
        if not getattr(server_args, attr, False):
            continue
        for name, needed in needs.items():
            if name in kept and user[name] != needed:
                logger.warning(
                    "sglang-overlay engine_env_respect: %s asks for %s=%s, but the "
                    "environment's %s=%s is kept: unset it, or drop the flag",
                    flag,
                    name,
                    needed,
                    name,
                    user[name],
                )
    return kept
