"""bench greedy-ties on a small model dir, on the CPU: the float32 and bfloat16 decodes of the same weights, and
the top-2 logit gap, per std; bad input is exit 2."""

from __future__ import annotations

import math

from test_train_draft import SPEC, model_dir  # noqa: F401  (the same tiny model dir fixture)

from bench.cli import main
from bench.dummy_init import DummyInit
from bench.greedy_ties import measure


def test_rows_per_std_and_a_gap_like_random_logits(model_dir):
    rows = measure(model_dir, [DummyInit(std=0.02), DummyInit(std=0.2)], prompts=4, new_tokens=12)
    assert [r["std"] for r in rows] == [0.02, 0.2]
    for r in rows:
        assert r["prompts"] == 4 and len(r["first_diff"]) == 4
        assert r["equal"] == sum(x is None for x in r["first_diff"])
        assert all(x is None or 0 <= x < 12 for x in r["first_diff"])
        # random weights give logits like i.i.d. normals over the vocab: the top-2 spacing is about exponential
        # with mean 1/sqrt(2 ln V) SDs, so its median is near ln 2 of that (a loose band: 48 positions)
        expect = math.log(2) / math.sqrt(2 * math.log(SPEC.vocab))
        assert expect / 3 < r["gap_median"] < expect * 3, (r["gap_median"], expect)
        assert 0 <= r["gap_under_0_1"] <= 1
        assert r["follows_successor"] < 0.1  # no structure: the successor table is noise here


def test_the_successor_init_survives_rounding_and_follows_its_successor(model_dir):
    """The same prompts with the successor weights: every decode follows the last token's successor, the top-2
    gap is many logit SDs (random logits: about 0.15), and float32 and bfloat16 give the same text."""
    (r,) = measure(model_dir, [DummyInit("successor", 0.02)], prompts=4, new_tokens=24)
    assert r["follows_successor"] == 1.0 and r["equal"] == 4, r
    assert r["gap_median"] > 3 and r["gap_under_0_1"] == 0, r  # random logits: about 0.15


def test_the_command_prints_a_table(model_dir, capsys):
    assert main(["greedy-ties", str(model_dir), "--std", "0.05", "--prompts", "2", "--new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| dummy init |") and "\n| normal dummy weights at std 0.05 | " in out and " of 2 | " in out
    assert (
        main(["greedy-ties", str(model_dir), "--dummy-init", "successor", "--prompts", "1", "--new-tokens", "4"]) == 0
    )
    out = capsys.readouterr().out
    assert "\n| successor dummy weights at std 0.02, embeddings at 1, lm_head = embeddings permuted | 1 of 1 |" in out
    args = ["greedy-ties", str(model_dir), "--dummy-init", "successor", "--prompts", "1", "--new-tokens", "4"]
    assert main([*args, "--bf16-only"]) == 0
    out = capsys.readouterr().out
    assert "| not compared (bf16 only) | - | " in out and "| 100.0% |" in out


def test_bad_input_is_exit_2(tmp_path, capsys):
    assert main(["greedy-ties", str(tmp_path)]) == 2
    assert "no target/config.json" in capsys.readouterr().err
    assert main(["greedy-ties", str(tmp_path), "--std", "0"]) == 2
    assert "must be above 0" in capsys.readouterr().err
    assert main(["greedy-ties", str(tmp_path), "--embed-std", "-1"]) == 2
    assert "must be above 0" in capsys.readouterr().err
    assert main(["greedy-ties", str(tmp_path), "--std", "inf"]) == 2
    assert "must be above 0" in capsys.readouterr().err
