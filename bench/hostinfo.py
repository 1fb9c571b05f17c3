"""GPU name and package versions for the record, without importing torch or sglang (metadata only)."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from importlib import metadata

PACKAGES = ("sglang", "torch", "flashinfer-python", "sglang-kernel", "sgl-kernel", "transformers", "triton")


def gpu_names() -> list[str]:
    if os.environ.get("BENCH_GPU_NAME"):  # for tests and hosts without nvidia-smi on PATH
        return [os.environ["BENCH_GPU_NAME"]]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def gpu_kind(name: str) -> str:
    """The GPU's model from one gpu_names() entry (nvidia-smi's "name, driver")."""
    return name.split(",")[0].strip()


def gpu_slug(names: list[str]) -> str:
    if not names:
        return "nogpu"
    first = gpu_kind(names[0])
    first = re.sub(r"^NVIDIA\s+", "", first)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", first).strip("-").lower()
    return f"{len(names)}x{slug}" if len(names) > 1 else slug


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def host_record() -> dict:
    names = gpu_names()
    return {"hostname": platform.node(), "gpus": names, "gpu_slug": gpu_slug(names), "versions": versions()}
