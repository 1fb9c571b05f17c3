"""The radar's 72 verdicts (12 patches x 0.5.18-0.5.23) against the real release wheels, as the independent audit
(plain `git apply --check` / `--3way` on the 0.5.17 blobs, proofs read by hand) called them. F1 of issue 41:
flashinfer_mla_sm120 is proof-failed from 0.5.19 (its fix is upstream re-spelled), not a conflict.

The wheels (~25-40 MB each) come from the release cache, fetched there where missing, as `check --against`
does: never a skip on a fresh machine."""

from __future__ import annotations

from sglang_overlay.compat import radar
from sglang_overlay.fetch import WheelSource, pinned_wheel, release_wheel

VERSIONS = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
UPM = "upstreamed-moved"
TABLE = {
    "overlay_identity": ("offset", "conflict", "conflict", "conflict", "conflict", "conflict"),
    "kimi_k25": ("upstreamed",) * 6,
    "deepseek_v2": ("offset", "offset", "offset", "conflict", "conflict", "conflict"),
    "llama_eagle3": ("clean", "clean", "clean", "clean", "offset", "offset"),
    "flashinfer_mla": ("offset", "offset", "offset", "offset", "needs-3way", "needs-3way"),
    "flashinfer_mla_sm120": ("upstreamed",) + ("proof-failed",) * 5,
    "communicator": ("upstreamed", "upstreamed", "upstreamed", UPM, UPM, UPM),
    "server_args_glm4": ("upstreamed", UPM, UPM, UPM, UPM, UPM),
    "eagle_profiling": ("needs-3way",) + ("conflict",) * 5,
    "oea_topk": ("conflict",) * 6,
    "engine_env_respect": ("offset",) + ("conflict",) * 5,
    "nccl_env_log": ("needs-3way",) * 6,
}


def test_radar_matches_the_audit_on_all_72(project_manifest):
    wheels = {v: release_wheel(project_manifest.pin, v) for v in VERSIONS}
    assert [p.name for p in project_manifest.patches] == list(TABLE)
    sources = {v: WheelSource(w) for v, w in wheels.items()}
    pin = WheelSource(pinned_wheel(project_manifest.pin))
    got = radar(project_manifest, list(VERSIONS), lambda v: sources[v].read, pin.read, lambda v: sources[v].paths)
    wrong = [
        (v.patch, v.version, v.status, TABLE[v.patch][VERSIONS.index(v.version)])
        for v in got
        if v.status != TABLE[v.patch][VERSIONS.index(v.version)]
    ]
    assert len(got) == 72 and not wrong, wrong
    sm120 = next(v for v in got if v.patch == "flashinfer_mla_sm120" and v.version == "0.5.23")
    # the re-spelled fix is shown, and the proof named as what to edit
    assert "get_platform().is_sm100" in sm120.detail and "edit flashinfer_mla_sm120's proof" in sm120.detail
