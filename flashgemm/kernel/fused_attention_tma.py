"""FusedAttention's warp-specialized Hopper kernel (sm_90a): TMA copies by a producer warpgroup, wgmma consumers.

fused_attention_wgmma's math (the same shared layouts, S and O wgmmas, online softmax, masking, NaN rules and
epilogue) with its copies and synchronization replaced, FlashAttention-3's producer/consumer design:

    threadIdx.y = warp: warps 0-7 are two consumer warpgroups (64 rows of the BM = 128 tile each), warps 8-11 the
    producer warpgroup; the producer gives up registers (setmaxnreg.dec), the consumers take them (setmaxnreg.inc)
    producer, one thread: Q's tile, then each chunk's K and V into a ring of `stages` shared buffers by TMA
        (cp.async.bulk.tensor from tensor maps the host function encodes each call, 128-byte swizzle: the layout the
        wgmma descriptors read), each stage's `full` mbarrier counting the bytes; it waits on the stage's `empty`
        mbarrier before refilling it
    consumers: wait on `full`, S = Q K^T, online softmax, O += P V (wgmma), then arrive on `empty`; no block-wide
        barrier in the loop, so the two warpgroups drift apart and one's softmax runs beside the other's wgmmas
Rows past M and columns past N read zeros (TMA's out-of-bounds fill; the softmax masks those columns).
K as [N, D] (trans_b) only; head sizes 64 and 128. Against the cp.async kernel (kernel alone, H200, 2026-12-04,
results/h200/attention-tma-2026-12-04): W3 -18 %, W1 -9 %, the causal prefill -2 %, so it ships as the tile for
any N (TILES); fused_attention_wgmma's short-sequence tile (64-row blocks) keeps N up to 1024 at head size 64.
"""
from __future__ import annotations

import tvm
from tvm.script import tirx as T

from flashgemm.kernel import fused_attention_mma as mma
from flashgemm.kernel import fused_attention_wgmma as wg_kernel
from flashgemm.op.variant import Variant

HEAD_SIZES = wg_kernel.HEAD_SIZES
TILES = {64: (128, 2), 128: (128, 2)}  # (chunk columns, stages) shipped for any N: the fastest of the probe's three
ALIGN = mma.ALIGN  # bytes: every pointer (TMA's global addresses and strides take 16)
n_multiple = mma.n_multiple
CONSUMERS = 2  # consumer warpgroups (BM = 64 CONSUMERS rows)
PRODUCER_REGS, CONSUMER_REGS = 24, 240  # 128 x 24 + 256 x 240 <= 64 Ki registers of an SM
BOX = 64  # a TMA box's inner extent: 64 elements = the 128-byte swizzle's row


def runtime_func(variant: Variant, d: int, bn: int = 0, stages: int = 2, name: str = "main") -> tvm.tirx.PrimFunc:
    """The kernel fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows) for head size `d`: chunks of `bn` columns
    (0: the shipped tile), `stages` shared buffers."""
    if d not in HEAD_SIZES:
        raise ValueError(f"head size {d}: the TMA kernel has {HEAD_SIZES}")
    if not bn:
        bn, stages = TILES[d]
    if not variant.trans_b:
        raise ValueError("the TMA kernel takes K as [N, D] (trans_b); K as [D, N] keeps fused_attention_wgmma")
    pipe = wg_kernel.Pipeline(variant, d, CONSUMERS, bn, stages)
    dt = variant.dtype
    ty = "f16" if dt == "float16" else "bf16"
    mask_kind, causal = variant.mask, variant.causal
    mask_dtype = "uint8" if mask_kind == "bool" else dt
    BM, BN, D, NT, NTS = pipe.BM, pipe.BN, pipe.D, pipe.NT, pipe.NTS
    DTS = D // 8
    o_mma = f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{ty}.{ty}"
    K_OFF, V_OFF, POOL = BM * D, pipe.V_OFF, pipe.POOL
    B0, B1, M, N = pipe.B0, pipe.B1, pipe.M, pipe.N
    sq, sk, sv = pipe.sq, pipe.sk, pipe.sv
    fence_operands, issue_s = pipe.fence_operands, pipe.issue_s
    parts = mma.Parts(variant, D, BN, NT, 1, B0, B1, M, N)
    chunk_bytes = 2 * BN * D * 2
    QBAR, FULL, EMPTY = 0, 1, 1 + stages
    tma4 = "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"

    def bits(x):
        return T.cast(T.reinterpret("uint16", T.cast(x, dt)), "uint32")

    def pack(lo, hi):
        return T.bitwise_or(T.shift_left(bits(hi), T.uint32(16)), bits(lo))

    def smem(addr0, elem):  # the shared byte address of pool element `elem` (from the aligned base)
        return addr0 + T.cast(elem * 2, "uint32")

    def encode(tmap, buf, rows, strides, box_rows):
        """The host's tensor map of buf [B0, B1, rows, D] (element strides: batch, head), boxes of BOX x box_rows."""
        return T.call_packed("runtime.cuTensorMapEncodeTiled", tmap, dt, 4, buf.data,
                             D, rows, B1, B0, D * 2, strides[1] * 2, strides[0] * 2,
                             BOX, box_rows, 1, 1, 1, 1, 1, 1, 0, 3, 0, 0)

    @T.macro
    def issue_o(o_acc, p_frag, addr0, st):
        fence_operands(o_acc, DTS * 4)
        fence_operands(p_frag, NTS * 2)
        T.ptx.wgmma.fence.sync.aligned()
        for kk in T.unroll(BN // 16):
            T.ptx[o_mma](
                *[o_acc[i] for i in range(DTS * 4)],
                p_frag[kk * 4], p_frag[kk * 4 + 1], p_frag[kk * 4 + 2], p_frag[kk * 4 + 3],
                wg_kernel.smem_descriptor(smem(addr0, V_OFF + st * BN * D + (kk // 4) * 64 * D + (kk % 4) * 1024),
                                          lbo=8192),
                True, 1, 1, 1)
        T.ptx.wgmma.commit_group.sync.aligned()

    @T.prim_func(s_tir=True)
    def fused_attention_tma(q_h: T.handle, k_h: T.handle, v_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                            o_h: T.handle, scale: T.float32, zero_nan_rows: T.int32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        Q = T.match_buffer(q_h, (B0, B1, M, D), dt, strides=(*sq, D, 1), align=16)
        Km = T.match_buffer(k_h, pipe.k_shape, dt, strides=pipe.k_strides, align=16)
        V = T.match_buffer(v_h, (B0, B1, N, D), dt, strides=(*sv, D, 1), align=16)
        Bias = T.match_buffer(bias_h, (B0, B1, M, N), dt, strides=mma._strides("bias", 4), align=2, offset_factor=1)
        Mask = T.match_buffer(mask_h, (B0, B1, M, N), mask_dtype, strides=mma._strides("mask", 4), align=1,
                              offset_factor=1)
        O = T.match_buffer(o_h, (B0, B1, M, D), dt, align=16, offset_factor=1)
        V_last = T.alloc_buffer((mma.V_SPLITS, B0, B1, D), "int32")
        q_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        k_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        v_map: T.let[T.handle("tensormap")] = T.tvm_stack_alloca("tensormap", 1)
        encode(q_map, Q, M, sq, BM)
        encode(k_map, Km, N, sk, BN)
        encode(v_map, V, N, sv, 64)
        if causal:
            parts.record_v_last(V, V_last)
        for bz in T.thread_binding(B0, thread="blockIdx.z"):
            for by in T.thread_binding(B1, thread="blockIdx.y"):
                for bx in T.thread_binding((M + BM - 1) // BM, thread="blockIdx.x"):
                    for ty_ in T.thread_binding(4 * (CONSUMERS + 1), thread="threadIdx.y"):
                        for tx in T.thread_binding(32, thread="threadIdx.x"):
                            with T.sblock("attention"):
                                b0, b1, bt, w, lane = T.axis.remap("SSSSS", [bz, by, bx, ty_, tx])
                                T.reads()
                                T.writes()
                                pool = T.sblock_alloc_buffer((POOL * 2,), "uint8", scope="shared.dyn")
                                bars = T.sblock_alloc_buffer((1 + 2 * stages,), "uint64", scope="shared")
                                p_frag = T.sblock_alloc_buffer((NTS * 2,), "uint32", scope="local")
                                s_acc = T.sblock_alloc_buffer((NTS * 4,), "float32", scope="local")
                                o_acc = T.sblock_alloc_buffer((DTS * 4,), "float32", scope="local")
                                m_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                l_run = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                m_chunk = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                alpha = T.sblock_alloc_buffer((2,), "float32", scope="local")
                                v_bad = T.sblock_alloc_buffer((D,), "int32", scope="shared")
                                tid: T.let[T.int32] = w * 32 + lane
                                g: T.let[T.int32] = lane // 4
                                t4: T.let[T.int32] = lane % 4
                                wgi: T.let[T.int32] = w // 4
                                base: T.let[T.uint32] = T.cuda.cvta_generic_to_shared(pool.access_ptr("rw"))
                                al: T.let[T.int32] = T.cast(
                                    (T.uint32(1024) - base % T.uint32(1024)) % T.uint32(1024), "int32") // 2
                                addr0: T.let[T.uint32] = base + T.cast(al * 2, "uint32")
                                m0: T.let[T.int32] = ((M + BM - 1) // BM - 1 - bt if causal else bt) * BM
                                scale_l2: T.let[T.float32] = scale * T.float32(mma.LOG2E)
                                n_end: T.let[T.int32] = (T.max(T.min(N, m0 + BM + (N - M)), 0) if causal else N)
                                n_chunks: T.let[T.int32] = (n_end + BN - 1) // BN
                                if tid == 0:
                                    T.ptx.mbarrier.init.shared.b64(T.address_of(bars[QBAR]), T.uint32(1))
                                    for s in T.unroll(stages):
                                        T.ptx.mbarrier.init.shared.b64(T.address_of(bars[FULL + s]), T.uint32(1))
                                        T.ptx.mbarrier.init.shared.b64(T.address_of(bars[EMPTY + s]), T.uint32(NT))
                                    T.ptx.fence.mbarrier_init.release.cluster()
                                T.tvm_storage_sync("shared")
                                if wgi == CONSUMERS:  # the producer warpgroup
                                    T.ptx["setmaxnreg.dec.sync.aligned.u32"](PRODUCER_REGS)
                                    if tid == NT:
                                        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(bars[QBAR]),
                                                                                  T.uint32(BM * D * 2))
                                        for ka in T.unroll(D // BOX):
                                            T.ptx[tma4](smem(addr0, ka * BM * BOX), T.address_of(q_map),
                                                        ka * BOX, m0, b1, b0, T.address_of(bars[QBAR]))
                                        for j in T.serial(n_chunks):
                                            st: T.let[T.int32] = j % stages
                                            if j >= stages:
                                                T.cuda.mbarrier_wait(T.address_of(bars[EMPTY + st]),
                                                                     (j // stages + 1) % 2)
                                            T.ptx.mbarrier.arrive.expect_tx.shared.b64(
                                                T.address_of(bars[FULL + st]), T.uint32(chunk_bytes))
                                            for ka in T.unroll(D // BOX):
                                                T.ptx[tma4](smem(addr0, K_OFF + st * BN * D + ka * BN * BOX),
                                                            T.address_of(k_map), ka * BOX, j * BN, b1, b0,
                                                            T.address_of(bars[FULL + st]))
                                            for kt in T.unroll(BN // 64):
                                                for ng in T.unroll(D // BOX):
                                                    T.ptx[tma4](
                                                        smem(addr0, V_OFF + st * BN * D + kt * 64 * D + ng * 4096),
                                                        T.address_of(v_map), ng * BOX, j * BN + kt * 64, b1, b0,
                                                        T.address_of(bars[FULL + st]))
                                    if causal:  # store_o's block-wide barrier
                                        T.tvm_storage_sync("shared")
                                else:
                                    T.ptx["setmaxnreg.inc.sync.aligned.u32"](CONSUMER_REGS)
                                    for i in T.unroll(DTS * 4):
                                        o_acc[i] = T.float32(0)
                                    for i in T.unroll(2):
                                        m_run[i] = T.float32(mma.LOWEST)
                                        l_run[i] = T.float32(0)
                                    T.cuda.mbarrier_wait(T.address_of(bars[QBAR]), 0)
                                    for j in T.serial(n_chunks):
                                        T.cuda.mbarrier_wait(T.address_of(bars[FULL + j % stages]),
                                                             (j // stages) % 2)
                                        issue_s(s_acc, addr0, wgi, j % stages)
                                        T.ptx.wgmma.wait_group.sync.aligned(0)
                                        fence_operands(s_acc, NTS * 4)
                                        parts.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, Bias, Mask,
                                                             scale_l2, b0, b1, m0, j * BN, w, g, t4, zero_nan_rows)
                                        for i in T.unroll(NTS * 2):
                                            p_frag[i] = pack(s_acc[i * 2], s_acc[i * 2 + 1])
                                        issue_o(o_acc, p_frag, addr0, j % stages)
                                        T.ptx.wgmma.wait_group.sync.aligned(0)
                                        fence_operands(o_acc, DTS * 4)
                                        T.ptx.mbarrier.arrive.shared.b64(T.address_of(bars[EMPTY + j % stages]))
                                    parts.store_o(O, o_acc, l_run, v_bad, V_last, b0, b1, m0, n_end, w, g, t4, tid,
                                                  zero_nan_rows)

    return mma.finish(fused_attention_tma, variant, name)
