"""oea_topk: the OEA module against a plain reference, and the select_experts hook in the patched topk.py."""
from __future__ import annotations

import random

import pytest

import torch


# ---------------------------------------------------------------- reference
def reference_oea(choice, weight, ids, wts, k0, n_valid, renormalize=True):
    """Obviously-correct OEA (arXiv 2511.02237), one token at a time, in plain Python.

    Returns per row a dict {expert: weight} of the experts that get a non-zero weight,
    plus S_base.
    """
    T, k = ids.shape
    own = []
    for t in range(T):
        sel = [int(e) for e in ids[t]]
        # own top-k0: the best k0 of the router's selection (stable on router order)
        sel_sorted = sorted(range(k), key=lambda j: -float(choice[t, sel[j]]))
        own.append([sel[j] for j in sel_sorted[:k0]])
    s_base = set()
    for t in range(n_valid):
        s_base.update(own[t])
    rows = []
    for t in range(T):
        if t < n_valid:
            rest = sorted(s_base - set(own[t]), key=lambda e: -float(choice[t, e]))
            chosen = own[t] + rest[: k - k0]
        else:
            chosen = sorted(s_base, key=lambda e: -float(choice[t, e]))[:k]
        raw = {e: float(weight[t, e]) for e in chosen}
        target = float(wts[t].double().sum())
        if renormalize:
            total = sum(raw.values())
            rows.append({e: w / total * target for e, w in raw.items()})
        else:
            scale = target / sum(float(weight[t, int(e)]) for e in ids[t])
            rows.append({e: w * scale for e, w in raw.items()})
    return rows, s_base, own


def as_rows(w, i):
    out = []
    for t in range(i.shape[0]):
        d = {}
        for e, x in zip(i[t].tolist(), w[t].tolist()):
            if x != 0.0:
                assert e not in d, f"row {t}: expert {e} chosen twice with non-zero weight"
                d[e] = x
        out.append(d)
    return out


def routed(T, E, k, gen, scoring="softmax", bias=False):
    logits = torch.randn(T, E, generator=gen)
    if scoring == "softmax":
        weight = logits.softmax(-1)
    else:
        weight = logits.sigmoid()
    choice = weight + (torch.randn(E, generator=gen) * 0.3).unsqueeze(0) if bias else weight
    ids = choice.topk(k, dim=1).indices
    w = weight.gather(1, ids)
    w = w / w.sum(1, keepdim=True)
    return logits, choice, weight, ids.to(torch.int32), w


# ---------------------------------------------------------------- the module
@pytest.fixture(scope="module")
def oea(patched):
    return patched("sglang.srt.layers.moe.oea")


def test_oea_matches_reference_on_random_batches(oea):
    gen = torch.Generator().manual_seed(1234)
    rnd = random.Random(99)
    cases = 0
    for _ in range(300):
        E = rnd.choice([8, 16, 64, 384])
        k = rnd.choice([2, 4, 6, 8])
        k = min(k, E)
        T = rnd.randint(1, 24)
        k0 = rnd.randint(1, k - 1) if k > 1 else 1
        n_valid = rnd.randint(1, T)
        scoring, bias = rnd.choice([("softmax", False), ("sigmoid", True), ("sigmoid", False)])
        _, choice, weight, ids, w = routed(T, E, k, gen, scoring, bias)
        if rnd.random() < 0.3:
            w = w * 2.827  # routed scaling applied on the output
        pad = rnd.random() < 0.5
        nv = torch.tensor([n_valid], dtype=torch.int32) if pad else None
        out_w, out_i = oea.opportunistic_expert_activation(
            choice, ids, w, k0, num_valid_tokens=nv, weight_scores=weight
        )
        n_eff = n_valid if pad else T
        ref_rows, s_base, own = reference_oea(choice, weight, ids, w, k0, n_eff)
        got = as_rows(out_w, out_i)
        assert out_i.shape == ids.shape and out_w.shape == w.shape
        assert out_i.dtype == ids.dtype and out_w.dtype == w.dtype
        for t in range(T):
            assert set(got[t]) == set(ref_rows[t]), (t, got[t], ref_rows[t])
            for e in got[t]:
                assert got[t][e] == pytest.approx(ref_rows[t][e], rel=1e-5, abs=1e-7)
            # every id in the row, weighted or padding, is inside S_base
            assert set(out_i[t].tolist()) <= s_base
            assert len(got[t]) <= k
            if t < n_eff:
                assert set(own[t]) <= set(got[t]), "a token lost one of its own top-k0"
                assert sum(got[t].values()) == pytest.approx(float(w[t].sum()), rel=1e-5)
        cases += 1
    assert cases == 300


def test_batch_of_one_is_topk0_pruning(oea):
    gen = torch.Generator().manual_seed(7)
    for k0 in (1, 2, 3, 5):
        _, choice, weight, ids, w = routed(1, 64, 8, gen)
        out_w, out_i = oea.opportunistic_expert_activation(choice, ids, w, k0, weight_scores=weight)
        top = weight[0].topk(k0).indices.tolist()
        got = as_rows(out_w, out_i)[0]
        assert set(got) == set(top)
        expect = weight[0, top] / weight[0, top].sum()
        for e, x in zip(top, expect.tolist()):
            assert got[e] == pytest.approx(x, rel=1e-6)
        # padding slots repeat the top-1 id with weight 0: no extra expert is touched
        assert set(out_i[0].tolist()) == set(top)


def test_padding_rows_never_join_s_base(oea):
    # Rows 0-1 are real, rows 2-3 padding whose own favourites are experts nobody real wants.
    E, k = 16, 4
    logits = torch.full((4, E), -5.0)
    logits[0, [0, 1, 2, 3]] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    logits[1, [1, 4, 5, 6]] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    logits[2:, [10, 11, 12, 13]] = torch.tensor([9.0, 8.0, 7.0, 6.0])
    weight = logits.softmax(-1)
    ids = weight.topk(k, dim=1).indices.to(torch.int32)
    w = weight.gather(1, ids.long())
    w = w / w.sum(1, keepdim=True)
    out_w, out_i = oea.opportunistic_expert_activation(weight, ids, w, 2, num_valid_tokens=torch.tensor([2]))
    s_base = {0, 1, 4}
    assert set(out_i.flatten().tolist()) <= s_base
    # without the count the padding rows' favourites would be activated
    _, out_i_all = oea.opportunistic_expert_activation(weight, ids, w, 2)
    assert {10, 11} <= set(out_i_all.flatten().tolist())
    # an int count means the same
    _, out_i_int = oea.opportunistic_expert_activation(weight, ids, w, 2, num_valid_tokens=2)
    assert torch.equal(out_i_int, out_i)


def test_k0_zero_or_k_returns_inputs_unchanged(oea):
    gen = torch.Generator().manual_seed(3)
    _, choice, weight, ids, w = routed(5, 32, 4, gen)
    for k0 in (0, 4, 9):
        out_w, out_i = oea.opportunistic_expert_activation(choice, ids, w, k0)
        assert out_w is w and out_i is ids


def test_router_scores_kimi_semantics(oea):
    """Choice = sigmoid + bias (what selected the experts); weight = sigmoid without bias."""
    logits = torch.randn(3, 8)
    bias = torch.randn(8)
    choice, weight = oea.router_scores(logits, "sigmoid", bias)
    assert torch.allclose(weight, logits.sigmoid())
    assert torch.allclose(choice, logits.sigmoid() + bias)
    choice, weight = oea.router_scores(logits, "softmax", None)
    assert choice is weight and torch.allclose(weight, logits.softmax(-1))
    assert oea.router_scores(logits, "nonsense", None) is None


def test_env_parsing(oea, monkeypatch):
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.delenv("SGLANG_OEA_MAX_TOKENS", raising=False)
    assert oea.oea_k0_from_env() == 0
    assert oea.oea_max_tokens_from_env() == 64
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    monkeypatch.setenv("SGLANG_OEA_MAX_TOKENS", "16")
    assert oea.oea_k0_from_env() == 3 and oea.oea_max_tokens_from_env() == 16
    monkeypatch.setenv("SGLANG_OEA_K0", "-1")
    with pytest.raises(ValueError, match="SGLANG_OEA_K0"):
        oea.oea_k0_from_env()


def test_fused_shared_expert_columns_are_kept(oea):
    gen = torch.Generator().manual_seed(11)
    _, choice, weight, ids, w = routed(6, 32, 6, gen)
    shared_id = torch.full((6, 1), 32, dtype=ids.dtype)
    ids_s = torch.cat([ids, shared_id], 1)
    w_s = torch.cat([w, torch.full((6, 1), 0.4)], 1)
    logits = torch.log(weight)  # softmax(log p) == p
    out_w, out_i = oea.maybe_apply_oea(
        w_s, ids_s, logits, scoring_func="softmax", correction_bias=None, renormalize=True,
        num_fused_shared_experts=1, k0=2, max_tokens=64,
    )
    assert torch.equal(out_i[:, -1], ids_s[:, -1]) and torch.equal(out_w[:, -1], w_s[:, -1])
    ref_w, ref_i = oea.opportunistic_expert_activation(choice, ids, w, 2, weight_scores=weight)
    assert torch.equal(out_i[:, :-1], ref_i)
    assert torch.allclose(out_w[:, :-1], ref_w, atol=1e-6)


def test_token_gate(oea):
    gen = torch.Generator().manual_seed(5)
    logits, choice, weight, ids, w = routed(10, 16, 4, gen)
    out_w, out_i = oea.maybe_apply_oea(w, ids, logits, scoring_func="softmax", correction_bias=None,
                                       renormalize=True, k0=1, max_tokens=9)
    assert out_w is w and out_i is ids
    out_w, out_i = oea.maybe_apply_oea(w, ids, logits, scoring_func="softmax", correction_bias=None,
                                       renormalize=True, k0=1, max_tokens=10)
    assert not torch.equal(out_i, ids)


# ---------------------------------------------------------------- the hook in select_experts
@pytest.fixture(scope="module")
def topk_mods(patched, pristine_module):
    return patched("sglang.srt.layers.moe.topk"), pristine_module(
        "python/sglang/srt/layers/moe/topk.py", "sglang_pristine_topk"
    )


def _configs(mod, E):
    bias = torch.randn(E, generator=torch.Generator().manual_seed(42)) * 0.2
    return {
        # DeepSeek-V3 / Kimi-K2.5: sigmoid + correction bias, grouped (n_group 1), routed scaling
        "deepseek_v3": mod.TopKConfig(top_k=8, use_grouped_topk=True, num_expert_group=1, topk_group=1,
                                      renormalize=True, correction_bias=bias, scoring_func="sigmoid",
                                      routed_scaling_factor=2.827),
        "deepseek_v3_scaled_out": mod.TopKConfig(top_k=8, use_grouped_topk=True, num_expert_group=1,
                                                 topk_group=1, renormalize=True, correction_bias=bias,
                                                 scoring_func="sigmoid", routed_scaling_factor=2.827,
                                                 apply_routed_scaling_factor_on_output=True),
        "grouped_softmax": mod.TopKConfig(top_k=6, use_grouped_topk=True, num_expert_group=8, topk_group=3,
                                          renormalize=True, scoring_func="softmax"),
        "native_softmax": mod.TopKConfig(top_k=8, renormalize=True, torch_native=True),
    }


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3_scaled_out", "grouped_softmax", "native_softmax"])
def test_select_experts_off_is_bit_identical_to_upstream(topk_mods, monkeypatch, name):
    mod, upstream = topk_mods
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    E = 64
    gen = torch.Generator().manual_seed(17)
    for T in (1, 3, 8, 33, 100):
        x = torch.randn(T, 16, generator=gen)
        logits = torch.randn(T, E, generator=gen)
        a = mod.select_experts(x, logits, _configs(mod, E)[name])
        b = upstream.select_experts(x, logits, _configs(upstream, E)[name])
        assert torch.equal(a.topk_ids, b.topk_ids) and torch.equal(a.topk_weights, b.topk_weights)
        assert a.topk_weights.dtype == b.topk_weights.dtype and a.topk_ids.dtype == b.topk_ids.dtype


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3_scaled_out", "grouped_softmax", "native_softmax"])
def test_select_experts_on_applies_oea(topk_mods, patched, monkeypatch, name):
    mod, upstream = topk_mods
    oea = patched("sglang.srt.layers.moe.oea")
    E = 64
    gen = torch.Generator().manual_seed(23)
    cfg = _configs(mod, E)[name]
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    monkeypatch.setenv("SGLANG_OEA_MAX_TOKENS", "16")
    oea.set_num_valid_tokens(None)
    for T in (1, 4, 12, 40):
        x = torch.randn(T, 16, generator=gen)
        logits = torch.randn(T, E, generator=gen)
        base = upstream.select_experts(x, logits, _configs(upstream, E)[name])
        out = mod.select_experts(x, logits, cfg)
        if T > 16:  # above the gate: upstream routing
            assert torch.equal(out.topk_ids, base.topk_ids) and torch.equal(out.topk_weights, base.topk_weights)
            continue
        choice, weight = oea.router_scores(logits, cfg.scoring_func, cfg.correction_bias)
        ref_rows, s_base, own = reference_oea(choice, weight, base.topk_ids, base.topk_weights, 3, T)
        got = as_rows(out.topk_weights, out.topk_ids)
        for t in range(T):
            assert set(got[t]) == set(ref_rows[t])
            for e in got[t]:
                assert got[t][e] == pytest.approx(ref_rows[t][e], rel=1e-4)
        distinct = len(set(out.topk_ids.flatten().tolist()))
        assert distinct == len(s_base) <= len(set(base.topk_ids.flatten().tolist()))
        if T == 1:
            assert distinct == 3


def test_select_experts_tp_path_uses_recorded_valid_count(topk_mods, patched, monkeypatch):
    """The TP path passes no num_token_non_padded; DeepseekV2MoE.forward records it via set_num_valid_tokens."""
    mod, _ = topk_mods
    oea = patched("sglang.srt.layers.moe.oea")
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    E, T = 64, 8
    gen = torch.Generator().manual_seed(31)
    x = torch.randn(T, 16, generator=gen)
    logits = torch.randn(T, E, generator=gen)
    logits[:5, 60:] -= 20.0  # real rows never want experts 60-63 ...
    logits[5:, 60:] += 20.0  # ... which the padding rows love
    cfg = _configs(mod, E)["deepseek_v3"]
    try:
        oea.set_num_valid_tokens(torch.tensor([5], dtype=torch.int32))
        out = mod.select_experts(x, logits, cfg)
    finally:
        oea.set_num_valid_tokens(None)
    assert not ({60, 61, 62, 63} & set(out.topk_ids.flatten().tolist()))
    out_all = mod.select_experts(x, logits, cfg)
    assert {60, 61, 62, 63} & set(out_all.topk_ids.flatten().tolist())


def test_forward_batch_turns_on_non_padded_count_with_oea(patched, monkeypatch):
    fbi = patched("sglang.srt.model_executor.forward_batch_info")
    from types import SimpleNamespace

    monkeypatch.setattr(fbi, "get_parallel", lambda: SimpleNamespace(moe_ep_size=1))
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    assert fbi.enable_num_token_non_padded() is False
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    assert fbi.enable_num_token_non_padded() is True
