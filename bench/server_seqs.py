"""`bench server-seqs MODEL_DIR --out FILE [--url URL | -- SERVER_ARGS]`: the server's own greedy continuations of
the bench's prompts for `train-draft --sequences`. Not the reference's: the server's bf16 kernels flip near ties
(bench/results/2026-12-01-h200-run5: in-server accept 1.19 against 4.0 simulated). The first --b1 prompts go
alone (the bench's batch-1 phase), the rest --concurrency at a time; the file is written whole.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .dummy_init import ENV_NAMES as DUMMY_ENV
from .dummy_init import MODES, DummyInit, from_env
from .errors import DraftInputError, ServerSeqsError, run_reported

FORMAT = "bench-server-seqs/1"
BENCH_B1 = 8  # the bench's prompts: fixed_prompts(8)
BENCH_B1_REQUESTS = 2  # gpu_runs.sh's --b1-requests
BENCH_HASH_TOKENS = (64, 128)  # its --max-new-tokens
IDENTITY_KEYS = ("target_config_sha256", "tokenizer_sha256", "vocab_size")
REQUEST_TIMEOUT_S = 600.0
TINYMODEL = "write the model dir with `python -m bench tinymodel DIR`"
REGENERATE = "write it again for this model dir with `python -m bench server-seqs MODEL_DIR --out FILE ...`"


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def read_json(path: Path, fix: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DraftInputError(f"{path}: not found", hint=fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftInputError(f"{path}: unreadable JSON ({e})", hint=fix) from None


def target_identity(target: Path) -> dict[str, Any]:
    """What a sequences file shares with the model it trains: the target's config and tokenizer."""
    cfg_path = target / "config.json"
    cfg = read_json(cfg_path, TINYMODEL)
    # tokenizer_config.json holds the special tokens' flags: part of what the ids mean
    tok = [file_sha256(target / n) for n in ("tokenizer.json", "tokenizer_config.json")]
    return {
        "target_config_sha256": hashlib.sha256(cfg_path.read_bytes()).hexdigest(),
        "tokenizer_sha256": None if tok[0] is None else hashlib.sha256(" ".join(map(str, tok)).encode()).hexdigest(),
        "vocab_size": cfg.get("vocab_size") if isinstance(cfg, dict) else None,
    }


def server_model_path(server_args: tuple[str, ...]) -> str | None:
    """--model-path of sglang.launch_server's args; the last one wins, as in argparse."""
    found = None
    for i, a in enumerate(server_args):
        if a == "--model-path" and i + 1 < len(server_args):
            found = server_args[i + 1]
        elif a.startswith("--model-path="):
            found = a.partition("=")[2]
    return found


def check_served_model(served: str, model_dir: Path, where: str) -> None:
    """The served model must be MODEL_DIR's target, or the file would carry its identity over another's text."""
    mine, target = target_identity(model_dir / "target"), model_dir / "target"
    fix = f"serve {target} (--model-path {target}), or give the served model's dir as MODEL_DIR"
    if not (Path(served) / "config.json").is_file():
        raise DraftInputError(f"{where}: {served!r}: no config.json here, cannot check it is {target}", hint=fix)
    theirs = target_identity(Path(served))
    for key in IDENTITY_KEYS:
        if theirs[key] != mine[key]:
            raise DraftInputError(f"{where}: {served} is another model than {target} ({key} differs)", hint=fix)


@dataclass(frozen=True)
class Sequences:
    """A checked sequences file: per prompt, the server's prompt ids and its greedy continuation."""

    path: Path
    prompt_ids: list[list[int]]
    output_ids: list[list[int]]
    source: dict
    new_tokens: int  # every continuation's length

    def record(self) -> dict:
        """train.json's account of where the sequences came from."""
        out = {"file": str(self.path), "sha256": file_sha256(self.path), "source": self.source}
        return {**out, "prompts": len(self.prompt_ids), "new_tokens": self.new_tokens}


def _bad(path: Path, key: str, problem: str, fix: str = REGENERATE) -> DraftInputError:
    return DraftInputError(f"{path}: {key}: {problem}", hint=fix)


def read_doc(path: Path, fix: str) -> dict:
    """A sequences file's JSON of this FORMAT, or DraftInputError naming the file (and the key)."""
    doc = read_json(path, fix)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise _bad(path, "format", f"{got!r}, expected {FORMAT!r}", fix)
    return doc


def _token(t: Any, vocab: int | None) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and t >= 0 and (vocab is None or t < vocab)


def load(
    path: Path, model_dir: Path, prompts: int, new_tokens: int | None, min_tokens: int, init: DummyInit | None = None
) -> Sequences:
    """The file's first `prompts` sequences, checked against the model dir, the server's recorded dummy weights
    (against train-draft's `init`), the bench's prompt texts and the lengths training needs."""
    from .workload import fixed_prompts

    doc = read_doc(path, REGENERATE)
    mine, theirs = target_identity(model_dir / "target"), doc.get("model")
    if not isinstance(theirs, dict):
        raise _bad(path, "model", "missing")
    for key in IDENTITY_KEYS:
        if theirs.get(key) != mine[key]:
            why = f"{theirs.get(key)!r} != {model_dir / 'target'}'s {mine[key]!r} (generated for another model)"
            raise _bad(path, f"model.{key}", why)
    _check_dummy_init(path, doc.get("source"), init)
    rows = doc.get("sequences")
    if not isinstance(rows, list):
        raise _bad(path, "sequences", "missing or not a list")
    if len(rows) < prompts:
        why = f"{len(rows)} sequences, training needs {prompts} (--prompts + --eval-prompts)"
        raise _bad(path, "sequences", why, f"lower --prompts/--eval-prompts or {REGENERATE} with --prompts {prompts}")
    vocab, texts = mine["vocab_size"], fixed_prompts(prompts)
    ids: dict[str, list[list[int]]] = {"prompt_ids": [], "output_ids": []}
    for i, row in enumerate(rows[:prompts]):
        if not isinstance(row, dict):
            raise _bad(path, f"sequences[{i}]", "not an object")
        if row.get("text") != texts[i]:
            raise _bad(path, f"sequences[{i}].text", "not the bench's prompt of that index (workload.fixed_prompts)")
        for name, out in ids.items():
            got = row.get(name)
            if not isinstance(got, list) or not got or not all(_token(t, vocab) for t in got):
                raise _bad(path, f"sequences[{i}].{name}", f"must be a non-empty list of token ids in 0..{vocab - 1}")
            out.append(got)
    o_ids = ids["output_ids"]
    shortest = min(len(x) for x in o_ids)
    want = new_tokens if new_tokens is not None else shortest
    need = max(want, min_tokens)
    if shortest < need:
        i = min(range(len(o_ids)), key=lambda r: len(o_ids[r]))
        why = f"{shortest} tokens, training needs {need}"
        raise _bad(
            path, f"sequences[{i}].output_ids", why, f"lower --new-tokens or {REGENERATE} with --new-tokens {need}"
        )
    return Sequences(path, ids["prompt_ids"], [x[:want] for x in o_ids], doc.get("source") or {}, want)


def _check_dummy_init(path: Path, source: Any, init: DummyInit | None) -> None:
    """The server's SGLANG_DUMMY_INIT* as recorded (None: a --url server's, unknown) against the reference's."""
    dummy = source.get("dummy_init") if isinstance(source, dict) else None
    if init is None or not isinstance(dummy, dict):
        return
    recorded = {k: str(v) for k, v in dummy.items() if isinstance(k, str) and v not in (None, "")}
    mode = recorded.get("SGLANG_DUMMY_INIT")
    if mode != init.mode:
        again = f"{REGENERATE} with --env SGLANG_DUMMY_INIT={init.mode}"
        # unset (upstream's uniform weights) has no reference, so no flag to pass
        fix = f"pass --dummy-init {mode} if that is the server's, or {again}" if mode in MODES else again
        key = "source.dummy_init.SGLANG_DUMMY_INIT"
        raise _bad(path, key, f"{mode!r}: the server drew other weights than the reference ({init.mode})", fix)
    try:
        theirs = from_env(recorded, where=f"{path}: source.dummy_init: ")
    except DraftInputError as e:
        raise DraftInputError(str(e), hint=REGENERATE) from None
    for key, mine, got in zip(DUMMY_ENV[1:], (init.std, init.embed_std), (theirs.std, theirs.embed_std)):
        if got != mine:
            fix = f"run train-draft with {key}={got} (the server's), or {REGENERATE}"
            raise _bad(path, f"source.dummy_init.{key}", f"{got} (the server's) != train-draft's {mine}", fix)


def request(url: str, text: str, new_tokens: int, vocab: int) -> dict:
    from .workload import WorkloadError, post_json

    payload = {
        "text": text,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": new_tokens, "ignore_eos": True},
        "return_prompt_token_ids": True,
    }
    where = f"POST {url}/generate"
    try:
        out = post_json(url.rstrip("/") + "/generate", payload, REQUEST_TIMEOUT_S)
    except (OSError, WorkloadError, ValueError) as e:
        raise ServerSeqsError(f"{where}: {e}", hint="is the server up (its /health)?") from None
    ids, prompt = (out.get("output_ids"), out.get("prompt_token_ids")) if isinstance(out, dict) else (None, None)
    if not isinstance(ids, list) or len(ids) != new_tokens or not all(_token(t, vocab) for t in ids):
        raise ServerSeqsError(
            f"{where}: output_ids is not {new_tokens} token ids in 0..{vocab - 1}: {str(ids)[:80]}",
            hint="the server must honour ignore_eos and serve MODEL_DIR's target (SGLang's /generate does)",
        )
    if not isinstance(prompt, list) or not prompt:
        raise ServerSeqsError(
            f"{where}: no prompt_token_ids in the response",
            hint="the server must honour return_prompt_token_ids (SGLang 0.5.17's /generate does)",
        )
    return {"text": text, "prompt_ids": prompt, "output_ids": ids, "reply": out.get("text")}


def served_model_path(url: str, timeout: float) -> str:
    """A running server's model_path (SGLang 0.5.17's GET /model_info)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/model_info", timeout=timeout) as r:
            info = json.loads(r.read())
    except (OSError, ValueError) as e:
        raise ServerSeqsError(f"GET {url}/model_info: {e}", hint="is the server up, an SGLang server?") from None
    path = info.get("model_path") if isinstance(info, dict) else None
    if not isinstance(path, str) or not path:
        raise ServerSeqsError(f"GET {url}/model_info: no model_path in {info!r}", hint="is it an SGLang server?")
    return path


def concurrently(fn, items: list, workers: int) -> list:
    """[fn(x) for x in items], `workers` at a time on daemon threads: Ctrl-C or a failure returns at once."""
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


def bench_hashes(url: str, texts: list[str], rows: list[dict], new_tokens: int, vocab: int) -> dict:
    """The plain server's hash_b1 as the bench computes it (workload.PhaseResult.output_hash of its b1 requests)
    at gpu_runs.sh's lengths."""
    from .workload import PhaseResult

    out: dict[str, Any] = {"b1_requests": BENCH_B1_REQUESTS, "hash_b1": {}}
    for n in BENCH_HASH_TOKENS:
        if n > new_tokens or len(rows) < BENCH_B1_REQUESTS:
            continue
        got = [request(url, t, n, vocab) for t in texts[:BENCH_B1_REQUESTS]]
        out["hash_b1"][str(n)] = PhaseResult(0, 0.0, [], 0, [[g["reply"], g["output_ids"]] for g in got]).output_hash()
    return out


def generate(url: str, texts: list[str], opts: SeqOptions, vocab: int, log=print):
    """(rows in prompt order, the first b1 alone and the rest concurrently; bench_hashes)."""
    n, t0 = opts.new_tokens, time.monotonic()
    rows = [dict(request(url, t, n, vocab), batch="1") for t in texts[: opts.b1]]
    hashes = bench_hashes(url, texts, rows, n, vocab)
    log(f"server-seqs: {len(rows)} prompt(s) at batch 1 in {time.monotonic() - t0:.1f} s; bench hashes {hashes}")
    t1 = time.monotonic()
    rest = concurrently(lambda t: request(url, t, n, vocab), texts[opts.b1 :], opts.concurrency)
    rows += [dict(r, batch="concurrent") for r in rest]
    if rest:
        log(f"server-seqs: {len(rest)} prompt(s), {opts.concurrency} at a time, in {time.monotonic() - t1:.1f} s")
    for r in rows:
        del r["reply"]
    return rows, hashes


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
    if opts.url is None and not opts.server_args:
        raise DraftInputError(
            "no server: give --url of a running one, or the server args after `--` to start one",
            hint="e.g. `-- --model-path MODEL_DIR/target --load-format dummy` with --env SGLANG_DUMMY_INIT=normal",
        )
    if not isinstance(target_identity(opts.model_dir / "target")["vocab_size"], int):
        raise DraftInputError(f"{opts.model_dir / 'target' / 'config.json'}: vocab_size: not a number", hint=TINYMODEL)
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
    where = opts.url
    if where is None:
        where = "a server started with: " + shlex.join(launch_command(_launch_config(opts), _arm(opts), Path("LOG")))
    return (
        f"server-seqs plan: {opts.prompts} bench prompts x {opts.new_tokens} greedy tokens from {where}"
        + (f" (env {dict(opts.env)})" if opts.env and not opts.url else "")
        + f"\n  the first {min(opts.b1, opts.prompts)} at batch 1, the rest {opts.concurrency} at a time; out: {opts.out}"
    )


def run(opts: SeqOptions, log=print) -> dict:
    from sglang_overlay.fsio import unlink_quietly, write_tmp

    from .workload import fixed_prompts

    _checked(opts)
    try:  # before a server start and minutes of generation; the probe is the final write's own temp
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        unlink_quietly(write_tmp(opts.out, b""))
    except OSError as e:
        raise DraftInputError(
            f"cannot write {opts.out}: {e.strerror or e}", hint="free space or choose another --out"
        ) from None
    ident = target_identity(opts.model_dir / "target")
    texts = fixed_prompts(opts.prompts)
    source: dict[str, Any] = {"command": list(opts.command) or None, "b1_prompts": min(opts.b1, opts.prompts)}
    t0 = time.monotonic()
    if opts.url is not None:
        served = served_model_path(opts.url, REQUEST_TIMEOUT_S)
        check_served_model(served, opts.model_dir, f"--url {opts.url}: /model_info's model_path")
        # a running server's environment is not ours to read: train-draft's argmax check stands in for it
        source.update(url=opts.url, model_path=served, dummy_init=None)
        rows, hashes = generate(opts.url, texts, opts, ident["vocab_size"], log)
    else:
        rows, hashes = _with_server(opts, texts, source, ident["vocab_size"], log)
    source["bench"], source["generate_s"] = hashes, round(time.monotonic() - t0, 1)
    write(
        opts.out, {"format": FORMAT, "model": ident, "new_tokens": opts.new_tokens, "source": source, "sequences": rows}
    )
    log(f"server-seqs: {len(rows)} sequences in {source['generate_s']} s -> {opts.out}")
    return source


def _with_server(opts: SeqOptions, texts: list[str], source: dict, vocab, log) -> tuple[list[dict], dict]:
    from . import launcher
    from .machine import gpu_names
    from .runner import HASH_SEED_ENV, QUIET_STOP_ENV, STEP_TIME_ENV

    arm, cfg = _arm(opts), _launch_config(opts)
    log_dir = opts.log_dir or Path(tempfile.mkdtemp(prefix="server-seqs-"))
    # the bench's plain arms' environment (less phase timing, which they turn off): their code paths
    env = {**os.environ, **STEP_TIME_ENV, **HASH_SEED_ENV, **QUIET_STOP_ENV, **dict(opts.env)}
    t0 = time.monotonic()
    try:
        srv = launcher.start(cfg, arm, env, log_dir / "server-seqs.console.log")
    except launcher.LaunchError as e:
        raise ServerSeqsError(f"the server did not start: {e}", hint=f"its log: {log_dir}") from None
    try:
        source.update(url=srv.url, fingerprint=srv.fingerprint, patches=list(arm.pset.patches), set=opts.set_expr)
        source.update(model_path=server_model_path(opts.server_args), server_args=list(opts.server_args))
        # inherited values too (train-draft checks them); the GPU: near ties make the greedy text change with it
        source.update(env=dict(opts.env), dummy_init={k: env.get(k) for k in DUMMY_ENV}, gpus=gpu_names())
        source["startup_s"] = round(time.monotonic() - t0, 1)
        log(f"server-seqs: server up at {srv.url} in {source['startup_s']} s (fingerprint {srv.fingerprint})")
        return generate(srv.url, texts, opts, vocab, log)
    finally:
        launcher.stop(srv, cfg)


def count_arg(minimum: int):
    """An argparse type: a whole number >= minimum (argparse's exit 2 names the flag)."""

    def parse(s: str) -> int:
        if not s.lstrip("-").isdigit() or int(s) < minimum:
            raise argparse.ArgumentTypeError(f"{s!r}: give a whole number >= {minimum}")
        return int(s)

    return parse


def _kv(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"{s!r}: expected KEY=VALUE")
    return k, v


def from_args(cls, a, prog: str, **values):
    """cls's fields from argparse's namespace, `values` on top; the command line when run as `python -m bench`."""
    given = {f.name: getattr(a, f.name) for f in fields(cls) if hasattr(a, f.name)}
    command = (sys.executable, "-m", "bench", *sys.argv[1:]) if sys.argv[1:2] == [prog] else ()
    return cls(**{**given, "command": command, **values})


def run_cli(prog: str, make, plan, run, dry_run: bool, kept: str) -> int:
    return run_reported(f"bench {prog}", lambda: print(plan(make())) if dry_run else run(make()), kept)


def add_cli(sub) -> None:
    d = SeqOptions(Path("."), Path("."))
    p = sub.add_parser("server-seqs", help="the server's own greedy continuations of the bench's prompts")
    p.add_argument("model_dir", type=Path, help="the `bench tinymodel` dir the server runs (its target/)")
    p.add_argument("--out", type=Path, required=True, help="sequences file to write (JSON)")
    p.add_argument("--prompts", type=count_arg(1), default=d.prompts, help="train-draft's --prompts + --eval-prompts")
    p.add_argument("--new-tokens", type=count_arg(1), default=d.new_tokens, help="greedy tokens per prompt")
    p.add_argument(
        "--b1", type=count_arg(0), default=d.b1, help="the first N prompts decoded alone (the bench's batch-1)"
    )
    p.add_argument("--concurrency", type=count_arg(1), default=d.concurrency, help="requests in flight for the rest")
    p.add_argument("--url", default=None, help="a running server (default: start one with the args after `--`)")
    p.add_argument("--set", dest="set_expr", default=d.set_expr, help="patch set of the started server")
    p.add_argument("--manifest", default=None, help="default: the project's, found as every command finds it")
    p.add_argument("--tree", default=None, help="passed to apply.py --tree")
    p.add_argument("--env", type=_kv, action="append", default=[], metavar="K=V", help="the started server's env")
    p.add_argument("--log-dir", type=Path, default=None, help="the started server's logs (default: a temp dir)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; start and write nothing")
    p.set_defaults(func=_cli, server_args=[])
    p.epilog = "Server arguments for `python -m sglang.launch_server` go after `--` (without --url)."


def _cli(a) -> int:
    from sglang_overlay.project import manifest_path

    def make() -> SeqOptions:
        manifest = str(manifest_path(manifest=a.manifest))  # found as every command finds it
        return from_args(
            SeqOptions, a, "server-seqs", manifest=manifest, env=tuple(a.env), server_args=tuple(a.server_args)
        )

    return run_cli("server-seqs", make, plan, run, a.dry_run, f"{a.out} is as it was")
