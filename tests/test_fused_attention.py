"""FusedAttention's definition (flashgemm/kernel/fused_attention.py) compiled as the generic llvm kernel
(flashgemm/spaces/llvm.attention_generic_schedule) against the FP64 reference (fused_attention_ref): every variant,
odd sizes, K^T and K, D != K, and the special values of the contract (NaN rows, V's NaN, fully masked rows; NaN rows
zeroed with zero_nan_rows). (The tensor-core kernel runs only on a GPU: tests/test_ort_attention.py;
tests/test_cuda_codegen.py builds it.)"""
from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest
import tvm

from flashgemm.kernel.fused_attention import runtime_func
from flashgemm.op.reference import fused_attention_ref
from flashgemm.op.variant import BOOL_MASK_KINDS, FILL_LOGIT, MASK_FILL, Variant
from flashgemm.spaces import llvm

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# P leaves in fp32 here (the reference's P is exact): the error is O's rounding plus fp32 sums over N
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
VARIANTS = Variant.all()


@pytest.fixture(scope="module")
def kernels():
    """Every variant in one llvm module (one compile)."""
    funcs = {f"attn_{v.key}": llvm.attention_generic_schedule(runtime_func(v, name=f"attn_{v.key}")).mod["main"]
             for v in VARIANTS}
    target = llvm.export_target(tvm.target.Target("llvm"))
    return tvm.compile(tvm.IRModule(funcs), target=target)


def run(kernels, v: Variant, q, k, vv, bias=None, mask=None, scale=1.0, zero_nan_rows=0):
    dev = tvm.cpu()
    o = np.zeros(q.shape[:-1] + (vv.shape[-1],), NP[v.dtype])
    args = [q, k, vv] + ([bias] if v.has_bias else []) + ([mask.astype(np.uint8) if v.mask in BOOL_MASK_KINDS else mask]
                                                          if v.mask != "none" else []) + [o]
    tensors = [tvm.runtime.tensor(x, dev) for x in args]
    kernels[f"attn_{v.key}"](*tensors, float(scale), int(zero_nan_rows))
    return tensors[-1].numpy()


def inputs(v: Variant, sizes, seed=0):
    b0, b1, m, n, k, d = sizes
    rng = np.random.default_rng(seed)
    dt = NP[v.dtype]
    q = rng.standard_normal((b0, b1, m, k)).astype(dt)
    kt = rng.standard_normal((b0, b1, n, k) if v.trans_b else (b0, b1, k, n)).astype(dt)
    vv = rng.standard_normal((b0, b1, n, d)).astype(dt)
    bias = rng.standard_normal((b0, b1, m, n)).astype(dt) if v.has_bias else None
    mask = None
    if v.mask in BOOL_MASK_KINDS:
        mask = rng.random((b0, b1, m, n)) < 0.7
    elif v.mask == "add":
        with np.errstate(over="ignore"):
            mask = np.where(rng.random((b0, b1, m, n)) < 0.3, -1e9, -rng.random((b0, b1, m, n))).astype(dt)
    return q, kt, vv, bias, mask


def check(kernels, v, q, kt, vv, bias, mask, scale, zero_nan_rows=0):
    out = run(kernels, v, q, kt, vv, bias, mask, scale, zero_nan_rows)
    ref = fused_attention_ref(q, kt, vv, bias, mask, scale=scale, trans_b=v.trans_b, causal=v.causal,
                              zero_nan_rows=zero_nan_rows, mask_fill=MASK_FILL[v.dtype] if v.mask == "fill" else None,
                              causal_fill=FILL_LOGIT[v.dtype] if v.causal_fill else None)
    assert out.dtype == NP[v.dtype] and out.shape == ref.shape
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=0, atol=ATOL[v.dtype])
    return out, ref


@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: v.key)
def test_variants(kernels, v):
    """Odd sizes, M != N (the causal diagonal bottom-right aligned), D != K."""
    check(kernels, v, *inputs(v, (2, 3, 7, 13, 24, 40)), scale=0.2)


@pytest.mark.parametrize("sizes", [(1, 1, 1, 1, 1, 1), (1, 2, 1, 65, 64, 64), (2, 1, 33, 9, 8, 16),
                                   (1, 1, 130, 130, 64, 64)],
                         ids=["all-one", "decode-row", "m-gt-n", "bert-like"])
def test_sizes(kernels, sizes):
    for v in (Variant("float16", True, False, "none", False), Variant("bfloat16", False, True, "add", True)):
        check(kernels, v, *inputs(v, sizes, seed=1), scale=1 / np.sqrt(sizes[4]))


def test_fully_masked_rows_are_zero(kernels):
    """A row with every element masked (bool mask, additive -inf, or causal with M > N) is all zeros (V finite)."""
    v = Variant("float16", True, True, "bool", True)
    q, kt, vv, bias, mask = inputs(v, (1, 2, 9, 5, 16, 8), seed=2)
    mask[0, 1, 2] = False
    out, _ = check(kernels, v, q, kt, vv, bias, mask, 0.25)
    assert not np.any(out[0, 1, 2].astype(np.float32))
    assert not np.any(out[:, :, :4].astype(np.float32))  # causal, M - N = 4: rows 0..3 see no column


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mask_fill_rows_false_everywhere_are_uniform(kernels, dtype):
    """mask "fill" (Where(mask, logits, lowest)): a row false everywhere is uniform, O = the mean of V's rows, where
    "bool" makes it zeros; a NaN behind a false entry is never read; partly false rows are "bool"'s."""
    fill, plain = Variant(dtype, True, True, "fill", False), Variant(dtype, True, True, "bool", False)
    q, kt, vv, bias, mask = inputs(fill, (1, 2, 6, 9, 16, 8), seed=5)
    mask[0, 1, 3] = False
    q[0, 1, 3, 0] = np.nan  # its logits are all NaN, and all replaced
    out, _ = check(kernels, fill, q, kt, vv, bias, mask, 0.25)
    np.testing.assert_allclose(out[0, 1, 3].astype(np.float64), vv[0, 1].astype(np.float64).mean(axis=0),
                               rtol=0, atol=ATOL[dtype])
    zeros = run(kernels, plain, q, kt, vv, bias, mask, 0.25)
    assert not np.any(zeros[0, 1, 3].astype(np.float32))
    kept = np.ones(out.shape[:-1], bool)
    kept[0, 1, 3] = False
    np.testing.assert_allclose(out[kept].astype(np.float64), zeros[kept].astype(np.float64), rtol=0,
                               atol=ATOL[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_causal_fill_is_the_decoders_mask_of_the_scores_shape(kernels, dtype):
    """causal_fill with the padding row [B, 1, 1, N] as the bias, padding at the fill (FILL_LOGIT: where the rewrite
    puts a decoder's lowest), is the op with the decoder's mask of the scores' shape as its bias (the fill past the
    diagonal or at padding, 0 elsewhere), left-padded rows that see only padding included (they attend to every key
    there, as here); plain causal differs at those rows alone."""
    fill, plain = Variant(dtype, True, True, "none", True, True), Variant(dtype, True, True, "none", True)
    full = Variant(dtype, True, True, "none", False)
    q, kt, vv, _, _ = inputs(fill, (2, 2, 9, 12, 16, 8), seed=6)
    lowest = FILL_LOGIT[dtype]
    pad = np.zeros((2, 1, 1, 12))
    pad[0, ..., :5] = lowest  # batch 0 left-padded: its rows 0 and 1 (diagonal at 3 + i) see padding alone
    i, j = np.arange(9)[:, None], np.arange(12)[None, :]
    mask4 = np.where((j > i + 3) | (pad < 0), lowest, 0.0)
    # (the kernels take every operand at the scores' shape here; the op broadcasts them through strides)
    row = np.ascontiguousarray(np.broadcast_to(pad, (2, 2, 9, 12))).astype(NP[dtype])
    mask4 = np.broadcast_to(mask4, (2, 1, 9, 12)).astype(NP[dtype])
    out, _ = check(kernels, fill, q, kt, vv, row, None, 0.25)
    ref = run(kernels, full, q, kt, vv, np.ascontiguousarray(np.broadcast_to(mask4, (2, 2, 9, 12))), None, 0.25)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=0, atol=ATOL[dtype])
    causal = run(kernels, plain, q, kt, vv, row, None, 0.25)
    seeing = np.ones(out.shape[:-1], bool)
    seeing[0, :, :2] = False
    np.testing.assert_allclose(causal[seeing].astype(np.float64), out[seeing].astype(np.float64), rtol=0,
                               atol=ATOL[dtype])
    assert np.abs(causal[~seeing].astype(np.float64) - out[~seeing].astype(np.float64)).max() > 0.01


def test_nan_and_inf(kernels):
    """NaN in, NaN out: a NaN in Q or an +inf logit makes its row NaN, a NaN in V its column of every row (0 * NaN
    in a fully masked one, whose other columns stay 0); a NaN behind a masked element changes nothing."""
    v = Variant("float16", True, False, "bool", False)
    q, kt, vv, _, mask = inputs(v, (1, 1, 6, 8, 16, 8), seed=3)
    mask[0, 0, 5] = False  # row 5 fully masked
    q[0, 0, 1, 3] = np.nan  # row 1: NaN logits
    kt[0, 0, 2, 0] = np.inf  # column 2: +-inf logits where q[.., 0] != 0
    mask[0, 0, :, 2] = False  # ...masked out: no effect
    out, ref = check(kernels, v, q, kt, vv, None, mask, 0.25)
    assert np.isnan(out[0, 0, 1]).all() and not np.isnan(out[0, 0, [0, 2, 3, 4, 5]]).any()
    mask[0, 0, 3, 2] = True  # row 3 now reads the inf column: NaN or a one-hot row, as the reference says
    check(kernels, v, q, kt, vv, None, mask, 0.25)
    vv[0, 0, 4, 1] = np.nan  # V's NaN: column 1 of every row that is not fully masked
    out, ref = check(kernels, v, q, kt, vv, None, mask, 0.25)
    assert np.isnan(out[0, 0, :, 1]).all()
    assert not np.isnan(np.delete(out[0, 0, 5], 1)).any() and not np.any(np.delete(out[0, 0, 5], 1).astype(np.float32))


@pytest.mark.parametrize("v", [Variant("float16", True, False, "bool", False),
                               Variant("bfloat16", False, True, "add", True)], ids=lambda v: v.key)
def test_zero_nan_rows(kernels, v):
    """zero_nan_rows: a NaN row (a NaN in Q, an unmasked +inf logit) is P's zero row, as the SDPA export's
    Where(IsNaN(P), 0, P) makes it, so O's row is 0 * V: zeros, NaN in V's NaN column; every other row is as without
    it."""
    q, kt, vv, bias, mask = inputs(v, (1, 2, 9, 12, 16, 8), seed=4)
    q[0, 1, 6, 3] = np.nan  # row 6 of head 1 (causal, M - N = -3: it sees every column)
    if v.trans_b:
        kt[0, 0, 2, :] = np.inf  # column 2 of head 0: +-inf logits
        mask[0, 0, :, 2] = True
    vv[0, 1, 11, 5] = np.nan  # V's NaN: column 5 of every row of head 1
    out, ref = check(kernels, v, q, kt, vv, bias, mask, 0.25, zero_nan_rows=1)
    np.testing.assert_array_equal(np.isnan(out[0, 1, 6]), np.arange(8) == 5)
    assert not np.any(np.delete(out[0, 1, 6], 5).astype(np.float32))
    plain = run(kernels, v, q, kt, vv, bias, mask, 0.25)
    assert np.isnan(plain[0, 1, 6]).all()
    nan_rows = np.isnan(plain).all(axis=-1)
    np.testing.assert_array_equal(out[~nan_rows], plain[~nan_rows])
