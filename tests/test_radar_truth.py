"""The four radar rows an independent check (plain `git apply --check` / `--3way` against the 0.5.17 blobs)
found wrong, each rebuilt as a fixture release from the real 0.5.17 files the way upstream changed them:
a proof whose code moved is `upstreamed-moved` with where, and 3-way results are per file."""

from __future__ import annotations

import pytest

from sglang_overlay.compat import classify
from sglang_overlay.fetch import WheelSource, pinned_wheel
from sglang_overlay.pysymbols import symbol_span

SARGS = "python/sglang/srt/server_args.py"
COMM = "python/sglang/srt/layers/communicator.py"
HOOK = "python/sglang/srt/arg_groups/model_hook.py"
ADD_NORM = "python/sglang/srt/layers/layer_boundary/residual/add_norm.py"
SCHED = "python/sglang/srt/managers/scheduler.py"
EAGLE = "python/sglang/srt/speculative/eagle_worker_v2.py"
DSV2 = "python/sglang/srt/models/deepseek_v2.py"
TOPK = "python/sglang/srt/layers/moe/topk.py"


@pytest.fixture(scope="module")
def pin(project_manifest):
    return WheelSource(pinned_wheel(project_manifest.pin))


def release(pin, **changes):
    """(reader, lister) of a fixture release: the pin's files with `changes` (None removes one)."""
    paths = sorted((set(pin.paths()) | set(changes)) - {p for p, d in changes.items() if d is None})

    def read(path):
        return changes[path] if path in changes else pin.read(path)

    return read, lambda: paths


def text(pin, path):
    return pin.read(path).decode()


def hunk(patch, path, index):
    return next(h for h in patch.diff.hunks if h.file == path and h.index == index)


def context_edit(src: str, line: int) -> bytes:
    lines = src.splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + "  # upstream edit\n"
    return "".join(lines).encode()


def insert_after(src: str, line: int) -> bytes:
    lines = src.splitlines(keepends=True)
    lines.insert(line, "        # upstream inserted this\n")
    return "".join(lines).encode()


def test_server_args_glm4_moved_to_model_hook_is_upstreamed_moved(project_manifest, pin):
    """0.5.19+: the identical GLM-4-MoE block moved out of ServerArgs into arg_groups/model_hook.py."""
    src = text(pin, SARGS)
    start = src.index('        elif model_arch in ["Glm4MoeForCausalLM"]:')
    end = src.index("            pass\n", start) + len("            pass\n")
    block = src[start:end]
    hook = (
        "def handle_model_specific_adjustments(server_args):\n"
        "    model_arch = server_args.get_model_config().hf_config.architectures[0]\n"
        '    if model_arch in ["DeepseekV3ForCausalLM"]:\n'
        "        pass\n" + "".join(line[4:] for line in block.splitlines(keepends=True))
    )
    read, paths = release(pin, **{SARGS: (src[:start] + src[end:]).encode(), HOOK: hook.encode()})
    v = classify(project_manifest.patch("server_args_glm4"), read, "0.5.19", pin.read, paths)
    assert v.status == "upstreamed-moved", v
    assert HOOK in v.detail and "handle_model_specific_adjustments" in v.detail
    # without the release's file list the radar can only say the proof fails (not a conflict: nothing clashed)
    assert classify(project_manifest.patch("server_args_glm4"), read, "0.5.19", pin.read).status == "proof-failed"


def test_communicator_gate_in_add_norm_is_upstreamed_moved_not_target_missing(project_manifest, pin):
    """0.5.21+: communicator.py is gone; the SM90/SM100-only gate lives on in add_norm.py under a new name."""
    src = text(pin, COMM)
    a, b = symbol_span(src, "apply_flashinfer_allreduce_fusion")
    func = "".join(src.splitlines(keepends=True)[a - 1 : b]).replace(
        "def apply_flashinfer_allreduce_fusion", "def flashinfer_ar_fusion_applies"
    )
    read, paths = release(pin, **{COMM: None, ADD_NORM: ("import torch\n\n\n" + func).encode()})
    v = classify(project_manifest.patch("communicator"), read, "0.5.21", pin.read, paths)
    assert v.status == "upstreamed-moved", v
    assert ADD_NORM in v.detail and "flashinfer_ar_fusion_applies" in v.detail


def one_conflicts_one_merges(pin, p, conflicting: tuple[str, int], merging: str, version: str):
    """Upstream adds a line where hunk `conflicting[1]` of `conflicting[0]` adds its own (a conflict) and edits a
    context line of the first hunk of `merging` (merges): the verdict and its detail up to the merging list."""
    bad = insert_after(text(pin, conflicting[0]), hunk(p, conflicting[0], conflicting[1]).first_change)
    good = context_edit(text(pin, merging), hunk(p, merging, 1).source_start)
    read, paths = release(pin, **{conflicting[0]: bad, merging: good})
    v = classify(p, read, version, pin.read, paths)
    assert v.status == "conflict", v
    assert v.files[conflicting[0]] == "conflict" and v.files[merging] == "merged", v.files
    return v, v.detail.split("; merges cleanly:")[0]


def test_eagle_profiling_names_only_the_file_that_conflicts(project_manifest, pin):
    """0.5.19: scheduler.py conflicts; eagle_worker_v2.py merges cleanly and must not be listed as conflicting."""
    v, failing = one_conflicts_one_merges(pin, project_manifest.patch("eagle_profiling"), (SCHED, 1), EAGLE, "0.5.19")
    assert v.files == {SCHED: "conflict", EAGLE: "merged"}
    assert SCHED in failing and EAGLE not in failing and "Scheduler.get_internal_state" in failing
    assert v.detail.endswith(f"merges cleanly: {EAGLE}")


def test_oea_topk_deepseek_v2_merges_while_topk_conflicts(project_manifest, pin):
    """0.5.23: deepseek_v2.py merges cleanly (the old radar listed it among the conflicts)."""
    p = project_manifest.patch("oea_topk")
    v, failing = one_conflicts_one_merges(pin, p, (TOPK, 3), DSV2, "0.5.23")
    assert all(s == "clean" for f, s in v.files.items() if f not in (DSV2, TOPK))
    assert DSV2 not in failing and "select_experts" in failing
    # the same patch on a release where only deepseek_v2.py changed: a 3-way merge, not a conflict
    dsv2 = context_edit(text(pin, DSV2), hunk(p, DSV2, 1).source_start)
    read, paths = release(pin, **{DSV2: dsv2})
    v = classify(p, read, "0.5.23", pin.read, paths)
    assert v.status == "needs-3way" and v.files[DSV2] == "merged", v
