"""oea_topk on the 0.5.23 pin: the overlay module against the reference, and the hook in 0.5.23's select_experts.

The module-level tests of the 0.5.17 suite run here as they are (imported by name: same property, the
0.5.23 overlay oea.py). What 0.5.23 changed is tested below: the non-padded count now reaches select_experts
from the forward context (TopK.forward_* -> resolve_routing_inputs) instead of the 0.5.17 per-model hooks,
routers may leave -1 on rows they masked themselves, a per-token correction bias, the hook after the
routed-scaling fold, the internal state contributor.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

# The 0.5.17 tests whose property is the overlay module's own, and their fixtures (pytest collects
# test functions and fixtures from this module's namespace, so these run against the 0.5.23 tree).
from test_sglang_oea import (  # noqa: F401
    _configs,
    _totals,
    as_rows,
    reference_distinct,
    reference_oea,
    routed,
    test_batch_of_one_is_topk0_pruning,
    test_env_parsing,
    test_fused_shared_expert_columns_are_kept,
    test_k0_zero_or_k_returns_inputs_unchanged,
    test_oea_matches_reference_on_random_batches,
    test_padding_rows_never_join_s_base,
    test_router_scores_kimi_semantics,
    test_select_experts_off_is_bit_identical_to_upstream,
    test_stats_count_ignores_shared_columns_and_padding_exactly,
    test_stats_count_matches_python_on_random_batches,
    test_stats_off_creates_nothing_and_routing_is_bit_identical,
    test_stats_snapshot_fields,
    test_token_gate,
)

NAMES = ["deepseek_v3", "deepseek_v3_scaled_out", "grouped_softmax", "native_softmax"]


@pytest.fixture
def fresh_warnings(oea, monkeypatch):
    monkeypatch.setattr(oea, "_warned_unreachable", set())
    monkeypatch.setattr(oea, "_bypass_mark", None)
    monkeypatch.setattr(oea, "_hook_calls", 0)
    return oea


@pytest.fixture
def make_topk(topk_mods, monkeypatch):
    """A real TopK layer. Its constructor reads the model's shared-expert layout from the runtime context,
    which a server publishes at start: here the default layout (no fused shared experts, no Waterfill)."""
    mod, _ = topk_mods
    monkeypatch.setattr(mod, "get_model", lambda: SimpleNamespace(shared_experts=mod.SharedExpertsConfig()))
    return lambda **kw: mod.TopK(layer_id=0, is_draft=True, **kw)  # is_draft: no EPLB dispatch info here


def _assert_matches_reference(out, base, cfg, oea_mod, k0, n_valid, logits, bias=None):
    choice, weight = oea_mod.router_scores(logits, cfg.scoring_func, cfg.correction_bias if bias is None else bias)
    ref_rows, s_base, _ = reference_oea(choice, weight, base.topk_ids, base.topk_weights, k0, n_valid)
    got = as_rows(out.topk_weights, out.topk_ids)
    for t in range(n_valid):
        assert set(got[t]) == set(ref_rows[t]), t
        for e in got[t]:
            assert got[t][e] == pytest.approx(ref_rows[t][e], rel=1e-4)
    return s_base


@pytest.mark.parametrize("name", NAMES)
def test_select_experts_on_applies_oea(topk_mods, oea, monkeypatch, name):
    """OEA on 0.5.23's routers (sigmoid + bias grouped, with the scale folded in or on the output, grouped
    softmax, torch native) equals the reference applied to pristine 0.5.23's routing; above the token gate
    the routing is pristine's."""
    mod, upstream = topk_mods
    E = 64
    gen = torch.Generator().manual_seed(23)
    cfg = _configs(mod, E)[name]
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    monkeypatch.setenv("SGLANG_OEA_MAX_TOKENS", "16")
    for T in (1, 4, 12, 40):
        x = torch.randn(T, 16, generator=gen)
        logits = torch.randn(T, E, generator=gen)
        base = upstream.select_experts(x, logits, _configs(upstream, E)[name])
        out = mod.select_experts(x, logits, cfg)
        if T > 16:
            assert torch.equal(out.topk_ids, base.topk_ids) and torch.equal(out.topk_weights, base.topk_weights)
            continue
        s_base = _assert_matches_reference(out, base, cfg, oea, 3, T, logits)
        assert len(set(out.topk_ids.flatten().tolist())) == len(s_base)
        if T == 1:
            assert len(s_base) == 3


def _padding_logits(T=8, n_valid=5, E=64, seed=31):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, E, generator=gen)
    logits[:n_valid, 60:] -= 20.0  # real rows never want experts 60-63 ...
    logits[n_valid:, 60:] += 20.0  # ... which the padding rows love
    return torch.randn(T, 16, generator=gen), logits


def test_forward_context_count_keeps_padding_out_of_s_base(topk_mods, make_topk, monkeypatch):
    """The TP path of any model on 0.5.23: a real TopK (TopK.forward_native) inside the forward context the
    model runner opens, whose moe_num_token_non_padded is ForwardBatch's: the count reaches OEA without any
    per-model hook, and padding rows neither join S_base nor keep their own experts."""
    mod, _ = topk_mods
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    x, logits = _padding_logits()
    bias = torch.randn(64, generator=torch.Generator().manual_seed(42)) * 0.2
    topk = make_topk(
        top_k=8,
        use_grouped_topk=True,
        num_expert_group=1,
        topk_group=1,
        renormalize=True,
        correction_bias=bias,
        scoring_func="sigmoid",
    )
    count = torch.tensor([5], dtype=torch.int32)
    with forward_context(ForwardContext(attn_backend=None, moe_num_token_non_padded=lambda: count)):
        assert mod.resolve_routing_inputs(layer_id=0, is_draft=True)[0] is count
        out = topk.forward_native(x, logits)
    assert not ({60, 61, 62, 63} & set(out.topk_ids[:5].flatten().tolist()))
    assert not ({60, 61, 62, 63} & set(out.topk_ids.flatten().tolist()) - {-1})
    # no count (DP attention, CP gathers: upstream's moe_num_token_non_padded is None): every row is a token
    with forward_context(ForwardContext(attn_backend=None, moe_num_token_non_padded=lambda: None)):
        out_all = topk.forward_native(x, logits)
    assert {60, 61, 62, 63} & set(out_all.topk_ids.flatten().tolist())


def test_rows_a_router_masked_itself_are_handled(oea):
    """0.5.23's CUDA sqrtsoftplus gate writes -1 into padded rows itself (padded_rows_masked): OEA must not
    index with them, and they stay out of S_base."""
    gen = torch.Generator().manual_seed(9)
    _, choice, weight, ids, w = routed(6, 32, 6, gen)
    masked = ids.clone()
    masked[4:] = -1
    out_w, out_i = oea.opportunistic_expert_activation(choice, masked, w, 2, num_valid_tokens=4, weight_scores=weight)
    ref_w, ref_i = oea.opportunistic_expert_activation(choice, ids, w, 2, num_valid_tokens=4, weight_scores=weight)
    assert torch.equal(out_i[:4], ref_i[:4]) and torch.equal(out_w[:4], ref_w[:4])
    _, s_base, _ = reference_oea(choice, weight, ids, w, 2, 4)
    assert set(out_i.flatten().tolist()) <= s_base


def test_hook_masks_padded_rows_again_after_rewriting_them(patched):
    """select_experts skips _post_process's padded-row mask when the router masked them (padded_rows_masked);
    OEA rewrites every row, so the hook clears the flag. The CUDA gate cannot run here: the statement is
    checked in the source of the select_experts that runs."""
    import ast
    import inspect

    mod = patched("sglang.srt.layers.moe.topk")
    tree = ast.parse(inspect.getsource(mod.select_experts))
    hooks = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If) and "packed_topk is None and custom_routing_function is None" in ast.unparse(n.test)
    ]
    (hook,) = hooks
    body = ast.unparse(hook)
    assert "maybe_apply_oea(" in body and "if oea_ids is not topk_ids:\n        padded_rows_masked = False" in body
    names = [ast.unparse(s) for s in tree.body[0].body]
    hook_at = next(i for i, s in enumerate(tree.body[0].body) if s is hook)
    fold_at = next(i for i, s in enumerate(names) if s.startswith("if fold_scale_after_routing"))
    post_at = next(i for i, s in enumerate(names) if "_post_process_topk_ids(" in s)
    sim_at = next(i for i, s in enumerate(names) if s.startswith("if routing_overridden:"))
    assert fold_at < hook_at < sim_at < post_at


def test_per_token_correction_bias(topk_mods, oea, monkeypatch):
    """dynamic_expert_bias (bailing_moe's multi-gate): a [T, E] bias ranks the experts; OEA ranks with it too."""
    mod, upstream = topk_mods
    E, T = 64, 6
    gen = torch.Generator().manual_seed(5)
    x, logits = torch.randn(T, 16, generator=gen), torch.randn(T, E, generator=gen)
    bias = torch.randn(T, E, generator=gen) * 0.5
    cfg_kw = {"top_k": 8, "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1, "scoring_func": "sigmoid"}
    base = upstream.select_experts(x, logits, upstream.TopKConfig(**cfg_kw), dynamic_expert_bias=bias)
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    off = mod.select_experts(x, logits, mod.TopKConfig(**cfg_kw), dynamic_expert_bias=bias)
    assert torch.equal(off.topk_ids, base.topk_ids) and torch.equal(off.topk_weights, base.topk_weights)
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    cfg = mod.TopKConfig(**cfg_kw)
    out = mod.select_experts(x, logits, cfg, dynamic_expert_bias=bias)
    choice, _ = oea.router_scores(logits, "sigmoid", bias)
    assert torch.allclose(choice, logits.sigmoid() + bias)
    _assert_matches_reference(out, base, cfg, oea, 2, T, logits, bias=bias)


def test_select_experts_counts_router_ids_with_k0_zero(topk_mods, oea, monkeypatch):
    """K0=0 + stats: pristine 0.5.23 routing bit for bit, counted over the non-padded rows it is given."""
    mod, upstream = topk_mods
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    monkeypatch.setenv("SGLANG_OEA_MAX_TOKENS", "16")
    E = 64
    gen = torch.Generator().manual_seed(41)
    want = [0, 0, 0]
    for name in ("deepseek_v3", "grouped_softmax", "native_softmax"):
        for T, n_valid in ((1, None), (8, 5), (16, 16), (40, None)):
            x = torch.randn(T, 16, generator=gen)
            logits = torch.randn(T, E, generator=gen)
            count = None if n_valid is None else torch.tensor([n_valid], dtype=torch.int32)
            out = mod.select_experts(x, logits, _configs(mod, E)[name], num_token_non_padded=count)
            base = upstream.select_experts(x, logits, _configs(upstream, E)[name], num_token_non_padded=count)
            assert torch.equal(out.topk_ids, base.topk_ids) and torch.equal(out.topk_weights, base.topk_weights)
            if T <= 16:
                n = T if n_valid is None else n_valid
                want = [want[0] + 1, want[1] + reference_distinct(base.topk_ids, E, n, 0), want[2] + n]
            assert list(_totals(oea)) == want, (name, T)
    assert want[0] == 9


def test_forward_batch_turns_on_non_padded_count_with_oea(patched, monkeypatch):
    fbi = patched("sglang.srt.model_executor.forward_batch_info")
    import sglang.srt.layers.moe.utils as moe_utils

    monkeypatch.setattr(fbi, "get_parallel", lambda: SimpleNamespace(moe_ep_size=1))
    monkeypatch.setattr(fbi, "world_dp_gather_enabled", lambda: False)
    monkeypatch.setattr(fbi, "_dp_tp_moe_masks_pad_rows", lambda: False)
    monkeypatch.setattr(moe_utils, "get_moe_a2a_backend", lambda: SimpleNamespace(is_customized=lambda: False))
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    assert fbi.enable_num_token_non_padded() is False
    for var in ("SGLANG_OEA_K0", "SGLANG_OEA_STATS"):
        monkeypatch.setenv(var, "1")
        assert fbi.enable_num_token_non_padded() is True
        monkeypatch.delenv(var)


def test_internal_state_returns_oea_stats(patched, oea, monkeypatch):
    """SchedulerInternalStateController (where 0.5.23 moved Scheduler.get_internal_state) runs the
    _add_oea_stats contributor; what it adds is /get_server_info's internal_states[i]["oea_stats"]."""
    mod = patched("sglang.srt.managers.scheduler_components.internal_state")
    import inspect

    assert "self._add_oea_stats," in inspect.getsource(mod.SchedulerInternalStateController.get_internal_state)
    ctl = mod.SchedulerInternalStateController(scheduler=SimpleNamespace(), record_step_time=False)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    state = {}
    ctl._add_oea_stats(state)
    assert state == {}
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    oea.record_routing_stats(torch.tensor([[0, 1], [2, 3]]), 8, None)
    ctl._add_oea_stats(state)
    assert state["oea_stats"]["calls"] == 1 and state["oea_stats"]["distinct_experts_sum"] == 4


def test_bypassed_format_warns_when_nothing_materializes_it(topk_mods, make_topk, fresh_warnings, monkeypatch, caplog):
    """0.5.23 binds the output format to the TopK (bind_runner_backend); a BYPASSED TopK whose output no
    runner materializes (two bypassed calls, no routing hook in between) warns once, naming the backend."""
    mod, _ = topk_mods
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    caplog.set_level(logging.WARNING)
    topk = make_topk(top_k=4, output_format=mod.TopKOutputFormat.BYPASSED, renormalize=True)
    topk.topk_config.runner_backend = MoeRunnerBackend.FLASHINFER_TRTLLM
    x, logits = torch.randn(6, 16), torch.randn(6, 32)
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    topk.forward_cuda(x, logits)
    topk.forward_cuda(x, logits)
    assert [r for r in caplog.records if "oea_topk" in r.getMessage()] == []
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    for _ in range(3):
        topk.forward_cuda(x, logits)
    (msg,) = [r.getMessage() for r in caplog.records if "oea_topk" in r.getMessage()]
    assert "SGLANG_OEA_K0=3 has no effect with MoE runner backend 'flashinfer_trtllm'" in msg
