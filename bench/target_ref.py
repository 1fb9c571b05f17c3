"""The bench's DeepSeek-V3 target in plain torch: the weights SGLang's dummy loader draws (named as its state_dict,
seeded by name) and DeepseekV2ForCausalLM's forward, MLA in its MHA form (tests/bench/test_train_draft.py checks
both against SGLang's). Aux hidden states: the residual at a layer's input; id num_hidden_layers the last output.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .dummy_init import SEED as DUMMY_SEED
from .dummy_init import DummyInit

VOCAB_PAD = 64  # vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE: embed_tokens and lm_head have padded rows
RENORM_EPS = 1e-20  # topk.py _RENORMALIZE_SUM_EPSILON


class ConfigProblem(ValueError):
    """A model config this reference cannot mirror (the message names the key)."""


# TargetArch's field -> the config key it needs
_REQUIRED = {
    "vocab": "vocab_size",
    "hidden": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "q_lora": "q_lora_rank",
    "kv_lora": "kv_lora_rank",
    "rope_dim": "qk_rope_head_dim",
    "nope_dim": "qk_nope_head_dim",
    "v_dim": "v_head_dim",
    "inter": "intermediate_size",
    "moe_inter": "moe_intermediate_size",
    "experts": "n_routed_experts",
    "topk": "num_experts_per_tok",
    "shared": "n_shared_experts",
    "first_dense": "first_k_dense_replace",
    "scaling": "routed_scaling_factor",
}


@dataclass(frozen=True)
class TargetArch:
    vocab: int
    hidden: int
    layers: int
    heads: int
    q_lora: int
    kv_lora: int
    rope_dim: int
    nope_dim: int
    v_dim: int
    inter: int
    moe_inter: int
    experts: int
    topk: int
    shared: int
    first_dense: int
    scaling: float
    norm_topk: bool
    eps: float
    rope_theta: float

    @classmethod
    def from_config(cls, cfg: dict) -> TargetArch:
        missing = [k for k in _REQUIRED.values() if cfg.get(k) is None]
        if missing:
            raise ConfigProblem(
                f"missing or null {', '.join(missing)} (write the dir with `python -m bench tinymodel`)"
            )
        if cfg.get("scoring_func", "softmax") != "sigmoid" or cfg.get("topk_method") != "noaux_tc":
            raise ConfigProblem("scoring_func must be sigmoid and topk_method noaux_tc (Kimi-K2/DeepSeek-V3 routing)")
        if any(cfg.get(k, 1) != 1 for k in ("n_group", "topk_group", "moe_layer_freq")):
            raise ConfigProblem("n_group, topk_group and moe_layer_freq must be 1, as `bench tinymodel` writes them")
        if cfg.get("rope_scaling"):
            raise ConfigProblem("rope_scaling must be null: the reference has no YaRN")
        if cfg.get("hidden_act", "silu") != "silu" or cfg.get("tie_word_embeddings"):
            raise ConfigProblem("hidden_act must be silu and tie_word_embeddings false")
        theta = cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        return cls(
            **{field: cfg[key] for field, key in _REQUIRED.items()},
            norm_topk=bool(cfg.get("norm_topk_prob", True)),
            eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
        )

    @property
    def vocab_padded(self) -> int:
        return -(-self.vocab // VOCAB_PAD) * VOCAB_PAD

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_dense

    def param_specs(self, dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """name -> (shape, dtype) in SGLang's state_dict order."""
        qk = self.nope_dim + self.rope_dim
        out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
            "model.embed_tokens.weight": ((self.vocab_padded, self.hidden), dtype)
        }
        for i in range(self.layers):
            p = f"model.layers.{i}."
            qkv_a = self.q_lora + self.kv_lora + self.rope_dim
            out[p + "self_attn.fused_qkv_a_proj_with_mqa.weight"] = ((qkv_a, self.hidden), dtype)
            out[p + "self_attn.q_a_layernorm.weight"] = ((self.q_lora,), dtype)
            out[p + "self_attn.q_b_proj.weight"] = ((self.heads * qk, self.q_lora), dtype)
            out[p + "self_attn.kv_b_proj.weight"] = ((self.heads * (self.nope_dim + self.v_dim), self.kv_lora), dtype)
            out[p + "self_attn.o_proj.weight"] = ((self.hidden, self.heads * self.v_dim), dtype)
            out[p + "self_attn.kv_a_layernorm.weight"] = ((self.kv_lora,), dtype)
            if self.is_moe(i):
                shared = self.moe_inter * self.shared
                out[p + "mlp.gate.weight"] = ((self.experts, self.hidden), dtype)
                # MoEGate makes the noaux_tc correction bias float32 whatever the model dtype
                out[p + "mlp.gate.e_score_correction_bias"] = ((self.experts,), torch.float32)
                out[p + "mlp.experts.w13_weight"] = ((self.experts, 2 * self.moe_inter, self.hidden), dtype)
                out[p + "mlp.experts.w2_weight"] = ((self.experts, self.hidden, self.moe_inter), dtype)
                if shared:
                    out[p + "mlp.shared_experts.gate_up_proj.weight"] = ((2 * shared, self.hidden), dtype)
                    out[p + "mlp.shared_experts.down_proj.weight"] = ((self.hidden, shared), dtype)
            else:
                out[p + "mlp.gate_up_proj.weight"] = ((2 * self.inter, self.hidden), dtype)
                out[p + "mlp.down_proj.weight"] = ((self.hidden, self.inter), dtype)
            out[p + "input_layernorm.weight"] = ((self.hidden,), dtype)
            out[p + "post_attention_layernorm.weight"] = ((self.hidden,), dtype)
        out["model.norm.weight"] = ((self.hidden,), dtype)
        out["lm_head.weight"] = ((self.vocab_padded, self.hidden), dtype)
        return out


def _generator(name: str, device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed + zlib.crc32(name.encode()))


def _normal(name: str, shape, device, std: float, seed: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float32, device=device).normal_(
        0.0, std, generator=_generator(name, device, seed)
    )


def dummy_param(
    name: str, shape, dtype: torch.dtype, device, init: DummyInit, vocab: int, seed: int = DUMMY_SEED
) -> torch.Tensor:
    """One parameter as the dummy_init_normal patch fills it; `vocab`: the unpadded rows (successor's lm_head)."""
    module_path, _, leaf = name.rpartition(".")
    if leaf == "weight" and "norm" in module_path.rsplit(".", 1)[-1]:
        return torch.ones(shape, dtype=dtype, device=device)
    if leaf.endswith("bias"):
        return torch.zeros(shape, dtype=dtype, device=device)
    if init.mode == "successor" and name.endswith("lm_head.weight"):
        embed_name = name[: -len("lm_head.weight")] + "model.embed_tokens.weight"
        embed = _normal(embed_name, shape, device, init.embed_std, seed)[:vocab]
        picked = embed[torch.randperm(vocab, generator=_generator(name, device, seed), device=device)]
        rows = torch.zeros(shape, dtype=torch.float32, device=device)
        rows[:vocab] = picked / picked.norm(dim=-1, keepdim=True)
        return rows.to(dtype)
    std = init.embed_std if init.mode == "successor" and name.endswith("embed_tokens.weight") else init.std
    return _normal(name, shape, device, std, seed).to(dtype)


def dummy_weights(arch: TargetArch, dtype: torch.dtype, device, init: DummyInit) -> dict[str, torch.Tensor]:
    return {
        n: dummy_param(n, shape, dt, device, init, arch.vocab) for n, (shape, dt) in arch.param_specs(dtype).items()
    }


def successor_of(weights: dict[str, torch.Tensor], vocab: int) -> torch.Tensor:
    """[vocab] the token a successor lm_head ranks first after each token's embedding alone."""
    embed = weights["model.embed_tokens.weight"][:vocab].float()
    head = weights["lm_head.weight"][:vocab].float()
    return torch.cat([(head @ chunk.T).argmax(0) for chunk in embed.split(1024)])


def capture_layers(aux_ids: list[int]) -> list[int]:
    """The layers SGLang captures for these draft ids, in packing order (set_eagle3_layers_to_capture shifts a
    list starting at 1 by +1)."""
    ids = [i + 1 for i in aux_ids] if aux_ids and aux_ids[0] == 1 else list(aux_ids)
    return sorted(ids)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """SGLang's RMSNorm.forward_native: float32 inside, the residual sum in the input dtype."""
    dtype = x.dtype
    xf = x.float()
    if residual is not None:
        xf = xf + residual.float()
        residual = xf.to(dtype)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    out = (xf * w).to(dtype)
    return out if residual is None else (out, residual)


def rope_cos_sin(dim: int, theta: float, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=positions.device) / dim))
    freqs = positions.float()[..., None] * inv_freq
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """x [..., heads, dim]; cos/sin [..., dim/2]; float32 inside."""
    dtype, xf = x.dtype, x.float()
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    if neox:
        x1, x2 = xf.chunk(2, dim=-1)
    else:
        x1, x2 = xf[..., ::2], xf[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return out.to(dtype)


class KVCache:
    def __init__(self, layers: int, batch: int, heads: int, length: int, qk_dim: int, v_dim: int, dtype, device):
        self.k = [torch.zeros(batch, heads, length, qk_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(batch, heads, length, v_dim, dtype=dtype, device=device) for _ in range(layers)]
        self.length = length

    def write(self, layer: int, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        b = torch.arange(positions.shape[0], device=positions.device)[:, None]
        self.k[layer][b, :, positions] = k
        self.v[layer][b, :, positions] = v


class TargetRef:
    def __init__(self, arch: TargetArch, weights: dict[str, torch.Tensor]):
        self.arch, self.w = arch, weights
        self.dtype = weights["model.embed_tokens.weight"].dtype
        self.device = weights["model.embed_tokens.weight"].device

    def new_cache(self, batch: int, length: int) -> KVCache:
        a = self.arch
        return KVCache(a.layers, batch, a.heads, length, a.nope_dim + a.rope_dim, a.v_dim, self.dtype, self.device)

    def _attn(self, i: int, x: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        a, p = self.arch, f"model.layers.{i}.self_attn."
        b, t, _ = x.shape
        q_a, kv_a, k_pe = F.linear(x, self.w[p + "fused_qkv_a_proj_with_mqa.weight"]).split(
            [a.q_lora, a.kv_lora, a.rope_dim], dim=-1
        )
        q = F.linear(rms_norm(q_a, self.w[p + "q_a_layernorm.weight"], a.eps), self.w[p + "q_b_proj.weight"])
        q = q.view(b, t, a.heads, a.nope_dim + a.rope_dim)
        q_nope, q_pe = q.split([a.nope_dim, a.rope_dim], dim=-1)
        kv = F.linear(rms_norm(kv_a, self.w[p + "kv_a_layernorm.weight"], a.eps), self.w[p + "kv_b_proj.weight"])
        k_nope, v = kv.view(b, t, a.heads, a.nope_dim + a.v_dim).split([a.nope_dim, a.v_dim], dim=-1)
        cos, sin = rope_cos_sin(a.rope_dim, a.rope_theta, positions)
        # DeepSeek's rope_interleave (default true): GPT-J style pairs, not NeoX halves
        q_pe = apply_rope(q_pe, cos, sin, neox=False)
        k_pe = apply_rope(k_pe.unsqueeze(-2), cos, sin, neox=False).expand(b, t, a.heads, a.rope_dim)
        q = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)
        k = torch.cat([k_nope, k_pe], dim=-1)
        cache.write(i, positions, k, v)
        mask = torch.arange(cache.length, device=x.device)[None, None, :] <= positions[:, :, None]
        out = F.scaled_dot_product_attention(
            q, cache.k[i], cache.v[i], attn_mask=mask[:, None], scale=(a.nope_dim + a.rope_dim) ** -0.5
        )
        return F.linear(out.transpose(1, 2).reshape(b, t, a.heads * a.v_dim), self.w[p + "o_proj.weight"])

    @staticmethod
    def _swiglu(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        g, u = F.linear(x, gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(g) * u, down)

    def _route(self, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """biased_grouped_topk_impl: sigmoid scores + correction bias choose, the scores weigh."""
        a, p = self.arch, f"model.layers.{i}.mlp.gate."
        # the GPU gate is a bf16 x bf16 -> fp32 GEMM (linear_bf16_fp32)
        scores = F.linear(x.float(), self.w[p + "weight"].float()).sigmoid()
        choice = scores + self.w[p + "e_score_correction_bias"].float()
        ids = choice.topk(a.topk, dim=-1, sorted=False)[1]  # one expert group (from_config)
        weights = scores.gather(1, ids)
        if a.norm_topk:
            weights = weights / (weights.sum(-1, keepdim=True) + RENORM_EPS)
        return weights * a.scaling, ids

    def _moe(self, i: int, x: torch.Tensor) -> torch.Tensor:
        a, p = self.arch, f"model.layers.{i}.mlp."
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        weights, ids = self._route(i, x)
        flat = ids.reshape(-1)
        order = flat.argsort()
        counts = torch.bincount(flat, minlength=a.experts).tolist()  # one host sync per layer
        tokens = order // a.topk
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        w13, w2, start = self.w[p + "experts.w13_weight"], self.w[p + "experts.w2_weight"], 0
        for e, c in enumerate(counts):
            if c:
                sel = order[start : start + c]
                y = self._swiglu(x[tokens[start : start + c]], w13[e], w2[e])
                out.index_add_(0, tokens[start : start + c], y.float() * weights.reshape(-1)[sel, None])
                start += c
        out = out.to(x.dtype)
        if a.shared:
            out = out + self._swiglu(
                x, self.w[p + "shared_experts.gate_up_proj.weight"], self.w[p + "shared_experts.down_proj.weight"]
            )
        return out.reshape(shape)

    def forward(self, ids, positions, cache: KVCache, capture: Sequence[int] = (), logits: str = "last"):
        """ids, positions [B, T] -> (logits of the "last" position of each row or of "all", aux [B, T, K*H])."""
        a = self.arch
        h = F.embedding(ids, self.w["model.embed_tokens.weight"])
        residual, aux = None, []
        for i in range(a.layers):
            pre = f"model.layers.{i}."
            if residual is None:
                residual, x = h, rms_norm(h, self.w[pre + "input_layernorm.weight"], a.eps)
            else:
                x, residual = rms_norm(h, self.w[pre + "input_layernorm.weight"], a.eps, residual)
            if i in capture:
                aux.append(residual)
            x, residual = rms_norm(
                self._attn(i, x, positions, cache), self.w[pre + "post_attention_layernorm.weight"], a.eps, residual
            )
            if a.is_moe(i):
                h = self._moe(i, x)
            else:
                h = self._swiglu(x, self.w[pre + "mlp.gate_up_proj.weight"], self.w[pre + "mlp.down_proj.weight"])
        x, residual = rms_norm(h, self.w["model.norm.weight"], a.eps, residual)
        if a.layers in capture:
            aux.append(residual)
        aux_out = torch.cat(aux, dim=-1) if aux else None
        if logits == "last":
            x = x[:, -1]
        # the logits processor drops the padded rows' logits
        return F.linear(x, self.w["lm_head.weight"][: a.vocab]).float(), aux_out


@torch.no_grad()
def greedy(target: TargetRef, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Each prompt and its greedy continuation of new_tokens tokens (ignore_eos). Right-padded in one batch: a row's
    pad positions are overwritten by its own tokens before any of its queries sees them."""
    b, lens = len(prompts), [len(p) for p in prompts]
    width = max(lens)
    dev = target.device
    ids = torch.zeros(b, width, dtype=torch.long, device=dev)
    for r, p in enumerate(prompts):
        ids[r, : len(p)] = torch.tensor(p, device=dev)
    cache = target.new_cache(b, width + new_tokens)
    pos = torch.arange(width, device=dev).expand(b, width)
    logits, _ = target.forward(ids, pos, cache, logits="all")
    last = torch.tensor(lens, device=dev) - 1
    nxt = logits[torch.arange(b, device=dev), last].argmax(-1)
    out = [nxt]
    for s in range(1, new_tokens):
        step_pos = (last + s)[:, None]
        logits, _ = target.forward(nxt[:, None], step_pos, cache, logits="last")
        nxt = logits.argmax(-1)
        out.append(nxt)
    gen = torch.stack(out, dim=1).tolist()
    return [p + g for p, g in zip(prompts, gen)]


@torch.no_grad()
def features(target: TargetRef, seqs: list[list[int]], capture: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Aux hidden states [B, T, K*H] and the greedy next token at every position [B, T] (-1 past a row's end)."""
    b, width, dev = len(seqs), max(len(s) for s in seqs), target.device
    ids = torch.zeros(b, width, dtype=torch.long, device=dev)
    nxt = torch.full((b, width), -1, dtype=torch.long, device=dev)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s, device=dev)
    pos = torch.arange(width, device=dev).expand(b, width)
    logits, aux = target.forward(ids, pos, target.new_cache(b, width), capture, logits="all")
    pred = logits.argmax(-1)
    for r, s in enumerate(seqs):
        nxt[r, : len(s)] = pred[r, : len(s)]
    return aux, nxt


def param_count(arch: TargetArch) -> int:
    return sum(math.prod(s) for s, _ in arch.param_specs(torch.bfloat16).values())
