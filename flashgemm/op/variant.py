"""What one compiled kernel computes: the operator's variant and its canonical (4-D) problem shape.

The ONNX op takes tensors of any rank with ONNX MatMul batch broadcasting. Every kernel instead
sees a canonical form, computed the same way here and in the C++ op (`flashgemm/ort/csrc/canonical.h`):

    A [B0, B1, M, K], B [B0, B1, K, N] (or [B0, B1, N, K] with trans_b),
    bias / mask [B0, B1, M, N] with arbitrary element strides (0 on broadcast dims),
    P [B0, B1, M, N] compact.

The batch dims of all tensors are broadcast to one batch shape, size-1 dims dropped, and adjacent
dims merged whenever every tensor's strides allow it. Two dims are enough for every pattern met in
practice (e.g. a [B, 1, 1, N] padding mask against [B, H, M, N] scores); a pattern that needs three
is rejected with an error that says so.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

DTYPES = {"float16": "f16", "bfloat16": "bf16"}
MASK_KINDS = ("none", "add", "bool", "fill")
BOOL_MASK_KINDS = ("bool", "fill")  # the kinds whose mask is bool (a kernel's uint8)
MASKED_AT_OR_BELOW = -65504.0  # additive mask values at or below this (fp16's lowest finite) mask out
# "fill" (a bool mask read as torch's masked_fill(~mask, torch.finfo(dtype).min)): a false entry's logit is the
# dtype's lowest finite value, so that a row false everywhere is uniform, as the original Where + Softmax makes it
MASK_FILL = {"float16": -65504.0, "bfloat16": -3.3895313892515355e38}
# ... as the float32 kernels compute a false entry's logit: bfloat16's lowest times log2(e) would overflow their exp2
# form (flashgemm/codegen/tir/rewrite_softmax_arithmetic.py: logits past -2.3e38), and a row false everywhere would be
# zeros. -2**127 instead: its product with float32's log2(e) is exact, so in a row false everywhere (its max the fill)
# exp2(fill * L - max * L) is exp2(0) even where nvcc contracts it into an FMA (with -2e38 that FMA leaves the product's
# rounding error, up to 2**103: such rows were NaN or zeros). The same function for every logit above it. causal_fill
# puts the keys past the diagonal at it too, and the rewrite writes a decoder's padding bias at it (bfloat16's lowest
# in a bias overflows the kernels' log2-scaled logits to -inf), so that a row seeing only padding attends to every key.
FILL_LOGIT = {dtype: max(value, -2.0 ** 127) for dtype, value in MASK_FILL.items()}
# FusedAttention's tensor-core kernels (flashgemm/kernel/fused_attention_mma.py): the head sizes they serve (Q's and
# V's equal), and the multiple of N they need with K as [D, N] (its rows copied in 16-byte chunks)
ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 128)
ATTENTION_N_MULTIPLE_KN = 8
INT32_MAX = 2**31 - 1


class ShapeError(ValueError):
    """An input shape combination the operator does not accept."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """The compile-time choices of a kernel (everything but the sizes)."""

    dtype: str = "float16"  # of A, B, bias, additive mask and P
    trans_b: bool = False  # B is [..., N, K]
    has_bias: bool = False
    mask: str = "none"  # "none" | "add" (additive, same dtype) | "bool" (true = keep) | "fill" (bool, false = lowest)
    causal: bool = False  # bottom-right aligned: (i, j) is masked iff j > i + (N - M)
    # causal_fill (with causal and a bias: a decoder's causal rule taken out of its bias): (i, j) past the diagonal
    # is not masked out but at the lowest logit, s + FILL_LOGIT, as the decoder's mask of the scores' shape gives it;
    # exact where a row's every visible key is at the fill too (it then attends to every key, as there)
    causal_fill: bool = False

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.mask not in MASK_KINDS:
            raise ValueError(f"mask must be one of {MASK_KINDS}, got {self.mask!r}")
        if self.causal_fill and not (self.causal and self.has_bias):
            raise ValueError("causal_fill needs causal and a bias (the padding left of a decoder's mask)")

    @property
    def key(self) -> str:
        """Stable short name, used in function names and the manifest."""
        return (f"{DTYPES[self.dtype]}_tb{int(self.trans_b)}_bias{int(self.has_bias)}"
                f"_mask{self.mask}_causal{'fill' if self.causal_fill else int(self.causal)}")

    @staticmethod
    def all() -> list["Variant"]:
        return [Variant(d, t, b, m, c, f) for d in DTYPES for t in (False, True) for b in (False, True)
                for m in MASK_KINDS for c, f in ((False, False), (True, False), (True, True)) if b or not f]


@dataclasses.dataclass(frozen=True)
class CanonicalShape:
    """Sizes of the canonical 4-D problem, and the element strides of each input.

    Strides are given for the canonical dims [B0, B1, rows, cols]; 0 marks a broadcast dim.
    """

    b0: int
    b1: int
    m: int
    n: int
    k: int
    out_shape: tuple  # P's ONNX shape (broadcast batch dims + [M, N])
    a_strides: tuple
    b_strides: tuple
    bias_strides: Optional[tuple] = None
    mask_strides: Optional[tuple] = None
    # FusedAttention (canonicalize with v_shape): V [B0, B1, N, D]'s strides and D; out_shape is then O's
    v_strides: Optional[tuple] = None
    d: Optional[int] = None
    out_strides: Optional[tuple] = None  # P's (or O's) strides, compact unless O is BSNH
    k_offset: int = 0  # packed_qkv: where K and V start in the one Q/K/V tensor, in elements (Q at 0)
    v_offset: int = 0

    @property
    def sizes(self) -> tuple:
        return (self.b0, self.b1, self.m, self.n, self.k)


def _broadcast(shapes: Sequence[Sequence[int]], what: str) -> list[int]:
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s):
            j = rank - len(s) + i
            if d != out[j] and d != 1 and out[j] != 1:
                raise ShapeError(f"{what}: batch dims {[list(x) for x in shapes]} are not broadcastable")
            if d != 1:
                out[j] = d
    return out


def _compact_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    return strides


def _aligned_strides(shape: Sequence[int], full: Sequence[int]) -> list[int]:
    """Element strides of a compact tensor `shape` read as if broadcast to `full` (0 = broadcast)."""
    own = _compact_strides(shape)
    pad = len(full) - len(shape)
    return [0 if i < pad or shape[i - pad] == 1 else own[i - pad] for i in range(len(full))]


BSNH_NAMES = ("Q", "K", "V", "O")  # FusedAttention's tensors that its bsnh attribute may flag, in its order


def _bsnh_view(shape: list, name: str, packed: bool = False) -> tuple:
    """A BSNH tensor [batch, sequence, heads, head size] read as [batch, heads, sequence, head size]: that shape,
    the strides of its two batch dims (0 where 1: broadcast) and its row stride (heads * head size). packed: the
    tensor is [batch, sequence, 3, heads, head size] (packed_qkv), whose rows hold Q's, K's and V's heads in turn."""
    if packed and (len(shape) != 5 or shape[2] != 3):
        raise ShapeError(f"{name} is packed with K and V (attribute packed_qkv), so Q, K and V must be one tensor "
                         f"[batch, sequence, 3, heads, head size], got shape {shape}")
    if packed:
        shape = shape[:2] + shape[3:]
    if len(shape) != 4:
        raise ShapeError(f"{name} is BSNH (attribute bsnh), so it must be [batch, sequence, heads, head size], "
                         f"got shape {shape}")
    b, s, h, d = shape
    row = h * d * (3 if packed else 1)
    return [b, h, s, d], [0 if b == 1 else s * row, 0 if h == 1 else d], row


def canonicalize(a_shape, b_shape, trans_b=False, bias_shape=None, mask_shape=None,
                 v_shape=None, bsnh=(False, False, False, False), packed_qkv=False) -> CanonicalShape:
    """ONNX-level input shapes -> the canonical problem. Raises ShapeError with the reason.
    v_shape: FusedAttention's V [..., N, D], whose batch dims must broadcast to P's (MatMul(P, V) then keeps P's);
    the output is then O [batch..., M, D].
    bsnh: FusedAttention's flags for Q, K, V and O (BSNH_NAMES): a flagged tensor is [batch, sequence, heads, head
    size] (ONNX Runtime's BSNH), read through strides as its Transpose [batch, heads, sequence, head size] - the
    layout the projections produce, so that the Transposes around attention need not run. K needs transB=1 for it,
    O two batch dims (it is then [batch, M, heads, D]).
    packed_qkv: Q, K and V are one tensor [batch, sequence, 3, heads, head size] (a_shape, b_shape and v_shape all
    its shape; one MatMul's output with the three projections' weights side by side), Q, K and V its slices 0, 1 and
    2 of dim 2, each read as BSNH (bsnh must flag all three); K and V start k_offset and v_offset elements in."""
    a_shape, b_shape = [int(d) for d in a_shape], [int(d) for d in b_shape]
    if any(d < 0 for d in a_shape + b_shape):
        raise ShapeError("negative dimension")
    bq, bk, bv, bo = (bool(x) for x in bsnh)
    if (bq or bk or bv or bo) and v_shape is None:
        raise ShapeError("bsnh is FusedAttention's (it needs V)")
    if bk and not trans_b:
        raise ShapeError("K is BSNH (attribute bsnh), which is [batch, sequence, heads, head size]: that needs "
                         "transB=1")
    if packed_qkv and not (bq and bk and bv and v_shape is not None):
        raise ShapeError("packed_qkv reads Q, K and V as [batch, sequence, heads, head size]: attribute bsnh must "
                         "flag Q, K and V (bsnh = [1, 1, 1, 0 or 1])")
    if packed_qkv and not (a_shape == b_shape == [int(x) for x in v_shape]):
        raise ShapeError(f"packed_qkv: Q, K and V must be the one tensor [batch, sequence, 3, heads, head size], got "
                         f"shapes {a_shape}, {b_shape}, {[int(x) for x in v_shape]}")
    qkv_shape = list(a_shape)
    views = {}  # tensor -> (its batch dims' strides, row stride) where BSNH
    if bq:
        a_shape, *views["a"] = _bsnh_view(a_shape, "Q", packed_qkv)
    if bk:
        b_shape, *views["b"] = _bsnh_view(b_shape, "K", packed_qkv)
    if len(a_shape) < 2:
        raise ShapeError(f"A must have rank >= 2 ([..., M, K]), got shape {a_shape}")
    if len(b_shape) < 2:
        raise ShapeError(f"B must have rank >= 2 ([..., K, N] or [..., N, K] with transB=1), got shape {b_shape}")
    m, k = a_shape[-2:]
    n, kb = (b_shape[-2], b_shape[-1]) if trans_b else (b_shape[-1], b_shape[-2])
    if k != kb:
        raise ShapeError(f"K mismatch: A is {a_shape} (K={k}) but B is {b_shape} (K={kb}, transB={int(trans_b)})")
    batch = _broadcast([a_shape[:-2], b_shape[:-2]], "A and B")
    out_shape = tuple(batch + [m, n])
    dv = None  # V's D
    if v_shape is not None:
        v_shape = [int(x) for x in v_shape]
        if any(x < 0 for x in v_shape):
            raise ShapeError("negative dimension")
        if bv:
            v_shape, *views["v"] = _bsnh_view(v_shape, "V", packed_qkv)
        if len(v_shape) < 2 or v_shape[-2] != n:
            raise ShapeError(f"V must be [..., N, D] with N={n} (the columns of Q·K), got shape {v_shape}")
        v_batch = v_shape[:-2]
        if len(v_batch) > len(batch) or any(x not in (1, o) for x, o in zip(v_batch[::-1], batch[::-1])):
            raise ShapeError(f"V's batch dims {v_batch} do not broadcast to those of Q·K {batch}")
        dv = v_shape[-1]
    extra = {}
    for name, shp in (("bias", bias_shape), ("mask", mask_shape)):
        if shp is None:
            continue
        shp = [int(d) for d in shp]
        if len(shp) > len(out_shape) or any(
                d not in (1, o) for d, o in zip(shp[::-1], out_shape[::-1])):
            raise ShapeError(f"{name} of shape {shp} is not broadcastable to the output shape {list(out_shape)}")
        extra[name] = _aligned_strides(shp, out_shape)
    # Per-tensor strides over the batch dims only (element units), 0 where broadcast.
    nb = len(batch)
    batch_strides = {
        "a": _aligned_strides(a_shape[:-2], batch),
        "b": _aligned_strides(b_shape[:-2], batch),
    }
    a_blk, b_blk = m * k, n * k
    batch_strides["a"] = [s * a_blk for s in batch_strides["a"]]
    batch_strides["b"] = [s * b_blk for s in batch_strides["b"]]
    for name, st in extra.items():
        batch_strides[name] = st[:nb]
    if dv is not None:
        batch_strides["v"] = [s * n * dv for s in _aligned_strides(v_shape[:-2], batch)]
    batch_strides["p"] = [s * m * (n if dv is None else dv) for s in _compact_strides(batch)]
    if bo:
        if len(batch) != 2:
            raise ShapeError(f"O is BSNH (attribute bsnh), so Q·K must have two batch dims [batch, heads], "
                             f"got {batch}")
        views["p"] = [m * batch[1] * dv, dv], batch[1] * dv
    for t, (strides, _) in views.items():  # a BSNH tensor's batch strides are its own (rank 4: the last two dims)
        batch_strides[t] = [0] * (nb - 2) + list(strides)
    # Coalesce batch dims: drop size-1 dims, merge neighbours that every tensor walks contiguously.
    dims = [(d, {t: s[i] for t, s in batch_strides.items()}) for i, d in enumerate(batch) if d != 1]
    merged: list = []
    for d, st in reversed(dims):  # innermost first
        if merged:
            d_in, st_in = merged[-1]
            if all(st[t] == st_in[t] * d_in for t in st):
                merged[-1] = (d * d_in, st_in)
                continue
        merged.append((d, st))
    merged.reverse()
    if len(merged) > 2:
        raise ShapeError(
            f"batch broadcast pattern of A {a_shape}, B {b_shape}, bias {bias_shape}, mask {mask_shape} needs "
            f"{len(merged)} independent batch dims; the kernels take two. Expand (materialize) the bias/mask "
            "or reshape the inputs so that fewer batch dims broadcast differently.")
    while len(merged) < 2:
        merged.insert(0, (1, {t: 0 for t in batch_strides}))
    (b0, s0), (b1, s1) = merged

    def four(t, inner):
        return (s0[t], s1[t], *inner)

    shape = CanonicalShape(
        b0=b0, b1=b1, m=m, n=n, k=k, out_shape=out_shape,
        a_strides=four("a", (k, 1)),
        b_strides=four("b", (k, 1) if trans_b else (n, 1)),
        bias_strides=four("bias", tuple(extra["bias"][nb:])) if "bias" in extra else None,
        mask_strides=four("mask", tuple(extra["mask"][nb:])) if "mask" in extra else None,
        v_strides=four("v", (views["v"][1] if bv else dv, 1)) if dv is not None else None, d=dv,
        out_strides=four("p", (views["p"][1] if bo else n if dv is None else dv, 1)),
    )
    if bq:
        shape = dataclasses.replace(shape, a_strides=four("a", (views["a"][1], 1)))
    if bk:
        shape = dataclasses.replace(shape, b_strides=four("b", (views["b"][1], 1)))
    if dv is not None:
        o_shape = [batch[0], m, batch[1], dv] if bo else batch + [m, dv]
        shape = dataclasses.replace(shape, out_shape=tuple(o_shape))
    if packed_qkv:
        shape = dataclasses.replace(shape, k_offset=qkv_shape[3] * qkv_shape[4], v_offset=2 * qkv_shape[3] * qkv_shape[4])
    if max(b0 * b1 * m * max(n, k, dv or 0), b0 * b1 * n * max(k, dv or 0)) > INT32_MAX:
        raise ShapeError(f"problem {shape.sizes} has tensors of more than 2^31 elements; the kernels index in int32")
    if math.prod(shape.out_shape) > INT32_MAX:
        raise ShapeError(f"output of {math.prod(shape.out_shape)} elements exceeds the int32 index range")
    return shape
