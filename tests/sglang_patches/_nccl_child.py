"""Runs in a `spawn`ed child, as SGLang starts its scheduler processes (see test_sglang_nccl_env.py)."""
import logging
import os
import sys


def run_patched_scheduler_entry(py_dir: str, here: str, pipe_writer) -> None:
    """Import the patched scheduler module in this fresh interpreter and run its real
    run_scheduler_process() with the GPU-bound parts (Scheduler, logger setup, plugin and
    config publishing) replaced, so the patched nccl_env line is emitted for real."""
    sys.path.insert(0, here)
    from _torchvision_standin import install

    install()
    sys.path.insert(0, py_dir)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    import sglang.srt.managers.scheduler as sched

    sched.logger.addHandler(Keep())
    sched.logger.setLevel(logging.INFO)
    sched.load_plugins = lambda: None
    sched.configure_scheduler_process = lambda *a, **k: a[7]  # returns dp_rank
    sched.publish = lambda *a, **k: None

    class FakeScheduler:
        gracefully_exit = False

        def __init__(self, *a, **k):
            self.metrics_reporter = type("M", (), {"_shutdown_fpm": lambda self: None})()

        def get_init_info(self):
            return {
                "sglang_file": sched.__file__,
                "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "CUDA_DEVICE_MAX"))},
                "log": list(records),
            }

        def run_event_loop(self):
            return None

    sched.Scheduler = FakeScheduler
    server_args = type("SA", (), {"enable_trace": False})()
    sched.run_scheduler_process(
        server_args, None, gpu_id=3, tp_rank=1, attn_cp_rank=0, moe_dp_rank=0, moe_ep_rank=0,
        pp_rank=0, dp_rank=None, pipe_writer=pipe_writer,
    )


def report_env(pipe_writer) -> None:
    pipe_writer.send(dict(os.environ))
