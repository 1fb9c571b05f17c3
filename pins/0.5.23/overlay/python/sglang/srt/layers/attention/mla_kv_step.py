"""sglang-overlay flashinfer_mla: the KV rows one MLA step reads, in the query dtype.

With an fp8 KV cache, upstream FlashInferMLAAttnBackend hands FlashInfer
`get_key_buffer(layer_id).to(q.dtype)`: a copy of the whole per-layer pool on every
layer of every step, although the kernel reads only the slots in its kv_indices.
Here the indices updaters record the step's row count `nnz` (= kv_indptr[bs]) into
a device scalar, and the forward converts only wrapper._kv_indices_buf[:nnz] (the
exact index tensor the FlashInfer kernel reads) into one reused scratch buffer.

Because nnz lives on the device, the conversion has a fixed launch shape and never
synchronizes: it is captured into CUDA graphs (decode, target-verify, EAGLE draft)
and on replay converts the replayed step's rows. Rows the kernel does not read keep
stale values; rows it reads are always rewritten before the kernel runs.

Where Triton cannot convert fp8 (before SM89, and on the CPU) a static-shape torch
path does the same; its cost is bounded by the pool, never by the index buffer
(under CUDA graphs that is max_bs x context_len entries): see _convert_rows_torch.
"""

from __future__ import annotations

import functools

import torch

# One scratch per pool shape: every layer of a model has the same pool shape and the
# layers run one after the other on one stream, so they can share it. Upstream's cast
# allocates the same size per layer, so peak memory is unchanged.
_SCRATCH: dict[tuple, torch.Tensor] = {}

# Programs of the grid-stride conversion kernel: enough to fill an H100/H200 (132 SMs)
# several times over, few enough that idle programs cost nothing measurable.
_NPROG = 512
_BLOCK_ROWS = 8


def _scratch_for(kv_buffer: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    key = (tuple(kv_buffer.shape), dtype, kv_buffer.device)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(kv_buffer.shape, dtype=dtype, device=kv_buffer.device)
        _SCRATCH[key] = buf
    return buf


# The torch path gathers one row per index-buffer entry (the buffer's length is static; nnz
# is only known on the device). Under CUDA graphs that buffer is the wrapper's whole
# max_bs x context_len one, far longer than the step, often longer than the pool. On a CPU
# (bench/results/mla_kv_fallback) a gathered row costs about 1.4x a row of a plain cast
# and 3 bytes of temporaries per element (the fp8 gather and its bf16 copy) where
# pristine's cast allocates 2. From half the pool's rows on, the whole pool is cast into
# the scratch instead: pristine's time, no allocation. So neither ever exceeds pristine's.
_GATHER_MAX_POOL_FRACTION = 0.5


def _convert_rows_torch(src: torch.Tensor, dst: torch.Tensor, indices: torch.Tensor, nnz: torch.Tensor) -> None:
    """Static-shape fallback: work and temporary memory bounded by the pool.

    Below half the pool's rows: a gather of every index-buffer entry. Entries at or
    past nnz may be stale or garbage (FlashInfer's index buffers are reused), so they
    are redirected to row indices[0]; converting a row again writes the same correct
    values, which is harmless. From half the pool's rows on: the whole pool, cast in
    place into dst (rows the kernel does not read are converted too, harmlessly).
    """
    if indices.numel() == 0:
        return
    if indices.numel() >= _GATHER_MAX_POOL_FRACTION * src.shape[0]:
        dst.copy_(src)
        return
    pos = torch.arange(indices.numel(), device=indices.device)
    first = indices[:1].to(torch.long)
    rows = torch.where(pos < nnz.to(indices.device), indices.to(torch.long), first)
    dst.index_copy_(0, rows, src.index_select(0, rows).to(dst.dtype))


@functools.cache
def _get_triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _convert_rows_kernel(
        src_ptr,
        dst_ptr,
        idx_ptr,
        nnz_ptr,
        row_elems,
        NPROG: tl.constexpr,
        BLOCK_ROWS: tl.constexpr,
        BLOCK_COLS: tl.constexpr,
    ):
        pid = tl.program_id(0)
        nnz = tl.load(nnz_ptr)
        cols = tl.arange(0, BLOCK_COLS)
        col_ok = cols < row_elems
        # grid-stride over rows: the bound is read on the device, so the launch
        # shape is fixed (graph-capturable) while the work follows this step's nnz
        for start in range(pid * BLOCK_ROWS, nnz, NPROG * BLOCK_ROWS):
            r = start + tl.arange(0, BLOCK_ROWS)
            row_ok = r < nnz
            slot = tl.load(idx_ptr + r, mask=row_ok, other=0).to(tl.int64)
            offs = slot[:, None] * row_elems + cols[None, :]
            m = row_ok[:, None] & col_ok[None, :]
            x = tl.load(src_ptr + offs, mask=m)
            tl.store(dst_ptr + offs, x.to(dst_ptr.dtype.element_ty), mask=m)

    return _convert_rows_kernel


def _triton_usable(src: torch.Tensor, dst: torch.Tensor) -> bool:
    if not (src.is_cuda and src.is_contiguous() and dst.is_contiguous()):
        return False
    if src.element_size() == 1:
        # Triton converts fp8 (e4m3/e5m2) natively from SM89 on
        return torch.cuda.get_device_capability(src.device) >= (8, 9)
    return True


def convert_rows(src: torch.Tensor, dst: torch.Tensor, indices: torch.Tensor, nnz: torch.Tensor) -> None:
    """dst[indices[:nnz]] = src[indices[:nnz]] cast to dst.dtype; nnz is a 1-element device tensor."""
    if _triton_usable(src, dst):
        row_elems = src[0].numel()
        _get_triton_kernel()[(_NPROG,)](
            src,
            dst,
            indices,
            nnz,
            row_elems,
            NPROG=_NPROG,
            BLOCK_ROWS=_BLOCK_ROWS,
            BLOCK_COLS=max(16, 1 << (row_elems - 1).bit_length()),
        )
    else:
        _convert_rows_torch(src, dst, indices, nnz)


class StepKV:
    """Per attention backend: the row count of the step its indices updater planned."""

    def __init__(self) -> None:
        self.nnz: torch.Tensor | None = None  # int32[1] on the backend's device
        # False for layouts this module does not cover (decode context parallel):
        # those keep upstream's full cast.
        self.recorded = False

    def record(self, kv_indptr: torch.Tensor | None, num_rows: int) -> None:
        """Called where the wrapper is planned; a device-to-device copy, no sync."""
        if kv_indptr is None:
            self.recorded = False
            return
        if self.nnz is None:
            # the first plan runs eagerly (before any CUDA-graph capture), so the
            # address captured graphs read is fixed from here on
            self.nnz = torch.zeros(1, dtype=torch.int32, device=kv_indptr.device)
        self.nnz.copy_(kv_indptr[num_rows : num_rows + 1], non_blocking=True)
        self.recorded = True

    def buffer(
        self,
        kv_buffer: torch.Tensor,
        dtype: torch.dtype,
        wrapper_indices: torch.Tensor | None,
    ) -> torch.Tensor:
        """The KV pool as the kernel must see it: the pool itself when no cast is needed."""
        if kv_buffer.dtype == dtype:
            return kv_buffer
        if not self.recorded or wrapper_indices is None:
            return kv_buffer.to(dtype)
        scratch = _scratch_for(kv_buffer, dtype)
        convert_rows(kv_buffer, scratch, wrapper_indices, self.nnz)
        return scratch


def step_kv_of(backend) -> StepKV:
    """The backend's StepKV, made on first use.

    Kept out of the backend's __init__ so the patch does not need a hunk there:
    upstream edits that constructor in most releases (the release radar showed it).
    """
    step = backend.__dict__.get("_overlay_kv_step")
    if step is None:
        step = backend._overlay_kv_step = StepKV()
    return step
