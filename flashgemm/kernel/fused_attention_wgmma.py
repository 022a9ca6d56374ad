"""FusedAttention's Hopper kernel (sm_90a): the tensor-core kernel's online softmax on warpgroup MMAs.

The design of flashgemm/kernel/fused_attention_mma.py (its contract, masking, NaN rules and causal skip) with the
two GEMMs on wgmma, each warpgroup owning 64 rows of the tile:

    blockIdx.x = tiles of BM = 64 WG rows (causal: the longest first), y = heads, z = batch;
    threadIdx.y = warp (warpgroup = warp / 4), x = lane
    Q tile -> shared (cp.async, wgmma's 128-byte-swizzled K-major layout), read by every chunk's S wgmmas
    for each chunk of BN columns, `stages` shared buffers (the next chunks' copies in flight):
        S = Q K^T: D/16 wgmma m64nBNk16, both operands from shared memory by matrix descriptors
        the logits and online softmax in registers, as the mma kernel (the wgmma accumulator's per-warp layout is
        mma.sync's m16n8 tiles side by side)
        P cast and packed in registers: the S accumulator's pairs are the A fragment of wgmma's register form
        O += P V: BN/16 wgmma m64nDk16, A = P from registers, B = V's chunk from shared memory (MN-major,
        transposed by the descriptor)

Shared layouts (flashgemm/spaces/cuda_wgmma's): K-major tiles (Q; K as [N, D]) are atoms of 8 rows x 64 elements
(1024 B) with the 16-byte chunk c of row r stored at c ^ (r % 8); MN-major tiles (V; K as [D, N]) the same with the
columns contiguous (atoms of 8 k x 64 n). Each tile starts on a 1024-byte boundary of the pool (wgmma applies the
swizzle to absolute addresses): the pool carries 1 KiB of slack and the kernel aligns its base.

Head sizes HEAD_SIZES (rows of 64 elements: whole swizzle atoms); the others keep the mma kernel. Each chunk's
wgmmas are retired before the softmax reads S and before the next chunk (wait_group 0); the other warpgroups of
the SM fill the gaps. Issuing the next chunk's S ahead of O += P V so that the softmax runs beside it
(FlashAttention-3's intra-warpgroup overlap) measured 8-45 % slower with cp.async copies issued by the same warps
(results/h200/attention-wgmma-2026-12-02, sweep-4): that design wants TMA, a producer warp and register
reallocation, which this kernel does not have. What it does overlap with S's wgmmas: a one-warpgroup tile's mask
reads (mma.Parts' fetched "elements"), so that the logits' Selects wait on no load, and where the bias and mask are
one row for all of S's (a padding mask [B, 1, 1, N], row stride 0) a thread's columns of them, read once for both
of its rows (fetched "columns", a chunk loop of its own behind a uniform branch). A bias and mask of rows (the
scores' full shape: DeBERTa's position terms, a decoder's mask) are staged on the one-warpgroup tile: each chunk's
BM x BN of them copied into shared memory with K's and V's chunk (16-byte cp.async, `stages` - 1 chunks ahead), where
the logits read them (a third chunk loop; calls whose rows' 16-byte runs are not 16-byte aligned read them in place).
"""
from __future__ import annotations

from types import SimpleNamespace

import tvm
from tvm.script import tirx as T

from flashgemm.kernel import fused_attention_mma as mma
from flashgemm.op.variant import BOOL_MASK_KINDS, Variant
from flashgemm.tvm_ext.wgmma import smem_descriptor

HEAD_SIZES = (64, 128)
# the tiles each head size ships with, (max_n, (warpgroups, bn, stages)) with max_n the longest N a tile serves (None:
# any): the fastest of the measured sweep at W1-W3 and N = 256, 1024 (d = 64), the causal prefill shape and its
# non-causal twin (d = 128): results/h200/attention-wgmma-2026-12-02. Short sequences run more, smaller tiles.
TILES = {64: ((1024, (1, 64, 2)), (None, (2, 128, 3))), 128: ((None, (2, 64, 2)),)}
ALIGN = mma.ALIGN
n_multiple = mma.n_multiple
LOG2E, LOWEST = mma.LOG2E, mma.LOWEST
V_SPLITS = mma.V_SPLITS
SWIZZLE_BYTES = 1024
# a block's most shared memory (bytes) with a staged bias or mask: three blocks an SM (228 KiB, 1 KiB of each reserved)
STAGED_POOL_LIMIT = 75 * 1024


def _xor(a, b):
    return T.bitwise_xor(a, b)


def k_major(r, k, rows: int):
    """Element offset of (r, k) in a K-major swizzled tile of `rows` rows (k-atoms of 64 elements): cuda_wgmma.swizzled
    flattened, with a bitwise XOR (no transform_layout has to bound it here)."""
    return (k // 64) * (rows * 64) + (r // 8) * 512 + (r % 8) * 64 + _xor((k // 8) % 8, r % 8) * 8 + k % 8


def mn_major(k, n, cols: int):
    """Element offset of (k, n) in an MN-major swizzled tile of `cols` columns (k-tiles of 64 rows, 64-column
    groups): cuda_wgmma.swizzled_mn flattened."""
    return (k // 64) * (64 * cols) + (n // 64) * 4096 + (k % 64) // 8 * 512 + (k % 8) * 64 \
        + _xor((n % 64) // 8, k % 8) * 8 + n % 8


def Pipeline(variant: Variant, d: int, wg: int, bn: int, stages: int, with_v: bool = True,
             names: tuple = ("Q", "K", "V"), row_strides: bool = False) -> SimpleNamespace:
    """What the Hopper kernels (this one and fused_gemm_softmax_wgmma's) share for head size `d` (the GEMM's K), `wg`
    warpgroups (BM = 64 wg rows), chunks of `bn` columns (a multiple of 64) and `stages` shared buffers: the sizes
    (B0, B1, M, N symbolic), Q's and K's (and, with_v, V's) shapes and strides (named after `names`), the shared
    pool's layout (elements: Q's tile, then per stage K, then per stage V, every tile a multiple of 1024 B, and the
    slack to start on a 1024-byte boundary), the 16-byte copies and S = Q K^T's wgmmas. row_strides: Q's, K's ([N, D])
    and V's row strides are symbolic (rq, rk, rv; BSNH views, flashgemm/op/variant.py:canonicalize), else D."""
    if d not in HEAD_SIZES:
        raise ValueError(f"head size {d}: the wgmma kernels have {HEAD_SIZES}")
    if bn % 64 or not 64 <= bn <= 256 or wg not in (1, 2, 3):
        raise ValueError(f"tile wg={wg} bn={bn}: the wgmma kernels take 1 to 3 warpgroups, chunks of 64, 128, 192 "
                         "or 256 columns")
    dt = variant.dtype
    ty = "f16" if dt == "float16" else "bf16"
    trans_b = variant.trans_b
    BM, BN, D, NT = 64 * wg, bn, d, 128 * wg
    KS, NTS = D // 16, BN // 8  # k-steps of Q K^T, n8 tiles of S
    s_mma = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{ty}.{ty}"
    Q_OFF, K_OFF = 0, BM * D
    V_OFF = K_OFF + stages * BN * D
    POOL = V_OFF + (stages * BN * D if with_v else 0) + SWIZZLE_BYTES // 2
    B0, B1, M, N = (tvm.tirx.Var(n, "int32") for n in ("B0", "B1", "M", "N"))
    sq, sk = mma._strides(names[0], 2), mma._strides(names[1], 2)
    sv = mma._strides(names[2], 2) if with_v else None
    k_shape = (B0, B1, N, D) if trans_b else (B0, B1, D, N)
    rq, rk, rv = (tvm.tirx.Var(f"{n}_s2", "int32") if row_strides else D for n in names)
    k_strides = (*sk, rk, 1) if trans_b else (*sk, N, 1)
    q_copies = (BM * D // 8 + NT - 1) // NT  # 16-byte copies a thread per Q tile (the last one guarded where
    k_copies = (BN * D // 8 + NT - 1) // NT  # ... per K or V chunk                 they do not divide evenly)

    def whole(copies, chunks):  # whether every thread's last copy is in the tile (no guard)
        return copies * NT == chunks

    @T.macro
    def copy16(pool, at, src, src_at):
        """16 bytes by cp.async from element src_at of src to element `at` of the pool (declared in bytes)."""
        T.s_tir.cp_async_raw.legacy(pool.access_ptr("w"), at * 2, src.data, src_at, 16, dtype=dt)

    @T.macro
    def copy_q(pool, al, Q, b0, b1, m0, tid):
        """Q's tile (rows past M read row M - 1)."""
        for c in T.unroll(q_copies):
            r: T.let[T.int32] = (c * NT + tid) // (D // 8)
            ch: T.let[T.int32] = (c * NT + tid) % (D // 8)
            if whole(q_copies, BM * D // 8) or c * NT + tid < BM * D // 8:
                copy16(pool, al + Q_OFF + k_major(r, ch * 8, BM), Q,
                       b0 * sq[0] + b1 * sq[1] + T.min(m0 + r, M - 1) * rq + ch * 8)

    @T.macro
    def copy_chunk(chunk, stage, pool, al, Km, V, b0, b1, tid):
        """K's (and V's) chunk `chunk` (rows past N read row N - 1) to stage `stage`, 16 bytes a cp.async."""
        if with_v or trans_b:
            for c in T.unroll(k_copies):
                r: T.let[T.int32] = (c * NT + tid) // (D // 8)
                ch: T.let[T.int32] = (c * NT + tid) % (D // 8)
                if whole(k_copies, BN * D // 8) or c * NT + tid < BN * D // 8:
                    if with_v:
                        copy16(pool, al + V_OFF + stage * BN * D + mn_major(r, ch * 8, D), V,
                               b0 * sv[0] + b1 * sv[1] + T.min(chunk * BN + r, N - 1) * rv + ch * 8)
                    if trans_b:
                        copy16(pool, al + K_OFF + stage * BN * D + k_major(r, ch * 8, BN), Km,
                               b0 * sk[0] + b1 * sk[1] + T.min(chunk * BN + r, N - 1) * rk + ch * 8)
        if not trans_b:  # K as [D, N]: rows of BN columns
            for c in T.unroll(k_copies):
                r: T.let[T.int32] = (c * NT + tid) // (BN // 8)
                ch: T.let[T.int32] = (c * NT + tid) % (BN // 8)
                if whole(k_copies, BN * D // 8) or c * NT + tid < BN * D // 8:
                    copy16(pool, al + K_OFF + stage * BN * D + mn_major(r, ch * 8, BN), Km,
                           b0 * sk[0] + b1 * sk[1] + r * N + T.min(chunk * BN + ch * 8, N - 8))

    @T.macro
    def fence_operands(acc, n):  # keep nvcc from moving register accesses across an asynchronous wgmma
        for i in T.unroll(n):
            T.cuda.wgmma.noop_barrier(acc[i])

    def q_descriptor(addr0, wgi, ks):  # Q's rows of warpgroup wgi at k16 step ks (K-major)
        return smem_descriptor(addr0 + T.cast((Q_OFF + (ks // 4) * BM * 64 + wgi * 4096 + (ks % 4) * 16) * 2, "uint32"))

    @T.macro
    def issue_s(s_acc, addr0, wgi, st):
        """S = Q K^T for the chunk in stage st: D/16 wgmmas from shared memory, committed as one group."""
        for i in T.unroll(NTS * 4):
            s_acc[i] = T.float32(0)
        fence_operands(s_acc, NTS * 4)
        T.ptx.wgmma.fence.sync.aligned()
        for ks in T.unroll(KS):
            if trans_b:
                T.ptx[s_mma](
                    *[s_acc[i] for i in range(NTS * 4)],
                    q_descriptor(addr0, wgi, ks),
                    smem_descriptor(addr0 + T.cast((K_OFF + st * BN * D + (ks // 4) * BN * 64 + (ks % 4) * 16) * 2,
                                                   "uint32")),
                    True, 1, 1, 0, 0)
            else:  # K as [D, N]: MN-major, transposed by the descriptor
                T.ptx[s_mma](
                    *[s_acc[i] for i in range(NTS * 4)],
                    q_descriptor(addr0, wgi, ks),
                    smem_descriptor(addr0 + T.cast((K_OFF + st * BN * D + (ks // 4) * 64 * BN + (ks % 4) * 1024) * 2,
                                                   "uint32"), lbo=8192),
                    True, 1, 1, 0, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    return SimpleNamespace(BM=BM, BN=BN, D=D, NT=NT, NTS=NTS, V_OFF=V_OFF, POOL=POOL, B0=B0, B1=B1, M=M, N=N,
                           sq=sq, sk=sk, sv=sv, rq=rq, rv=rv, k_shape=k_shape, k_strides=k_strides, copy_q=copy_q,
                           copy_chunk=copy_chunk, fence_operands=fence_operands, issue_s=issue_s)


def runtime_func(variant: Variant, d: int, wg: int = 0, bn: int = 128, stages: int = 2,
                 name: str = "main") -> tvm.tirx.PrimFunc:
    """The kernel fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows) for head size `d` (the mma kernel's
    signature). Tile: `wg` warpgroups (BM = 64 wg rows), chunks of `bn` columns (a multiple of 64), `stages` shared
    buffers."""
    if d not in HEAD_SIZES:
        raise ValueError(f"head size {d}: the wgmma kernel has {HEAD_SIZES}")
    if not wg:  # the tile for any N
        wg, bn, stages = TILES[d][-1][1]
    pipe = Pipeline(variant, d, wg, bn, stages, row_strides=True)
    dt = variant.dtype
    ty = "f16" if dt == "float16" else "bf16"
    mask_kind, causal = variant.mask, variant.causal
    mask_dtype = "uint8" if mask_kind in BOOL_MASK_KINDS else dt
    BM, BN, D, NT, NTS = pipe.BM, pipe.BN, pipe.D, pipe.NT, pipe.NTS
    DTS = D // 8  # n8 tiles of O
    o_mma = f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{ty}.{ty}"
    V_OFF, POOL = pipe.V_OFF, pipe.POOL
    B0, B1, M, N = pipe.B0, pipe.B1, pipe.M, pipe.N
    sq, sv = pipe.sq, pipe.sv
    copy_chunk, fence_operands, issue_s = pipe.copy_chunk, pipe.fence_operands, pipe.issue_s
    # a mask fetched into registers while S is computed (its Select then waits on no load): where the registers allow
    # it, one warpgroup a block (two at 128 registers each would drop to one block an SM), and not beside a bias
    # (bias-only variants measured slower so: BENCHMARKS.md)
    prefetch = mask_kind != "none" and not variant.has_bias and wg == 1
    # the one-warpgroup tile's registers allow the interior chunks to skip the column bounds (two would need more
    # than 128)
    parts = mma.Parts(variant, D, BN, NT, 1, B0, B1, M, N, fetched="elements" if prefetch else "",
                      bound_edges_only=wg == 1)
    # a bias and mask of one row (a padding mask [B, 1, 1, N]) take a uniform branch to a chunk loop that reads a
    # thread's columns of a chunk once for its rows, fetched while S is computed; on the one-warpgroup tile only (two
    # warpgroups would need more than the 128 registers that keep two blocks an SM)
    by_columns = (variant.has_bias or mask_kind != "none") and wg == 1
    cols = mma.Parts(variant, D, BN, NT, 1, B0, B1, M, N, fetched="columns", bound_edges_only=True)
    # staged: a bias and mask of rows (the scores' full shape) copied chunk by chunk into shared memory with K's and
    # V's chunks (rows of 16-byte cp.async, in flight `stages` - 1 chunks ahead), the logits reading them there; for
    # the one-warpgroup tile, each where the pool then keeps three blocks an SM (STAGED_POOL_LIMIT), and for calls
    # whose strides, offset and N put a row's 16-byte runs on 16-byte boundaries (staged_ok; else read in place)
    inplace = mma.Parts(variant, D, BN, NT, 1, B0, B1, M, N, bound_edges_only=wg == 1)
    mask_bytes = 1 if mask_kind in BOOL_MASK_KINDS else 2
    # a staged row (bytes): 16-byte aligned and padded, so that a warp's reads (8 rows x 4 threads, two elements
    # each) meet 32 banks
    RB, RM = (BN + 8) * 2, (BN + 16 if mask_bytes == 1 else (BN + 8) * 2)
    STAGE_B = (V_OFF + stages * BN * D) * 2  # the staged rows' place past the tiles (bytes from the aligned base)
    pool_bytes = POOL * 2
    staged_bias = staged_mask = False
    if wg == 1 and variant.has_bias and pool_bytes + stages * BM * RB <= STAGED_POOL_LIMIT:
        staged_bias, pool_bytes = True, pool_bytes + stages * BM * RB
    MASK_B = STAGE_B + (stages * BM * RB if staged_bias else 0)
    if wg == 1 and mask_kind != "none" and pool_bytes + stages * BM * RM <= STAGED_POOL_LIMIT:
        staged_mask, pool_bytes = True, pool_bytes + stages * BM * RM
    staged = staged_bias or staged_mask

    def runs_aligned(X, per16):  # X's 16-byte runs of a row start on 16-byte boundaries (per16 elements a run)
        return tvm.tirx.all(X.elem_offset % per16 == 0, X.strides[0] % per16 == 0, X.strides[1] % per16 == 0,
                            X.strides[2] % per16 == 0, X.strides[3] == 1, N % per16 == 0,
                            T.bitwise_and(T.reinterpret("uint64", X.data), T.uint64(15)) == T.uint64(0))

    def staged_ok(Bias, Mask):
        """Whether the call's staged bias and mask can be copied in 16-byte runs (a block-uniform value)."""
        ok = ([runs_aligned(Bias, 8)] if staged_bias else []) + ([runs_aligned(Mask, 16 // mask_bytes)]
                                                                 if staged_mask else [])
        return tvm.tirx.all(*ok) if ok else T.bool(False)

    @T.macro
    def copy_staged(chunk, stage, pool, al, Bias, Mask, b0, b1, m0, tid):
        """The staged bias's and mask's rows m0 .. m0 + BM - 1 (past M: row M - 1) of chunk `chunk` (columns past N:
        the last 16-byte run's, masked) to stage `stage`, 16 bytes a cp.async."""
        if staged_bias:
            for c in T.unroll(BM * BN // 8 // NT):
                r: T.let[T.int32] = (c * NT + tid) // (BN // 8)
                ch: T.let[T.int32] = (c * NT + tid) % (BN // 8)
                T.s_tir.cp_async_raw.legacy(
                    pool.access_ptr("w"), al * 2 + STAGE_B + stage * BM * RB + r * RB + ch * 16, Bias.data,
                    Bias.elem_offset + b0 * Bias.strides[0] + b1 * Bias.strides[1]
                    + T.min(m0 + r, M - 1) * Bias.strides[2] + T.min(chunk * BN + ch * 8, N - 8), 16, dtype=dt)
        if staged_mask:
            for c in T.unroll(BM * BN * mask_bytes // 16 // NT):
                r: T.let[T.int32] = (c * NT + tid) // (BN * mask_bytes // 16)
                ch: T.let[T.int32] = (c * NT + tid) % (BN * mask_bytes // 16)
                T.s_tir.cp_async_raw.legacy(
                    pool.access_ptr("w"), al * 2 + MASK_B + stage * BM * RM + r * RM + ch * 16, Mask.data,
                    Mask.elem_offset + b0 * Mask.strides[0] + b1 * Mask.strides[1]
                    + T.min(m0 + r, M - 1) * Mask.strides[2]
                    + T.min(chunk * BN + ch * (16 // mask_bytes), N - 16 // mask_bytes), 16, dtype=mask_dtype)

    @T.macro
    def issue_o(o_acc, p_frag, addr0, st):
        """O += P V for the chunk in stage st: BN/16 wgmmas, P's A fragment for k-step kk from registers (S's n8
        tiles 2 kk and 2 kk + 1), V MN-major; committed as one group."""
        fence_operands(o_acc, DTS * 4)
        fence_operands(p_frag, NTS * 2)
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BN // 16):
            T.ptx[o_mma](
                *[o_acc[i] for i in range(DTS * 4)],
                p_frag[kk * 4], p_frag[kk * 4 + 1], p_frag[kk * 4 + 2], p_frag[kk * 4 + 3],
                smem_descriptor(
                    addr0 + T.cast((V_OFF + st * BN * D + (kk // 4) * 64 * D + (kk % 4) * 1024) * 2, "uint32"),
                    lbo=8192),
                True, 1, 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()


    @T.macro
    def chunk_loop(ps, bias_x, mask_x, Bias, Mask, pool, al, addr0, Km, V, s_acc, o_acc, p_frag, m_run, l_run,
                   m_chunk, alpha, scale_l2, b0, b1, m0, w, g, t4, wgi, tid, n_chunks, zero_nan_rows, staging):
        """The chunk loop, its logits those of Parts ps: reading Bias and Mask in place, or the registers bias_x and
        mask_x that ps.fetched names, fetched while S's wgmmas run; staging (a Python bool): the staged bias and
        mask read from their shared rows (copy_staged) instead. Each gets its own loop, so that a uniform branch
        between two keeps each loop's registers as a kernel of one would."""
        for j in T.serial(n_chunks):
            nj: T.let[T.int32] = j + stages - 1
            if nj < n_chunks:
                copy_chunk(nj, nj % stages, pool, al, Km, V, b0, b1, tid)
                if staging:
                    copy_staged(nj, nj % stages, pool, al, Bias, Mask, b0, b1, m0, tid)
            T.ptx.cp.async_.commit_group()
            T.ptx.cp.async_.wait_group(stages - 1)
            # the copies wrote through the generic proxy; wgmma reads through the async one
            T.ptx.fence.proxy.async_.shared__cta()
            T.tvm_storage_sync("shared")
            issue_s(s_acc, addr0, wgi, j % stages)
            if ps.fetched == "elements":
                ps.fetch_bias_mask(bias_x, mask_x, Bias, Mask, b0, b1, m0, j * BN, w, g, t4)
            elif ps.fetched == "columns":
                ps.fetch_columns(bias_x, mask_x, Bias, Mask, b0, b1, j * BN, t4)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            fence_operands(s_acc, NTS * 4)
            if staging:  # the stage's rows as Bias and Mask of the scores' shape (row i, column n at i - m0, n - j BN)
                st_b: T.let[T.int32] = al + (STAGE_B + j % stages * BM * RB) // 2 - m0 * (RB // 2) - j * BN
                st_m: T.let[T.int32] = (al * 2 + MASK_B + j % stages * BM * RM) // mask_bytes \
                    - m0 * (RM // mask_bytes) - j * BN
                bias_s = T.decl_buffer((B0, B1, M, N), dt, data=pool.data, strides=(0, 0, RB // 2, 1),
                                       elem_offset=st_b, scope="shared.dyn") if staged_bias else Bias
                mask_s = T.decl_buffer((B0, B1, M, N), mask_dtype, data=pool.data,
                                       strides=(0, 0, RM // mask_bytes, 1), elem_offset=st_m,
                                       scope="shared.dyn") if staged_mask else Mask
                ps.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, bias_s, mask_s, scale_l2, b0, b1, m0,
                                  j * BN, w, g, t4, zero_nan_rows)
            elif ps.fetched == "":
                ps.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2, b0, b1, m0,
                                  j * BN, w, g, t4, zero_nan_rows)
            else:
                ps.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, bias_x, mask_x, scale_l2, b0, b1, m0,
                                  j * BN, w, g, t4, zero_nan_rows)
            for i in T.unroll(NTS * 2):
                p_frag[i] = ps.pack(s_acc[i * 2], s_acc[i * 2 + 1])  # P's A fragment
            issue_o(o_acc, p_frag, addr0, j % stages)
            T.ptx.wgmma.wait_group.sync.aligned(0)
            fence_operands(o_acc, DTS * 4)
            T.tvm_storage_sync("shared")

    @T.prim_func(s_tir=True)
    def fused_attention_wgmma(q_h: T.handle, k_h: T.handle, v_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                              o_h: T.handle, scale: T.float32, zero_nan_rows: T.int32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        Q = T.match_buffer(q_h, (B0, B1, M, D), dt, strides=(*sq, pipe.rq, 1), align=16)
        Km = T.match_buffer(k_h, pipe.k_shape, dt, strides=pipe.k_strides, align=16)
        V = T.match_buffer(v_h, (B0, B1, N, D), dt, strides=(*sv, pipe.rv, 1), align=16)
        Bias = T.match_buffer(bias_h, (B0, B1, M, N), dt, strides=mma._strides("bias", 4), align=2, offset_factor=1)
        Mask = T.match_buffer(mask_h, (B0, B1, M, N), mask_dtype, strides=mma._strides("mask", 4), align=1,
                              offset_factor=1)
        O = T.match_buffer(o_h, (B0, B1, M, D), dt, strides=(*mma._strides("O", 3), 1), align=16, offset_factor=1)
        O32 = T.decl_buffer((B0 * O.strides[0] // 2,), "uint32", data=O.data)  # two elements a word
        V_last = T.alloc_buffer((V_SPLITS, B0, B1, D), "int32")
        if causal:
            parts.record_v_last(V, V_last)
        for bz in T.thread_binding(B0, thread="blockIdx.z"):
            for by in T.thread_binding(B1, thread="blockIdx.y"):
                for bx in T.thread_binding((M + BM - 1) // BM, thread="blockIdx.x"):
                    for ty in T.thread_binding(4 * wg, thread="threadIdx.y"):
                        for tx in T.thread_binding(32, thread="threadIdx.x"):
                            with T.sblock("attention"):
                                b0, b1, bt, w, lane = T.axis.remap("SSSSS", [bz, by, bx, ty, tx])
                                T.reads()
                                T.writes()
                                # bytes: the dynamic pool's declaration is the same in every kernel of a translation
                                # unit (a bundle's fp16 and bf16 kernels), whatever the dtype
                                pool = T.sblock_alloc_buffer((pool_bytes,), "uint8", scope="shared.dyn")
                                p_frag = T.sblock_alloc_buffer((NTS * 2,), "uint32", scope="local")
                                s_acc = T.sblock_alloc_buffer((NTS * 4,), "float32", scope="local")
                                o_acc = T.sblock_alloc_buffer((DTS * 4,), "float32", scope="local")
                                m_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                l_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                m_chunk = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                alpha = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                v_bad = T.sblock_alloc_buffer((D,), "int32", scope="shared")
                                # prefetch: the chunk's bias and mask, fetched while its S is computed
                                bias_r = T.sblock_alloc_buffer((NTS * 4 if prefetch else 1,), dt, scope="local")
                                mask_r = T.sblock_alloc_buffer((NTS * 4 if prefetch else 1,), mask_dtype, scope="local")
                                bias_c = T.sblock_alloc_buffer((NTS * 2 if by_columns else 1,), dt, scope="local")
                                mask_c = T.sblock_alloc_buffer((NTS * 2 if by_columns else 1,), mask_dtype,
                                                               scope="local")
                                v_last = T.sblock_alloc_buffer((1,), "int32", scope="local")
                                inv_l = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                fill_need = T.sblock_alloc_buffer((1,), "int32", scope="local")
                                tid: T.let[T.int32] = w * 32 + lane
                                g: T.let[T.int32] = lane // 4
                                t4: T.let[T.int32] = lane % 4
                                wgi: T.let[T.int32] = w // 4  # the warpgroup
                                # the pool's first 1024-byte boundary: element offset and shared address
                                base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(pool.access_ptr("rw"))
                                al: T.let[T.int32] = T.cast(
                                    (T.uint32(SWIZZLE_BYTES) - base % T.uint32(SWIZZLE_BYTES))
                                    % T.uint32(SWIZZLE_BYTES), "int32") // 2
                                addr0: T.let[T.uint32] = base + T.cast(al * 2, "uint32")
                                m0: T.let[T.int32] = ((M + BM - 1) // BM - 1 - bt if causal else bt) * BM
                                scale_l2: T.let[T.float32] = scale * T.float32(LOG2E)
                                if variant.causal_fill:
                                    parts.need_all(fill_need, Bias, b0, b1, m0, tid)
                                n_end: T.let[T.int32] = parts.tile_end(m0, BM, fill_need)
                                n_chunks: T.let[T.int32] = (n_end + BN - 1) // BN
                                for i in T.unroll(DTS * 4):
                                    o_acc[i] = T.float32(0)
                                for i in T.unroll(2):
                                    m_run[i] = T.float32(LOWEST)
                                    l_run[i] = T.float32(0)
                                pipe.copy_q(pool, al, Q, b0, b1, m0, tid)
                                if staged:  # which chunk loop (a uniform branch): one row's columns, staged, in place
                                    one_row: T.let[T.bool] = cols.one_row(Bias, Mask)
                                    use_staged: T.let[T.bool] = tvm.tirx.all(tvm.tirx.Not(one_row),
                                                                             staged_ok(Bias, Mask))
                                    for st in T.unroll(stages - 1):
                                        if st < n_chunks:
                                            copy_chunk(st, st, pool, al, Km, V, b0, b1, tid)
                                            if use_staged:
                                                copy_staged(st, st, pool, al, Bias, Mask, b0, b1, m0, tid)
                                        T.ptx.cp.async_.commit_group()
                                    parts.find_v_bad(v_bad, v_last, V_last, b0, b1, n_end, tid)
                                    if one_row:
                                        chunk_loop(cols, bias_c, mask_c, Bias, Mask, pool, al, addr0, Km, V, s_acc,
                                                   o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2, b0, b1, m0, w,
                                                   g, t4, wgi, tid, n_chunks, zero_nan_rows, False)
                                    elif use_staged:
                                        chunk_loop(inplace, bias_r, mask_r, Bias, Mask, pool, al, addr0, Km, V, s_acc,
                                                   o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2, b0, b1, m0, w,
                                                   g, t4, wgi, tid, n_chunks, zero_nan_rows, True)
                                    else:
                                        chunk_loop(parts, bias_r, mask_r, Bias, Mask, pool, al, addr0, Km, V, s_acc,
                                                   o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2, b0, b1, m0, w,
                                                   g, t4, wgi, tid, n_chunks, zero_nan_rows, False)
                                else:
                                    for st in T.unroll(stages - 1):
                                        if st < n_chunks:
                                            copy_chunk(st, st, pool, al, Km, V, b0, b1, tid)
                                        T.ptx.cp.async_.commit_group()
                                    parts.find_v_bad(v_bad, v_last, V_last, b0, b1, n_end, tid)
                                    if by_columns:
                                        if cols.one_row(Bias, Mask):
                                            chunk_loop(cols, bias_c, mask_c, Bias, Mask, pool, al, addr0, Km, V,
                                                       s_acc, o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2,
                                                       b0, b1, m0, w, g, t4, wgi, tid, n_chunks, zero_nan_rows, False)
                                        else:
                                            chunk_loop(parts, bias_r, mask_r, Bias, Mask, pool, al, addr0, Km, V,
                                                       s_acc, o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2,
                                                       b0, b1, m0, w, g, t4, wgi, tid, n_chunks, zero_nan_rows, False)
                                    else:
                                        chunk_loop(parts, bias_r, mask_r, Bias, Mask, pool, al, addr0, Km, V, s_acc,
                                                   o_acc, p_frag, m_run, l_run, m_chunk, alpha, scale_l2, b0, b1, m0, w,
                                                   g, t4, wgi, tid, n_chunks, zero_nan_rows, False)
                                T.ptx.cp.async_.wait_group(0)
                                parts.store_o(O, O32, o_acc, l_run, inv_l, v_bad, b0, b1, m0, w, g, t4, zero_nan_rows)

    return mma.finish(fused_attention_wgmma, variant, name)
