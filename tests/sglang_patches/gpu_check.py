"""GPU check of the patch set's own GPU-side code (not collected by pytest; needs CUDA, no SGLang).

    python tests/sglang_patches/gpu_check.py [--overlay pins/0.5.23/overlay]

Loads the overlay modules (torch; Triton for the fp8 KV rows) and checks
on a GPU, with torch.cuda.set_sync_debug_mode("error") so any host synchronization raises:
  1. OEA: same result on CUDA as on CPU; captured in a CUDA graph at a padded batch, replayed with the
     non-padded count changed in its buffer, equals eager OEA at that count (padding stays out of S_base).
  1b. OEA statistics (SGLANG_OEA_STATS=1): captured once, the counter adds exactly each replay's distinct
     experts over its valid rows, at K0=0 and K0=3, without synchronizing.
  2. Eagle phase timer: real CUDA events around three phases of GPU work, never synchronizing; the
     phases add up to the step and the window fills as events complete.
  3. mla_kv_step (flashinfer_mla): the Triton row conversion equals the cast on the rows a step reads,
     ignores the index buffer's garbage tail, never synchronizes, and captured once in a CUDA graph
     converts the replayed step's rows for any row count; timed against upstream's full-pool cast. The
     torch path (GPUs before SM89) with an index buffer longer than the pool allocates nothing.
Prints one line per check and exits non-zero on the first failure.
"""

import importlib.util
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def capture(fn):
    """Warm fn up on a side stream (as graph capture wants), then capture it: (graph, fn's captured output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def check_oea(oea):
    dev = "cuda"
    g = torch.Generator().manual_seed(0)
    T, E, k, k0 = 8, 64, 8, 3
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.2
    choice, weight = oea.router_scores(logits, "sigmoid", bias)
    ids = choice.topk(k, dim=1).indices.to(torch.int32)
    w = weight.gather(1, ids.long())
    w = w / w.sum(1, keepdim=True) * 2.827
    ref = {}
    for n in (8, 5, 2):
        ref[n] = oea.opportunistic_expert_activation(choice, ids, w, k0, num_valid_tokens=n, weight_scores=weight)
    c, wt, i, ww = choice.to(dev), weight.to(dev), ids.to(dev), w.to(dev)
    nbuf = torch.tensor([8], dtype=torch.int32, device=dev)
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager = oea.opportunistic_expert_activation(c, i, ww, k0, num_valid_tokens=nbuf, weight_scores=wt)
        graph, (out_w, out_i) = capture(
            lambda: oea.opportunistic_expert_activation(c, i, ww, k0, num_valid_tokens=nbuf, weight_scores=wt)
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(eager[1].cpu(), ref[8][1]) and torch.allclose(eager[0].cpu(), ref[8][0], atol=1e-6)
    for n in (8, 5, 2):
        nbuf.fill_(n)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_i.cpu(), ref[n][1]), n
        assert torch.allclose(out_w.cpu(), ref[n][0], atol=1e-6), n
        s_base = set(ref[n][1][:n].flatten().tolist())
        assert set(out_i.cpu().flatten().tolist()) <= s_base
    print(
        f"ok oea: CUDA == CPU, no host sync; CUDA graph replay with non-padded 8/5/2 == eager "
        f"(distinct experts {[len(set(ref[n][1].flatten().tolist())) for n in (8, 5, 2)]} of {T * k} slots)"
    )


def check_oea_stats(oea):
    """SGLANG_OEA_STATS: the counter is captured into a graph and counts each replay's valid rows exactly."""
    import os

    os.environ["SGLANG_OEA_STATS"] = "1"
    dev = "cuda"
    g = torch.Generator().manual_seed(1)
    T, E, k = 16, 64, 8
    logits = torch.randn(T, E, generator=g)
    bias = torch.randn(E, generator=g) * 0.2
    choice, _ = oea.router_scores(logits, "sigmoid", bias)
    ids = choice.topk(k, dim=1).indices.to(torch.int32)
    w = torch.full((T, k), 1.0 / k)
    lg, b, i, ww = logits.to(dev), bias.to(dev), ids.to(dev), w.to(dev)
    nbuf = torch.tensor([T], dtype=torch.int32, device=dev)
    results = {}
    for k0 in (0, 3):
        oea._stats = None

        def call():
            return oea.maybe_apply_oea(
                ww, i, lg, scoring_func="sigmoid", correction_bias=b, renormalize=True, num_token_non_padded=nbuf, k0=k0
            )

        call()  # eager: creates the counter, as SGLang's warm-up forwards do before capture
        torch.cuda.set_sync_debug_mode("error")
        try:
            graph, _ = capture(call)
            before = oea._stats.clone()
            expect = [0, 0, 0]
            for n in (16, 11, 5, 1, 0):
                nbuf.fill_(n)
                graph.replay()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        # what each replay routed, recomputed eagerly per valid count (the graph's outputs are overwritten)
        for n in (16, 11, 5, 1, 0):
            nbuf.fill_(n)
            _, ids_n = oea.maybe_apply_oea(
                ww,
                i,
                lg,
                scoring_func="sigmoid",
                correction_bias=b,
                renormalize=True,
                num_token_non_padded=nbuf,
                k0=k0,
                stats=False,
            )
            rows = ids_n[:n].cpu()
            expect[0] += 1 if n else 0
            expect[1] += len(set(rows.flatten().tolist()))
            expect[2] += n
        got = (oea._stats - before).tolist()
        assert got == expect, (k0, got, expect)
        results[k0] = expect[1] / expect[0]
    os.environ.pop("SGLANG_OEA_STATS")
    print(
        f"ok oea stats: counted inside CUDA graph replays with 16/11/5/1/0 valid rows, exact, no host sync; "
        f"mean distinct experts per call K0=0 {results[0]:.1f}, K0=3 {results[3]:.1f}"
    )


def check_timer(timer_mod):
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0)
    a = torch.randn(2048, 2048, device="cuda")
    accept = torch.tensor([2, 3, 1, 4], dtype=torch.int32, device="cuda")
    # Three rounds of 20 steps, the GPU caught up between them. The host runs ahead of a GPU-bound loop, so one
    # round may need up to 20 slots in flight (an H100 made 18); a slot per step would make 60.
    rounds, steps = 3, 20
    for _round in range(rounds):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _step in range(steps):
                timer.begin_step()
                for _ in range(2):
                    a = (a @ a).tanh()
                timer.mark("draft")
                for _ in range(4):
                    a = (a @ a).tanh()
                timer.mark("verify")
                for _ in range(1):
                    a = (a @ a).tanh()
                timer.end_step(4, accept)
                timer.poll()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        timer.poll()
    s = timer.summary()
    n = rounds * steps
    assert s["window"] == n and s["pending"] == 0, s
    for ph in ("draft", "verify", "draft_extend"):
        assert s[ph]["count"] == n and s[ph]["p50_ms"] > 0
    total = s["draft"]["mean_ms"] + s["verify"]["mean_ms"] + s["draft_extend"]["mean_ms"]
    assert abs(total - s["step"]["mean_ms"]) < 1e-3 * max(1.0, total), (total, s["step"])
    assert s["verify"]["p50_ms"] > s["draft_extend"]["p50_ms"]
    assert abs(s["accept_length_mean"] - 2.5) < 1e-6 and s["batch_size_mean"] == 4
    # slots reused: at most one round's worth in flight, never one per step; none dropped
    assert timer._made <= steps < n and timer.dropped == 0, (timer._made, timer.dropped)
    print(
        f"ok eagle_phase_timer: no host sync; draft {s['draft']['p50_ms']:.3f} verify {s['verify']['p50_ms']:.3f} "
        f"extend {s['draft_extend']['p50_ms']:.3f} = step {s['step']['p50_ms']:.3f} ms; accept 2.5; "
        f"{timer._made} slot(s) of reused events for {n} steps"
    )


def check_kv(kv):
    rows, cap = 200000, 8 * 4096
    pool = (torch.randn(rows, 1, 576, device="cuda") * 4).to(torch.float8_e4m3fn)
    idx = torch.full((cap,), 2**30, device="cuda", dtype=torch.int32)  # garbage tail: never read
    idx[:3000] = torch.randint(0, rows, (3000,), device="cuda", dtype=torch.int32)
    step = kv.StepKV()
    step.record(torch.tensor([0, 1000, 3000], device="cuda", dtype=torch.int32), 2)
    assert kv._triton_usable(pool, torch.empty(1, device="cuda", dtype=torch.bfloat16))
    out = step.buffer(pool, torch.bfloat16, idx)
    sel = idx[:3000].long()
    assert torch.equal(out[sel], pool[sel].to(torch.bfloat16)), "triton rows != cast"
    indptr = torch.tensor([0, 1000, 3000], device="cuda", dtype=torch.int32)
    torch.cuda.set_sync_debug_mode("error")
    try:
        step.record(indptr, 2)
        step.buffer(pool, torch.bfloat16, idx)
    finally:
        torch.cuda.set_sync_debug_mode("default")

    def timed(fn, n=50):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    t_step = timed(lambda: step.buffer(pool, torch.bfloat16, idx))
    t_full = timed(lambda: pool.to(torch.bfloat16))

    # Capture once, then replay steps with other rows and other counts, as a decode graph does.
    g, graph_out = capture(lambda: step.buffer(pool, torch.bfloat16, idx))
    for n in (1, 257, 5000):
        pool.copy_((torch.randn(rows, 1, 576, device="cuda") * 4).to(torch.float8_e4m3fn))
        idx[:n] = torch.randint(0, rows, (n,), device="cuda", dtype=torch.int32)
        step.record(torch.tensor([0, n], device="cuda", dtype=torch.int32), 1)
        g.replay()
        sel = idx[:n].long()
        assert torch.equal(graph_out[sel], pool[sel].to(torch.bfloat16)), f"graph replay nnz={n}"
    step.record(torch.tensor([0, 200], device="cuda", dtype=torch.int32), 1)
    t_graph = timed(g.replay)
    print(
        f"ok mla_kv_step: no host sync; triton == cast on 3000 of {rows} rows (index buffer {cap}, garbage tail); "
        f"{t_step * 1e6:.0f} us vs full cast {t_full * 1e6:.0f} us; graph capture + replay with nnz 1/257/5000 "
        f"correct; replay at nnz 200: {t_graph * 1e6:.1f} us"
    )

    # The torch path (GPUs before SM89): an index buffer longer than half the pool, as under CUDA graphs,
    # casts the whole pool into the scratch, allocating nothing; a short one gathers its rows.
    dst = torch.empty(pool.shape, dtype=torch.bfloat16, device="cuda")
    nnz = torch.tensor([3000], device="cuda", dtype=torch.int32)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    kv._convert_rows_torch(pool, dst, idx, nnz)  # cap 32768 of 200000 rows: gather
    torch.cuda.synchronize()
    gather_extra = torch.cuda.max_memory_allocated() - base
    long_idx = torch.full((8 * rows,), 2**30, device="cuda", dtype=torch.int32)
    long_idx[:3000] = idx[:3000]
    # the index buffer itself is the caller's (6.4 MB): only what the conversion allocates counts
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kv._convert_rows_torch(pool, dst, long_idx, nnz)
    torch.cuda.synchronize()
    full_extra = torch.cuda.max_memory_allocated() - base
    assert torch.equal(dst, pool.to(torch.bfloat16)) and full_extra == 0, full_extra
    t_torch = timed(lambda: kv._convert_rows_torch(pool, dst, long_idx, nnz))
    print(
        f"ok mla_kv_step torch path: index buffer {8 * rows} over {rows} rows casts the pool into the scratch, "
        f"+0 bytes, {t_torch * 1e6:.0f} us (full cast {t_full * 1e6:.0f} us); a {cap}-entry buffer gathers "
        f"with +{gather_extra / 1e6:.0f} MB"
    )


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="GPU check of a pin's overlay modules")
    # Another pin's overlays (pins/0.5.23/overlay) need no SGLang of that release: they run on this torch.
    ap.add_argument("--overlay", default=str(ROOT / "overlay"), help="the pin's overlay/ directory")
    overlay = Path(ap.parse_args(argv).overlay) / "python/sglang/srt"
    assert torch.cuda.is_available(), "needs a GPU"
    print("torch", torch.__version__, torch.cuda.get_device_name(0), "overlay", overlay)
    oea = load(overlay / "layers/moe/oea.py", "oea")
    timer = load(overlay / "speculative/eagle_phase_timer.py", "eagle_phase_timer")
    check_oea(oea)
    check_oea_stats(oea)
    check_timer(timer)
    check_kv(load(overlay / "layers/attention/mla_kv_step.py", "mla_kv_step"))


if __name__ == "__main__":
    sys.exit(main())
