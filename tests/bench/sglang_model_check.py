"""SGLang 0.5.17's own model code against bench/target_ref.py and bench/draft_ref.py (a child process: SGLang's
distributed state and published server args are process-wide).

    python sglang_model_check.py [--device cpu|cuda] [--checks A,B] [--draft-dir DIR] [--stds 0.02,0.05,successor:0.02]
                                 # an upstream:0.02 entry: the variable unset (the upstream loader), which must differ
                                 [--strict] SGLANG_PYTHON MODEL_DIR OUT.json

SGLANG_PYTHON: the dir `import sglang` should find, of a tree carrying the full set and dummy_init_normal.
tests/bench/test_train_draft.py runs every check on the CPU; bench/gpu_runs.sh `draft_check` runs
target_weights on the GPU (the generator there is CUDA's, the one the server's loader uses), with --strict:
exit 1 unless every parameter is equal. Checks, each into OUT.json:
  target_weights    DummyModelLoader with SGLANG_DUMMY_INIT=normal (bf16; and SGLANG_DUMMY_INIT_STD=0.05) and
                    =successor vs target_ref.dummy_weights, parameter by parameter
  target_forward    DeepseekV3ForCausalLM.forward (float32) on an extend then a decode batch, torch_native
                    attention, vs TargetRef: logits and the aux hidden states (ids with num_hidden_layers)
  draft_load        DefaultModelLoader on DRAFT_DIR (LlamaForCausalLMEagle3): every parameter vs the file
  draft_forward     its draft-extend then two draft-decode steps vs Eagle3Draft's training-time-test chain

Substitutions on the CPU, each for a CUDA-only piece the CPU lacks and none in the arithmetic compared:
torchvision (tests/sglang_patches/_torchvision_standin.py); vllm._custom_ops (imported by RotaryEmbedding's
constructor for a kernel the native forward never calls); get_rope_wrapper's CPU branch (it demands YaRN),
replaced by the plain get_rope the GPU takes; attention dispatch pinned to absorbed MLA (the torch_native
backend reads K/V from the cache, which MLA's MHA prefill path does not fill: the GPU's prefill runs MHA,
the same arithmetic); FusedMoE's method run through forward_cpu, i.e. SGLang's moe_forward_native.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _setup(sglang_python: str, device: str) -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "sglang_patches"), sglang_python]
    if device != "cpu":
        return
    from _torchvision_standin import install

    install()
    vllm, ops = types.ModuleType("vllm"), types.ModuleType("vllm._custom_ops")
    vllm.__path__ = []

    def rotary_embedding(*a, **k):
        raise RuntimeError("vllm stand-in: rotary_embedding is not used by the native forward")

    ops.rotary_embedding = rotary_embedding
    sys.modules.update({"vllm": vllm, "vllm._custom_ops": ops})
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    import sglang.srt.models.deepseek_v2 as dsv2
    from sglang.srt.layers.rotary_embedding.factory import get_rope

    dsv2.get_rope_wrapper = lambda *a, device=None, **k: get_rope(*a, **k)


class Runtime:
    """SGLang's process state for one TP1 CPU model at a time (what a scheduler process publishes)."""

    def __init__(self, device: str):
        from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel

        self.device, self.started = device, False
        self._init, self._mp = init_distributed_environment, initialize_model_parallel

    def load(self, model_path: Path, dtype: str, load_format: str, draft: bool = False):
        from sglang.srt.configs.device_config import DeviceConfig
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.layers.dp_attention import initialize_dp_attention
        from sglang.srt.model_loader.loader import get_model_loader
        from sglang.srt.runtime_context import publish
        from sglang.srt.server_args import ServerArgs

        sa = ServerArgs(
            model_path=str(model_path),
            load_format=load_format,
            device=self.device,
            dtype=dtype,
            attention_backend="torch_native" if self.device == "cpu" else "flashinfer",
            disable_cuda_graph=True,
            skip_tokenizer_init=True,
        )
        publish(sa, role="test")
        mc = ModelConfig(model_path=str(model_path), dtype=dtype, is_draft_model=draft)
        if not self.started:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            self._init(
                world_size=1,
                rank=0,
                distributed_init_method=f"tcp://127.0.0.1:{port}",
                local_rank=0,
                backend="gloo" if self.device == "cpu" else "nccl",
            )
            self._mp(tensor_model_parallel_size=1)
            self.started = True
        initialize_dp_attention(sa, mc)
        loader = get_model_loader(load_config=LoadConfig(load_format=load_format), model_config=mc)
        return loader.load_model(model_config=mc, device_config=DeviceConfig(self.device, 0)), mc.hf_config


def _batch(mode: str, ids, start: int, spec=None):
    """A one-request ForwardBatch at positions start.., KV slots 1 + position (req_to_token row 1)."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    t, end = len(ids), start + len(ids)
    common = dict(
        batch_size=1,
        input_ids=ids,
        req_pool_indices=torch.tensor([1]),
        seq_lens=torch.tensor([end]),
        out_cache_loc=torch.arange(1 + start, 1 + end),
        seq_lens_sum=end,
        seq_lens_cpu=torch.tensor([end]),
        positions=torch.arange(start, end),
        capture_hidden_mode=CaptureHiddenMode.FULL,
        spec_info=spec,
    )
    if mode == "decode":
        return ForwardBatch(forward_mode=ForwardMode.DECODE, **common)
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND,
        extend_num_tokens=t,
        extend_seq_lens=torch.tensor([t]),
        extend_prefix_lens=torch.tensor([start]),
        extend_start_loc=torch.tensor([0]),
        extend_prefix_lens_cpu=[start],
        extend_seq_lens_cpu=[t],
        **common,
    )


def _backend(pool):
    import torch
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_context import ForwardContext

    r2t = ReqToTokenPool(size=2, max_context_len=512, device="cpu", enable_memory_saver=False)
    r2t.req_to_token[1] = torch.arange(1, 513, dtype=torch.int32)
    return ForwardContext(
        attn_backend=TorchNativeAttnBackend(SimpleNamespace(device="cpu", req_to_token_pool=r2t, token_to_kv_pool=pool))
    )


def _maxdiff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def check_target_weights(rt: Runtime, model_dir: Path, stds: list[str]) -> dict:
    """stds: "0.02" (normal at that std), "successor:0.02", or "upstream:0.02": SGLANG_DUMMY_INIT unset, so the
    patched loader runs upstream's own lines, against the normal reference at that std (it must differ)."""
    import torch

    from bench.dummy_init import DummyInit
    from bench.target_ref import TargetArch, dummy_param

    arch = TargetArch.from_config(json.loads((model_dir / "target" / "config.json").read_text()))
    out = {}
    for entry in stds:
        mode, _, std = entry.rpartition(":")
        upstream = mode == "upstream"
        init = DummyInit("normal" if upstream else mode or "normal", float(std))
        os.environ.pop("SGLANG_DUMMY_INIT_EMBED_STD", None)  # the patch's default, the DummyInit's
        os.environ.update(SGLANG_DUMMY_INIT="" if upstream else init.mode, SGLANG_DUMMY_INIT_STD=std)
        model, _ = rt.load(model_dir / "target", "bfloat16", "dummy")
        theirs = model.state_dict()
        specs = arch.param_specs(torch.bfloat16)
        unequal = []
        for n, (shape, dtype) in specs.items():  # one at a time: the Kimi-width target is 34 GiB
            t = theirs.get(n)
            if t is not None and not (
                t.dtype == dtype and torch.equal(t, dummy_param(n, shape, dtype, t.device, init, arch.vocab))
            ):
                unequal.append(n)
        out[entry] = {
            "sglang_names": list(theirs),
            "ref_names": list(specs),
            "unequal": unequal,
            "sglang_std": float(theirs["model.layers.0.self_attn.o_proj.weight"].float().std()),
            "device": str(next(iter(theirs.values())).device),
        }
        del model, theirs
        if rt.device != "cpu":
            torch.cuda.empty_cache()
    os.environ.pop("SGLANG_DUMMY_INIT_STD")
    return out


def check_target_forward(rt: Runtime, model_dir: Path) -> dict:
    import torch
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool
    from sglang.srt.model_executor.forward_context import forward_context
    from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod

    from bench.target_ref import TargetArch, TargetRef, capture_layers

    os.environ["SGLANG_DUMMY_INIT"] = "normal"
    model, cfg = rt.load(model_dir / "target", "float32", "dummy")
    for mod in model.modules():
        if type(mod).__name__ == "DeepseekV2AttentionMLA":
            mod.dispatch_attn_forward_method = lambda fb: AttnForwardMethod.MLA
        if type(mod).__name__ == "UnquantizedFusedMoEMethod":
            mod._forward_method = mod.forward_cpu
    layers = cfg.num_hidden_layers
    ids_for_draft = [0, (layers - 1) // 2, layers]  # the edge draft's ids: the final layer's output last
    model.set_eagle3_layers_to_capture(ids_for_draft)
    arch = TargetArch.from_config(json.loads((model_dir / "target" / "config.json").read_text()))
    ref = TargetRef(arch, {k: v.detach().clone() for k, v in model.state_dict().items()})
    pool = MLATokenToKVPool(
        size=600,
        page_size=1,
        dtype=torch.float32,
        kv_lora_rank=cfg.kv_lora_rank,
        qk_rope_head_dim=cfg.qk_rope_head_dim,
        layer_num=layers,
        device="cpu",
        enable_memory_saver=False,
    )
    ctx = _backend(pool)
    g = torch.Generator().manual_seed(0)
    prompt, nxt = (
        torch.randint(0, cfg.vocab_size, (11,), generator=g),
        torch.randint(0, cfg.vocab_size, (1,), generator=g),
    )
    with forward_context(ctx), torch.no_grad():
        ext = model.forward(prompt, torch.arange(11), _batch("extend", prompt, 0))
        dec = model.forward(nxt, torch.tensor([11]), _batch("decode", nxt, 11))
        full = torch.cat([prompt, nxt])[None]
        lg, aux = ref.forward(
            full, torch.arange(12)[None], ref.new_cache(1, 12), capture_layers(ids_for_draft), logits="all"
        )
    return {
        "capture": ids_for_draft,
        "logit_scale": float(lg.abs().max()),
        "extend_logits": _maxdiff(ext.next_token_logits[0], lg[0, 10]),
        "extend_aux": _maxdiff(ext.hidden_states, aux[0, :11]),
        "decode_logits": _maxdiff(dec.next_token_logits[0], lg[0, 11]),
        "decode_aux": _maxdiff(dec.hidden_states[0], aux[0, 11]),
        "aux_width": int(aux.shape[-1]),
    }


def _expected_draft_params(saved: dict) -> dict:
    import torch

    exp = {
        "model.embed_tokens.weight": saved["embed_tokens.weight"],
        "model.fc.weight": saved["fc.weight"],
        "model.layers.0.self_attn.qkv_proj.weight": torch.cat(
            [saved[f"layers.0.self_attn.{x}_proj.weight"] for x in "qkv"]
        ),
        "model.layers.0.self_attn.o_proj.weight": saved["layers.0.self_attn.o_proj.weight"],
        "model.layers.0.mlp.gate_up_proj.weight": torch.cat(
            [saved["layers.0.mlp.gate_proj.weight"], saved["layers.0.mlp.up_proj.weight"]]
        ),
        "model.layers.0.mlp.down_proj.weight": saved["layers.0.mlp.down_proj.weight"],
        "model.norm.weight": saved["norm.weight"],
        "lm_head.weight": saved["lm_head.weight"],
    }
    for n in ("input_layernorm", "post_attention_layernorm", "hidden_norm"):
        exp[f"model.layers.0.{n}.weight"] = saved[f"layers.0.{n}.weight"]
    return exp


def check_draft(rt: Runtime, draft_dir: Path) -> tuple[dict, dict]:
    import torch
    from safetensors.torch import load_file
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    from sglang.srt.model_executor.forward_context import forward_context

    from bench.draft_ref import DraftArch, Eagle3Draft

    saved = load_file(str(draft_dir / "model.safetensors"))
    exp = _expected_draft_params(saved)
    # bf16 as the server loads it: every parameter must be the file's
    model, _ = rt.load(draft_dir, "bfloat16", "safetensors", draft=True)
    params = dict(model.named_parameters())
    # embed_tokens and lm_head have rows padded to a multiple of 64: the file fills the real ones, the logits
    # processor never reads the rest
    load = {
        "class": type(model).__name__,
        "sglang_params": sorted(params),
        "expected": sorted(exp),
        "unequal": [n for n in exp if n in params and not torch.equal(params[n][: len(exp[n])], exp[n])],
        "rows": {n: [len(params[n]), len(exp[n])] for n in ("model.embed_tokens.weight", "lm_head.weight")},
    }
    # float32 for the forward comparison (the same bf16 values, upcast)
    model, cfg = rt.load(draft_dir, "float32", "safetensors", draft=True)
    arch = DraftArch.from_config(json.loads((draft_dir / "config.json").read_text()))
    ref = Eagle3Draft(arch, saved["embed_tokens.weight"], saved["lm_head.weight"])
    ref.load_sglang_state(saved)
    pool = MHATokenToKVPool(
        size=600,
        page_size=1,
        dtype=torch.float32,
        head_num=arch.kv_heads,
        head_dim=arch.head_dim,
        layer_num=1,
        device="cpu",
        enable_memory_saver=False,
    )
    ctx = _backend(pool)
    g = torch.Generator().manual_seed(1)
    n = 10
    aux = torch.randn(n, arch.target_hidden * len(arch.aux_ids), generator=g) * 0.5
    toks = torch.randint(0, arch.vocab, (n,), generator=g)
    chain = torch.randint(0, arch.vocab, (2,), generator=g).tolist()
    with forward_context(ctx), torch.no_grad():
        h, (hid,) = model.model(toks, torch.arange(n), _batch("extend", toks, 0, SimpleNamespace(hidden_states=aux)))
        vocab = arch.vocab
        theirs = [h @ model.lm_head.weight[:vocab].T]
        hid = hid[-1:]
        for s, tk in enumerate(chain):
            ids = torch.tensor([tk])
            h, (hid,) = model.model(
                ids, torch.tensor([n + s]), _batch("decode", ids, n + s, SimpleNamespace(hidden_states=hid))
            )
            theirs.append(h @ model.lm_head.weight[:vocab].T)
        steps = [toks[None]] + [
            torch.zeros(1, n, dtype=torch.long).index_fill_(1, torch.tensor([n - 1]), t) for t in chain
        ]
        mine = ref(aux[None], steps)
    fwd = {
        "extend_all_positions": _maxdiff(theirs[0], mine[0][0]),
        "logit_scale": float(mine[0].abs().max()),
        "steps": [_maxdiff(theirs[k][-1], mine[k][0, -1]) for k in range(3)],
    }
    return load, fwd


CHECKS = ("target_weights", "target_forward", "draft_load", "draft_forward")


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="sglang_model_check.py")
    ap.add_argument("sglang_python")
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--draft-dir", type=Path, default=None)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--checks", default=",".join(CHECKS))
    ap.add_argument(
        "--stds",
        default="0.02,0.05,successor:0.02",
        help="STD (normal), successor:STD or upstream:STD, comma-separated",
    )
    ap.add_argument("--strict", action="store_true", help="exit 1 unless every target parameter is equal")
    a = ap.parse_args(argv)
    checks = a.checks.split(",")
    if a.device != "cpu" and set(checks) - {"target_weights"}:
        ap.error("on cuda only target_weights (the forwards are compared on the CPU's torch_native backend)")
    _setup(a.sglang_python, a.device)
    rt = Runtime(a.device)
    res = {}
    if "target_weights" in checks:
        res["target_weights"] = check_target_weights(rt, a.model_dir, a.stds.split(","))
    if "target_forward" in checks:
        res["target_forward"] = check_target_forward(rt, a.model_dir)
    if {"draft_load", "draft_forward"} & set(checks):
        res["draft_load"], res["draft_forward"] = check_draft(rt, a.draft_dir)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    bad = [
        (std, w["unequal"] or "names differ")
        for std, w in res.get("target_weights", {}).items()
        if w["unequal"] or w["sglang_names"] != w["ref_names"]
    ]
    for std, w in res.get("target_weights", {}).items():
        print(
            f"target weights at std {std} on {w['device']}: {len(w['ref_names'])} parameters, "
            f"{'names equal' if w['sglang_names'] == w['ref_names'] else 'NAMES DIFFER'}, unequal: {w['unequal'] or 'none'}"
        )
    return 1 if a.strict and bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
