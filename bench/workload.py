"""The fixed workload one repetition runs against a server, and the metrics read back from it.

One repetition = phase "b1" (requests one after another: batch 1) then phase "bc" (C requests at once),
each greedy (temperature 0) with ignore_eos so every request decodes exactly max_new_tokens tokens.
Per-step times come from the server itself: with SGLANG_RECORD_STEP_TIME=1, sglang 0.5.17's scheduler appends
(wall time between two decode-log points) / decode_log_interval to `step_time_dict[num_running_reqs]` every
decode_log_interval decode steps (metrics_reporter.py l.746) and `/server_info` returns it as
`internal_states[0].step_time_dict` (scheduler.py l.4204). The dict is cumulative since start, so a phase's
steps are the entries appended between two snapshots. The first entry after an idle gap includes the gap, which
is why a phase's step time is the median of its entries, not the mean.

After the two phases, `ttft_requests` requests of one new token each, one after another, time the way to a
first token (client wall time: HTTP, tokenizing, scheduling, the target's prefill and, under EAGLE, the draft's
extend): a prefill-path change shows there and nowhere in the decode step. One token ends a request at
prefill, so these requests add no decode-step entries. The decode phases have just sent the same prompts, and
SGLang's radix cache (on by default) would serve all but one token of them from the cache, so each of these
prompts starts with a number no earlier request of the server had (`_ttft_nonce`): the prefix shared with any
cached request is a token or two. A reply whose `cached_tokens` still covers more than a quarter of its prompt
voids the figure (None, and the reason in `extra`): a cache hit is never reported as a prefill.

With the oea_topk patch and SGLANG_OEA_STATS=1, `internal_states[0].oea_stats` holds routing-call totals since
start (calls, distinct routed experts, non-padded rows); a phase's figure is the difference of the snapshots
around it, so the mean distinct experts per routing call describes that phase alone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

_TOPICS = (
    "a cache",
    "the router",
    "speculative decoding",
    "a river",
    "prime numbers",
    "a compiler",
    "the moon",
    "an old library",
    "distributed training",
    "a chess opening",
    "bread",
    "a lighthouse",
    "mixture of experts",
    "a violin",
    "the ocean floor",
    "a train timetable",
)


def fixed_prompts(n: int) -> list[str]:
    """Deterministic prompts of varied length (no randomness: every arm and every run sends the same text)."""
    out = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        extra = " Explain each step and give an example." * (1 + i % 3)
        out.append(f"Request {i}: write a detailed, plain-language essay about {topic}.{extra}")
    return out


@dataclass(frozen=True)
class Workload:
    max_new_tokens: int = 256
    b1_requests: int = 4
    concurrency: int = 8
    request_timeout_s: float = 300.0
    ttft_requests: int = 4  # 0: no time-to-first-token phase

    def to_dict(self) -> dict:
        return asdict(self)


class WorkloadError(RuntimeError):
    pass


def post_json(url: str, payload: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise WorkloadError(f"POST {url} -> HTTP {e.code}: {e.read()[:500]!r}") from e


def oea_phase_delta(before: dict | None, after: dict | None) -> dict | None:
    """The routing calls of one phase from two cumulative `oea_stats` snapshots; None without the stats."""
    if before is None or after is None:
        return None
    calls = int(after["calls"]) - int(before["calls"])
    distinct = int(after["distinct_experts_sum"]) - int(before["distinct_experts_sum"])
    rows = int(after["rows_sum"]) - int(before["rows_sum"])
    if calls < 0 or distinct < 0 or rows < 0:
        # the totals only grow within one server process
        raise WorkloadError(
            f"oea_stats went backwards between two snapshots ({before} -> {after}): "
            f"did the server restart during the repetition?"
        )
    return {
        "calls": calls,
        "distinct_experts_sum": distinct,
        "rows_sum": rows,
        "mean_distinct_experts": distinct / calls if calls else None,
        "mean_rows": rows / calls if calls else None,
        "k0": after.get("k0"),
    }


def _get(url: str, timeout: float = 60.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def server_info(base: str) -> dict:
    """`/server_info` (0.5.17's name; `/get_server_info` is its deprecated alias that logs a warning per call)."""
    try:
        return _get(base + "/server_info")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return _get(base + "/get_server_info")


def internal_state(info: dict) -> dict:
    states = info.get("internal_states") or []
    if not states:
        raise WorkloadError("server_info has no internal_states[0]")
    return states[0]


def step_counts(state: dict) -> dict[str, int]:
    d = state.get("step_time_dict")
    if d is None:
        raise WorkloadError(
            "server_info.internal_states[0] has no step_time_dict: the server must run with "
            "SGLANG_RECORD_STEP_TIME=1 (the runner sets it; check it reaches the server)"
        )
    return {str(k): len(v) for k, v in d.items()}


def new_steps(before: dict[str, int], state: dict, batch_size: int) -> list[float]:
    entries = (state.get("step_time_dict") or {}).get(str(batch_size))
    if entries is None:
        entries = (state.get("step_time_dict") or {}).get(batch_size, [])
    return [float(x) for x in entries[before.get(str(batch_size), 0) :]]


@dataclass
class PhaseResult:
    tokens: int
    wall_s: float
    step_s: list[float]
    verify_ct: int
    outputs: list[list]  # [text, output_ids] per request, in prompt order
    eagle_phase_timing: dict | None = None
    oea_stats: dict | None = None  # this phase's routing calls (oea_phase_delta)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def step_ms(self) -> float:
        return statistics.median(self.step_s) * 1e3 if self.step_s else float("nan")

    @property
    def accept_len(self) -> float | None:
        return self.tokens / self.verify_ct if self.verify_ct else None

    def output_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.outputs, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass
class RepMetrics:
    step_ms_b1: float
    step_ms_bc: float
    tok_s_b1: float
    tok_s_bc: float
    accept_len_b1: float | None
    accept_len_bc: float | None
    n_steps_b1: int
    n_steps_bc: int
    hash_b1: str
    hash_bc: str
    server_accept_len: float | None  # cumulative since start (internal_states[0].avg_spec_accept_length)
    eagle_b1: dict | None = None  # internal_states[0].eagle_phase_timing after each phase (eagle_profiling)
    eagle_bc: dict | None = None
    # p50 of each EAGLE phase over the timer's window at the end of the b1 phase (None without the patch/env):
    # flattened so they can be the primary metric (e.g. a verify-only regression hides in a bimodal step time)
    eagle_draft_ms_b1: float | None = None
    eagle_verify_ms_b1: float | None = None
    eagle_draft_extend_ms_b1: float | None = None
    eagle_step_ms_b1: float | None = None
    ttft_ms_b1: float | None = None  # Workload.ttft_requests' median (None in records made before it existed)
    # oea_topk with SGLANG_OEA_STATS=1: each phase's routing calls (oea_phase_delta) and their mean number of
    # distinct routed experts per call (None without the patch/env)
    oea_b1: dict | None = None
    oea_bc: dict | None = None
    oea_distinct_experts_b1: float | None = None
    oea_distinct_experts_bc: float | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _one(base: str, prompt: str, wl: Workload, max_new_tokens: int | None = None) -> dict:
    want = wl.max_new_tokens if max_new_tokens is None else max_new_tokens
    payload = {
        "text": prompt,
        "sampling_params": {"temperature": 0.0, "max_new_tokens": want, "ignore_eos": True},
    }
    out = post_json(base + "/generate", payload, wl.request_timeout_s)
    meta = out.get("meta_info") or {}
    n = int(meta.get("completion_tokens", 0))
    if n < want:
        # fewer tokens than asked means the request stopped early: ignore_eos was not honoured, and tok/s and
        # step counts would no longer be comparable between arms
        raise WorkloadError(f"request decoded {n} tokens, expected {want} (ignore_eos not honoured?)")
    return out


_ttft_nonce = itertools.count()  # per client process: never the same prefix twice for one server
TTFT_MAX_CACHED = 0.25


def ttft_ms(base: str, prompts: list[str], wl: Workload) -> tuple[float | None, str]:
    """Median client wall time of one-token requests sent one after another, and why it is None if it is."""
    times = []
    for p in prompts:
        t0 = time.perf_counter()
        out = _one(base, f"{next(_ttft_nonce):08d} {p}", wl, max_new_tokens=1)
        times.append((time.perf_counter() - t0) * 1e3)
        meta = out.get("meta_info") or {}
        cached, total = int(meta.get("cached_tokens") or 0), int(meta.get("prompt_tokens") or 0)
        if total and cached > TTFT_MAX_CACHED * total:
            return None, f"a first-token request was served {cached} of {total} prompt tokens from the cache"
    return (statistics.median(times), "") if times else (None, "")


def _phase(
    base: str, prompts: list[str], wl: Workload, concurrent: bool, state0: dict, batch_size: int
) -> tuple[PhaseResult, dict]:
    before = step_counts(state0)
    t0 = time.perf_counter()
    if concurrent:
        with ThreadPoolExecutor(max_workers=len(prompts)) as ex:
            outs = list(ex.map(lambda p: _one(base, p, wl), prompts))
    else:
        outs = [_one(base, p, wl) for p in prompts]
    wall = time.perf_counter() - t0
    state = internal_state(server_info(base))
    meta = [o.get("meta_info") or {} for o in outs]
    return PhaseResult(
        tokens=sum(int(m.get("completion_tokens", 0)) for m in meta),
        wall_s=wall,
        step_s=new_steps(before, state, batch_size),
        verify_ct=sum(int(m.get("spec_verify_ct", 0) or 0) for m in meta),
        outputs=[[o.get("text", ""), o.get("output_ids")] for o in outs],
        eagle_phase_timing=state.get("eagle_phase_timing"),
        oea_stats=oea_phase_delta(state0.get("oea_stats"), state.get("oea_stats")),
    ), state


def _p50(timing: dict | None, phase: str) -> float | None:
    v = (timing or {}).get(phase) or {}
    return float(v["p50_ms"]) if v.get("count") and v.get("p50_ms") is not None else None


def run_rep(base: str, wl: Workload) -> RepMetrics:
    prompts = fixed_prompts(max(wl.b1_requests, wl.concurrency, wl.ttft_requests))
    state0 = internal_state(server_info(base))
    b1, state1 = _phase(base, prompts[: wl.b1_requests], wl, False, state0, 1)
    bc, state2 = _phase(base, prompts[: wl.concurrency], wl, True, state1, wl.concurrency)
    # after the decode phases, so they are measured exactly as before this phase existed
    ttft, ttft_void = ttft_ms(base, prompts[: wl.ttft_requests], wl)
    return RepMetrics(
        step_ms_b1=b1.step_ms,
        step_ms_bc=bc.step_ms,
        tok_s_b1=b1.tok_s,
        tok_s_bc=bc.tok_s,
        accept_len_b1=b1.accept_len,
        accept_len_bc=bc.accept_len,
        n_steps_b1=len(b1.step_s),
        n_steps_bc=len(bc.step_s),
        hash_b1=b1.output_hash(),
        hash_bc=bc.output_hash(),
        server_accept_len=state2.get("avg_spec_accept_length"),
        eagle_b1=b1.eagle_phase_timing,
        eagle_bc=bc.eagle_phase_timing,
        eagle_draft_ms_b1=_p50(b1.eagle_phase_timing, "draft"),
        eagle_verify_ms_b1=_p50(b1.eagle_phase_timing, "verify"),
        eagle_draft_extend_ms_b1=_p50(b1.eagle_phase_timing, "draft_extend"),
        eagle_step_ms_b1=_p50(b1.eagle_phase_timing, "step"),
        ttft_ms_b1=ttft,
        extra={"ttft_void": ttft_void} if ttft_void else {},
        oea_b1=b1.oea_stats,
        oea_bc=bc.oea_stats,
        oea_distinct_experts_b1=(b1.oea_stats or {}).get("mean_distinct_experts"),
        oea_distinct_experts_bc=(bc.oea_stats or {}).get("mean_distinct_experts"),
    )
