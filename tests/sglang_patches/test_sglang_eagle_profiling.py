"""eagle_profiling: the phase timer's bookkeeping (fake events), the worker hook and the /get_server_info hook."""

from __future__ import annotations

import contextlib
import logging
from types import SimpleNamespace

import pytest
import torch


class Clock:
    """A fake GPU timeline: events get a timestamp when recorded, and complete when the test says so."""

    def __init__(self):
        self.now = 0.0
        self.done_until = -1.0
        self.created = 0
        self.queries = 0

    def event(self):
        clock = self
        self.created += 1

        class Ev:
            t = None

            def record(self):
                self.t = clock.now

            def query(self):
                clock.queries += 1
                return self.t is not None and self.t <= clock.done_until

            def elapsed_time(self, other):
                return other.t - self.t

            def synchronize(self):  # never to be called
                raise AssertionError("the phase timer must not synchronize")

        return Ev()


@pytest.fixture(scope="module")
def timer_mod(patched):
    return patched("sglang.srt.speculative.eagle_phase_timer")


def run_step(timer, clock, draft, verify, extend, bs, accept):
    timer.begin_step()
    clock.now += draft
    timer.mark("draft")
    clock.now += verify
    timer.mark("verify")
    clock.now += extend
    timer.end_step(bs, torch.tensor(accept, dtype=torch.int32))
    clock.now += 0.5  # host gap between steps


def test_phases_add_up_and_stats(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event)
    for i in range(10):
        run_step(timer, clock, 1.0 + i, 0.5, 2.0, bs=2, accept=[1 + i % 3, 2])
    # nothing completed on the fake GPU yet: no stats, nothing blocked
    assert timer.summary()["window"] == 0 and timer.summary()["pending"] == 10
    clock.done_until = clock.now
    s = timer.summary()
    assert s["window"] == 10 and s["pending"] == 0
    drafts = sorted(1.0 + i for i in range(10))
    assert s["draft"]["count"] == 10
    assert s["draft"]["p50_ms"] == drafts[4]  # nearest rank: ceil(0.5*10) = 5th value
    assert s["draft"]["p99_ms"] == drafts[9]
    assert s["draft"]["mean_ms"] == pytest.approx(sum(drafts) / 10)
    assert s["verify"]["p50_ms"] == 0.5 and s["draft_extend"]["p99_ms"] == 2.0
    assert s["step"]["mean_ms"] == pytest.approx(s["draft"]["mean_ms"] + 0.5 + 2.0)
    assert s["batch_size_mean"] == 2.0
    accepts = [((1 + i % 3) + 2) / 2 for i in range(10)]
    assert s["accept_length_mean"] == pytest.approx(sum(accepts) / 10)
    assert set(s) >= {"draft", "verify", "draft_extend", "step", "batch_size_mean", "accept_length_mean", "window"}
    assert set(s["verify"]) == {"p50_ms", "p99_ms", "mean_ms", "count"}


def test_polls_in_order_without_blocking(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event)
    run_step(timer, clock, 1, 1, 1, 1, [1])
    half = clock.now
    run_step(timer, clock, 2, 2, 2, 1, [1])
    clock.done_until = half  # the GPU finished step 1 only
    assert timer.poll() == 1
    assert timer.summary()["window"] == 1 and timer.summary()["pending"] == 1
    clock.done_until = clock.now
    assert timer.poll() == 1
    assert timer.summary()["draft"]["count"] == 2


def test_window_bounds_the_samples(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=5, log_interval_s=0, event_factory=clock.event)
    for i in range(12):
        run_step(timer, clock, float(i), 1, 1, 1, [1])
    clock.done_until = clock.now
    s = timer.summary()
    assert s["window"] == 5 and s["draft"]["count"] == 5
    assert s["draft"]["p50_ms"] == 9.0  # the last five: 7..11


def test_periodic_log_line(timer_mod, caplog):
    clock = Clock()
    wall = [0.0]
    log = logging.getLogger("test.eagle_phase_timer")
    timer = timer_mod.EaglePhaseTimer(
        window=50, log_interval_s=10, event_factory=clock.event, clock=lambda: wall[0], log=log
    )
    with caplog.at_level(logging.INFO, logger="test.eagle_phase_timer"):
        run_step(timer, clock, 1, 2, 3, 4, [2, 3])
        clock.done_until = clock.now
        timer.poll()
        assert not caplog.records  # interval not reached
        wall[0] = 11.0
        run_step(timer, clock, 1, 2, 3, 4, [2, 3])
        clock.done_until = clock.now
        timer.poll()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("sglang-overlay eagle_phase_timing:")
    for part in (
        "draft p50=1.000ms p99=1.000ms",
        "verify p50=2.000ms",
        "draft_extend p50=3.000ms",
        "step p50=6.000ms",
        "batch_size_mean=4.00",
        "accept_length_mean=2.500",
    ):
        assert part in line


def test_phase_order_is_enforced(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(event_factory=clock.event, log_interval_s=0)
    timer.begin_step()
    with pytest.raises(ValueError, match="expected 'draft'"):
        timer.mark("verify")


def test_disabled_by_default(timer_mod, monkeypatch):
    monkeypatch.delenv("SGLANG_EAGLE_PHASE_TIMING", raising=False)
    assert timer_mod.EaglePhaseTimer.from_env() is None
    monkeypatch.setenv("SGLANG_EAGLE_PHASE_TIMING", "1")
    monkeypatch.setenv("SGLANG_EAGLE_PHASE_TIMING_WINDOW", "7")
    t = timer_mod.EaglePhaseTimer.from_env()
    assert t is not None and t.window == 7


def test_percentile(timer_mod):
    p = timer_mod.percentile
    assert p([], 50) == 0.0
    assert p([3.0], 99) == 3.0
    vals = list(range(1, 101))
    assert p(vals, 50) == 50 and p(vals, 99) == 99 and p(vals, 100) == 100


# ---------------------------------------------------------------- the worker hook
@pytest.fixture
def worker_env(patched, monkeypatch):
    """EAGLEWorkerV2.forward_batch_generation from the patched tree, with its GPU collaborators faked."""
    mod = patched("sglang.srt.speculative.eagle_worker_v2")
    null = lambda *a, **k: contextlib.nullcontext()  # noqa: E731
    monkeypatch.setattr(mod, "speculative_moe_backend_context", null)
    monkeypatch.setattr(mod, "speculative_moe_a2a_backend_context", null)
    monkeypatch.setattr(mod, "spec_stage_span", null)
    calls = []

    class Timer:
        def begin_step(self):
            calls.append("begin")

        def mark(self, phase):
            calls.append(f"mark:{phase}")

        def end_step(self, bs, accept_lens):
            calls.append(("end", bs, accept_lens.tolist()))

    draft_worker = SimpleNamespace(
        draft_tp_context=null,
        draft_runner=SimpleNamespace(tp_group=None),
        draft=lambda batch: (calls.append("draft"), SimpleNamespace(is_verify_input=lambda: True))[1],
        _draft_extend_for_decode=lambda batch, out: calls.append("draft_extend"),
    )
    out = SimpleNamespace(accept_lens=torch.tensor([2, 3, 1]), new_seq_lens=None)

    def verify(batch, grammar_barrier=None):
        calls.append("verify")
        return out

    def make_self(timer):
        return SimpleNamespace(
            activate_step_by_batch=lambda bs: calls.append(f"activate:{bs}"),
            speculative_num_steps=3,
            draft_worker=draft_worker,
            verify=verify,
            eagle_phase_timer=timer,
        )

    batch = SimpleNamespace(
        forward_mode=SimpleNamespace(is_extend=lambda: False),
        is_extend_in_batch=False,
        seq_lens=torch.tensor([10, 11, 12]),
        spec_info=object(),
    )
    return mod, make_self, batch, calls, Timer, out


def test_worker_records_each_phase_in_order(worker_env):
    mod, make_self, batch, calls, Timer, out = worker_env
    res = mod.EAGLEWorkerV2.forward_batch_generation(make_self(Timer()), batch)
    assert res is out
    assert calls == [
        "activate:3",
        "begin",
        "draft",
        "mark:draft",
        "verify",
        "mark:verify",
        "draft_extend",
        ("end", 3, [2, 3, 1]),
    ]


def test_worker_without_timer_does_nothing_extra(worker_env):
    mod, make_self, batch, calls, Timer, out = worker_env
    mod.EAGLEWorkerV2.forward_batch_generation(make_self(None), batch)
    assert calls == ["activate:3", "draft", "verify", "draft_extend"]


# ---------------------------------------------------------------- /get_server_info
def test_get_internal_state_returns_eagle_phase_timing(patched, monkeypatch):
    """Scheduler.get_internal_state is what /get_server_info returns as internal_states[i]."""
    sched = patched("sglang.srt.managers.scheduler")
    monkeypatch.setattr(sched, "get_context", lambda: SimpleNamespace(resolved_server_args_dict=dict))
    monkeypatch.setattr(sched, "build_memory_usage", lambda **kw: {"fake": True})
    monkeypatch.setattr(sched, "get_exec", lambda: SimpleNamespace(moe=SimpleNamespace(elastic_ep_backend=None)))
    summary = {"draft": {"p50_ms": 1.0, "p99_ms": 2.0, "mean_ms": 1.5, "count": 3}, "window": 3}

    def fake_self(timer):
        return SimpleNamespace(
            metrics_reporter=SimpleNamespace(last_gen_throughput=1.0, spec_total_num_forward_ct=0),
            draft_worker=SimpleNamespace(graph_memory_usage=0, eagle_phase_timer=timer),
            tp_worker=SimpleNamespace(model_runner=SimpleNamespace(weight_load_mem_usage=0), graph_memory_usage=0),
            token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: SimpleNamespace(mem_usage=0)),
            startup_available_gpu_memory_gb=0,
            max_total_num_tokens=0,
            swa_tokens_per_layer=0,
            startup_time=0,
            max_running_requests=1,
            spec_algorithm=SimpleNamespace(is_none=lambda: False, is_dspark=lambda: False),
        )

    timer = SimpleNamespace(summary=lambda: summary)
    state = sched.Scheduler.get_internal_state(fake_self(timer), None).internal_state
    assert state["eagle_phase_timing"] == summary
    state = sched.Scheduler.get_internal_state(fake_self(None), None).internal_state
    assert "eagle_phase_timing" not in state


# ---------------------------------------------------------------- per-step cost: nothing made after warm-up
def _overlapped(timer, clock, steps, accept=(2, 3)):
    """The overlap scheduler's pattern: step i is launched while the GPU still runs step i-1."""
    for _ in range(steps):
        clock.done_until = getattr(clock, "prev_end", -1.0)  # the GPU finished the step before the last
        clock.prev_end = clock.now
        run_step(timer, clock, 1.0, 2.0, 0.5, len(accept), list(accept))


def test_events_and_host_buffers_are_reused(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event)
    _overlapped(timer, clock, 3)
    made, slots = clock.created, list(timer._free) + list(timer._pending)
    buffers = {id(s.accept) for s in slots}
    _overlapped(timer, clock, 50)
    assert made == 8 and clock.created == made  # two slots of four events (one in flight, one being recorded)
    assert {id(s.accept) for s in list(timer._free) + list(timer._pending)} == buffers
    clock.done_until = clock.now
    s = timer.summary()
    assert s["window"] == 53 and s["step"]["p50_ms"] == 3.5 and s["accept_length_mean"] == 2.5


def test_a_larger_batch_grows_the_slot_buffer_once(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event, slots=1)
    _overlapped(timer, clock, 2, accept=(1, 2))
    _overlapped(timer, clock, 2, accept=tuple(range(100)))
    clock.done_until = clock.now
    assert timer.summary()["accept_length_mean"] == pytest.approx((1.5 * 2 + 49.5 * 2) / 4)


def test_every_nth_step(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event, every=4)
    _overlapped(timer, clock, 40)
    clock.done_until = clock.now
    assert timer.summary()["window"] == 10 and clock.created == 4  # a timed step is done when the next begins


def test_a_full_ring_drops_steps_without_waiting(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(window=100, log_interval_s=0, event_factory=clock.event, slots=3)
    for _ in range(5):  # the GPU completes nothing
        run_step(timer, clock, 1, 1, 1, 1, [1])
    assert timer.dropped == 2 and timer.summary()["pending"] == 3 and clock.created == 12
    clock.done_until = clock.now
    assert timer.summary()["window"] == 3
    run_step(timer, clock, 1, 1, 1, 1, [1])  # slots are free again
    assert timer.dropped == 2 and clock.created == 12


def test_a_mark_after_verify_is_refused(timer_mod):
    clock = Clock()
    timer = timer_mod.EaglePhaseTimer(event_factory=clock.event, log_interval_s=0)
    timer.begin_step()
    timer.mark("draft")
    timer.mark("verify")
    with pytest.raises(ValueError, match=r"expected end_step\(\)"):
        timer.mark("draft_extend")


def test_every_from_env(timer_mod, monkeypatch):
    monkeypatch.setenv("SGLANG_EAGLE_PHASE_TIMING", "1")
    monkeypatch.setenv("SGLANG_EAGLE_PHASE_TIMING_EVERY", "5")
    assert timer_mod.EaglePhaseTimer.from_env().every == 5
