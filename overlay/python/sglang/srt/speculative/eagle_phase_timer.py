"""Per-phase GPU timing of EAGLE speculative decode steps (sglang-overlay `eagle_profiling`).

Enabled with SGLANG_EAGLE_PHASE_TIMING=1 (off by default; when off the worker
holds ``None`` and does nothing per step: no events, no syncs).

For each decode step EAGLEWorkerV2.forward_batch_generation records four CUDA
events on the forward stream: step start, after draft, after verify, after
draft extend. The three phases are the intervals between consecutive events,
so they add up to the step. Event pairs are read back only once the last
event of the step reports ``query() == True``; nothing ever synchronizes, so
the overlap scheduler is not stalled. The accept lengths are copied to pinned
host memory with ``non_blocking=True`` before the last event, so they are valid
when it completes. Events and host buffers belong to a ring of step slots that
are reused once read: after the first steps nothing is created or allocated.
SGLANG_EAGLE_PHASE_TIMING_EVERY=N (default 1) times one step in N.

Statistics cover the last ``window`` completed steps (SGLANG_EAGLE_PHASE_TIMING_WINDOW,
default 1000); a log line with p50/p99 per phase, batch size and accept length
is written every SGLANG_EAGLE_PHASE_TIMING_LOG_INTERVAL seconds (default 30;
0 disables it). ``summary()`` is what `/get_server_info` returns as
``internal_states[i]["eagle_phase_timing"]``.

No SGLang imports: the bookkeeping is unit-tested on the CPU with fake events.
"""

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Optional

ENV_ENABLE = "SGLANG_EAGLE_PHASE_TIMING"
ENV_WINDOW = "SGLANG_EAGLE_PHASE_TIMING_WINDOW"
ENV_LOG_INTERVAL = "SGLANG_EAGLE_PHASE_TIMING_LOG_INTERVAL"
ENV_EVERY = "SGLANG_EAGLE_PHASE_TIMING_EVERY"

PHASES = ("draft", "verify", "draft_extend")
# Steps whose events may be in flight at once; the overlap scheduler keeps one or two.
_SLOTS = 64

logger = logging.getLogger(__name__)


def phase_timing_enabled() -> bool:
    return os.environ.get(ENV_ENABLE, "0").strip().lower() in ("1", "true", "yes", "on")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n*q/100), at least 1
    return float(sorted_values[int(min(rank, len(sorted_values))) - 1])


def _cuda_event():
    import torch

    return torch.cuda.Event(enable_timing=True)


class _Slot:
    """One step's four events and its accept-length row, reused once the step was read."""

    __slots__ = ("accept", "accept_view", "batch_size", "dst", "events", "n_accept", "recorded")

    def __init__(self, events: list):
        self.events = events
        self.recorded = 0
        self.batch_size = 0
        self.accept = None  # host tensor (pinned for CUDA input), grown on demand
        self.accept_view = None  # its numpy view: read back without a torch op
        self.dst = None  # accept[:n_accept], kept while the batch size repeats
        self.n_accept = 0

    def copy_accept_lens(self, accept_lens) -> None:
        n = accept_lens.numel()
        if self.dst is None or n != self.n_accept or self.dst.dtype != accept_lens.dtype:
            if self.accept is None or self.accept.numel() < n or self.accept.dtype != accept_lens.dtype:
                import torch

                # only while the slot is free (its last copy was read): nothing in flight
                self.accept = torch.empty(
                    max(n, 64),
                    dtype=accept_lens.dtype,
                    pin_memory=bool(getattr(accept_lens, "is_cuda", False)),
                )
                self.accept_view = self.accept.numpy()
            self.dst = self.accept[:n]
            self.n_accept = n
        self.dst.copy_(accept_lens if accept_lens.dim() == 1 else accept_lens.reshape(-1), non_blocking=True)


class EaglePhaseTimer:
    """Per step: four event records (reused events, from a ring of ``slots`` steps), one
    non-blocking copy of the accept lengths into the slot's reused host buffer, and a
    poll of the oldest pending step. A step completed on the GPU costs three
    elapsed_time calls when it is folded in; the step time is their sum (the phases tile
    the step). ``every`` > 1 times one step in ``every`` and leaves the others untouched.
    """

    def __init__(
        self,
        window: int = 1000,
        log_interval_s: float = 30.0,
        event_factory: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger | None = None,
        every: int = 1,
        slots: int = _SLOTS,
    ):
        self.window = max(1, int(window))
        self.log_interval_s = float(log_interval_s)
        self.every = max(1, int(every))
        self._max_slots = max(1, int(slots))
        self._event_factory = event_factory or _cuda_event
        self._clock = clock
        self._log = log or logger
        self._lock = threading.Lock()
        self._free: list[_Slot] = []
        self._made = 0
        self._pending: deque[_Slot] = deque()
        self._current: _Slot | None = None
        self._steps = 0
        self._samples: dict[str, deque[float]] = {name: deque(maxlen=self.window) for name in PHASES + ("step",)}
        self._batch_sizes: deque[int] = deque(maxlen=self.window)
        self._accept_lengths: deque[float] = deque(maxlen=self.window)
        self._last_log = clock()
        self.dropped = 0  # steps not timed because every slot was still in flight

    @classmethod
    def from_env(cls) -> Optional["EaglePhaseTimer"]:
        """A timer when SGLANG_EAGLE_PHASE_TIMING is on, else None (zero cost)."""
        if not phase_timing_enabled():
            return None
        return cls(
            window=int(os.environ.get(ENV_WINDOW, "1000")),
            log_interval_s=float(os.environ.get(ENV_LOG_INTERVAL, "30")),
            every=int(os.environ.get(ENV_EVERY, "1")),
        )

    # ---- called from the worker, in step order ----
    def begin_step(self) -> None:
        if self._pending:
            self.poll()
        self._steps += 1
        if self.every > 1 and self._steps % self.every:
            self._current = None
            return
        if self._free:
            slot = self._free.pop()
        elif self._made < self._max_slots:
            self._made += 1
            slot = _Slot([self._event_factory() for _ in range(len(PHASES) + 1)])
        else:
            self.dropped += 1
            self._current = None
            return
        slot.events[0].record()
        slot.recorded = 1
        self._current = slot

    def mark(self, phase: str) -> None:
        """Close ``phase`` (one of PHASES, in order) at the current stream position."""
        slot = self._current
        if slot is None:
            return
        n = slot.recorded
        if n >= len(PHASES) or phase != PHASES[n - 1]:
            expected = repr(PHASES[n - 1]) if n < len(PHASES) else "end_step() (it closes draft_extend)"
            raise ValueError(f"eagle phase timer: got {phase!r}, expected {expected}")
        slot.events[n].record()
        slot.recorded = n + 1

    def end_step(self, batch_size: int, accept_lens=None) -> None:
        """Close draft_extend; ``accept_lens`` is the per-request GPU tensor (or None)."""
        slot = self._current
        self._current = None
        if slot is None:
            return
        if slot.recorded != len(PHASES):
            self._free.append(slot)
            return
        slot.batch_size = batch_size
        if accept_lens is not None and accept_lens.numel() > 0:
            slot.copy_accept_lens(accept_lens)
        else:
            slot.dst, slot.n_accept = None, 0
        slot.events[-1].record()
        self._pending.append(slot)  # deque.append is atomic; poll() holds the lock to fold

    # ---- bookkeeping ----
    def poll(self) -> int:
        """Fold in every completed step (FIFO, stop at the first unfinished one)."""
        done = 0
        with self._lock:
            pending = self._pending
            draft, verify, extend = (self._samples[name] for name in PHASES)
            while pending and pending[0].events[-1].query():
                slot = pending.popleft()
                e = slot.events
                d, v, x = e[0].elapsed_time(e[1]), e[1].elapsed_time(e[2]), e[2].elapsed_time(e[3])
                draft.append(d)
                verify.append(v)
                extend.append(x)
                self._samples["step"].append(d + v + x)
                self._batch_sizes.append(slot.batch_size)
                n = slot.n_accept
                if n:
                    self._accept_lengths.append(sum(slot.accept_view[:n].tolist()) / n)
                self._free.append(slot)
                done += 1
        if done and self.log_interval_s > 0:
            now = self._clock()
            if now - self._last_log >= self.log_interval_s:
                self._last_log = now
                self._log.info(self.format_line())
        return done

    def summary(self) -> dict:
        """Stats over the window, after folding in completed steps."""
        self.poll()
        return self._stats()

    def _stats(self) -> dict:
        with self._lock:
            out = {}
            for name in PHASES + ("step",):
                values = sorted(self._samples[name])
                out[name] = {
                    "p50_ms": percentile(values, 50),
                    "p99_ms": percentile(values, 99),
                    "mean_ms": (sum(values) / len(values)) if values else 0.0,
                    "count": len(values),
                }
            sizes = list(self._batch_sizes)
            accepts = list(self._accept_lengths)
            out["batch_size_mean"] = (sum(sizes) / len(sizes)) if sizes else 0.0
            out["accept_length_mean"] = (sum(accepts) / len(accepts)) if accepts else 0.0
            out["window"] = len(sizes)
            out["pending"] = len(self._pending)
            return out

    def format_line(self) -> str:
        s = self._stats()
        parts = [f"{name} p50={s[name]['p50_ms']:.3f}ms p99={s[name]['p99_ms']:.3f}ms" for name in PHASES + ("step",)]
        return (
            "sglang-overlay eagle_phase_timing: "
            + " | ".join(parts)
            + f" | batch_size_mean={s['batch_size_mean']:.2f}"
            + f" accept_length_mean={s['accept_length_mean']:.3f} window={s['window']}"
        )
