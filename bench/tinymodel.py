"""Write a tiny DeepSeek-V3/Kimi-architecture target + EAGLE-3 draft model dir (configs + tokenizer, no weights).

Weights come from SGLang's `--load-format dummy` / `--speculative-draft-load-format dummy`. The values that are
known to run on one H200 with sglang 0.5.17 (shared/notes/sglang-0.5.17-targets.md) are the defaults:
kv_lora_rank 512 and qk_rope_head_dim 64 because FlashInfer's MLA kernels are built for those dims; vocab 32768
because sglang.bench_one_batch draws random ids below 10000; 64 routed experts (256 is known to fail; Kimi's 384
is accepted for the MoE-heavy runs). Routing is Kimi-K2's: n_group 1, topk_group 1, noaux_tc (sigmoid score +
e_score_correction_bias), routed_scaling_factor 2.827.

Profiles (`--profile`): `tiny` (the default spec: host-bound, the GPU busy about 9% of an EAGLE step) and
`kimi-width` (7 layers at Kimi-K2's width: hidden 7168, 64 heads, 64 routed experts of 2048, top-8; 2.3 ms per
plain decode step on an H200, GPU-bound, with verify >> decode as in the seed). Explicit flags override a
profile's values.

Layout written:
  OUT/target/{config.json, generation_config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json}
  OUT/draft/{config.json, generation_config.json, tokenizer files}
  OUT/draft_edge/, draft_final/, draft_bad/  the draft at the edges deepseek_v2 and llama_eagle3 open (see
                        draft_variants(); bench/gpu_runs.sh steps `edge` and `before`)
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


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
    draft_aux_layer_ids: tuple[int, ...] | None = None  # default: [0, L//2 - ish, L-2] style, see aux_ids()

    def aux_ids(self) -> list[int]:
        """EAGLE-3 aux hidden-state layer ids: distinct, in [0, layers-1).

        The pristine 0.5.17 target cannot capture id == num_hidden_layers (see the deepseek_v2 patch note), and
        the seen-working pair used [0, 1, 2] for 4 layers: low, middle, and second-to-last layer.
        """
        if self.draft_aux_layer_ids is not None:
            ids = list(self.draft_aux_layer_ids)
        elif self.layers >= 4:
            ids = sorted({0, (self.layers - 1) // 2, self.layers - 2})
            # keep three distinct ids when the middle collides with an end (small L)
            k = 1
            while len(ids) < 3:
                ids = sorted(set(ids) | {k})
                k += 1
        else:
            ids = list(range(max(1, self.layers - 1)))
        return ids

    def validate(self) -> None:
        errs = []
        if self.hidden % self.heads:
            errs.append(f"hidden {self.hidden} not divisible by heads {self.heads}")
        if not 1 <= self.experts_per_tok <= self.routed_experts:
            errs.append(f"experts_per_tok {self.experts_per_tok} must be in [1, {self.routed_experts}]")
        if not 0 <= self.first_k_dense < self.layers:
            errs.append(f"first_k_dense {self.first_k_dense} must leave at least one MoE layer of {self.layers}")
        if self.vocab < 10000:
            errs.append("vocab < 10000 crashes sglang.bench_one_batch (random ids below 10000)")
        ids = self.aux_ids()
        if len(set(ids)) != len(ids) or any(not 0 <= i < self.layers for i in ids):
            errs.append(f"aux layer ids {ids} must be distinct and in [0, {self.layers})")
        if errs:
            raise ValueError("; ".join(errs))


def _shared_config(s: TinyModelSpec) -> dict:
    """Keys the target and the draft must agree on (tokenizer ids, RoPE, norms, dtype)."""
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


# FlashInfer's attention kernels are built for head_dim 64/128/256: Kimi's width gives 7168 / 64 = 112, which
# fails in VariableLengthMergeStates during the draft's CUDA-graph capture, so the draft's heads are 128 wide
# (Llama allows head_dim != hidden / heads).
DRAFT_HEAD_DIM = 128

PROFILES: dict[str, dict] = {
    "tiny": {},
    "kimi-width": {
        "layers": 7,
        "hidden": 7168,
        "heads": 64,
        "routed_experts": 64,
        "experts_per_tok": 8,
        "moe_intermediate": 2048,
    },
}


def draft_config(s: TinyModelSpec) -> dict:
    head_dim = DRAFT_HEAD_DIM
    return {
        **_shared_config(s),
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "vocab_size": s.vocab,
        # Present on purpose: pristine llama_eagle3.py l.295 reads it directly (see the llama_eagle3 patch).
        "draft_vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "target_hidden_size": s.hidden,
        "intermediate_size": s.dense_intermediate,
        "num_hidden_layers": 1,
        "num_attention_heads": s.heads,
        "num_key_value_heads": max(1, s.heads // 4),
        "head_dim": head_dim,
        "mlp_bias": False,
        "eagle_config": {
            "eagle_aux_hidden_state_layer_ids": s.aux_ids(),
            "use_aux_hidden_state": True,
        },
    }


def draft_variants(s: TinyModelSpec) -> dict[str, dict]:
    """Drafts at the edges deepseek_v2 and llama_eagle3 open, by dir name.

    Aux id num_hidden_layers is the final layer's output. The first id stays 0: upstream shifts an id list that
    starts at 1 by +1 in set_eagle3_layers_to_capture.
      draft_edge   no draft_vocab_size, ids [0, mid, L]: the patched set serves it; pristine 0.5.17 cannot load it
      draft_final  draft_vocab_size kept, ids [0, mid, L]: pristine asserts "captured 2 of 3 aux hidden states"
      draft_bad    ids [0, mid, L + 1]: the patched set refuses it at load (out of range)
    """
    mid, last = (s.layers - 1) // 2, s.layers
    table = {
        "draft_edge": ([0, mid, last], False),
        "draft_final": ([0, mid, last], True),
        "draft_bad": ([0, mid, last + 1], True),
    }
    out = {}
    for name, (ids, keep_vocab) in table.items():
        cfg = draft_config(s)
        if not keep_vocab:
            del cfg["draft_vocab_size"]
        cfg["eagle_config"] = {**cfg["eagle_config"], "eagle_aux_hidden_state_layer_ids": ids}
        out[name] = cfg
    return out


_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "an",
    "not",
    "have",
    "which",
    "but",
    "all",
    "they",
    "one",
    "had",
    "were",
    "can",
    "there",
    "their",
    "we",
    "more",
    "if",
    "has",
    "will",
    "when",
    "been",
    "would",
    "who",
    "so",
    "what",
    "up",
    "out",
    "about",
    "into",
    "than",
    "them",
    "time",
    "some",
    "could",
    "these",
    "other",
    "then",
    "its",
    "only",
    "two",
    "may",
    "first",
    "new",
    "like",
    "also",
    "over",
    "after",
    "such",
    "most",
    "made",
    "between",
    "model",
    "token",
    "expert",
    "layer",
    "router",
    "batch",
    "decode",
    "verify",
    "draft",
    "kernel",
    "memory",
    "latency",
    "throughput",
    "cache",
    "server",
    "patch",
    "tensor",
    "graph",
    "step",
    "prefill",
    "sample",
    "greedy",
    "speculative",
    "attention",
    "weight",
    "bias",
    "hidden",
    "state",
    "request",
    "function",
    "return",
    "value",
    "number",
    "string",
    "python",
    "module",
    "import",
    "class",
    "data",
    "file",
    "system",
    "process",
    "thread",
    "queue",
]


def _corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 24))]
        # digits and punctuation so the merges cover what prompts contain
        words.insert(rng.randrange(len(words)), str(rng.randint(0, 9999)))
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ":", ","]))
    return lines


def build_tokenizer(vocab: int):
    """Byte-level BPE trained offline, padded with plain added tokens up to exactly `vocab` ids.

    Padding matters: dummy weights make greedy decoding emit any id below vocab_size, and every such id must
    detokenize (an id missing from the tokenizer decodes to None in some code paths).
    """
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
    missing = vocab - tok.get_vocab_size()
    if missing < 0:
        raise ValueError(f"trained tokenizer has {tok.get_vocab_size()} ids > vocab {vocab}")
    tok.add_tokens([AddedToken(f"<|x{i}|>", special=False, normalized=False) for i in range(missing)])
    if tok.get_vocab_size() != vocab:
        raise AssertionError(f"tokenizer size {tok.get_vocab_size()} != {vocab}")
    return tok


def _tokenizer_files(d: Path, tok) -> None:
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "pad_token": PAD,
                "unk_token": None,
                "add_bos_token": False,
                "add_eos_token": False,
                "clean_up_tokenization_spaces": False,
                "model_max_length": 4096,
            },
            indent=2,
        )
        + "\n"
    )
    (d / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2) + "\n"
    )


def write_model_dirs(out: Path, spec: TinyModelSpec) -> dict[str, Path]:
    spec.validate()
    out = Path(out)
    tok = build_tokenizer(spec.vocab)
    configs = {"target": target_config(spec), "draft": draft_config(spec), **draft_variants(spec)}
    paths = {name: out / name for name in configs}
    gen = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "do_sample": False}
    for name, cfg in configs.items():
        d = paths[name]
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (d / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        _tokenizer_files(d, tok)
    (out / "tinymodel.json").write_text(
        json.dumps(
            {"spec": asdict(spec), "aux_ids": spec.aux_ids(), "paths": {k: str(v) for k, v in paths.items()}}, indent=2
        )
        + "\n"
    )
    return paths


def add_cli(sub) -> None:
    p = sub.add_parser("tinymodel", help="write a tiny DeepSeek-V3/Kimi target + EAGLE-3 draft model dir")
    p.add_argument("out", type=Path, help="output dir (target/ and draft/ are created inside)")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="tiny",
        help="tiny (host-bound) or kimi-width (Kimi-K2's width, 7 layers, GPU-bound)",
    )
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--experts", type=int, default=None, help="routed experts (Kimi: 384)")
    p.add_argument("--topk", type=int, default=None)
    p.add_argument("--moe-intermediate", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--aux-ids", default=None, help="comma list of EAGLE-3 aux layer ids (default: derived)")
    p.set_defaults(func=_cli)


def spec_for(profile: str, **overrides) -> TinyModelSpec:
    """A profile's spec with explicit values (None = the profile's) on top."""
    fields = {**PROFILES[profile], **{k: v for k, v in overrides.items() if v is not None}}
    return TinyModelSpec(**fields)


def _cli(a) -> int:
    spec = spec_for(
        a.profile,
        layers=a.layers,
        hidden=a.hidden,
        heads=a.heads,
        routed_experts=a.experts,
        experts_per_tok=a.topk,
        moe_intermediate=a.moe_intermediate,
        vocab=a.vocab,
        draft_aux_layer_ids=tuple(int(x) for x in a.aux_ids.split(",")) if a.aux_ids else None,
    )
    paths = write_model_dirs(a.out, spec)
    print(f"target: {paths['target']}\ndraft:  {paths['draft']}\naux ids: {spec.aux_ids()}")
    print(
        "launch args: --model-path {t} --load-format dummy --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path {d} --speculative-draft-load-format dummy --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4".format(t=paths["target"], d=paths["draft"])
    )
    return 0
