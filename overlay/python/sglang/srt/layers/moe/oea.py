"""Opportunistic Expert Activation (OEA) for top-k MoE routing.

sglang-overlay `oea_topk`, after Oncescu et al., arXiv 2511.02237. For one batch
of B tokens with top-k routing:

1. every valid token keeps its own top-k0 experts (k0 < k);
2. S_base is the union of those sets over the valid (non-padded) tokens, and
   is the only set of experts the batch activates;
3. each token then adds experts from S_base, in its own score order, until it
   has k (never more);
4. the router weights of the chosen experts are renormalized.

At B = 1 this is top-k0 pruning. Padding rows (CUDA-graph padding, index >=
num_valid_tokens) never add to S_base; they are themselves routed only to
experts of S_base, so they cannot activate extra experts either.

Everything here is pure torch with static shapes and no host synchronization,
so it is safe inside CUDA-graph capture, and importable without the rest of
SGLang.

Weights. ``choice_scores`` rank experts (what the router's top-k used);
``weight_scores`` are the router weights (default: the choice scores). For
softmax routing both are the softmax probabilities. For DeepSeek-V3/Kimi-K2.5
(sigmoid + e_score_correction_bias) the choice score is sigmoid(logit) + bias
and the weight is sigmoid(logit) without the bias, as in
``kimi_k2_biased_topk_impl``. When ``renormalize`` is true the chosen weights
are rescaled so that each token's weights sum to what its input weights summed
to (1, or routed_scaling_factor when the router applies it on the output);
otherwise they keep the router scale (input weight sum / raw score sum).

Shape. Outputs keep the input shape [T, k] so the rest of the MoE path is
unchanged. A token with fewer than k candidates in S_base (S_base is small at
small B) fills its remaining slots by repeating its own top-1 expert with
weight 0: the id is already activated, so no extra expert is loaded, and the
zero weight adds nothing. (-1 is not used because the TP fused-MoE kernels do
not mask negative ids.)

Statistics. With SGLANG_OEA_STATS=1 every routing call under the same row gate
adds, on the device, to one per-process counter: calls, distinct routed experts
over the non-padded rows, non-padded rows. It counts whatever routing the call
returns (OEA's ids with K0 > 0, the router's own with K0 = 0), so a K0 = 0 and a
K0 > 0 server are compared on the same number. The update is fixed-shape and
in place, so it is captured into decode/verify CUDA graphs and replayed with
them; only ``oea_stats_snapshot`` reads it back (and synchronizes).
"""

import logging
import os

import torch

logger = logging.getLogger(__name__)

ENV_K0 = "SGLANG_OEA_K0"
ENV_MAX_TOKENS = "SGLANG_OEA_MAX_TOKENS"
ENV_STATS = "SGLANG_OEA_STATS"
DEFAULT_MAX_TOKENS = 64

_EPS = 1e-20


def oea_k0_from_env() -> int:
    """SGLANG_OEA_K0: experts each token keeps as its own; 0 (default) = off."""
    raw = os.environ.get(ENV_K0, "0").strip() or "0"
    k0 = int(raw)
    if k0 < 0:
        raise ValueError(f"{ENV_K0} must be >= 0, got {k0}")
    return k0


def oea_max_tokens_from_env() -> int:
    """SGLANG_OEA_MAX_TOKENS: OEA runs only for batches of at most this many rows.

    select_experts does not know the forward mode; decode and target-verify
    batches are small and prefill batches are large, so the row count is the gate.
    """
    raw = os.environ.get(ENV_MAX_TOKENS, str(DEFAULT_MAX_TOKENS)).strip()
    return int(raw or DEFAULT_MAX_TOKENS)


def oea_stats_from_env() -> bool:
    """SGLANG_OEA_STATS: "1" counts distinct experts per small routing call; "0" (default) = off."""
    raw = os.environ.get(ENV_STATS, "0").strip() or "0"
    if raw not in ("0", "1"):
        raise ValueError(f"{ENV_STATS} must be 0 or 1, got {raw!r}")
    return raw == "1"


def oea_needs_num_valid_tokens() -> bool:
    """Whether routing must know the non-padded row count: OEA keeps padding out
    of S_base, and the statistics keep padding out of the count."""
    return oea_k0_from_env() > 0 or oea_stats_from_env()


def router_scores(
    router_logits: torch.Tensor,
    scoring_func: str,
    correction_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(choice_scores, weight_scores) in float32, or None for an unknown scoring_func."""
    logits = router_logits.float()
    if scoring_func == "softmax":
        weights = logits.softmax(dim=-1)
    elif scoring_func == "sigmoid":
        weights = logits.sigmoid()
    elif scoring_func == "sqrtsoftplus":
        weights = torch.nn.functional.softplus(logits).sqrt()
    else:
        return None
    if correction_bias is None:
        return weights, weights
    return weights + correction_bias.float().unsqueeze(0), weights


def opportunistic_expert_activation(
    choice_scores: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    k0: int,
    num_valid_tokens: int | torch.Tensor | None = None,
    renormalize: bool = True,
    weight_scores: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply OEA to one batch's routing; returns (topk_weights, topk_ids).

    choice_scores: [T, E] scores that ranked the experts.
    topk_ids / topk_weights: [T, k] the router's selection and weights.
    k0: experts each token keeps as its own; k0 <= 0 or k0 >= k returns the
        inputs themselves (bit-identical).
    num_valid_tokens: rows >= this are padding (int or a 0-d/1-element tensor,
        e.g. ForwardBatch.num_token_non_padded); None = all rows valid.
    weight_scores: [T, E] router weights (default choice_scores).

    A token's own top-k0 are the k0 best (by choice score) of its router
    selection, so group-limited routing keeps its choice for those.
    """
    num_tokens, k = topk_ids.shape
    if k0 <= 0 or k0 >= k or num_tokens == 0:
        return topk_weights, topk_ids
    if weight_scores is None:
        weight_scores = choice_scores
    device = topk_ids.device
    num_experts = choice_scores.shape[1]
    scores = choice_scores.float()
    ids = topk_ids.long()

    # 1. own top-k0 among the router's selection (stable: ties keep router order)
    selected_scores = scores.gather(1, ids)
    order = torch.sort(selected_scores, dim=1, descending=True, stable=True).indices
    own = ids.gather(1, order[:, :k0])  # [T, k0]

    # 2. S_base over valid rows only
    rows = torch.arange(num_tokens, device=device)
    if num_valid_tokens is None:
        valid = torch.ones(num_tokens, dtype=torch.bool, device=device)
    elif isinstance(num_valid_tokens, torch.Tensor):
        valid = rows < num_valid_tokens.to(device=device).reshape(-1)[0]
    else:
        valid = rows < int(num_valid_tokens)
    own_mask = torch.zeros(num_tokens, num_experts, dtype=torch.bool, device=device)
    own_mask.scatter_(1, own, True)
    own_mask &= valid.unsqueeze(1)
    s_base = own_mask.any(dim=0)  # [E]

    # 3. candidates: S_base minus the token's own, best first
    cand = s_base.unsqueeze(0) & ~own_mask
    cand_scores = scores.masked_fill(~cand, float("-inf"))
    extra_ids = cand_scores.topk(k, dim=1).indices  # [T, k]
    extra_ok = cand.gather(1, extra_ids)

    # valid rows: own k0 + best (k - k0) extras; padded rows: best k of S_base
    n_extra = k - k0
    ones_k0 = torch.ones(num_tokens, k0, dtype=torch.bool, device=device)
    valid_ids = torch.cat([own, extra_ids[:, :n_extra]], dim=1)
    valid_ok = torch.cat([ones_k0, extra_ok[:, :n_extra]], dim=1)
    new_ids = torch.where(valid.unsqueeze(1), valid_ids, extra_ids)
    new_ok = torch.where(valid.unsqueeze(1), valid_ok, extra_ok)
    # pad: the row's first chosen id (own top-1; for a padded row its best S_base
    # expert, or, only when the whole batch is padding, its router top-1), weight 0
    fill = torch.where(valid, own[:, 0], torch.where(extra_ok[:, 0], extra_ids[:, 0], own[:, 0]))
    new_ids = torch.where(new_ok, new_ids, fill.unsqueeze(1))

    # 4. weights
    raw = weight_scores.float().gather(1, new_ids) * new_ok
    target = topk_weights.float().sum(dim=1, keepdim=True)
    if renormalize:
        new_weights = raw / raw.sum(dim=1, keepdim=True).clamp_min(_EPS) * target
    else:
        scale = target / weight_scores.float().gather(1, ids).sum(dim=1, keepdim=True).clamp_min(_EPS)
        new_weights = raw * scale
    return new_weights.to(topk_weights.dtype), new_ids.to(topk_ids.dtype)


_num_valid_tokens: torch.Tensor | None = None


def set_num_valid_tokens(num_valid_tokens: torch.Tensor | None) -> None:
    """Record the current forward's non-padded token count (TP path).

    The TP MoE path does not hand num_token_non_padded to the router (passing it
    would also turn on -1 masking of padded rows, which the TP kernels do not
    expect), so the model records it here before its MoE layers run.
    """
    global _num_valid_tokens
    _num_valid_tokens = num_valid_tokens


def get_num_valid_tokens() -> torch.Tensor | None:
    return _num_valid_tokens


def record_tp_valid_tokens(forward_batch) -> None:
    """The MoE blocks' hook (DeepSeek-V2/V3/Kimi, Qwen2-MoE, Qwen3-MoE, GLM-4-MoE):
    record the forward's non-padded count before the block's router runs.

    With DP attention the MoE rows are gathered across ranks (padding is not a
    suffix), and without a batch nothing is known: then no count is recorded and
    every row counts as valid. Off (OEA and its statistics off): nothing is done.
    """
    if not oea_needs_num_valid_tokens():
        return
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled

    set_num_valid_tokens(
        getattr(forward_batch, "num_token_non_padded", None)
        if forward_batch is not None and not is_dp_attention_enabled()
        else None
    )


# Routing OEA cannot reach: warned once per reason. The first forwards run at start
# (warm-up, CUDA-graph capture), so that is when the warning appears.
_warned_unreachable: set = set()
_hook_calls = 0  # maybe_apply_oea calls while OEA or its statistics are on
_bypass_mark: int | None = None


def _oea_requested() -> str:
    """What the environment asks of OEA ("" when off), for messages."""
    k0 = oea_k0_from_env()
    parts = [f"{ENV_K0}={k0}"] if k0 > 0 else []
    if oea_stats_from_env():
        parts.append(f"{ENV_STATS}=1")
    return " and ".join(parts)


def warn_oea_unreachable(reason: str) -> None:
    """The routing is computed where OEA cannot rewrite (or count) it: warn once per reason."""
    if reason in _warned_unreachable:
        return
    requested = _oea_requested()
    if not requested:
        return
    _warned_unreachable.add(reason)
    logger.warning(
        "sglang-overlay oea_topk: %s has no effect with %s: OEA rewrites and counts "
        "only the routing select_experts computes (TopK output format STANDARD, e.g. "
        "--moe-runner-backend triton); see oea_topk in the overlay's manifest.yaml",
        requested,
        reason,
    )


def note_routing_in_kernel(output_format: str, backend: str) -> None:
    """TopK.forward_cuda hands the MoE kernel logits instead of a routing.

    TRITON_KERNEL is routed by triton_kernels, never by select_experts. BYPASSED
    is routed inside the fused kernel unless the MoE runner materializes it
    (BypassedTopKOutput.to_standard calls select_experts, so the hook runs): two
    bypassed calls with no hook call between them mean nothing materialized it.
    """
    global _bypass_mark
    reason = f"MoE runner backend {backend!r} (TopK output format {output_format}: routed inside its kernel)"
    if output_format != "BYPASSED":
        warn_oea_unreachable(reason)
        return
    if not _oea_requested():
        return
    if _bypass_mark == _hook_calls:
        warn_oea_unreachable(reason)
    _bypass_mark = _hook_calls


def maybe_apply_oea(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    router_logits: torch.Tensor,
    *,
    scoring_func: str,
    correction_bias: torch.Tensor | None,
    renormalize: bool,
    num_routed_topk: int | None = None,
    num_token_non_padded: torch.Tensor | None = None,
    k0: int | None = None,
    max_tokens: int | None = None,
    stats: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The select_experts hook: OEA when enabled and the batch is small, else the inputs.

    num_routed_topk: the router's routed columns, at the front; any further columns
    are fused shared experts, kept as they are. The count comes from the caller
    because the layout differs: on CUDA the router appends the shared columns
    itself, on ROCm/aiter they are appended later (_post_process_topk_ids), so
    there every column is routed. None: every column is routed.

    With stats on, the returned routing of a small batch is also counted
    (record_routing_stats), whether OEA changed it or not.
    """
    if k0 is None:
        k0 = oea_k0_from_env()
    if stats is None:
        stats = oea_stats_from_env()
    if k0 <= 0 and not stats:
        return topk_weights, topk_ids
    global _hook_calls
    _hook_calls += 1
    if max_tokens is None:
        max_tokens = oea_max_tokens_from_env()
    if topk_ids.shape[0] > max_tokens or topk_ids.dim() != 2:
        return topk_weights, topk_ids
    if num_token_non_padded is None:
        num_token_non_padded = get_num_valid_tokens()
    if k0 > 0:
        topk_weights, topk_ids = _apply_oea(
            topk_weights,
            topk_ids,
            router_logits,
            scoring_func,
            correction_bias,
            renormalize,
            num_routed_topk,
            num_token_non_padded,
            k0,
        )
    if stats:
        record_routing_stats(topk_ids, router_logits.shape[-1], num_token_non_padded)
    return topk_weights, topk_ids


def _apply_oea(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    router_logits: torch.Tensor,
    scoring_func: str,
    correction_bias: torch.Tensor | None,
    renormalize: bool,
    num_routed_topk: int | None,
    num_token_non_padded: torch.Tensor | None,
    k0: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = router_scores(router_logits, scoring_func, correction_bias)
    if scores is None:
        warn_oea_unreachable(f"scoring function {scoring_func!r}")
        return topk_weights, topk_ids
    choice, weight = scores
    # columns past the routed ones are fused shared experts: OEA routes the rest
    n_routed = topk_ids.shape[1] if num_routed_topk is None else num_routed_topk
    if 0 < n_routed < topk_ids.shape[1]:
        w, i = opportunistic_expert_activation(
            choice,
            topk_ids[:, :n_routed],
            topk_weights[:, :n_routed],
            k0,
            num_valid_tokens=num_token_non_padded,
            renormalize=renormalize,
            weight_scores=weight,
        )
        return (
            torch.cat([w, topk_weights[:, n_routed:]], dim=1),
            torch.cat([i, topk_ids[:, n_routed:]], dim=1),
        )
    return opportunistic_expert_activation(
        choice,
        topk_ids,
        topk_weights,
        k0,
        num_valid_tokens=num_token_non_padded,
        renormalize=renormalize,
        weight_scores=weight,
    )


# [calls with >= 1 non-padded row, sum of distinct routed experts, sum of
# non-padded rows]; created by the first counted call, None while stats are off.
_stats: torch.Tensor | None = None
_warned_capture = False


def record_routing_stats(
    topk_ids: torch.Tensor,
    num_experts: int,
    num_valid_tokens: int | torch.Tensor | None = None,
) -> None:
    """Add one routing call to the per-process counter, on the device, without syncing.

    Only ids in [0, num_experts) count: fused shared experts are appended with
    ids num_experts.. (and the aiter path appends them only after
    select_experts, so a column count would drop routed experts there), and -1
    marks masked rows. Rows >= num_valid_tokens are padding; None = all valid.
    Every op has a shape fixed by topk_ids and the buffer is updated in place,
    so under CUDA-graph capture the update becomes part of the graph and the
    count follows num_valid_tokens' value at replay.
    """
    global _stats, _warned_capture
    device = topk_ids.device
    if _stats is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # Its zero-fill would be captured too and replayed before every
            # update. The eager warm-up forwards before capture create it; a
            # backend without them is left uncounted rather than miscounted.
            if not _warned_capture:
                _warned_capture = True
                logger.warning(
                    "%s=1: first routing call is inside CUDA-graph capture; graph-replayed calls are not counted",
                    ENV_STATS,
                )
            return
        _stats = torch.zeros(3, dtype=torch.int64, device=device)
    num_tokens = topk_ids.shape[0]
    if num_valid_tokens is None:
        valid = torch.ones(num_tokens, dtype=torch.bool, device=device)
    else:
        rows = torch.arange(num_tokens, device=device)
        if isinstance(num_valid_tokens, torch.Tensor):
            valid = rows < num_valid_tokens.to(device=device).reshape(-1)[0]
        else:
            valid = rows < int(num_valid_tokens)
    # Slots: 0 = padding row or masked id (-1), 1..E = routed experts, E + 1 =
    # fused shared experts (ids E..). Few kernels: this runs in every MoE layer.
    slot = torch.where(valid.unsqueeze(1), topk_ids.long() + 1, 0).clamp_(0, num_experts + 1)
    seen = torch.zeros(num_experts + 2, dtype=torch.int64, device=device)
    seen.scatter_(0, slot.reshape(-1), 1)
    n_rows = valid.sum()
    _stats.add_(torch.stack([n_rows.clamp(max=1), seen[1 : num_experts + 1].sum(), n_rows]))


def oea_stats_snapshot() -> dict | None:
    """The counter since process start, or None with SGLANG_OEA_STATS off.

    Reads the device buffer (a synchronization): for get_internal_state, not the
    forward path. Sums are returned too so a client can difference two snapshots.
    """
    if not oea_stats_from_env():
        return None
    calls, distinct, rows = _stats.tolist() if _stats is not None else (0, 0, 0)
    return {
        "calls": calls,
        "distinct_experts_sum": distinct,
        "rows_sum": rows,
        "mean_distinct_experts": distinct / calls if calls else None,
        "mean_rows": rows / calls if calls else None,
        "k0": oea_k0_from_env(),
        "max_tokens": oea_max_tokens_from_env(),
    }
