"""deepseek_v2, llama_eagle3, flashinfer_mla and eagle_profiling on the 0.5.23 pin.

The 0.5.17 tests whose property holds unchanged on 0.5.23 run here as they are (imported by name; their
fixtures come from this directory's conftest, built from pins/0.5.23). Below them, the 0.5.23 versions of
those whose code moved: the final-layer capture through 0.5.23's residual stream, the decode updater's new
signature, EAGLEWorkerV2.forward_batch_generation with PP and draft-extend plans, the internal-state
contributor that replaced Scheduler.get_internal_state.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
from types import SimpleNamespace

import pytest
import torch
from test_sglang_eagle_profiling import (  # noqa: F401
    test_a_full_ring_drops_steps_without_waiting,
    test_a_larger_batch_grows_the_slot_buffer_once,
    test_a_mark_after_verify_is_refused,
    test_disabled_by_default,
    test_events_and_host_buffers_are_reused,
    test_every_from_env,
    test_every_nth_step,
    test_percentile,
    test_periodic_log_line,
    test_phase_order_is_enforced,
    test_phases_add_up_and_stats,
    test_polls_in_order_without_blocking,
    test_window_bounds_the_samples,
)
from test_sglang_models import (  # noqa: F401
    _indices,
    test_bf16_kv_is_passed_through,
    test_draft_config_without_draft_vocab_size_loads,
    test_draft_vocab_size_present_is_unchanged,
    test_each_backend_gets_its_own_step_state,
    test_eagle3_bad_ids_fail_at_load_with_clear_message,
    test_eagle3_ids_accepted,
    test_eagle3_ids_not_checked_off_the_last_pp_rank,
    test_fp8_kv_converts_only_the_rows_the_step_reads,
    test_fp8_kv_keeps_the_full_cast_when_no_layout_was_recorded,
    test_fp8_kv_row_count_comes_from_the_recorded_indptr,
    test_mla_forward_paths_read_through_the_step_buffer,
    test_static_shape_reference_ignores_the_garbage_tail,
    test_tied_draft_without_draft_vocab_size,
    test_torch_fallback_full_cast_goes_into_the_scratch,
    test_torch_fallback_memory_is_bounded_by_the_pool,
    test_transformers_drops_missing_draft_vocab_size,
    test_triton_row_kernel_in_the_interpreter,
)


# ---------------------------------------------------------------- deepseek_v2: the final layer's output
def _tail_of_forward(dsv2):
    """The last-PP-rank tail of DeepseekV2Model.forward (the `else:` of `if not self.pp_group.is_last_rank:`),
    compiled from the patched source: DeepseekV2Model.forward itself needs a distributed runtime and a GPU."""
    src = textwrap.dedent(inspect.getsource(dsv2.DeepseekV2Model.forward))
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "not self.pp_group.is_last_rank":
            return compile(ast.Module(body=node.orelse, type_ignores=[]), "<forward-tail>", "exec")
    raise AssertionError("the last-rank tail of DeepseekV2Model.forward not found")


class _AddNorm:
    """The final norm's contract in 0.5.23 (access.final_norm_pair): norm(x) alone, or norm(x, residual) ->
    (normed, updated residual) with the add kept inside the norm."""

    def __call__(self, x, residual=None):
        if residual is None:
            return x * 2
        updated = x + residual
        return updated * 2, updated


def _run_tail(dsv2, patched, ids, *, idle=False, written=False, num_layers=4):
    aux_mod = patched("sglang.srt.layers.aux_hidden_states")
    rb = patched("sglang.srt.layers.layer_boundary.residual.batch")
    from sglang.srt.layers.layer_boundary.residual.add_norm import PLAIN_ADD
    from sglang.srt.layers.layer_boundary.residual.stream import ResidualStream

    gen = torch.Generator().manual_seed(0)
    packer = aux_mod.AuxHiddenStatePacker(len(ids))
    inputs = [torch.randn(3, 8, generator=gen) for _ in range(num_layers)]
    for i in range(num_layers):  # layer i captured its input
        if i in ids:
            packer.append(inputs[i])
    fb = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: idle), residual_stream=None)
    residual, output = torch.randn(3, 8, generator=gen), torch.randn(3, 8, generator=gen)
    if written:  # a producer that wrote its stream itself (no separate residual)
        hidden = rb.set_written(output, fb)
    else:  # the last layer's contribution, its residual add still pending
        fb.residual_stream = ResidualStream(residual)
        hidden = fb.residual_stream.record(output, PLAIN_ADD)
    this = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=num_layers), layers_to_capture=ids, norm=_AddNorm())
    scope = {"self": this, "hidden_states": hidden, "forward_batch": fb, "aux_hidden_states": packer}
    exec(_tail_of_forward(dsv2), {"residual_batch": rb}, scope)
    expect_final = output if written else output + residual
    return packer, inputs, scope["hidden_states"], expect_final


def test_final_layer_output_is_captured_from_the_residual_stream(dsv2, patched):
    """Ids [0, 2, 4] on a 4-layer target: finalize() holds layer 0's and layer 2's inputs and then the final
    layer's output, the updated residual the fused add+norm produced (0.5.23's final_norm capture)."""
    packer, inputs, normed, final = _run_tail(dsv2, patched, [0, 2, 4])
    out = packer.finalize()
    assert out.shape == (3, 8 * 3)
    assert torch.equal(out[:, :8], inputs[0]) and torch.equal(out[:, 8:16], inputs[2])
    assert torch.equal(out[:, 16:], final)
    assert torch.equal(normed, final * 2)  # the norm still ran on the same pair


def test_final_layer_capture_of_a_written_stream_and_an_idle_batch(dsv2, patched):
    packer, _, _, final = _run_tail(dsv2, patched, [4], written=True)
    assert torch.equal(packer.finalize(), final)
    # idle batch: the norm is skipped, the capture is not (finalize would count one short)
    packer, _, _, final = _run_tail(dsv2, patched, [1, 4], idle=True)
    assert torch.equal(packer.finalize()[:, 8:], final)


def test_an_id_below_num_hidden_layers_adds_nothing_at_the_end(dsv2, patched):
    packer, inputs, _, _ = _run_tail(dsv2, patched, [1, 3])
    assert len(packer) == 2 and torch.equal(packer.finalize()[:, 8:], inputs[3])


# ---------------------------------------------------------------- flashinfer_mla: 0.5.23's decode updater
class _Wrapper:
    def __init__(self):
        self.planned = None

    def plan(self, *args):
        self.planned = args


@pytest.mark.parametrize("dcp", [False, True])
def test_decode_updater_records_the_planned_row_count(mla, kvstep, monkeypatch, dcp):
    """0.5.23's FlashInferMLAIndicesUpdaterDecode.call_begin_forward (now with a KV location plan and the
    request pool indices): for the EAGLE draft-decode layout (spec_info) record() sees the indptr the wrapper
    is planned with; under decode context parallel nothing is recorded (upstream's full cast is kept)."""
    monkeypatch.setattr(mla, "get_parallel", lambda: SimpleNamespace(dcp_enabled=dcp))
    step = kvstep.StepKV()
    updater = SimpleNamespace(
        attn_backend=SimpleNamespace(_overlay_kv_step=step),
        scaling=0.1,
        num_local_heads=16,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        data_type=torch.bfloat16,
    )
    spec = SimpleNamespace(
        kv_indptr=torch.tensor([0, 5, 12, 0], dtype=torch.int32), kv_indices=_indices(list(range(12)))
    )
    wrapper = _Wrapper()
    mla.FlashInferMLAIndicesUpdaterDecode.call_begin_forward(
        updater,
        wrapper,
        torch.tensor([5, 7]),
        12,
        torch.tensor([0, 1, 2], dtype=torch.int32),
        None,
        spec_info=spec,
        plan=None,
        req_pool_indices=torch.tensor([0, 1]),
    )
    assert wrapper.planned is not None and torch.equal(wrapper.planned[1], spec.kv_indptr)
    if dcp:
        assert not step.recorded
    else:
        assert step.recorded and int(step.nnz) == 12


# ---------------------------------------------------------------- eagle_profiling: 0.5.23's worker
@pytest.fixture
def worker_0523(patched, monkeypatch):
    """EAGLEWorkerV2.forward_batch_generation of 0.5.23 (PP proxies, draft-extend KV plans, module-level
    draft_tp_context), its GPU collaborators faked, on one PP rank."""
    mod = patched("sglang.srt.speculative.eagle_worker_v2")

    def null(*a, **k):
        return contextlib.nullcontext()

    for name in ("draft_tp_context", "speculative_moe_backend_context", "speculative_moe_a2a_backend_context"):
        monkeypatch.setattr(mod, name, null)
    monkeypatch.setattr(mod, "spec_stage_span", null)
    monkeypatch.setattr(mod, "get_parallel", lambda: SimpleNamespace(pp_size=1))
    calls = []

    class Timer:
        def begin_step(self):
            calls.append("begin")

        def mark(self, phase):
            calls.append(f"mark:{phase}")

        def end_step(self, bs, accept_lens):
            calls.append(("end", bs, accept_lens.tolist()))

    verify_input = SimpleNamespace(is_verify_input=lambda: True, kv_loc_plan="plan")
    draft_worker = SimpleNamespace(
        parallel_layout=None,
        draft=lambda batch: (calls.append("draft"), verify_input)[1],
        _draft_extend_for_decode=lambda batch, out, kv_loc_plan=None: calls.append(f"draft_extend:{kv_loc_plan}"),
    )
    out = SimpleNamespace(accept_lens=torch.tensor([2, 3, 1]), new_seq_lens=None)

    def verify(batch, pp_proxy_tensors=None, grammar_barrier=None):
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

    def batch():
        return SimpleNamespace(
            forward_mode=SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False),
            is_extend_in_batch=False,
            seq_lens=torch.tensor([10, 11, 12]),
            spec_info=SimpleNamespace(is_verify_input=lambda: False),
        )

    return mod, make_self, batch, calls, Timer, out


def test_worker_records_each_phase_in_order(worker_0523):
    mod, make_self, batch, calls, Timer, out = worker_0523
    assert mod.EAGLEWorkerV2.forward_batch_generation(make_self(Timer()), batch()) is out
    assert calls == [
        "activate:3",
        "begin",
        "draft",
        "mark:draft",
        "verify",
        "mark:verify",
        "draft_extend:plan",
        ("end", 3, [2, 3, 1]),
    ]


def test_worker_without_timer_does_nothing_extra(worker_0523):
    mod, make_self, batch, calls, _, _ = worker_0523
    mod.EAGLEWorkerV2.forward_batch_generation(make_self(None), batch())
    assert calls == ["activate:3", "draft", "verify", "draft_extend:plan"]


def test_worker_makes_its_timer_from_the_environment(patched):
    """Only EAGLEWorkerV2.__init__ makes the timer (EagleDraftWorker's identical get_plan_stream line does not)."""
    mod = patched("sglang.srt.speculative.eagle_worker_v2")
    assert "EaglePhaseTimer.from_env()" in inspect.getsource(mod.EAGLEWorkerV2.__init__)
    assert "EaglePhaseTimer" not in inspect.getsource(mod.EagleDraftWorker)


def test_internal_state_returns_eagle_phase_timing(patched):
    """_add_speculative (0.5.23's SchedulerInternalStateController) adds the timer's summary to the state
    /get_server_info returns as internal_states[i]; without a timer, or without speculative decoding, nothing."""
    mod = patched("sglang.srt.managers.scheduler_components.internal_state")
    summary = {"draft": {"p50_ms": 1.0, "p99_ms": 2.0, "mean_ms": 1.5, "count": 3}, "window": 3}

    def state_for(timer, spec=True):
        scheduler = SimpleNamespace(
            spec_algorithm=SimpleNamespace(is_none=lambda: not spec, is_dspark=lambda: False),
            draft_worker=SimpleNamespace(eagle_phase_timer=timer),
        )
        ctl = mod.SchedulerInternalStateController(scheduler=scheduler, record_step_time=False)
        ctl._average_accept_length = lambda: None
        state = {}
        ctl._add_speculative(state)
        return state

    assert state_for(SimpleNamespace(summary=lambda: summary)) == {"eagle_phase_timing": summary}
    assert state_for(None) == {}
    assert state_for(SimpleNamespace(summary=lambda: summary), spec=False) == {}
