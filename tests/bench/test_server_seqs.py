"""bench server-seqs and train-draft --sequences on the tiny CPU configuration of test_train_draft.py.

The "server" answers /generate as SGLang 0.5.17's does; its continuations are the reference's greedy decoding
with one token changed at FLIP, then greedy again, as a GPU's bf16 kernels part from the reference at a near tie.
A draft trained on the file must learn the server's continuation, not the reference's."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_train_draft import SPEC, model_dir  # noqa: F401  (the same tiny model dir fixture)

ROOT = Path(__file__).resolve().parents[2]
PROMPTS, EVAL, NEW, FLIP = 32, 8, 40, 12  # FLIP: the continuation index where the server parts from the reference
TRAIN = dict(prompts=PROMPTS, eval_prompts=EVAL, epochs=10, batch=4, lr=5e-3, device="cpu", train_seconds=3600.0)


@pytest.fixture(scope="module")
def table(model_dir) -> dict[str, dict]:
    """text -> {prompt_ids, output_ids}: what the fake server decodes for each of the bench's prompts."""
    import torch

    from bench.dummy_init import DummyInit
    from bench.target_ref import TargetArch, TargetRef, dummy_weights, greedy
    from bench.train_draft import tokenize
    from bench.workload import fixed_prompts

    arch = TargetArch.from_config(json.loads((model_dir / "target" / "config.json").read_text()))
    target = TargetRef(arch, {k: v.float() for k, v in dummy_weights(arch, torch.bfloat16, "cpu", DummyInit()).items()})
    texts = fixed_prompts(PROMPTS + EVAL)
    prompts = tokenize(model_dir, texts)
    ref = greedy(target, prompts, FLIP + 1)
    # the server's token at FLIP is another than the reference's argmax; the target decodes greedily after it
    flipped = [r[:-1] + [(r[-1] + 1) % SPEC.vocab] for r in ref]
    seqs = greedy(target, flipped, NEW - FLIP - 1)
    return {t: {"prompt_ids": p, "output_ids": s[len(p) :]} for t, p, s in zip(texts, prompts, seqs)}


class FakeSGLang:
    """/generate and /model_info as SGLang's, from a table and the model dir it says it serves; `mode` breaks it
    on purpose. A request past the table's first 8 waits (10 s at most) until two were in flight at once, so
    that concurrency is seen, not timed; mode "stuck" holds every request until `release` is set."""

    def __init__(self, table: dict[str, dict], model_path: Path):
        self.table, self.mode, self.model_path = table, "ok", model_path
        self.cond, self.release = threading.Condition(), threading.Event()
        self.inflight, self.seen, self.overlapped = 0, [], False  # seen: (text, in flight when it arrived)
        later = set(list(table)[8:])
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                data = json.dumps({"model_path": str(fake.model_path), "is_generation": True}).encode()
                self.send_response(200 if self.path == "/model_info" else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.cond:
                    fake.inflight += 1
                    fake.seen.append((body["text"], fake.inflight))
                    fake.overlapped |= fake.inflight > 1
                    fake.cond.notify_all()
                    if body["text"] in later:
                        fake.cond.wait_for(lambda: fake.overlapped or fake.mode == "stuck", timeout=10)
                if fake.mode == "stuck":
                    fake.release.wait(300)
                row = fake.table[body["text"]]
                n = body["sampling_params"]["max_new_tokens"]
                assert body["sampling_params"]["temperature"] == 0.0 and body["sampling_params"]["ignore_eos"]
                ids = row["output_ids"][:n]
                if fake.mode == "drift" and n != len(row["output_ids"]):
                    ids = ids[:-1] + [(ids[-1] + 1) % SPEC.vocab]
                # the detokenized text of those ids, as SGLang's detokenizer returns it
                out = {"text": f"t{len(ids)}-{sum(ids)}", "output_ids": ids, "meta_info": {"completion_tokens": n}}
                if body.get("return_prompt_token_ids"):
                    out["prompt_token_ids"] = row["prompt_ids"]
                if fake.mode == "short":
                    out["output_ids"] = out["output_ids"][: n // 2]
                elif fake.mode == "oov":
                    out["output_ids"][3] = SPEC.vocab
                elif fake.mode == "no_prompt_ids":
                    out.pop("prompt_token_ids", None)
                data = json.dumps(out).encode()
                with fake.cond:
                    fake.inflight -= 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # uvicorn's backlog is 2048; the default 5 resets concurrent clients

            def handle_error(self, request, client_address):
                # a stuck handler's client has left: its BrokenPipe traceback would land in another test's stderr
                if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    return
                super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def shutdown(self) -> None:
        self.release.set()
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def fake(table, model_dir):
    srv = FakeSGLang(table, model_dir / "target")
    yield srv
    srv.shutdown()


def _main(*args: str) -> tuple[int, str, str]:
    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def seq_file(fake, model_dir, tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("seqs") / "seqs.json"
    fake.mode, fake.seen = "ok", []
    rc, out, err = _main(
        "server-seqs", model_dir, "--out", f, "--url", fake.url, "--prompts", PROMPTS + EVAL, "--new-tokens", NEW
    )
    assert rc == 0, err
    return f


# ------------------------------------------------------------------ the generation client
def test_server_seqs_writes_the_servers_ids_b1_first_one_at_a_time(seq_file, fake, table, model_dir):
    doc = json.loads(seq_file.read_text())
    assert doc["format"] == "bench-server-seqs/1" and doc["new_tokens"] == NEW
    assert doc["model"]["vocab_size"] == SPEC.vocab and doc["source"]["url"] == fake.url
    rows = doc["sequences"]
    assert [r["text"] for r in rows] == list(table)  # prompt order, whatever order the answers came in
    assert all(r["output_ids"] == table[r["text"]]["output_ids"] for r in rows)
    assert [r["batch"] for r in rows] == ["1"] * 8 + ["concurrent"] * (PROMPTS + EVAL - 8)
    # the bench's 8 prompts arrived alone and in order; the rest overlapped
    assert [t for t, _ in fake.seen[:8]] == list(table)[:8] and all(n == 1 for _, n in fake.seen[:8])
    assert max(n for _, n in fake.seen[8:]) > 1
    assert sorted(p.name for p in seq_file.parent.iterdir()) == ["seqs.json"]  # no temporary left


@pytest.mark.parametrize(
    "mode,expect",
    [
        ("short", "output_ids is not 40 token ids in 0..9999: ["),
        ("oov", "output_ids is not 40 token ids in 0..9999: ["),
    ],
)
def test_a_server_that_answers_otherwise_is_exit_3_and_no_file(fake, model_dir, tmp_path, mode, expect):
    f = tmp_path / "s.json"
    fake.mode = mode
    try:
        rc, _, err = _main("server-seqs", model_dir, "--out", f, "--url", fake.url, "--prompts", 3, "--new-tokens", NEW)
    finally:
        fake.mode = "ok"
    assert rc == 3 and expect in err and f"{fake.url}/generate" in err and "Traceback" not in err
    assert not f.exists()


def test_the_bench_hashes_are_the_servers_own_b1_replies(model_dir, tmp_path):
    """At 64 and 128 tokens the bench's two b1 prompts are asked again: the hash is workload.PhaseResult's over
    the server's text and ids of those requests (what the plain server's hash_b1 will be), not of the 130-token
    rows' first tokens (a server's shorter requests may decode otherwise)."""
    mode = "drift"
    from bench.workload import PhaseResult, fixed_prompts

    texts = fixed_prompts(8)
    table = {
        t: {"prompt_ids": [1, 2, i], "output_ids": [(7 * i + 3 * j) % 997 for j in range(130)]}
        for i, t in enumerate(texts)
    }
    srv = FakeSGLang(table, model_dir / "target")
    srv.mode = mode
    try:
        rc, _, err = _main(
            "server-seqs",
            model_dir,
            "--out",
            tmp_path / "s.json",
            "--url",
            srv.url,
            "--prompts",
            8,
            "--new-tokens",
            130,
        )
    finally:
        srv.shutdown()
    assert rc == 0, err
    bench = json.loads((tmp_path / "s.json").read_text())["source"]["bench"]
    for n in (64, 128):
        ids = [table[t]["output_ids"][:n] for t in texts[:2]]
        ids = [x[:-1] + [(x[-1] + 1) % SPEC.vocab] for x in ids]
        want = PhaseResult(0, 0.0, [], 0, [[f"t{n}-{sum(x)}", x] for x in ids]).output_hash()
        assert bench["hash_b1"][str(n)] == want


def test_an_unwritable_out_fails_before_any_request(fake, model_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    fake.seen = []
    rc, _, err = _main("server-seqs", model_dir, "--out", blocker / "s.json", "--url", fake.url, "--prompts", 3)
    assert rc == 2 and f"cannot write {blocker}/s.json" in err and "Traceback" not in err
    assert fake.seen == []


def test_ctrl_c_drops_the_queued_requests_and_writes_nothing(table, model_dir, tmp_path):
    """SIGINT while 2 of 40 requests are held in flight: exit 130 before they are answered, the 38 queued ones
    never sent, no file and no temporary."""
    fake = FakeSGLang(table, model_dir / "target")
    fake.mode = "stuck"
    argv = [sys.executable, "-m", "bench", "server-seqs", str(model_dir), "--out", str(tmp_path / "s.json")]
    argv += ["--url", fake.url, "--prompts", str(PROMPTS + EVAL), "--new-tokens", str(NEW), "--b1", "0"]
    proc = subprocess.Popen(
        [*argv, "--concurrency", "2"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with fake.cond:
            assert fake.cond.wait_for(lambda: len(fake.seen) == 2, timeout=120), fake.seen
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        fake.shutdown()
    assert proc.returncode == 130 and "interrupted;" in err and "Traceback" not in err, err
    assert len(fake.seen) == 2 and list(tmp_path.iterdir()) == []


def test_a_started_server_through_the_real_launch(sglang_tree, model_dir, tmp_path, monkeypatch):
    """Without --url: the real `apply.py launch` (the fake SGLang server module) carries --set, the bench's server
    env and --env, serves the requests, and is stopped after; the file names the server it came from."""
    import socket

    here = Path(__file__).resolve().parent
    monkeypatch.delenv("SGLANG_OVERLAY_TREE", raising=False)
    monkeypatch.setenv("SGLANG_OVERLAY_SERVER_MODULE", "fake_bench_server")
    monkeypatch.setenv("PYTHONPATH", str(here))
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "starts.jsonl"))
    monkeypatch.setenv("FAKE_BENCH", json.dumps({"vocab": SPEC.vocab}))  # ids in the model's vocab
    monkeypatch.setenv("SGLANG_DUMMY_INIT_STD", "0.05")  # inherited, not given with --env: recorded all the same
    monkeypatch.setenv("BENCH_GPU_NAME", "NVIDIA H200, 580.159.04")  # the GPU the sequences were made on
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    f = tmp_path / "s.json"
    args = ["--manifest", ROOT / "manifest.yaml", "--tree", sglang_tree, "--set", "overlay_identity"]
    rc, _, err = _main(
        "server-seqs",
        model_dir,
        "--out",
        f,
        "--prompts",
        3,
        "--new-tokens",
        9,
        "--b1",
        2,
        *args,
        "--env",
        "SGLANG_DUMMY_INIT=normal",
        "--log-dir",
        tmp_path / "logs",
        "--",
        "--port",
        port,
        "--model-path",
        model_dir / "target",
    )
    assert rc == 0, err
    doc = json.loads(f.read_text())
    src = doc["source"]
    assert src["patches"] == ["overlay_identity"] and src["set"] == "overlay_identity" and len(src["fingerprint"]) > 8
    assert src["server_args"] == ["--port", str(port), "--model-path", str(model_dir / "target")]
    assert src["env"] == {"SGLANG_DUMMY_INIT": "normal"} and src["model_path"] == str(model_dir / "target")
    assert src["dummy_init"] == {
        "SGLANG_DUMMY_INIT": "normal",
        "SGLANG_DUMMY_INIT_STD": "0.05",
        "SGLANG_DUMMY_INIT_EMBED_STD": None,
    }
    assert src["gpus"] == ["NVIDIA H200, 580.159.04"]
    assert [len(r["output_ids"]) for r in doc["sequences"]] == [9, 9, 9]
    (start,) = [json.loads(x) for x in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert start["patches"] == ["overlay_identity"] and start["env"]["SGLANG_DUMMY_INIT"] == "normal"
    assert start["env"]["SGLANG_RECORD_STEP_TIME"] == "1"
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError):  # stopped: nothing listens there
        sock.connect(("127.0.0.1", port))
    # train-draft's reference must draw the server's weights: its SGLANG_DUMMY_INIT_STD is checked against the file's
    from bench import server_seqs
    from bench.dummy_init import DummyInit
    from bench.errors import DraftInputError

    assert server_seqs.load(f, model_dir, 3, None, 4, DummyInit(std=0.05)).new_tokens == 9
    with pytest.raises(
        DraftInputError, match=r"source.dummy_init.SGLANG_DUMMY_INIT_STD: 0.05 .* != train-draft's 0.02"
    ):
        server_seqs.load(f, model_dir, 3, None, 4, DummyInit())
    with pytest.raises(DraftInputError, match=r"source.dummy_init.SGLANG_DUMMY_INIT: 'normal': the server drew other"):
        server_seqs.load(f, model_dir, 3, None, 4, DummyInit("successor", 0.05))


def test_no_server_is_exit_2_and_nothing_listening_is_exit_3(model_dir, tmp_path):
    rc, _, err = _main("server-seqs", model_dir, "--out", tmp_path / "s.json")
    assert rc == 2 and "no server: give --url" in err
    rc, _, err = _main("server-seqs", model_dir, "--out", tmp_path / "s.json", "--url", "http://127.0.0.1:9")
    assert rc == 3 and "is the server up" in err and not (tmp_path / "s.json").exists()


def test_dry_run_prints_the_launch_command_of_the_project_found(model_dir, tmp_path, monkeypatch):
    """The manifest is found as every command finds it (sglang_overlay.project), not assumed in the cwd."""
    planted = ROOT / "tests" / "bench" / "planted" / "manifest.yaml"
    args = ["server-seqs", model_dir, "--out", tmp_path / "s.json", "--env", "SGLANG_DUMMY_INIT=normal", "--dry-run"]
    args += ["--", "--model-path", model_dir / "target", "--load-format", "dummy"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SGLANG_OVERLAY_MANIFEST", raising=False)
    rc, _, err = _main(*args)
    assert rc == 2 and f"no manifest.yaml in {tmp_path}" in err and "Traceback" not in err, err
    monkeypatch.setenv("SGLANG_OVERLAY_MANIFEST", str(planted))
    rc, out, err = _main(*args)
    assert rc == 0, err
    assert f"--manifest {planted} launch --patches overlay_identity," in out and ",dummy_init_normal --log LOG" in out
    assert f"-- --model-path {model_dir}/target --load-format dummy" in out and "SGLANG_DUMMY_INIT" in out
    assert not (tmp_path / "s.json").exists()


def _other_model(model_dir: Path, dst: Path) -> Path:
    """A copy of the model dir's target with another config: another model the server could be serving."""
    other = dst / "other" / "target"
    shutil.copytree(model_dir / "target", other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    return other


def test_a_server_started_on_another_model_is_exit_2_before_it_starts(model_dir, tmp_path):
    base = ["server-seqs", model_dir, "--out", tmp_path / "s.json", "--manifest", ROOT / "manifest.yaml", "--dry-run"]
    other = _other_model(model_dir, tmp_path)
    rc, _, err = _main(*base, "--", "--model-path", other, "--load-format", "dummy")
    assert rc == 2 and f"--model-path: {other} is another model than {model_dir / 'target'}" in err, err
    assert f"hint: serve {model_dir / 'target'} (--model-path {model_dir / 'target'})" in err
    rc, _, err = _main(*base, "--", f"--model-path={tmp_path / 'nowhere'}")
    assert rc == 2 and "no config.json here" in err, err
    rc, _, err = _main(*base, "--", "--load-format", "dummy")
    assert rc == 2 and "name no --model-path" in err and f"add `--model-path {model_dir / 'target'}`" in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


def test_a_url_serving_another_model_is_exit_2_and_nothing_asked(table, model_dir, tmp_path):
    srv = FakeSGLang(table, _other_model(model_dir, tmp_path))
    try:
        rc, _, err = _main("server-seqs", model_dir, "--out", tmp_path / "s.json", "--url", srv.url, "--prompts", 3)
    finally:
        srv.shutdown()
    assert rc == 2 and f"--url {srv.url}: /model_info's model_path: " in err and "is another model than" in err, err
    assert srv.seen == [] and not (tmp_path / "s.json").exists()


# ------------------------------------------------------------------ training on the file
def test_labels_are_the_servers_tokens_where_the_reference_disagrees(seq_file, model_dir):
    import torch

    from bench import server_seqs
    from bench.dummy_init import DummyInit
    from bench.target_ref import TargetArch, TargetRef, dummy_weights
    from bench.train_draft import data_from_sequences

    seqs = server_seqs.load(seq_file, model_dir, 3, None, 4)
    arch = TargetArch.from_config(json.loads((model_dir / "target" / "config.json").read_text()))
    target = TargetRef(arch, {k: v.float() for k, v in dummy_weights(arch, torch.bfloat16, "cpu", DummyInit()).items()})
    data, stats = data_from_sequences(target, seqs, [0, 1, 2], 2)
    for r in range(3):
        p, out = len(seqs.prompt_ids[r]), seqs.output_ids[r]
        assert data.tokens[r, : p + NEW].tolist() == seqs.prompt_ids[r] + out
        assert data.nxt[r, p - 1 : p + NEW - 1].tolist() == out  # the server's, the flipped one included
        assert data.nxt[r, p + NEW - 1 :].tolist() == [-1] * (data.nxt.shape[1] - p - NEW + 1)
    assert stats["first_disagreement_bench"] == [FLIP] * 3
    assert stats["reference_agrees"] == round((NEW - 1) / NEW, 4)


@pytest.fixture(scope="module")
def trained(seq_file, model_dir):
    from bench.train_draft import TrainOptions, run

    logs: list[str] = []
    rec = run(
        TrainOptions(
            model_dir=model_dir, out=model_dir / "draft_trained", sequences=seq_file, new_tokens=None, **TRAIN
        ),
        log=logs.append,
    )
    print("\n".join(logs))
    return rec


def test_training_on_the_servers_sequences(trained, seq_file, model_dir):
    h = trained["history"]
    assert len(h) == TRAIN["epochs"] and h[-1]["loss"] < 0.5 * h[0]["loss"], [r["loss"] for r in h]
    rec = json.loads((model_dir / "draft_trained" / "train.json").read_text())
    src = rec["sequences"]["source"]
    assert src["generated_by"] == "the server (bench server-seqs)" and src["file"] == str(seq_file)
    assert src["sha256"] == __import__("hashlib").sha256(seq_file.read_bytes()).hexdigest()
    assert src["source"]["url"].startswith("http://127.0.0.1:") and src["new_tokens"] == NEW
    # 40 tokens: shorter than 64
    assert src["source"]["bench"] == {"b1_requests": 2, "hash_b1": {}}
    assert src["source"]["model_path"] == str(model_dir / "target") and src["source"]["dummy_init"] is None
    assert src["reference_agrees_first_token"] == 1.0  # the server parts from the reference at FLIP only
    assert src["prompt_ids_equal_local_tokenizer"] == PROMPTS + EVAL
    assert src["first_disagreement_bench"] == [FLIP] * 8 and src["reference_agrees"] < 1
    assert rec["sequences"]["new_tokens"] == NEW and "features_s" in rec["seconds"]
    assert "generate_and_features_s" not in rec["seconds"]
    # a short CPU run: the trained-on prompts' chains get accepted more than the untrained draft's
    m = rec["metrics"]
    assert m["bench_prompts"]["accept_length"] > m["held_out_before"]["accept_length"] + 0.1, m


def test_the_saved_draft_loads_and_reproduces_its_metrics(trained, seq_file, model_dir):
    """model.safetensors back into Eagle3Draft: the bench prompts' simulated accept length is the recorded one."""
    import torch
    from safetensors.torch import load_file

    from bench import server_seqs
    from bench.draft_ref import DraftArch, Eagle3Draft
    from bench.dummy_init import DummyInit
    from bench.target_ref import TargetArch, TargetRef, dummy_weights
    from bench.train_draft import data_from_sequences, evaluate

    arch = TargetArch.from_config(json.loads((model_dir / "target" / "config.json").read_text()))
    w = {k: v.float() for k, v in dummy_weights(arch, torch.bfloat16, "cpu", DummyInit()).items()}
    da = DraftArch.from_config(json.loads((model_dir / "draft_trained" / "config.json").read_text()))
    draft = Eagle3Draft(da, w["model.embed_tokens.weight"][: arch.vocab], w["lm_head.weight"][: arch.vocab], seed=9)
    draft.load_sglang_state(load_file(str(model_dir / "draft_trained" / "model.safetensors")))
    seqs = server_seqs.load(seq_file, model_dir, PROMPTS + EVAL, None, 4)
    data, _ = data_from_sequences(TargetRef(arch, w), seqs, [0, 1, 2], 16)
    got = evaluate(draft, data, list(range(8)), 3, NEW - 3, torch.device("cpu"))
    # bf16 storage moves a few near-tie chains at most
    assert abs(got["accept_length"] - trained["metrics"]["bench_prompts"]["accept_length"]) < 0.15, got


# ------------------------------------------------------------------ a file that does not fit
def _variant(seq_file: Path, dst: Path, case: str, model: Path) -> tuple[Path, str]:
    doc = json.loads(seq_file.read_text())
    key = {
        "format": "format: 'other/1'",
        "tokenizer_config": "model.tokenizer_sha256",
        "std": "source.dummy_init.SGLANG_DUMMY_INIT_STD: 0.05 (the server's) != train-draft's 0.02",
        "weights": "sequences[*].output_ids[0]: the reference's argmax is the server's first token in",
    }[case]
    if case == "format":
        doc["format"] = "other/1"
    elif case == "tokenizer_config":  # the special tokens' flags: part of what the ids mean
        tc = json.loads((model / "target" / "tokenizer_config.json").read_text())
        (model / "target" / "tokenizer_config.json").write_text(json.dumps({**tc, "model_max_length": 7}))
    elif case == "std":
        doc["source"]["dummy_init"] = {"SGLANG_DUMMY_INIT": "normal", "SGLANG_DUMMY_INIT_STD": "0.05"}
    else:  # another model's continuations (other weights): the first token is the reference's only by chance
        for row in doc["sequences"]:
            row["output_ids"] = [(t + 1) % SPEC.vocab for t in row["output_ids"]]
    f = dst / "seqs.json"
    f.write_text(json.dumps(doc))
    return f, key


@pytest.mark.parametrize("case", ["format", "tokenizer_config", "std", "weights"])
def test_a_sequences_file_that_does_not_fit_is_exit_2_naming_file_and_key(seq_file, model_dir, tmp_path, case):
    m = tmp_path / "m"
    for sub in ("target", "draft"):
        shutil.copytree(model_dir / sub, m / sub)
    f, key = _variant(seq_file, tmp_path, case, m)
    args = ["train-draft", m, "--sequences", f, "--device", "cpu", "--prompts", PROMPTS, "--eval-prompts", EVAL]
    rc, _, err = _main(*args)
    assert rc == 2, err
    assert f"{f}: {key}" in err or f"{f}: {key}" in err.replace("\n", " "), err
    assert "hint:" in err and "Traceback" not in err and not (m / "draft_trained").exists()
    if case == "weights":
        assert "these sequences were not made by this model's weights" in err


def test_a_too_long_new_tokens_and_the_dry_run_read_the_file(seq_file, model_dir):
    rc, _, err = _main(
        "train-draft",
        model_dir,
        "--sequences",
        seq_file,
        "--new-tokens",
        NEW + 1,
        "--dry-run",
        "--prompts",
        PROMPTS,
        "--eval-prompts",
        EVAL,
    )
    assert rc == 2 and f"output_ids: {NEW} tokens, training needs {NEW + 1}" in err
    rc, out, err = _main(
        "train-draft", model_dir, "--sequences", seq_file, "--dry-run", "--prompts", 4, "--eval-prompts", 1
    )
    assert rc == 0 and f"x {NEW} greedy tokens of the server's from {seq_file}, teacher-forced" in out
