"""deepseek_v2 (aux-id validation, final-layer capture), llama_eagle3 (draft_vocab_size), flashinfer_mla (fp8 KV)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import SimpleNamespace

import pytest
import torch


# ---------------------------------------------------------------- deepseek_v2
@pytest.fixture(scope="module")
def dsv2(patched):
    return patched("sglang.srt.models.deepseek_v2")


def _fake_causal_lm(num_layers=4, last_rank=True):
    return SimpleNamespace(
        pp_group=SimpleNamespace(is_last_rank=last_rank),
        config=SimpleNamespace(num_hidden_layers=num_layers),
        model=SimpleNamespace(layers_to_capture=[]),
        capture_aux_hidden_states=False,
    )


@pytest.mark.parametrize(
    "ids, expect",
    [
        ([0, 1, 2], [0, 1, 2]),
        ([0, 2, 4], [0, 2, 4]),  # 4 == num_hidden_layers: the final layer's output
        ([1, 2, 3], [2, 3, 4]),  # upstream's +1 shift when the first id is 1
        ([3, 0, 1], [3, 0, 1]),
    ],
)
def test_eagle3_ids_accepted(dsv2, ids, expect):
    fake = _fake_causal_lm()
    dsv2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture(fake, ids)
    assert fake.model.layers_to_capture == expect and fake.capture_aux_hidden_states


@pytest.mark.parametrize(
    "ids, pattern",
    [
        ([1, 2, 2], r"\[1, 2, 2\] \(after the \+1 shift .*\[2, 3, 3\]\) contain duplicates \[3\]"),
        ([0, 2, 2], r"\[0, 2, 2\] contain duplicates \[2\]; each id must be distinct"),
        ([0, 1, 5], r"out-of-range ids \[5\]; valid ids are 0\.\.4 for a target with num_hidden_layers=4"),
        ([1, 2, 4], r"after the \+1 shift .*out-of-range ids \[5\]"),
        ([-1, 0, 1], r"out-of-range ids \[-1\]"),
        (None, r"duplicates \[2\]"),  # upstream default [2, n//2, n-3] collides for 4 layers
    ],
)
def test_eagle3_bad_ids_fail_at_load_with_clear_message(dsv2, ids, pattern):
    fake = _fake_causal_lm()
    with pytest.raises(ValueError, match=pattern) as e:
        dsv2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture(fake, ids)
    assert "EAGLE-3 aux hidden state layer ids" in str(e.value)


def test_eagle3_ids_not_checked_off_the_last_pp_rank(dsv2):
    fake = _fake_causal_lm(last_rank=False)
    dsv2.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture(fake, [2, 2])
    assert fake.model.layers_to_capture == []


def _final_capture_stmt(dsv2):
    """The patched `if self.config.num_hidden_layers in self.layers_to_capture:` block of DeepseekV2Model.forward."""
    src = textwrap.dedent(inspect.getsource(dsv2.DeepseekV2Model.forward))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.If) and "num_hidden_layers in self.layers_to_capture" in ast.unparse(node.test):
            return compile(ast.Module(body=[node], type_ignores=[]), "<final-capture>", "exec")
    raise AssertionError("final-layer capture block not found in DeepseekV2Model.forward")


def test_final_layer_output_is_captured(dsv2, patched):
    """DeepseekV2Model.forward needs a distributed runtime and a GPU, so this runs the patched capture
    block itself (taken from the source) after a simulated layer loop, with the real AuxHiddenStatePacker:
    with ids [0, 2, 4] on a 4-layer target, finalize() gets all three captures in layer order."""
    aux_mod = patched("sglang.srt.layers.aux_hidden_states")
    block = _final_capture_stmt(dsv2)
    num_layers, ids = 4, [0, 2, 4]
    packer = aux_mod.AuxHiddenStatePacker(len(ids))
    hidden, residual = torch.randn(3, 8), torch.randn(3, 8)
    inputs = []
    for i in range(num_layers):  # layer i captures its input (the residual stream so far)
        layer_in = torch.randn(3, 8)
        inputs.append(layer_in)
        if i in ids:
            packer.append(layer_in)
    this = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=num_layers), layers_to_capture=ids)
    exec(block, {}, {"self": this, "hidden_states": hidden, "residual": residual, "aux_hidden_states": packer})
    out = packer.finalize()
    assert out.shape == (3, 8 * 3)
    assert torch.equal(out[:, :8], inputs[0]) and torch.equal(out[:, 8:16], inputs[2])
    assert torch.allclose(out[:, 16:], hidden + residual)
    # residual None (fused final add): the hidden state itself
    packer = aux_mod.AuxHiddenStatePacker(1)
    this.layers_to_capture = [4]
    exec(block, {}, {"self": this, "hidden_states": hidden, "residual": None, "aux_hidden_states": packer})
    assert torch.equal(packer.finalize(), hidden)
    # an id below num_hidden_layers adds nothing here
    packer = aux_mod.AuxHiddenStatePacker(1)
    this.layers_to_capture = [3]
    exec(block, {}, {"self": this, "hidden_states": hidden, "residual": residual, "aux_hidden_states": packer})
    assert len(packer) == 0


# ---------------------------------------------------------------- llama_eagle3
DRAFT_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
}


@pytest.fixture
def eagle3(patched, monkeypatch):
    """The patched LlamaForCausalLMEagle3.__init__ with its distributed parts replaced by recorders
    (LlamaModel, ParallelLMHead and LogitsProcessor need an initialized tensor-parallel group)."""
    mod = patched("sglang.srt.models.llama_eagle3")
    seen = {}

    class FakeModel(torch.nn.Module):
        def __init__(self, config, quant_config=None, prefix=""):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(config.vocab_size, 4)
            self.layers = []

    class FakeHead(torch.nn.Module):
        def __init__(self, num_embeddings, embedding_dim, quant_config=None, prefix=""):
            super().__init__()
            seen["lm_head_vocab"] = num_embeddings

    class FakeLogits:
        def __init__(self, config):
            seen["logits_vocab"] = config.vocab_size

    monkeypatch.setattr(mod, "LlamaModel", FakeModel)
    monkeypatch.setattr(mod, "ParallelLMHead", FakeHead)
    monkeypatch.setattr(mod, "LogitsProcessor", FakeLogits)
    pp_group = SimpleNamespace(is_first_rank=True, is_last_rank=True)
    if hasattr(mod, "get_pp_group"):  # 0.5.17; 0.5.23 reads it from the runtime context (get_parallel)
        monkeypatch.setattr(mod, "get_pp_group", lambda: pp_group)
    else:
        monkeypatch.setattr(mod, "get_parallel", lambda: SimpleNamespace(pp_group=pp_group))
    monkeypatch.setattr(mod, "get_spec", lambda: SimpleNamespace(speculative_draft_window_size=None))
    return mod, seen


def _config(tmp_path, **overrides):
    import json

    from transformers import AutoConfig

    cfg = dict(DRAFT_CONFIG, **overrides)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return AutoConfig.from_pretrained(tmp_path)


def test_transformers_drops_missing_draft_vocab_size(tmp_path):
    """Why the patch exists: with transformers 5.x a key absent from config.json is no attribute."""
    cfg = _config(tmp_path)
    assert not hasattr(cfg, "draft_vocab_size")


def test_draft_config_without_draft_vocab_size_loads(eagle3, tmp_path):
    mod, seen = eagle3
    cfg = _config(tmp_path)
    model = mod.LlamaForCausalLMEagle3(cfg)
    assert cfg.draft_vocab_size == 1000
    assert seen == {"lm_head_vocab": 1000, "logits_vocab": 1000}
    assert model.load_lm_head_from_target is True  # same as an explicit null upstream


def test_draft_vocab_size_present_is_unchanged(eagle3, tmp_path):
    mod, seen = eagle3
    cfg = _config(tmp_path, draft_vocab_size=320)
    model = mod.LlamaForCausalLMEagle3(cfg)
    assert seen == {"lm_head_vocab": 320, "logits_vocab": 320}
    assert model.load_lm_head_from_target is False


def test_tied_draft_without_draft_vocab_size(eagle3, tmp_path):
    mod, seen = eagle3
    cfg = _config(tmp_path, tie_word_embeddings=True)
    model = mod.LlamaForCausalLMEagle3(cfg)
    assert model.lm_head is model.model.embed_tokens
    assert seen == {"logits_vocab": 1000}


# ---------------------------------------------------------------- flashinfer_mla
@pytest.fixture(scope="module")
def mla(patched):
    return patched("sglang.srt.layers.attention.flashinfer_mla_backend")


@pytest.fixture(scope="module")
def kvstep(patched):
    return patched("sglang.srt.layers.attention.mla_kv_step")


def _fp8_pool(rows=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, 1, 576, generator=g) * 4).to(torch.float8_e4m3fn)


def _indices(valid, capacity=64):
    """A reused FlashInfer index buffer: the step's slots, then a stale/garbage tail."""
    buf = torch.full((capacity,), 10**9, dtype=torch.int32)  # out of range: must never be read
    buf[: len(valid)] = torch.tensor(valid, dtype=torch.int32)
    return buf


def test_fp8_kv_converts_only_the_rows_the_step_reads(kvstep):
    step = kvstep.StepKV()
    pool = _fp8_pool()
    first = [5, 17, 999, 3, 640]
    step.record(torch.tensor([0, 3, 5], dtype=torch.int32), 2)  # two requests, 3 + 2 rows
    out = step.buffer(pool, torch.bfloat16, _indices(first))
    assert out.dtype == torch.bfloat16 and out.shape == pool.shape
    rows = torch.tensor(first)
    assert torch.equal(out[rows], pool[rows].to(torch.bfloat16))  # what the kernel reads

    # Next step: new pool contents, other rows. Rows of the first step that this step does not
    # list keep their old values, which proves only the listed rows were converted, and the
    # scratch is reused (no pool-sized allocation per layer or step).
    pool2 = _fp8_pool(seed=1)
    step.record(torch.tensor([0, 3], dtype=torch.int32), 1)
    out2 = step.buffer(pool2, torch.bfloat16, _indices([5, 0, 1]))
    assert out2.data_ptr() == out.data_ptr()
    assert torch.equal(out2[[5, 0, 1]], pool2[[5, 0, 1]].to(torch.bfloat16))
    assert torch.equal(out2[[17, 999, 3, 640]], pool[[17, 999, 3, 640]].to(torch.bfloat16))
    assert not torch.equal(out2[[17, 999]], pool2[[17, 999]].to(torch.bfloat16))


def test_fp8_kv_row_count_comes_from_the_recorded_indptr(kvstep):
    """Graph replay: the same index buffer, a new nnz written by record() before each step."""
    step = kvstep.StepKV()
    pool = _fp8_pool()
    idx = _indices([7, 8, 9, 10])
    step.record(torch.tensor([0, 2], dtype=torch.int32), 1)
    step.buffer(pool, torch.bfloat16, idx)
    pool2 = _fp8_pool(seed=2)
    step.record(torch.tensor([0, 1, 4], dtype=torch.int32), 2)
    out = step.buffer(pool2, torch.bfloat16, idx)
    assert torch.equal(out[[7, 8, 9, 10]], pool2[[7, 8, 9, 10]].to(torch.bfloat16))
    assert step.nnz.dtype == torch.int32 and int(step.nnz) == 4


def test_fp8_kv_keeps_the_full_cast_when_no_layout_was_recorded(kvstep):
    pool = _fp8_pool(64)
    step = kvstep.StepKV()
    assert torch.equal(step.buffer(pool, torch.bfloat16, _indices([1])), pool.to(torch.bfloat16))
    step.record(torch.tensor([0, 1], dtype=torch.int32), 1)
    assert step.buffer(pool, torch.bfloat16, None).data_ptr() != pool.data_ptr()
    assert torch.equal(step.buffer(pool, torch.bfloat16, None), pool.to(torch.bfloat16))
    step.record(None, 1)  # decode context parallel
    assert torch.equal(step.buffer(pool, torch.bfloat16, _indices([1])), pool.to(torch.bfloat16))


def test_bf16_kv_is_passed_through(kvstep):
    step = kvstep.StepKV()
    step.record(torch.tensor([0, 2], dtype=torch.int32), 1)
    pool = torch.randn(64, 1, 576, dtype=torch.bfloat16)
    assert step.buffer(pool, torch.bfloat16, _indices([1, 2])) is pool


def test_static_shape_reference_ignores_the_garbage_tail(kvstep):
    pool = _fp8_pool(32)
    dst = torch.zeros(32, 1, 576, dtype=torch.bfloat16)
    kvstep._convert_rows_torch(pool, dst, _indices([4, 2], capacity=8), torch.tensor([2], dtype=torch.int32))
    assert torch.equal(dst[[4, 2]], pool[[4, 2]].to(torch.bfloat16))
    assert dst[[0, 1, 3, 5]].abs().sum() == 0
    # nnz 0: every entry is past nnz, so all are redirected to indices[0] (9 here): that row is converted
    # correctly, the garbage entries are never dereferenced, and no other row changes
    kvstep._convert_rows_torch(pool, dst, _indices([9], capacity=8), torch.tensor([0], dtype=torch.int32))
    assert torch.equal(dst[9], pool[9].to(torch.bfloat16))
    untouched = [r for r in range(32) if r not in (2, 4, 9)]
    assert dst[untouched].abs().sum() == 0


def test_each_backend_gets_its_own_step_state(kvstep):
    """Target, verify and draft backends plan different layouts: one StepKV each, made once."""
    a, b = SimpleNamespace(), SimpleNamespace()
    assert kvstep.step_kv_of(a) is kvstep.step_kv_of(a)
    assert kvstep.step_kv_of(a) is not kvstep.step_kv_of(b)
    kvstep.step_kv_of(a).record(torch.tensor([0, 3], dtype=torch.int32), 1)
    assert kvstep.step_kv_of(a).recorded and not kvstep.step_kv_of(b).recorded


class _Wrapper:
    def __init__(self):
        self.planned = None

    def plan(self, *args):
        self.planned = args


def test_decode_updater_records_the_planned_row_count(mla, kvstep):
    """The EAGLE draft-decode layout (spec_info): record() sees the indptr the wrapper is planned with."""
    step = kvstep.StepKV()
    updater = SimpleNamespace(
        attn_backend=SimpleNamespace(_overlay_kv_step=step),
        scaling=0.1,
        num_local_heads=16,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        data_type=torch.bfloat16,
    )
    spec = SimpleNamespace(
        kv_indptr=torch.tensor([0, 5, 12, 0], dtype=torch.int32), kv_indices=_indices(list(range(12)))
    )
    wrapper = _Wrapper()
    mla.FlashInferMLAIndicesUpdaterDecode.call_begin_forward(
        updater,
        wrapper,
        torch.tensor([0, 1]),
        torch.tensor([5, 7]),
        12,
        torch.tensor([0, 1, 2], dtype=torch.int32),
        None,
        spec_info=spec,
    )
    assert wrapper.planned is not None and step.recorded and int(step.nnz) == 12


def test_mla_forward_paths_read_through_the_step_buffer(mla):
    """forward_extend's paged path and forward_decode no longer cast the whole pool themselves."""
    for fn in (mla.FlashInferMLAAttnBackend.forward_extend, mla.FlashInferMLAAttnBackend.forward_decode):
        src = inspect.getsource(fn)
        assert "step_kv_of(self).buffer(" in src and '"_kv_indices_buf"' in src
        assert "get_key_buffer(layer.layer_id).to(q.dtype)" not in src


_INTERPRETED_KERNEL = r"""
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("mla_kv_step", sys.argv[1])
kv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kv)
g = torch.Generator().manual_seed(0)
for src_dtype, dst_dtype in ((torch.float8_e4m3fn, torch.bfloat16), (torch.bfloat16, torch.float32)):
    src = (torch.randn(300, 1, 576, generator=g) * 4).to(src_dtype)
    idx = torch.full((100,), 10**6, dtype=torch.int32)  # garbage tail past nnz
    idx[:37] = torch.randperm(300, generator=g)[:37].int()
    for nprog in (1, 4):  # one program loops over every row block; several split them
        dst = torch.zeros(300, 1, 576, dtype=dst_dtype)
        kv._get_triton_kernel()[(nprog,)](src, dst, idx, torch.tensor([37], dtype=torch.int32), 576,
                                          NPROG=nprog, BLOCK_ROWS=8, BLOCK_COLS=1024)
        ref = torch.zeros_like(dst)
        kv._convert_rows_torch(src, ref, idx, torch.tensor([37], dtype=torch.int32))
        assert torch.equal(dst, ref), (src_dtype, nprog)
        assert int((dst.abs().sum((1, 2)) > 0).sum()) == 37
print("kernel ok")
"""


def test_triton_row_kernel_in_the_interpreter(kvstep, tmp_path):
    """The GPU kernel's logic (device-side row count, grid stride, masks, fp8 -> bf16) on the CPU."""
    import os
    import subprocess
    import sys

    script = tmp_path / "kernel.py"
    script.write_text(_INTERPRETED_KERNEL)
    r = subprocess.run(
        [sys.executable, str(script), kvstep.__file__],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=600,
    )
    assert r.returncode == 0 and "kernel ok" in r.stdout, r.stdout + r.stderr


def _allocated_bytes(fn) -> int:
    """CPU bytes the ops inside fn allocate (torch's profiler, each op's own allocations)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0)


@pytest.mark.parametrize("entries_per_row", [0.5, 8])
def test_torch_fallback_memory_is_bounded_by_the_pool(kvstep, entries_per_row):
    """Under CUDA graphs the index buffer is the wrapper's whole max_bs x context_len buffer, longer than the
    pool: the fallback must not gather one row per entry (review: 2M entries, 200k-row pool, +2.9 GB)."""
    rows = 256
    pool = _fp8_pool(rows)
    used = [3, 200, 7, 255]
    idx = _indices(used, capacity=int(rows * entries_per_row))
    dst = torch.zeros(rows, 1, 576, dtype=torch.bfloat16)
    nnz = torch.tensor([len(used)], dtype=torch.int32)
    allocated = _allocated_bytes(lambda: kvstep._convert_rows_torch(pool, dst, idx, nnz))
    pristine = _allocated_bytes(lambda: pool.to(torch.bfloat16))
    assert pristine == rows * 576 * 2  # the measurement sees the pool-sized cast
    assert allocated <= pristine, (allocated, pristine)
    assert torch.equal(dst[used], pool[used].to(torch.bfloat16))


def test_torch_fallback_full_cast_goes_into_the_scratch(kvstep):
    """The long-buffer case through StepKV: the reused scratch holds the whole pool converted, nothing new."""
    step = kvstep.StepKV()
    pool = _fp8_pool(64)
    step.record(torch.tensor([0, 2, 3], dtype=torch.int32), 2)
    first = step.buffer(pool, torch.bfloat16, _indices([9, 1, 60], capacity=64 * 4))
    assert torch.equal(first, pool.to(torch.bfloat16))
    pool2 = _fp8_pool(64, seed=3)
    again = step.buffer(pool2, torch.bfloat16, _indices([5], capacity=64 * 4))
    assert again.data_ptr() == first.data_ptr() and torch.equal(again, pool2.to(torch.bfloat16))
