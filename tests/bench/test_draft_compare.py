"""bench.draft_compare on stores written as the runner writes them and on recorded GPU runs (whose summaries it
must reproduce): EAGLE arms against their plain namesake, lossless when every repetition's batch-1 output is
plain decoding's, the speed ratio's interval over starts, where a departure comes from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench import store
from bench.draft_compare import main

# GPU session 5's trained step as recorded (its stores and train-draft's train.json)
RUN5 = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-01-h200-run5"


TRAIN5 = RUN5 / "train" / "tiny-draft.json"


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


def test_arms_meet_their_plain_namesake_and_ratios_use_start_values(tmp_path, capsys):
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
    assert "| plain | full (plain) | - | 2 | - | - | 97.5 | 1.00 | 395.0 | 1.00 | - | 1 distinct |" in text
    assert "| eagle | full | full | 2 | 3.05 | 3.05 | 275.0 | 2.82 | 755.0 | 1.91 | yes | same |" in text
    assert "| eagle | oea3 | oea3 | 1 | 2.90 | 2.90 | 280.0 | 2.80 | 760.0 | 1.90 | yes | same |" in text
    assert "| eagle | none | full |" in text  # no plain arm of its name: the first
    assert "in the server: none 3.00, full 3.05, oea3 2.90; simulated at training: the bench's prompts 3.9, " in text
    assert "held-out prompts 2.7" in text
    assert "reference target's batch-1 greedy hash at 128 tokens: a; plain full's: a -> equal" in text
    assert "in every arm where it must be: yes. Concurrent-batch outputs are shown, not judged" in text


def test_a_batch1_output_that_differs_in_any_repetition_is_not_lossless(tmp_path):
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]})
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)], [_m(300, 800, 3.0, h1="other")]]})
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    text = out.read_text()
    assert "| **NO** | same |" in text and "in every arm where it must be: **NO**." in text
    other = _run_dir(tmp_path / "other", {"full": [[_m(300, 800, 3.0)]]}, workload={**WL, "max_new_tokens": 64})
    assert main(["--plain", str(plain), "--eagle", str(other), "--out", str(out)]) == 1
    assert "another workload than plain's" in out.read_text()


def _gpu5(tmp_path: Path) -> tuple[Path, Path]:
    dirs = []
    for name in ("plain", "eagle"):
        d = tmp_path / name
        d.mkdir()
        shutil.copyfile(RUN5 / "trained" / name / "results.jsonl", d / "results.jsonl")
        dirs.append(d)
    return dirs[0], dirs[1]


def test_gpu5s_trained_run(tmp_path, capsys):
    """The recorded H200 run that the old verdict called NO in every arm: batch-1 outputs are plain decoding's in
    the none and full arms; the OEA arm is not expected to be equal; concurrent outputs vary (not judged)."""
    plain, eagle = _gpu5(tmp_path)
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(TRAIN5)]) == 0
    text = capsys.readouterr().out
    assert (
        "| eagle | none | full | 1 | 1.19 | 1.14 | 179.7 | 0.43 | 1161.4 | 0.39 | yes | differ (2 distinct; plain 1) |"
        in text
    )
    assert "| eagle | full | full | 1 | 1.19 | 1.14 | 168.0 | 0.40 | 1088.2 | 0.37 | yes |" in text
    assert (
        "| eagle | oea3 | oea3 | 1 | 1.06 | 1.08 | 155.5 | 0.30 | 1143.3 | 0.33 | not expected to be equal (OEA routes per batch) |"
        in text
    )
    assert (
        "in the server: none 1.19, full 1.19, oea3 1.06; simulated at training: the bench's prompts 4.0, held-out prompts 1.062"
        in text
    )
    assert (
        "reference target's batch-1 greedy hash at 128 tokens: 5ef276e3b42219b1; plain full's: a76b6bdadb38efaf -> differs"
        in text
    )
    assert "in every arm where it must be: yes (oea3 (K0=3): not expected to be equal, OEA routes" in text


def test_gpu5_with_one_oea_batch1_output_changed(tmp_path, capsys):
    """One repetition's batch-1 hash changed in the OEA arm: a failure (greedy batch-1 decoding is deterministic in
    any arm; OEA is only exempt from equality with plain decoding)."""
    arm = "oea3"
    plain, eagle = _gpu5(tmp_path)
    lines = (eagle / "results.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    i = max(n for n, r in enumerate(recs) if r.get("type") == "rep" and r["arm"] == arm and not r.get("warmup"))
    rec = recs[i]
    rec["metrics"]["hash_b1"] = "0" * 16
    lines[i] = json.dumps(rec)
    (eagle / "results.jsonl").write_text("\n".join(lines) + "\n")
    rc = main(["--plain", str(plain), "--eagle", str(eagle)])
    text = capsys.readouterr().out
    assert rc == 1 and "| 0.33 | **NO**: 2 distinct over its repetitions (not deterministic) |" in text


def test_a_draft_trained_on_the_servers_sequences(tmp_path, capsys):
    plain, eagle = _gpu5(tmp_path)
    rec = json.loads(TRAIN5.read_text())
    rec["reference_hash_b1"]["128"] = "a76b6bdadb38efaf"  # the server's, as bench server-seqs records it
    rec["sequences"]["source"] = {
        "generated_by": "the server (bench server-seqs)",
        "file": "/tmp/tiny/server_seqs.json",
        "reference_agrees": 0.93,
    }
    tj = tmp_path / "train.json"
    tj.write_text(json.dumps(rec))
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 0
    text = capsys.readouterr().out
    assert (
        "; on /tmp/tiny/server_seqs.json, the reference's argmax agreeing at 0.93; target weights: normal dummy "
        in text
    )
    assert "std 0.02: greedy choices near ties, so another kernel's rounding alone can change the output)" in text
    assert "The training sequences' (the server's own, bench server-seqs) batch-1 greedy hash at 128 tokens: " in text
    assert "a76b6bdadb38efaf -> equal: the draft was trained on the continuation the server decodes." in text
    # the successor weights (bench/dummy_init.py) say an output departure is a real one, where the runs drew them
    rec["dummy_init"] = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_STD": 0.02, "seed": 1234}
    tj.write_text(json.dumps(rec))
    _set_run_env(plain, SGLANG_DUMMY_INIT="successor")
    _set_run_env(eagle, SGLANG_DUMMY_INIT="successor")
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 0
    text = capsys.readouterr().out
    assert "target weights: successor dummy weights at std 0.02, embeddings at 1, lm_head = embeddings " in text
    assert "permuted: greedy choices by many logits, so outputs differ only by a real departure)" in text
    rec["dummy_init"] = {"SGLANG_DUMMY_INIT": "uniform"}
    tj.write_text(json.dumps(rec))
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 0
    assert "target weights: unreadable dummy_init {'SGLANG_DUMMY_INIT': 'uniform'})" in capsys.readouterr().out
    del rec["dummy_init"]
    # the hash the server itself gave when the sequences were made comes first
    rec["sequences"]["source"]["source"] = {"bench": {"hash_b1": {"128": "feedfeedfeedfeed"}}}
    tj.write_text(json.dumps(rec))
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 0
    text = capsys.readouterr().out
    assert "The plain server's (when bench server-seqs made the training sequences) batch-1 greedy hash" in text
    assert (
        "feedfeedfeedfeed; plain full's: a76b6bdadb38efaf -> differs: the server decoded these prompts otherwise"
        in text
    )


def test_bad_input_is_exit_2_naming_the_file_and_key(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["--plain", str(tmp_path / "empty"), "--eagle", str(tmp_path / "empty")]) == 2
    assert "results.jsonl: no run record" in capsys.readouterr().err
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]})
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)]]})
    with pytest.raises(SystemExit) as e:
        main(["--plain", str(plain), "--eagle", str(plain), "--target-ratio", "-1"])
    assert e.value.code == 2 and "--target-ratio: -1: give a ratio above 0" in capsys.readouterr().err
    tj = _seqs_made_on(tmp_path, "NVIDIA H100 80GB HBM3, 580.1")  # a string's letters must not be named as GPUs
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 2
    err = capsys.readouterr().err
    assert str(tj) in err and "sequences.source.source.gpus: expected a list of GPU names" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(blocker / "s.md")]) == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 's.md'}" in err and "Traceback" not in err
    out = tmp_path / "s.md"
    out.write_text("old")
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 0
    assert out.read_text().startswith("# EAGLE-3") and [p.name for p in tmp_path.iterdir() if "s.md" in p.name] == [
        "s.md"
    ]


def test_plain_decoding_with_two_batch1_outputs_is_named_not_eagle(tmp_path):
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400), _m(100, 400, h1="b")]]})
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)]]})
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    text = out.read_text()
    assert "| ? (plain decoding is not deterministic here: 2 distinct) | same |" in text, text
    assert "must be: unknown, plain decoding is not deterministic here (full)." in text and "**NO**" not in text


@pytest.mark.parametrize(
    "wl_b1,bench,expect",
    [
        (4, {"hash_b1": {"128": "s128"}}, "not recorded for 4 b1 requests at 128 tokens"),  # before b1_requests
    ],
)
def test_a_hash_server_seqs_did_not_record_is_said_so(tmp_path, capsys, wl_b1, bench, expect):
    wl = {**WL, "b1_requests": wl_b1}
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]}, workload=wl)
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)]]}, workload=wl)
    tj = tmp_path / "train.json"
    src = {"generated_by": "the server (bench server-seqs)", "file": "s.json", "source": {"bench": bench}}
    tj.write_text(json.dumps({"reference_hash_b1": {"128": "r"}, "sequences": {"source": src}}))
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)]) == 0
    text = capsys.readouterr().out
    assert expect in text, text
    assert ("differs" in text) is ("differs" in expect)


KIMI = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-04-h200-kimi"


def test_the_kimi_width_trained_run(tmp_path, capsys):
    """The recorded Kimi-width run (issue 17): the draft trained on the server's own sequences is accepted 4.00 at
    batch 1 and its output is plain decoding's; 1.38x plain decoding's tok/s at batch 1, under the 1.5x target;
    OEA at K0=3 routes the verify batch otherwise, so the draft that memorized K0-unset continuations fails it."""
    out = tmp_path / "summary.md"
    args = ["--plain", str(KIMI / "kimi_plain"), "--eagle", str(KIMI / "kimi_trained")]
    assert main([*args, "--train-json", str(KIMI / "train" / "kimi-draft.json"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| kimi_trained | full | full | 2 | 4.00 | 1.03 | 532.1 | 1.38 | 707.2 | 0.55 | yes |" in text
    assert "| kimi_trained | oea3 | oea3 | 2 | 1.01 | 1.01 | 176.0 | 0.39 | 810.7 | 0.46 | not expected" in text
    assert "38ec0c61a1e3822f; plain full's: 38ec0c61a1e3822f -> equal" in text
    # the record's summary is what the recorded stores give: its table and verdict (the other lines name paths)
    recorded = (KIMI / "kimi_trained" / "summary.md").read_text()

    def kept(s: str) -> list[str]:
        return [x for x in s.splitlines() if x.startswith(("|", "EAGLE-3 batch-1", "Accept length"))]

    assert len(kept(recorded)) == 7 and kept(out.read_text()) == kept(recorded)


@pytest.mark.parametrize(
    ("eagle", "plain", "says"),
    [
        # by hand: Welch on the logs, df from Welch-Satterthwaite, t(0.975, df): 3.05x [2.92, 3.18] for the first
        ([300, 310, 305], [100, 102, 98], "3.05x [2.92, 3.18], 3 vs 3 starts: **1.5x shown**"),
    ],
)
def test_the_speed_ratio_reads_starts_and_calls_the_target_only_from_its_interval(tmp_path, eagle, plain, says):
    """A ratio of medians from two starts a side (kimi_trained's 1.38x) said nothing of its uncertainty: the
    interval over starts does, and the target is called only when the interval clears it."""
    p = _run_dir(tmp_path / "plain", {"full": [[_m(x, 400)] for x in plain]})
    e = _run_dir(tmp_path / "eagle", {"full": [[_m(x, 800, 4.0)] for x in eagle]})
    out = tmp_path / "s.md"
    assert main(["--plain", str(p), "--eagle", str(e), "--out", str(out), "--target-ratio", "1.5"]) == 0
    text = out.read_text()
    assert f"- eagle full vs full (plain): {says}" in text or f"- eagle full vs full: {says}" in text, text


def test_the_kimi_width_ratio_over_starts_is_recorded_as_cannot_tell(tmp_path, capsys):
    """The record's 1.38-1.48x were ratios of medians: with the start as the unit the intervals span 1.5 (kimi_null's
    ten starts against plain's two), so the target is neither shown nor refuted; OEA at K0=3 is below it."""
    args = [
        "--plain",
        str(KIMI / "kimi_plain"),
        "--eagle",
        str(KIMI / "kimi_trained"),
        "--eagle",
        str(KIMI / "kimi_null"),
    ]
    assert main([*args, "--train-json", str(KIMI / "train" / "kimi-draft.json"), "--target-ratio", "1.5"]) == 0
    text = capsys.readouterr().out
    assert "- kimi_null a vs full (plain): 1.39x [1.23, 1.57], 5 vs 2 starts: 1.5x **cannot tell**" in text
    assert "- kimi_null null vs full (plain): 1.44x [1.31, 1.60], 5 vs 2 starts: 1.5x **cannot tell**" in text
    assert "- kimi_trained oea3 vs oea3 (plain): 0.39x [0.12, 1.25], 2 vs 2 starts: **below 1.5x**" in text
    recorded = (KIMI / "ratio-interval.md").read_text()
    assert [x for x in text.splitlines() if x.startswith("- ")] == [
        x for x in recorded.splitlines() if x.startswith("- ")
    ]


H100 = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-05-h100-speed5"


def test_the_steps5_run_on_the_h100(tmp_path, capsys):
    """The recorded steps-5 run (issue 17, H100): accepted 4.00 at batch 1 but its greedy output departs from plain
    decoding's (exit 1, "NO"), and 1.11x plain decoding with the start as the unit: below the 1.5x target."""
    out = tmp_path / "summary.md"
    args = ["--plain", str(H100 / "kimi_speed" / "plain"), "--eagle", str(H100 / "kimi_speed5" / "eagle")]
    tj = str(H100 / "train" / "kimi-draft5.json")
    assert main([*args, "--train-json", tj, "--out", str(out), "--target-ratio", "1.5"]) == 1
    text = capsys.readouterr().out
    assert "| eagle | full | full | 3 | 4.00 | 1.02 | 356.3 | 1.15 | 476.7 | 0.50 | **NO** |" in text
    assert "- eagle full vs full (plain): 1.11x [0.94, 1.30], 3 vs 2 starts: **below 1.5x**" in text
    assert "8b5282c89d5476c5; plain full's: 8b5282c89d5476c5 -> equal" in text
    recorded = (H100 / "kimi_speed5" / "summary.md").read_text()

    def kept(s: str) -> list[str]:
        return [x for x in s.splitlines() if x.startswith(("|", "- ", "EAGLE-3 batch-1", "Accept length"))]

    assert len(kept(recorded)) == 6 and kept(out.read_text()) == kept(recorded)


# Where a departure from plain decoding comes from: the EAGLE run's first arm is its baseline (SPEED_ARMS puts
# the pristine set first), and an arm that departs as the baseline does is not the set's doing.
@pytest.mark.parametrize(
    "base_h, set_h, says",
    [
        ("x", "x", "full departs as the baseline arm none does, with the same output: not the set's doing"),
        ("a", "x", "full departs while the baseline arm none keeps plain decoding's output: it comes with full's"),
        ("y", "x", "full and the baseline arm none both depart, with different outputs: the baseline departs"),
    ],
)
def test_a_departure_is_put_on_the_set_only_when_the_baseline_keeps_plain_output(tmp_path, base_h, set_h, says):
    plain = _run_dir(tmp_path / "plain", {"none": [[_m(100, 400)]], "full": [[_m(100, 400)]]})
    eagle = _run_dir(
        tmp_path / "eagle", {"none": [[_m(300, 800, 3.0, h1=base_h)]], "full": [[_m(300, 800, 3.0, h1=set_h)]]}
    )
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    assert says in out.read_text()


def _seqs_made_on(tmp_path: Path, gpus: list[str] | None) -> Path:
    """A train-draft record on server sequences whose plain batch-1 hash is not this run's."""
    src = {"bench": {"hash_b1": {"128": "other"}, "b1_requests": 2}, **({"gpus": gpus} if gpus else {})}
    rec = {
        "device": "NVIDIA H200",
        "sequences": {"source": {"generated_by": "the server (bench server-seqs)", "source": src}},
    }
    f = tmp_path / "train.json"
    f.write_text(json.dumps(rec))
    return f


@pytest.mark.parametrize(
    "made, here, says",
    [
        (
            ["NVIDIA H100 80GB HBM3, 580.1"],
            ["NVIDIA H200, 580.2"],
            "made on NVIDIA H100 80GB HBM3, this plain run ran on",
        ),
        # one GPU of the kind or eight: the same GPU, not "made on another"
        (["NVIDIA H100 80GB HBM3, 580.1"], ["NVIDIA H100 80GB HBM3, 580.2"] * 8, "(another tree, set, server args?)"),
    ],
)
def test_the_gpu_is_named_only_where_it_is_known_to_differ(tmp_path, made, here, says):
    plain = _run_dir(tmp_path / "plain", {"full": [[_m(100, 400)]]})
    lines = (plain / "results.jsonl").read_text().splitlines()
    run = json.loads(lines[0])
    run["host"] = {"gpus": here}
    (plain / "results.jsonl").write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")
    eagle = _run_dir(tmp_path / "eagle", {"full": [[_m(300, 800, 3.0)]]})
    out = tmp_path / "s.md"
    tj = _seqs_made_on(tmp_path, made)
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj), "--out", str(out)]) == 0
    text = out.read_text()
    assert says in text and ("the sequences were made on" in text) is ("made on" in says)


@pytest.mark.parametrize(
    "plain_arms, eagle_arms",
    [
        # the first arm is an OEA arm
        (
            {"oea3": [[_m(100, 400, h1="o")]], "full": [[_m(100, 400)]], "p": [[_m(100, 400)]]},
            {"oea3": [[_m(300, 800, 3.0, h1="z")]], "full": [[_m(300, 800, 3.0, h1="x")]], "p": [[_m(300, 800, 3.0)]]},
        ),
    ],
)
def test_only_the_runs_first_arm_is_its_baseline(tmp_path, plain_arms, eagle_arms):
    plain = _run_dir(tmp_path / "plain", plain_arms)
    eagle = _run_dir(tmp_path / "eagle", eagle_arms)
    if "oea3" in eagle_arms:
        _set_env(plain, "oea3", {"SGLANG_OEA_K0": "3"})
        _set_env(eagle, "oea3", {"SGLANG_OEA_K0": "3"})
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    text = out.read_text()
    first = next(iter(eagle_arms))
    assert "baseline arm full" not in text and "not the set's doing" not in text
    assert f"its first arm {first} cannot be its baseline" in text


def _set_env(run_dir: Path, arm: str, env: dict) -> None:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    run = json.loads(lines[0])
    for a in run["arms"]:
        if a["name"] == arm:
            a["env"] = env
    (run_dir / "results.jsonl").write_text("\n".join([json.dumps(run), *lines[1:]]) + "\n")


def test_a_first_arm_with_no_completed_start_leaves_the_run_without_a_baseline(tmp_path):
    """The run's first arm (SPEED_ARMS: the pristine set) measured nothing: the next arm is not its baseline."""
    plain = _run_dir(tmp_path / "plain", {"none": [[_m(100, 400)]], "full": [[_m(100, 400)]], "p": [[_m(100, 400)]]})
    eagle = _run_dir(
        tmp_path / "eagle", {"none": [], "full": [[_m(300, 800, 3.0, h1="x")]], "p": [[_m(300, 800, 3.0)]]}
    )
    out = tmp_path / "s.md"
    assert main(["--plain", str(plain), "--eagle", str(eagle), "--out", str(out)]) == 1
    text = out.read_text()
    assert "baseline arm full" not in text
    assert "its first arm none cannot be its baseline (no completed start)" in text


def _set_run_env(run_dir: Path, **env: str) -> None:
    """The run record's --env, as `bench ab --env K=V` records it (config.env)."""
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    for r in recs:
        if r.get("type") == "run":
            r["config"]["env"] = {**r["config"].get("env", {}), **env}
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_the_weights_line_is_the_runs_weights_not_only_the_drafts(tmp_path, capsys):
    """train.json says which weights the draft was trained against; the outputs compared are the runs'. A successor
    draft held against runs that drew normal weights (GPU session 5's records: SGLANG_DUMMY_INIT=normal) must not
    be told its outputs "differ only by a real departure"; a train.json without the record is not called normal."""
    plain, eagle = _gpu5(tmp_path)
    rec = json.loads(TRAIN5.read_text())
    tj = tmp_path / "train.json"
    rec["dummy_init"] = {"SGLANG_DUMMY_INIT": "successor", "SGLANG_DUMMY_INIT_STD": 0.02, "seed": 1234}
    tj.write_text(json.dumps(rec))
    main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)])
    text = capsys.readouterr().out
    assert "differ only by a real departure" not in text
    assert "but plain full, plain oea3, eagle none, eagle full, eagle oea3 ran SGLANG_DUMMY_INIT=normal" in text
    # the runs on the draft's weights: the claim stands
    _set_run_env(plain, SGLANG_DUMMY_INIT="successor")
    _set_run_env(eagle, SGLANG_DUMMY_INIT="successor")
    main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)])
    assert "permuted: greedy choices by many logits, so outputs differ only by a real departure)" in (
        capsys.readouterr().out
    )
    del rec["dummy_init"]
    tj.write_text(json.dumps(rec))
    main(["--plain", str(plain), "--eagle", str(eagle), "--train-json", str(tj)])
    text = capsys.readouterr().out
    assert "target weights: not recorded in train.json" in text and "normal dummy weights" not in text
