"""`python -m bench train-draft MODEL_DIR`: train the EAGLE-3 draft of a `bench tinymodel` dir against its target.

The target is the one the server runs with `--load-format dummy` and SGLANG_DUMMY_INIT=normal or successor (the
dummy_init_normal fixture): bench/target_ref.py rebuilds its weights parameter by parameter and runs SGLang's
forward in plain torch. The dummy loader draws with the device's generator, so train on the device kind that
serves (CPU-made weights are another model than CUDA-made ones; train.json records the device).

Data: the bench's prompts (workload.fixed_prompts, the first --prompts of them; the bench sends the first 8)
and the target's own greedy continuations of them; input: the target's aux hidden states at the draft
config's layer ids; labels: the target's greedy token. Training-time test over --steps draft steps
(bench/draft_ref.py). Held out: the next --eval-prompts prompts, for the accept length the server would see
(steps 3, topk 1, simulated from the chains). Output: MODEL_DIR/draft_trained (or --out): config.json (the
draft's), model.safetensors (SGLang's LlamaForCausalLMEagle3 names, bf16), tokenizer files, train.json;
written beside and renamed into place, so a kill leaves the old dir or the new one. Serve it with
`--speculative-draft-model-path DIR --speculative-draft-load-format safetensors`.
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
from .errors import DraftInputError, run_reported

FIRST_TOKEN_AGREES = 0.5  # below: the sequences file was made by other weights (data_from_sequences)
BENCH_PROMPTS = 8  # the bench's requests: fixed_prompts(8) (--concurrency 8; b1 sends the first 2)
BENCH_NEW_TOKENS = 128  # gpu_runs.sh's --max-new-tokens for issue 17's runs
COPY_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


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
    init: DummyInit = field(default_factory=DummyInit)  # the server's dummy weights (SGLANG_DUMMY_INIT*)
    device: str = "auto"
    gen_batch: int = 64
    draft: str = "draft"  # the draft config: MODEL_DIR/<draft>/config.json
    sequences: Path | None = None  # bench server-seqs' file: the server's continuations instead of the reference's
    weight_decay: float = 0.0
    eval_each_epoch: bool = False  # the held-out accept length after every epoch, in the history
    command: tuple[str, ...] = ()


# Adam's step moves every weight by about lr, so a matrix's output moves with its fan-in: lr ~ 1/width keeps
# the small widths' dynamics (CPU runs: width 128 at 3e-3..5e-3 and 512 at 7.5e-4 both converged).
LR_WIDTH = 0.5


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DraftInputError(
            f"{path}: not found", hint="write the model dir with `python -m bench tinymodel DIR`"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftInputError(
            f"{path}: unreadable JSON ({e})", hint="rewrite it with `python -m bench tinymodel DIR`"
        ) from e


def load_archs(model_dir: Path, draft: str = "draft"):
    """(target config, draft config, TargetArch, DraftArch), checked against each other."""
    from .draft_ref import DraftArch
    from .target_ref import ConfigProblem, TargetArch

    tpath, dpath = model_dir / "target" / "config.json", model_dir / draft / "config.json"
    tcfg, dcfg = _read_json(tpath), _read_json(dpath)
    archs: list[Any] = []  # (TargetArch, DraftArch), built in one loop for one error message
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
    from .target_ref import capture_layers

    layers = capture_layers(list(da.aux_ids))
    if len(set(layers)) != len(layers) or any(not 0 <= i <= ta.layers for i in layers):
        raise DraftInputError(
            f"{dpath}: eagle_config.eagle_aux_hidden_state_layer_ids {list(da.aux_ids)} must be "
            f"distinct ids in 0..{ta.layers} (num_hidden_layers of the target)"
        )
    return tcfg, dcfg, ta, da


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DraftInputError("--device cuda: no CUDA device here")
    return torch.device(name)


def tokenize(model_dir: Path, texts: list[str]) -> list[list[int]]:
    """As SGLang's tokenizer manager does: the target's tokenizer called on the text (its default specials)."""
    tok = _tokenizer(model_dir)
    return [list(tok(t)["input_ids"]) for t in texts]


def _tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir / "target")
    except (OSError, ValueError) as e:
        raise DraftInputError(
            f"{model_dir / 'target'}: no usable tokenizer ({str(e).splitlines()[0]})",
            hint="rewrite the dir with `python -m bench tinymodel DIR`",
        ) from None


@dataclass
class Data:
    tokens: Any  # torch.Tensor [N, T] long, right-padded with 0 (torch is imported only where it runs)
    nxt: Any  # [N, T] long: the target's greedy token after each position, -1 past the row's end
    aux: Any  # [N, T, K*H] (the target's dtype)
    lens: list[int]
    prompt_lens: list[int]


def make_data(target, prompts: list[list[int]], new_tokens: int, capture: list[int], gen_batch: int) -> Data:
    import torch

    from .target_ref import features, greedy

    seqs: list[list[int]] = []
    for s in range(0, len(prompts), gen_batch):
        seqs += greedy(target, prompts[s : s + gen_batch], new_tokens)
    width = max(len(x) for x in seqs)
    dev = target.device
    tokens = torch.zeros(len(seqs), width, dtype=torch.long, device=dev)
    nxt = torch.full((len(seqs), width), -1, dtype=torch.long, device=dev)
    aux = None
    for s in range(0, len(seqs), gen_batch):
        chunk = seqs[s : s + gen_batch]
        a, n = features(target, chunk, capture)
        if aux is None:
            aux = torch.zeros(len(seqs), width, a.shape[-1], dtype=a.dtype, device=dev)
        aux[s : s + len(chunk), : a.shape[1]] = a
        nxt[s : s + len(chunk), : n.shape[1]] = n
        for r, x in enumerate(chunk):
            tokens[s + r, : len(x)] = torch.tensor(x, device=dev)
    return Data(tokens, nxt, aux, [len(x) for x in seqs], [len(p) for p in prompts])


def data_from_sequences(target, seqs, capture: list[int], gen_batch: int) -> tuple[Data, dict]:
    """Data over the server's sequences (prompt + its greedy continuation), teacher-forced through the reference
    in one forward per batch for the aux hidden states. Labels: the server's own next token over the
    continuation (from the prompt's last position on), the reference's greedy token inside the prompt (the
    server decoded none there), none after the last token. Also how often the reference's argmax is the
    server's token over the continuations (1.0: the reference decodes as the server does)."""
    import torch

    from .target_ref import features

    rows = [p + o for p, o in zip(seqs.prompt_ids, seqs.output_ids)]
    width, dev = max(len(x) for x in rows), target.device
    tokens = torch.zeros(len(rows), width, dtype=torch.long, device=dev)
    nxt = torch.full((len(rows), width), -1, dtype=torch.long, device=dev)
    aux, agree, counted, first_flip, first_same = None, 0, 0, [], 0
    for s in range(0, len(rows), gen_batch):
        chunk = rows[s : s + gen_batch]
        a, ref = features(target, chunk, capture)
        if aux is None:
            aux = torch.zeros(len(rows), width, a.shape[-1], dtype=a.dtype, device=dev)
        aux[s : s + len(chunk), : a.shape[1]] = a
        for r, x in enumerate(chunk):
            p, row = len(seqs.prompt_ids[s + r]), torch.tensor(x, device=dev)
            tokens[s + r, : len(x)] = row
            nxt[s + r, : p - 1] = ref[r, : p - 1]
            nxt[s + r, p - 1 : len(x) - 1] = row[p:]
            same = ref[r, p - 1 : len(x) - 1] == row[p:]
            agree, counted = agree + int(same.sum()), counted + same.numel()
            first_same += int(same[0])
            flips = (~same).nonzero()
            first_flip.append(int(flips[0]) if len(flips) else None)
    # the first continuation token follows the prompt alone: the server's kernels flip it at a near tie only, so
    # the same weights should agree in most rows (1.0 in the CPU tests; no GPU figure yet) and other weights
    # (model, dummy init, std) in about 1/vocab
    if first_same < FIRST_TOKEN_AGREES * len(rows):
        raise DraftInputError(
            f"{seqs.path}: sequences[*].output_ids[0]: the reference's argmax is the server's first token in "
            f"{first_same} of {len(rows)} rows: these sequences were not made by this model's weights",
            hint="the server must run MODEL_DIR's target with this --dummy-init and --std (SGLANG_DUMMY_INIT*); "
            "write the file again with `python -m bench server-seqs MODEL_DIR --out FILE ...`",
        )
    stats = {
        "reference_agrees": round(agree / max(1, counted), 4),
        "reference_agrees_first_token": round(first_same / max(1, len(rows)), 4),
        # per sequence of the bench's (the first 8): the first continuation token where the reference's
        # greedy choice is not the server's (None: none in the continuation)
        "first_disagreement_bench": first_flip[:BENCH_PROMPTS],
    }
    data = Data(tokens, nxt, aux, [len(x) for x in rows], [len(p) for p in seqs.prompt_ids])
    return data, stats


def _autocast(device):
    import torch

    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


def _batch(data: Data, rows, steps: int):
    from .draft_ref import chain_inputs

    width = max(data.lens[r] for r in rows)
    tok, nxt = data.tokens[rows, :width], data.nxt[rows, :width]
    tokens, labels = chain_inputs(tok, nxt, steps)
    return data.aux[rows, :width], tokens, labels


def train(draft, data: Data, rows: list[int], opts: TrainOptions, device, log, each_epoch=None) -> list[dict]:
    """AdamW, warm-up then cosine, loss = sum over steps of 0.8^k x cross-entropy to the target's token."""
    import math

    import torch
    import torch.nn.functional as F

    params = [p for p in draft.parameters() if p.requires_grad]
    lr = opts.lr if opts.lr is not None else LR_WIDTH / draft.arch.hidden
    opt = torch.optim.AdamW(
        params, lr=lr, betas=(0.9, 0.95), weight_decay=opts.weight_decay, fused=device.type == "cuda"
    )
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
            loss: Any = 0.0  # a tensor after the first step
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
        if each_epoch is not None:
            rec.update(each_epoch())
        history.append(rec)
        held = f", held-out accept {rec['held_out_accept']}" if "held_out_accept" in rec else ""
        log(
            f"epoch {rec['epoch']}: loss {rec['loss']:.4f}, step accuracy {rec['step_accuracy']}{held}, {rec['seconds']} s"
        )
        if time.monotonic() - t0 > opts.train_seconds:
            log(f"stopping after epoch {epoch + 1}: --train-seconds {opts.train_seconds:g} reached")
            break
    return history


def evaluate(draft, data: Data, rows: list[int], steps: int, new_tokens: int, device) -> dict:
    """Per-step accuracy over every chain start, and the accept length a server would measure on each row's
    decode of new_tokens tokens (draft_ref.simulated_accept) from the end of its prompt."""
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
                logits = draft(aux, tokens)
            chains = chain_lengths(logits, labels).tolist()
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
    """The bench's batch-1 output hash (workload.PhaseResult.output_hash) of the reference's continuations,
    for the max-new-tokens gpu_runs.sh uses (where the continuations are that long): equal to the plain
    server's hash_b1 when the server's greedy tokens (and its detokenized text) are the reference's."""
    from .workload import PhaseResult

    tok = _tokenizer(model_dir)
    out = {}
    for n in (64, 128):
        if any(data.lens[r] - data.prompt_lens[r] < n for r in range(b1)):
            continue
        outs = []
        for r in range(b1):
            ids = data.tokens[r, data.prompt_lens[r] : data.prompt_lens[r] + n].tolist()
            outs.append([tok.decode(ids, skip_special_tokens=True), ids])
        out[str(n)] = PhaseResult(tokens=0, wall_s=0.0, step_s=[], verify_ct=0, outputs=outs).output_hash()
    return out


@contextlib.contextmanager
def _locked(out: Path):
    """One writer of `out` at a time (flock on a sibling lock file); inside, every other temporary dir of
    `out` belongs to a dead run."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out.parent / f".{out.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def recover(out: Path) -> str | None:
    """Under the lock: a run killed between its two renames left the previous draft as .NAME.old-PID and no
    NAME: put it back. Leftover temporary dirs of killed runs are removed. Returns what it did, if anything."""
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
    """Everything into a sibling temporary dir, fsync'ed, then renamed over `out`: a kill leaves the old dir
    or the new one (between the two renames: the old one as .NAME.old-PID, which recover() puts back)."""
    import torch
    from safetensors.torch import save_file

    out = out.resolve()
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        with _locked(out):
            recover(out)
            tmp.mkdir()
            try:
                save_file(draft.sglang_state(torch.bfloat16), str(tmp / "model.safetensors"), metadata={"format": "pt"})
                (tmp / "config.json").write_text(json.dumps(dcfg, indent=2) + "\n")
                for f in COPY_FILES:
                    src = model_dir / draft_name / f
                    if src.exists():
                        shutil.copyfile(src, tmp / f)
                (tmp / "train.json").write_text(json.dumps(record, indent=2) + "\n")
                for written in tmp.iterdir():
                    with open(written, "rb") as fh:
                        os.fsync(fh.fileno())
                if out.exists():
                    os.replace(out, old)
                os.replace(tmp, out)
                _fsync_dir(out.parent)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    except OSError as e:
        raise DraftInputError(
            f"cannot write {out}: {e.strerror or e}",
            hint="free space or choose another --out; the previous draft dir is unchanged",
        ) from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_writable(out: Path) -> None:
    """Before minutes of training: the draft dir's parent must take the lock file (and a leftover of a killed
    save is put back now)."""
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
    for name in ("prompts", "new_tokens", "steps", "epochs", "batch", "gen_batch"):
        v = getattr(opts, name)
        if v is not None and v < 1:
            raise DraftInputError(f"--{name.replace('_', '-')} must be >= 1")
    if opts.eval_prompts < 0 or (opts.new_tokens is not None and opts.new_tokens <= opts.steps):
        raise DraftInputError("--eval-prompts must be >= 0 and --new-tokens greater than --steps")
    if opts.weight_decay < 0:
        raise DraftInputError("--weight-decay must be >= 0")
    return dcfg, ta, da


def plan(opts: TrainOptions) -> str:
    """What a run would hold and do (no torch work, nothing written)."""
    from .target_ref import param_count

    _, ta, da = _checked(opts)
    n = opts.prompts + opts.eval_prompts
    new_tokens = opts.new_tokens
    if opts.sequences is not None and opts.sequences.exists():
        new_tokens = _load_sequences(opts).new_tokens  # checked now, as the run would
    if opts.sequences is None:
        source = f"{new_tokens} greedy tokens of the reference's"
    else:
        source = (
            f"{new_tokens or 'all the'} greedy tokens of the server's from {opts.sequences}"
            + ("" if opts.sequences.exists() else " (not written yet)")
            + ", teacher-forced through the reference (no generation)"
        )
    width = 110 + (new_tokens or 160)  # the bench's prompts are 55-100 tokens
    k = len(da.aux_ids)
    trainable = (
        da.hidden * da.target_hidden * k
        + (da.heads + 2 * da.kv_heads) * da.head_dim * 2 * da.hidden
        + da.hidden * da.heads * da.head_dim
        + 3 * da.hidden * da.inter
        + (da.vocab * da.hidden if da.own_head else 0)
    )
    return (
        f"train-draft plan: target {opts.model_dir / 'target'} ({ta.layers} layers, hidden {ta.hidden}, "
        f"{ta.experts} experts; {param_count(ta) * 2 / 2**30:.1f} GiB of bf16 {opts.init.describe()})\n"
        f"  data: {n} prompts (train {opts.prompts}, held out {opts.eval_prompts}) x {source}, "
        f"aux ids {list(da.aux_ids)}: up to {n * width * k * ta.hidden * 2 / 2**30:.2f} GiB of aux hidden states\n"
        f"  draft: {opts.model_dir / opts.draft} ({trainable / 1e6:.0f}M trainable, lr "
        f"{opts.lr if opts.lr is not None else LR_WIDTH / da.hidden:.3g}); {opts.steps} steps of training-time test, "
        f"{opts.epochs} epochs of batch {opts.batch} or {opts.train_seconds:g} s\n  out: {opts.out}"
    )


def _load_sequences(opts: TrainOptions):
    from . import server_seqs

    assert opts.sequences is not None
    return server_seqs.load(
        opts.sequences, opts.model_dir, opts.prompts + opts.eval_prompts, opts.new_tokens, opts.steps + 1, opts.init
    )


def run(opts: TrainOptions, log=print) -> dict:
    import torch

    from .draft_ref import Eagle3Draft
    from .target_ref import TargetRef, capture_layers, dummy_weights
    from .workload import fixed_prompts

    dcfg, ta, da = _checked(opts)
    seqs = _load_sequences(opts) if opts.sequences is not None else None
    check_writable(opts.out)
    device = _device(opts.device)
    torch.manual_seed(opts.seed)
    times, t = {}, time.monotonic()

    def lap(name):
        nonlocal t
        times[name] = round(time.monotonic() - t, 1)
        t = time.monotonic()

    texts = fixed_prompts(opts.prompts + opts.eval_prompts)
    prompts = tokenize(opts.model_dir, texts)
    new_tokens = seqs.new_tokens if seqs is not None else opts.new_tokens
    assert new_tokens is not None
    # bf16 as the server holds them; on a CPU the same values are computed in float32
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
        data, source = data_from_sequences(target, seqs, capture, opts.gen_batch)
        lap("features_s")
        # the file holds the server tokenizer's ids; the local tokenizer should make the same
        source = {
            "generated_by": "the server (bench server-seqs)",
            **seqs.record(),
            **source,
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
    bench_rows = train_rows[:BENCH_PROMPTS]
    # the bench's requests decode 128 tokens; the chains of the last positions need steps more labels
    n_eval = min(BENCH_NEW_TOKENS, new_tokens - opts.steps)
    before = evaluate(draft, data, eval_rows, opts.steps, n_eval, device)
    history = train(
        draft,
        data,
        train_rows,
        opts,
        device,
        log,
        (lambda: {"held_out_accept": evaluate(draft, data, eval_rows, opts.steps, n_eval, device).get("accept_length")})
        if opts.eval_each_epoch
        else None,
    )
    lap("train_s")
    metrics = {
        "held_out_before": before,
        "held_out": evaluate(draft, data, eval_rows, opts.steps, n_eval, device),
        "bench_prompts": evaluate(draft, data, bench_rows, opts.steps, n_eval, device),
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
    p = sub.add_parser(
        "train-draft", help="train the EAGLE-3 draft of a tinymodel dir against its dummy_init_normal target"
    )
    p.add_argument("model_dir", type=Path, help="a `bench tinymodel` output dir (target/ and draft/ inside)")
    p.add_argument(
        "--draft",
        default="draft",
        help="the draft config to train: MODEL_DIR/DRAFT/config.json (e.g. draft_edge: aux ids with the final layer)",
    )
    p.add_argument("--out", type=Path, default=None, help="draft dir to write (default MODEL_DIR/DRAFT_trained)")
    p.add_argument(
        "--prompts",
        type=int,
        default=d.prompts,
        help="training prompts: fixed_prompts' first N (the bench sends the first 8)",
    )
    p.add_argument("--eval-prompts", type=int, default=d.eval_prompts, help="held-out prompts after those")
    p.add_argument(
        "--new-tokens",
        type=int,
        default=None,
        help=f"greedy continuation per prompt (default {d.new_tokens}; with --sequences: the file's)",
    )
    p.add_argument(
        "--sequences",
        type=Path,
        default=None,
        help="the server's own greedy continuations (`python -m bench server-seqs`): trained on instead of the "
        "reference's, whose bf16-free argmaxes part from the server's",
    )
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW's (default %(default)s)")
    p.add_argument(
        "--eval-each-epoch", action="store_true", help="the held-out accept length after every epoch (in the history)"
    )
    p.add_argument(
        "--steps",
        type=int,
        default=d.steps,
        help="draft steps of the training-time test (server: --speculative-num-steps)",
    )
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument(
        "--train-seconds", type=float, default=d.train_seconds, help="stop training after the epoch that passes this"
    )
    p.add_argument("--batch", type=int, default=d.batch, help="sequences per optimizer step")
    p.add_argument(
        "--lr", type=float, default=None, help=f"AdamW peak lr (default {LR_WIDTH} / the draft's hidden size)"
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--std",
        type=float,
        default=None,
        help=f"the server's SGLANG_DUMMY_INIT_STD (default: that variable, else {d.init.std})",
    )
    p.add_argument(
        "--dummy-init",
        choices=MODES,
        default=None,
        help="the server's SGLANG_DUMMY_INIT (default: that variable, else normal)",
    )
    p.add_argument(
        "--embed-std",
        type=float,
        default=None,
        help=f"successor's embeddings: the server's SGLANG_DUMMY_INIT_EMBED_STD (default: that variable, else "
        f"{d.init.embed_std}; a normal server ignores it)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    p.add_argument("--gen-batch", type=int, default=d.gen_batch, help="sequences per target forward")
    p.add_argument("--dry-run", action="store_true", help="check the dirs and print the plan; train nothing")
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    try:
        init = from_env(mode=a.dummy_init, std=a.std, embed_std=a.embed_std)
    except DraftInputError as e:
        print(f"bench train-draft: {e.render()}", file=sys.stderr)
        return e.exit_code
    opts = TrainOptions(
        model_dir=a.model_dir,
        out=a.out or a.model_dir / f"{a.draft}_trained",
        prompts=a.prompts,
        eval_prompts=a.eval_prompts,
        new_tokens=a.new_tokens if a.new_tokens is not None else (None if a.sequences else TrainOptions.new_tokens),
        steps=a.steps,
        epochs=a.epochs,
        train_seconds=a.train_seconds,
        batch=a.batch,
        lr=a.lr,
        seed=a.seed,
        init=init,
        device=a.device,
        gen_batch=a.gen_batch,
        draft=a.draft,
        sequences=a.sequences,
        weight_decay=a.weight_decay,
        eval_each_epoch=a.eval_each_epoch,
        # the command line when run as `python -m bench train-draft ...` (main(argv) has no other trace)
        command=(sys.executable, "-m", "bench", *sys.argv[1:]) if sys.argv[1:2] == ["train-draft"] else (),
    )
    return run_reported(
        "bench train-draft", lambda: print(plan(opts)) if a.dry_run else run(opts), "the draft dir is as it was"
    )
