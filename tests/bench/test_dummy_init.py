"""bench/dummy_init.py: the server's dummy-weight variables read into one value; a bad one is a DraftInputError
naming the variable, and server-seqs' refusal of a mismatch names a fix train-draft takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.dummy_init import DummyInit, from_env
from bench.errors import DraftInputError


def test_defaults_and_the_record_round_trips():
    assert from_env({}) == DummyInit("normal", 0.02, 1.0)
    s = from_env({"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "0.5", "SGLANG_DUMMY_INIT_STD": ""})
    assert s == DummyInit("successor", 0.02, 0.5)
    # train.json's record reads back as the same weights (draft_compare reads it so)
    assert from_env({k: str(v) for k, v in s.record().items()}) == s
    assert DummyInit().record() == {"SGLANG_DUMMY_INIT": "normal", "SGLANG_DUMMY_INIT_STD": 0.02, "seed": 1234}
    # a normal server ignores the embedding std, a bad one included: so does the reference
    assert from_env({"SGLANG_DUMMY_INIT_EMBED_STD": "x"}) == DummyInit()
    assert from_env({"SGLANG_DUMMY_INIT": "successor"}, mode="normal") == DummyInit()


@pytest.mark.parametrize(
    "env, named",
    [
        ({"SGLANG_DUMMY_INIT": "uniform"}, "SGLANG_DUMMY_INIT='uniform' is not one of normal, successor"),
        (
            {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "inf"},
            "SGLANG_DUMMY_INIT_EMBED_STD='inf' is not a positive number",
        ),
    ],
)
def test_a_bad_variable_is_named(env, named):
    with pytest.raises(DraftInputError, match=re.escape(named)) as e:
        from_env(env, where="here: ")
    assert str(e.value).startswith("here: ") and e.value.hint and e.value.exit_code == 2


def _refusal(dummy: dict, init: DummyInit) -> DraftInputError:
    from bench.server_seqs import _check_dummy_init

    with pytest.raises(DraftInputError) as e:
        _check_dummy_init(Path("seqs.json"), {"dummy_init": dummy}, init)
    assert e.value.exit_code == 2
    return e.value


def test_a_recorded_embed_std_mismatch_names_the_variable_train_draft_reads(monkeypatch):
    from bench.cli import main

    recorded = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_STD": "0.02", "SGLANG_DUMMY_INIT_EMBED_STD": "0.5"}
    e = _refusal(recorded, DummyInit("successor"))
    assert "source.dummy_init.SGLANG_DUMMY_INIT_EMBED_STD: 0.5 (the server's)" in str(e)
    name, value = re.search(r"run train-draft with (\w+)=(\S+)", e.hint).groups()
    seen = {}
    monkeypatch.setattr("bench.train_draft.plan", lambda opts: seen.setdefault("init", opts.init) and "")
    monkeypatch.delenv("SGLANG_DUMMY_INIT", raising=False)
    monkeypatch.setenv(name, value)
    assert main(["train-draft", "MODEL_DIR", "--dry-run", "--dummy-init", "successor"]) == 0
    assert seen["init"] == DummyInit("successor", 0.02, 0.5)  # the fix reaches the reference


def test_a_server_without_the_variable_is_not_told_to_pass_dummy_init_none():
    """A server started without SGLANG_DUMMY_INIT drew upstream's weights: no train-draft flag matches them."""
    for recorded in ({"SGLANG_DUMMY_INIT": None, "SGLANG_DUMMY_INIT_STD": None}, {"SGLANG_DUMMY_INIT": "uniform"}):
        e = _refusal(recorded, DummyInit())
        assert "--dummy-init" not in e.hint and "SGLANG_DUMMY_INIT=normal" in e.hint
    assert "pass --dummy-init successor" in _refusal({"SGLANG_DUMMY_INIT": "successor"}, DummyInit()).hint
