"""The tiny model's configs load with transformers (no torch needed) and its tokenizer round-trips."""

from __future__ import annotations

import json

import pytest

from bench.tinymodel import TinyModelSpec, write_model_dirs


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    return write_model_dirs(tmp_path_factory.mktemp("tiny"), TinyModelSpec(routed_experts=384))


def test_configs_load_with_autoconfig(model_dirs):
    from transformers import AutoConfig

    t = AutoConfig.from_pretrained(model_dirs["target"])
    assert t.model_type == "deepseek_v3" and t.architectures == ["DeepseekV3ForCausalLM"]
    assert (t.n_routed_experts, t.num_experts_per_tok, t.n_group, t.topk_group) == (384, 8, 1, 1)
    assert (t.kv_lora_rank, t.qk_rope_head_dim, t.vocab_size) == (512, 64, 32768)
    assert t.scoring_func == "sigmoid" and t.topk_method == "noaux_tc"
    assert t.routed_scaling_factor == pytest.approx(2.827)
    d = AutoConfig.from_pretrained(model_dirs["draft"])
    assert d.architectures == ["LlamaForCausalLMEagle3"] and d.num_hidden_layers == 1
    assert d.hidden_size == t.hidden_size and d.draft_vocab_size == 32768
    ids = d.eagle_config["eagle_aux_hidden_state_layer_ids"]
    assert ids == [0, 1, 2] and len(set(ids)) == len(ids) and max(ids) < t.num_hidden_layers


def test_draft_variants_sit_at_the_patched_edges(model_dirs):
    from transformers import AutoConfig

    t = AutoConfig.from_pretrained(model_dirs["target"])
    plain = json.loads((model_dirs["draft"] / "config.json").read_text())
    raw = {
        v: json.loads((model_dirs[v] / "config.json").read_text()) for v in ("draft_edge", "draft_final", "draft_bad")
    }
    ids = {v: cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] for v, cfg in raw.items()}
    L = t.num_hidden_layers
    assert ids == {"draft_edge": [0, 1, L], "draft_final": [0, 1, L], "draft_bad": [0, 1, L + 1]}
    assert all(i[0] != 1 for i in ids.values())  # 1 first would trigger upstream's +1 shift
    assert "draft_vocab_size" not in raw["draft_edge"]
    assert raw["draft_final"]["draft_vocab_size"] == raw["draft_bad"]["draft_vocab_size"] == 32768
    for cfg in raw.values():  # otherwise the plain draft
        assert {k: v for k, v in plain.items() if k not in ("draft_vocab_size", "eagle_config")} == {
            k: v for k, v in cfg.items() if k not in ("draft_vocab_size", "eagle_config")
        }


def test_tokenizer_round_trips_and_covers_vocab(model_dirs):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dirs["target"])
    assert type(tok).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")
    text = "The draft model verifies 4 tokens per step: latency 29 ms? Ünïcode ✓ and tabs\tok."
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()) // 2  # BPE merges actually happened
    assert len(tok) == 32768
    assert tok.decode([32767]) != ""  # every id a dummy-weight model can emit detokenizes
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    meta = json.loads((model_dirs["target"] / "tokenizer_config.json").read_text())
    assert meta["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((model_dirs["target"] / "generation_config.json").read_text())["eos_token_id"] == 1


def test_kimi_width_profile_configs_load_with_autoconfig(tmp_path):
    """bench tinymodel --profile kimi-width: Kimi-K2's width in 7 layers; the draft's heads 128 wide (FlashInfer).
    A spec SGLang cannot run is refused before anything is written."""
    from transformers import AutoConfig

    from bench.cli import main

    assert main(["tinymodel", str(tmp_path), "--profile", "kimi-width"]) == 0
    t = AutoConfig.from_pretrained(tmp_path / "target")
    assert (t.num_hidden_layers, t.hidden_size, t.num_attention_heads) == (7, 7168, 64)
    assert (t.n_routed_experts, t.num_experts_per_tok, t.moe_intermediate_size) == (64, 8, 2048)
    assert (t.kv_lora_rank, t.qk_rope_head_dim) == (512, 64)
    d = AutoConfig.from_pretrained(tmp_path / "draft")
    assert d.head_dim == 128 and d.hidden_size == 7168 and d.num_attention_heads == 64
    assert d.eagle_config["eagle_aux_hidden_state_layer_ids"] == [0, 3, 5]
    with pytest.raises(ValueError, match=r"vocab < 10000 crashes sglang\.bench_one_batch"):
        write_model_dirs(tmp_path / "small", TinyModelSpec(vocab=4096))
    assert not (tmp_path / "small").exists()
