"""NumPy FP64 reference of the operator contract (README: "The operator"). Every numerics test uses it."""
from __future__ import annotations

import numpy as np

from flashgemm.op.variant import MASKED_AT_OR_BELOW


def fused_gemm_softmax_ref(a, b, bias=None, mask=None, *, scale=1.0, trans_b=False, causal=False, mask_fill=None,
                           causal_fill=None):
    """P = softmax_rowwise(scale * A @ B + bias + mask) in float64, ONNX MatMul broadcasting.

    mask: bool (False = masked out) or additive float (<= -65504, -inf included, = masked out).
    Masked elements get probability 0; a fully masked row is all zeros. causal: bottom-right aligned,
    (i, j) masked iff j > i + (N - M). A -inf logit is masked too. mask_fill (a number, with a bool mask: the op's
    attribute mask_fill, its value op.variant.MASK_FILL[dtype]): a False entry's logit is mask_fill instead, as
    Where(mask, logits, mask_fill) makes it (a row False everywhere is then uniform). causal_fill (a number, with
    causal: the op's attribute causal_fill, its value FILL_LOGIT[dtype]): past the diagonal the logit is
    scale * (A @ B) + causal_fill instead of masked out, bias and mask not added there (a decoder's mask of the
    scores' shape, its causal rule and padding in one, gives those keys its lowest alone).
    Special values (README, "Special values"): a row with a NaN or +inf logit among its unmasked elements is NaN
    in every element, as PyTorch's softmax of the same logits is (max, exp(x - max), sum: a NaN anywhere in the row
    makes the sum NaN). Masked elements are never read, so a NaN there changes nothing. Returns float64.
    """
    with np.errstate(invalid="ignore"):  # inf * 0, inf - inf, NaN arithmetic: NaN on purpose (docstring)
        a = np.asarray(a).astype(np.float64)
        b = np.asarray(b).astype(np.float64)
        if trans_b:
            b = np.swapaxes(b, -1, -2)
        x = np.matmul(a, b) * float(scale)
        m, n = x.shape[-2:]
        masked = np.zeros(x.shape, dtype=bool)
        if bias is not None:
            x = x + np.asarray(bias).astype(np.float64)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.dtype == np.bool_ and mask_fill is not None:
                x = np.where(mask, x, float(mask_fill))
            elif mask.dtype == np.bool_:
                masked = masked | ~mask
            else:
                mv = mask.astype(np.float64)
                masked = masked | (mv <= MASKED_AT_OR_BELOW)
                x = x + np.where(mv <= MASKED_AT_OR_BELOW, 0.0, mv)
        if causal:
            i = np.arange(m)[:, None]
            j = np.arange(n)[None, :]
            if causal_fill is not None:
                future = np.broadcast_to(j > i + (n - m), x.shape)
                x = np.where(future, np.matmul(a, b) * float(scale) + float(causal_fill), x)
                masked = np.where(future, False, np.broadcast_to(masked, x.shape))
            else:
                masked = masked | (j > i + (n - m))
        masked = np.broadcast_to(masked, x.shape) | np.isneginf(x)
        x = np.where(masked, -np.inf, x)
        row_max = x.max(axis=-1, keepdims=True) if n else np.zeros(x.shape[:-1] + (1,))  # NaN if any is NaN
        safe_max = np.where(np.isneginf(row_max), 0.0, row_max)
        e = np.where(masked, 0.0, np.exp(x - safe_max))
        s = e.sum(axis=-1, keepdims=True)
        return np.where(s == 0, 0.0, e / np.where(s == 0, 1.0, s))


def fused_attention_ref(q, k, v, bias=None, mask=None, *, scale=1.0, trans_b=False, causal=False,
                        zero_nan_rows=False, mask_fill=None, causal_fill=None):
    """O = softmax_rowwise(scale * Q @ K + bias + mask) @ V in float64: FusedGemmSoftmax's P (fused_gemm_softmax_ref:
    masks, causal, special values) times V, as the unfused MatMul computes it (a NaN or inf in V reaches every row,
    0 * NaN being NaN: a fully masked row is 0, NaN in a column of V holding a NaN or inf). zero_nan_rows: P's NaN rows
    are zero rows first, as Where(IsNaN(P), 0, P) makes them. k: [..., K, N], or [..., N, K] with trans_b (the
    exporters' K^T); v: [..., N, D]. Returns float64."""
    p = fused_gemm_softmax_ref(q, k, bias, mask, scale=scale, trans_b=trans_b, causal=causal, mask_fill=mask_fill,
                               causal_fill=causal_fill)
    if zero_nan_rows:
        p = np.where(np.isnan(p), 0.0, p)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.matmul(p, np.asarray(v).astype(np.float64))
