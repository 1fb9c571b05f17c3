"""SGLang 0.5.17's LlamaForCausalLMEagle3 draft head in plain torch, trainable with the training-time test (arXiv
2503.01840). Step k of the chain from position i runs at i + k and sees step-0 keys <= i plus its own chain's, so
one forward evaluates every chain: step-0 keys causal, later steps' on the diagonal.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .target_ref import ConfigProblem, apply_rope, rms_norm, rope_cos_sin

_UNSUPPORTED = ("fc_norm", "use_aux_norm", "norm_before_fc", "norm_output", "bias")


# Eagle3Draft's parameter -> SGLang's checkpoint name (q/k/v and gate/up are fused here, split there)
_NAMES = {
    "fc": "fc.weight",
    "o": "layers.0.self_attn.o_proj.weight",
    "down": "layers.0.mlp.down_proj.weight",
    "input_norm": "layers.0.input_layernorm.weight",
    "hidden_norm": "layers.0.hidden_norm.weight",
    "post_norm": "layers.0.post_attention_layernorm.weight",
    "norm": "norm.weight",
}
_QKV = [f"layers.0.self_attn.{x}_proj.weight" for x in "qkv"]
_GATE_UP = ["layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight"]


@dataclass(frozen=True)
class DraftArch:
    vocab: int
    hidden: int
    target_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps: float
    rope_theta: float
    aux_ids: tuple[int, ...]
    own_head: bool  # draft_vocab_size present: its own lm_head; absent: SGLang shares the target's

    @classmethod
    def from_config(cls, cfg: dict) -> DraftArch:
        if cfg.get("architectures") != ["LlamaForCausalLMEagle3"]:
            raise ConfigProblem('architectures must be ["LlamaForCausalLMEagle3"]')
        if cfg.get("num_hidden_layers") != 1:
            raise ConfigProblem("num_hidden_layers must be 1 (one EAGLE-3 decoder layer)")
        bad = [k for k in _UNSUPPORTED if cfg.get(k) or (cfg.get("eagle_config") or {}).get(k)]
        if bad or cfg.get("tie_word_embeddings"):
            raise ConfigProblem(f"{', '.join(bad) or 'tie_word_embeddings'}: not supported by the trainer (remove)")
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if not ids:
            raise ConfigProblem("eagle_config.eagle_aux_hidden_state_layer_ids is missing")
        vocab = cfg["vocab_size"]
        dvs = cfg.get("draft_vocab_size")
        if dvs is not None and dvs != vocab:
            raise ConfigProblem(
                f"draft_vocab_size {dvs} != vocab_size {vocab}: a reduced draft vocabulary (d2t) "
                f"is not supported; set it to {vocab} or remove it"
            )
        heads = cfg["num_attention_heads"]
        theta = cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        if cfg.get("rope_scaling"):
            raise ConfigProblem("rope_scaling must be null")
        return cls(
            vocab=vocab,
            hidden=cfg["hidden_size"],
            target_hidden=cfg.get("target_hidden_size", cfg["hidden_size"]),
            heads=heads,
            kv_heads=cfg.get("num_key_value_heads", heads),
            head_dim=cfg.get("head_dim", cfg["hidden_size"] // heads),
            inter=cfg["intermediate_size"],
            eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            aux_ids=tuple(ids),
            own_head=dvs is not None,
        )


class Eagle3Draft(nn.Module):
    """Parameters named as LlamaForCausalLMEagle3's; embed_tokens (the target's) frozen, lm_head too when shared."""

    embed: torch.Tensor  # a registered buffer: declared so it reads as a tensor, not Tensor | Module

    def __init__(self, arch: DraftArch, embed: torch.Tensor, head: torch.Tensor, seed: int = 0):
        super().__init__()
        a = self.arch = arch
        g = torch.Generator().manual_seed(seed)

        def normal(*shape):
            return nn.Parameter(torch.empty(shape).normal_(0.0, 0.02, generator=g))

        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.fc = normal(a.hidden, a.target_hidden * len(a.aux_ids))
        self.qkv = normal(q + 2 * kv, 2 * a.hidden)
        self.o = normal(a.hidden, q)
        self.gate_up = normal(2 * a.inter, a.hidden)
        self.down = normal(a.hidden, a.inter)
        self.input_norm, self.hidden_norm, self.post_norm, self.norm = (
            nn.Parameter(torch.ones(a.hidden)) for _ in range(4)
        )
        self.register_buffer("embed", embed.detach().float().clone(), persistent=False)
        # the target's head is where the draft's last hidden state should land: start from it
        self.lm_head = nn.Parameter(head.detach().float().clone(), requires_grad=a.own_head)

    def sglang_state(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The checkpoint SGLang's load_weights reads: q/k/v and gate/up unfused, names without "model."."""
        a = self.arch
        q, kv = a.heads * a.head_dim, a.kv_heads * a.head_dim
        out = {"embed_tokens.weight": self.embed, **{name: getattr(self, mine) for mine, name in _NAMES.items()}}
        out.update(zip(_QKV, self.qkv.detach().split([q, kv, kv])))
        out.update(zip(_GATE_UP, self.gate_up.detach().chunk(2)))
        if a.own_head:
            out["lm_head.weight"] = self.lm_head
        return {k: v.detach().to(dtype).contiguous().cpu() for k, v in out.items()}

    @torch.no_grad()
    def load_sglang_state(self, state: dict[str, torch.Tensor]) -> None:
        """The inverse of sglang_state."""
        s = {k: v.float() for k, v in state.items()}
        self.qkv.copy_(torch.cat([s[n] for n in _QKV]))
        self.gate_up.copy_(torch.cat([s[n] for n in _GATE_UP]))
        for mine, name in _NAMES.items():
            getattr(self, mine).copy_(s[name])
        if self.arch.own_head:
            self.lm_head.copy_(s["lm_head.weight"])

    def forward(self, aux: torch.Tensor, tokens: list[torch.Tensor], start: int = 0) -> list[torch.Tensor]:
        """aux [B, T, K*Ht]; tokens[k] [B, T]: step k's input at each chain start i (step 0: token i+1).
        Returns each step's logits [B, T, V] (float32): step k at i predicts the token at i + k + 2."""
        a = self.arch
        b, t, _ = aux.shape
        dev = aux.device
        hidden = F.linear(aux.to(self.fc.dtype), self.fc)
        ks, vs, out = [], [], []
        base = torch.arange(t, device=dev)
        causal = base[None, :] <= base[:, None]
        diag = base[None, :] == base[:, None]
        q_size, kv_size = a.heads * a.head_dim, a.kv_heads * a.head_dim
        for k, tok in enumerate(tokens):
            pos = (base + start + k).expand(b, t)
            residual = hidden
            emb = rms_norm(F.embedding(tok, self.embed).to(hidden.dtype), self.input_norm, a.eps)
            x = torch.cat([emb, rms_norm(hidden, self.hidden_norm, a.eps)], dim=-1)
            q, key, val = F.linear(x, self.qkv).split([q_size, kv_size, kv_size], dim=-1)
            cos, sin = rope_cos_sin(a.head_dim, a.rope_theta, pos)
            q = apply_rope(q.view(b, t, a.heads, a.head_dim), cos, sin, neox=True).transpose(1, 2)
            key = apply_rope(key.view(b, t, a.kv_heads, a.head_dim), cos, sin, neox=True).transpose(1, 2)
            ks.append(key)
            vs.append(val.view(b, t, a.kv_heads, a.head_dim).transpose(1, 2))
            rep = a.heads // a.kv_heads
            keys = torch.cat(ks, dim=2).repeat_interleave(rep, dim=1)
            values = torch.cat(vs, dim=2).repeat_interleave(rep, dim=1)
            mask = torch.cat([causal] + [diag] * k, dim=1)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=a.head_dim**-0.5)
            h, residual = rms_norm(
                F.linear(att.transpose(1, 2).reshape(b, t, q_size), self.o), self.post_norm, a.eps, residual
            )
            g, u = F.linear(h, self.gate_up).chunk(2, dim=-1)
            normed, hidden = rms_norm(F.linear(F.silu(g) * u, self.down), self.norm, a.eps, residual)
            out.append(F.linear(normed, self.lm_head.to(normed.dtype)).float())
        return out


def chain_inputs(seqs_tokens: torch.Tensor, nxt: torch.Tensor, steps: int):
    """Per-step input tokens and labels (-1: none) for right-padded rows. nxt [B, T]: the target's greedy token
    after each position. At chain start i step 0 reads token i+1, step k the target's token at i+k (what an
    accepted chain holds); step k's label is the target's token after i+k+1."""
    b, t = seqs_tokens.shape
    tokens, labels = [], []
    pad = torch.zeros(b, steps + 1, dtype=torch.long, device=nxt.device) - 1
    ext_nxt = torch.cat([nxt, pad], dim=1)
    ext_tok = torch.cat([seqs_tokens, pad.clamp(min=0)], dim=1)
    for k in range(steps):
        tokens.append((ext_tok[:, 1 : t + 1] if k == 0 else ext_nxt[:, k : t + k]).clamp(min=0))
        labels.append(ext_nxt[:, k + 1 : t + k + 1])
    return tokens, labels


def chain_lengths(logits: list[torch.Tensor], labels: list[torch.Tensor]) -> torch.Tensor:
    """Accepted draft tokens (0..steps) of the chain starting at each position, greedy, topk 1."""
    run = torch.ones_like(labels[0], dtype=torch.bool)
    n = torch.zeros_like(labels[0])
    for lg, lab in zip(logits, labels):
        run = run & (lg.argmax(-1) == lab) & (lab >= 0)
        n = n + run.long()
    return n


def simulated_accept(chains: list[int], first: int, new_tokens: int) -> tuple[int, int]:
    """The server's (completion tokens, verify steps) for one request, from the accepted chain at each position:
    the prefill gives the first token, each verify step its accepted draft tokens plus the target's own."""
    produced, steps, i = 1, 0, first
    while produced < new_tokens:
        a = chains[i] if i < len(chains) else 0
        produced += a + 1
        steps += 1
        i += a + 1
    return new_tokens, steps
