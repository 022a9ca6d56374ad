"""The FP64 NumPy reference is the oracle of every numerics test: check it against the contract by hand."""
import numpy as np

from flashgemm.op.reference import fused_gemm_softmax_ref


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_plain_softmax_of_scaled_product():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    np.testing.assert_allclose(fused_gemm_softmax_ref(a, b, scale=0.5), softmax(0.5 * a @ b), rtol=1e-12)
    np.testing.assert_allclose(fused_gemm_softmax_ref(a, b.T, trans_b=True), softmax(a @ b), rtol=1e-12)


def test_bias_and_masks():
    rng = np.random.default_rng(1)
    a, b, bias = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)
    keep = np.array([True, False, True, True, False])
    x = a @ b + bias
    want = softmax(np.where(keep, x, -np.inf))
    np.testing.assert_allclose(fused_gemm_softmax_ref(a, b, bias, keep), want, rtol=1e-12)
    for masked_value in (-np.inf, -1e9, -65504.0):  # all count as "masked out"
        add = np.where(keep, 0.0, masked_value)
        np.testing.assert_allclose(fused_gemm_softmax_ref(a, b, bias, add), want, rtol=1e-12)
    # a large but legal additive value is added, not treated as a mask
    add = np.where(keep, 0.0, -30.0)
    np.testing.assert_allclose(fused_gemm_softmax_ref(a, b, bias, add), softmax(x + add), rtol=1e-12)


def test_fully_masked_row_is_zero_not_nan():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    mask = np.array([[True] * 4, [False] * 4])
    p = fused_gemm_softmax_ref(a, b, mask=mask)
    assert not np.isnan(p).any()
    np.testing.assert_array_equal(p[1], 0.0)
    np.testing.assert_allclose(p[0], 0.25)


def test_causal_is_bottom_right_aligned():
    a, b = np.zeros((2, 1)), np.zeros((1, 4))  # M=2, N=4: row i sees columns j <= i + 2
    p = fused_gemm_softmax_ref(a, b, causal=True)
    np.testing.assert_allclose(p, [[1 / 3, 1 / 3, 1 / 3, 0], [0.25] * 4])
    a, b = np.zeros((4, 1)), np.zeros((1, 2))  # M=4, N=2: rows 0 and 1 see nothing -> zeros
    p = fused_gemm_softmax_ref(a, b, causal=True)
    np.testing.assert_allclose(p, [[0, 0], [0, 0], [1, 0], [0.5, 0.5]])


def test_special_values_follow_pytorchs_softmax_of_the_unmasked_logits():
    """README "Special values": a NaN or +inf among a row's unmasked logits makes the whole row NaN, as the plain
    softmax (max, exp(x - max), sum) of those logits does; a masked logit is never read; a fully masked row is zeros;
    -inf is masked."""
    a = np.ones((1, 6, 2))
    b = np.full((2, 4), 0.5)
    bias = np.zeros((6, 4))
    mask = np.ones((6, 4), bool)
    bias[0, 1] = np.nan                       # row 0: NaN logit
    bias[1, 2] = np.inf                       # row 1: +inf logit
    bias[2, 3], mask[2, 3] = np.nan, False    # row 2: NaN where the mask takes the element out
    mask[3, :], bias[3, 0] = False, np.nan    # row 3: fully masked, NaN inside
    bias[4, 0] = -np.inf                      # row 4: -inf masks its element
    p = fused_gemm_softmax_ref(a, b, bias, mask)[0]
    logits = (a @ b)[0] + bias

    def plain_softmax(x):
        with np.errstate(invalid="ignore"):
            e = np.exp(x - x.max())
            return e / e.sum()
    assert np.isnan(p[0]).all() and np.isnan(plain_softmax(logits[0])).all()
    assert np.isnan(p[1]).all() and np.isnan(plain_softmax(logits[1])).all()
    np.testing.assert_allclose(p[2], [1 / 3, 1 / 3, 1 / 3, 0], rtol=1e-15)
    assert not p[3].any() and not np.isnan(p[3]).any()
    np.testing.assert_allclose(p[4], [0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-15)
    np.testing.assert_allclose(p[5], plain_softmax(logits[5]), rtol=1e-15)
