"""O = softmax_rowwise(scale * Q @ K + bias + mask) @ V, causal optional, in TensorIR (TVM 0.27): attention without P.

The definition form, with every size symbolic (B0, B1, M, N, K and V's head size D) and every batch stride symbolic (0 =
broadcast): what the generic kernels compile. Blocks: "S" (fp32 Q·K), "row_max", "exp", "row_sum" exactly as
FusedGemmSoftmax's one-pass form (flashgemm/kernel/fused_gemm_softmax.py: its masking and special-value contract
holds here unchanged), then "O_acc" (fp32 sum over the row's columns of exp · V) and "O" (O_acc / row_sum, a fully
masked row's 0 * V, a NaN row's too with zero_nan_rows != 0). A schedule computes the whole row pipeline at the row, so
neither S nor P reaches memory.

Canonical shapes: Q [B0, B1, M, K]; K [B0, B1, K, N], or [B0, B1, N, K] with trans_b (the exporters' K^T); V
[B0, B1, N, D]; bias and mask [B0, B1, M, N] through strides; O [B0, B1, M, D]. Q, K as [N, K], V and O take any
row and batch strides (the op's BSNH views: flashgemm/op/variant.py:canonicalize); their last dim is contiguous.

Special values, exactly as the unfused MatMul(FusedGemmSoftmax(...), V) computes them (flashgemm/op/reference.py:
fused_attention_ref): a row whose unmasked logits hold a NaN or +inf is NaN (its row_sum is NaN); a NaN or inf in V
reaches every row (0 * NaN is NaN), so a fully masked row (P's row 0) is 0 * V: zeros, NaN in a column of V holding a
NaN or inf. Its "O_acc" sums exactly that; "O" keeps it as 0 or NaN (not the sum's inf).

zero_nan_rows (a runtime int32, the ONNX op's attribute): a NaN row is P's zero row as well, as in exports of
PyTorch's scaled_dot_product_attention, which write Where(IsNaN(P), 0, P) before P V: its NaN probabilities go to
"O_acc" as 0 (its other ones lie in [0, 1], so O_acc stays finite unless V is not), and "O" stores 0 * V.
"""
from __future__ import annotations

import math

import tvm
from tvm.script import tirx as T

from flashgemm.op.variant import BOOL_MASK_KINDS, FILL_LOGIT, MASKED_AT_OR_BELOW, Variant

NEG_INF = float("-inf")


def zero_row(row_sum, zero_nan_rows):
    """Whether P's row is 0: fully masked (row_sum = 0), or NaN (row_sum is) with zero_nan_rows != 0 (the export's
    Where(IsNaN(P), 0, P) before P V)."""
    return tvm.tirx.Or(row_sum == T.float32(0), tvm.tirx.And(zero_nan_rows != 0, T.isnan(row_sum)))


def zero_or_o(o_acc, row_sum, zero_nan_rows, inv_row_sum=None):
    """O's element from its accumulator: o_acc / row_sum (o_acc * inv_row_sum where the caller has the row's
    reciprocal: a row's elements then cost a multiply each, not a division), or for a zero row (zero_row; its o_acc
    summed 0 * V only, or finite multiples of V) 0 * V: 0, NaN where o_acc is not finite."""
    return T.Select(zero_row(row_sum, zero_nan_rows),
                    T.Select(T.isfinite(o_acc), T.float32(0), T.float32(math.nan)),
                    o_acc / row_sum if inv_row_sum is None else o_acc * inv_row_sum)


def zeroed(e, zero_nan_rows):
    """A probability on its way to O_acc: NaN becomes 0 with zero_nan_rows (a NaN row's O is then 0 * V)."""
    return T.Select(tvm.tirx.And(zero_nan_rows != 0, T.isnan(e)), T.float32(0), e)


def _strides(name: str, n: int):
    return tuple(tvm.tirx.Var(f"{name}_s{i}", "int32") for i in range(n))


def runtime_func(variant: Variant, name: str = "main", chunk: int = 0) -> tvm.tirx.PrimFunc:
    """The generic kernel as exported: fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows), every size symbolic,
    any element-aligned pointer. `variant.trans_b` is K's layout.

    chunk: 0, or the recompute form, for a schedule that keeps no row of S (flashgemm/spaces/cuda_generic): the
    pass of the row sum reads its own copy of S ("S_e", "exp"), and the pass of O computes the row's
    probabilities in chunks of `chunk` columns ("S_o", "exp_o": [.., N / chunk, chunk], so that a chunk is a
    static on-chip tile) before "O_acc" adds them up. Past N a chunk's probabilities are 0 and every read is
    clamped to column N - 1.

    The online-softmax (FlashAttention) form, written with its thread bindings, is the CUDA tensor-core kernel
    (flashgemm/kernel/fused_attention_mma.py)."""
    dt = variant.dtype
    B0, B1, M, N, K, D = (tvm.tirx.Var(n, "int32") for n in ("B0", "B1", "M", "N", "K", "D"))
    sq, sk, sv = _strides("Q", 3), _strides("K", 3 if variant.trans_b else 2), _strides("V", 3)
    k_shape = (B0, B1, N, K) if variant.trans_b else (B0, B1, K, N)
    k_strides = (*sk, 1) if variant.trans_b else (*sk, N, 1)
    mask_dtype = "uint8" if variant.mask in BOOL_MASK_KINDS else dt
    has_bias, mask_kind, causal, trans_b = variant.has_bias, variant.mask, variant.causal, variant.trans_b
    causal_fill = variant.causal_fill
    recompute = chunk > 0  # (a Python bool: TVMScript evaluates the `if`s below while parsing)
    CW = max(int(chunk), 1)
    NC = tvm.tirx.floordiv(N + (CW - 1), CW)

    def k_elem(Km, b0, b1, kk, j):
        return Km[b0, b1, j, kk] if trans_b else Km[b0, b1, kk, j]

    def logit(s, Bias, Mask, scale, b0, b1, i, j):  # FusedGemmSoftmax's masked logit of S's element s (Selects)
        x = s * scale
        if has_bias:
            x = x + T.cast(Bias[b0, b1, i, j], "float32")
        if mask_kind == "add":
            mv = T.cast(Mask[b0, b1, i, j], "float32")
            x = T.Select(mv <= T.float32(MASKED_AT_OR_BELOW), T.float32(NEG_INF), x + mv)
        elif mask_kind == "bool":
            x = T.Select(Mask[b0, b1, i, j] != T.uint8(0), x, T.float32(NEG_INF))
        elif mask_kind == "fill":
            x = T.Select(Mask[b0, b1, i, j] != T.uint8(0), x, T.float32(FILL_LOGIT[dt]))
        if causal:  # bottom-right aligned diagonal (FlashAttention >= 2.1); causal_fill: s + the fill there
            x = T.Select(j > i + (N - M), s * scale + T.float32(FILL_LOGIT[dt]) if causal_fill else T.float32(NEG_INF),
                         x)
        return x

    @T.prim_func(s_tir=True)
    def fused_attention(q_h: T.handle, k_h: T.handle, v_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                        o_h: T.handle, scale: T.float32, zero_nan_rows: T.int32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        Q = T.match_buffer(q_h, (B0, B1, M, K), dt, strides=(*sq, 1), align=2)
        Km = T.match_buffer(k_h, k_shape, dt, strides=k_strides, align=2)
        V = T.match_buffer(v_h, (B0, B1, N, D), dt, strides=(*sv, 1), align=2)
        Bias = T.match_buffer(bias_h, (B0, B1, M, N), dt, strides=_strides("bias", 4), align=2, offset_factor=1)
        Mask = T.match_buffer(mask_h, (B0, B1, M, N), mask_dtype, strides=_strides("mask", 4), align=1,
                              offset_factor=1)
        O = T.match_buffer(o_h, (B0, B1, M, D), dt, strides=(*_strides("O", 3), 1), align=2, offset_factor=1)
        S = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        row_max = T.sblock_alloc_buffer((B0, B1, M), "float32")
        E = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, M), "float32")
        O_acc = T.sblock_alloc_buffer((B0, B1, M, D), "float32")
        S_e = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        S_o = T.sblock_alloc_buffer((B0, B1, M, NC, CW), "float32")
        E_o = T.sblock_alloc_buffer((B0, B1, M, NC, CW), "float32")
        for b0, b1, i, j, kk in T.grid(B0, B1, M, N, K):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, kk])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(Q[v0, v1, vi, vk], "float32") * T.cast(
                    k_elem(Km, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_max"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():  # min_value, not -inf: a fully masked row's exp(-inf - max) is 0, never NaN
                    row_max[v0, v1, vi] = T.min_value("float32")
                row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi],
                                            logit(S[v0, v1, vi, vj], Bias, Mask, scale, v0, v1, vi, vj))
        if recompute:
            for b0, b1, i, j, kk in T.grid(B0, B1, M, N, K):
                with T.sblock("S_e"):
                    v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, kk])
                    with T.init():
                        S_e[v0, v1, vi, vj] = T.float32(0)
                    S_e[v0, v1, vi, vj] = S_e[v0, v1, vi, vj] + T.cast(Q[v0, v1, vi, vk], "float32") * T.cast(
                        k_elem(Km, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("exp"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                E[v0, v1, vi, vj] = T.exp(logit((S_e if recompute else S)[v0, v1, vi, vj], Bias, Mask, scale,
                                                v0, v1, vi, vj) - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_sum"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
        if recompute:
            for b0, b1, i, c, jc, kk in T.grid(B0, B1, M, NC, CW, K):
                with T.sblock("S_o"):
                    v0, v1, vi, vc, vjc, vk = T.axis.remap("SSSSSR", [b0, b1, i, c, jc, kk])
                    with T.init():
                        S_o[v0, v1, vi, vc, vjc] = T.float32(0)
                    S_o[v0, v1, vi, vc, vjc] = S_o[v0, v1, vi, vc, vjc] + T.cast(Q[v0, v1, vi, vk], "float32") * T.cast(
                        k_elem(Km, v0, v1, vk, T.min(vc * CW + vjc, N - 1)), "float32")
            for b0, b1, i, c, jc in T.grid(B0, B1, M, NC, CW):
                with T.sblock("exp_o"):
                    v0, v1, vi, vc, vjc = T.axis.remap("SSSSS", [b0, b1, i, c, jc])
                    E_o[v0, v1, vi, vc, vjc] = T.Select(
                        vc * CW + vjc < N,
                        T.exp(logit(S_o[v0, v1, vi, vc, vjc], Bias, Mask, scale, v0, v1, vi,
                                    T.min(vc * CW + vjc, N - 1)) - row_max[v0, v1, vi]), T.float32(0))
            for b0, b1, i, c, jc, d in T.grid(B0, B1, M, NC, CW, D):
                with T.sblock("O_acc"):
                    v0, v1, vi, vc, vjc, vd = T.axis.remap("SSSRRS", [b0, b1, i, c, jc, d])
                    with T.init():
                        O_acc[v0, v1, vi, vd] = T.float32(0)
                    O_acc[v0, v1, vi, vd] = O_acc[v0, v1, vi, vd] + T.Select(
                        vc * CW + vjc < N,
                        zeroed(E_o[v0, v1, vi, vc, vjc], zero_nan_rows) * T.cast(
                            V[v0, v1, T.min(vc * CW + vjc, N - 1), vd], "float32"),
                        T.float32(0))
        else:
            for b0, b1, i, j, d in T.grid(B0, B1, M, N, D):  # d innermost: V's rows and O_acc unit-stride in it
                with T.sblock("O_acc"):
                    v0, v1, vi, vj, vd = T.axis.remap("SSSRS", [b0, b1, i, j, d])
                    with T.init():
                        O_acc[v0, v1, vi, vd] = T.float32(0)
                    O_acc[v0, v1, vi, vd] = O_acc[v0, v1, vi, vd] + zeroed(E[v0, v1, vi, vj], zero_nan_rows) * T.cast(
                        V[v0, v1, vj, vd], "float32")
        for b0, b1, i, d in T.grid(B0, B1, M, D):
            with T.sblock("O"):
                v0, v1, vi, vd = T.axis.remap("SSSS", [b0, b1, i, d])
                # a zero row (row_sum = 0, or NaN with zero_nan_rows) is 0 * V; a NaN row_sum otherwise takes the
                # division (NaN row)
                O[v0, v1, vi, vd] = T.cast(zero_or_o(O_acc[v0, v1, vi, vd], row_sum[v0, v1, vi], zero_nan_rows), dt)

    func = fused_attention
    q, k, v, bias, mask, o, scale, zero_nan_rows = func.params
    keep = [q, k, v] + ([bias] if has_bias else []) + ([mask] if mask_kind != "none" else []) + [o, scale,
                                                                                                 zero_nan_rows]
    func = tvm.tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)
    return func.with_attr("global_symbol", name)

