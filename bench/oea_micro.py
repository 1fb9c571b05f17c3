"""OEA micro-benchmark (GPU): one MoE layer with Kimi-like routing, batch x K0 sweep.

    python -m bench oea OUT_DIR [--experts 384 --topk 8 --hidden 7168 --moe-intermediate 2048]

For every batch size B (1, 4, 16, 64) and K0 (off, 3, 4, 5, 6) it measures, on the same routing inputs:
  * layer_us   routing (sigmoid + correction bias top-k, Kimi-K2 style) + OEA + expert computation, the path a
               decode step runs inside select_experts + the fused MoE;
  * experts_us the expert computation alone with the (OEA-)routed ids;
  * distinct   distinct experts activated per step (= expert weights read from HBM), mean over steps.
Timing: CUDA graph of one layer call (the server decodes under CUDA graphs), replayed `--iters` times with
the router inputs of a different step copied into the static buffers before each replay; CUDA events around
each replay; the median is reported (plus p10/p90). The OEA function is loaded by file path from
overlay/python/sglang/srt/layers/moe/oea.py (the `oea_topk` patch), so this measures the code that ships.
Expert computation: SGLang's fused MoE Triton kernel (`fused_experts_impl`) when importable, else a plain
torch implementation that loops over activated experts only (so weight traffic still scales with `distinct`);
the JSON says which ran.

Router-logit generator (`correlated_router_logits`, numpy, seeded; documented because uniform noise would
overstate the union of experts and so overstate OEA's gain):
  logit[t, e] = popularity[e] + request[r(t), e] + token[t, e]
  popularity ~ N(0, pop_sd) per expert, fixed: a skewed, long-tailed expert load (hot experts);
  request    = a * topics[z_r] + N(0, req_sd): each request in the batch follows one of n_topics latent
               contexts (z_r uniform), so requests on similar content share experts;
  token      ~ N(0, token_sd): per-token variation; tokens of one request (tokens_per_request > 1, e.g. an
               EAGLE verify pass of 4 draft tokens) share the request term and are strongly correlated.
  The correction bias (noaux_tc) is N(0, bias_sd) per expert, added to sigmoid(logit) for ranking only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_OEA_FILE = Path(__file__).resolve().parents[1] / "overlay/python/sglang/srt/layers/moe/oea.py"
PAPER = (
    "OEA paper (arXiv 2511.02237): MoE-layer decode latency -39% (Qwen3-30B-A3B, k0=3, batch 16), "
    "-15% (Qwen3-235B, k0=5)"
)


@dataclass(frozen=True)
class RoutingModel:
    experts: int = 384
    n_topics: int = 8
    pop_sd: float = 0.6
    topic_scale: float = 1.0
    req_sd: float = 0.5
    token_sd: float = 0.6
    bias_sd: float = 0.02
    tokens_per_request: int = 1


def correlated_router_logits(steps: int, batch: int, rm: RoutingModel, seed: int = 0):
    """(logits [steps, batch, experts] float32, correction_bias [experts]) as numpy arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    e = rm.experts
    popularity = rng.normal(0.0, rm.pop_sd, e)
    topics = rng.normal(0.0, 1.0, (rm.n_topics, e))
    bias = rng.normal(0.0, rm.bias_sd, e)
    n_req = max(1, math.ceil(batch / rm.tokens_per_request))
    out = np.empty((steps, batch, e), dtype=np.float32)
    for s in range(steps):
        z = rng.integers(0, rm.n_topics, n_req)
        req = rm.topic_scale * topics[z] + rng.normal(0.0, rm.req_sd, (n_req, e))
        owner = np.arange(batch) // rm.tokens_per_request
        out[s] = popularity + req[owner] + rng.normal(0.0, rm.token_sd, (batch, e))
    return out, bias.astype(np.float32)


def uniform_expected_distinct(experts: int, k: int, batch: int) -> float:
    """Expected union size if every token picked k experts uniformly at random (no correlation)."""
    return experts * (1.0 - (1.0 - k / experts) ** batch)


# ---------------------------------------------------------------------------------------------- GPU side
def load_oea(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"OEA module not found at {path} (the oea_topk patch's overlay file); pass --oea-file")
    spec = importlib.util.spec_from_file_location("overlay_oea", path)
    assert spec is not None and spec.loader is not None, f"{path}: not importable as a module"
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, "opportunistic_expert_activation", None)
    if fn is None:
        raise AttributeError(f"{path} has no opportunistic_expert_activation")
    return fn


def _experts_impl(kind: str):
    """('triton'|'torch', fn(x, w1, w2, topk_w, topk_ids) -> out, why)."""
    if kind in ("auto", "triton"):
        try:
            from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import fused_experts_impl

            def triton_fn(x, w1, w2, tw, ti):
                return fused_experts_impl(x, w1, w2, tw, ti, inplace=False, activation="silu")

            return "triton", triton_fn, "sglang fused_experts_impl"
        except Exception as e:
            if kind == "triton":
                raise
            why = f"sglang fused MoE not importable ({type(e).__name__}: {e})"
    else:
        why = "requested"
    import torch

    def torch_fn(x, w1, w2, tw, ti):
        # Loops over the experts that are activated only (static shapes are not needed: eager, no graph).
        out = torch.zeros_like(x, dtype=torch.float32)
        flat = ti.reshape(-1)
        for e in torch.unique(flat).tolist():
            tok, slot = (ti == e).nonzero(as_tuple=True)
            h = x[tok] @ w1[e].t()
            g, u = h.chunk(2, dim=-1)
            y = (torch.nn.functional.silu(g) * u) @ w2[e].t()
            out.index_add_(0, tok, (y.float() * tw[tok, slot].unsqueeze(1).float()))
        return out.to(x.dtype)

    return "torch", torch_fn, why


@dataclass
class Cell:
    batch: int
    k0: int  # 0 = off
    layer_us: float
    layer_p10_us: float
    layer_p90_us: float
    experts_us: float
    distinct_mean: float
    distinct_uniform_expect: float
    graph: bool
    extra: dict = field(default_factory=dict)


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def run_sweep(a) -> dict:
    import numpy as np
    import torch

    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available; run on the GPU host or pass --device cpu for a smoke run")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    oea = load_oea(Path(a.oea_file))
    takes_weight_scores = "weight_scores" in inspect.signature(oea).parameters
    impl_name, experts_fn, impl_why = _experts_impl(a.impl if dev.type == "cuda" else "torch")
    use_graph = dev.type == "cuda" and not a.no_graph and impl_name == "triton"
    E, K, H, N = a.experts, a.topk, a.hidden, a.moe_intermediate
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    t0 = time.time()
    w1 = torch.empty(E, 2 * N, H, device=dev, dtype=dtype).normal_(0, 0.02, generator=gen)
    w2 = torch.empty(E, H, N, device=dev, dtype=dtype).normal_(0, 0.02, generator=gen)
    if impl_name == "triton" and a.impl == "auto":
        # The import can succeed while the kernel still needs parts of a running server: probe it once.
        try:
            probe_ids = torch.arange(K, device=dev, dtype=torch.int32).unsqueeze(0)
            experts_fn(
                torch.zeros(1, H, device=dev, dtype=dtype), w1, w2, torch.full((1, K), 1.0 / K, device=dev), probe_ids
            )
        except Exception as e:
            impl_name, experts_fn, _ = _experts_impl("torch")
            impl_why = f"sglang fused MoE failed on a probe call ({type(e).__name__}: {e})"
            use_graph = False
    gb = (w1.numel() + w2.numel()) * w1.element_size() / 1e9
    print(
        f"[oea] expert weights {gb:.1f} GB allocated in {time.time() - t0:.1f}s; experts impl: {impl_name} "
        f"({impl_why}); cuda graph: {use_graph}",
        flush=True,
    )
    rm = RoutingModel(experts=E, tokens_per_request=a.tokens_per_request)
    cells: list[Cell] = []
    scale = a.routed_scaling_factor

    def route(logits, bias_t, k0):
        sig = logits.float().sigmoid()
        choice = sig + bias_t
        ids = choice.topk(K, dim=-1).indices.to(torch.int32)  # the fused MoE kernels take int32 ids
        w = sig.gather(1, ids.long())
        w = w / w.sum(-1, keepdim=True).clamp_min(1e-20) * scale
        if k0:
            kw = {"weight_scores": sig} if takes_weight_scores else {}
            w, ids = oea(choice, ids.to(torch.int32), w, k0, None, True, **kw)
        return w, ids

    for B in a.batches:
        logits_np, bias_np = correlated_router_logits(a.routing_steps, B, rm, seed=a.seed + B)
        logits_all = torch.from_numpy(logits_np).to(dev)
        bias_t = torch.from_numpy(bias_np).to(dev)
        x = torch.empty(B, H, device=dev, dtype=dtype).normal_(0, 1.0, generator=gen)
        for k0 in a.k0:
            # distinct experts + OEA invariants, eagerly, on every routing step
            distinct, routes = [], []
            for s in range(a.routing_steps):
                w, ids = route(logits_all[s], bias_t, k0)
                routes.append((w.clone(), ids.clone()))
                distinct.append(int(torch.unique(ids).numel()))
                if k0:
                    _check_oea(logits_all[s], bias_t, ids, w, K, k0, scale)
            static_logits = logits_all[0].clone()
            static_w, static_ids = routes[0][0].clone(), routes[0][1].clone()

            def next_route(it):
                static_w.copy_(routes[it % a.routing_steps][0])
                static_ids.copy_(routes[it % a.routing_steps][1])

            def layer():
                w_, i_ = route(static_logits, bias_t, k0)
                return experts_fn(x, w1, w2, w_, i_)

            def experts_only():
                return experts_fn(x, w1, w2, static_w, static_ids)

            for _ in range(3):  # Triton JIT / autotune outside the timed region
                layer()
                experts_only()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            lay = _time(
                layer, a.iters, use_graph, dev, before=lambda it: static_logits.copy_(logits_all[it % a.routing_steps])
            )
            exp = _time(experts_only, a.iters, use_graph, dev, before=next_route)
            c = Cell(
                B,
                k0,
                statistics.median(lay),
                _percentile(lay, 0.1),
                _percentile(lay, 0.9),
                statistics.median(exp),
                statistics.fmean(distinct),
                uniform_expected_distinct(E, K, B),
                use_graph,
            )
            cells.append(c)
            print(
                f"[oea] B={B:3d} K0={k0 if k0 else 'off':>3}: layer {c.layer_us:8.1f} us "
                f"(p10 {c.layer_p10_us:.1f}, p90 {c.layer_p90_us:.1f}), experts {c.experts_us:8.1f} us, "
                f"distinct experts {c.distinct_mean:6.1f} (uniform routing would give "
                f"{c.distinct_uniform_expect:.1f})",
                flush=True,
            )
    return {
        "cells": [asdict(c) for c in cells],
        "impl": impl_name,
        "impl_why": impl_why,
        "graph": use_graph,
        "config": {
            "experts": E,
            "topk": K,
            "hidden": H,
            "moe_intermediate": N,
            "dtype": a.dtype,
            "batches": a.batches,
            "k0": a.k0,
            "iters": a.iters,
            "routing_steps": a.routing_steps,
            "routed_scaling_factor": scale,
            "routing_model": asdict(rm),
            "seed": a.seed,
            "oea_file": str(a.oea_file),
        },
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
    }


def _check_oea(logits, bias_t, ids, w, K, k0, scale) -> None:
    """Fail loudly if the shipped OEA breaks its guarantees on this input (cheap, per step)."""
    import torch

    sig = logits.float().sigmoid()
    choice = sig + bias_t
    own = choice.topk(K, dim=-1).indices[:, :k0]
    s_base = set(torch.unique(own).tolist())
    ids_l = ids.tolist()
    for t, row in enumerate(ids_l):
        if not set(own[t].tolist()) <= set(row):
            raise AssertionError(f"OEA: token {t} lost one of its own top-{k0} experts")
        if not set(row) <= s_base:
            raise AssertionError(f"OEA: token {t} activates an expert outside S_base")
    if ids.shape[1] != K:
        raise AssertionError(f"OEA changed the top-k width {ids.shape[1]} != {K}")
    sums = w.float().sum(-1)
    if not torch.allclose(sums, torch.full_like(sums, scale), rtol=1e-2):
        raise AssertionError(f"OEA weights do not sum to the routed scale {scale}: {sums[:4].tolist()}")


def _time(fn, iters: int, use_graph: bool, dev, before) -> list[float]:
    """Per-call microseconds: CUDA events around each call (graph replay when use_graph)."""
    import torch

    if dev.type != "cuda":
        out = []
        for it in range(iters):
            if before:
                before(it)
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    call = fn
    if use_graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        call = g.replay
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for it in range(iters):
        if before:
            before(it)
        starts[it].record()
        call()
        ends[it].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def markdown(res: dict) -> str:
    cfg = res["config"]
    base = {c["batch"]: c for c in res["cells"] if c["k0"] == 0}
    lines = [
        f"# OEA micro-benchmark — {res['device']}",
        "",
        f"MoE layer: {cfg['experts']} experts, top-{cfg['topk']}, hidden {cfg['hidden']}, moe_intermediate "
        f"{cfg['moe_intermediate']}, {cfg['dtype']}; routing sigmoid + correction bias (noaux_tc), routed "
        f"scaling {cfg['routed_scaling_factor']}; experts: **{res['impl']}** ({res['impl_why']}); CUDA graph: "
        f"{res['graph']}; {cfg['iters']} timed calls per cell over {cfg['routing_steps']} routing steps "
        f"(correlated router logits, see bench/oea_micro.py).",
        "",
        "| batch | K0 | layer us (median) | p10-p90 | vs K0 off | experts-only us | vs K0 off | distinct experts | "
        "uniform-routing union |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["cells"]:
        b = base.get(c["batch"])
        dl = f"{(c['layer_us'] / b['layer_us'] - 1) * 100:+.1f}%" if b and c["k0"] else "-"
        de = f"{(c['experts_us'] / b['experts_us'] - 1) * 100:+.1f}%" if b and c["k0"] else "-"
        lines.append(
            f"| {c['batch']} | {c['k0'] or 'off'} | {c['layer_us']:.1f} | {c['layer_p10_us']:.1f}-"
            f"{c['layer_p90_us']:.1f} | {dl} | {c['experts_us']:.1f} | {de} | {c['distinct_mean']:.1f} | "
            f"{c['distinct_uniform_expect']:.1f} |"
        )
    tgt = next((c for c in res["cells"] if c["batch"] == 16 and c["k0"] == 3), None)
    if tgt and 16 in base:
        red = (1 - tgt["layer_us"] / base[16]["layer_us"]) * 100
        lines += [
            "",
            f"Batch 16, K0=3: MoE-layer latency {red:.1f}% lower than K0 off "
            f"(target: at least 30%; {'met' if red >= 30 else 'NOT met'}).",
            f"Paper: {PAPER}.",
        ]
    else:
        lines += ["", f"Paper: {PAPER}."]
    return "\n".join(lines) + "\n"


def add_cli(sub) -> None:
    p = sub.add_parser("oea", help="OEA micro-benchmark of one MoE layer (GPU)")
    p.add_argument("out", type=Path, help="output dir (oea.json, oea.md)")
    p.add_argument("--experts", type=int, default=384)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--moe-intermediate", type=int, default=2048)
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 64])
    p.add_argument(
        "--k0",
        type=lambda s: [0 if x in ("off", "0") else int(x) for x in s.split(",")],
        default=[0, 3, 4, 5, 6],
        help="comma list; off or 0 = no OEA",
    )
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--routing-steps", type=int, default=32)
    p.add_argument(
        "--tokens-per-request",
        type=int,
        default=1,
        help="tokens per request in a batch (4 = EAGLE verify of 4 draft tokens)",
    )
    p.add_argument("--routed-scaling-factor", type=float, default=2.827)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--impl", choices=["auto", "triton", "torch"], default="auto")
    p.add_argument("--no-graph", action="store_true")
    p.add_argument("--oea-file", type=Path, default=DEFAULT_OEA_FILE)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cli)


def _cli(a) -> int:
    if 0 not in a.k0:
        a.k0 = [0, *a.k0]  # the baseline every ratio is taken against
    res = run_sweep(a)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "oea.json").write_text(json.dumps(res, indent=2) + "\n")
    (a.out / "oea.md").write_text(markdown(res))
    (a.out / "command.txt").write_text(" ".join([sys.executable, "-m", "bench", *sys.argv[1:]]) + "\n")
    print(markdown(res))
    print(f"wrote {a.out}/oea.json, oea.md")
    return 0
