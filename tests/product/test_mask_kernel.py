"""apply_bitmask's implementations (product.runtime.kernels.device) against plain boolean masking: every dtype,
padded vocabularies, row indices (other rows untouched), bad input refused before anything is written. The Triton
kernel runs on a GPU when one is present and through Triton's interpreter on a CPU."""

import numpy as np
import pytest
import torch

from product import apply_bitmask
from product.runtime.kernels import device as _mask_kernel

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _case(rng, rows, vocab, width, dtype, device="cpu", dense=0.3):
    words = (vocab + 31) // 32
    allowed = rng.random((rows, vocab)) < dense
    allowed[0, :] = True  # an all-ones row (the compiled loop skips full words)
    if rows > 2:
        allowed[2, :] = False
    packed = np.packbits(np.pad(allowed, ((0, 0), (0, 32 * words - vocab))), axis=1, bitorder="little")
    bitmask = torch.from_numpy(packed.view(np.int32).copy())
    logits = torch.randn(rows, width, generator=torch.Generator().manual_seed(int(rng.integers(1 << 30))))
    return logits.to(dtype).to(device), bitmask, allowed


def _expected(logits, allowed, indices):
    """Boolean indexing, row by row: the reference."""
    out = logits.clone().cpu()
    vocab = allowed.shape[1]
    for r in range(len(out)) if indices is None else indices:
        row = out[r]
        covered = min(vocab, row.shape[0])
        row[:covered][~torch.from_numpy(allowed[r, :covered])] = float("-inf")
        row[covered:] = float("-inf")
    return out


def _same_bits(a, b):
    return torch.equal(a.cpu().view(BITS[a.dtype]), b.cpu().view(BITS[b.dtype]))


def _backends():
    out = ["cpu", "torch", "auto"]
    if torch.cuda.is_available():
        out.append("cuda-auto")
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("vocab,width", [(1000, 1000), (1000, 1031 + 64), (1024, 1024), (50257, 50304),
                                         (1000, 990)])
def test_apply_matches_boolean_masking(dtype, backend, vocab, width):
    rng = np.random.default_rng(vocab + width)
    device = "cuda" if backend.startswith("cuda") else "cpu"
    logits, bitmask, allowed = _case(rng, 5, vocab, width, dtype, device)
    for indices in (None, [3, 0], [4], []):
        got = logits.clone()
        apply_bitmask(got, bitmask, indices=indices, vocab_size=vocab,
                      backend="auto" if backend.endswith("auto") else backend)
        assert _same_bits(got, _expected(logits, allowed, indices)), (indices, backend)
        if indices is not None:  # rows not listed are untouched, bit for bit
            for r in set(range(5)) - set(indices):
                assert _same_bits(got[r], logits[r])


def test_default_vocabulary_is_the_bitmask_words():
    """Without vocab_size, the bitmask's 32 × words columns are covered and wider logits masked past them."""
    rng = np.random.default_rng(1)
    logits, bitmask, allowed = _case(rng, 3, 64, 100, torch.float32)
    got = apply_bitmask(logits.clone(), bitmask)
    assert _same_bits(got, _expected(logits, allowed, None))


def test_bad_input_is_refused_before_anything_is_written():
    rng = np.random.default_rng(2)
    logits, bitmask, _ = _case(rng, 4, 100, 128, torch.float32)
    before = logits.clone()
    bad = [
        dict(bitmask=bitmask.to(torch.int64)),                 # wrong dtype
        dict(bitmask=bitmask[:, :2]),                          # fewer words than vocab_size needs
        dict(bitmask=bitmask[:3]),                             # fewer rows than logits
        dict(bitmask=bitmask[0]),                              # 1-D
        dict(indices=[0, 4]),                                  # a row outside the batch
        dict(indices=[-1]),
        dict(vocab_size=129),                                  # past the bitmask's words
        dict(backend="cuda"),                                  # not a backend
    ]
    for kwargs in bad:
        args = dict(bitmask=bitmask, vocab_size=100)
        args.update(kwargs)
        with pytest.raises(ValueError):
            apply_bitmask(logits, args.pop("bitmask"), **args)
        assert torch.equal(logits, before), kwargs
    with pytest.raises(ValueError):
        apply_bitmask(logits.to(torch.int32), bitmask)
    with pytest.raises(ValueError):
        apply_bitmask(logits[:, ::2], bitmask)  # not contiguous along the vocabulary
    with pytest.raises(TypeError):
        apply_bitmask(logits.numpy(), bitmask)
    assert torch.equal(logits, before)


def test_row_strided_logits_are_masked_in_place():
    """The last position of [batch, positions, vocab] logits, as a model returns them: a strided view."""
    rng = np.random.default_rng(3)
    full = torch.randn(3, 4, 200)
    _, bitmask, allowed = _case(rng, 3, 200, 200, torch.float32)
    view = full[:, -1, :]
    expected = _expected(view, allowed, None)
    apply_bitmask(view, bitmask)
    assert torch.equal(full[:, -1, :], expected)


def _triton_or_skip(monkeypatch):
    """Triton on a GPU, else through its interpreter on the CPU; skipped only when triton is not installed."""
    if _mask_kernel.triton is None:
        pytest.skip("triton is not installed (it ships with CUDA builds of torch)")
    if torch.cuda.is_available():
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_kernel_is_bit_identical_to_the_cpu_loop(dtype, monkeypatch):
    device = _triton_or_skip(monkeypatch)
    rng = np.random.default_rng(4)
    for vocab, width, rows in ((1000, 1100, 3), (2048 + 5, 2048 + 5, 2), (300, 200, 2)):
        logits, bitmask, allowed = _case(rng, rows, vocab, width, dtype, device)
        for indices in (None, [rows - 1]):
            got = logits.clone()
            apply_bitmask(got, bitmask.to(device), indices=indices, vocab_size=vocab, backend="triton")
            reference = logits.cpu().clone()
            apply_bitmask(reference, bitmask, indices=indices, vocab_size=vocab, backend="cpu")
            assert _same_bits(got, reference) and _same_bits(got, _expected(logits, allowed, indices))


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_triton_kernel_compiles_for_hopper(dtype, monkeypatch):
    """The Triton kernel through the real compiler (to PTX and a cubin for sm_90, with the ptxas triton ships), so
    a kernel the interpreter accepts but the GPU compiler rejects is caught without a GPU."""
    if _mask_kernel.triton is None:
        pytest.skip("triton is not installed (it ships with CUDA builds of torch)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the compiled kernel, not the interpreted one
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    vec = {"fp32": 4, "bf16": 8, "fp16": 8}[dtype]
    for has_rows in (False, True):
        signature = {"logits_ptr": f"*{dtype}", "bitmask_ptr": "*i32", "rows_ptr": "*i64" if has_rows else "*i32",
                     "logits_stride": "i64", "bitmask_stride": "i64", "covered": "i32", "width": "i32",
                     "HAS_ROWS": "constexpr", "GROUPS": "constexpr", "VEC": "constexpr"}
        source = ASTSource(fn=_mask_kernel._triton_kernel(), signature=signature,
                           constexprs={"HAS_ROWS": has_rows, "GROUPS": _mask_kernel._GROUPS, "VEC": vec},
                           attrs={(0,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]})
        compiled = _mask_kernel.triton.compile(source, target=GPUTarget("cuda", 90, 32))
        ptx = compiled.asm["ptx"]
        assert "st.global" in ptx and len(compiled.asm["cubin"]) > 0
        # whole masked groups are one 16-byte store (aligned logits, a row stride divisible by 16)
        assert "st.global.v4" in ptx


@pytest.mark.skipif(not torch.cuda.is_available() or _mask_kernel.triton is None, reason="needs a GPU and triton")
def test_views_of_every_alignment_are_masked_in_turn():
    """The kernel's 16-byte loads and stores need aligned rows: views whose pointers and strides differ in 16-byte
    alignment, in turn (Triton compiles a kernel per alignment), each get the reference result."""
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        for width in (1003, 1040):  # a row stride that is not, and one that is, a multiple of 16
            full, bitmask, allowed = _case(rng, 4, 1000, width, dtype, "cuda")
            bitmask = bitmask.cuda()
            for offset in (0, 1, 0, 3, 0, 1):
                got = full.clone()
                view = got[:, offset:offset + 1000]
                expected = _expected(view, allowed, None)
                apply_bitmask(view, bitmask, vocab_size=1000)
                assert _same_bits(view, expected), (dtype, width, offset)
                assert _same_bits(got[:, :offset], full[:, :offset].clone())  # columns outside the view untouched
