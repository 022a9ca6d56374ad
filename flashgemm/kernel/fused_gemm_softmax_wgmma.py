"""FusedGemmSoftmax's Hopper kernel (sm_90a): P = softmax_rowwise(scale * A @ B + bias + mask) in two sweeps of wgmma.

FusedAttention's Hopper machinery (flashgemm/kernel/fused_attention_wgmma.Pipeline: A's tile and B's chunks in
wgmma's swizzled shared layouts by cp.async, S = A B by wgmma m64nBNk16 from shared memory) with the contract of
flashgemm/kernel/fused_gemm_softmax.py (its masking, NaN and fully masked rules, through fused_attention_mma.Parts):

    blockIdx.x = tiles of BM = 64 WG rows (causal: the longest first), y = B1, z = B0;
    threadIdx.y = warp (warpgroup = warp / 4), x = lane
    one stream of 2 n chunks of BN columns through `stages` shared buffers (B is read twice, A once):
        chunks 0 .. n - 1:   S by wgmma, the logits and the online softmax's running max m and sum l (registers)
        chunks n .. 2n - 1:  S again, P = exp2(logit - m) / l (0 where l = 0, NaN where l is), staged in shared
                             memory and stored in rows of 16-byte vectors (8-, 4- or 2-byte ones where N's
                             alignment allows no wider)
    causal: the columns past the tile's last visible chunk are stored as zeros (NaN in a NaN row) without a GEMM

S is computed twice (2 M N K flops more) so that P is written once and never read: at K = 64 or 128 the extra GEMM
costs less than P's round trip. Storing P straight from the accumulator's fragments (a quad's 16 bytes a row, half a
sector) ran at 3.4x the HBM floor at W1 where staging it runs at 2.0x (results/h200/gemm-softmax-wgmma-2026-12-02).
K must be a head size of the wgmma pipeline (HEAD_SIZES: rows of whole 128-byte swizzle atoms); with B as [K, N]
(trans_b = 0), N % 8 == 0.
"""
from __future__ import annotations

import math

import tvm
from tvm.script import tirx as T

from flashgemm.kernel import fused_attention_mma as mma
from flashgemm.kernel import fused_attention_wgmma as faw
from flashgemm.kernel import fused_gemm_softmax as fgs
from flashgemm.op.variant import BOOL_MASK_KINDS, Variant

HEAD_SIZES = faw.HEAD_SIZES  # the K this kernel takes
# (warpgroups, bn, stages): the fastest of the measured tiles at W1-W3 and N = 1024 (K = 64) and at 2048 (K = 128)
TILE = {64: (1, 128, 3), 128: (1, 64, 2)}
# the op serves this kernel to calls with N >= MIN_N and M >= MIN_M ahead of the default-schedule and any-length
# kernels, and up to FIRST_MAX_N ahead of the tuned ones too (results/h200/gemm-softmax-wgmma-2026-12-02: W3, N = 1024,
# 2048 and 4096; shorter rows: the tuned kernels are faster, W1 and W2 there; fewer rows than a row tile: the row-vector
# kernels of M = 1 and the any-length ones waste no GEMM rows; longer rows: the split-N kernels tuned for them were not
# measured against it), and to every other call of its K where the generic kernel would serve it
MIN_N, MIN_M, FIRST_MAX_N = 1024, 64, 2048
ALIGN = faw.ALIGN


def n_multiple(variant: Variant) -> int:
    """N must be a multiple of this: B as [K, N] is copied in 16-byte chunks of its rows."""
    return mma.n_multiple(variant)


def runtime_func(variant: Variant, k: int, wg: int = 0, bn: int = 128, stages: int = 2,
                 name: str = "main") -> tvm.tirx.PrimFunc:
    """The kernel fn(A, B, [bias], [mask], P, scale) for K = `k` (the generic kernel's signature with B0, B1, M, N
    symbolic). Tile: `wg` warpgroups (BM = 64 wg rows), chunks of `bn` columns, `stages` shared buffers."""
    if not wg:
        wg, bn, stages = TILE[k]
    pipe = faw.Pipeline(variant, k, wg, bn, stages, with_v=False, names=("A", "B", "V"))
    dt, mask_kind, causal = variant.dtype, variant.mask, variant.causal
    mask_dtype = "uint8" if mask_kind in BOOL_MASK_KINDS else dt
    BM, BN, D, NT, NTS = pipe.BM, pipe.BN, pipe.D, pipe.NT, pipe.NTS
    B0, B1, M, N = pipe.B0, pipe.B1, pipe.M, pipe.N
    sq = pipe.sq
    parts = mma.Parts(variant, D, BN, NT, 1, B0, B1, M, N)

    PS = BN + 8  # the staging tile's row (elements): 16 bytes of padding keep a quad's 8 rows in distinct banks

    def prob(s_acc, i, m, inv, zero):  # P's value from the log2-scaled logit s_acc[i] (zero: 0, or NaN in a NaN row)
        if zero:
            return T.cast(T.Select(T.isnan(inv), T.float32(math.nan), T.float32(0)), dt)
        return T.cast(T.exp2(s_acc[i] - m) * inv, dt)

    def bits(x):
        return T.cast(T.reinterpret("uint16", x), "uint32")

    @T.macro
    def stage_p(Ps32, ps0, s_acc, m_run, inv_l, w, g, t4, zero):
        """The warp's 16 rows of the chunk's P into the warpgroup's staging tile (at uint32 ps0), a pair of columns a
        32-bit store."""
        for h in T.unroll(2):
            for nt in T.unroll(NTS):
                Ps32[ps0 + ((w % 4) * 16 + h * 8 + g) * (PS // 2) + nt * 4 + t4] = T.bitwise_or(
                    T.shift_left(bits(prob(s_acc, nt * 4 + h * 2 + 1, m_run[h], inv_l[h], zero)), T.uint32(16)),
                    bits(prob(s_acc, nt * 4 + h * 2, m_run[h], inv_l[h], zero)))

    @T.macro
    def store_rows(P, P32, Ps, Ps32, ps0, b0, b1, m0, n0, wgi, tw, vec):
        """The warpgroup's staged 64 rows x BN columns of P to memory, `vec` elements a store (rows whole 128-byte
        lines where vec is 8)."""
        for it in T.unroll(64 * BN // vec // 128):
            r: T.let[T.int32] = (it * 128 + tw) // (BN // vec)
            c: T.let[T.int32] = (it * 128 + tw) % (BN // vec) * vec
            row: T.let[T.int32] = m0 + wgi * 64 + r
            if row < M and n0 + c < N:
                if vec == 1:
                    P[b0, b1, row, n0 + c] = Ps[ps0 * 2 + r * PS + c]
                else:
                    for e in T.vectorized(vec // 2):
                        P32[((b0 * B1 + b1) * M + row) * (N // 2) + (n0 + c) // 2 + e] = Ps32[
                            ps0 + r * (PS // 2) + c // 2 + e]

    @T.macro
    def store_p(P, P32, Ps, Ps32, ps0, s_acc, m_run, inv_l, b0, b1, m0, n0, w, g, t4, wgi, tw, zero):
        """The chunk at column n0 of the warpgroup's rows: staged in shared memory, then stored in the widest vectors
        N's alignment allows."""
        stage_p(Ps32, ps0, s_acc, m_run, inv_l, w, g, t4, zero)
        T.tvm_storage_sync("shared")
        if N % 8 == 0:
            store_rows(P, P32, Ps, Ps32, ps0, b0, b1, m0, n0, wgi, tw, 8)
        elif N % 4 == 0:
            store_rows(P, P32, Ps, Ps32, ps0, b0, b1, m0, n0, wgi, tw, 4)
        elif N % 2 == 0:
            store_rows(P, P32, Ps, Ps32, ps0, b0, b1, m0, n0, wgi, tw, 2)
        else:
            store_rows(P, P32, Ps, Ps32, ps0, b0, b1, m0, n0, wgi, tw, 1)

    @T.prim_func(s_tir=True)
    def fused_gemm_softmax_wgmma(a_h: T.handle, b_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                                 p_h: T.handle, scale: T.float32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A = T.match_buffer(a_h, (B0, B1, M, D), dt, strides=(*sq, D, 1), align=16)
        Bm = T.match_buffer(b_h, pipe.k_shape, dt, strides=pipe.k_strides, align=16)
        Bias = T.match_buffer(bias_h, (B0, B1, M, N), dt, strides=mma._strides("bias", 4), align=2, offset_factor=1)
        Mask = T.match_buffer(mask_h, (B0, B1, M, N), mask_dtype, strides=mma._strides("mask", 4), align=1,
                              offset_factor=1)
        P = T.match_buffer(p_h, (B0, B1, M, N), dt, align=16)
        P32 = T.decl_buffer((B0 * B1 * M * N // 2,), "uint32", data=P.data)
        for bz in T.thread_binding(B0, thread="blockIdx.z"):
            for by in T.thread_binding(B1, thread="blockIdx.y"):
                for bx in T.thread_binding((M + BM - 1) // BM, thread="blockIdx.x"):
                    for ty in T.thread_binding(4 * wg, thread="threadIdx.y"):
                        for tx in T.thread_binding(32, thread="threadIdx.x"):
                            with T.sblock("fused_gemm_softmax"):
                                b0, b1, bt, w, lane = T.axis.remap("SSSSS", [bz, by, bx, ty, tx])
                                T.reads()
                                T.writes()
                                pool = T.sblock_alloc_buffer((pipe.POOL * 2,), "uint8", scope="shared.dyn")
                                # P's staging tiles, a warpgroup's 64 rows each
                                Ps32 = T.sblock_alloc_buffer((wg * 64 * PS // 2,), "uint32", scope="shared")
                                Ps = T.decl_buffer((wg * 64 * PS,), dt, data=Ps32.data, scope="shared")
                                s_acc = T.sblock_alloc_buffer((NTS * 4,), "float32", scope="local")
                                m_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                l_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                m_chunk = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                alpha = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                inv_l = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                tid: T.let[T.int32] = w * 32 + lane
                                g: T.let[T.int32] = lane // 4
                                t4: T.let[T.int32] = lane % 4
                                wgi: T.let[T.int32] = w // 4
                                tw: T.let[T.int32] = tid % 128  # the thread in its warpgroup
                                base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(pool.access_ptr("rw"))
                                al: T.let[T.int32] = T.cast(
                                    (T.uint32(faw.SWIZZLE_BYTES) - base % T.uint32(faw.SWIZZLE_BYTES))
                                    % T.uint32(faw.SWIZZLE_BYTES), "int32") // 2
                                addr0: T.let[T.uint32] = base + T.cast(al * 2, "uint32")
                                m0: T.let[T.int32] = ((M + BM - 1) // BM - 1 - bt if causal else bt) * BM
                                scale_l2: T.let[T.float32] = scale * T.float32(mma.LOG2E)
                                n_end: T.let[T.int32] = (T.max(T.min(N, m0 + BM + (N - M)), 0) if causal else N)
                                n_chunks: T.let[T.int32] = (n_end + BN - 1) // BN
                                ps0: T.let[T.int32] = wgi * 64 * PS // 2  # the warpgroup's staging tile (uint32)
                                for i in T.unroll(2):
                                    m_run[i] = T.float32(mma.LOWEST)
                                    l_run[i] = T.float32(0)
                                    inv_l[i] = T.float32(0)  # a tile with no visible chunk: every row fully masked
                                pipe.copy_q(pool, al, A, b0, b1, m0, tid)
                                # one stream of 2 n_chunks chunks: the statistics sweep, then the P sweep
                                for st in T.unroll(stages - 1):
                                    if st < 2 * n_chunks:
                                        pipe.copy_chunk(T.truncmod(st, n_chunks), st, pool, al, Bm, None, b0, b1,
                                                        tid)
                                    T.ptx.cp.async_.commit_group()
                                for jj in T.serial(2 * n_chunks):
                                    nj: T.let[T.int32] = jj + stages - 1
                                    if nj < 2 * n_chunks:
                                        pipe.copy_chunk(T.truncmod(nj, n_chunks), nj % stages, pool, al, Bm, None,
                                                        b0, b1, tid)
                                    T.ptx.cp.async_.commit_group()
                                    T.ptx.cp.async_.wait_group(stages - 1)
                                    T.ptx.fence.proxy.async_.shared__cta()
                                    T.tvm_storage_sync("shared")
                                    pipe.issue_s(s_acc, addr0, wgi, jj % stages)
                                    T.ptx.wgmma.wait_group.sync.aligned(0)
                                    pipe.fence_operands(s_acc, NTS * 4)
                                    if jj < n_chunks:
                                        parts.softmax_chunk(s_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2,
                                                            b0, b1, m0, jj * BN, w, g, t4)
                                    else:
                                        if jj == n_chunks:  # the row sums: l summed over the quad, 1 / l
                                            for h in T.unroll(2):
                                                l_run[h] = T.cuda.warp_sum(l_run[h], 4)
                                                inv_l[h] = T.Select(l_run[h] == T.float32(0), T.float32(0),
                                                                    T.float32(1) / l_run[h])
                                        parts.logits(s_acc, Bias, Mask, scale_l2, b0, b1, m0, (jj - n_chunks) * BN,
                                                     w, g, t4)
                                        store_p(P, P32, Ps, Ps32, ps0, s_acc, m_run, inv_l, b0, b1, m0,
                                                (jj - n_chunks) * BN, w, g, t4, wgi, tw, False)
                                    T.tvm_storage_sync("shared")
                                T.ptx.cp.async_.wait_group(0)
                                # causal: the chunks past the tile's last visible one
                                for jz in T.serial((N + BN - 1) // BN - n_chunks):
                                    store_p(P, P32, Ps, Ps32, ps0, s_acc, m_run, inv_l, b0, b1, m0,
                                            (n_chunks + jz) * BN, w, g, t4, wgi, tw, True)
                                    T.tvm_storage_sync("shared")

    func = fgs._drop_unused_params(fused_gemm_softmax_wgmma, variant)
    return func.with_attr({"global_symbol": name, "tirx.is_scheduled": True})
