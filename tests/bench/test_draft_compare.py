"""bench.draft_compare on stores written the way the runner writes them: EAGLE arms against the plain arm of
the same name, medians of start medians, lossless only when every repetition's greedy outputs match."""

from __future__ import annotations

import json
from pathlib import Path

from bench import store
from bench.draft_compare import main

WL = {"max_new_tokens": 128, "b1_requests": 2, "concurrency": 8, "request_timeout_s": 300.0}


def _run_dir(d: Path, arms: dict[str, list[list[dict]]], workload=WL) -> Path:
    """arms: name -> starts -> repetition metrics."""
    path = d / "results.jsonl"
    store.append(
        path,
        {
            "type": "run",
            "run_id": "r1",
            "config": {"workload": workload},
            "arms": [{"name": n, "key": f"key-{n}"} for n in arms],
        },
    )
    rnd = 0
    for name, starts in arms.items():
        for reps in starts:
            rnd += 1
            sid = f"{name}-{rnd}"
            store.append(
                path,
                {"type": "start", "start_id": sid, "arm": name, "arm_key": f"key-{name}", "round": rnd, "run_id": "r1"},
            )
            store.append(
                path, {"type": "rep", "start_id": sid, "arm": name, "warmup": True, "metrics": {"tok_s_b1": 1}}
            )
            for m in reps:
                store.append(path, {"type": "rep", "start_id": sid, "arm": name, "metrics": m})
            store.append(path, {"type": "unit_done", "start_id": sid, "arm_key": f"key-{name}", "round": rnd})
    return d


def _m(tok_b1, tok_bc, acc=None, h1="a", hc="c"):
    return {
        "tok_s_b1": tok_b1,
        "tok_s_bc": tok_bc,
        "accept_len_b1": acc,
        "accept_len_bc": acc,
        "hash_b1": h1,
        "hash_bc": hc,
    }


def test_arms_meet_their_plain_namesake_and_ratios_use_start_medians(tmp_path, capsys):
    plain = _run_dir(
        tmp_path / "plain",
        {"full": [[_m(100, 400), _m(110, 420)], [_m(90, 380)]], "oea3": [[_m(100, 400, h1="o", hc="oc")]]},
    )
    eagle = _run_dir(
        tmp_path / "eagle",
        {
            "none": [[_m(300, 800, 3.0)]],
            "full": [[_m(310, 820, 3.1), _m(290, 800, 3.1), _m(300, 810, 3.1)], [_m(250, 700, 3.0)]],
            "oea3": [[_m(280, 760, 2.9, h1="o", hc="oc")]],
        },
    )
    tj = tmp_path / "train.json"
    tj.write_text(
        json.dumps(
            {
                "device": "NVIDIA H200",
                "reference_hash_b1": {"64": "x", "128": "a"},
                "metrics": {"held_out": {"accept_length": 2.7}, "bench_prompts": {"accept_length": 3.9}},
            }
        )
    )
    out = tmp_path / "summary.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj), "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    # plain full: start medians 105 and 90 -> 97.5 (bc: 410 and 380 -> 395); eagle full: 300 and 250 -> 275 -> x2.82
    assert "| plain | full (plain) | - | 2 | - | - | 97.5 | 1.00 | 395.0 | 1.00 | - |" in text
    assert "| eagle | full | full | 2 | 3.05 | 3.05 | 275.0 | 2.82 | 755.0 | 1.91 | yes |" in text
    assert "| eagle | oea3 | oea3 | 1 | 2.90 | 2.90 | 280.0 | 2.80 | 760.0 | 1.90 | yes |" in text
    assert "| eagle | none | full |" in text  # no plain arm of its name: the first
    assert "held-out prompts 2.7, the bench's prompts 3.9" in text
    assert "hash at 128 tokens: a; plain full's: a -> equal" in text
    assert text.rstrip().endswith("every arm and repetition: yes")


def test_an_output_that_differs_anywhere_is_not_lossless(tmp_path):
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]})
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)], [_m(300, 800, 3.0, hc="other")]]})
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    text = out.read_text()
    assert "| **NO** |" in text and text.rstrip().endswith("every arm and repetition: **NO**")


def test_another_workload_is_flagged(tmp_path):
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]})
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)]]}, workload={**WL, "max_new_tokens": 64})
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    assert "another workload than plain's" in out.read_text()


def test_not_a_run_dir_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--plain", str(tmp_path / "empty"), "--eagle", str(tmp_path / "empty")]) == 2
    assert "results.jsonl: no run record" in capsys.readouterr().err
