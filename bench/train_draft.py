"""`bench train-draft MODEL_DIR`: train a `bench tinymodel` dir's EAGLE-3 draft against its dummy-weight target
(bench/target_ref.py, on the device kind that serves), on the server's continuations (--sequences) or the
reference's. Writes MODEL_DIR/DRAFT_trained whole: config, SGLang-named model.safetensors, tokenizer, train.json.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .dummy_init import MODES, DummyInit, from_env
from .errors import DraftInputError
from .server_seqs import TINYMODEL, count_arg, from_args, read_json, run_cli
from .server_seqs import load as load_sequences

FIRST_TOKEN_AGREES = 0.5  # below: the sequences file was made by other weights (data_from_sequences)
BENCH_PROMPTS = 8  # the bench's requests: fixed_prompts(8)
BENCH_NEW_TOKENS = 128  # gpu_runs.sh's --max-new-tokens
COPY_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Adam moves each weight by about lr, so a matrix's output moves with its fan-in: lr ~ 1/width
# (bench/results/train_draft_cpu: width 128 at 3e-3..5e-3 and 512 at 7.5e-4 converged)
LR_WIDTH = 0.5


@dataclass(frozen=True)
class TrainOptions:
    model_dir: Path
    out: Path
    prompts: int = 256
    eval_prompts: int = 32
    new_tokens: int | None = 192  # None: the --sequences file's length
    steps: int = 3
    epochs: int = 30
    train_seconds: float = 240.0
    batch: int = 16
    lr: float | None = None  # None: LR_WIDTH / the draft's hidden size
    seed: int = 0
    init: DummyInit = field(default_factory=DummyInit)
    device: str = "auto"
    gen_batch: int = 64
    draft: str = "draft"  # MODEL_DIR/<draft>/config.json
    sequences: Path | None = None
    command: tuple[str, ...] = ()


def load_archs(model_dir: Path, draft: str = "draft"):
    """(target config, draft config, TargetArch, DraftArch), checked against each other."""
    from .draft_ref import DraftArch
    from .target_ref import ConfigProblem, TargetArch, capture_layers

    tpath, dpath = model_dir / "target" / "config.json", model_dir / draft / "config.json"
    tcfg, dcfg = read_json(tpath, TINYMODEL), read_json(dpath, TINYMODEL)
    archs: list[Any] = []
    for path, cfg, cls in ((tpath, tcfg, TargetArch), (dpath, dcfg, DraftArch)):
        try:
            archs.append(cls.from_config(cfg))
        except (ConfigProblem, KeyError, TypeError, ValueError) as e:
            raise DraftInputError(f"{path}: {e}") from None
    ta, da = archs
    if da.target_hidden != ta.hidden:
        raise DraftInputError(f"{dpath}: target_hidden_size {da.target_hidden} != the target's hidden_size {ta.hidden}")
    if da.vocab != ta.vocab:
        raise DraftInputError(f"{dpath}: vocab_size {da.vocab} != the target's {ta.vocab}")
    layers = capture_layers(list(da.aux_ids))
    if len(set(layers)) != len(layers) or any(not 0 <= i <= ta.layers for i in layers):
        raise DraftInputError(
            f"{dpath}: eagle_config.eagle_aux_hidden_state_layer_ids {list(da.aux_ids)} must be "
            f"distinct ids in 0..{ta.layers} (num_hidden_layers of the target)"
        )
    return tcfg, dcfg, ta, da


def _tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir / "target")
    except (OSError, ValueError) as e:
        why = str(e).splitlines()[0]
        raise DraftInputError(f"{model_dir / 'target'}: no usable tokenizer ({why})", hint=TINYMODEL) from None


def tokenize(model_dir: Path, texts: list[str]) -> list[list[int]]:
    """As SGLang's tokenizer manager does: the target's tokenizer on the text, its default specials."""
    tok = _tokenizer(model_dir)
    return [list(tok(t)["input_ids"]) for t in texts]


@dataclass
class Data:
    tokens: Any  # [N, T] long, right-padded with 0
    nxt: Any  # [N, T] long: the label after each position, -1 where there is none
    aux: Any  # [N, T, K*H]
    lens: list[int]
    prompt_lens: list[int]


def _data(target, rows: list[list[int]], prompt_lens: list[int], capture: list[int], gen_batch: int, server: bool):
    """Data of whole sequences, labelled by the reference's argmax or (`server`) by their own continuation."""
    import torch

    from .target_ref import features

    width, dev = max(len(x) for x in rows), target.device
    tokens = torch.zeros(len(rows), width, dtype=torch.long, device=dev)
    nxt = torch.full((len(rows), width), -1, dtype=torch.long, device=dev)
    aux, agree, counted, first_same, first_flip = None, 0, 0, 0, []
    for s in range(0, len(rows), gen_batch):
        chunk = rows[s : s + gen_batch]
        a, ref = features(target, chunk, capture)
        if aux is None:
            aux = torch.zeros(len(rows), width, a.shape[-1], dtype=a.dtype, device=dev)
        aux[s : s + len(chunk), : a.shape[1]] = a
        for r, x in enumerate(chunk):
            p, row = prompt_lens[s + r], torch.tensor(x, device=dev)
            tokens[s + r, : len(x)] = row
            if not server:
                nxt[s + r, : len(x)] = ref[r, : len(x)]
                continue
            nxt[s + r, : p - 1] = ref[r, : p - 1]  # the server decoded nothing inside the prompt
            nxt[s + r, p - 1 : len(x) - 1] = row[p:]
            same = ref[r, p - 1 : len(x) - 1] == row[p:]
            agree, counted, first_same = agree + int(same.sum()), counted + same.numel(), first_same + int(same[0])
            flips = (~same).nonzero()
            first_flip.append(int(flips[0]) if len(flips) else None)
    stats = {
        "reference_agrees": round(agree / max(1, counted), 4),
        "reference_agrees_first_token": round(first_same / max(1, len(rows)), 4),
        "first_disagreement_bench": first_flip[:BENCH_PROMPTS],  # None: none in the continuation
    }
    return Data(tokens, nxt, aux, [len(x) for x in rows], list(prompt_lens)), stats, first_same


def make_data(target, prompts: list[list[int]], new_tokens: int, capture: list[int], gen_batch: int) -> Data:
    """The reference's own greedy continuations."""
    from .target_ref import greedy

    seqs: list[list[int]] = []
    for s in range(0, len(prompts), gen_batch):
        seqs += greedy(target, prompts[s : s + gen_batch], new_tokens)
    return _data(target, seqs, [len(p) for p in prompts], capture, gen_batch, server=False)[0]


def data_from_sequences(target, seqs, capture: list[int], gen_batch: int) -> tuple[Data, dict]:
    """The server's sequences, teacher-forced through the reference."""
    rows = [p + o for p, o in zip(seqs.prompt_ids, seqs.output_ids)]
    data, stats, first_same = _data(target, rows, [len(p) for p in seqs.prompt_ids], capture, gen_batch, server=True)
    # the first token follows the prompt alone: the same weights agree but at a near tie (1.0 in the CPU
    # tests), other weights in about 1/vocab of the rows
    if first_same < FIRST_TOKEN_AGREES * len(rows):
        raise DraftInputError(
            f"{seqs.path}: sequences[*].output_ids[0]: the reference's argmax is the server's first token in "
            f"{first_same} of {len(rows)} rows: these sequences were not made by this model's weights",
            hint="the server must run MODEL_DIR's target with this --dummy-init and SGLANG_DUMMY_INIT_STD; "
            "write the file again with `python -m bench server-seqs MODEL_DIR --out FILE ...`",
        )
    return data, stats


def _autocast(device):
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def _batch(data: Data, rows, steps: int):
    from .draft_ref import chain_inputs

    width = max(data.lens[r] for r in rows)
    tokens, labels = chain_inputs(data.tokens[rows, :width], data.nxt[rows, :width], steps)
    return data.aux[rows, :width], tokens, labels


def train(draft, data: Data, rows: list[int], opts: TrainOptions, device, log) -> list[dict]:
    """AdamW, warm-up then cosine; loss = sum over steps of 0.8^k x cross-entropy to the target's token."""
    import math

    import torch
    import torch.nn.functional as F

    params = [p for p in draft.parameters() if p.requires_grad]
    lr = opts.lr if opts.lr is not None else LR_WIDTH / draft.arch.hidden
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=device.type == "cuda")
    per_epoch = max(1, math.ceil(len(rows) / opts.batch))
    total, warm = opts.epochs * per_epoch, min(50, opts.epochs * per_epoch // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / total))))
    )
    g = torch.Generator().manual_seed(opts.seed)
    t0, history = time.monotonic(), []
    for epoch in range(opts.epochs):
        order = [rows[i] for i in torch.randperm(len(rows), generator=g).tolist()]
        losses, correct, counted = [], [0] * opts.steps, [0] * opts.steps
        for s in range(0, len(order), opts.batch):
            aux, tokens, labels = _batch(data, order[s : s + opts.batch], opts.steps)
            with _autocast(device):
                logits = draft(aux, tokens)
            loss: Any = 0.0
            for k, (lg, lab) in enumerate(zip(logits, labels)):
                valid = lab >= 0
                loss = loss + 0.8**k * F.cross_entropy(lg[valid], lab[valid])
                correct[k] += int((lg[valid].argmax(-1) == lab[valid]).sum())
                counted[k] += int(valid.sum())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
        rec = {
            "epoch": epoch + 1,
            "loss": sum(losses) / len(losses),
            "seconds": round(time.monotonic() - t0, 1),
            "step_accuracy": [round(c / max(1, n), 4) for c, n in zip(correct, counted)],
        }
        history.append(rec)
        log(f"epoch {rec['epoch']}: loss {rec['loss']:.4f}, step accuracy {rec['step_accuracy']}, {rec['seconds']} s")
        if time.monotonic() - t0 > opts.train_seconds:
            log(f"stopping after epoch {epoch + 1}: --train-seconds {opts.train_seconds:g} reached")
            break
    return history


def evaluate(draft, data: Data, rows: list[int], steps: int, new_tokens: int, device) -> dict:
    """The accept length a server would see decoding new_tokens after each row's prompt (simulated_accept)."""
    import torch

    from .draft_ref import chain_lengths, simulated_accept

    if not rows:
        return {"rows": 0}
    tokens_sum = verify_sum = 0
    per_row = []
    with torch.no_grad():
        for s in range(0, len(rows), 16):
            chunk = rows[s : s + 16]
            aux, tokens, labels = _batch(data, chunk, steps)
            with _autocast(device):
                chains = chain_lengths(draft(aux, tokens), labels).tolist()
            for r, row in enumerate(chunk):
                n, v = simulated_accept(chains[r], data.prompt_lens[row] - 1, new_tokens)
                tokens_sum, verify_sum = tokens_sum + n, verify_sum + v
                per_row.append(round(n / v, 3))
    return {
        "rows": len(rows),
        "new_tokens": new_tokens,
        "accept_length": round(tokens_sum / verify_sum, 3),
        "accept_length_min": min(per_row),
        "accept_length_max": max(per_row),
    }


def reference_hashes(model_dir: Path, data: Data, b1: int = 2) -> dict[str, str]:
    """workload.PhaseResult's hash_b1 of the first b1 continuations at gpu_runs.sh's lengths (draft_compare)."""
    from .workload import PhaseResult

    tok, out = _tokenizer(model_dir), {}
    for n in (64, 128):
        if any(data.lens[r] - data.prompt_lens[r] < n for r in range(b1)):
            continue
        ids = [data.tokens[r, data.prompt_lens[r] : data.prompt_lens[r] + n].tolist() for r in range(b1)]
        outs = [[tok.decode(x, skip_special_tokens=True), x] for x in ids]
        out[str(n)] = PhaseResult(tokens=0, wall_s=0.0, step_s=[], verify_ct=0, outputs=outs).output_hash()
    return out


@contextlib.contextmanager
def _locked(out: Path):
    """One writer of `out` at a time (flock on a sibling lock file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out.parent / f".{out.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def recover(out: Path) -> str | None:
    """Under the lock: put back the draft a kill between save_draft's renames left aside; remove temporaries."""
    done = None
    olds = sorted(out.parent.glob(f".{out.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if olds and not out.exists():
        restored = olds.pop()
        os.replace(restored, out)
        done = f"restored {out} from {restored.name}, left by an interrupted save"
    for stale in olds + list(out.parent.glob(f".{out.name}.tmp-*")):
        shutil.rmtree(stale, ignore_errors=True)
    return done


def save_draft(out: Path, draft, dcfg: dict, model_dir: Path, record: dict, draft_name: str = "draft") -> None:
    """Into a sibling temporary dir, fsync'ed, then renamed over `out`: a kill leaves the old dir or the new one."""
    import torch
    from safetensors.torch import save_file

    from sglang_overlay.fsio import fsync_dir

    out = out.resolve()
    tmp, old = (out.parent / f".{out.name}.{kind}-{os.getpid()}" for kind in ("tmp", "old"))
    try:
        with _locked(out):
            recover(out)
            tmp.mkdir()
            try:
                save_file(draft.sglang_state(torch.bfloat16), str(tmp / "model.safetensors"), metadata={"format": "pt"})
                (tmp / "config.json").write_text(json.dumps(dcfg, indent=2) + "\n")
                for f in COPY_FILES:
                    if (model_dir / draft_name / f).exists():
                        shutil.copyfile(model_dir / draft_name / f, tmp / f)
                (tmp / "train.json").write_text(json.dumps(record, indent=2) + "\n")
                for written in tmp.iterdir():
                    with open(written, "rb") as fh:
                        os.fsync(fh.fileno())
                fsync_dir(tmp)
                if out.exists():
                    os.replace(out, old)
                os.replace(tmp, out)
                fsync_dir(out.parent)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        raise DraftInputError(
            f"cannot write {out}: {e.strerror or e}",
            hint="free space or choose another --out; the previous draft dir is unchanged",
        ) from None


def check_writable(out: Path) -> None:
    """Before minutes of training: --out's parent takes the lock file, and a killed save's leftover is put back."""
    try:
        with _locked(out.resolve()):
            done = recover(out.resolve())
    except OSError as e:
        raise DraftInputError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    if done:
        print(f"bench train-draft: {done}", file=sys.stderr)


def _checked(opts: TrainOptions):
    _, dcfg, ta, da = load_archs(opts.model_dir, opts.draft)
    if opts.new_tokens is None and opts.sequences is None:
        raise DraftInputError("--new-tokens is needed without --sequences")
    if opts.new_tokens is not None and opts.new_tokens <= opts.steps:
        raise DraftInputError(f"--new-tokens {opts.new_tokens} must be greater than --steps {opts.steps}")
    return dcfg, ta, da


def _load_sequences(opts: TrainOptions):
    assert opts.sequences is not None
    n = opts.prompts + opts.eval_prompts
    return load_sequences(opts.sequences, opts.model_dir, n, opts.new_tokens, opts.steps + 1, opts.init)


def plan(opts: TrainOptions) -> str:
    """What a run would hold and do (no torch work, nothing written)."""
    from .target_ref import param_count

    _, ta, da = _checked(opts)
    n, new_tokens, seqs = opts.prompts + opts.eval_prompts, opts.new_tokens, opts.sequences
    if seqs is not None and seqs.exists():
        new_tokens = _load_sequences(opts).new_tokens  # checked now, as the run would
    source = f"{new_tokens} greedy tokens of the reference's"
    if seqs is not None:
        source = (
            f"{new_tokens or 'all the'} greedy tokens of the server's from {seqs}"
            + ("" if seqs.exists() else " (not written yet)")
            + ", teacher-forced through the reference (no generation)"
        )
    width, k = 110 + (new_tokens or 160), len(da.aux_ids)  # the bench's prompts are 55-100 tokens
    return (
        f"train-draft plan: target {opts.model_dir / 'target'} ({ta.layers} layers, hidden {ta.hidden}, "
        f"{ta.experts} experts; {param_count(ta) * 2 / 2**30:.1f} GiB of bf16 {opts.init.describe()})\n"
        f"  data: {n} prompts (train {opts.prompts}, held out {opts.eval_prompts}) x {source}, "
        f"aux ids {list(da.aux_ids)}: up to {n * width * k * ta.hidden * 2 / 2**30:.2f} GiB of aux hidden states\n"
        f"  draft: {opts.model_dir / opts.draft} (lr "
        f"{opts.lr if opts.lr is not None else LR_WIDTH / da.hidden:.3g}); {opts.steps} steps of training-time test, "
        f"{opts.epochs} epochs of batch {opts.batch} or {opts.train_seconds:g} s\n  out: {opts.out}"
    )


def run(opts: TrainOptions, log=print) -> dict:
    import torch

    from .draft_ref import Eagle3Draft
    from .target_ref import TargetRef, capture_layers, dummy_weights
    from .workload import fixed_prompts

    dcfg, ta, da = _checked(opts)
    seqs = _load_sequences(opts) if opts.sequences is not None else None
    check_writable(opts.out)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if opts.device == "auto" else opts.device)
    torch.manual_seed(opts.seed)
    times, t = {}, time.monotonic()

    def lap(name):
        nonlocal t
        times[name], t = round(time.monotonic() - t, 1), time.monotonic()

    texts = fixed_prompts(opts.prompts + opts.eval_prompts)
    prompts = tokenize(opts.model_dir, texts)
    new_tokens = seqs.new_tokens if seqs is not None else opts.new_tokens
    assert new_tokens is not None
    # bf16 as the server holds them; on a CPU computed in float32
    weights = dummy_weights(ta, torch.bfloat16, device, opts.init)
    if device.type == "cpu":
        weights = {k: v.float() for k, v in weights.items()}
    target = TargetRef(ta, weights)
    lap("target_weights_s")
    capture = capture_layers(list(da.aux_ids))
    if seqs is None:
        data = make_data(target, prompts, new_tokens, capture, opts.gen_batch)
        lap("generate_and_features_s")
        source: dict[str, Any] = {"generated_by": "the reference (bench/target_ref.py greedy)"}
    else:
        data, stats = data_from_sequences(target, seqs, capture, opts.gen_batch)
        lap("features_s")
        source = {
            "generated_by": "the server (bench server-seqs)",
            **seqs.record(),
            **stats,
            # the file holds the server tokenizer's ids; the local tokenizer should make the same
            "prompt_ids_equal_local_tokenizer": sum(a == b for a, b in zip(prompts, seqs.prompt_ids)),
        }
    log(
        f"target: {ta.layers} layers, hidden {ta.hidden}; {len(texts)} sequences of up to {max(data.lens)} tokens "
        f"({sum(data.lens)} in all, {source['generated_by']}), {sum(times.values()):.1f} s on {device}"
        + (f"; the reference's argmax is the server's token at {source['reference_agrees']:.2%}" if seqs else "")
    )
    # the checkpoint holds the real rows only (SGLang's loader pads them again)
    draft = Eagle3Draft(
        da, weights["model.embed_tokens.weight"][: ta.vocab], weights["lm_head.weight"][: ta.vocab], seed=opts.seed
    ).to(device)
    del target, weights
    train_rows = list(range(opts.prompts))
    eval_rows = list(range(opts.prompts, opts.prompts + opts.eval_prompts))
    # the bench's requests decode 128 tokens; the last positions' chains need steps more labels
    n_eval = min(BENCH_NEW_TOKENS, new_tokens - opts.steps)
    before = evaluate(draft, data, eval_rows, opts.steps, n_eval, device)
    history = train(draft, data, train_rows, opts, device, log)
    lap("train_s")
    metrics = {
        "held_out_before": before,
        "held_out": evaluate(draft, data, eval_rows, opts.steps, n_eval, device),
        "bench_prompts": evaluate(draft, data, train_rows[:BENCH_PROMPTS], opts.steps, n_eval, device),
    }
    lap("eval_s")
    record = {
        "command": list(opts.command) or None,
        "lr": opts.lr if opts.lr is not None else LR_WIDTH / da.hidden,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()},
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "target_config_sha256": hashlib.sha256((opts.model_dir / "target" / "config.json").read_bytes()).hexdigest(),
        "dummy_init": opts.init.record(),
        "sequences": {
            "train": len(train_rows),
            "held_out": len(eval_rows),
            "tokens": sum(data.lens),
            "new_tokens": new_tokens,
            "source": source,
        },
        "reference_hash_b1": reference_hashes(opts.model_dir, data),
        "history": history,
        "metrics": metrics,
        "seconds": times,
    }
    save_draft(opts.out, draft, dcfg, opts.model_dir, record, opts.draft)
    lap("save_s")
    log(
        f"accept length (steps {opts.steps}, topk 1, {n_eval} new tokens): held-out "
        f"{metrics['held_out'].get('accept_length')} (untrained {before.get('accept_length')}), bench prompts "
        f"{metrics['bench_prompts'].get('accept_length')}"
    )
    log(f"seconds: {times}; draft: {opts.out}")
    return record


def add_cli(sub) -> None:
    d = TrainOptions(Path("."), Path("."))
    p = sub.add_parser("train-draft", help="train the EAGLE-3 draft of a tinymodel dir against its dummy-weight target")
    p.add_argument("model_dir", type=Path, help="a `bench tinymodel` dir (target/ and draft/ inside)")
    p.add_argument("--draft", default="draft", help="the draft config: MODEL_DIR/DRAFT/config.json (e.g. draft_edge)")
    p.add_argument("--out", type=Path, default=None, help="draft dir to write (default MODEL_DIR/DRAFT_trained)")
    p.add_argument("--sequences", type=Path, default=None, help="the server's continuations (`bench server-seqs`)")
    p.add_argument("--prompts", type=count_arg(1), default=d.prompts, help="training prompts: fixed_prompts' first N")
    p.add_argument("--eval-prompts", type=count_arg(0), default=d.eval_prompts, help="held-out prompts after those")
    p.add_argument("--new-tokens", type=count_arg(1), default=None, help=f"default {d.new_tokens}, or the file's")
    p.add_argument("--steps", type=count_arg(1), default=d.steps, help="as the server's --speculative-num-steps")
    p.add_argument("--epochs", type=count_arg(1), default=d.epochs)
    p.add_argument("--train-seconds", type=float, default=d.train_seconds, help="stop after the epoch that passes this")
    p.add_argument("--batch", type=count_arg(1), default=d.batch, help="sequences per optimizer step")
    p.add_argument("--lr", type=float, default=None, help=f"AdamW's peak (default {LR_WIDTH} / the draft's width)")
    # SGLANG_DUMMY_INIT_STD and _EMBED_STD are read from the environment, as the server reads them
    p.add_argument("--dummy-init", choices=MODES, default=None, help="the server's SGLANG_DUMMY_INIT (default: its)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument("--gen-batch", type=count_arg(1), default=d.gen_batch, help="sequences per target forward")
    p.add_argument("--dry-run", action="store_true", help="check the dirs and print the plan; train nothing")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    def make() -> TrainOptions:
        if a.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise DraftInputError("--device cuda: no CUDA device here", hint="use --device cpu or auto")
        out, new_tokens = (
            a.out or a.model_dir / f"{a.draft}_trained",
            a.new_tokens or (None if a.sequences else TrainOptions.new_tokens),
        )
        init = from_env(mode=a.dummy_init)
        return from_args(TrainOptions, a, "train-draft", out=out, new_tokens=new_tokens, init=init)

    return run_cli("train-draft", make, plan, run, a.dry_run, "the draft dir is as it was")
