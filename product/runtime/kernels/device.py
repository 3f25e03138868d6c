"""Packed token masks applied to logits in place: one pass that writes ``-inf`` where a mask bit is clear.

Three implementations of one operation, bit-identical (each writes the dtype's own ``-inf`` and nothing else):

- ``triton`` (CUDA logits, when triton is importable; it ships with CUDA builds of torch): one kernel launch. A
  program covers ``_GROUPS`` groups of 16 bytes of logits of one constrained row: a group whose bits are all clear
  is one vector store of ``-inf``, a mixed group one vector load and one store, a group whose bits are all set is
  not touched. Rows come from ``indices`` when given (other rows untouched); columns at or past the vocabulary are
  masked.
- ``cpu`` (CPU logits): a compiled loop (numba) over the same words, on an integer view of the logits (``-inf``
  as a bit pattern, so float32, float16 and bfloat16 share one loop); all-ones words are skipped. No temporaries.
  (The previous path, ``np.unpackbits`` into a boolean matrix and ``masked_fill``, is kept as ``torch`` below.)
- ``torch`` (any other device, e.g. MPS, or CUDA without triton): a 256-entry table maps each mask byte to its 8
  "masked" flags, so the flags are one gather (a byte per token) and ``masked_fill_`` applies them: two kernels
  and a one-byte-per-token temporary, where the previous path built ``[rows, words, 32]`` int32 shifts, then
  booleans, then their negation.

``apply_bitmask`` (public as ``product.apply_bitmask``; importing it needs torch, not transformers) validates
everything before the first write and picks the implementation (``backend="auto"``).

The ``cpu`` loop itself is compiled with the other numba kernels (``product.runtime.kernels.cpu.mask_logit_rows``);
this module is the torch side: checks, dispatch, the torch and Triton kernels.

Leaves out: computing masks (``product.runtime.guide``), filling a batch (``product.runtime.matcher``);
non-last-dimension masks.
"""

import operator
import os

import numpy as np
import torch

from product.runtime.kernels.cpu import mask_logit_rows

try:  # optional: CUDA builds of torch ship it; a CPU install usually lacks it
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the install
    triton = tl = None

__all__ = ["apply_bitmask", "BACKENDS", "triton_available"]

BACKENDS = ("auto", "triton", "cpu", "torch")
_LOGIT_DTYPES = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_NEG_INF_BITS = {torch.float32: np.int32(np.float32(-np.inf).view(np.int32)),
                 torch.float16: np.int16(np.float16(-np.inf).view(np.int16)),
                 torch.bfloat16: np.int16(np.int16(-128))}  # 0xFF80: bfloat16's -inf


def triton_available(device: torch.device | None = None) -> bool:
    """Whether the Triton kernel can run: triton importable and either a CUDA device or the interpreter
    (``TRITON_INTERPRET=1``, for tests on a CPU)."""
    if triton is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return device is not None and device.type == "cuda"


# ---- checks ------------------------------------------------------------------------------------------------------

def _check(logits: torch.Tensor, bitmask: torch.Tensor, indices, vocab_size: int | None):
    """Everything that can be wrong, before anything is written. Returns (bitmask on the logits' device, rows as
    an int64 tensor or None, vocabulary covered)."""
    if not isinstance(logits, torch.Tensor) or not isinstance(bitmask, torch.Tensor):
        raise TypeError(f"apply_bitmask takes torch tensors, not {type(logits).__name__} and "
                        f"{type(bitmask).__name__}")
    if logits.dtype not in _LOGIT_DTYPES:
        raise ValueError(f"logits must be float32, float16 or bfloat16, not {logits.dtype}")
    if bitmask.dtype not in (torch.int32, torch.uint32):
        raise ValueError(f"a bitmask is int32 (or uint32) words, not {bitmask.dtype}")
    if logits.ndim != 2 or bitmask.ndim != 2:
        raise ValueError(f"logits [rows, vocab] and bitmask [rows, words] are 2-D, not {list(logits.shape)} and "
                         f"{list(bitmask.shape)}")
    if logits.shape[1] and logits.stride(1) != 1:
        raise ValueError("logits must be contiguous along the vocabulary (stride 1 in the last dimension)")
    rows, width = logits.shape
    words = bitmask.shape[1]
    covered = min(width, 32 * words)
    if vocab_size is not None:
        vocab_size = operator.index(vocab_size)
        if not 0 <= vocab_size <= 32 * words:
            raise ValueError(f"vocab_size {vocab_size} is not covered by {words} words of bitmask")
        covered = min(covered, vocab_size)
    if indices is None:
        if bitmask.shape[0] < rows:
            raise ValueError(f"a bitmask of {bitmask.shape[0]} rows for {rows} rows of logits")
        index = None
    else:
        index = torch.as_tensor(indices, dtype=torch.int64).reshape(-1).cpu()
        if len(index) and (int(index.min()) < 0 or int(index.max()) >= min(rows, bitmask.shape[0])):
            raise ValueError(f"indices must lie in [0, {min(rows, bitmask.shape[0])}): rows of both the logits "
                             f"({rows}) and the bitmask ({bitmask.shape[0]})")
    if bitmask.device != logits.device:
        bitmask = bitmask.to(logits.device, non_blocking=True)
    if bitmask.dtype != torch.int32:
        bitmask = bitmask.view(torch.int32)
    if words and bitmask.stride(1) != 1:
        bitmask = bitmask.contiguous()
    return bitmask, index, covered


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, *, indices=None, vocab_size: int | None = None,
                  backend: str = "auto") -> torch.Tensor:
    """Set ``logits[i, t] = -inf`` wherever bit t of ``bitmask[i]`` is clear, in place, for the rows ``indices``
    (default: every row; the others are left untouched); columns past the vocabulary (``vocab_size``, default
    32 × the bitmask's words: a model's padded embedding rows) are masked too. float32, float16 or bfloat16
    logits on any device (the bitmask is copied there); returns ``logits``.

    ``backend``: ``"auto"`` (Triton on CUDA when triton is installed, a compiled loop on a CPU, torch operations
    elsewhere), or ``"triton"``, ``"cpu"``, ``"torch"``. Shapes, dtypes and indices are checked before anything
    is written (``ValueError``/``TypeError``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    bitmask, index, covered = _check(logits, bitmask, indices, vocab_size)
    if backend == "auto":
        if triton_available(logits.device) and logits.device.type == "cuda":
            backend = "triton"
        elif logits.device.type == "cpu":
            backend = "cpu"
        else:
            backend = "torch"
    if index is not None and not len(index) or not logits.shape[0] or not logits.shape[1]:
        return logits
    if backend == "triton":
        if not triton_available(logits.device):
            raise ValueError("the triton backend needs triton and CUDA logits (or TRITON_INTERPRET=1)")
        _apply_triton(logits, bitmask, index, covered)
    elif backend == "cpu":
        if logits.device.type != "cpu":
            raise ValueError(f"the cpu backend needs CPU logits, not {logits.device}")
        _apply_cpu(logits, bitmask, index, covered)
    else:
        _apply_torch(logits, bitmask, index, covered)
    return logits


# ---- cpu: a compiled loop over an integer view (``kernels.cpu.mask_logit_rows``) --------------------------------

def _apply_cpu(logits: torch.Tensor, bitmask: torch.Tensor, index: torch.Tensor | None, covered: int) -> None:
    out = logits.detach().view(_LOGIT_DTYPES[logits.dtype]).numpy()
    words = bitmask.numpy().view(np.uint32)
    rows = np.arange(len(out), dtype=np.int64) if index is None else index.numpy()
    mask_logit_rows(out, words, rows, covered, _NEG_INF_BITS[logits.dtype])


# ---- torch: a byte table, one gather and masked_fill_ -----------------------------------------------------------

_TABLES: dict[torch.device, torch.Tensor] = {}


def _masked_by_byte(device: torch.device) -> torch.Tensor:
    """bool[256, 8]: entry [b, j] is whether bit j of byte b is clear (token masked)."""
    table = _TABLES.get(device)
    if table is None:
        b = np.arange(256, dtype=np.uint8)[:, None]
        flags = ((b >> np.arange(8, dtype=np.uint8)) & 1) == 0
        table = _TABLES[device] = torch.from_numpy(flags).to(device)
    return table


def _apply_torch(logits: torch.Tensor, bitmask: torch.Tensor, index: torch.Tensor | None, covered: int) -> None:
    words = (covered + 31) // 32
    if index is not None:
        index = index.to(logits.device)
        bitmask = bitmask.index_select(0, index)
    else:
        bitmask = bitmask[: logits.shape[0]]
    # bytes in memory order (little-endian words): byte k of word w holds tokens 32w + 8k .. 32w + 8k + 7
    as_bytes = bitmask[:, :words].contiguous().view(torch.uint8).to(torch.int32)
    masked = _masked_by_byte(logits.device)[as_bytes].view(len(bitmask), -1)[:, :covered]
    if index is None:
        logits[:, :covered].masked_fill_(masked, float("-inf"))
        logits[:, covered:] = float("-inf")
    else:
        part = logits.index_select(0, index)
        part[:, :covered].masked_fill_(masked, float("-inf"))
        part[:, covered:] = float("-inf")
        logits.index_copy_(0, index, part)


# ---- triton ------------------------------------------------------------------------------------------------------
#
# A row is cut into groups of ``_VEC[dtype]`` logits (16 bytes: 4 float32 or 8 half-precision logits); a program
# covers ``_GROUPS`` groups of one row. A group with every bit set is not touched; any other group is one 16-byte
# store: all -inf where every bit is clear, else the group read (one 16-byte load) and written back with -inf in
# its clear positions. Loads and stores are predicated per group, the same for its lanes, so Triton vectorises
# them. The program holding the end of the vocabulary works logit by logit (a row's width need not be a multiple
# of a group). On an H100 at batch 512, float32 / bfloat16: 117.5 / 66.1 µs of device time, xgrammar's CUDA kernel
# (the same scheme) 117.1 / 64.8; the first kernel here (one [words, 32] tile, a predicated 4- or 2-byte store per
# logit) 142 / 94 (docs/serving.md).

_GROUPS = 256  # groups per program: 1,024 float32 logits (126 programs a row at 128k)
_NUM_WARPS = 4  # bench/gpu_masks.py --configs times the alternatives
_VEC = {torch.float32: 4, torch.float16: 8, torch.bfloat16: 8}

_TRITON_KERNELS: dict[bool, object] = {}


if triton is not None:  # the body needs triton.language at definition (its constexpr annotations)
    def _mask_kernel_body(logits_ptr, bitmask_ptr, rows_ptr, logits_stride, bitmask_stride, covered, width,
                          HAS_ROWS: tl.constexpr, GROUPS: tl.constexpr, VEC: tl.constexpr):
        """One program: groups ``GROUPS * program_id(1) ...`` of row ``rows[program_id(0)]`` (or row
        program_id(0)); stores -inf where a bit is clear or the column is at or past ``covered``; columns past
        ``width`` untouched."""
        if HAS_ROWS:
            row = tl.load(rows_ptr + tl.program_id(0)).to(tl.int64)
        else:
            row = tl.program_id(0).to(tl.int64)
        first = (tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)) * VEC  # each group's first column
        words = tl.load(bitmask_ptr + row * bitmask_stride + first // 32, mask=first < covered, other=0)
        group_bits = (words >> (first % 32)) & ((1 << VEC) - 1)
        lane = tl.arange(0, VEC)
        column = first[:, None] + lane[None, :]
        pointers = logits_ptr + row * logits_stride + column
        clear = ((group_bits[:, None] >> lane[None, :]) & 1) == 0
        neg_inf = tl.full([GROUPS, VEC], float("-inf"), logits_ptr.dtype.element_ty)
        if (tl.program_id(1) + 1) * GROUPS * VEC <= covered:  # every column is in the vocabulary
            touched = group_bits != (1 << VEC) - 1
            mixed = touched & (group_bits != 0)
            kept = tl.load(pointers, mask=mixed[:, None], other=float("-inf"))
            tl.store(pointers, tl.where(clear, neg_inf, kept), mask=touched[:, None])
        else:
            tl.store(pointers, neg_inf, mask=(clear | (column >= covered)) & (column < width))


def _triton_kernel():
    """The jitted kernel, built on first use (and again under ``TRITON_INTERPRET=1``, which triton reads when a
    function is jitted). ``covered`` and ``width`` are not specialised on their values (a kernel per vocabulary
    size is enough)."""
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    kernel = _TRITON_KERNELS.get(interpret)
    if kernel is None:
        kernel = _TRITON_KERNELS[interpret] = triton.jit(_mask_kernel_body, do_not_specialize=["covered", "width"])
    return kernel


def _apply_triton(logits: torch.Tensor, bitmask: torch.Tensor, index: torch.Tensor | None, covered: int) -> None:
    rows, width = logits.shape
    if index is not None:
        index = index.to(logits.device)
    vec = _VEC[logits.dtype]
    grid = (rows if index is None else len(index), triton.cdiv(max(width, 1), _GROUPS * vec))
    _triton_kernel()[grid](logits, bitmask, index if index is not None else bitmask, logits.stride(0),
                           bitmask.stride(0), covered, width, HAS_ROWS=index is not None, GROUPS=_GROUPS, VEC=vec,
                           num_warps=_NUM_WARPS)
