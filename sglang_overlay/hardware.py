"""CUDA compute capabilities of this machine, for patches gated on hardware. Never imports torch."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable

from .errors import BadInput

CAP_ENV = "SGLANG_OVERLAY_CUDA_CAPABILITY"  # e.g. "12.0" or "9.0,9.0": overrides detection (CI, other hosts)


@functools.lru_cache(maxsize=1)
def capabilities() -> tuple[str, ...] | None:
    """The capabilities of the visible GPUs, or None when unknown (no GPU, no nvidia-smi)."""
    forced = os.environ.get(CAP_ENV)
    if forced is not None:
        caps = tuple(c.strip() for c in forced.split(",") if c.strip())
        for c in caps:  # "x" or "9.0 10.0" had been taken as this machine's capability, and every gate refused
            if not re.fullmatch(r"\d+\.\d+", c):
                raise BadInput(
                    f"{CAP_ENV}={forced!r}: {c!r} is not a compute capability like 9.0",
                    hint=f"separate them with commas (`{CAP_ENV}=9.0,10.0`), or set it empty to detect none",
                )
        return caps
    exe = _on_path("nvidia-smi")
    if not exe:
        return None
    import subprocess  # only here: `status` asks on every run, and most machines that run it have no GPU

    try:
        out = subprocess.run(
            [exe, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    caps = tuple(line.strip() for line in out.stdout.splitlines() if line.strip())
    return caps if out.returncode == 0 and caps else None


def _on_path(name: str) -> str | None:
    """shutil.which for one plain name, without importing shutil (and bz2, lzma with it: ~2 ms of `status`)."""
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(d or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (record.py says why)
if TYPE_CHECKING:
    from typing import Protocol

    class Gated(Protocol):
        # read-only members: a frozen patch type satisfies them
        @property
        def name(self) -> str: ...
        @property
        def cuda_capability(self) -> tuple[str, ...]: ...


def blocked(patches: Iterable[Gated]) -> dict[str, str]:
    """Patch name -> why it cannot run here, for each patch whose hardware gate fails on this machine: the one
    place gates are evaluated (status shows it, apply --all leaves those out, a switch refuses them)."""
    return {p.name: why for p in patches if (why := gate_fails(p.cuda_capability))}


def refuse_blocked(patches: Iterable[Gated], override: str = "--ignore-hardware") -> None:
    """`override`: how the caller turns the gate off (the API's ignore_hardware=True)."""
    for name, why in blocked(patches).items():
        raise BadInput(f"{name}: {why}", hint=f"leave it off on this machine, or pass {override}")


def gate_fails(required: tuple[str, ...]) -> str | None:
    """Why a patch gated on `required` cannot run here, or None if it can (or the hardware is unknown)."""
    if not required:
        return None
    have = capabilities()
    if have is None:
        return None
    missing = sorted({c for c in have if c not in required})
    if missing:
        return f"needs compute capability {' or '.join(required)}, this machine has {', '.join(sorted(set(have)))}"
    return None
