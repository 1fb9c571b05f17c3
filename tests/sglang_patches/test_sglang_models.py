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
    monkeypatch.setattr(mod, "get_pp_group", lambda: SimpleNamespace(is_first_rank=True, is_last_rank=True))
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


def test_fp8_kv_converts_only_the_step_slots(mla):
    pool = (torch.randn(1000, 1, 576) * 4).to(torch.float8_e4m3fn)
    idx = torch.tensor([5, 17, 999, 3, 640], dtype=torch.int32)
    out = mla.kv_buffer_for_step(pool, torch.bfloat16, idx)
    assert out.dtype == torch.bfloat16 and out.shape == pool.shape
    assert torch.equal(out[idx.long()], pool[idx.long()].to(torch.bfloat16))  # what the kernel reads
    # the scratch buffer is reused (no new pool-sized allocation per layer/step)
    idx2 = torch.tensor([0, 1, 2], dtype=torch.int32)
    pool2 = (torch.randn(1000, 1, 576) * 4).to(torch.float8_e4m3fn)
    out2 = mla.kv_buffer_for_step(pool2, torch.bfloat16, idx2)
    assert out2.data_ptr() == out.data_ptr()
    assert torch.equal(out2[:3], pool2[:3].to(torch.bfloat16))


def test_fp8_kv_without_step_indices_falls_back_to_full_cast(mla):
    pool = (torch.randn(64, 1, 576) * 4).to(torch.float8_e4m3fn)
    out = mla.kv_buffer_for_step(pool, torch.bfloat16, None)
    assert torch.equal(out, pool.to(torch.bfloat16))


def test_bf16_kv_is_passed_through(mla):
    pool = torch.randn(64, 1, 576, dtype=torch.bfloat16)
    assert mla.kv_buffer_for_step(pool, torch.bfloat16, torch.tensor([1, 2])) is pool


def test_mla_forward_paths_use_the_helper(mla):
    """forward_extend's paged path and forward_decode no longer cast the whole pool."""
    for fn in (mla.FlashInferMLAAttnBackend.forward_extend, mla.FlashInferMLAAttnBackend.forward_decode):
        src = inspect.getsource(fn)
        assert "kv_buffer_for_step(" in src
        assert "get_key_buffer(layer.layer_id).to(q.dtype)" not in src
