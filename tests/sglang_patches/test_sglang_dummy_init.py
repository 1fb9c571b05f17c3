"""dummy_init_normal (bench fixture in tests/bench/planted): --load-format dummy weights that make greedy outputs
depend on the model's numerics. The patched weight_utils.py is loaded from a tree the engine patched with the
planted manifest, and run on a small torch module."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "bench" / "planted" / "manifest.yaml"


@pytest.fixture(scope="module")
def weight_utils(pristine_sglang_tree, sglang_patched, tmp_path_factory):
    tree = tmp_path_factory.mktemp("dummy_init") / "sglang"
    subprocess.run(["git", "clone", "-q", str(pristine_sglang_tree), str(tree)], check=True)
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "apply.py"),
            "--manifest",
            str(PLANTED),
            "--tree",
            str(tree),
            "apply",
            "dummy_init_normal",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    # Imports inside resolve to the session's patched package; this patch changes no other file.
    spec = importlib.util.spec_from_file_location(
        "ovl_weight_utils_dummy_init", tree / "python/sglang/srt/model_loader/weight_utils.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = torch.nn.Module()
        self.input_layernorm.weight = torch.nn.Parameter(torch.empty(256, dtype=torch.bfloat16))
        self.q_proj = torch.nn.Linear(256, 256, bias=True, dtype=torch.bfloat16)
        self.k_proj = torch.nn.Linear(256, 256, bias=False, dtype=torch.bfloat16)
        self.gate = torch.nn.Module()
        self.gate.e_score_correction_bias = torch.nn.Parameter(torch.empty(64))
        self.experts = torch.nn.Parameter(torch.empty(64, 128, 256, dtype=torch.bfloat16))


def test_upstream_dummy_init_is_what_made_outputs_blind(weight_utils, monkeypatch):
    monkeypatch.delenv("SGLANG_DUMMY_INIT", raising=False)
    m = _Block()
    weight_utils.initialize_dummy_weights(m)
    assert torch.equal(m.q_proj.weight, m.k_proj.weight)  # one seed: same-size weights are equal
    assert m.input_layernorm.weight.abs().max() <= 1e-3  # norm gains near zero
    assert m.q_proj.weight.abs().max() <= 1e-3


def test_normal_dummy_init(weight_utils, monkeypatch):
    monkeypatch.setenv("SGLANG_DUMMY_INIT", "normal")
    m = _Block()
    weight_utils.initialize_dummy_weights(m)
    assert torch.all(m.input_layernorm.weight == 1)
    assert torch.all(m.q_proj.bias == 0) and torch.all(m.gate.e_score_correction_bias == 0)
    assert not torch.equal(m.q_proj.weight, m.k_proj.weight)  # seeded per parameter name
    for w in (m.q_proj.weight, m.experts):
        assert w.dtype == torch.bfloat16
        assert abs(w.float().std().item() - 0.02) < 0.002 and abs(w.float().mean().item()) < 0.002
    again = _Block()
    weight_utils.initialize_dummy_weights(again)
    assert torch.equal(again.experts, m.experts)  # every start and every arm gets the same model

    monkeypatch.setenv("SGLANG_DUMMY_INIT_STD", "0.05")
    wide = _Block()
    weight_utils.initialize_dummy_weights(wide)
    assert abs(wide.experts.float().std().item() - 0.05) < 0.005


class _Lm(torch.nn.Module):
    """The names the successor init reads: model.embed_tokens and lm_head, 70 rows of which 64 are the vocab."""

    def __init__(self, tied: bool = False):
        super().__init__()
        self.config = type("Cfg", (), {"vocab_size": 64})()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(70, 128, dtype=torch.bfloat16)
        self.model.norm = torch.nn.Module()
        self.model.norm.weight = torch.nn.Parameter(torch.empty(128, dtype=torch.bfloat16))
        self.q_proj = torch.nn.Linear(128, 128, bias=False, dtype=torch.bfloat16)
        self.lm_head = torch.nn.Linear(128, 70, bias=False, dtype=torch.bfloat16)
        if tied:
            self.lm_head.weight = self.model.embed_tokens.weight


def test_successor_dummy_init(weight_utils, monkeypatch):
    """The lm_head's vocab rows are the embedding's, unit length, in a seeded order (a permutation: every token
    has one successor), the padded rows zero; the embeddings at SGLANG_DUMMY_INIT_EMBED_STD, the rest as normal."""
    monkeypatch.setenv("SGLANG_DUMMY_INIT", "successor")
    monkeypatch.delenv("SGLANG_DUMMY_INIT_STD", raising=False)
    m = _Lm()
    weight_utils.initialize_dummy_weights(m)
    e, h = m.model.embed_tokens.weight.float(), m.lm_head.weight.float()
    assert abs(e.std().item() - 1.0) < 0.05 and abs(m.q_proj.weight.float().std().item() - 0.02) < 0.003
    assert torch.all(m.model.norm.weight == 1)
    assert torch.all(h[64:] == 0)
    assert torch.allclose(h[:64].norm(dim=-1), torch.ones(64), atol=1e-2)
    unit = e[:64] / e[:64].norm(dim=-1, keepdim=True)
    match = (h[:64] @ unit.T).argmax(-1)  # the embedding row each head row is
    assert sorted(match.tolist()) == list(range(64)) and match.tolist() != list(range(64))
    assert torch.allclose(h[:64], unit[match], atol=1e-2)
    again = _Lm()
    weight_utils.initialize_dummy_weights(again)
    assert torch.equal(again.lm_head.weight, m.lm_head.weight)

    monkeypatch.setenv("SGLANG_DUMMY_INIT_EMBED_STD", "0.5")
    narrow = _Lm()
    weight_utils.initialize_dummy_weights(narrow)
    assert abs(narrow.model.embed_tokens.weight.float().std().item() - 0.5) < 0.03
    assert torch.equal(narrow.lm_head.weight, m.lm_head.weight)  # unit rows: the same directions

    monkeypatch.setenv("SGLANG_DUMMY_INIT", "normal")
    plain = _Lm()
    weight_utils.initialize_dummy_weights(plain)
    assert abs(plain.model.embed_tokens.weight.float().std().item() - 0.02) < 0.003
    assert torch.all(plain.lm_head.weight.float()[64:] != 0)


def test_successor_refuses_a_tied_lm_head(weight_utils, monkeypatch):
    monkeypatch.setenv("SGLANG_DUMMY_INIT", "successor")
    with pytest.raises(RuntimeError, match="tied to the embeddings"):
        weight_utils.initialize_dummy_weights(_Lm(tied=True))


def test_the_variables_read_as_the_bench_reads_them(weight_utils, monkeypatch):
    """bench/dummy_init.from_env is what train-draft and server-seqs' files take for the server's weights: an empty
    variable is its default and a normal server ignores SGLANG_DUMMY_INIT_EMBED_STD. The server reads them alike,
    else an env the bench accepts (an exported empty variable, a successor-only one left set) stops the server."""
    from bench.dummy_init import from_env

    monkeypatch.setenv("SGLANG_DUMMY_INIT", "normal")
    monkeypatch.delenv("SGLANG_DUMMY_INIT_STD", raising=False)
    monkeypatch.delenv("SGLANG_DUMMY_INIT_EMBED_STD", raising=False)
    ref = _Lm()
    weight_utils.initialize_dummy_weights(ref)
    for env in ({"SGLANG_DUMMY_INIT_STD": ""}, {"SGLANG_DUMMY_INIT_EMBED_STD": "abc"}):
        monkeypatch.delenv("SGLANG_DUMMY_INIT_STD", raising=False)
        monkeypatch.delenv("SGLANG_DUMMY_INIT_EMBED_STD", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert from_env({"SGLANG_DUMMY_INIT": "normal", **env}) == from_env({"SGLANG_DUMMY_INIT": "normal"})
        m = _Lm()
        weight_utils.initialize_dummy_weights(m)
        assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values()))
    monkeypatch.setenv("SGLANG_DUMMY_INIT", "successor")
    monkeypatch.delenv("SGLANG_DUMMY_INIT_EMBED_STD", raising=False)
    succ = _Lm()
    weight_utils.initialize_dummy_weights(succ)
    monkeypatch.setenv("SGLANG_DUMMY_INIT_EMBED_STD", "")
    again = _Lm()
    weight_utils.initialize_dummy_weights(again)
    assert torch.equal(again.model.embed_tokens.weight, succ.model.embed_tokens.weight)
