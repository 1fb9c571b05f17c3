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
when it completes.

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
from typing import Callable, Deque, Dict, List, Optional, Sequence

ENV_ENABLE = "SGLANG_EAGLE_PHASE_TIMING"
ENV_WINDOW = "SGLANG_EAGLE_PHASE_TIMING_WINDOW"
ENV_LOG_INTERVAL = "SGLANG_EAGLE_PHASE_TIMING_LOG_INTERVAL"

PHASES = ("draft", "verify", "draft_extend")
_MAX_PENDING = 4096

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


class _PendingStep:
    __slots__ = ("events", "batch_size", "accept_lens_host")

    def __init__(self, events: List, batch_size: int):
        self.events = events
        self.batch_size = batch_size
        self.accept_lens_host = None


class EaglePhaseTimer:
    def __init__(
        self,
        window: int = 1000,
        log_interval_s: float = 30.0,
        event_factory: Optional[Callable[[], object]] = None,
        clock: Callable[[], float] = time.monotonic,
        log: Optional[logging.Logger] = None,
    ):
        self.window = max(1, int(window))
        self.log_interval_s = float(log_interval_s)
        self._event_factory = event_factory or _cuda_event
        self._clock = clock
        self._log = log or logger
        self._lock = threading.Lock()
        self._pending: Deque[_PendingStep] = deque()
        self._current: Optional[_PendingStep] = None
        self._samples: Dict[str, Deque[float]] = {
            name: deque(maxlen=self.window) for name in PHASES + ("step",)
        }
        self._batch_sizes: Deque[int] = deque(maxlen=self.window)
        self._accept_lengths: Deque[float] = deque(maxlen=self.window)
        self._last_log = clock()
        self.dropped = 0

    @classmethod
    def from_env(cls) -> Optional["EaglePhaseTimer"]:
        """A timer when SGLANG_EAGLE_PHASE_TIMING is on, else None (zero cost)."""
        if not phase_timing_enabled():
            return None
        return cls(
            window=int(os.environ.get(ENV_WINDOW, "1000")),
            log_interval_s=float(os.environ.get(ENV_LOG_INTERVAL, "30")),
        )

    # ---- called from the worker, in step order ----
    def begin_step(self) -> None:
        self.poll()
        event = self._event_factory()
        event.record()
        self._current = _PendingStep([event], 0)

    def mark(self, phase: str) -> None:
        """Close ``phase`` (one of PHASES, in order) at the current stream position."""
        step = self._current
        if step is None:
            return
        expected = PHASES[len(step.events) - 1] if len(step.events) <= len(PHASES) else None
        if phase != expected:
            raise ValueError(f"eagle phase timer: got {phase!r}, expected {expected!r}")
        event = self._event_factory()
        event.record()
        step.events.append(event)

    def end_step(self, batch_size: int, accept_lens=None) -> None:
        """Close draft_extend; ``accept_lens`` is the per-request GPU tensor (or None)."""
        step = self._current
        self._current = None
        if step is None or len(step.events) != len(PHASES):
            return
        step.batch_size = int(batch_size)
        if accept_lens is not None and hasattr(accept_lens, "numel") and accept_lens.numel() > 0:
            if getattr(accept_lens, "is_cuda", False):
                import torch

                host = torch.empty(
                    accept_lens.shape, dtype=accept_lens.dtype, device="cpu", pin_memory=True
                )
                host.copy_(accept_lens, non_blocking=True)
                step.accept_lens_host = host
            else:
                step.accept_lens_host = accept_lens.clone()
        event = self._event_factory()
        event.record()
        step.events.append(event)
        with self._lock:
            self._pending.append(step)
            while len(self._pending) > _MAX_PENDING:
                self._pending.popleft()
                self.dropped += 1

    # ---- bookkeeping ----
    def poll(self) -> int:
        """Fold in every completed step (FIFO, stop at the first unfinished one)."""
        done = 0
        with self._lock:
            while self._pending and self._pending[0].events[-1].query():
                step = self._pending.popleft()
                ev = step.events
                times = [ev[i].elapsed_time(ev[i + 1]) for i in range(len(PHASES))]
                for name, ms in zip(PHASES, times):
                    self._samples[name].append(float(ms))
                self._samples["step"].append(float(ev[0].elapsed_time(ev[-1])))
                self._batch_sizes.append(step.batch_size)
                if step.accept_lens_host is not None:
                    self._accept_lengths.append(float(step.accept_lens_host.float().mean()))
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
        parts = [
            f"{name} p50={s[name]['p50_ms']:.3f}ms p99={s[name]['p99_ms']:.3f}ms"
            for name in PHASES + ("step",)
        ]
        return (
            "sglang-overlay eagle_phase_timing: "
            + " | ".join(parts)
            + f" | batch_size_mean={s['batch_size_mean']:.2f}"
            + f" accept_length_mean={s['accept_length_mean']:.3f} window={s['window']}"
        )
