"""bench/dummy_init.py: the server's dummy-weight variables read into one value; a bad one is a DraftInputError
naming the variable, never a traceback."""

from __future__ import annotations

import pytest

from bench.dummy_init import DummyInit, from_env
from bench.errors import DraftInputError


def test_defaults_and_the_env_each_mode_writes():
    assert from_env({}) == DummyInit("normal", 0.02, 1.0)
    s = from_env({"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "0.5"})
    assert s == DummyInit("successor", 0.02, 0.5)
    # train.json's record reads back as the same weights (draft_compare reads it so)
    assert from_env({k: str(v) for k, v in s.record().items()}) == s
    assert from_env({k: str(v) for k, v in DummyInit().record().items()}) == DummyInit()
    # a normal server ignores the embedding std: so does the reference
    assert from_env({"SGLANG_DUMMY_INIT_EMBED_STD": "7"}) == DummyInit()
    assert DummyInit().record() == {"SGLANG_DUMMY_INIT": "normal", "SGLANG_DUMMY_INIT_STD": 0.02, "seed": 1234}
    assert s.record()["SGLANG_DUMMY_INIT_EMBED_STD"] == 0.5


def test_given_values_win_over_the_environment():
    env = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_STD": "0.05"}
    assert from_env(env, mode="normal", std=0.01) == DummyInit("normal", 0.01)


@pytest.mark.parametrize(
    "env, named",
    [
        ({"SGLANG_DUMMY_INIT": "uniform"}, "SGLANG_DUMMY_INIT='uniform' is not one of normal, successor"),
        ({"SGLANG_DUMMY_INIT_STD": "x"}, "SGLANG_DUMMY_INIT_STD='x' is not a positive number"),
        ({"SGLANG_DUMMY_INIT_STD": "-0.1"}, "SGLANG_DUMMY_INIT_STD='-0.1' is not a positive number"),
        ({"SGLANG_DUMMY_INIT_STD": "nan"}, "SGLANG_DUMMY_INIT_STD='nan' is not a positive number"),
        (
            {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "inf"},
            "SGLANG_DUMMY_INIT_EMBED_STD='inf' is not a positive number",
        ),
    ],
)
def test_a_bad_variable_is_named(env, named):
    with pytest.raises(DraftInputError, match=named.replace("(", r"\(")) as e:
        from_env(env, where="here: ")
    assert str(e.value).startswith("here: ") and e.value.hint and e.value.exit_code == 2


def test_a_bad_given_std_is_refused():
    with pytest.raises(DraftInputError, match=r"--std 0\.0 is not a positive number"):
        from_env({}, std=0.0)
    with pytest.raises(ValueError, match="not one of"):
        DummyInit("uniform")


def _refusal(dummy: dict, init: DummyInit) -> DraftInputError:
    from pathlib import Path

    from bench.server_seqs import _check_dummy_init

    with pytest.raises(DraftInputError) as e:
        _check_dummy_init(Path("seqs.json"), {"dummy_init": dummy}, init)
    assert e.value.exit_code == 2
    return e.value


def _train_draft_args(*args: str):
    from bench.cli import build_parser

    return build_parser().parse_args(["train-draft", "MODEL_DIR", *args])


def test_a_recorded_embed_std_the_reference_lacks_names_a_flag_train_draft_takes(monkeypatch):
    """server-seqs' fix for an embedding-std mismatch is a train-draft flag that exists and is read."""
    import re

    from bench.train_draft import _cli

    recorded = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_STD": "0.02", "SGLANG_DUMMY_INIT_EMBED_STD": "0.5"}
    e = _refusal(recorded, DummyInit("successor"))
    assert "source.dummy_init.SGLANG_DUMMY_INIT_EMBED_STD: 0.5 (the server's)" in str(e)
    flag, value = re.search(r"pass (--[a-z-]+) (\S+)", e.hint).groups()
    a = _train_draft_args("--dry-run", "--dummy-init", "successor", flag, value)  # SystemExit if no such flag
    seen = {}
    monkeypatch.setattr("bench.train_draft.run_reported", lambda name, fn, *x: fn())
    monkeypatch.setattr("bench.train_draft.plan", lambda opts: seen.setdefault("init", opts.init) and "")
    monkeypatch.delenv("SGLANG_DUMMY_INIT_EMBED_STD", raising=False)
    _cli(a)
    assert seen["init"] == DummyInit("successor", 0.02, 0.5)  # the flag's value reaches the reference


def test_a_server_without_the_variable_is_not_told_to_pass_dummy_init_none():
    """A server started without SGLANG_DUMMY_INIT drew upstream's weights: no train-draft flag matches them."""
    for recorded in ({"SGLANG_DUMMY_INIT": None, "SGLANG_DUMMY_INIT_STD": None}, {"SGLANG_DUMMY_INIT": "uniform"}):
        e = _refusal(recorded, DummyInit())
        assert "--dummy-init None" not in e.hint and "--dummy-init uniform" not in e.hint
        assert "SGLANG_DUMMY_INIT=normal" in e.hint
    e = _refusal({"SGLANG_DUMMY_INIT": "successor"}, DummyInit())
    _train_draft_args("--dummy-init", "successor")  # the flag it names is one train-draft takes
    assert "pass --dummy-init successor" in e.hint


def test_a_given_embed_std_wins_and_a_bad_one_is_refused():
    env = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "x"}
    assert from_env(env, embed_std=0.5) == DummyInit("successor", 0.02, 0.5)
    assert from_env({}, mode="normal", embed_std=0.5) == DummyInit()  # a normal server ignores it
    with pytest.raises(DraftInputError, match=r"--embed-std 0\.0 is not a positive number"):
        from_env({}, mode="successor", embed_std=0.0)


def test_an_infinite_given_value_is_refused_as_the_variables_are():
    with pytest.raises(DraftInputError, match=r"--std inf is not a positive number"):
        from_env({}, std=float("inf"))
    with pytest.raises(DraftInputError, match=r"--embed-std inf is not a positive number"):
        from_env({}, mode="successor", embed_std=float("inf"))
