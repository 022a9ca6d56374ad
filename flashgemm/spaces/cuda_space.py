"""Meta-Schedule design space of the fused GEMM + row softmax on NVIDIA tensor cores (sm_80/89/90).

Row-resident variant. A thread block owns BM rows of one (b0, b1) and *all* N columns:

    blockIdx.x  = (b0, b1, row tile of BM rows)
    for n-chunk (serial over N in chunks of W*TN*16 columns):     W warps (threadIdx.y), 32 lanes
        acc[BM/16 x TN] m16n8k16 fragments per warp (fp32, "warp" scope) = 0
        for k-tile (BK = KI*16), software-pipelined, cp.async multi-stage:
            A[BM x BK], B[BK x chunk] (or [chunk x BK] for transB) -> shared (padded rows: storage_align)
            for k16 in KI: ldmatrix A, B fragments (register double buffer) ; mma.sync m16n8k16
        fragments -> S (fp32, shared memory, BM x Npad: S never leaves the chip)
    row max, exp, row sum, normalize read S from shared memory; P written once to global.

Shapes that are not multiples of 16 are padded with `pad_einsum` (M, N, K to multiples of 16): the
padded A/B tiles are read from global memory under a bounds predicate (zero fill, cp.async with a
source-size predicate), padded S rows/columns are never read by the softmax, and the P stores are
predicated, so nothing is ever read or written out of bounds (M=197, N=1500, K=1, M=1 ...).

Sampled knobs (ExprRVs in the trace, mutated by MutateTileSize / MutateCategorical; no ints baked in):
  BM/16 rows tiles per block and the row-tile count (sample_perfect_tile over Mpad/16),
  N chunking: chunks x warps x fragments per warp (sample_perfect_tile n=3 over Npad/16),
  K tiling: k-tiles x fragments per k-tile (BK) (sample_perfect_tile n=2 over Kpad/16),
  cooperative-fetch vector width of A and B (1/2/4/8 elements; 8 = 16-byte cp.async),
  vector width of the P store loop, unroll depth of the GEMM loops (pragma_auto_unroll_max_step).
Structural choices are separate sketches: pipeline depth (2 or 3 shared-memory stages).

Shared memory. S takes BM*Npad*4 bytes, so it quickly outgrows the 48 KB of static shared memory
(W1: N=512, BM=32 is 64 KB; W3: N=1500 needs 96 KB at BM=16). Every buffer of the space is in
"shared.dyn" scope: TVM merges them into one `extern __shared__` buffer (MergeSharedMemoryAllocations,
with liveness-based reuse), passes its size as the launch's dynamic shared memory, and its CUDA
runtime raises the kernel's limit (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES) when needed. VerifyGPUCode is run
with the arch's real opt-in limit (SMEM_LIMIT) instead of the 48 KB the target tags declare.

Limits: shapes whose S row block does not fit even at BM=16 (N > ~3580 on sm_90, > ~2560 on
sm_80, > ~1530 on sm_89) raise `LongRowError` here; they take the kernel's split-N form, scheduled
by flashgemm/spaces/cuda_split_n (the LM head), when N is a multiple of 16, else the generic kernel.
No k-split (the whole K is reduced by one block).

Row max / row sum: warp per row (threadIdx.y over the block's rows, lanes over the columns), TVM's
cross-thread allreduce (warp shuffles). That needs the row_max init to be min_value("float32") (the
kernel's choice, not -inf): TVM's reducer matching knows max only with that identity. With a -inf init
the max would fall back to one thread per row, serial over the columns.
The statistics are scheduled in shared memory; where a warp holds one row, the compile pipeline keeps them in
registers instead (flashgemm/codegen/tir/keep_warp_statistics_in_registers: no lane-0 store, barriers and reloads).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from flashgemm.kernel.fused_gemm_softmax import ANY_LENGTH_ATTR

from flashgemm.codegen import cuda_runner
from flashgemm import targets
from flashgemm.spaces.mutate_categorical import MutateCategorical
from flashgemm.tvm_ext.tensor_intrin import intrin_group, shared_16x16_to_ldmatrix_32x8_layout
from flashgemm.codegen.worker_init import ignore_stop_signals


from flashgemm.codegen import cuda_build  # noqa: E402
from flashgemm.codegen.cuda_build import PASS_CONFIG, compile_cuda  # noqa: E402,F401  (re-exported)

SMEM_LIMIT = targets.SMEM_LIMIT  # opt-in maximum of dynamic shared memory per block (bytes)
MAX_WARPS = 8  # threads per block <= 256
PIPELINE_STAGES = (2, 3)
SMEM = "shared.dyn"  # every shared buffer of the kernel: dynamic shared memory (module doc)


class UnsupportedShapeError(ValueError):
    """A shape the tensor-core space cannot schedule (the generic kernel still serves it)."""


class LongRowError(UnsupportedShapeError):
    """The row-resident variant cannot hold this shape's S rows on chip."""


def _round16(x: int) -> int:
    return (x + 15) // 16 * 16


def _sizes(func: tvm.tirx.PrimFunc):
    """(Mpad, Npad, Kpad) of the S block, from its iteration domain."""
    sch = tvm.s_tir.Schedule(func)
    loops = sch.get_loops(sch.get_sblock("S"))
    ext = [int(sch.get(lp).extent) for lp in loops]
    return ext  # [B0, B1, M, N, K]


def _pad_factors(m: int, n: int):
    return (32 if m > 32 else 16), (64 if n > 64 else 16)


def check_shape(target_name: str, m: int, n: int, k: int) -> None:
    """Raise LongRowError when even BM=16 and the smallest staging do not fit in shared memory, and
    UnsupportedShapeError for M = 1: a 16-row mma tile would be 15/16 padding (and TVM 0.27's shared-memory
    merge fails on such candidates); design_space hands M = 1 to flashgemm/spaces/cuda_row_vector."""
    if m == 1:
        raise UnsupportedShapeError(
            "M=1 (decoding) is not a tensor-core shape: the row-vector space (flashgemm/spaces/cuda_row_vector) serves it")
    limit = SMEM_LIMIT[target_name]
    n_fac = _pad_factors(m, n)[1]
    need = 16 * (-(-n // n_fac) * n_fac) * 4 + 2 * (16 * 16 + 16 * 16) * 2 + 1024
    if need > limit:
        raise LongRowError(
            f"N={n} too long for the row-resident variant on {target_name} (S rows need {need} bytes of shared "
            f"memory, the limit is {limit}); the split-N form (flashgemm/spaces/cuda_split_n) serves long rows whose N is a "
            f"multiple of 16")


def _row_max_reducible(sch: tvm.s_tir.Schedule) -> bool:
    init = sch.get(sch.get_sblock("row_max")).init
    v = getattr(init, "value", None)
    return isinstance(v, tvm.tirx.FloatImm) and v.value < -1e38 and v.value != float("-inf")


def with_decisions(sketch_trace, decisions: list):
    """A sketch's trace with these sample decisions, in the order of its sample instructions."""
    samples = [inst for inst in sketch_trace.insts if inst.kind.name.startswith("Sample")]
    if len(samples) != len(decisions):
        raise ValueError(f"{len(samples)} sample instructions, {len(decisions)} decisions")
    trace = sketch_trace
    for inst, dec in zip(samples, decisions):
        trace = trace.with_decision(inst, [int(v) for v in dec] if hasattr(dec, "__len__") else dec,
                                    remove_postproc=True)
    return trace


def mma_tiles(sch, s_blk):
    """Split the S block's M, N, K loops into 16-element tiles and blockize the 16x16x16 inner block (what
    the mma intrinsic matches). Returns the outer loops (b0, b1, i, j, k), the outer block and the inner one;
    leading loops (a k-split's slice loop before b0) come first."""
    *lead, i, j, kk = sch.get_loops(s_blk)
    i, i_tc = sch.split(i, factors=[None, 16])
    j, j_tc = sch.split(j, factors=[None, 16])
    kk, k_tc = sch.split(kk, factors=[None, 16])
    sch.reorder(i, j, kk, i_tc, j_tc, k_tc)
    return (*lead, i, j, kk, sch.blockize(i_tc), s_blk)


def tile_fragment(sch, block):
    """Split a fragment copy's two loops into 16x16 tiles (tile loops outside): the inner row loop returned is
    where the ldmatrix intrinsic is tensorized."""
    a, c = sch.get_loops(block)[-2:]
    a0, a1 = sch.split(a, factors=[None, 16])
    c0, c1 = sch.split(c, factors=[None, 16])
    sch.reorder(a0, c0, a1, c1)
    return a1


def mma_layout(batch0, batch1, r, c):
    """The layout of every mma fragment buffer (4-D [b0, b1, rows, cols]; a block's batch dims have extent 1):
    16x16 tile -> (lane, 8 elements), the ldmatrix 32x8 map. Index-map parameter names are stored in the trace:
    names like b0, l3, v7 collide with its random-variable names and the record cannot be loaded back ("Cannot
    treat type SBlockRV as type Var")."""
    return (batch0, batch1, r // 16, c // 16, *shared_16x16_to_ldmatrix_32x8_layout(r % 16, c % 16))


def mma_layout_k_split(k_slice, batch0, batch1, r, c):
    """mma_layout of a k-split's partial accumulators ([k slice, b0, b1, rows, cols], rfactor's buffer)."""
    return (k_slice, *mma_layout(batch0, batch1, r, c))


def tensorize_fragments(sch, a_w, b_w, acc, loop_a, loop_b, s_inner, init_inner, names, acc_layout=mma_layout) -> None:
    """Every tensor-core form's last step: the A/B fragments and the accumulator `acc` = (block, buffer access)
    get the mma layout, then ldmatrix, mma.sync and the accumulator fill replace their loops. a_w None: A's
    fragments are already loaded (and laid out) elsewhere (cuda_recompute's resident A)."""
    if a_w is not None:
        sch.transform_layout(a_w, ("write", 0), mma_layout)
    sch.transform_layout(b_w, ("write", 0), mma_layout)
    sch.transform_layout(*acc, acc_layout)
    if a_w is not None:
        sch.tensorize(loop_a, names["load_a"])
    sch.tensorize(loop_b, names["load_b"])
    sch.tensorize(sch.get_loops(s_inner)[-3], names["compute"])
    sch.tensorize(sch.get_loops(init_inner)[-2], names["init"])


def _tensor_core_tile(sch, s_outer, s_inner, ko, ki, jy, pad_a, pad_b, names) -> None:
    """The block's GEMM on tensor cores, shared by the space's variants: A/B k-tiles to shared memory
    (cooperative cp.async fetch, padded rows), ldmatrix fragments under `ki`, mma.sync m16n8k16, and
    the fp32 accumulators stored to the S tile in shared memory under the warp loop `jy`."""
    def fetch(idx, producer):
        blk = sch.cache_read(s_outer, idx, SMEM)
        sch.compute_at(blk, ko)
        if producer is not None:  # the zero-padding becomes a predicate of the global->shared copy
            sch.compute_inline(producer)
        sch.fuse(*sch.get_loops(blk)[-2:])
        vec = sch.sample_categorical(candidates=[1, 2, 4, 8], probs=[0.1, 0.1, 0.2, 0.6])
        sch.annotate(blk, "meta_schedule.cooperative_fetch", vec)
        sch.storage_align(blk, 0, axis=-2, factor=32, offset=8)
        return blk

    fetch(0, sch.get_sblock("A_pad") if pad_a else None)
    fetch(1, sch.get_sblock("Bm_pad") if pad_b else None)

    a_w = sch.cache_read(s_outer, 0, "warp")
    b_w = sch.cache_read(s_outer, 1, "warp")
    sch.compute_at(a_w, ki)
    sch.compute_at(b_w, ki)
    c_w = sch.cache_write(s_outer, 0, "warp")
    sch.reverse_compute_at(c_w, jy)
    sch.set_scope(c_w, 0, SMEM)  # S_pad: the row block of S in shared memory
    ii, jj = sch.get_loops(c_w)[-2:]
    io, ii = sch.split(ii, factors=[None, 16])
    jo2, ji2 = sch.split(jj, factors=[None, 16])
    sch.reorder(io, jo2, ii, ji2)
    sch.decompose_reduction(s_outer, ko)
    init_inner = sch.get_sblock("S_init")

    loop_a, loop_b = tile_fragment(sch, a_w), tile_fragment(sch, b_w)
    tensorize_fragments(sch, a_w, b_w, (c_w, ("read", 0)), loop_a, loop_b, s_inner, init_inner, names)
    sch.tensorize(sch.get_loops(c_w)[-2], names["store"])
    # Row stride of S = 8 (mod 32) floats: the accumulator store writes 8 rows x 4 column pairs per warp
    # instruction; with a stride that is a multiple of 32 floats (Npad = 256, 512 ...) all 8 rows hit
    # the same banks (8-way conflict). Offset 8 leaves 2-way; the row-wise softmax reads are unaffected.
    # (On the tensorized block: tensorize drops the annotations of the block it replaces.)
    sch.storage_align(sch.get_child_blocks(jo2)[0], 0, axis=-2, factor=32, offset=8)


def _schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=PIPELINE_STAGES):
    func = sch.mod["main"]
    b0e, b1e, m, n, k = _sizes(func)
    check_shape(target_name, m, n, k)
    dtype = next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name in ("A", "A_pad"))
    trans_b = _is_trans_b(sch)
    names = intrin_group(str(dtype), trans_b, SMEM)
    reducible_max = _row_max_reducible(sch)

    s_blk = sch.get_sblock("S")
    # pad_einsum creates a padded copy only of the operands with an unaligned dim (A_pad when M or K,
    # Bm_pad when N or K, S_pad when M or N is not a multiple of 16); which ones is a function of the
    # shape, so the same instructions replay on the runtime form of that shape.
    # M and N are padded to multiples of 32 / 64 (not just 16) when larger: the tile counts then have
    # the factors 2 and 4 that warps / rows-per-block need (197 -> 13 tiles of 16 is prime; 256 -> 16).
    # The kernel's any-length form brings its own A_pad/Bm_pad guards, and its bounds are multiples of the
    # factors (kernel_library.LENGTH_BOUNDS), so nothing more is padded.
    any_length = is_any_length(sch)
    m_fac, n_fac = _pad_factors(m, n)
    pad_a, pad_b = bool(m % m_fac or k % 16), bool(n % n_fac or k % 16)
    pad_s = bool(m % m_fac or n % n_fac)
    if any_length:
        if pad_a or pad_b or pad_s:
            raise UnsupportedShapeError(f"any-length bound M={m}, N={n}, K={k} is not a multiple of ({m_fac}, "
                                        f"{n_fac}, 16)")
        pad_a = pad_b = True
    elif pad_a or pad_b or pad_s:
        sch.pad_einsum(s_blk, [1, 1, m_fac, n_fac, 16])
    if pad_s:  # S_pad -> S copy: inline into the softmax blocks, which then read the padded buffer
        sch.compute_inline(sch.get_sblock("S_pad"))
    # NOTE (TVM 0.27): cache_read (and reindex, set_scope) give the new buffer the *source* buffer's
    # elem_offset. An operand read straight from a function parameter declared with offset_factor=1
    # (symbolic elem_offset) therefore yields shared/warp caches with a symbolic offset, and the build
    # fails the ldmatrix/mma offset_factor=16 check ("does not satisfy the offset_factor 16"). Padded
    # operands are read via the fresh A_pad/Bm_pad buffers and are fine; unpadded ones need A/Bm declared
    # without offset_factor (elem_offset 0) in the kernel (flashgemm.kernel.fused_gemm_softmax).
    sch.compute_inline(sch.get_sblock("exp"))

    # ---- GEMM tiling
    b0, b1, i, j, kk, s_outer, s_inner = mma_tiles(sch, s_blk)

    i_f = sch.sample_perfect_tile(i, n=2, max_innermost_factor=4)       # [row tiles, BM/16]
    j_f = sch.sample_perfect_tile(j, n=3, max_innermost_factor=4)       # [n chunks, warps, frags/warp]
    k_f = sch.sample_perfect_tile(kk, n=2, max_innermost_factor=4)      # [k tiles, BK/16]
    ib, iw = sch.split(i, factors=i_f)
    jo, jy, ji = sch.split(j, factors=j_f)
    ko, ki = sch.split(kk, factors=k_f)
    sch.reorder(b0, b1, ib, jo, jy, ko, ki, iw, ji)
    bx = sch.fuse(b0, b1, ib)
    sch.bind(bx, "blockIdx.x")
    sch.bind(jy, "threadIdx.y")
    sch.annotate(s_outer, "warp_execution", 1)
    for name in ("row_max", "row_sum", "P"):  # the softmax of the block's rows, after its GEMM
        sch.reverse_compute_at(sch.get_sblock(name), bx)

    _tensor_core_tile(sch, s_outer, s_inner, ko, ki, jy, pad_a, pad_b, names)

    # ---- softmax from shared memory, under the same block
    # row statistics of the block's rows in shared memory
    sch.set_scope(sch.get_sblock("row_max"), 0, SMEM)
    sch.set_scope(sch.get_sblock("row_sum"), 0, SMEM)
    warps = j_f[1]

    def rows_cols(block):
        """The (row, column) loops of a softmax block. With one row (M = 1) compute_at leaves no row
        loop, and the loop above the columns is a bound one: put a unit row loop back."""
        r, c = sch.get_loops(block)[-2:]
        r_node = sch.get(r)
        if r_node.thread_binding is not None or r_node.kind != tvm.tirx.ForKind.SERIAL or r_node.annotations:
            r = sch.add_unit_loop(c)
        return r, c

    def warp_per_row(name):
        r, c = rows_cols(sch.get_sblock(name))
        _, ry = sch.split(r, factors=[None, warps])
        _, cx = sch.split(c, factors=[None, 32])
        sch.bind(ry, "threadIdx.y")
        sch.bind(cx, "threadIdx.x")

    if reducible_max:
        warp_per_row("row_max")
    else:  # serial max per row, one thread per row (see module doc)
        r, c = rows_cols(sch.get_sblock("row_max"))
        _, ry, rx = sch.split(r, factors=[None, warps, 32])
        sch.bind(ry, "threadIdx.y")
        sch.bind(rx, "threadIdx.x")
    warp_per_row("row_sum")
    # P: warp per row as well (lanes over columns, pv consecutive columns a lane), so a lane's address
    # needs no division by N (the fused row*N+col loop paid an integer div/mod per element).
    p_blk = sch.get_sblock("P")
    r, c = rows_cols(p_blk)
    pv = sch.sample_categorical(candidates=[1, 2, 4], probs=[0.2, 0.3, 0.5])  # P store vector width
    _, ry = sch.split(r, factors=[None, warps])
    _, cx, cv = sch.split(c, factors=[None, 32, pv])
    sch.bind(ry, "threadIdx.y")
    sch.bind(cx, "threadIdx.x")
    if n % 4 == 0 and not any_length:  # P rows start pv-aligned only when N % pv == 0 (else scalar stores: never
        sch.vectorize(cv)               # misaligned); the any-length form's N is known only at the call
    # unroll knob on the GEMM part only: TVM 0.27 fails to build a cross-thread reduction inside an
    # explicitly unrolled loop ("variables (red_buf0,) are used, but are not passed in"), so the usual
    # root-level meta_schedule.unroll_explicit (which reaches the softmax loops) is not used.
    u = sch.sample_categorical(candidates=[0, 16, 64, 512], probs=[0.25] * 4)
    sch.annotate(jo, "pragma_auto_unroll_max_step", u)
    sch.annotate(jo, "pragma_unroll_explicit", 1)

    # ---- software pipeline of the k-tile loop over [A->shared, B->shared, inner k loop]: the copies of
    # k-tile t+stages-1 (cp.async, async stage 0) overlap the ldmatrix+mma of k-tile t. The inner loop is
    # not pipelined (MultiLevelTilingTensorCore pipelines it too, but that changes the outer body's
    # statement count with the inner extent, and an extent-1 inner loop breaks the annotation).
    return pipeline_sketches(sch, ko, stage_options)


def pipeline_sketches(sch, ko, stage_options=PIPELINE_STAGES) -> list:
    """One sketch per pipeline depth: the k-tile loop `ko` software-pipelined over [A->shared,
    B->shared, ldmatrix+mma], the copies async (cp.async)."""
    out = []
    for stages in stage_options:
        s2 = sch.copy() if len(stage_options) > 1 else sch
        s2.annotate(ko, "software_pipeline_stage", [0, 0, stages - 1])
        s2.annotate(ko, "software_pipeline_order", [0, 1, 2])
        s2.annotate(ko, "software_pipeline_async_stages", [0])
        out.append(s2)
    return out


def is_any_length(sch: tvm.s_tir.Schedule) -> bool:
    """Whether this module is the kernel's any-length form (symbolic M and N under a static bound)."""
    return bool(sch.mod["main"].attrs.get(ANY_LENGTH_ATTR, False))


def _is_trans_b(sch: tvm.s_tir.Schedule) -> bool:
    """B is [.., N, K] when the S block reads Bm at [.., vj, vk]."""
    blk = sch.get(sch.get_sblock("S"))
    iv = [v.var for v in blk.iter_vars]  # v0, v1, vi, vj, vk
    for region in blk.reads:
        if region.source.name in ("Bm", "Bm_pad"):  # Bm_pad: the kernel's padded form
            last = region.region[-1].min
            return last.same_as(iv[4])
    raise ValueError("cuda_space: S reads no buffer named Bm")


# ----------------------------------------------------------------------------- postprocs
@derived_object
class VerifyGPUCodeArch(ms.postproc.PyPostproc):
    """VerifyGPUCode with the arch's real (opt-in dynamic) shared memory limit instead of the tag's 48 KB."""

    def __init__(self, smem_limit: int):
        super().__init__()
        self.smem_limit = smem_limit
        self.inner = ms.postproc.VerifyGPUCode()

    def _initialize_with_tune_context(self, context) -> None:
        cfg = dict(context.target.export())
        cfg["max_shared_memory_per_block"] = self.smem_limit
        cfg.pop("host", None)
        tgt = tvm.target.Target(cfg, context.target.host) if context.target.host else tvm.target.Target(cfg)
        ctx = ms.TuneContext(mod=context.mod, target=tgt, task_name="verify")
        self.inner._initialize_with_tune_context(ctx)

    def apply(self, sch) -> bool:
        return self.inner.apply(sch)

    def clone(self):
        return VerifyGPUCodeArch(self.smem_limit)


def postprocs(target_name: str) -> list:
    return [ms.postproc.DisallowDynamicLoop(), ms.postproc.RewriteCooperativeFetch(),
            ms.postproc.RewriteUnboundBlock(), ms.postproc.RewriteParallelVectorizeUnroll(),
            ms.postproc.RewriteReductionBlock(), VerifyGPUCodeArch(SMEM_LIMIT[target_name])]


def design_space(target_name: str) -> ms.space_generator.SpaceGenerator:
    target_name = targets.resolve(target_name)
    if target_name not in SMEM_LIMIT:
        raise ValueError(f"cuda_space: no tensor-core space for target {target_name!r}")

    def space(sch: tvm.s_tir.Schedule):
        # (imported here: they build on this module)
        from flashgemm.spaces import cuda_recompute, cuda_registers, cuda_row_vector, cuda_split_n, cuda_wgmma  # noqa: PLC0415
        if cuda_split_n.is_split_n(sch):
            # mma.sync sketches and, on Hopper where the shape tiles, wgmma ones (pass 1 on cuda_wgmma)
            wgmma = target_name == "sm_90" and cuda_wgmma.serves(sch)
            hopper = cuda_wgmma.split_n_schedule(sch.copy()) if wgmma else []
            if hopper and cuda_split_n.chunk_width(sch) not in cuda_split_n.CHUNK_WIDTHS:
                return hopper  # the wide form: wgmma only (cuda_split_n.schedule refuses its chunk width)
            return cuda_split_n.schedule(sch, target_name) + hopper
        # (the recompute form first: over a bound it is an any-length form too; then the one-pass space over the
        # bound, guards in the kernel; both before the padded test, which they would pass)
        if cuda_recompute.is_recompute_form(sch):
            return cuda_recompute.schedule(sch, target_name)
        if is_any_length(sch):
            return _schedule(sch, target_name)
        if cuda_registers.is_padded_form(sch):  # made for the register sketches (cuda_registers.padded_sizes)
            return cuda_registers.schedule(sch, target_name)
        _, _, m, n, k = _sizes(sch.mod["main"])
        if cuda_row_vector.applies(m):
            return cuda_row_vector.schedule(sch, target_name)
        # S in shared memory (this module) and, where the shape allows, S in registers (cuda_registers):
        # Meta-Schedule's search draws from every sketch, so the faster form wins per shape
        registers = cuda_registers.schedule(sch.copy(), target_name) if cuda_registers.serves(sch) else []
        return _schedule(sch, target_name) + registers

    return ms.space_generator.ScheduleFn(
        space, sch_rules=[], postprocs=postprocs(target_name),
        mutator_probs=mutator_probs())


def mutator_probs() -> dict:
    """The evolutionary search's moves: tile sizes and the categorical knobs (widths, unroll). MutateUnroll
    would never apply: no space here annotates meta_schedule.unroll_* (mutate_categorical's doc)."""
    return {ms.mutator.MutateTileSize(): 0.8, MutateCategorical(): 0.2}


# ----------------------------------------------------------------------------- build / run
def build(mod, target_name: str):
    """Compile a scheduled module as the builder and the export do (cuda_build.compile_cuda)."""
    return compile_cuda(mod, targets.tvm_target(target_name))


def f_build(mod, target, _params=None):
    """Meta-Schedule f_build of the tuner's CUDA builder: cuda_build.f_build, or for a FusedAttention candidate the
    kernel of the tile it draws (flashgemm/spaces/attention_tiles)."""
    from flashgemm.spaces import attention_tiles  # noqa: PLC0415
    if attention_tiles.is_workload(mod):
        return attention_tiles.f_build(mod, target)
    return cuda_build.f_build(mod, target, _params)


def builder(target_name: str, workers: int, build_fn=f_build) -> ms.builder.Builder:
    """Builder workers compiling for the arch asked (build_fn: a module-level f_build the workers can import)."""
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    return ms.builder.LocalBuilder(max_workers=max(1, int(workers)), f_build=build_fn, timeout_sec=120,
                                  initializer=ignore_stop_signals)


def evaluator_config() -> ms.runner.EvaluatorConfig:
    # 10 launches per repeat, 3 repeats, no minimum repeat time: 30 launches rank 5-500 us kernels well
    # (spread of repeats ~1 %), and a candidate costs milliseconds of GPU time instead of the 150 ms that
    # min_repeat_ms=50 costs (which makes the runner the slowest stage of tuning).
    # L2 is NOT flushed between launches (enable_cpu_cache_flush only flushes the CPU cache): inputs of
    # small workloads (W2: 9.7 MB) stay in the H100's 50 MB L2, so times are warm-L2 times, which is what
    # an attention layer repeatedly called with fresh Q/K would not quite see; compare against
    # baselines measured the same way (CUDA events, warm).
    return ms.runner.EvaluatorConfig(number=10, repeat=3, min_repeat_ms=0, enable_cpu_cache_flush=False)


def runner() -> ms.runner.Runner:
    return ms.runner.LocalRunner(timeout_sec=60, evaluator_config=evaluator_config(),
                                 f_alloc_argument=cuda_runner.alloc_arguments_once, initializer=ignore_stop_signals)


def gpu_environment() -> dict:
    """GPU name, driver and CUDA version where they can be found (nvidia-smi, then torch); {} otherwise."""
    env = {}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                name, driver = [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")[:2]]
                env.update(gpu=name, driver=driver)
            out = subprocess.run([smi], capture_output=True, text=True, timeout=20)
            for tok in out.stdout.split("CUDA Version:")[1:2]:
                env["cuda"] = tok.split()[0]
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    if "gpu" not in env:
        try:
            import torch  # noqa: PLC0415
            if torch.cuda.is_available():
                env.update(gpu=torch.cuda.get_device_name(0), cuda=str(torch.version.cuda))
        except Exception:  # noqa: BLE001
            pass
    return env
