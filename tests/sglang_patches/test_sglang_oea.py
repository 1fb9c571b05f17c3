"""oea_topk: the OEA module against a plain reference, and the select_experts hook in the patched topk.py."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

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
    weight = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
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
        w_s,
        ids_s,
        logits,
        scoring_func="softmax",
        correction_bias=None,
        renormalize=True,
        num_routed_topk=6,
        k0=2,
        max_tokens=64,
    )
    assert torch.equal(out_i[:, -1], ids_s[:, -1]) and torch.equal(out_w[:, -1], w_s[:, -1])
    ref_w, ref_i = oea.opportunistic_expert_activation(choice, ids, w, 2, weight_scores=weight)
    assert torch.equal(out_i[:, :-1], ref_i)
    assert torch.allclose(out_w[:, :-1], ref_w, atol=1e-6)


def test_token_gate(oea):
    gen = torch.Generator().manual_seed(5)
    logits, choice, weight, ids, w = routed(10, 16, 4, gen)
    out_w, out_i = oea.maybe_apply_oea(
        w, ids, logits, scoring_func="softmax", correction_bias=None, renormalize=True, k0=1, max_tokens=9
    )
    assert out_w is w and out_i is ids
    out_w, out_i = oea.maybe_apply_oea(
        w, ids, logits, scoring_func="softmax", correction_bias=None, renormalize=True, k0=1, max_tokens=10
    )
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
        "deepseek_v3": mod.TopKConfig(
            top_k=8,
            use_grouped_topk=True,
            num_expert_group=1,
            topk_group=1,
            renormalize=True,
            correction_bias=bias,
            scoring_func="sigmoid",
            routed_scaling_factor=2.827,
        ),
        "deepseek_v3_scaled_out": mod.TopKConfig(
            top_k=8,
            use_grouped_topk=True,
            num_expert_group=1,
            topk_group=1,
            renormalize=True,
            correction_bias=bias,
            scoring_func="sigmoid",
            routed_scaling_factor=2.827,
            apply_routed_scaling_factor_on_output=True,
        ),
        "grouped_softmax": mod.TopKConfig(
            top_k=6, use_grouped_topk=True, num_expert_group=8, topk_group=3, renormalize=True, scoring_func="softmax"
        ),
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


def _torch_append_shared(topk_ids, topk_weights, num_fused_shared_experts, scale_factor, N=None):
    """fused_append_shared_experts (a Triton kernel) in torch: shared ids N.., weight scale_factor."""
    m, s = topk_ids.shape[0], int(num_fused_shared_experts)
    ids = torch.arange(N, N + s, dtype=topk_ids.dtype).expand(m, s)
    return torch.cat([topk_ids, ids], 1), torch.cat([topk_weights, torch.full((m, s), scale_factor)], 1)


def test_select_experts_aiter_layout_reroutes_every_routed_column(topk_mods, patched, monkeypatch):
    """ROCm/aiter: the router returns only the routed columns (topk = top_k - shared) and
    _post_process_topk_ids appends the shared expert after the hook, so OEA must reroute all of them
    (the review: T=8, E=64, k=8, k0=3, one shared expert gave 26 distinct experts where S_base had 20).
    Simulated on the CPU: _use_aiter set in the patched topk module, the append kernel in torch."""
    import importlib

    mod, _ = topk_mods
    oea = patched("sglang.srt.layers.moe.oea")
    kernels = importlib.import_module("sglang.kernels.ops.moe.fused_moe_triton_kernels")
    monkeypatch.setattr(mod, "_use_aiter", True)
    monkeypatch.setattr(kernels, "fused_append_shared_experts", _torch_append_shared)
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    oea.set_num_valid_tokens(None)
    T, E, k = 8, 64, 8
    cfg = mod.TopKConfig(top_k=k + 1, num_fused_shared_experts=1, renormalize=True, torch_native=True)
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        logits = torch.randn(T, E, generator=gen)
        out = mod.select_experts(torch.randn(T, 16, generator=gen), logits, cfg)
        assert out.topk_ids.shape == (T, k + 1) and bool((out.topk_ids[:, -1] == E).all())  # appended after
        weight = logits.softmax(-1)
        ids = weight.topk(k, dim=1).indices
        w = weight.gather(1, ids)
        ref_rows, s_base, _ = reference_oea(weight, weight, ids, w / w.sum(1, keepdim=True), 3, T)
        got = as_rows(out.topk_weights[:, :k], out.topk_ids[:, :k])
        for t in range(T):
            assert set(got[t]) == set(ref_rows[t]), t
            for e in got[t]:
                assert got[t][e] == pytest.approx(ref_rows[t][e], rel=1e-4)
        assert len(set(out.topk_ids[:, :k].flatten().tolist())) == len(s_base)


# ---------------------------------------------------------------- SGLANG_OEA_STATS
def reference_distinct(ids, num_experts, n_valid, n_shared):
    """Distinct routed experts of the first n_valid rows, fused shared columns (the last n_shared) dropped."""
    cols = ids.shape[1] - n_shared
    return len({e for row in ids[:n_valid, :cols].tolist() for e in row})


def _totals(oea):
    s = oea.oea_stats_snapshot()
    return s["calls"], s["distinct_experts_sum"], s["rows_sum"]


def test_stats_count_matches_python_on_random_batches(oea, monkeypatch):
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    gen = torch.Generator().manual_seed(4321)
    rnd = random.Random(77)
    max_tokens = 32
    want = [0, 0, 0]
    seen = {"oea": 0, "router": 0, "pad": 0, "shared": 0, "gated": 0, "all_pad": 0}
    for _ in range(400):
        E = rnd.choice([8, 16, 64, 384])
        k = min(rnd.choice([2, 4, 6, 8]), E)
        T = rnd.randint(1, 40)
        k0 = rnd.choice([0, 0, *range(1, k)])
        scoring = rnd.choice(["softmax", "sigmoid"])
        logits = torch.randn(T, E, generator=gen)
        weight = logits.softmax(-1) if scoring == "softmax" else logits.sigmoid()
        bias = torch.randn(E, generator=gen) * 0.3 if scoring == "sigmoid" and rnd.random() < 0.5 else None
        choice = weight if bias is None else weight + bias
        ids = choice.topk(k, dim=1).indices.to(torch.int32)
        w = weight.gather(1, ids.long())
        w = w / w.sum(1, keepdim=True)
        n_shared = rnd.choice([0, 0, 1, 2])
        # fused shared experts: ids num_experts.. appended as the last columns
        shared = torch.randint(E, E + max(n_shared, 1), (T, n_shared), generator=gen, dtype=ids.dtype)
        pad = rnd.choice(["none", "tensor", "int"])
        n_valid = rnd.randint(0, T)
        nv = {"none": None, "tensor": torch.tensor([n_valid], dtype=torch.int32), "int": n_valid}[pad]
        _, out_i = oea.maybe_apply_oea(
            torch.cat([w, torch.full((T, n_shared), 0.4)], 1),
            torch.cat([ids, shared], 1),
            logits,
            scoring_func=scoring,
            correction_bias=bias,
            renormalize=True,
            num_routed_topk=k,
            num_token_non_padded=nv,
            k0=k0,
            max_tokens=max_tokens,
        )
        n_eff = T if pad == "none" else n_valid
        if max_tokens < T:
            seen["gated"] += 1
        else:
            d = reference_distinct(out_i, E, n_eff, n_shared)
            if k0 > 0:  # the batch activates exactly OEA's S_base
                _, s_base, _ = reference_oea(choice, weight, ids, w, k0, n_eff)
                assert d == len(s_base)
                seen["oea"] += 1
            else:
                assert d == reference_distinct(ids, E, n_eff, 0)
                seen["router"] += 1
            want = [want[0] + (n_eff > 0), want[1] + d, want[2] + n_eff]
            seen["pad"] += 0 < n_eff < T
            seen["shared"] += n_shared > 0
            seen["all_pad"] += n_eff == 0
        assert list(_totals(oea)) == want
    assert min(seen.values()) > 0, seen


def test_stats_count_ignores_shared_columns_and_padding_exactly(oea, monkeypatch):
    monkeypatch.setattr(oea, "_stats", None)
    E = 16
    ids = torch.tensor([[0, 1, 16], [1, 2, 17], [9, 10, 16], [11, 12, 17]], dtype=torch.int32)
    oea.record_routing_stats(ids, E, torch.tensor([2], dtype=torch.int32))
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    assert _totals(oea) == (1, 3, 2)  # experts {0, 1, 2}; 16/17 are shared, rows 2-3 padding
    oea.record_routing_stats(ids, E, None)
    assert _totals(oea) == (2, 3 + 7, 2 + 4)
    oea.record_routing_stats(ids, E, 0)  # all padding: not a call, nothing counted
    assert _totals(oea) == (2, 10, 6)
    # masked rows (-1, what _post_process_topk_ids writes on CUDA) never count
    oea.record_routing_stats(torch.tensor([[-1, 3], [-1, -1]]), E, None)
    assert _totals(oea) == (3, 11, 8)


def test_stats_off_creates_nothing_and_routing_is_bit_identical(oea, monkeypatch):
    gen = torch.Generator().manual_seed(8)
    logits, choice, weight, ids, w = routed(6, 32, 6, gen)
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    kw = dict(scoring_func="softmax", correction_bias=None, renormalize=True, max_tokens=64)
    out_w, out_i = oea.maybe_apply_oea(w, ids, logits, k0=0, **kw)
    assert out_w is w and out_i is ids
    oea_w, oea_i = oea.maybe_apply_oea(w, ids, logits, k0=2, **kw)
    assert oea._stats is None and oea.oea_stats_snapshot() is None
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    assert oea.oea_stats_snapshot()["calls"] == 0 and oea.oea_stats_snapshot()["mean_distinct_experts"] is None
    on_w, on_i = oea.maybe_apply_oea(w, ids, logits, k0=0, **kw)
    assert on_w is w and on_i is ids  # counting never changes the routing
    on_w, on_i = oea.maybe_apply_oea(w, ids, logits, k0=2, **kw)
    assert torch.equal(on_i, oea_i) and torch.equal(on_w, oea_w)
    assert oea.oea_stats_snapshot()["calls"] == 2
    monkeypatch.setenv("SGLANG_OEA_STATS", "yes")
    with pytest.raises(ValueError, match="SGLANG_OEA_STATS"):
        oea.oea_stats_snapshot()


def test_stats_snapshot_fields(oea, monkeypatch):
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    monkeypatch.setenv("SGLANG_OEA_MAX_TOKENS", "16")
    oea.record_routing_stats(torch.tensor([[0, 1], [0, 2], [5, 6]]), 8, torch.tensor(2))
    oea.record_routing_stats(torch.tensor([[4, 5]]), 8, None)
    assert oea.oea_stats_snapshot() == {
        "calls": 2,
        "distinct_experts_sum": 5,
        "rows_sum": 3,
        "mean_distinct_experts": 2.5,
        "mean_rows": 1.5,
        "k0": 3,
        "max_tokens": 16,
    }


def test_select_experts_counts_router_ids_with_k0_zero(topk_mods, patched, monkeypatch):
    """K0=0 + stats: upstream routing bit for bit, counted over the rows DeepseekV2MoE.forward recorded."""
    mod, upstream = topk_mods
    oea = patched("sglang.srt.layers.moe.oea")
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
            try:
                oea.set_num_valid_tokens(None if n_valid is None else torch.tensor([n_valid], dtype=torch.int32))
                out = mod.select_experts(x, logits, _configs(mod, E)[name])
            finally:
                oea.set_num_valid_tokens(None)
            base = upstream.select_experts(x, logits, _configs(upstream, E)[name])
            assert torch.equal(out.topk_ids, base.topk_ids) and torch.equal(out.topk_weights, base.topk_weights)
            if T <= 16:
                n = T if n_valid is None else n_valid
                want = [want[0] + 1, want[1] + reference_distinct(base.topk_ids, E, n, 0), want[2] + n]
            assert list(_totals(oea)) == want, (name, T)
    assert want[0] == 9


def test_select_experts_counts_oea_routing(topk_mods, patched, monkeypatch):
    mod, _ = topk_mods
    oea = patched("sglang.srt.layers.moe.oea")
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    oea.set_num_valid_tokens(None)
    E, T = 64, 6
    gen = torch.Generator().manual_seed(43)
    out = mod.select_experts(
        torch.randn(T, 16, generator=gen), torch.randn(T, E, generator=gen), _configs(mod, E)["deepseek_v3"]
    )
    distinct = len(set(out.topk_ids.flatten().tolist()))
    assert distinct <= 2 * T
    assert _totals(oea) == (1, distinct, T)


def test_forward_batch_turns_on_non_padded_count_with_stats(patched, monkeypatch):
    fbi = patched("sglang.srt.model_executor.forward_batch_info")
    from types import SimpleNamespace

    monkeypatch.setattr(fbi, "get_parallel", lambda: SimpleNamespace(moe_ep_size=1))
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    assert fbi.enable_num_token_non_padded() is False
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    assert fbi.enable_num_token_non_padded() is True


def test_deepseek_moe_records_valid_count_with_stats(patched, monkeypatch):
    """DeepseekV2MoE.forward hands the non-padded count to the router hook when only the stats are on."""
    ds = patched("sglang.srt.models.deepseek_v2")
    oea = patched("sglang.srt.layers.moe.oea")
    from types import SimpleNamespace

    import sglang.srt.layers.dp_attention as dpa
    import sglang.srt.layers.moe.mega_moe as mega

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(dpa, "is_dp_attention_enabled", lambda: False)
    monkeypatch.setattr(mega, "should_use_mega_moe", stop)  # the first thing after the hunk
    count = torch.tensor([3], dtype=torch.int32)
    fb = SimpleNamespace(num_token_non_padded=count)
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    for stats, expect in (("0", None), ("1", count)):
        monkeypatch.setenv("SGLANG_OEA_STATS", stats)
        oea.set_num_valid_tokens(None)
        with pytest.raises(Stop):
            ds.DeepseekV2MoE.forward(SimpleNamespace(), torch.zeros(4, 8), fb)
        assert oea.get_num_valid_tokens() is expect
    oea.set_num_valid_tokens(None)


def test_get_internal_state_returns_oea_stats(patched, monkeypatch):
    """Scheduler.get_internal_state is what /get_server_info returns as internal_states[i]."""
    sched = patched("sglang.srt.managers.scheduler")
    oea = patched("sglang.srt.layers.moe.oea")
    from types import SimpleNamespace

    monkeypatch.setattr(sched, "get_context", lambda: SimpleNamespace(resolved_server_args_dict=dict))
    monkeypatch.setattr(sched, "build_memory_usage", lambda **kw: {"fake": True})
    monkeypatch.setattr(sched, "get_exec", lambda: SimpleNamespace(moe=SimpleNamespace(elastic_ep_backend=None)))
    fake_self = SimpleNamespace(
        metrics_reporter=SimpleNamespace(last_gen_throughput=1.0, spec_total_num_forward_ct=0),
        draft_worker=None,
        tp_worker=SimpleNamespace(model_runner=SimpleNamespace(weight_load_mem_usage=0), graph_memory_usage=0),
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: SimpleNamespace(mem_usage=0)),
        startup_available_gpu_memory_gb=0,
        max_total_num_tokens=0,
        swa_tokens_per_layer=0,
        startup_time=0,
        max_running_requests=1,
        spec_algorithm=SimpleNamespace(is_none=lambda: True, is_dspark=lambda: False),
    )
    monkeypatch.setattr(oea, "_stats", None)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    assert "oea_stats" not in sched.Scheduler.get_internal_state(fake_self, None).internal_state
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    oea.record_routing_stats(torch.tensor([[0, 1], [2, 3]]), 8, None)
    state = sched.Scheduler.get_internal_state(fake_self, None).internal_state
    assert state["oea_stats"] == oea.oea_stats_snapshot()
    assert state["oea_stats"]["calls"] == 1 and state["oea_stats"]["mean_distinct_experts"] == 4.0
    assert state["oea_stats"]["k0"] == 3


# ---------------------------------------------------------------- other models' TP MoE path
class _Capture(torch.nn.Module):
    """Stands in for the fused experts: keeps the routing it is handed, returns zeros."""

    def __init__(self):
        super().__init__()
        self.routing = None

    def forward(self, hidden_states, topk_output):
        self.routing = topk_output
        return torch.zeros_like(hidden_states)


def _block(cls, topk, gate, **attrs):
    """The real MoE block class without its GPU-bound __init__ (TP groups, fused-MoE weights): the
    attributes its forward path reads, a real TopK, a gate, and a capture in place of the experts."""
    block = cls.__new__(cls)
    torch.nn.Module.__init__(block)
    block.topk, block.experts = topk, _Capture()
    block.gate = gate
    block.tp_size = block.ep_size = block.moe_ep_size = 1
    block.alt_stream = None
    for k, v in attrs.items():
        setattr(block, k, v)
    return block


def _moe_blocks(patched, E):
    topk = patched("sglang.srt.layers.moe.topk")
    qwen2 = patched("sglang.srt.models.qwen2_moe")
    qwen3 = patched("sglang.srt.models.qwen3_moe")
    glm4 = patched("sglang.srt.models.glm4_moe")
    bias = torch.randn(E, generator=torch.Generator().manual_seed(5)) * 0.1
    return {
        "qwen2_moe": _block(
            qwen2.Qwen2MoeSparseMoeBlock,
            topk.TopK(top_k=4, renormalize=True),
            lambda h: (h[:, :E], None),
            shared_expert=None,
            shared_expert_gate=None,
            enable_shared_expert_fusion=False,
        ),
        "qwen3_moe": _block(
            qwen3.Qwen3MoeSparseMoeBlock, topk.TopK(top_k=4, renormalize=True), lambda h: (h[:, :E], None)
        ),
        # GLM-4.5/4.6: sigmoid + correction bias, one group, routed scaling; shared experts kept out
        "glm4_moe": _block(
            glm4.Glm4MoeSparseMoeBlock,
            topk.TopK(
                top_k=4,
                renormalize=True,
                use_grouped_topk=True,
                num_expert_group=1,
                topk_group=1,
                correction_bias=bias,
                scoring_func="sigmoid",
                routed_scaling_factor=2.5,
            ),
            lambda h: h[:, :E],
            _enable_a2a_moe=False,
            num_fused_shared_experts=0,
            shared_experts=lambda h: None,
            routed_scaling_factor=2.5,
        ),
    }


@pytest.mark.parametrize("model", ["qwen2_moe", "qwen3_moe", "glm4_moe"])
def test_other_models_tp_path_keeps_padding_out_of_oea(patched, monkeypatch, model):
    """The patched Qwen2-MoE / Qwen3-MoE / GLM-4-MoE block forward, CUDA-graph padding rows 5-7 whose router
    loves experts 60-63: those never join S_base, and the real rows' routing does not depend on the padding."""
    import sglang.srt.layers.dp_attention as dpa

    oea = patched("sglang.srt.layers.moe.oea")
    monkeypatch.setattr(dpa, "is_dp_attention_enabled", lambda: False)
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    oea.set_num_valid_tokens(None)
    E, T, n_valid = 64, 8, 5
    block = _moe_blocks(patched, E)[model]
    fb = SimpleNamespace(num_token_non_padded=torch.tensor([n_valid], dtype=torch.int32))
    gen = torch.Generator().manual_seed(9)
    real = torch.randn(n_valid, E, generator=gen)
    real[:, 60:] -= 20.0
    routed = []
    for pad_seed in (1, 2):
        pad = torch.randn(T - n_valid, E, generator=torch.Generator().manual_seed(pad_seed))
        pad[:, 60:] += 20.0
        try:
            block(torch.cat([real, pad]), fb)
        finally:
            oea.set_num_valid_tokens(None)
        out = block.experts.routing
        assert not ({60, 61, 62, 63} & set(out.topk_ids.flatten().tolist())), model
        routed.append((out.topk_ids[:n_valid].clone(), out.topk_weights[:n_valid].clone()))
    assert torch.equal(routed[0][0], routed[1][0]) and torch.equal(routed[0][1], routed[1][1])
    block(torch.cat([real, pad]), None)  # no batch: every row counts, the padding's experts join
    assert {60, 61, 62, 63} & set(block.experts.routing.topk_ids.flatten().tolist())


# ---------------------------------------------------------------- backends OEA cannot reach
@pytest.fixture
def fresh_warnings(patched, monkeypatch):
    oea = patched("sglang.srt.layers.moe.oea")
    monkeypatch.setattr(oea, "_warned_unreachable", set(), raising=False)  # raising=False: on a patch set
    # without the warning the test still runs, and fails
    monkeypatch.setattr(oea, "_bypass_mark", None, raising=False)
    monkeypatch.setattr(oea, "_hook_calls", 0, raising=False)
    oea.set_num_valid_tokens(None)
    return oea


def _oea_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "sglang-overlay oea_topk:" in r.getMessage()]


def _forward_layers(mod, backend, layers=4, materialize=False, **topk_kw):
    """TopK.forward_cuda of `layers` MoE layers with the MoE runner backend `backend` (what it does on a GPU
    host: the format decision and the hand-off). Grouped softmax routing: its torch implementation runs here."""
    topk = mod.TopK(top_k=4, renormalize=True, use_grouped_topk=True, num_expert_group=4, topk_group=4, **topk_kw)
    gen = torch.Generator().manual_seed(3)
    outs = []
    for _ in range(layers):
        x, logits = torch.randn(6, 16, generator=gen), torch.randn(6, 32, generator=gen)
        out = topk.forward_cuda(x, logits)
        outs.append((out.to_standard() if materialize else out, logits))
    return outs


@pytest.mark.parametrize(
    "backend", ["FLASHINFER_TRTLLM", "FLASHINFER_MXFP4", "EXPERIMENTAL_SGL_TRTLLM", "TRITON_KERNELS"]
)
def test_backend_that_routes_in_its_kernel_warns_once(topk_mods, fresh_warnings, monkeypatch, caplog, backend):
    mod, _ = topk_mods
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    monkeypatch.setattr(mod, "get_moe_runner_backend", lambda: MoeRunnerBackend[backend])
    # triton_kernels' router (imported on GPU hosts only)
    monkeypatch.setattr(mod, "routing", lambda *a, **k: (None, None, None), raising=False)
    monkeypatch.setattr(mod, "get_lora", lambda: SimpleNamespace(enable_lora=False), raising=False)
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)
    monkeypatch.delenv("SGLANG_OEA_STATS", raising=False)
    _forward_layers(mod, backend, is_fp4_experts=False)
    assert _oea_warnings(caplog) == []  # OEA off: silent
    monkeypatch.setenv("SGLANG_OEA_K0", "3")
    _forward_layers(mod, backend, is_fp4_experts=False)
    _forward_layers(mod, backend, is_fp4_experts=False)
    (msg,) = _oea_warnings(caplog)
    value = MoeRunnerBackend[backend].value
    assert f"SGLANG_OEA_K0=3 has no effect with MoE runner backend '{value}'" in msg
    assert "--moe-runner-backend triton" in msg


def test_bypassed_routing_that_is_materialized_gets_oea_and_no_warning(topk_mods, fresh_warnings, monkeypatch, caplog):
    """flashinfer_cutlass' runner and the flashinfer all-to-all call BypassedTopKOutput.to_standard(), which
    runs select_experts: OEA does apply there, so there is nothing to warn about."""
    mod, _ = topk_mods
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    monkeypatch.setattr(mod, "get_moe_runner_backend", lambda: MoeRunnerBackend.FLASHINFER_TRTLLM)
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    for out, logits in _forward_layers(mod, "FLASHINFER_TRTLLM", materialize=True):
        assert len(set(out.topk_ids.flatten().tolist())) <= 2 * 6  # S_base of 6 tokens at k0 = 2
        router = logits.softmax(-1).topk(4, dim=1).indices
        assert not torch.equal(out.topk_ids.long(), router)
    assert _oea_warnings(caplog) == []


def test_standard_backend_is_silent(topk_mods, fresh_warnings, monkeypatch, caplog):
    mod, _ = topk_mods
    from sglang.srt.layers.moe.utils import MoeRunnerBackend

    monkeypatch.setattr(mod, "get_moe_runner_backend", lambda: MoeRunnerBackend.TRITON)
    monkeypatch.setattr(mod, "use_symmetric_memory", lambda *a, **k: __import__("contextlib").nullcontext())
    monkeypatch.setattr(mod, "get_tp_group", lambda: None)
    monkeypatch.setenv("SGLANG_OEA_K0", "2")
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    monkeypatch.setattr(fresh_warnings, "_stats", None)
    outs = _forward_layers(mod, "TRITON")
    assert _oea_warnings(caplog) == [] and fresh_warnings.oea_stats_snapshot()["calls"] == len(outs)


def test_custom_routing_function_and_unknown_scoring_warn(topk_mods, fresh_warnings, monkeypatch, caplog):
    mod, _ = topk_mods
    monkeypatch.setenv("SGLANG_OEA_STATS", "1")
    monkeypatch.delenv("SGLANG_OEA_K0", raising=False)

    def route(hidden_states, gating_output, topk, renormalize):
        return gating_output.softmax(-1).topk(topk, dim=1)

    cfg = mod.TopKConfig(top_k=4, renormalize=True, custom_routing_function=route)
    x, logits = torch.randn(4, 16), torch.randn(4, 32)
    for _ in range(3):
        mod.select_experts(x, logits, cfg)
    (msg,) = _oea_warnings(caplog)
    assert "SGLANG_OEA_STATS=1 has no effect with a custom routing function" in msg
    w, i = logits.softmax(-1).topk(4, dim=1)
    fresh_warnings.maybe_apply_oea(
        w, i, logits, scoring_func="tanh", correction_bias=None, renormalize=True, k0=2, max_tokens=64
    )
    assert "has no effect with scoring function 'tanh'" in _oea_warnings(caplog)[-1]


def test_manifest_states_the_models_whose_padding_the_patch_keeps_out():
    """The manifest's statement names every model module whose MoE block the patch hooks, and no other."""
    from conftest import ROOT

    from sglang_overlay.manifest import load_manifest

    patch = load_manifest(ROOT / "manifest.yaml").patch("oea_topk")
    hooked = {f.split("/")[-1][:-3] for f in patch.diff.files if "/srt/models/" in f}
    assert hooked == {"deepseek_v2", "qwen2_moe", "qwen3_moe", "glm4_moe"}
    text = (ROOT / "manifest.yaml").read_text()
    entry = text[text.index("  - name: oea_topk") : text.index("  - name: nccl_env_log")]
    stated = set(re.findall(r"models/(\w+)", entry))
    assert stated == hooked, (stated, hooked)
    sections = (ROOT / "patches" / "oea_topk.patch").read_text().split("diff --git ")
    for model in hooked:
        (hunk,) = [x for x in sections if x.startswith(f"a/python/sglang/srt/models/{model}.py ")]
        assert "+        record_tp_valid_tokens(forward_batch)" in hunk, model
