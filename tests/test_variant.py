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
    assert len({v.key for v in Variant.all()}) == 48
