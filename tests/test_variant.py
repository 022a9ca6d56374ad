"""Canonicalization of ONNX-level shapes into the kernels' 4-D problem (flashgemm/op/variant.py).
The C++ op implements the same algorithm; test_ort_op.py checks the two agree through ORT."""
import pytest

from flashgemm.op.variant import ShapeError, Variant, canonicalize


def test_attention_scores_with_padding_mask():
    # Q [B,H,M,K] . K^T with a [B,1,1,N] padding mask: two independent batch groups.
    c = canonicalize((2, 3, 5, 4), (2, 3, 7, 4), True, (7,), (2, 1, 1, 7))
    assert c.sizes == (2, 3, 5, 7, 4)
    assert c.out_shape == (2, 3, 5, 7)
    assert c.a_strides == (60, 20, 4, 1) and c.b_strides == (84, 28, 4, 1)
    assert c.bias_strides == (0, 0, 0, 1)
    assert c.mask_strides == (7, 0, 0, 1)


def test_batch_dims_merge_when_every_tensor_is_contiguous():
    c = canonicalize((2, 3, 4, 5, 6), (2, 3, 4, 6, 7))
    assert c.sizes == (1, 24, 5, 7, 6)
    assert c.a_strides[:2] == (0, 30) and c.b_strides[:2] == (0, 42)


def test_b_shared_across_batch():
    c = canonicalize((4, 8, 16, 32), (32, 64))
    assert c.sizes == (1, 32, 16, 64, 32)
    assert c.b_strides == (0, 0, 64, 1)


def test_a_broadcast_against_b():
    c = canonicalize((1, 16, 32), (5, 32, 8))
    assert c.sizes == (1, 5, 16, 8, 32)
    assert c.a_strides[:2] == (0, 0) and c.b_strides[:2] == (0, 256)


def test_bias_full_and_row_shapes():
    c = canonicalize((2, 3, 4), (2, 4, 5), bias_shape=(2, 3, 5), mask_shape=(3, 1))
    assert c.bias_strides == (0, 15, 5, 1)
    assert c.mask_strides == (0, 0, 1, 0)


def test_no_batch():
    c = canonicalize((3, 4), (4, 5))
    assert c.sizes == (1, 1, 3, 5, 4)


@pytest.mark.parametrize("args, message", [
    (((3, 4), (5, 6)), "K mismatch"),
    (((3, 4), (6, 4), False), "K mismatch"),
    (((4,), (4, 5)), "rank >= 2"),
    (((3, 4), (4,)), "rank >= 2"),
    (((2, 3, 4), (3, 4, 5)), "not broadcastable"),
    (((2, 3, 4), (2, 4, 5), False, (4, 5)), "bias of shape"),
    (((2, 3, 4), (2, 4, 5), False, None, (2, 2, 3, 5)), "mask of shape"),
    (((2, 3, 5, 3, 4), (2, 1, 5, 4, 6), False, None, (2, 3, 1, 1, 6)), "independent batch dims"),
])
def test_bad_shapes_raise_with_the_reason(args, message):
    with pytest.raises(ShapeError, match=message):
        canonicalize(*args)


def test_variant_rejects_unknown_dtype_and_mask():
    with pytest.raises(ValueError, match="dtype"):
        Variant("float32")
    with pytest.raises(ValueError, match="mask"):
        Variant(mask="mul")
    assert len({v.key for v in Variant.all()}) == 80


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fill_logit_survives_the_kernels_exp2_form(dtype):
    """A row false everywhere has the fill as its max, and the CUDA kernels compute exp2(fill * L - max * L) with
    max * L rounded and the first product possibly fused into an FMA (unrounded): the difference is the rounding
    error of fill * L, which exp2 must keep finite and nonzero (else the row is NaN or zeros, not uniform). With
    bfloat16's fill at -2e38 it was 4e30."""
    import numpy as np  # noqa: PLC0415

    from flashgemm.codegen.tir.rewrite_softmax_arithmetic import LOG2E, M_FLOOR
    from flashgemm.op.variant import FILL_LOGIT, MASK_FILL

    fill, log2e = np.float32(FILL_LOGIT[dtype]), np.float32(LOG2E)
    assert fill >= M_FLOOR and FILL_LOGIT[dtype] >= MASK_FILL[dtype]
    assert np.isfinite(fill * log2e)
    residual = float(fill) * float(log2e) - float(fill * log2e)
    assert abs(residual) < 1.0, residual


def _read(flat, c_strides, shape):
    """The elements a kernel reads from `flat` through canonical element strides, as an array of `shape`."""
    import numpy as np  # noqa: PLC0415
    idx = sum(np.arange(n).reshape([-1 if i == j else 1 for j in range(4)]) * s
              for i, (n, s) in enumerate(zip(shape, c_strides)))
    return flat[idx]


@pytest.mark.parametrize("seed", range(40))
def test_bsnh_strides_read_the_transposed_tensors(seed):
    """FusedAttention's BSNH tensors (bsnh): read through the canonical strides, the flat [batch, sequence, heads,
    head size] buffers give exactly their Transpose [batch, heads, sequence, head size] broadcast to the problem, and
    O's strides put element (b, h, i, d) at O[b, i, h, d]; with batch and heads merged or not (M = 1, broadcasts)."""
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    b, h, m, n, d = (int(rng.choice(x)) for x in ([1, 2, 3], [1, 2, 4], [1, 5], [1, 6], [8, 16]))
    flags = [bool(f) for f in rng.integers(0, 2, 4)]
    own_b = {t: (1 if rng.random() < 0.25 and t != "K" else b) for t in "QKV"}  # (V never wider than Q·K)
    logical = {t: (own_b[t], h, m if t == "Q" else n, d) for t in "QKV"}
    x = {t: rng.standard_normal(s) for t, s in logical.items()}
    onnx_in = {t: x[t].transpose(0, 2, 1, 3) if f else x[t] for t, f in zip("QKV", flags)}
    c = canonicalize(onnx_in["Q"].shape, onnx_in["K"].shape, True, v_shape=onnx_in["V"].shape, bsnh=flags)
    bb = (c.b0, c.b1)
    assert bb[0] * bb[1] == b * h and (c.m, c.n, c.k, c.d) == (m, n, d, d)
    for t, strides in (("Q", c.a_strides), ("K", c.b_strides), ("V", c.v_strides)):
        full = np.broadcast_to(x[t], (b, h) + x[t].shape[2:]).reshape(bb + x[t].shape[2:])
        got = _read(np.ascontiguousarray(onnx_in[t]).ravel(), strides, bb + x[t].shape[2:])
        np.testing.assert_array_equal(got, full, err_msg=t)
    o = np.arange(b * h * m * d).reshape((b, m, h, d) if flags[3] else (b, h, m, d))
    assert c.out_shape == o.shape
    logical_o = o.transpose(0, 2, 1, 3) if flags[3] else o
    np.testing.assert_array_equal(_read(o.ravel(), c.out_strides, bb + (m, d)), logical_o.reshape(bb + (m, d)))


def test_bsnh_refusals():
    with pytest.raises(ShapeError, match="needs transB=1"):
        canonicalize((2, 5, 3, 8), (2, 3, 8, 7), False, v_shape=(2, 3, 7, 8), bsnh=(0, 1, 0, 0))
    with pytest.raises(ShapeError, match=r"V is BSNH .* got shape \[7, 3, 8\]"):
        canonicalize((2, 3, 5, 8), (2, 3, 7, 8), True, v_shape=(7, 3, 8), bsnh=(0, 0, 1, 0))
    with pytest.raises(ShapeError, match="two batch dims"):
        canonicalize((4, 2, 3, 5, 8), (4, 2, 3, 7, 8), True, v_shape=(4, 2, 3, 7, 8), bsnh=(0, 0, 0, 1))
    with pytest.raises(ShapeError, match="it needs V"):
        canonicalize((2, 5, 3, 8), (2, 7, 3, 8), True, bsnh=(1, 0, 0, 0))


@pytest.mark.parametrize("seed", range(20))
def test_packed_qkv_strides_read_each_slice(seed):
    """packed_qkv: Q, K and V are one tensor [batch, sequence, 3, heads, head size]; through the canonical strides
    and offsets its flat buffer gives exactly slice 0, 1 and 2 of dim 2, each transposed to [batch, heads, sequence,
    head size] (batch and heads merged or not)."""
    import numpy as np  # noqa: PLC0415
    rng = np.random.default_rng(seed)
    b, s, h, d = (int(rng.choice(x)) for x in ([1, 2, 3], [1, 5, 7], [1, 2, 4], [8, 16]))
    qkv = rng.standard_normal((b, s, 3, h, d))
    o_bsnh = int(rng.integers(0, 2))
    c = canonicalize(qkv.shape, qkv.shape, True, v_shape=qkv.shape, bsnh=(1, 1, 1, o_bsnh), packed_qkv=True)
    bb = (c.b0, c.b1)
    assert bb[0] * bb[1] == b * h and (c.m, c.n, c.k, c.d) == (s, s, d, d)
    assert (c.k_offset, c.v_offset) == (h * d, 2 * h * d)
    flat = qkv.ravel()
    for i, (strides, offset) in enumerate(((c.a_strides, 0), (c.b_strides, c.k_offset), (c.v_strides, c.v_offset))):
        want = qkv[:, :, i].transpose(0, 2, 1, 3).reshape(bb + (s, d))
        np.testing.assert_array_equal(_read(flat[offset:], strides, bb + (s, d)), want, err_msg=str(i))
    assert c.out_shape == ((b, s, h, d) if o_bsnh else (b, h, s, d))


def test_packed_qkv_refusals():
    qkv = (2, 5, 3, 4, 8)
    with pytest.raises(ShapeError, match=r"bsnh must flag Q, K and V"):
        canonicalize(qkv, qkv, True, v_shape=qkv, bsnh=(1, 1, 0, 0), packed_qkv=True)
    with pytest.raises(ShapeError, match=r"must be the one tensor .* got shapes \[2, 5, 3, 4, 8\], \[2, 6, 3, 4, 8\]"):
        canonicalize(qkv, (2, 6, 3, 4, 8), True, v_shape=qkv, bsnh=(1, 1, 1, 0), packed_qkv=True)
    with pytest.raises(ShapeError, match=r"Q is packed with K and V .* got shape \[2, 5, 2, 4, 8\]"):
        canonicalize((2, 5, 2, 4, 8), (2, 5, 2, 4, 8), True, v_shape=(2, 5, 2, 4, 8), bsnh=(1, 1, 1, 0),
                     packed_qkv=True)
