"""CPU-testable parts of the OEA micro-benchmark: the routing generator, counting, and the report."""

from __future__ import annotations

import numpy as np
import pytest

from bench import oea_micro as om


def kimi_topk_numpy(logits, bias, k: int):
    """Reference of the routing the sweep runs in torch: ids by sigmoid(logit)+bias, weights sigmoid(logit)
    renormalized (test-only, so it stays out of bench/)."""
    w = 1.0 / (1.0 + np.exp(-logits))
    choice = w + bias
    ids = np.argsort(-choice, axis=-1, kind="stable")[..., :k]
    sel = np.take_along_axis(w, ids, axis=-1)
    return ids, sel / sel.sum(-1, keepdims=True)


def distinct_per_step(ids) -> list[int]:
    """ids: [steps, batch, k] -> distinct experts per step."""
    return [len(set(map(int, step.reshape(-1)))) for step in ids]


def test_generator_is_deterministic_and_shaped():
    rm = om.RoutingModel(experts=384)
    a, bias = om.correlated_router_logits(4, 16, rm, seed=3)
    b, _ = om.correlated_router_logits(4, 16, rm, seed=3)
    assert a.shape == (4, 16, 384) and bias.shape == (384,) and a.dtype == np.float32
    assert np.array_equal(a, b)
    assert not np.array_equal(a, om.correlated_router_logits(4, 16, rm, seed=4)[0])


def test_correlated_routing_activates_fewer_experts_than_uniform():
    rm = om.RoutingModel(experts=384)
    logits, bias = om.correlated_router_logits(16, 16, rm, seed=0)
    ids, w = kimi_topk_numpy(logits, bias, 8)
    assert ids.shape == (16, 16, 8) and np.allclose(w.sum(-1), 1.0)
    d = distinct_per_step(ids)
    uniform = om.uniform_expected_distinct(384, 8, 16)
    assert uniform == pytest.approx(384 * (1 - (1 - 8 / 384) ** 16))
    # realistic correlation: clearly below independent routing, clearly above a single token's 8
    assert 30 < np.mean(d) < 0.9 * uniform
    # a batch of 4 EAGLE draft tokens of one request shares most experts
    rm4 = om.RoutingModel(experts=384, tokens_per_request=4)
    l4, b4 = om.correlated_router_logits(16, 4, rm4, seed=0)
    assert np.mean(distinct_per_step(kimi_topk_numpy(l4, b4, 8)[0])) < 0.8 * om.uniform_expected_distinct(384, 8, 4)


def test_distinct_and_load_errors(tmp_path):
    ids = np.array([[[1, 2], [2, 3]], [[5, 5], [5, 5]]])
    assert distinct_per_step(ids) == [3, 1]
    with pytest.raises(FileNotFoundError, match="--oea-file"):
        om.load_oea(tmp_path / "missing.py")
    bad = tmp_path / "oea.py"
    bad.write_text("x = 1\n")
    with pytest.raises(AttributeError, match="opportunistic_expert_activation"):
        om.load_oea(bad)


def test_markdown_reports_ratio_against_target():
    cells = [
        dict(
            batch=16,
            k0=0,
            layer_us=100.0,
            layer_p10_us=95.0,
            layer_p90_us=110.0,
            experts_us=80.0,
            distinct_mean=90.0,
            distinct_uniform_expect=109.0,
            graph=True,
            extra={},
        ),
        dict(
            batch=16,
            k0=3,
            layer_us=65.0,
            layer_p10_us=60.0,
            layer_p90_us=70.0,
            experts_us=50.0,
            distinct_mean=40.0,
            distinct_uniform_expect=109.0,
            graph=True,
            extra={},
        ),
    ]
    res = {
        "cells": cells,
        "impl": "triton",
        "impl_why": "x",
        "graph": True,
        "device": "H200",
        "config": {
            "experts": 384,
            "topk": 8,
            "hidden": 7168,
            "moe_intermediate": 2048,
            "dtype": "bf16",
            "routed_scaling_factor": 2.827,
            "iters": 200,
            "routing_steps": 32,
        },
    }
    md = om.markdown(res)
    assert "| 16 | 3 | 65.0 | 60.0-70.0 | -35.0% | 50.0 | -37.5% | 40.0 |" in md
    assert "35.0% lower than K0 off (target: at least 30%; met)" in md and "-39%" in md


def test_cli_parses_k0_off():
    from bench.cli import build_parser

    a = build_parser().parse_args(["oea", "/tmp/x", "--k0", "off,3,6", "--batches", "1,16"])
    assert a.k0 == [0, 3, 6] and a.batches == [1, 16] and a.experts == 384
