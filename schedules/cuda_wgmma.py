"""Hopper wgmma for the plain GEMM path: tensor intrinsics of our own and a Meta-Schedule design space (sm_90a).

TVM 0.27 registers no wgmma TensorIntrin, and its s_tir tensor intrinsics are mma.sync/WMMA only, but its CUDA
codegen knows the PTX (`T.ptx["wgmma.mma_async..."]`, `T.ptx.wgmma.fence/commit_group/wait_group`,
`T.cuda.wgmma.noop_barrier`). So the intrinsics below are ordinary s_tir TensorIntrins (desc + impl) used with
`sch.tensorize`, built for the arch-specific target sm_90a (wgmma does not exist on plain sm_90 PTX).

    blockIdx.x = (row group, block column, block row in the group)    threadIdx.y = WG warpgroups, threadIdx.x = 128
    for k0 (software pipeline, `stages` shared-memory buffers, cp.async copies):
        A [64 WG x BK], B [BN x BK] -> shared memory in wgmma's 128-byte-swizzled K-major layout
        tensorized: fence.proxy.async; __syncthreads; wgmma.fence; BK/16 x wgmma.mma_async m64n{BN}k16 (both
                    operands from shared memory through matrix descriptors); commit_group; wait_group 0
    C = cast(accumulators) stored from the registers

Shared layout (`swizzled`): atoms of 8 rows x 64 k (8 x 128 bytes = 1024 B), the 16-byte chunk c of row r stored at
chunk c ^ (r % 8) of its row, the layout wgmma reads with descriptor layout type 1 (stride 1024 B between 8-row
atoms; a k16 step is 32 bytes further). 8 consecutive threads copy one 128-byte row, which the swizzle spreads over
all banks. The XOR is written in floordiv/floormod arithmetic (transform_layout cannot bound bitwise_xor). Each
stage's tiles are multiples of 1024 B, so every atom sits on the 1024-byte boundary the swizzle assumes.
Accumulator: the m64nNk16 f32 fragment, thread t (warp w, lane l), register s holds row 16 w + l / 4 + 8 ((s / 2)
% 2), column 8 (s / 4) + 2 (l % 4) + s % 2.

The k-tile body is [copy A, copy B, wgmma] in the pipeline's order: TVM inserts the __syncthreads that keeps the
copy of k-tile t + stages - 1 from overwriting the buffer k-tile t - 1's wgmma read (retired by its wait_group 0),
and its cp.async.wait_group count is right only in this order (with the wgmma first it waited one group short).

Sketches: BN (block columns = the wgmma N), WG (warpgroups a block, BM = 64 WG) and pipeline depth, each a sketch
(the intrinsic's name, so its N, is fixed in a trace); sampled: the rasterization group (a level of the row tile).
Not done here (so not claimed): TMA, warp specialization with mbarriers, wait_group 1 across k-tiles (it needs a
spare buffer between the copies and the wgmma still reading, which the pipeline annotation cannot express), the
other dtypes' wgmma forms.
"""
from __future__ import annotations

import threading

import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from .cuda_build import register_wgmma_codegen
from .cuda_space import UnsupportedShapeError

ARCH = "sm_90a"  # wgmma is arch-specific: PTX for sm_90a only (H100, H200)
BK = 64
BNS = (128, 256)
WGS = (1, 2)
STAGES = (3, 4)
SMEM = "shared.dyn"
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16"}

_lock = threading.Lock()
_registered: set = set()


def acc_thread(r, c):  # the m64nNk16 accumulator fragment: which thread of the warpgroup holds (r, c)
    return (r // 16) * 32 + (r % 8) * 4 + (c % 8) // 2


def acc_slot(r, c):  # and in which of its registers
    return (c // 8) * 4 + ((r % 16) // 8) * 2 + c % 2


def _xor8(a, b):
    """a ^ b for 0 <= a, b < 8 in floordiv/floormod arithmetic: transform_layout bounds it (bitwise_xor it cannot)."""
    return (a % 2 + b % 2) % 2 + (a // 2 % 2 + b // 2 % 2) % 2 * 2 + (a // 4 + b // 4) % 2 * 4


def swizzled(r, k):
    """wgmma's 128-byte swizzle, K-major: atoms of 8 rows x 64 k (1024 B); the 16-byte chunk k // 8 of row r is
    stored at chunk (k // 8) ^ (r % 8) of its 128-byte row."""
    return (k // 64, r // 8, r % 8, _xor8((k // 8) % 8, r % 8), k % 8)


def _descriptor(ptr):
    """wgmma matrix descriptor: start address, 128-byte swizzle (layout type 1), stride byte offset 1024 B (the
    next 8-row atom), leading byte offset unused with this swizzle (1)."""
    addr = T.cuda.cvta_generic_to_shared(ptr)
    return (T.Cast("uint64", T.bitwise_and(addr, T.uint32(0x3FFFF)) >> T.uint32(4))
            | (T.uint64(1) << T.uint64(16)) | (T.uint64(64) << T.uint64(32)) | (T.uint64(1) << T.uint64(62)))


def intrin_names(dtype: str, bn: int) -> dict:
    return {"mma": f"fg_wgmma_m64n{bn}k{BK}_{PTX_TYPE[dtype]}_f32", "fill": f"fg_wgmma_fill_m64n{bn}_f32",
            "store": f"fg_wgmma_store_m64n{bn}_{PTX_TYPE[dtype]}"}


def register(dtype: str, bn: int) -> dict:
    """The three intrinsics of one (dtype, N): mma (BK/16 wgmmas of a k-tile), fill (zero) and store (cast)."""
    names = intrin_names(dtype, bn)
    with _lock:
        if names["mma"] in _registered:
            return names
        _register(dtype, bn, names)
        _registered.add(names["mma"])
    return names


def register_all() -> None:
    """Every intrinsic a record of this space can name (a database's traces are replayed by name)."""
    for dtype in PTX_TYPE:
        for bn in BNS:
            register(dtype, bn)


def _register(dtype: str, bn: int, names: dict) -> None:
    nacc, ka = bn // 2, BK // 64
    chain = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{PTX_TYPE[dtype]}.{PTX_TYPE[dtype]}"

    @T.prim_func(s_tir=True)
    def mma_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (ka, 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM)
        B = T.match_buffer(b, (ka, bn // 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM)
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc], A[0:ka, 0:8, 0:8, 0:8, 0:8], B[0:ka, 0:bn // 8, 0:8, 0:8, 0:8])
            T.writes(C[0:128, 0:nacc])
            for i, j, k in T.grid(64, bn, BK):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[acc_thread(vi, vj), acc_slot(vi, vj)] = C[acc_thread(vi, vj), acc_slot(vi, vj)] + T.Cast(
                        "float32", A[vk // 64, vi // 8, vi % 8, _xor8(vk % 64 // 8, vi % 8), vk % 8]) * T.Cast(
                        "float32", B[vk // 64, vj // 8, vj % 8, _xor8(vk % 64 // 8, vj % 8), vk % 8])

    @T.prim_func(s_tir=True)
    def mma_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sa2, sa3, sa4 = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        sb0, sb1, sb2, sb3, sb4 = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (ka, 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM,
                           strides=[sa0, sa1, sa2, sa3, sa4])
        B = T.match_buffer(b, (ka, bn // 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM,
                           strides=[sb0, sb1, sb2, sb3, sb4])
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc], A[0:ka, 0:8, 0:8, 0:8, 0:8], B[0:ka, 0:bn // 8, 0:8, 0:8, 0:8])
            T.writes(C[0:128, 0:nacc])
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                # one loop statement: the software pipeline takes the k-tile body as [copy A, copy B, mma]
                for kk in T.unroll(BK // 16):
                    if kk == 0:
                        # the copies wrote shared memory through the generic proxy; wgmma reads it through the
                        # async proxy
                        T.ptx.fence.proxy.async_.shared__cta()
                        T.tvm_storage_sync("shared")
                        for s in range(nacc):
                            T.cuda.wgmma.noop_barrier(C[tx, s])
                        T.ptx.wgmma.fence.sync.aligned()
                    # k16 step kk: atom kk // 4, 32 bytes further in the 128-byte row (the hardware applies the
                    # XOR). access_ptr adds the buffer's own offset (a second warpgroup's rows of A)
                    T.ptx[chain](
                        *[C[tx, s] for s in range(nacc)],
                        _descriptor(A.access_ptr("r", offset=(kk // 4) * sa0 + (kk % 4) * 16)),
                        _descriptor(B.access_ptr("r", offset=(kk // 4) * sb0 + (kk % 4) * 16)),
                        True, 1, 1, 0, 0)
                    if kk == BK // 16 - 1:
                        T.ptx.wgmma.commit_group.sync.aligned()
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        for s in range(nacc):
                            T.cuda.wgmma.noop_barrier(C[tx, s])

    @T.prim_func(s_tir=True)
    def fill_desc(c: T.handle) -> None:
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:128, 0:nacc])
            for i, j in T.grid(64, bn):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[acc_thread(vi, vj), acc_slot(vi, vj)] = T.float32(0)

    @T.prim_func(s_tir=True)
    def fill_impl(c: T.handle) -> None:
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:128, 0:nacc])
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for s in T.unroll(nacc):
                    C[tx, s] = T.float32(0)

    @T.prim_func(s_tir=True)
    def store_desc(c: T.handle, d: T.handle) -> None:
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        D = T.match_buffer(d, (64, bn), dtype, align=64, offset_factor=1, scope="global")
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc])
            T.writes(D[0:64, 0:bn])
            for i, j in T.grid(64, bn):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    D[vi, vj] = T.Cast(dtype, C[acc_thread(vi, vj), acc_slot(vi, vj)])

    @T.prim_func(s_tir=True)
    def store_impl(c: T.handle, d: T.handle) -> None:
        sd0, sd1 = T.int32(), T.int32()
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        D = T.match_buffer(d, (64, bn), dtype, align=64, offset_factor=1, scope="global", strides=[sd0, sd1])
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc])
            T.writes(D[0:64, 0:bn])
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                for s in T.unroll(nacc):
                    D[(tx // 32) * 16 + (tx % 32) // 4 + ((s // 2) % 2) * 8,
                      (s // 4) * 8 + (tx % 4) * 2 + s % 2] = T.Cast(dtype, C[tx, s])

    TensorIntrin.register(names["mma"], mma_desc, mma_impl, override=True)
    if names["fill"] not in _registered:  # (one per N, shared by both dtypes)
        TensorIntrin.register(names["fill"], fill_desc, fill_impl, override=True)
        _registered.add(names["fill"])
    TensorIntrin.register(names["store"], store_desc, store_impl, override=True)


def target() -> tvm.target.Target:
    from . import targets  # noqa: PLC0415
    return tvm.target.Target({"tag": targets.CUDA_ARCHES["sm_90"], "arch": ARCH})


def check_target(target_name: str) -> None:
    from . import targets  # noqa: PLC0415
    if targets.resolve(target_name) != "sm_90":
        raise ValueError(f"wgmma is Hopper's (sm_90, built as {ARCH}); target {target_name!r} has mma.sync only: "
                         "use the default (mma.sync) plain GEMM path there")


def fits(m: int, n: int, k: int, bn: int, wg: int) -> bool:
    return m % (64 * wg) == 0 and n % bn == 0 and k % BK == 0


def schedule(sch: tvm.s_tir.Schedule, bn_options=BNS, wg_options=WGS, stage_options=STAGES) -> list:
    """One sketch per (BN, WG, stages) that tiles the shape exactly (tir_kernels/gemm.gemm_func, B as [N, K])."""
    from . import cuda_space  # noqa: PLC0415
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    if not cuda_space._is_trans_b(sch):
        raise UnsupportedShapeError("the wgmma GEMM takes B as [N, K] (K-major, transB)")
    forms = [(bn, wg) for bn in bn_options for wg in wg_options if fits(m, n, k, bn, wg)]
    if not forms:
        raise UnsupportedShapeError(f"the wgmma GEMM tiles M by 64 x {min(wg_options)}, N by one of {bn_options} "
                                    f"and K by {BK} (got M={m}, N={n}, K={k})")
    return [_schedule(sch.copy(), bn, wg, stages) for bn, wg in forms for stages in stage_options]


def _schedule(sch: tvm.s_tir.Schedule, bn: int, wg: int, stages: int) -> tvm.s_tir.Schedule:
    dtype = str(next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A"))
    names = register(dtype, bn)
    s_blk = sch.get_sblock("S")
    b0, b1, i, j, kk = sch.get_loops(s_blk)
    i0, iw, i1 = sch.split(i, factors=[None, wg, 64])
    # [row groups, R]: R block rows walk the block columns together (a level of a perfect tile: always divides)
    grp, rows = sch.split(i0, factors=sch.sample_perfect_tile(i0, n=2, max_innermost_factor=16))
    j0, j1 = sch.split(j, factors=[None, bn])
    k0, k1 = sch.split(kk, factors=[None, BK])
    sch.reorder(b0, b1, grp, j0, rows, iw, k0, i1, j1, k1)
    bx = sch.fuse(b0, b1, grp, j0, rows)
    sch.bind(bx, "blockIdx.x")
    sch.bind(iw, "threadIdx.y")

    for idx in (0, 1):  # A, B k-tiles: 16-byte cp.async copies, 8 consecutive threads a 128-byte row (swizzled:
        # no bank conflicts)
        blk = sch.cache_read(s_blk, idx, SMEM)
        sch.compute_at(blk, k0)
        rest, vec = sch.split(sch.fuse(*sch.get_loops(blk)[-2:]), factors=[None, 8])
        _, ty, tx = sch.split(rest, factors=[None, wg, 128])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
        sch.transform_layout(s_blk, ("read", idx), lambda v0, v1, r, c: (v0, v1, *swizzled(r, c)),
                             assume_injective_transform=True)
    sch.set_scope(s_blk, 0, "local")  # the accumulators: registers
    sch.transform_layout(s_blk, ("write", 0), lambda v0, v1, r, c: (
        v0, v1, r // 64, c // bn, acc_thread(r % 64, c % bn), acc_slot(r % 64, c % bn)))

    c_blk = sch.get_sblock("C")
    sch.reverse_compute_at(c_blk, bx, preserve_unit_loops=True)
    rw, r64 = sch.split(sch.get_loops(c_blk)[-2], factors=[wg, 64])
    sch.bind(rw, "threadIdx.y")

    sch.decompose_reduction(s_blk, k0)
    sch.tensorize(sch.get_loops(s_blk)[-3], names["mma"])
    sch.tensorize(sch.get_loops(sch.get_sblock("S_init"))[-2], names["fill"])
    sch.tensorize(r64, names["store"])
    if stages > 1:  # body [copy A, copy B, wgmma]: the copies of k-tile t + stages - 1 overlap the wgmma of k-tile t
        sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
        sch.annotate(k0, "software_pipeline_async_stages", [0])
    return sch


def design_space(bn_options=BNS, wg_options=WGS, stage_options=STAGES):
    """The wgmma plain GEMM's Meta-Schedule space (the fused op's postprocessors and mutators, sm_90's limits)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from . import cuda_space  # noqa: PLC0415
    register_wgmma_codegen()
    return ms.space_generator.ScheduleFn(lambda s: schedule(s, bn_options, wg_options, stage_options), sch_rules=[],
                                         postprocs=cuda_space.postprocs("sm_90"),
                                         mutator_probs=cuda_space.mutator_probs())


def build(mod):
    """Compile a scheduled module for sm_90a as the builder does (cuda_build.compile_cuda)."""
    from .cuda_build import compile_cuda  # noqa: PLC0415
    register_wgmma_codegen()
    return compile_cuda(mod, target())
