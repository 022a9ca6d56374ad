"""P = softmax_rowwise(scale * A @ B + bias + mask), causal optional, in TensorIR (TVM 0.27).

One kernel definition (_template), two forms of the same computation (identical block and loop structure, so a
Meta-Schedule trace found on one replays on the other):

* runtime form (`runtime_func`): what the exported library contains. `scale` is a scalar argument,
  A/B batch strides and all bias/mask strides are symbolic (0 = broadcast, bound at call time from
  the DLTensor), and the sizes are either static (a tuned kernel) or symbolic (the generic kernel).
* tuning form (`tuning_func`): what Meta-Schedule measures. Static sizes, compact buffers (broadcast
  dims have extent 1 and are indexed at 0, so the measured memory traffic is the real one), and
  `scale` folded to a constant: Meta-Schedule's runner only passes tensors.

Blocks: "S" (fp32 GEMM), "row_max", "exp", "row_sum", "P". The masked logit is an expression
inlined into "row_max" and "exp" rather than a block of its own, so schedules can keep S on chip.
The long-row (split-N, `chunk=CW`) form computes the same P in two passes over chunks of CW columns
("chunk_max", "chunk_sum", "P_chunk", "chunk_stats", then "row_max", "row_sum", "P"); see
flashgemm/spaces/cuda_split_n.py for why and how it is scheduled.

Masking semantics (the contract, mirrored by `reference.py`):
* an additive mask entry <= -65504 (fp16's lowest finite; -inf, -1e9 and dtype-min masks
  included) masks its element out, as does a `false` boolean mask entry and the causal rule;
* a masked element has probability exactly 0 and its logit is never read; a row with every element masked is all
  zeros;
* a NaN or +inf among a row's unmasked logits makes the whole row NaN, as PyTorch's softmax of the same logits does.
  That needs no code of its own: the max ignores NaN (CUDA's fmaxf), but exp(NaN - max) and exp(inf - inf) are NaN,
  so the row sum is NaN, and "P" writes `row_sum == 0 ? 0 : E / row_sum` (not `row_sum > 0 ? ...`, false for NaN),
  so every element is E / NaN. A fully masked row's sum is exactly 0. `==`, not `!=` with the arms swapped: TVM's
  LLVM codegen lowers a float `!=` as an ordered comparison (false for NaN), C and CUDA as an unordered one.
"""
from __future__ import annotations

from typing import Optional

import tvm
from tvm.script import tirx as T

from flashgemm.op.variant import (BOOL_MASK_KINDS, FILL_LOGIT, MASKED_AT_OR_BELOW, CanonicalShape,
                                  Variant)

NEG_INF = float("-inf")
POS_INF = float("inf")
# P's element offset is a multiple of this in the runtime tensor-core forms (strided, align >= 64): TVM's argument
# binder checks it at every call (a clear error otherwise), because the register sketches' P stores are 8 bytes wide
# (flashgemm/codegen/cuda_src/store_whole_sectors, which proves its addresses aligned on this). The tuning form keeps
# offset_factor 1 (its structure is the tuning databases' key); only the tuner and the benchmarks call it, with
# byte_offset 0, as do the op (flashgemm/ort/csrc/op.cc) and DLPack tensors.
P_OFFSET_FACTOR = 4
# function attribute of the any-length form (_any_length): the schedules tell it from the padded form by it
ANY_LENGTH_ATTR = "flashgemm.any_length"


def p_offset_factor(align: int, strided: bool) -> int:
    return P_OFFSET_FACTOR if strided and align >= 64 else 1


def _strides(name: str, n: int):
    return tuple(tvm.tirx.Var(f"{name}_s{i}", "int32") for i in range(n))


def _template(variant: Variant, sizes, strided: bool, bcast: Optional[dict] = None, align: int = 2,
              chunk: int = 0, pad: Optional[tuple] = None, recompute: bool = False, stat_cols: int = 0,
              bound: Optional[tuple] = None, n_multiple: int = 1):
    """sizes: (B0, B1, M, N, K) as ints or int32 Vars. strided: symbolic strides (runtime form).
    bcast: for the tuning form, per tensor the 4 booleans 'this canonical dim is broadcast'.
    pad: (Mp, Np, Kp) for the padded form (_padded), else None.
    bound: (Mb, Nb) for the any-length form (_any_length), else None.
    n_multiple: the recompute form over a bound, for calls whose N is a multiple of it only (_padded)."""
    if n_multiple != 1 and not (bound and recompute and not chunk):
        raise ValueError("n_multiple applies to the recompute form over a bound only")
    dt = variant.dtype
    B0, B1, M, N, K = sizes
    bc = bcast or {}

    def shape_of(t, full):
        return tuple(1 if bc.get(t, (False,) * 4)[d] else full[d] for d in range(4))

    def at(t, b0, b1, r, c):
        idx = (b0, b1, r, c)
        return tuple(0 if bc.get(t, (False,) * 4)[d] else idx[d] for d in range(4))

    b_full = (B0, B1, N, K) if variant.trans_b else (B0, B1, K, N)
    a_shape, b_shape = shape_of("a", (B0, B1, M, K)), shape_of("b", b_full)
    bias_shape, mask_shape = shape_of("bias", (B0, B1, M, N)), shape_of("mask", (B0, B1, M, N))
    if strided:
        sa, sb = _strides("A", 2), _strides("B", 2)
        a_strides = (*sa, K, 1)
        b_strides = (*sb, K, 1) if variant.trans_b else (*sb, N, 1)
        bias_strides, mask_strides = _strides("bias", 4), _strides("mask", 4)
    else:
        a_strides = b_strides = bias_strides = mask_strides = None
    mask_dtype = "uint8" if variant.mask in BOOL_MASK_KINDS else dt
    # Runtime kernels accept any element-aligned pointer (ORT hands us user memory, e.g. numpy views),
    # unless the caller asks for more (tensor-core kernels: see runtime_func).
    align = align if strided else 64
    p_offset = p_offset_factor(align, strided)
    has_bias, mask_kind, causal, trans_b = variant.has_bias, variant.mask, variant.causal, variant.trans_b

    def b_elem(Bm, b0, b1, k, j):
        return Bm[at("b", b0, b1, j, k)] if trans_b else Bm[at("b", b0, b1, k, j)]

    def logit(S, Bias, Mask, scale, b0, b1, i, j):
        x = S[b0, b1, i, j] * scale
        if has_bias:
            x = x + T.cast(Bias[at("bias", b0, b1, i, j)], "float32")
        # Select, not if_then_else: both arms are safe to evaluate, and TVM's buffer-region analysis narrows a read
        # under an if_then_else by the condition (j > i + N - M ...), which with symbolic batch sizes left the
        # register sketches' accumulator region uncompacted (flashgemm/spaces/cuda_registers.py)
        if mask_kind == "add":
            mv = T.cast(Mask[at("mask", b0, b1, i, j)], "float32")
            x = T.Select(mv <= T.float32(MASKED_AT_OR_BELOW), T.float32(NEG_INF), x + mv)
        elif mask_kind == "bool":
            x = T.Select(Mask[at("mask", b0, b1, i, j)] != T.uint8(0), x, T.float32(NEG_INF))
        elif mask_kind == "fill":
            x = T.Select(Mask[at("mask", b0, b1, i, j)] != T.uint8(0), x, T.float32(FILL_LOGIT[dt]))
        if causal:  # bottom-right aligned diagonal (FlashAttention >= 2.1); causal_fill: s + the lowest there
            x = T.Select(j > i + (N - M), S[b0, b1, i, j] * scale + T.float32(FILL_LOGIT[dt]) if variant.causal_fill
                         else T.float32(NEG_INF), x)
        return x

    @T.prim_func(s_tir=True)
    def fused_gemm_softmax(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                           p_h: T.handle, scale: T.float32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        # A and B: no offset_factor (elem_offset 0), else TVM 0.27's cache_read copies a symbolic offset into
        # the shared/warp tiles and tensorized candidates fail to build. Callers pass byte_offset 0.
        A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
        Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
        Bias = T.match_buffer(bias_h, bias_shape, dt, strides=bias_strides, align=align, offset_factor=1)
        Mask = T.match_buffer(mask_h, mask_shape, mask_dtype, strides=mask_strides, align=1, offset_factor=1)
        P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
        S = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        row_max = T.sblock_alloc_buffer((B0, B1, M), "float32")
        E = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, M), "float32")
        for b0, b1, i, j, k in T.grid(B0, B1, M, N, K):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A[at("a", v0, v1, vi, vk)], "float32") * T.cast(
                    b_elem(Bm, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_max"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():  # min_value, not -inf: TVM's cross-thread max reduction needs that identity
                    row_max[v0, v1, vi] = T.min_value("float32")
                row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], logit(S, Bias, Mask, scale, v0, v1, vi, vj))
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("exp"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                # row_max >= lowest finite float, so a masked element gives exp(-inf) = 0 exactly and an
                # all-masked row never computes -inf - (-inf) = NaN: its sum is 0 and "P" writes zeros.
                E[v0, v1, vi, vj] = T.exp(logit(S, Bias, Mask, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("row_sum"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("P"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                    row_sum[v0, v1, vi] == T.float32(0), T.float32(0), E[v0, v1, vi, vj] / row_sum[v0, v1, vi]), dt)

    if bound and not recompute:
        return _drop_unused_params(_any_length(variant, sizes, bound, a_shape, b_shape, a_strides, b_strides,
                                               (bias_shape, bias_strides, mask_shape, mask_strides, mask_dtype),
                                               align, at), variant)
    if bound:  # the recompute form over the bound: its padded form with M and N symbolic (or the bound's, to tune)
        pad = (int(bound[0]), int(bound[1]), K)
    if pad:
        func = _drop_unused_params(_padded(variant, sizes, pad, a_shape, b_shape, a_strides, b_strides, align, at,
                                           logit, recompute, chunk, stat_cols, n_multiple,
                                           (bias_shape, bias_strides, mask_shape, mask_strides, mask_dtype)
                                           if bound else None), variant)
        return func.with_attr(ANY_LENGTH_ATTR, 1) if bound else func
    if recompute:
        raise ValueError("the recompute form is a padded form: give pad=(Mp, Np, Kp)")
    if not chunk:
        return _drop_unused_params(fused_gemm_softmax, variant)
    if not isinstance(N, int):
        raise ValueError("the long-row (split-N) form needs a static N")
    CW = int(chunk)
    if N % CW:  # a partial last chunk would need predicated reductions, which TVM 0.27's schedule rejects
        raise ValueError(f"the split-N form needs N % chunk == 0 (N={N}, chunk={CW})")
    C = N // CW

    # Long-row (split-N) form: pass 1 ("S" .. "P_chunk", one kernel per (rows, chunk) tile) writes
    # exp(logit - chunk max) and the chunk's max/sum; pass 2 ("row_max" .. "P") combines the chunk
    # statistics and rescales in place. P_unnorm aliases P's memory (decl_buffer on P.data): the
    # schedule sees two buffers, each with one writer, while the kernels use no N-sized workspace.
    @T.prim_func(s_tir=True)
    def fused_gemm_softmax_split_n(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                   p_h: T.handle, scale: T.float32):
        # tirx.noalias as in the one-pass form: Meta-Schedule's normalize_mod sets it on every tuned function, so
        # without it the database's workload would not match this module. P_unnorm and P do share memory, but
        # only pass 2 touches both, and each thread there reads an element before it writes that same element
        # (a data dependence no compiler reordering can break).
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
        Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
        Bias = T.match_buffer(bias_h, bias_shape, dt, strides=bias_strides, align=align, offset_factor=1)
        Mask = T.match_buffer(mask_h, mask_shape, mask_dtype, strides=mask_strides, align=1, offset_factor=1)
        P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
        P_unnorm = T.decl_buffer((B0, B1, M, N), dt, data=P.data)
        S = T.sblock_alloc_buffer((B0, B1, M, N), "float32")
        chunk_max = T.sblock_alloc_buffer((B0, B1, M, C), "float32")
        chunk_sum = T.sblock_alloc_buffer((B0, B1, M, C), "float32")
        stat_max = T.sblock_alloc_buffer((B0, B1, M, C), "float32")  # global: read by pass 2
        stat_sum = T.sblock_alloc_buffer((B0, B1, M, C), "float32")
        row_max = T.sblock_alloc_buffer((B0, B1, M), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, M), "float32")
        for b0, b1, i, j, k in T.grid(B0, B1, M, N, K):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A[at("a", v0, v1, vi, vk)], "float32") * T.cast(
                    b_elem(Bm, v0, v1, vk, vj), "float32")
        for b0, b1, i, c, jj in T.grid(B0, B1, M, C, CW):
            with T.sblock("chunk_max"):
                v0, v1, vi, vc, vjj = T.axis.remap("SSSSR", [b0, b1, i, c, jj])
                with T.init():
                    chunk_max[v0, v1, vi, vc] = T.min_value("float32")
                chunk_max[v0, v1, vi, vc] = T.max(chunk_max[v0, v1, vi, vc],
                                                  logit(S, Bias, Mask, scale, v0, v1, vi, vc * CW + vjj))
        for b0, b1, i, c, jj in T.grid(B0, B1, M, C, CW):
            with T.sblock("chunk_sum"):
                v0, v1, vi, vc, vjj = T.axis.remap("SSSSR", [b0, b1, i, c, jj])
                with T.init():
                    chunk_sum[v0, v1, vi, vc] = T.float32(0)
                chunk_sum[v0, v1, vi, vc] = chunk_sum[v0, v1, vi, vc] + T.exp(
                    logit(S, Bias, Mask, scale, v0, v1, vi, vc * CW + vjj) - chunk_max[v0, v1, vi, vc])
        for b0, b1, i, c, jj in T.grid(B0, B1, M, C, CW):
            with T.sblock("P_chunk"):
                v0, v1, vi, vc, vjj = T.axis.remap("SSSSS", [b0, b1, i, c, jj])
                P_unnorm[v0, v1, vi, vc * CW + vjj] = T.cast(T.exp(
                    logit(S, Bias, Mask, scale, v0, v1, vi, vc * CW + vjj) - chunk_max[v0, v1, vi, vc]), dt)
        for b0, b1, i, c in T.grid(B0, B1, M, C):
            with T.sblock("chunk_stats"):
                v0, v1, vi, vc = T.axis.remap("SSSS", [b0, b1, i, c])
                stat_max[v0, v1, vi, vc] = chunk_max[v0, v1, vi, vc]
                stat_sum[v0, v1, vi, vc] = chunk_sum[v0, v1, vi, vc]
        for b0, b1, i, c in T.grid(B0, B1, M, C):
            with T.sblock("row_max"):
                v0, v1, vi, vc = T.axis.remap("SSSR", [b0, b1, i, c])
                with T.init():
                    row_max[v0, v1, vi] = T.min_value("float32")
                row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], stat_max[v0, v1, vi, vc])
        for b0, b1, i, c in T.grid(B0, B1, M, C):
            with T.sblock("row_sum"):
                v0, v1, vi, vc = T.axis.remap("SSSR", [b0, b1, i, c])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + stat_sum[v0, v1, vi, vc] * T.exp(
                    stat_max[v0, v1, vi, vc] - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, M, N):
            with T.sblock("P"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                    row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                    T.cast(P_unnorm[v0, v1, vi, vj], "float32")
                    * (T.exp(stat_max[v0, v1, vi, vj // CW] - row_max[v0, v1, vi]) / row_sum[v0, v1, vi])), dt)

    return _drop_unused_params(fused_gemm_softmax_split_n, variant)


def _padded(variant: Variant, sizes, pad, a_shape, b_shape, a_strides, b_strides, align, at, logit,
            recompute: bool = False, chunk: int = 0, stat_cols: int = 0, n_multiple: int = 1, bias_mask=None):
    """The padded form: every block iterates over (Mp, Np, Kp), multiples of the register sketches' tiles, so their
    splits are perfect and no predicate reaches a reduction (flashgemm/spaces/cuda_registers: why that matters).
    A/B are read through zero-filled "A_pad"/"Bm_pad" blocks (the names and meaning pad_einsum gives them, so a
    schedule inlines them into its global->shared copies), a padded column's logit is -inf (probability 0, not in
    the row's max or sum), and "P" stores only the real rows and columns. Only variants without bias or mask:
    their element reads would need the same guards, and the register sketches do not serve them anyway.

    recompute: the recompute form (flashgemm/spaces/cuda_recompute). The GEMM is written three times, "S" (read by
    "row_max"), "S_sum" (by "exp"/"row_sum") and "S_p" (by "P", which takes exp itself), so a schedule can compute
    each where its consumer sweeps a chunk of columns and keep only a chunk of S on chip at a time.

    n_multiple (recompute over a bound, N symbolic): the form for calls whose N is a multiple of n_multiple only. P's
    store tests column vj as vj // n_multiple < N // n_multiple (the same test there), which TVM sees uniform across
    an aligned vector of n_multiple columns, so P leaves in vector stores (a row starts at a multiple of N, aligned
    too); with `vj < N` a lane-dependent test makes TVM store element by element."""
    masked = variant.has_bias or variant.mask != "none"
    if masked and not (bias_mask is not None and recompute and not chunk):
        raise ValueError("the padded form takes no bias or mask (the three-sweep recompute form over a bound does)")
    bias_shape, bias_strides, mask_shape, mask_strides, mask_dtype = bias_mask or (None,) * 5
    dt = variant.dtype
    B0, B1, M, N, K = sizes
    Mp, Np, Kp = (int(x) for x in pad)
    # symbolic M, N: the any-length recompute form (pad = its bound, runtime_func(bound=..., recompute=True))
    if isinstance(M, int) and isinstance(N, int) and not (Mp >= M and Np >= N and Kp >= K):
        raise ValueError(f"padded sizes {pad} smaller than (M, N, K) = {(M, N, K)}")
    trans_b = variant.trans_b
    p_offset = p_offset_factor(align, a_strides is not None)
    bp_shape = (B0, B1, Np, Kp) if trans_b else (B0, B1, Kp, Np)

    def b_inside(r, c):  # B's (row, column) inside the real [N, K] (transB) or [K, N]
        return tvm.tirx.And(r < N, c < K) if trans_b else tvm.tirx.And(r < K, c < N)

    def bp_elem(Bm_pad, b0, b1, k, j):  # the padded copy keeps every batch index (an on-chip tile once scheduled)
        return Bm_pad[b0, b1, j, k] if trans_b else Bm_pad[b0, b1, k, j]

    def p_column_inside(j):  # P's column test (n_multiple above)
        return j < N if n_multiple == 1 else tvm.tirx.floordiv(j, n_multiple) < tvm.tirx.floordiv(N, n_multiple)

    # the recompute form's logits with a bias or mask (over a bound only): the any-length form's guarded logit, whose
    # bias/mask reads stay behind (i < M and j < N); without, -inf past N (a padded row's values are never stored)
    guarded = _guarded_logit(variant, at, M, N) if masked else None

    if not masked:  # (the variants with a bias or mask have the recompute form only: parse it alone)
        @T.prim_func(s_tir=True)
        def fused_gemm_softmax_padded(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                      p_h: T.handle, scale: T.float32):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
            Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
            P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
            A_pad = T.sblock_alloc_buffer((B0, B1, Mp, Kp), dt)
            Bm_pad = T.sblock_alloc_buffer(bp_shape, dt)
            S = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
            row_max = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
            E = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
            row_sum = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
            for b0, b1, i, k in T.grid(B0, B1, Mp, Kp):
                with T.sblock("A_pad"):
                    v0, v1, vi, vk = T.axis.remap("SSSS", [b0, b1, i, k])
                    A_pad[v0, v1, vi, vk] = T.if_then_else(vi < M and vk < K, A[at("a", v0, v1, vi, vk)], T.cast(0, dt))
            for b0, b1, r, c in T.grid(*bp_shape):
                with T.sblock("Bm_pad"):
                    v0, v1, vr, vc = T.axis.remap("SSSS", [b0, b1, r, c])
                    Bm_pad[v0, v1, vr, vc] = T.if_then_else(b_inside(vr, vc), Bm[at("b", v0, v1, vr, vc)], T.cast(0, dt))
            for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
                with T.sblock("S"):
                    v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                    with T.init():
                        S[v0, v1, vi, vj] = T.float32(0)
                    S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                        bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
            for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
                with T.sblock("row_max"):
                    v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                    with T.init():
                        row_max[v0, v1, vi] = T.min_value("float32")
                    row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], T.Select(
                        vj < N, logit(S, None, None, scale, v0, v1, vi, vj), T.float32(NEG_INF)))
            for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
                with T.sblock("exp"):
                    v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                    E[v0, v1, vi, vj] = T.exp(T.Select(vj < N, logit(S, None, None, scale, v0, v1, vi, vj),
                                                       T.float32(NEG_INF)) - row_max[v0, v1, vi])
            for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
                with T.sblock("row_sum"):
                    v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                    with T.init():
                        row_sum[v0, v1, vi] = T.float32(0)
                    row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
            for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
                with T.sblock("P"):
                    v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                    T.reads(row_sum[v0, v1, vi], E[v0, v1, vi, vj])
                    T.writes(P[v0, v1, vi, vj])
                    if vi < M and vj < N:
                        P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                            row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                            E[v0, v1, vi, vj] / row_sum[v0, v1, vi]), dt)

    @T.prim_func(s_tir=True)
    def fused_gemm_softmax_recompute(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                     p_h: T.handle, scale: T.float32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
        Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
        if masked:  # (a static if: the variants without bias or mask declare neither)
            Bias = T.match_buffer(bias_h, bias_shape, dt, strides=bias_strides, align=align, offset_factor=1)
            Mask = T.match_buffer(mask_h, mask_shape, mask_dtype, strides=mask_strides, align=1, offset_factor=1)
        P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
        A_pad = T.sblock_alloc_buffer((B0, B1, Mp, Kp), dt)
        Bm_pad = T.sblock_alloc_buffer(bp_shape, dt)
        S = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
        S_sum = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
        S_p = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
        row_max = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
        E = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
        for b0, b1, i, k in T.grid(B0, B1, Mp, Kp):
            with T.sblock("A_pad"):
                v0, v1, vi, vk = T.axis.remap("SSSS", [b0, b1, i, k])
                A_pad[v0, v1, vi, vk] = T.if_then_else(vi < M and vk < K, A[at("a", v0, v1, vi, vk)], T.cast(0, dt))
        for b0, b1, r, c in T.grid(*bp_shape):
            with T.sblock("Bm_pad"):
                v0, v1, vr, vc = T.axis.remap("SSSS", [b0, b1, r, c])
                Bm_pad[v0, v1, vr, vc] = T.if_then_else(b_inside(vr, vc), Bm[at("b", v0, v1, vr, vc)], T.cast(0, dt))
        for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                    bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
            with T.sblock("row_max"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_max[v0, v1, vi] = T.min_value("float32")
                if masked:
                    row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], guarded(S, Bias, Mask, scale, v0, v1, vi, vj))
                else:
                    row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], T.Select(
                        vj < N, logit(S, None, None, scale, v0, v1, vi, vj), T.float32(NEG_INF)))
        for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
            with T.sblock("S_sum"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S_sum[v0, v1, vi, vj] = T.float32(0)
                S_sum[v0, v1, vi, vj] = S_sum[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                    bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
            with T.sblock("exp"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                if masked:
                    E[v0, v1, vi, vj] = T.exp(guarded(S_sum, Bias, Mask, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
                else:
                    E[v0, v1, vi, vj] = T.exp(T.Select(vj < N, logit(S_sum, None, None, scale, v0, v1, vi, vj),
                                                       T.float32(NEG_INF)) - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
            with T.sblock("row_sum"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
        for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
            with T.sblock("S_p"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S_p[v0, v1, vi, vj] = T.float32(0)
                S_p[v0, v1, vi, vj] = S_p[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                    bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
            with T.sblock("P"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                if variant.has_bias and variant.mask != "none":
                    T.reads(row_max[v0, v1, vi], row_sum[v0, v1, vi], S_p[v0, v1, vi, vj],
                            Bias[at("bias", v0, v1, vi, vj)], Mask[at("mask", v0, v1, vi, vj)])
                elif variant.has_bias:
                    T.reads(row_max[v0, v1, vi], row_sum[v0, v1, vi], S_p[v0, v1, vi, vj],
                            Bias[at("bias", v0, v1, vi, vj)])
                elif masked:
                    T.reads(row_max[v0, v1, vi], row_sum[v0, v1, vi], S_p[v0, v1, vi, vj],
                            Mask[at("mask", v0, v1, vi, vj)])
                else:
                    T.reads(row_max[v0, v1, vi], row_sum[v0, v1, vi], S_p[v0, v1, vi, vj])
                T.writes(P[v0, v1, vi, vj])
                if masked:  # (the statement's bounds test guards the bias/mask reads: logit's Select needs none)
                    if vi < M and p_column_inside(vj):
                        P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                            row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                            T.exp(logit(S_p, Bias, Mask, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
                            / row_sum[v0, v1, vi]), dt)
                else:
                    if vi < M and p_column_inside(vj):
                        P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                            row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                            T.exp(logit(S_p, None, None, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
                            / row_sum[v0, v1, vi]), dt)

    # The two-sweep recompute form (recompute with chunk=CW): FlashAttention's statistics. Sweep 1 computes, per row,
    # chunk c of CW columns, column group g of G = stat_cols columns (G = CW unless asked) and quad lane q (the columns
    # an mma lane holds: (j // 2) % 4), the plain max and the sum of exp(logit - that max) ("part_max", "part_sum":
    # one exp an element), and folds the (max, sum) pairs into the row's with the online-softmax reducer ("row_stats",
    # flashgemm/tvm_ext/online_softmax.py registers it so rfactor takes it: one rescale a pair, not an element). Sweep 2
    # ("S_p", "P") as in the three-sweep form. The pairs are indexed by gq = g * 4 + q (flashgemm/spaces/cuda_recompute
    # binds g to the warp columns, each warp owning its own groups' statistics).
    CW = int(chunk)
    G = int(stat_cols) or CW
    if recompute and CW and (Np % CW or CW % G or G % 8):
        raise ValueError(f"the two-sweep recompute form needs CW | Np, G | CW and 8 | G (Np={Np}, chunk={CW}, "
                         f"stat_cols={G})")
    C, QG, R = (Np // CW, 4 * (CW // G), G // 8) if CW else (1, 4, 1)

    def chunk_col(c, gq, r, jl):  # column of element (r, jl) of pair gq (group gq // 4, lane gq % 4) in chunk c
        return c * CW + (gq // 4) * G + r * 8 + (gq % 4) * 2 + jl

    def chunk_logit(S, scale, v0, v1, vi, c, q, r, jl):
        """The masked logit of element (r, jl) of lane q in chunk c, as min(S * scale, +inf or -inf): the S read sits
        in no Select arm. min, not S * scale + (0 or -inf): a masked element must not read S (NaN + -inf is NaN, and a
        NaN there would make its row NaN, README: special values); min(NaN, -inf) is -inf, and min(NaN, +inf) is +inf
        (CUDA's fminf and LLVM's select alike), whose row is NaN, as an unmasked NaN's row must be. Inside
        Select(col < N, S[...], -inf) the simplifier narrows the read's index under the arm's condition: in the
        pipeline's last chunk (c constant) with N % CW a multiple of 8 (N = 200: col < N is r < 1) it folds the lane's
        element index to one valid only there, hoists the Select, and LowerWarpMemory, reading that index for every r,
        fails ("failed to rewrite load to shuffle"); cuda_build's fallback then leaves S_p's fragments unlowered, whose
        mma_fill zeroes lane 0's accumulator only, so S_p accumulated across chunks."""
        col = chunk_col(c, q, r, jl)
        keep = T.Select(col < N, T.float32(POS_INF), T.float32(NEG_INF))
        if variant.causal:  # bottom-right aligned, as logit()
            keep = T.Select(col > vi + (N - M), T.float32(NEG_INF), keep)
        return T.min(S[v0, v1, vi, col] * scale, keep)

    if not masked:
        @T.prim_func(s_tir=True)
        def fused_gemm_softmax_recompute2(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                          p_h: T.handle, scale: T.float32):
            T.func_attr({"global_symbol": "main", "tirx.noalias": True})
            A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
            Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
            P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
            A_pad = T.sblock_alloc_buffer((B0, B1, Mp, Kp), dt)
            Bm_pad = T.sblock_alloc_buffer(bp_shape, dt)
            S = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
            S_p = T.sblock_alloc_buffer((B0, B1, Mp, Np), "float32")
            part_max = T.sblock_alloc_buffer((B0, B1, Mp, C, QG), "float32")
            part_sum = T.sblock_alloc_buffer((B0, B1, Mp, C, QG), "float32")
            row_max = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
            row_sum = T.sblock_alloc_buffer((B0, B1, Mp), "float32")
            for b0, b1, i, k in T.grid(B0, B1, Mp, Kp):
                with T.sblock("A_pad"):
                    v0, v1, vi, vk = T.axis.remap("SSSS", [b0, b1, i, k])
                    A_pad[v0, v1, vi, vk] = T.if_then_else(vi < M and vk < K, A[at("a", v0, v1, vi, vk)], T.cast(0, dt))
            for b0, b1, r, c in T.grid(*bp_shape):
                with T.sblock("Bm_pad"):
                    v0, v1, vr, vc = T.axis.remap("SSSS", [b0, b1, r, c])
                    Bm_pad[v0, v1, vr, vc] = T.if_then_else(b_inside(vr, vc), Bm[at("b", v0, v1, vr, vc)], T.cast(0, dt))
            for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
                with T.sblock("S"):
                    v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                    with T.init():
                        S[v0, v1, vi, vj] = T.float32(0)
                    S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                        bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
            for b0, b1, i, c, q, r, jl in T.grid(B0, B1, Mp, C, QG, R, 2):
                with T.sblock("part_max"):
                    v0, v1, vi, vc, vq, vr, vjl = T.axis.remap("SSSSSRR", [b0, b1, i, c, q, r, jl])
                    with T.init():
                        part_max[v0, v1, vi, vc, vq] = T.min_value("float32")
                    part_max[v0, v1, vi, vc, vq] = T.max(part_max[v0, v1, vi, vc, vq],
                                                         chunk_logit(S, scale, v0, v1, vi, vc, vq, vr, vjl))
            for b0, b1, i, c, q, r, jl in T.grid(B0, B1, Mp, C, QG, R, 2):
                with T.sblock("part_sum"):
                    v0, v1, vi, vc, vq, vr, vjl = T.axis.remap("SSSSSRR", [b0, b1, i, c, q, r, jl])
                    with T.init():
                        part_sum[v0, v1, vi, vc, vq] = T.float32(0)
                    part_sum[v0, v1, vi, vc, vq] = part_sum[v0, v1, vi, vc, vq] + T.exp(
                        chunk_logit(S, scale, v0, v1, vi, vc, vq, vr, vjl) - part_max[v0, v1, vi, vc, vq])
            for b0, b1, i, c, q in T.grid(B0, B1, Mp, C, QG):
                with T.sblock("row_stats"):
                    v0, v1, vi, vc, vq = T.axis.remap("SSSRR", [b0, b1, i, c, q])
                    with T.init():
                        row_max[v0, v1, vi] = T.min_value("float32")
                        row_sum[v0, v1, vi] = T.float32(0)
                    # the online-softmax combine (flashgemm/tvm_ext/online_softmax.py): exactly the reducer's pattern
                    v_max = T.Bind(T.max(row_max[v0, v1, vi], part_max[v0, v1, vi, vc, vq]))
                    v_sum = T.Bind(
                        row_sum[v0, v1, vi] * T.exp(row_max[v0, v1, vi]
                                                    - T.max(row_max[v0, v1, vi], part_max[v0, v1, vi, vc, vq]))
                        + part_sum[v0, v1, vi, vc, vq] * T.exp(part_max[v0, v1, vi, vc, vq]
                                                                - T.max(row_max[v0, v1, vi], part_max[v0, v1, vi, vc, vq])))
                    row_max[v0, v1, vi] = v_max
                    row_sum[v0, v1, vi] = v_sum
            for b0, b1, i, j, k in T.grid(B0, B1, Mp, Np, Kp):
                with T.sblock("S_p"):
                    v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                    with T.init():
                        S_p[v0, v1, vi, vj] = T.float32(0)
                    S_p[v0, v1, vi, vj] = S_p[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                        bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
            for b0, b1, i, j in T.grid(B0, B1, Mp, Np):
                with T.sblock("P"):
                    v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                    T.reads(row_max[v0, v1, vi], row_sum[v0, v1, vi], S_p[v0, v1, vi, vj])
                    T.writes(P[v0, v1, vi, vj])
                    if vi < M and vj < N:
                        P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                            row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                            T.exp(logit(S_p, None, None, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
                            / row_sum[v0, v1, vi]), dt)

    if recompute and CW:
        return fused_gemm_softmax_recompute2
    return fused_gemm_softmax_recompute if recompute else fused_gemm_softmax_padded


def _guarded_logit(variant: Variant, at, M, N):
    """logit(S, Bias, Mask, scale, b0, b1, i, j) of the forms over a bound (any-length; recompute over a bound with a
    bias or mask): the logit inside (M, N), -inf outside."""
    def masked_logit(S, Bias, Mask, scale, v0, v1, vi, vj):
        """The logit inside the bounds, -inf outside: one if_then_else on (i < M and j < N) around everything that
        reads bias or mask, which are read unguarded inside it. Not a Select (both arms are evaluated, and TVM's
        simplifier takes the condition as known inside them), and no guard nested in another condition: the
        simplifier merges nested if_then_else conditions and then evaluates the inner one's load before the outer
        test (compute-sanitizer's memcheck found columns past N read both ways). Merged into the outer test, a load
        stays behind it in the generated `&&`."""
        x = S[v0, v1, vi, vj] * scale
        if variant.has_bias:
            x = x + T.cast(Bias[at("bias", v0, v1, vi, vj)], "float32")
        if variant.mask == "add":
            mv = T.cast(Mask[at("mask", v0, v1, vi, vj)], "float32")
            x = T.if_then_else(mv <= T.float32(MASKED_AT_OR_BELOW), T.float32(NEG_INF), x + mv)
        elif variant.mask == "bool":
            x = T.if_then_else(Mask[at("mask", v0, v1, vi, vj)] != T.uint8(0), x, T.float32(NEG_INF))
        elif variant.mask == "fill":
            x = T.if_then_else(Mask[at("mask", v0, v1, vi, vj)] != T.uint8(0), x,
                               T.float32(FILL_LOGIT[variant.dtype]))
        if variant.causal:
            x = T.if_then_else(vj > vi + (N - M), S[v0, v1, vi, vj] * scale + T.float32(FILL_LOGIT[variant.dtype])
                               if variant.causal_fill else T.float32(NEG_INF), x)
        return T.if_then_else(tvm.tirx.And(vi < M, vj < N), x, T.float32(NEG_INF))

    return masked_logit


def _any_length(variant: Variant, sizes, bound, a_shape, b_shape, a_strides, b_strides, bias_mask, align, at):
    """The any-length form: one kernel serves every M <= Mb and N <= Nb (M, N symbolic, the bound (Mb, Nb) static).
    Every block iterates over the bound, so a schedule of the one-pass space (static tiles, S rows in shared
    memory) applies as to a static shape, and the real lengths enter only as guards: A and B are read through
    zero-filled "A_pad"/"Bm_pad" blocks (the names pad_einsum gives them: the schedule inlines them into its
    global->shared copies as predicates), bias and mask only inside the bounds, a column past N has logit -inf
    (probability 0, outside the row's max and sum), and "P" stores only the real rows and columns. K is static
    and a multiple of 16 (no padding of the reduction). The grid covers Mb rows: rows past M cost their GEMM
    tile, which is why the bundle holds a ladder of bounds (flashgemm.bundle.any_length.LENGTH_BOUNDS) and the
    op picks the smallest bound that holds the call."""
    dt = variant.dtype
    B0, B1, M, N, K = sizes
    Mb, Nb = (int(x) for x in bound)
    if not isinstance(K, int) or K % 16:
        raise ValueError(f"the any-length form needs a static K that is a multiple of 16, not {K}")
    for real, b, what in ((M, Mb, "M"), (N, Nb, "N")):
        if isinstance(real, int) and real > b:
            raise ValueError(f"the any-length form's bound {what}={b} is smaller than {what}={real}")
    bias_shape, bias_strides, mask_shape, mask_strides, mask_dtype = bias_mask
    trans_b = variant.trans_b
    p_offset = p_offset_factor(align, a_strides is not None)
    bp_shape = (B0, B1, Nb, K) if trans_b else (B0, B1, K, Nb)

    def bp_elem(Bm_pad, b0, b1, k, j):
        return Bm_pad[b0, b1, j, k] if trans_b else Bm_pad[b0, b1, k, j]

    masked_logit = _guarded_logit(variant, at, M, N)

    @T.prim_func(s_tir=True)
    def fused_gemm_softmax_any_length(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                      p_h: T.handle, scale: T.float32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True, ANY_LENGTH_ATTR: 1})
        A = T.match_buffer(a_h, a_shape, dt, strides=a_strides, align=align)
        Bm = T.match_buffer(b_h, b_shape, dt, strides=b_strides, align=align)
        Bias = T.match_buffer(bias_h, bias_shape, dt, strides=bias_strides, align=align, offset_factor=1)
        Mask = T.match_buffer(mask_h, mask_shape, mask_dtype, strides=mask_strides, align=1, offset_factor=1)
        P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=align, offset_factor=p_offset)
        A_pad = T.sblock_alloc_buffer((B0, B1, Mb, K), dt)
        Bm_pad = T.sblock_alloc_buffer(bp_shape, dt)
        S = T.sblock_alloc_buffer((B0, B1, Mb, Nb), "float32")
        row_max = T.sblock_alloc_buffer((B0, B1, Mb), "float32")
        E = T.sblock_alloc_buffer((B0, B1, Mb, Nb), "float32")
        row_sum = T.sblock_alloc_buffer((B0, B1, Mb), "float32")
        for b0, b1, i, k in T.grid(B0, B1, Mb, K):
            with T.sblock("A_pad"):
                v0, v1, vi, vk = T.axis.remap("SSSS", [b0, b1, i, k])
                A_pad[v0, v1, vi, vk] = T.if_then_else(vi < M, A[at("a", v0, v1, vi, vk)], T.cast(0, dt))
        for b0, b1, r, c in T.grid(*bp_shape):
            with T.sblock("Bm_pad"):
                v0, v1, vr, vc = T.axis.remap("SSSS", [b0, b1, r, c])
                Bm_pad[v0, v1, vr, vc] = T.if_then_else((vr if trans_b else vc) < N, Bm[at("b", v0, v1, vr, vc)],
                                                        T.cast(0, dt))
        for b0, b1, i, j, k in T.grid(B0, B1, Mb, Nb, K):
            with T.sblock("S"):
                v0, v1, vi, vj, vk = T.axis.remap("SSSSR", [b0, b1, i, j, k])
                with T.init():
                    S[v0, v1, vi, vj] = T.float32(0)
                S[v0, v1, vi, vj] = S[v0, v1, vi, vj] + T.cast(A_pad[v0, v1, vi, vk], "float32") * T.cast(
                    bp_elem(Bm_pad, v0, v1, vk, vj), "float32")
        for b0, b1, i, j in T.grid(B0, B1, Mb, Nb):
            with T.sblock("row_max"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_max[v0, v1, vi] = T.min_value("float32")
                row_max[v0, v1, vi] = T.max(row_max[v0, v1, vi], masked_logit(S, Bias, Mask, scale, v0, v1, vi, vj))
        for b0, b1, i, j in T.grid(B0, B1, Mb, Nb):
            with T.sblock("exp"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                E[v0, v1, vi, vj] = T.exp(masked_logit(S, Bias, Mask, scale, v0, v1, vi, vj) - row_max[v0, v1, vi])
        for b0, b1, i, j in T.grid(B0, B1, Mb, Nb):
            with T.sblock("row_sum"):
                v0, v1, vi, vj = T.axis.remap("SSSR", [b0, b1, i, j])
                with T.init():
                    row_sum[v0, v1, vi] = T.float32(0)
                row_sum[v0, v1, vi] = row_sum[v0, v1, vi] + E[v0, v1, vi, vj]
        for b0, b1, i, j in T.grid(B0, B1, Mb, Nb):
            with T.sblock("P"):
                v0, v1, vi, vj = T.axis.remap("SSSS", [b0, b1, i, j])
                T.reads(row_sum[v0, v1, vi], E[v0, v1, vi, vj])
                T.writes(P[v0, v1, vi, vj])
                if vi < M and vj < N:
                    P[v0, v1, vi, vj] = T.cast(T.if_then_else(
                        row_sum[v0, v1, vi] == T.float32(0), T.float32(0),
                        E[v0, v1, vi, vj] / row_sum[v0, v1, vi]), dt)

    return fused_gemm_softmax_any_length


def _drop_unused_params(func: tvm.tirx.PrimFunc, variant: Variant) -> tvm.tirx.PrimFunc:
    """_template always declares bias and mask; remove the ones this variant does not read."""
    a, b, bias, mask, p, scale = func.params
    keep = [a, b] + ([bias] if variant.has_bias else []) + ([mask] if variant.mask != "none" else []) + [p, scale]
    return tvm.tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)


def runtime_func(variant: Variant, shape: Optional[CanonicalShape] = None, name: str = "main",
                 align: int = 2, any_batch: bool = False, chunk: int = 0,
                 pad: Optional[tuple] = None, recompute: bool = False,
                 fixed_batch: Optional[tuple] = None, stat_cols: int = 0,
                 bound: Optional[tuple] = None, n_multiple: int = 1) -> tvm.tirx.PrimFunc:
    """The kernel as exported: static sizes from `shape`, or symbolic sizes when shape is None.

    any_batch: keep `shape`'s M, N, K but make the batch dims B0, B1 symbolic. A tuned schedule never splits
    the batch loops (they only enter blockIdx), so its trace replays on this form and one tuned kernel serves
    every batch size of its (M, N, K): a model tuned at batch 16 runs tuned at batch 1 or 8 too.
    fixed_batch: with any_batch, (dim, value): that batch dim static, the other symbolic. blockIdx.x fuses (B0, B1, row
    groups); with both symbolic its split divides by B1 * groups, which LowerIntrin cannot prove positive, and every
    address carries sign corrections; with one of them static every divisor is a constant. (0, 1) serves the calls
    canonicalize() makes of contiguous batches (they merge into B1); (1, heads) those whose bias or mask broadcasts over
    the heads (B0 = batch, B1 = heads).
    align: the byte alignment A, B, bias and P pointers are promised to have. 2 (any element) for the
    generic kernels; tuned tensor-core kernels need 64, as measured (their cp.async/ldmatrix tiles are
    matched against TVM's intrinsics, which require it): the op serves a call with a less aligned pointer
    by the generic kernel (flashgemm/ort/csrc/bundle.cc, Bundle::Find).
    chunk: 0 for the one-pass form; CW > 0 for the long-row (split-N) form with chunks of CW columns
    (flashgemm/spaces/cuda_split_n; N must be static).
    pad: (Mp, Np, Kp) for the padded form (_padded: static M, N, K, no bias or mask), else None.
    recompute: with pad, the recompute form (_padded; flashgemm/spaces/cuda_recompute); with chunk too, its two-sweep
    form, whose chunk statistics are per group of stat_cols columns (0: the chunk).
    bound: (Mb, Nb) for the any-length form (_any_length): M and N symbolic up to the bound, K from `shape`, the
    batch dims as any_batch / fixed_batch say; with recompute, the recompute form over the bound (_padded with
    pad = (Mb, Nb, K): no bias or mask), whose traces are those of the static recompute form at M = Mb, N = Nb.
    n_multiple: with bound and recompute, the form for calls whose N is a multiple of it only (_padded: P in vector
    stores); the op serves other calls by the kernel without it.
    """
    if bound is not None:
        if shape is None:
            raise ValueError("the any-length form takes K from `shape`")
        batch = [tvm.tirx.Var("B0", "int32"), tvm.tirx.Var("B1", "int32")] if any_batch else list(shape.sizes[:2])
        if any_batch and fixed_batch is not None:
            batch[fixed_batch[0]] = int(fixed_batch[1])
        sizes = (*batch, tvm.tirx.Var("M", "int32"), tvm.tirx.Var("N", "int32"), shape.sizes[4])
        return _template(variant, sizes, strided=True, align=align, bound=bound, recompute=recompute, chunk=chunk,
                         stat_cols=stat_cols, n_multiple=n_multiple).with_attr("global_symbol", name)
    if shape is None:
        sizes = tuple(tvm.tirx.Var(n, "int32") for n in ("B0", "B1", "M", "N", "K"))
    elif any_batch:
        batch = [tvm.tirx.Var("B0", "int32"), tvm.tirx.Var("B1", "int32")]
        if fixed_batch is not None:
            batch[fixed_batch[0]] = int(fixed_batch[1])
        sizes = (*batch, *shape.sizes[2:])
    else:
        sizes = shape.sizes
    return _template(variant, sizes, strided=True, align=align, chunk=chunk, pad=pad,
                     recompute=recompute, stat_cols=stat_cols).with_attr("global_symbol", name)


def tuning_func(variant: Variant, shape: CanonicalShape, scale: float, chunk: int = 0,
                pad: Optional[tuple] = None, recompute: bool = False, stat_cols: int = 0,
                bound: Optional[tuple] = None) -> tvm.tirx.PrimFunc:
    """The kernel as Meta-Schedule measures it (see the module docstring); chunk, pad, recompute, stat_cols, bound as
    in runtime_func (with bound, the any-length form at the shape's M and N)."""
    bcast = {"a": tuple(s == 0 for s in shape.a_strides[:2]) + (False, False),
             "b": tuple(s == 0 for s in shape.b_strides[:2]) + (False, False)}
    if shape.bias_strides is not None:
        bcast["bias"] = tuple(s == 0 for s in shape.bias_strides)
    if shape.mask_strides is not None:
        bcast["mask"] = tuple(s == 0 for s in shape.mask_strides)
    func = _template(variant, shape.sizes, strided=False, bcast=bcast, chunk=chunk, pad=pad, recompute=recompute,
                     stat_cols=stat_cols, bound=bound)
    return func.specialize({func.params[-1]: tvm.tirx.FloatImm("float32", float(scale))})
