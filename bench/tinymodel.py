"""`bench tinymodel OUT [--profile tiny|kimi-width]`: a tiny DeepSeek-V3/Kimi target and its EAGLE-3 drafts (configs
and tokenizer; SGLang's `--load-format dummy` makes the weights), at values known to run with sglang 0.5.17
(shared/notes/sglang-0.5.17-targets.md): MLA dims FlashInfer has kernels for, vocab >= 10000, 64 experts.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
DRAFT_HEAD_DIM = 128  # FlashInfer needs head_dim 64/128/256; Kimi's 7168 / 64 = 112 fails in the draft's graph capture
PROFILES: dict[str, dict] = {
    "tiny": {},
    "kimi-width": {"layers": 7, "hidden": 7168, "heads": 64, "moe_intermediate": 2048},
}


@dataclass(frozen=True)
class TinyModelSpec:
    layers: int = 4
    hidden: int = 2048
    heads: int = 16
    routed_experts: int = 64
    experts_per_tok: int = 8
    shared_experts: int = 1
    moe_intermediate: int = 512
    dense_intermediate: int = 4096
    first_k_dense: int = 1
    q_lora_rank: int = 768
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    vocab: int = 32768
    max_positions: int = 4096
    routed_scaling_factor: float = 2.827

    def aux_ids(self) -> list[int]:
        """EAGLE-3's aux layer ids: low, middle, second-to-last (pristine 0.5.17 cannot capture id == layers)."""
        n = self.layers
        return [0, (n - 1) // 2, n - 2] if n >= 4 else list(range(max(1, n - 1)))

    def validate(self) -> None:
        for bad, why in (
            (self.hidden % self.heads, f"hidden {self.hidden} not divisible by heads {self.heads}"),
            (not 1 <= self.experts_per_tok <= self.routed_experts, f"experts_per_tok {self.experts_per_tok} > experts"),
            (not 0 <= self.first_k_dense < self.layers, f"first_k_dense {self.first_k_dense} leaves no MoE layer"),
            (self.vocab < 10000, "vocab < 10000 crashes sglang.bench_one_batch (random ids below 10000)"),
        ):
            if bad:
                raise ValueError(why)


def _shared_config(s: TinyModelSpec) -> dict:
    """Keys the target and the draft must agree on."""
    return {
        "hidden_act": "silu",
        "max_position_embeddings": s.max_positions,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def target_config(s: TinyModelSpec) -> dict:
    return {
        **_shared_config(s),
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "intermediate_size": s.dense_intermediate,
        "moe_intermediate_size": s.moe_intermediate,
        "num_hidden_layers": s.layers,
        "num_nextn_predict_layers": 0,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.heads,
        "n_shared_experts": s.shared_experts,
        "n_routed_experts": s.routed_experts,
        "num_experts_per_tok": s.experts_per_tok,
        "routed_scaling_factor": s.routed_scaling_factor,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "norm_topk_prob": True,
        "ep_size": 1,
        "first_k_dense_replace": s.first_k_dense,
        "moe_layer_freq": 1,
        "q_lora_rank": s.q_lora_rank,
        "kv_lora_rank": s.kv_lora_rank,
        "qk_rope_head_dim": s.qk_rope_head_dim,
        "qk_nope_head_dim": s.qk_nope_head_dim,
        "v_head_dim": s.v_head_dim,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def draft_config(s: TinyModelSpec) -> dict:
    return {
        **_shared_config(s),
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": s.vocab,
        "draft_vocab_size": s.vocab,  # pristine llama_eagle3.py l.295 reads it (see the llama_eagle3 patch)
        "hidden_size": s.hidden,
        "target_hidden_size": s.hidden,
        "intermediate_size": s.dense_intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": s.heads,
        "num_key_value_heads": max(1, s.heads // 4),
        "head_dim": DRAFT_HEAD_DIM,
        "mlp_bias": False,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": s.aux_ids(),
            "use_aux_hidden_state": True,
        },
    }


def draft_variants(s: TinyModelSpec) -> dict[str, dict]:
    """Drafts at the edges the deepseek_v2 and llama_eagle3 patches open (gpu_runs.sh steps `edge`, `before`).
    Id num_hidden_layers is the final layer's output; the first id stays 0 (upstream shifts a list starting at 1).
      draft_edge   no draft_vocab_size, ids [0, mid, L]: the patched set serves it; pristine 0.5.17 cannot load it
      draft_final  ids [0, mid, L]: pristine asserts "captured 2 of 3 aux hidden states"
      draft_bad    ids [0, mid, L + 1]: the patched set refuses it at load (out of range)
    """
    mid, last = (s.layers - 1) // 2, s.layers
    out = {}
    for name, ids, keep_vocab in (
        ("draft_edge", [0, mid, last], False),
        ("draft_final", [0, mid, last], True),
        ("draft_bad", [0, mid, last + 1], True),
    ):
        cfg = draft_config(s)
        if not keep_vocab:
            del cfg["draft_vocab_size"]
        cfg["eagle_config"] = {**cfg["eagle_config"], "eagle_aux_hidden_state_layer_ids": ids}
        out[name] = cfg
    return out


# the tokenizer's training text: the same words in the same order give the same tokenizer (and its sha256,
# which server-seqs files carried between sessions are checked against)
_WORDS = (
    "the of and to in is that for it as with was on be by this are or from at an not have which but all they one had "
    "were can there their we more if has will when been would who so what up out about into than them time some "
    "could these other then its only two may first new like also over after such most made between model token "
    "expert layer router batch decode verify draft kernel memory latency throughput cache server patch tensor graph "
    "step prefill sample greedy speculative attention weight bias hidden state request function return value number "
    "string python module import class data file system process thread queue"
)


def _corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    rng, vocab = random.Random(seed), _WORDS.split()
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(vocab) for _ in range(rng.randint(6, 24))]
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))  # digits: prompts hold them
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ":", ","]))
    return lines


def build_tokenizer(vocab: int):
    """Byte-level BPE padded with added tokens to exactly `vocab` ids: every id a dummy-weight model emits
    must detokenize."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab, 4096),
        min_frequency=2,
        special_tokens=[BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens(
        [AddedToken(f"<|x{i}|>", special=False, normalized=False) for i in range(vocab - tok.get_vocab_size())]
    )
    return tok


def write_model_dirs(out: Path, spec: TinyModelSpec) -> dict[str, Path]:
    spec.validate()
    tok = build_tokenizer(spec.vocab)
    configs = {"target": target_config(spec), "draft": draft_config(spec), **draft_variants(spec)}
    gen = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "do_sample": False}
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
    }
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    paths = {name: Path(out) / name for name in configs}
    for name, cfg in configs.items():
        d = paths[name]
        d.mkdir(parents=True, exist_ok=True)
        tok.save(str(d / "tokenizer.json"))
        for file, doc in (
            ("config.json", cfg),
            ("generation_config.json", gen),
            ("tokenizer_config.json", tok_cfg),
            ("special_tokens_map.json", special),
        ):
            (d / file).write_text(json.dumps(doc, indent=2) + "\n")
    return paths


def add_cli(sub) -> None:
    p = sub.add_parser("tinymodel", help="write a tiny DeepSeek-V3/Kimi target + EAGLE-3 draft model dir")
    p.add_argument("out", type=Path, help="output dir (target/ and draft/ are created inside)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="tiny", help="tiny (host-bound) or kimi-width")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    spec = TinyModelSpec(**PROFILES[a.profile])
    paths = write_model_dirs(a.out, spec)
    t, d = paths["target"], paths["draft"]
    print(f"target: {t}\ndraft:  {d}\naux ids: {spec.aux_ids()}")
    print(
        f"launch args: --model-path {t} --load-format dummy --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {d} --speculative-draft-load-format dummy --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    )
    return 0
