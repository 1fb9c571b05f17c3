"""Stand-in for `python apply.py ... launch ...`: a small real HTTP server process playing SGLang.

Honours the launch contract (prints the url/fingerprint/log lines, stays in the foreground, exits on SIGTERM)
and serves /health, /generate, /server_info (+ /get_server_info) with timing distributions set by the test
through env FAKE_BENCH (JSON):
  base_ms      per-step time of the pristine set (default 3.0)
  costs        {patch: relative slowdown}, e.g. {"planted": 0.05}: the step and every phase
  tree_costs   {tree dir name: relative slowdown}: every server started on that --tree (a duet's tree effect)
  tree_start_s {tree dir name: seconds}: extra start-up time of a server on that --tree (a duet's second start)
  prefill_ms   the pristine set's prefill, slept (times time_scale) before each request's tokens (default 0)
  prefill_costs {patch: relative slowdown} of the prefill alone (a first-token-only change)
  phase_costs  {patch: {phase: relative change}}: only that EAGLE phase's span (draft, verify, draft_extend),
               e.g. a GPU-side delay on a host-bound step: {"verify": 0.2, "draft_extend": -0.2}
  noise        relative sd of each step-time entry (default 0.004)
  start_noise  relative sd of a per-start offset (default 0)
  interactions [{"needs": [a, b], "cost": rel}]: a slowdown only when all of `needs` are in the set
  bimodal      {"p": P, "shift": S}: with probability P a start runs (1 + S) slower (a bimodal stack)
  time_scale   fraction of the fake step time actually slept (default 0.01: tests stay fast)
  change_output [patch...]: these patches change the greedy text
  fail         [patch...]: starting with these patches exits 1 before /health
  accept       accept length reported when --speculative-algorithm is in the server args (default 1.0)
  interval     decode-log interval (default 8)
  oea_distinct {K0: distinct experts per routing call per request in the batch} when SGLANG_OEA_STATS=1
               (default {"0": 8}; K0 from SGLANG_OEA_K0): internal_states[0].oea_stats counts 2 routing calls
               (MoE layers) per decoded token, as the oea_topk patch's totals since start
Every start appends {"patches","profile","env","server_args","tree","pid"} to FAKE_BENCH_LOG (JSONL) for assertions.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def parse(argv):
    opts = {"tree": None, "manifest": "manifest.yaml"}
    i = 0
    while argv[i] != "launch":
        opts[argv[i].lstrip("-")] = argv[i + 1]
        i += 2
    i += 1
    server_args = []
    while i < len(argv):
        a = argv[i]
        if a == "--":
            server_args = argv[i + 1 :]
            break
        opts[a.lstrip("-").replace("-", "_")] = argv[i + 1]
        i += 2
    return opts, server_args


def main() -> int:
    opts, server_args = parse(sys.argv[1:])
    cfg = json.loads(os.environ.get("FAKE_BENCH", "{}"))
    from sglang_overlay.manifest import load_manifest

    m = load_manifest(opts["manifest"])
    if "set" in opts:  # the package's grammar, as apply.py launch: `--set none` is the bench's empty arm
        from sglang_overlay.patchset import resolve

        patches = list(resolve(m, opts["set"]).patches)
    else:
        patches = [p for p in opts.get("patches", "").split(",") if p]
        patches = list(m.closure(patches))
    profile = opts.get("env_profile")
    env = dict(os.environ)
    if profile:
        env.update(m.env_profile(profile).as_env())
    log_start(patches, profile, server_args, env, opts["tree"])
    tree_cost = cfg.get("tree_costs", {}).get(os.path.basename((opts["tree"] or "").rstrip("/")), 0.0)
    cfg = {**cfg, "base_ms": cfg.get("base_ms", 3.0) * (1 + tree_cost)}
    if opts.get("log"):
        _server_log(opts["log"])
    if set(patches) & set(cfg.get("fail", [])):
        print("fake: crashing on purpose during start", flush=True)
        return 1
    # what apply.py launch prints: the pin, the applied patches' content and the env profile, so an edited
    # patch gives its arm a new fingerprint (tests of --reuse / --resume after an edit rely on it)
    from sglang_overlay.fingerprint import fingerprint

    fp = fingerprint(m, patches, m.env_profile(profile) if profile else None)
    tree_fp = hashlib.sha256(",".join(patches).encode()).hexdigest()[:16]
    lie = set(cfg.get("identity_lie", []))  # patches the "tree" silently lacks (for the warning test)
    overlay = {
        "fingerprint": tree_fp,
        "launch_fingerprint": fp,
        "patches": [p for p in patches if p not in lie],
        "env_profile": profile,
    }
    srv = make_server(patches, env, server_args, cfg, overlay, "127.0.0.1", 0)
    if "nccl_env_log" in patches and opts.get("log"):
        # what the nccl_env_log patch writes: one line per scheduler (TP rank) into the server log
        tp = int(server_args[server_args.index("--tp") + 1]) if "--tp" in server_args else 1
        nccl = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("NCCL_"))
        with open(opts["log"], "a") as f:
            for r in range(tp):
                f.write(
                    f"[2026] INFO sglang-overlay nccl_env tp_rank={r} pp_rank=0 dp_rank=0 gpu_id={r} pid=1 {nccl}\n"
                )
    cold = cfg.get("cold_marker")  # the machine's first start pays cold_start_s (JIT and graph caches cold)
    if cold and not os.path.exists(cold):
        open(cold, "w").close()
        time.sleep(cfg.get("cold_start_s", 0.0))
    time.sleep(
        cfg.get("start_s", 0.0)
        + cfg.get("tree_start_s", {}).get(os.path.basename((opts["tree"] or "").rstrip("/")), 0.0)
    )
    print("starting fake sglang", flush=True)
    print(f"sglang-overlay: url http://127.0.0.1:{srv.server_address[1]}", flush=True)
    print(f"sglang-overlay: fingerprint {fp}", flush=True)
    print(f"sglang-overlay: log {opts.get('log', '-')}", flush=True)
    wait_for_signal(srv)
    return 0


def _server_log(path) -> None:
    """SGLang-shaped start-up lines, as bench/startup.py reads them."""
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(path, "a") as f:
        for ln in (
            "Load weight begin. avail mem=100.00 GB",
            "Load weight end. elapsed=0.50 s, type=Fake",
            "Capture cuda graph begin. This can take up to several minutes.",
            "Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.1 GB. elapsed=1.25 s",
            "The server is fired up and ready to roll!",
        ):
            f.write(f"[{now} TP0] {ln}\n")


def log_start(patches, profile, server_args, env, tree=None) -> None:
    if os.environ.get("FAKE_BENCH_LOG"):
        with open(os.environ["FAKE_BENCH_LOG"], "a") as f:
            f.write(
                json.dumps(
                    {
                        "patches": patches,
                        "profile": profile,
                        "server_args": server_args,
                        "tree": tree,
                        "pid": os.getpid(),  # the server's own process: what a test checks is gone after a stop
                        "env": {
                            k: v
                            for k, v in env.items()
                            if k.startswith(
                                ("SGLANG_", "NCCL_", "X_", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
                            )
                        },
                    }
                )
                + "\n"
            )


def wait_for_signal(srv) -> None:
    # a plain flag, not a threading.Event: Event.set() from a handler that lands while this thread holds the
    # Event's lock in wait() blocks forever, and the fake server outlived the bench (2 of 20 kills)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    while not stop:
        time.sleep(0.02)
    srv.shutdown()


def make_server(patches, env, server_args, cfg, overlay, host, port) -> ThreadingHTTPServer:
    rng = random.Random()
    slow = 1.0 + sum(cfg.get("costs", {}).get(p, 0.0) for p in patches)
    slow += sum(x["cost"] for x in cfg.get("interactions", []) if set(x["needs"]) <= set(patches))
    start = 1 + rng.gauss(0, cfg.get("start_noise", 0.0))
    bimodal = cfg.get("bimodal") or {}
    if bimodal and rng.random() < bimodal.get("p", 0.0):
        start *= 1 + bimodal.get("shift", 0.0)
    step_s = cfg.get("base_ms", 3.0) * slow * start / 1e3
    phase_f = {
        ph: 1.0 + sum(cfg.get("phase_costs", {}).get(p, {}).get(ph, 0.0) for p in patches)
        for ph in ("draft", "verify", "draft_extend")
    }
    noise, scale = cfg.get("noise", 0.004), cfg.get("time_scale", 0.01)
    prefill_s = cfg.get("prefill_ms", 0.0) * (1 + sum(cfg.get("prefill_costs", {}).get(p, 0.0) for p in patches)) / 1e3
    interval = cfg.get("interval", 8)
    spec = "--speculative-algorithm" in server_args
    accept = cfg.get("accept", 1.0)
    changed = sorted(set(patches) & set(cfg.get("change_output", [])))
    record_steps = env.get("SGLANG_RECORD_STEP_TIME") == "1"
    phase_timing = env.get("SGLANG_EAGLE_PHASE_TIMING") == "1" and "eagle_profiling" in patches and spec
    k0 = env.get("SGLANG_OEA_K0", "0")
    oea_per_row = cfg.get("oea_distinct", {"0": 8}).get(k0) if env.get("SGLANG_OEA_STATS") == "1" else None
    oea = {"calls": 0, "distinct_experts_sum": 0, "rows_sum": 0}
    lock = threading.Lock()
    steps: dict[int, list[float]] = defaultdict(list)
    inflight: dict[int, int] = {}
    state = {"active": 0, "tokens": 0, "verify": 0, "next": 0}
    seen: set[str] = set()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj, code=200):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                return self._send({})
            if self.path in ("/server_info", "/get_server_info"):
                with lock:
                    st = {"avg_spec_accept_length": accept if spec and state["verify"] else None}
                    if record_steps:
                        st["step_time_dict"] = {str(k): list(v) for k, v in steps.items()}
                    if phase_timing:
                        d = step_s * 1e3

                        def ph(name, share):
                            v = share * d * phase_f.get(name, 1.0) * (1 + rng.gauss(0, noise))
                            return {"p50_ms": v, "p99_ms": 1.3 * v, "mean_ms": 1.02 * v, "count": 40}

                        st["eagle_phase_timing"] = {
                            "draft": ph("draft", 0.45),
                            "verify": ph("verify", 0.15),
                            "draft_extend": ph("draft_extend", 0.4),
                            "step": {"p50_ms": d, "p99_ms": 1.2 * d, "mean_ms": d, "count": 40},
                            "batch_size_mean": 1.0,
                            "accept_length_mean": accept,
                            "window": 40,
                        }
                    if oea_per_row is not None:
                        calls = oea["calls"]
                        st["oea_stats"] = {
                            **oea,
                            "k0": int(k0),
                            "max_tokens": 64,
                            "mean_distinct_experts": oea["distinct_experts_sum"] / calls if calls else None,
                            "mean_rows": oea["rows_sum"] / calls if calls else None,
                        }
                return self._send({"version": "0.5.17-fake", "internal_states": [st], "overlay": overlay})
            return self._send({"error": "not found"}, 404)

        def do_POST(self):
            if self.path != "/generate":
                return self._send({"error": "not found"}, 404)
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            sp = req["sampling_params"]
            assert sp["temperature"] == 0.0 and sp["ignore_eos"] is True
            n = int(sp["max_new_tokens"])
            with lock:
                rid = state["next"]
                state["next"] += 1
                state["active"] += 1
                for k in inflight:
                    inflight[k] = max(inflight[k], state["active"])
                inflight[rid] = state["active"]
            time.sleep((prefill_s * start + n * step_s) * scale)
            time.sleep(0.002)  # let concurrently sent requests overlap
            with lock:
                bs = inflight.pop(rid)
                state["active"] -= 1
                for _ in range(n // interval):
                    steps[bs].append(step_s * (1 + 0.03 * (bs - 1)) * (1 + rng.gauss(0, noise)))
                verify = round(n / accept) if spec else 0
                if oea_per_row is not None:
                    oea["calls"] += 2 * n
                    oea["distinct_experts_sum"] += 2 * n * oea_per_row * bs
                    oea["rows_sum"] += 2 * n * bs
                state["verify"] += verify
            digest = hashlib.sha256((req["text"] + ",".join(changed)).encode()).hexdigest()
            # SGLang's radix cache, roughly: a prompt sent before is served from the cache but its last token
            with lock:
                seen_before = req["text"] in seen
                seen.add(req["text"])
            prompt_tokens = len(req["text"]) // 4
            meta = {
                "completion_tokens": n,
                "prompt_tokens": prompt_tokens,
                "cached_tokens": prompt_tokens - 1 if seen_before else 0,
                "e2e_latency": n * step_s,
            }
            if spec:
                meta["spec_verify_ct"] = verify
            out = {
                "text": "out " + digest[:24],
                "output_ids": [int(digest[i : i + 4], 16) % 32768 for i in range(0, 32, 4)],
                "meta_info": meta,
            }
            if req.get("return_prompt_token_ids"):  # bench server-seqs: SGLang's full answer, n ids
                out["output_ids"] = [(int(digest[:8], 16) + 7 * j) % cfg.get("vocab", 32768) for j in range(n)]
                out["prompt_token_ids"] = [ord(c) % 256 for c in req["text"]]
            return self._send(out)

    srv = ThreadingHTTPServer((host, port), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


if __name__ == "__main__":
    sys.exit(main())
