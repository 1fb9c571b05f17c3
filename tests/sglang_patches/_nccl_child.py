"""Runs in a `spawn`ed child, as SGLang starts its scheduler processes (see test_sglang_nccl_env.py)."""

import inspect
import logging
import os
import sys


def _tree_on_path(py_dir: str, here: str, records: list, fmt) -> logging.Handler:
    """This fresh interpreter imports the tree at py_dir; returns a handler keeping fmt(record) in records."""
    sys.path.insert(0, here)
    from _torchvision_standin import install

    install()
    sys.path.insert(0, py_dir)

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(fmt(record))

    return Keep()


def run_patched_scheduler_entry(py_dir: str, here: str, pipe_writer) -> None:
    """Import the patched scheduler module in this fresh interpreter and run its real
    run_scheduler_process() with the GPU-bound parts (Scheduler, logger setup, plugin and
    config publishing) replaced, so the patched nccl_env line is emitted for real."""
    records = []
    keep = _tree_on_path(py_dir, here, records, lambda r: r.getMessage())
    import sglang.srt.managers.scheduler as sched

    sched.logger.addHandler(keep)
    sched.logger.setLevel(logging.INFO)
    sched.load_plugins = lambda: None
    # 0.5.17's returns dp_rank (its 8th argument); 0.5.23's returns nothing anyone reads
    sched.configure_scheduler_process = lambda *a, **k: a[7] if len(a) > 7 else None
    sched.publish = lambda *a, **k: None

    class FakeScheduler:
        gracefully_exit = False
        async_d2h_worker = None

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
    # 0.5.23's entry places the process first and reads tracing from the runtime context
    for name, fake in (
        ("spawn_world_rank", lambda *a, **k: 0),
        ("resolve_spawn_dp_rank", lambda dp_rank: dp_rank),
        ("get_observability", lambda: type("O", (), {"enable_trace": False})()),
    ):
        if hasattr(sched, name):
            setattr(sched, name, fake)
    server_args = type("SA", (), {"enable_trace": False})()
    ranks = {"gpu_id": 3, "tp_rank": 1, "attn_cp_rank": 0, "moe_dp_rank": 0, "moe_ep_rank": 0, "pp_rank": 0}
    accepted = inspect.signature(sched.run_scheduler_process).parameters
    sched.run_scheduler_process(
        server_args,
        None,
        **{k: v for k, v in ranks.items() if k in accepted},
        dp_rank=None,
        pipe_writer=pipe_writer,
    )


def report_env(pipe_writer) -> None:
    pipe_writer.send(dict(os.environ))


ENGINE_VARS = (
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING",
    "NCCL_CUMEM_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_GRAPH_MIXING_SUPPORT",
)


def run_engine_env(py_dir: str, here: str, cases, pipe_writer) -> None:
    """The launching process's part (what `python -m sglang.launch_server` does before it spawns the schedulers):
    the tree's real engine._set_envs_and_config, once per case (user environment, server flags). With
    `scheduler` set, a scheduler process is then spawned as SGLang spawns it, running the patched
    run_scheduler_process (run_patched_scheduler_entry), and its nccl_env log line comes back too."""
    import multiprocessing as mp
    import types

    records = []
    logging.getLogger("sglang").addHandler(
        _tree_on_path(py_dir, here, records, lambda r: (r.levelname, r.getMessage()))
    )
    logging.getLogger("sglang").setLevel(logging.INFO)
    import sglang.srt.entrypoints.engine as engine

    base = {k: v for k, v in os.environ.items() if k not in ENGINE_VARS}
    out = {"engine_file": engine.__file__, "cases": []}
    for user_env, flags, scheduler in cases:
        os.environ.clear()
        os.environ.update(base)
        os.environ.update(user_env)
        del records[:]
        server_args = types.SimpleNamespace(
            nnodes=1,
            enable_symm_mem=False,
            enable_nccl_nvls=False,
            dcp_size=1,
            enable_metrics=False,
            attention_backend="triton",
            custom_sigquit_handler=None,
            gc_threshold=None,
            # read by 0.5.23's _set_envs_and_config (through resolving_view) too
            enable_kv_cache_sharding=False,
            enable_memory_saver=False,
            dsa_topk_backend=None,
            speculative_dsa_topk_backend=None,
            prefill_attention_backend=None,
            decode_attention_backend=None,
        )
        for k, v in flags.items():
            setattr(server_args, k, v)
        engine._set_envs_and_config(server_args)
        case = {"env": {k: os.environ.get(k) for k in ENGINE_VARS}, "log": list(records)}
        if scheduler:
            ctx = mp.get_context("spawn")
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=run_patched_scheduler_entry, args=(py_dir, here, writer))
            proc.start()
            writer.close()
            case["scheduler"] = reader.recv() if reader.poll(240) else None
            proc.join(30)
        out["cases"].append(case)
    pipe_writer.send(out)
