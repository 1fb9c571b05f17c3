"""`python -m bench server-seqs MODEL_DIR --out FILE [--url URL | --set SET -- SERVER_ARGS]`: the target's own
greedy continuations of the bench's prompts, as the (patched) server decodes them, for `bench train-draft
--sequences FILE`.

Why the server's and not the reference's (bench/target_ref.py): with random dummy_init_normal weights the top-2
logit gap is small, so the server's bf16 kernels (FlashInfer MLA, the fused MoE) flip some greedy argmaxes
against plain torch, and a draft that learnt the reference's continuation falls off the server's at the first
flip (bench/results/2026-12-01-h200-run5: in-server accept length 1.19 against a simulated 4.0).

Requests are the bench's (workload._one): the prompt as text, temperature 0, ignore_eos, plus
return_prompt_token_ids so the file holds the ids the server's own tokenizer made (what the bench's text
requests will meet). The first --b1 prompts are decoded alone, one after another: the bench's batch-1 phase,
whose greedy output EAGLE-3 reproduces token for token; the rest --concurrency at a time (their
continuations may differ from batch-1 decoding where a batch's kernels round otherwise: data, not a check).

Without --url the command starts one server through `apply.py launch` (the bench's launcher) with --set and
the server args after `--`, and stops it at the end, also on Ctrl-C or an error. The file is written beside
and renamed into place: a kill leaves the previous file or the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dummy_init import ENV_NAMES as DUMMY_ENV
from .dummy_init import MODES, DummyInit, from_env
from .errors import DraftInputError, ServerSeqsError, run_reported

FORMAT = "bench-server-seqs/1"
BENCH_B1 = 8  # the bench's first 8 prompts (fixed_prompts(8)): every request it sends
BENCH_B1_REQUESTS = 2  # gpu_runs.sh's --b1-requests
BENCH_HASH_TOKENS = (64, 128)  # its --max-new-tokens (correctness runs, issue 17's runs)


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def model_identity(model_dir: Path) -> dict[str, Any]:
    """What a sequences file must share with the model dir it trains: the target's config and tokenizer."""
    return target_identity(model_dir / "target")


def target_identity(target: Path) -> dict[str, Any]:
    cfg_path = target / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftInputError(
            f"{cfg_path}: unreadable ({e})", hint="write the model dir with `python -m bench tinymodel DIR`"
        ) from None
    # tokenizer_config.json holds the special tokens' flags and the chat template: part of what the ids mean
    tok = [file_sha256(target / n) for n in ("tokenizer.json", "tokenizer_config.json")]
    return {
        "target_config_sha256": hashlib.sha256(cfg_path.read_bytes()).hexdigest(),
        "tokenizer_sha256": None if tok[0] is None else hashlib.sha256(" ".join(map(str, tok)).encode()).hexdigest(),
        "vocab_size": cfg.get("vocab_size") if isinstance(cfg, dict) else None,
    }


IDENTITY_KEYS = ("target_config_sha256", "tokenizer_sha256", "vocab_size")


def server_model_path(server_args: tuple[str, ...]) -> str | None:
    """--model-path (or its alias --model) from sglang.launch_server's args; the last one wins, as in argparse."""
    found = None
    for i, a in enumerate(server_args):
        for flag in ("--model-path", "--model"):
            if a == flag and i + 1 < len(server_args):
                found = server_args[i + 1]
            elif a.startswith(flag + "="):
                found = a.partition("=")[2]
    return found


def check_served_model(served: str, model_dir: Path, where: str) -> None:
    """The model the server loads must be MODEL_DIR's target: else the file would be stamped with MODEL_DIR's
    identity over another model's continuations."""
    mine, target = model_identity(model_dir), model_dir / "target"
    fix = f"serve {target} (--model-path {target}), or give the served model's dir as MODEL_DIR"
    if not (Path(served) / "config.json").is_file():
        raise DraftInputError(f"{where}: {served!r}: no config.json here, cannot check it is {target}", hint=fix)
    theirs = target_identity(Path(served))
    for key in IDENTITY_KEYS:
        if theirs[key] != mine[key]:
            raise DraftInputError(f"{where}: {served} is another model than {target} ({key} differs)", hint=fix)


@dataclass(frozen=True)
class Sequences:
    """A validated sequences file: per prompt, the server's prompt ids and its greedy continuation."""

    path: Path
    prompt_ids: list[list[int]]
    output_ids: list[list[int]]
    texts: list[str]
    source: dict
    new_tokens: int  # every continuation's length (the shortest, when they differ)

    def record(self) -> dict:
        """train.json's account of where the sequences came from."""
        return {
            "file": str(self.path),
            "sha256": file_sha256(self.path),
            "source": self.source,
            "prompts": len(self.texts),
            "new_tokens": self.new_tokens,
        }


def _bad(path: Path, key: str, problem: str, fix: str) -> DraftInputError:
    return DraftInputError(f"{path}: {key}: {problem}", hint=fix)


REGENERATE = "write it again for this model dir with `python -m bench server-seqs MODEL_DIR --out FILE ...`"


def read_doc(path: Path, fix: str) -> dict:
    """A sequences file's JSON, of this FORMAT: DraftInputError naming the file (and the key) otherwise."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise DraftInputError(f"{path}: not found", hint=fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftInputError(f"{path}: unreadable JSON ({e})", hint=fix) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise _bad(path, "format", f"{got!r}, expected {FORMAT!r}", fix)
    return doc


def load(
    path: Path,
    model_dir: Path,
    prompts: int,
    new_tokens: int | None,
    min_tokens: int,
    init: DummyInit | None = None,
) -> Sequences:
    """The file's first `prompts` sequences, checked against the model dir (config, tokenizer, vocab), the
    server's recorded dummy-init env against `init` (train-draft's), the bench's prompt texts
    (workload.fixed_prompts) and the lengths training needs: DraftInputError naming the file, the key and the
    fix otherwise."""
    from .workload import fixed_prompts

    doc = read_doc(path, REGENERATE)
    mine, theirs = model_identity(model_dir), doc.get("model")
    if not isinstance(theirs, dict):
        raise _bad(path, "model", "missing", REGENERATE)
    for key in IDENTITY_KEYS:
        if theirs.get(key) != mine[key]:
            raise _bad(
                path,
                f"model.{key}",
                f"{theirs.get(key)!r} != {model_dir / 'target'}'s {mine[key]!r} (generated for another model)",
                REGENERATE,
            )
    _check_dummy_init(path, doc.get("source"), init)
    rows = doc.get("sequences")
    if not isinstance(rows, list):
        raise _bad(path, "sequences", "missing or not a list", REGENERATE)
    if len(rows) < prompts:
        raise _bad(
            path,
            "sequences",
            f"{len(rows)} sequences, training needs {prompts} (--prompts + --eval-prompts)",
            f"lower --prompts/--eval-prompts or {REGENERATE} with --prompts {prompts}",
        )
    vocab, texts = mine["vocab_size"], fixed_prompts(prompts)
    p_ids: list[list[int]] = []
    o_ids: list[list[int]] = []
    for i, row in enumerate(rows[:prompts]):
        key = f"sequences[{i}]"
        if not isinstance(row, dict):
            raise _bad(path, key, "not an object", REGENERATE)
        if row.get("text") != texts[i]:
            raise _bad(path, f"{key}.text", "not the bench's prompt of that index (workload.fixed_prompts)", REGENERATE)
        for name, out in (("prompt_ids", p_ids), ("output_ids", o_ids)):
            ids = row.get(name)
            if (
                not isinstance(ids, list)
                or not ids
                or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in ids)
            ):
                raise _bad(
                    path, f"{key}.{name}", f"must be a non-empty list of token ids in 0..{vocab - 1}", REGENERATE
                )
            out.append(ids)
    shortest = min(len(x) for x in o_ids)
    want = new_tokens if new_tokens is not None else shortest
    if shortest < max(want, min_tokens):
        i = min(range(len(o_ids)), key=lambda r: len(o_ids[r]))
        raise _bad(
            path,
            f"sequences[{i}].output_ids",
            f"{shortest} tokens, training needs {max(want, min_tokens)}",
            f"lower --new-tokens or {REGENERATE} with --new-tokens {max(want, min_tokens)}",
        )
    return Sequences(
        path=path,
        prompt_ids=p_ids,
        output_ids=[x[:want] for x in o_ids],
        texts=texts,
        source=doc.get("source") or {},
        new_tokens=want,
    )


def _check_dummy_init(path: Path, source: Any, init: DummyInit | None) -> None:
    """The server's SGLANG_DUMMY_INIT* as recorded (None: a --url server's, unknown) against the reference's."""
    dummy = source.get("dummy_init") if isinstance(source, dict) else None
    if init is None or not isinstance(dummy, dict):
        return
    recorded = {k: str(v) for k, v in dummy.items() if isinstance(k, str) and v not in (None, "")}
    mode = recorded.get("SGLANG_DUMMY_INIT")
    if mode != init.mode:
        again = f"{REGENERATE} with --env SGLANG_DUMMY_INIT={init.mode}"
        raise _bad(
            path,
            "source.dummy_init.SGLANG_DUMMY_INIT",
            f"{mode!r}: the server drew other weights than the reference ({init.mode})",
            # a mode train-draft has no reference for (unset: upstream's uniform weights) has no flag to pass
            f"pass --dummy-init {mode} if that is the server's, or {again}" if mode in MODES else again,
        )
    try:
        theirs = from_env(recorded, where=f"{path}: source.dummy_init: ")
    except DraftInputError as e:
        raise DraftInputError(str(e), hint=REGENERATE) from None
    for key, mine, got, flag in (
        ("SGLANG_DUMMY_INIT_STD", init.std, theirs.std, "--std"),
        ("SGLANG_DUMMY_INIT_EMBED_STD", init.embed_std, theirs.embed_std, "--embed-std"),
    ):
        if got != mine:
            raise _bad(
                path,
                f"source.dummy_init.{key}",
                f"{got} (the server's) != {flag} {mine}",
                f"pass {flag} {got} (or unset {key} here), or {REGENERATE}",
            )


def request(url: str, text: str, new_tokens: int, timeout: float, vocab: int | None = None) -> dict:
    from .workload import WorkloadError, post_json

    payload = {
        "text": text,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True},
        "return_prompt_token_ids": True,
    }
    try:
        out = post_json(url.rstrip("/") + "/generate", payload, timeout)
    except (OSError, WorkloadError, ValueError) as e:
        raise ServerSeqsError(f"POST {url}/generate: {e}", hint="is the server up (its /health)?") from None
    ids, prompt = (out.get("output_ids"), out.get("prompt_token_ids")) if isinstance(out, dict) else (None, None)
    if not isinstance(ids, list) or len(ids) != new_tokens:
        n = len(ids) if isinstance(ids, list) else ids
        raise ServerSeqsError(
            f"POST {url}/generate: output_ids {n!r}, expected {new_tokens} token ids",
            hint="the server must honour ignore_eos and return output_ids (SGLang's /generate does)",
        )
    bad = [t for t in ids if not _token(t, vocab)]
    if bad:
        raise ServerSeqsError(
            f"POST {url}/generate: output_ids holds {bad[0]!r}, not a token id"
            + (f" in 0..{vocab - 1}" if vocab else ""),
            hint="is the server serving MODEL_DIR's target (its vocab)?",
        )
    if not isinstance(prompt, list) or not prompt:
        raise ServerSeqsError(
            f"POST {url}/generate: no prompt_token_ids in the response",
            hint="the server must honour return_prompt_token_ids (SGLang 0.5.17's /generate does)",
        )
    return {"text": text, "prompt_ids": prompt, "output_ids": ids, "reply": out.get("text")}


def _token(t: Any, vocab: int | None) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0 and (vocab is None or t < vocab)


def served_model_path(url: str, timeout: float) -> str:
    """A running server's model_path (SGLang 0.5.17's GET /model_info)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/model_info", timeout=timeout) as r:
            info = json.loads(r.read())
    except (OSError, ValueError) as e:
        raise ServerSeqsError(
            f"GET {url}/model_info: {e}", hint="is the server up, an SGLang server (0.5.17 serves /model_info)?"
        ) from None
    path = info.get("model_path") if isinstance(info, dict) else None
    if not isinstance(path, str) or not path:
        raise ServerSeqsError(f"GET {url}/model_info: no model_path in {info!r}", hint="is it an SGLang server?")
    return path


def concurrently(fn, items: list, workers: int) -> list:
    """[fn(x) for x in items], `workers` at a time, on daemon threads: Ctrl-C or a failed call returns at once,
    not after the calls in flight (they end with the process, or their server); the rest are not started."""
    results: list = [None] * len(items)
    failed: list[BaseException] = []
    todo, lock = iter(enumerate(items)), threading.Lock()

    def work() -> None:
        while not failed:
            with lock:
                nxt = next(todo, None)
            if nxt is None:
                return
            try:
                results[nxt[0]] = fn(nxt[1])
            except BaseException as e:
                failed.append(e)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(max(1, workers), len(items)))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive() and not failed:
                t.join(0.05)
    except BaseException:
        failed.append(KeyboardInterrupt())  # the workers take no more
        raise
    if failed:
        raise failed[0]
    return results


def bench_hashes(url: str, texts: list[str], rows: list[dict], new_tokens: int, timeout: float) -> dict:
    """The plain server's hash_b1 as the bench computes it (workload.PhaseResult.output_hash over the server's
    own text and ids of its b1 requests) at the lengths gpu_runs.sh decodes, asked for at those lengths; and
    whether those ids are the longer batch-1 rows' first tokens (greedy decoding stops nowhere else)."""
    from .workload import PhaseResult

    out: dict[str, Any] = {"b1_requests": BENCH_B1_REQUESTS, "hash_b1": {}, "prefix_equal": True}
    for n in BENCH_HASH_TOKENS:
        if n > new_tokens or len(rows) < BENCH_B1_REQUESTS:
            continue
        got = [request(url, t, n, timeout) for t in texts[:BENCH_B1_REQUESTS]]
        out["hash_b1"][str(n)] = PhaseResult(0, 0.0, [], 0, [[g["reply"], g["output_ids"]] for g in got]).output_hash()
        out["prefix_equal"] &= all(g["output_ids"] == r["output_ids"][:n] for g, r in zip(got, rows))
    return out


def generate(
    url: str,
    texts: list[str],
    new_tokens: int,
    b1: int,
    concurrency: int,
    timeout: float,
    log=print,
    vocab: int | None = None,
):
    """([{text, prompt_ids, output_ids, batch}] in prompt order: the first b1 alone, the rest concurrently;
    bench_hashes of the first rows)."""
    t0 = time.monotonic()
    rows = [dict(request(url, t, new_tokens, timeout, vocab), batch="1") for t in texts[:b1]]
    hashes = bench_hashes(url, texts, rows, new_tokens, timeout)
    log(f"server-seqs: {len(rows)} prompt(s) at batch 1 in {time.monotonic() - t0:.1f} s; bench hashes {hashes}")
    t1 = time.monotonic()
    rest = concurrently(lambda t: request(url, t, new_tokens, timeout, vocab), texts[b1:], concurrency)
    rows += [dict(r, batch="concurrent") for r in rest]
    if rest:
        log(f"server-seqs: {len(rest)} prompt(s), {concurrency} at a time, in {time.monotonic() - t1:.1f} s")
    for r in rows:
        del r["reply"]
    return rows, hashes


def _cannot_write(out: Path, e: OSError) -> DraftInputError:
    return DraftInputError(
        f"cannot write {out}: {e.strerror or e}", hint=f"free space or choose another --out; {out} is as it was"
    )


def check_writable(out: Path) -> None:
    """Before a server start and minutes of generation: --out's directory takes a file. The probe is the
    final write's own temp (fsio's fixed name), so a kill here leaves nothing the next run does not replace."""
    from sglang_overlay.fsio import unlink_quietly, write_tmp

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        unlink_quietly(write_tmp(out, b""))
    except OSError as e:
        raise _cannot_write(out, e) from None


def write(out: Path, doc: dict) -> None:
    """Whole or not at all (derived.write_whole): a kill leaves the previous file or the new one; a full disk
    is exit 1 naming the file, with the previous file as it was."""
    from .store import write_whole

    write_whole(out, (json.dumps(doc, separators=(",", ":")) + "\n").encode(), "free space or choose another --out")


@dataclass(frozen=True)
class SeqOptions:
    model_dir: Path
    out: Path
    prompts: int = 1056
    new_tokens: int = 160
    b1: int = BENCH_B1
    concurrency: int = 64
    url: str | None = None
    set_expr: str = "full+dummy_init_normal"
    manifest: str = "manifest.yaml"
    tree: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    server_args: tuple[str, ...] = ()
    health_timeout: float = 900.0
    request_timeout: float = 600.0
    log_dir: Path | None = None
    command: tuple[str, ...] = ()


def _arm(opts: SeqOptions):
    from .launcher import ArmSpec, Catalog, SetError, resolve

    try:
        return ArmSpec("server-seqs", resolve(Catalog.from_manifest(opts.manifest), opts.set_expr), env=opts.env)
    except SetError as e:
        raise DraftInputError(f"--set {opts.set_expr}: {e}") from None


def _launch_config(opts: SeqOptions):
    from .launcher import LaunchConfig

    return LaunchConfig(
        tree=opts.tree,
        manifest=opts.manifest,
        server_args=opts.server_args,
        health_timeout_s=opts.health_timeout,
        start_timeout_s=opts.health_timeout + 60,
    )


def _checked(opts: SeqOptions) -> None:
    if opts.prompts < 1 or opts.new_tokens < 1 or opts.concurrency < 1 or opts.b1 < 0:
        raise DraftInputError("--prompts, --new-tokens and --concurrency must be >= 1, --b1 >= 0")
    if opts.url is None and not opts.server_args:
        raise DraftInputError(
            "no server: give --url of a running one, or the server args after `--` to start one",
            hint="e.g. `-- --model-path MODEL_DIR/target --load-format dummy` with --env SGLANG_DUMMY_INIT=normal",
        )
    model_identity(opts.model_dir)
    if opts.url is None:
        served = server_model_path(opts.server_args)
        if served is None:
            raise DraftInputError(
                "the server args after `--` name no --model-path",
                hint=f"add `--model-path {opts.model_dir / 'target'}` (the model whose continuations these are)",
            )
        check_served_model(served, opts.model_dir, "--model-path")


def plan(opts: SeqOptions) -> str:
    from .launcher import launch_command

    _checked(opts)
    where = opts.url or "a server started with: " + " ".join(
        shlex.quote(c) for c in launch_command(_launch_config(opts), _arm(opts), Path("LOG"))
    )
    return (
        f"server-seqs plan: {opts.prompts} bench prompts x {opts.new_tokens} greedy tokens from {where}"
        + (f" (env {dict(opts.env)})" if opts.env and not opts.url else "")
        + f"\n  the first {min(opts.b1, opts.prompts)} at batch 1, the rest {opts.concurrency} at a time; out: {opts.out}"
    )


def run(opts: SeqOptions, log=print) -> dict:
    from .workload import fixed_prompts

    _checked(opts)
    check_writable(opts.out)
    ident = model_identity(opts.model_dir)
    texts = fixed_prompts(opts.prompts)
    source: dict[str, Any] = {"command": list(opts.command) or None, "b1_prompts": min(opts.b1, opts.prompts)}
    t0 = time.monotonic()
    if opts.url is not None:
        served = served_model_path(opts.url, opts.request_timeout)
        check_served_model(served, opts.model_dir, f"--url {opts.url}: /model_info's model_path")
        # a running server's environment is not ours to read: train-draft's argmax check stands in for it
        source.update(url=opts.url, model_path=served, dummy_init=None)
        rows, hashes = generate(
            opts.url, texts, opts.new_tokens, opts.b1, opts.concurrency, opts.request_timeout, log, ident["vocab_size"]
        )
    else:
        rows, hashes = _with_server(opts, texts, source, log)
    source["bench"] = hashes
    source["generate_s"] = round(time.monotonic() - t0, 1)
    write(
        opts.out,
        {"format": FORMAT, "model": ident, "new_tokens": opts.new_tokens, "source": source, "sequences": rows},
    )
    log(f"server-seqs: {len(rows)} sequences in {source['generate_s']} s -> {opts.out}")
    return source


def _with_server(opts: SeqOptions, texts: list[str], source: dict, log) -> tuple[list[dict], dict]:
    from . import launcher
    from .machine import gpu_names
    from .runner import HASH_SEED_ENV, QUIET_STOP_ENV, STEP_TIME_ENV

    arm, cfg = _arm(opts), _launch_config(opts)
    log_dir = opts.log_dir or Path(tempfile.mkdtemp(prefix="server-seqs-"))
    # the environment the bench's plain arms run under (less phase timing, which they turn off), so this server
    # takes their code paths
    env = {**os.environ, **STEP_TIME_ENV, **HASH_SEED_ENV, **QUIET_STOP_ENV, **dict(opts.env)}
    t0 = time.monotonic()
    try:
        srv = launcher.start(cfg, arm, env, log_dir / "server-seqs.console.log")
    except launcher.LaunchError as e:
        raise ServerSeqsError(f"the server did not start: {e}", hint=f"its log: {log_dir}") from None
    try:
        source.update(
            url=srv.url,
            fingerprint=srv.fingerprint,
            patches=list(arm.pset.patches),
            set=opts.set_expr,
            env=dict(opts.env),
            # the effective values, inherited ones included: what train-draft's --std is checked against
            dummy_init={k: env.get(k) for k in DUMMY_ENV},
            model_path=server_model_path(opts.server_args),
            server_args=list(opts.server_args),
            startup_s=round(time.monotonic() - t0, 1),
            # the server ran here: a dummy-weight model's greedy text can change with the GPU (bench.draft_compare)
            gpus=gpu_names(),
        )
        log(f"server-seqs: server up at {srv.url} in {source['startup_s']} s (fingerprint {srv.fingerprint})")
        vocab = model_identity(opts.model_dir)["vocab_size"]
        return generate(srv.url, texts, opts.new_tokens, opts.b1, opts.concurrency, opts.request_timeout, log, vocab)
    finally:
        launcher.stop(srv, cfg)


def add_cli(sub) -> None:
    d = SeqOptions(Path("."), Path("."))
    p = sub.add_parser(
        "server-seqs", help="the server's own greedy continuations of the bench's prompts (for train-draft)"
    )
    p.add_argument("model_dir", type=Path, help="the `bench tinymodel` dir the server runs (its target/)")
    p.add_argument("--out", type=Path, required=True, help="sequences file to write (JSON)")
    p.add_argument(
        "--prompts",
        type=int,
        default=d.prompts,
        help="fixed_prompts' first N (train-draft's --prompts + --eval-prompts)",
    )
    p.add_argument("--new-tokens", type=int, default=d.new_tokens, help="greedy tokens per prompt (ignore_eos)")
    p.add_argument("--b1", type=int, default=d.b1, help="the first N prompts decoded alone (the bench's batch-1 phase)")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="requests in flight for the rest")
    p.add_argument("--url", default=None, help="a running server (default: start one from the args after `--`)")
    p.add_argument("--set", dest="set_expr", default=d.set_expr, help="patch set of the started server")
    p.add_argument("--manifest", default=d.manifest)
    p.add_argument("--tree", default=None, help="passed to apply.py --tree")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="the started server's env")
    p.add_argument("--health-timeout", type=float, default=d.health_timeout)
    p.add_argument("--request-timeout", type=float, default=d.request_timeout)
    p.add_argument("--log-dir", type=Path, default=None, help="the started server's logs (default: a temp dir)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; start and write nothing")
    p.set_defaults(func=_cli, server_args=[])
    p.epilog = "Server arguments for `python -m sglang.launch_server` go after `--` (without --url)."


def _env(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for s in pairs:
        k, sep, v = s.partition("=")
        if not sep or not k:
            raise DraftInputError(f"--env {s!r}: expected KEY=VALUE")
        out.append((k, v))
    return tuple(out)


def _cli(a) -> int:
    try:
        env = _env(a.env)
    except DraftInputError as e:
        print(f"bench server-seqs: {e.render()}", file=sys.stderr)
        return e.exit_code
    opts = SeqOptions(
        model_dir=a.model_dir,
        out=a.out,
        prompts=a.prompts,
        new_tokens=a.new_tokens,
        b1=a.b1,
        concurrency=a.concurrency,
        url=a.url,
        set_expr=a.set_expr,
        manifest=a.manifest,
        tree=a.tree,
        env=env,
        server_args=tuple(a.server_args),
        health_timeout=a.health_timeout,
        request_timeout=a.request_timeout,
        log_dir=a.log_dir,
        command=(sys.executable, "-m", "bench", *sys.argv[1:]) if sys.argv[1:2] == ["server-seqs"] else (),
    )
    return run_reported(
        "bench server-seqs", lambda: print(plan(opts)) if a.dry_run else run(opts), f"{a.out} is as it was"
    )
