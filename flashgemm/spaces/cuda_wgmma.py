"""Hopper wgmma: tensor intrinsics of our own, the plain GEMM path's space and the split-N form's pass 1 (sm_90a).

TVM 0.27 registers no wgmma TensorIntrin, and its s_tir tensor intrinsics are mma.sync/WMMA only, but its CUDA
codegen knows the PTX (`T.ptx["wgmma.mma_async..."]`, `T.ptx.wgmma.fence/commit_group/wait_group`,
`T.cuda.wgmma.noop_barrier`). So the intrinsics below are ordinary s_tir TensorIntrins (desc + impl) used with
`sch.tensorize`, built for the arch-specific target sm_90a (wgmma does not exist on plain sm_90 PTX; cuda_build
builds a module that uses wgmma for sm_90a when sm_90 is asked).

    blockIdx.x = tiles (GEMM: raster groups; split-N: chunk-major)    threadIdx.z = WG warpgroups, y = 4 warps, x = 32
    for k0 (software pipeline, `stages` shared-memory buffers, cp.async copies):
        A [64 WG x BK], B [BN x BK] or [BK x BN] -> shared memory in wgmma's 128-byte-swizzled layouts
        tensorized: fence.proxy.async; __syncthreads; wgmma.fence; BK/16 x wgmma.mma_async m64n{BN}k16 (both
                    operands from shared memory through matrix descriptors); commit_group; wait_group 0 (drained)
                    or wait_group 1 (in flight: k-tile t's wgmmas run on while the next copies are issued)
    GEMM: C = cast(accumulators) stored from the registers
    split-N: accumulators -> the fp32 S tile in shared memory; cuda_split_n's epilogue (chunk max/sum, P_chunk)
             and pass 2 follow unchanged

Shared layouts. K-major (A, and B as [N, K]; `swizzled`): atoms of 8 rows x 64 k (8 x 128 bytes = 1024 B), the
16-byte chunk c of row r stored at chunk c ^ (r % 8) of its row, the layout wgmma reads with descriptor layout type 1
(stride 1024 B between 8-row atoms; a k16 step is 32 bytes further). MN-major (B as [K, N], the LM head's weight;
`swizzled_mn`): the same swizzle with N contiguous, atoms of 8 k x 64 n, read with wgmma's transposed-B flag (stride
byte offset 1024 B = the next 8 k, leading byte offset = the next 64 columns; a k16 step is two 8-k groups further).
8 consecutive threads copy one 128-byte row, which the swizzle spreads over all banks. The XOR is written in
floordiv/floormod arithmetic (transform_layout cannot bound bitwise_xor). Each stage's tiles are multiples of
1024 B, so every atom sits on the 1024-byte boundary the swizzle assumes.
Accumulator: the m64nNk16 f32 fragment, thread t (warp w, lane l), register s holds row 16 w + l / 4 + 8 ((s / 2)
% 2), column 8 (s / 4) + 2 (l % 4) + s % 2. The warpgroup's 4 warps are threadIdx.y (not 128 x-lanes), so the
split-N epilogue keeps its warp-per-row reductions over 32 lanes.

Drained, the k-tile body is [copy A, copy B, wgmma] in the pipeline's order: TVM inserts the __syncthreads that
keeps the copy of k-tile t + stages - 1 from overwriting the buffer k-tile t - 1's wgmma read (retired by its
wait_group 0). In flight (INFLIGHT), the body is [wgmma, copy A, copy B] with the same buffers: k-tile t's wgmmas,
wait_group 1 (k-tile t - 1's retired), TVM's __syncthreads (every warpgroup's), then the copies into k-tile t - 1's
buffer, so the tensor cores work through the copies, the cp.async wait and the barriers of the next k-tile. TVM's
cp.async.wait_group count is one group short in this order, so the in-flight intrinsic waits for stages - 2 groups
itself before its proxy fence; its store waits for the last k-tile's wgmmas (wait_group 0) first.

Sketches: GEMM: BN (block columns = the wgmma N), WG (warpgroups a block, BM = 64 WG), pipeline depth and drained
or in flight, each a sketch (the intrinsic's name, so its N and form, is fixed in a trace); sampled: the
rasterization group (a level of the row tile). Split-N: pipeline depth, drained or in flight, two warpgroups
(SPLIT_N_WGS), BN = the chunk width CW (128 or 256); sampled: pass 2's vector width.
Not done here (so not claimed): TMA, warp specialization with mbarriers, more than one k-tile in flight, the other
dtypes' wgmma forms, predicated (ragged) tiles: the split-N sketches need M % 128, CW in (128, 256), K % 64.
"""
from __future__ import annotations

import threading

import tvm
from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T

from flashgemm.codegen.cuda_build import register_wgmma_codegen
from flashgemm.spaces.cuda_space import UnsupportedShapeError
from flashgemm.tvm_ext.wgmma import smem_descriptor

ARCH = "sm_90a"  # wgmma is arch-specific: PTX for sm_90a only (H100, H200)
BK = 64
BNS = (128, 256)
WGS = (1, 2)
# The split-N form: two warpgroups only. Its epilogue's per-row chunk max/sum are static shared memory (2 x 4 bytes x
# 64 WG rows), which the dynamic pool follows, and wgmma applies the 128-byte swizzle to absolute shared addresses:
# the swizzled tiles need the pool 1024-byte aligned, which 2 x 4 x 128 = 1024 bytes keeps and one warpgroup's 512
# breaks (on the H100, with B as [K, N] the one-warpgroup sketch's P is wrong; K-major B hides it: A and B
# misread alike permute k identically).
SPLIT_N_WGS = (2,)
STAGES = (3, 4)
# wgmma groups left in flight at the end of a k-tile: 0 (wait_group 0: the tensor cores idle while the next k-tile's
# copies are issued and the barriers pass) or 1 (the k-tile body ordered [wgmma, copies]: k-tile t's wgmmas run on
# while the copies into k-tile t - 1's buffer, retired by wait_group 1 and a barrier, are issued)
INFLIGHT = (0, 1)
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


def _descriptor(ptr, lbo: int = 16):
    """wgmma matrix descriptor of the shared pointer `ptr` (flashgemm.tvm_ext.wgmma.smem_descriptor)."""
    return smem_descriptor(T.cuda.cvta_generic_to_shared(ptr), lbo)


def swizzled_mn(k, n):
    """The same swizzle, MN-major (B as [K, N]: N contiguous): atoms of 8 k x 64 n (1024 B); the 16-byte chunk
    (n % 64) // 8 of row k is stored at chunk ((n % 64) // 8) ^ (k % 8). Order: k-tile, 64-column group, 8-k
    group, k % 8, chunk, n % 8 (the descriptor's stride byte offset is the next 8 k, its leading byte offset the
    next 64 columns)."""
    return (k // 64, n // 64, (k % 64) // 8, k % 8, _xor8((n // 8) % 8, k % 8), n % 8)


def intrin_names(dtype: str, bn: int, b_major: str = "k", out: str = "global", stages: int = 0) -> dict:
    """b_major: "k" (B as [N, K]) or "mn" (B as [K, N]); out: the store's destination, "global" (cast to dtype) or
    "shared" (the fp32 S tile of the fused split-N form); stages: 0 = each k-tile's wgmmas retired within it
    (wait_group 0), else the in-flight form for a pipeline of that depth (one k-tile's wgmmas left in flight)."""
    store = f"fg_wgmma_store_m64n{bn}_{PTX_TYPE[dtype]}" if out == "global" else f"fg_wgmma_store_m64n{bn}_f32_smem"
    inflight = f"_inflight_s{stages}" if stages else ""
    return {"mma": f"fg_wgmma_m64n{bn}k{BK}_{PTX_TYPE[dtype]}_f32" + ("_bmn" if b_major == "mn" else "") + inflight,
            "fill": f"fg_wgmma_fill_m64n{bn}_f32", "store": store + ("_drain" if stages else "")}


def register(dtype: str, bn: int, b_major: str = "k", out: str = "global", stages: int = 0) -> dict:
    """The three intrinsics of one form: mma (BK/16 wgmmas of a k-tile), fill (zero) and store."""
    if stages == 1:
        raise ValueError("the in-flight wgmma form needs a software pipeline (stages >= 2)")
    names = intrin_names(dtype, bn, b_major, out, stages)
    with _lock:
        if not {names["mma"], names["store"]} <= _registered:
            _register(dtype, bn, names, b_major, out, stages)
            _registered.update((names["mma"], names["store"]))
    return names


def register_all() -> None:
    """Every intrinsic a record of the wgmma sketches can name (a database's traces are replayed by name)."""
    for dtype in PTX_TYPE:
        for bn in BNS:
            for b_major in ("k", "mn"):
                for out in ("global", "shared"):
                    for stages in (0, *STAGES):
                        register(dtype, bn, b_major, out, stages)


def _register(dtype: str, bn: int, names: dict, b_major: str, out: str, stages: int) -> None:
    nacc, ka = bn // 2, BK // 64
    chain = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{PTX_TYPE[dtype]}.{PTX_TYPE[dtype]}"
    mn = b_major == "mn"
    out_dtype, out_scope = (dtype, "global") if out == "global" else ("float32", SMEM)
    b_shape = (ka, bn // 64, 8, 8, 8, 8) if mn else (ka, bn // 8, 8, 8, 8)
    b_all = tuple(slice(0, e) for e in b_shape)
    in_flight = 1 if stages else 0  # wgmma groups left running at the end of a k-tile

    def b_at(B, vk, vj):
        if mn:
            return B[vk // 64, vj // 64, vk % 64 // 8, vk % 8, _xor8(vj % 64 // 8, vk % 8), vj % 8]
        return B[vk // 64, vj // 8, vj % 8, _xor8(vk % 64 // 8, vj % 8), vk % 8]

    @T.prim_func(s_tir=True)
    def mma_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (ka, 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM)
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=8, scope=SMEM)
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc], A[0:ka, 0:8, 0:8, 0:8, 0:8], B[b_all])
            T.writes(C[0:128, 0:nacc])
            for i, j, k in T.grid(64, bn, BK):
                with T.sblock("update"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[acc_thread(vi, vj), acc_slot(vi, vj)] = C[acc_thread(vi, vj), acc_slot(vi, vj)] + T.Cast(
                        "float32", A[vk // 64, vi // 8, vi % 8, _xor8(vk % 64 // 8, vi % 8), vk % 8]) * T.Cast(
                        "float32", b_at(B, vk, vj))

    sb = [tvm.tirx.Var(f"sb{d}", "int32") for d in range(len(b_shape))]  # B's strides, bound by match_buffer

    def b_descriptor(B, kk):
        """B's descriptor at k16 step kk. K-major: 32 bytes further in the 128-byte rows (the hardware applies the
        XOR). MN-major: two 8-k groups further; leading byte offset = the next 64 columns (8 groups of 1024 B)."""
        if mn:
            return _descriptor(B.access_ptr("r", offset=kk * 2 * sb[2]), lbo=(BK // 8) * 1024)
        return _descriptor(B.access_ptr("r", offset=(kk // 4) * sb[0] + (kk % 4) * 16))

    @T.prim_func(s_tir=True)
    def mma_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sa2, sa3, sa4 = T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(a, (ka, 8, 8, 8, 8), dtype, align=64, offset_factor=8, scope=SMEM,
                           strides=[sa0, sa1, sa2, sa3, sa4])
        B = T.match_buffer(b, b_shape, dtype, align=64, offset_factor=8, scope=SMEM, strides=sb)
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc], A[0:ka, 0:8, 0:8, 0:8, 0:8], B[b_all])
            T.writes(C[0:128, 0:nacc])
            for wy in T.thread_binding(4, thread="threadIdx.y"):  # warp wy of the warpgroup (threadIdx.z)
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    # one loop statement: the software pipeline takes the k-tile body as [copy A, copy B, mma]
                    for kk in T.unroll(BK // 16):
                        if kk == 0:
                            if stages > 0:  # the in-flight form: k-tile t's copies done (TVM's count is one short)
                                T.ptx.cp.async_.wait_group(stages - 2)
                            # the copies wrote shared memory through the generic proxy; wgmma reads it through the
                            # async proxy
                            T.ptx.fence.proxy.async_.shared__cta()
                            T.tvm_storage_sync("shared")
                            for s in range(nacc):
                                T.cuda.wgmma.noop_barrier(C[wy * 32 + tx, s])
                            T.ptx.wgmma.fence.sync.aligned()
                        # A: k16 step kk = atom kk // 4, 32 bytes further in the row. access_ptr adds the buffer's
                        # own offset (a second warpgroup's rows of A)
                        T.ptx[chain](
                            *[C[wy * 32 + tx, s] for s in range(nacc)],
                            _descriptor(A.access_ptr("r", offset=(kk // 4) * sa0 + (kk % 4) * 16)),
                            b_descriptor(B, kk), True, 1, 1, 0, int(mn))
                        if kk == BK // 16 - 1:
                            T.ptx.wgmma.commit_group.sync.aligned()
                            # in flight: k-tile t - 1's wgmmas retired, k-tile t's overlap the next copies
                            T.ptx.wgmma.wait_group.sync.aligned(in_flight)
                            for s in range(nacc):
                                T.cuda.wgmma.noop_barrier(C[wy * 32 + tx, s])

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
            for wy in T.thread_binding(4, thread="threadIdx.y"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    for s in T.unroll(nacc):
                        C[wy * 32 + tx, s] = T.float32(0)

    @T.prim_func(s_tir=True)
    def store_desc(c: T.handle, d: T.handle) -> None:
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        D = T.match_buffer(d, (64, bn), out_dtype, align=64, offset_factor=1, scope=out_scope)
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc])
            T.writes(D[0:64, 0:bn])
            for i, j in T.grid(64, bn):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    D[vi, vj] = T.Cast(out_dtype, C[acc_thread(vi, vj), acc_slot(vi, vj)])

    @T.prim_func(s_tir=True)
    def store_impl(c: T.handle, d: T.handle) -> None:
        sd0, sd1 = T.int32(), T.int32()
        C = T.match_buffer(c, (128, nacc), "float32", align=64, offset_factor=1, scope="local")
        D = T.match_buffer(d, (64, bn), out_dtype, align=64, offset_factor=1, scope=out_scope, strides=[sd0, sd1])
        with T.sblock("root"):
            T.reads(C[0:128, 0:nacc])
            T.writes(D[0:64, 0:bn])
            for wy in T.thread_binding(4, thread="threadIdx.y"):
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    if stages > 0:  # the in-flight form: the last k-tile's wgmmas are still running
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        for s in range(nacc):
                            T.cuda.wgmma.noop_barrier(C[wy * 32 + tx, s])
                    for s in T.unroll(nacc):
                        D[wy * 16 + tx // 4 + ((s // 2) % 2) * 8,
                          (s // 4) * 8 + (tx % 4) * 2 + s % 2] = T.Cast(out_dtype, C[wy * 32 + tx, s])

    TensorIntrin.register(names["mma"], mma_desc, mma_impl, override=True)
    if names["fill"] not in _registered:  # (one per N, shared by every form)
        TensorIntrin.register(names["fill"], fill_desc, fill_impl, override=True)
        _registered.add(names["fill"])
    TensorIntrin.register(names["store"], store_desc, store_impl, override=True)


def target() -> tvm.target.Target:
    from flashgemm import targets  # noqa: PLC0415
    return tvm.target.Target({"tag": targets.CUDA_ARCHES["sm_90"], "arch": ARCH})


def check_target(target_name: str) -> None:
    from flashgemm import targets  # noqa: PLC0415
    if targets.resolve(target_name) != "sm_90":
        raise ValueError(f"wgmma is Hopper's (sm_90, built as {ARCH}); target {target_name!r} has mma.sync only: "
                         "use the default (mma.sync) plain GEMM path there")


def fits(m: int, n: int, k: int, bn: int, wg: int) -> bool:
    return m % (64 * wg) == 0 and n % bn == 0 and k % BK == 0


def schedule(sch: tvm.s_tir.Schedule, bn_options=BNS, wg_options=WGS, stage_options=STAGES,
             inflight_options=INFLIGHT) -> list:
    """One sketch per (BN, WG, stages, in-flight groups) that tiles the shape exactly (flashgemm/kernel/gemm.gemm_func;
    B as [N, K] or [K, N])."""
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    forms = [(bn, wg) for bn in bn_options for wg in wg_options if fits(m, n, k, bn, wg)]
    if not forms:
        raise UnsupportedShapeError(f"the wgmma GEMM tiles M by 64 x {min(wg_options)}, N by one of {bn_options} "
                                    f"and K by {BK} (got M={m}, N={n}, K={k})")
    return [_schedule(sch.copy(), bn, wg, stages, inflight) for bn, wg in forms for stages in stage_options
            for inflight in inflight_options]


def _schedule(sch: tvm.s_tir.Schedule, bn: int, wg: int, stages: int, inflight: int = 0) -> tvm.s_tir.Schedule:
    s_blk = sch.get_sblock("S")
    names = register(_dtype(sch), bn, _b_major(sch), stages=stages * inflight)

    def raster(b0, b1, i0, j0):
        # [row groups, R]: R block rows walk the block columns together (a level of a perfect tile: always divides)
        grp, rows = sch.split(i0, factors=sch.sample_perfect_tile(i0, n=2, max_innermost_factor=16))
        return [b0, b1, grp, j0, rows]

    bx, k0 = _warpgroup_tile(sch, s_blk, bn, wg, raster)
    c_blk = sch.get_sblock("C")
    sch.reverse_compute_at(c_blk, bx, preserve_unit_loops=True)
    rw, r64 = sch.split(sch.get_loops(c_blk)[-2], factors=[wg, 64])
    sch.bind(rw, "threadIdx.z")
    _tensorize(sch, s_blk, k0, names, stages, inflight)
    sch.tensorize(r64, names["store"])
    return sch


def _dtype(sch: tvm.s_tir.Schedule) -> str:
    return str(next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A"))


def _b_major(sch: tvm.s_tir.Schedule) -> str:
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    return "k" if cuda_space._is_trans_b(sch) else "mn"


def _warpgroup_tile(sch: tvm.s_tir.Schedule, s_blk, bn: int, wg: int, outer):
    """The block's GEMM tile (64 WG x bn, k-tiles of BK) up to the tensorization: blockIdx.x = the fusion of the loops
    outer(b0, b1, row tiles, column tiles) returns, threadIdx.z = warpgroup; A and B k-tiles copied to shared memory
    in the swizzled layouts (16-byte cp.async, 8 consecutive threads a 128-byte row: no bank conflicts); the
    accumulators in registers in the fragment's layout. Returns (blockIdx.x loop, k-tile loop)."""
    b0, b1, i, j, kk = sch.get_loops(s_blk)
    i0, iw, i1 = sch.split(i, factors=[None, wg, 64])
    j0, j1 = sch.split(j, factors=[None, bn])
    k0, k1 = sch.split(kk, factors=[None, BK])
    block = outer(b0, b1, i0, j0)
    sch.reorder(*block, iw, k0, i1, j1, k1)
    bx = sch.fuse(*block)
    sch.bind(bx, "blockIdx.x")
    sch.bind(iw, "threadIdx.z")
    layouts = (swizzled, swizzled if _b_major(sch) == "k" else swizzled_mn)
    for idx in (0, 1):
        blk = sch.cache_read(s_blk, idx, SMEM)
        sch.compute_at(blk, k0)
        rest, vec = sch.split(sch.fuse(*sch.get_loops(blk)[-2:]), factors=[None, 8])
        _, tz, ty, tx = sch.split(rest, factors=[None, wg, 4, 32])
        sch.bind(tz, "threadIdx.z")
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
        sch.transform_layout(s_blk, ("read", idx), _on_last_two(layouts[idx]), assume_injective_transform=True)
    sch.set_scope(s_blk, 0, "local")  # the accumulators: registers
    sch.transform_layout(s_blk, ("write", 0), lambda v0, v1, r, c: (
        v0, v1, r // 64, c // bn, acc_thread(r % 64, c % bn), acc_slot(r % 64, c % bn)))
    return bx, k0


def _on_last_two(layout):
    """The index map applying layout(row, col) to a buffer's last two axes (2-D or batched operands)."""
    return lambda *v: (*v[:-2], *layout(v[-2], v[-1]))


def _tensorize(sch: tvm.s_tir.Schedule, s_blk, k0, names: dict, stages: int, inflight: int) -> None:
    sch.decompose_reduction(s_blk, k0)
    sch.tensorize(sch.get_loops(s_blk)[-3], names["mma"])
    sch.tensorize(sch.get_loops(sch.get_sblock("S_init"))[-2], names["fill"])
    if stages > 1:  # the copies of k-tile t + stages - 1 overlap the wgmma of k-tile t
        sch.annotate(k0, "software_pipeline_stage", [0, 0, stages - 1])
        # body [copy A, copy B, wgmma], or [wgmma, copy A, copy B] in flight (the copies then write k-tile t - 1's
        # buffer after the wgmma's wait_group 1 and TVM's barrier)
        sch.annotate(k0, "software_pipeline_order", [1, 2, 0] if inflight else [0, 1, 2])
        sch.annotate(k0, "software_pipeline_async_stages", [0])


def split_n_fits(m: int, n: int, k: int, cw: int, wg: int) -> bool:
    """Whether the split-N form with chunks of cw columns tiles exactly on wgmma (no predication in this form)."""
    return cw in BNS and fits(m, n, k, cw, wg)


def serves(sch: tvm.s_tir.Schedule) -> bool:
    """Whether the split-N module has a wgmma sketch (split_n_schedule would not refuse it)."""
    from flashgemm.spaces import cuda_space, cuda_split_n  # noqa: PLC0415
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    return any(split_n_fits(m, n, k, cuda_split_n.chunk_width(sch), wg) for wg in SPLIT_N_WGS)


def split_n_schedule(sch: tvm.s_tir.Schedule, wg_options=SPLIT_N_WGS, stage_options=STAGES,
                     inflight_options=INFLIGHT) -> list:
    """Pass 1 of the split-N form (the kernel's, chunk=CW; flashgemm/spaces/cuda_split_n) on wgmma: one sketch per
    (WG, stages, in-flight groups) that tiles the shape (WG: SPLIT_N_WGS, why there). The block is 64 WG rows x one
    chunk (the wgmma N = CW), chunk-major as in cuda_split_n; the accumulators go to the fp32 S tile in shared
    memory, and cuda_split_n's epilogue and pass 2 follow (warps = 4 WG over threadIdx.z x y, 32 lanes)."""
    from flashgemm.spaces import cuda_space, cuda_split_n  # noqa: PLC0415
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    cw = cuda_split_n.chunk_width(sch)
    wgs = [wg for wg in wg_options if split_n_fits(m, n, k, cw, wg)]
    if not wgs:
        raise UnsupportedShapeError(f"the wgmma split-N form needs chunks of {' or '.join(map(str, BNS))} columns, "
                                    f"M a multiple of {64 * min(wg_options)} and K of {BK} "
                                    f"(got M={m}, N={n}, K={k}, chunk {cw})")
    return [_split_n(sch.copy(), n, cw, wg, stages, inflight) for wg in wgs for stages in stage_options
            for inflight in inflight_options]


def _split_n(sch: tvm.s_tir.Schedule, n: int, cw: int, wg: int, stages: int,
             inflight: int = 0) -> tvm.s_tir.Schedule:
    from flashgemm.spaces import cuda_split_n  # noqa: PLC0415
    s_blk = sch.get_sblock("S")
    names = register(_dtype(sch), cw, _b_major(sch), out="shared", stages=stages * inflight)
    s_w = sch.cache_write(s_blk, 0, "local")  # s_blk -> the accumulators; s_w copies them to S (shared memory)
    bx, k0 = _warpgroup_tile(sch, s_blk, cw, wg, lambda b0, b1, i0, j0: [b0, b1, j0, i0])  # chunk-major
    sch.set_scope(s_w, 0, SMEM)
    sch.reverse_compute_at(s_w, bx, preserve_unit_loops=True)
    rw, r64 = sch.split(sch.get_loops(s_w)[-2], factors=[wg, 64])
    sch.bind(rw, "threadIdx.z")
    for name in ("chunk_max", "chunk_sum", "P_chunk", "chunk_stats"):
        sch.reverse_compute_at(sch.get_sblock(name), bx)
    _tensorize(sch, s_blk, k0, names, stages, inflight)
    sch.tensorize(r64, names["store"])
    # Row stride of S = 8 (mod 32) floats: a store instruction writes 8 rows x 4 column pairs a warp, all in the
    # same banks with a stride of CW floats (8-way conflict); with the offset 2-way (cuda_space._tensor_core_tile)
    sch.storage_align(sch.get_child_blocks(rw)[0], 0, axis=-2, factor=32, offset=8)

    def split_warps(loop, *inner):
        parts = sch.split(loop, factors=[None, wg, 4, *inner])
        sch.bind(parts[1], "threadIdx.z")
        sch.bind(parts[2], "threadIdx.y")
        return parts[3:]

    cuda_split_n.epilogue(sch, split_warps, n)
    cuda_split_n.pass2(sch)
    return sch


def design_space(bn_options=BNS, wg_options=WGS, stage_options=STAGES, inflight_options=INFLIGHT):
    """The wgmma plain GEMM's Meta-Schedule space (the fused op's postprocessors and mutators, sm_90's limits)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    register_wgmma_codegen()
    return ms.space_generator.ScheduleFn(lambda s: schedule(s, bn_options, wg_options, stage_options, inflight_options),
                                         sch_rules=[], postprocs=cuda_space.postprocs("sm_90"),
                                         mutator_probs=cuda_space.mutator_probs())


def build(mod):
    """Compile a scheduled module for sm_90a as the builder does (cuda_build.compile_cuda)."""
    from flashgemm.codegen.cuda_build import compile_cuda  # noqa: PLC0415
    register_wgmma_codegen()
    return compile_cuda(mod, target())
