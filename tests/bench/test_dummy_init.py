"""bench/dummy_init.py: the server's dummy-weight variables read into one value; a bad one is a DraftInputError
naming the variable, never a traceback."""

from __future__ import annotations

import pytest

from bench.dummy_init import DummyInit, from_env
from bench.errors import DraftInputError


def test_defaults_and_the_env_each_mode_writes():
    assert from_env({}) == DummyInit("normal", 0.02, 1.0)
    assert DummyInit().env() == {"SGLANG_DUMMY_INIT": "normal", "SGLANG_DUMMY_INIT_STD": "0.02"}
    s = from_env({"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_EMBED_STD": "0.5"})
    assert s == DummyInit("successor", 0.02, 0.5)
    assert s.env()["SGLANG_DUMMY_INIT_EMBED_STD"] == "0.5" and from_env(s.env()) == s
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
