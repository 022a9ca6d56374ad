"""The plain GEMM path of the tensor-core space: tir_kernels/gemm.py scheduled with the fused op's GEMM machinery.

Issue 3 asks how good the space's GEMM is on its own (4096^3 fp16 against cuBLAS). The fused sketches never
write S to memory, so the plain path is the register sketches' GEMM (cuda_registers) with block "C" (the cast)
where the softmax was: the same 16x16x16 blockize (cuda_space.mma_tiles), cooperative cp.async fetches with
padded rows, ldmatrix fragments (cuda_space.tile_fragment), mma.sync m16n8k16 into "warp"-scope accumulators that
LowerWarpMemory turns into registers (cuda_space.tensorize_fragments), and C stored straight from the fragments as
half2 / bfloat162 (cuda_registers' P store).

    blockIdx.x = (row group, block column, block row in the group)    warps = WM x WN, each FM x FN 16x16 fragments
    for ko (software pipeline, `stages` deep, copies cp.async):  A, B k-tiles -> shared memory
        for ki: ldmatrix A, B fragments; mma.sync
    C = cast(accumulators) from registers

Sampled knobs: row tiles [row groups, R, WM, FM <= 4], column tiles [blocks, WN, FN <= 8], K tiles [KO, KI <= 4]
(16 each), A/B fetch vector widths. R is the rasterization: the R block rows of a group walk the block columns
together (Triton's GROUP_M), so that the blocks resident at once share A's row tiles and B's column tiles in L2;
R = 1 is row-major block order, R = all block rows column-major. Sketches: 2, 3 or 4 pipeline stages, and (opt-in,
FRAGMENT_PIPELINE) the A/B fragments double-buffered in registers across the k-steps. Not done (so not claimed): a
k-split, Hopper's wgmma/TMA (TVM 0.27 has no intrinsics for them; mma.sync is what the space uses on sm_90 too).
"""
from __future__ import annotations

import tvm

from . import cuda_space
from .cuda_space import SMEM, UnsupportedShapeError
from .tensor_intrin import intrin_group

STAGES = (2, 3, 4)


# The fragment pipeline (register double buffer of the A/B fragments, _schedule) is opt-in: on 4096^3 fp16 (H100,
# 2026-11-26, 192 trials with both forms in the space) its best candidate ran 485.4 us against 408.7 us without it
# (results/h100/gemm-records-fragment-pipeline-2026-11-26.txt): nvcc already schedules the unrolled k-steps' ldmatrix
# ahead of their mma, and the second fragment buffer costs registers.
FRAGMENT_PIPELINE = (False,)


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=STAGES,
             fragment_pipeline=FRAGMENT_PIPELINE) -> list:
    """One sketch per pipeline depth and fragment_pipeline choice (False, True or both)."""
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    if m % 16 or n % 16 or k % 16:
        raise UnsupportedShapeError(f"the plain GEMM path takes M, N, K multiples of 16 (got {m}, {n}, {k})")
    return [_schedule(sch.copy(), stages, frag) for stages in stage_options for frag in fragment_pipeline]


def _schedule(sch: tvm.s_tir.Schedule, stages: int, fragment_pipeline: bool = False) -> tvm.s_tir.Schedule:
    dtype = str(next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A"))
    names = intrin_group(dtype, cuda_space._is_trans_b(sch), SMEM)
    b0, b1, i, j, kk, s_outer, s_inner = cuda_space.mma_tiles(sch, sch.get_sblock("S"))
    # [row groups, R, WM, FM]: R block rows a rasterization group, a level of the perfect tile (not a categorical
    # knob of its own) so that it always divides the block rows and MutateTileSize moves rows between it and the rest
    i_f = sch.sample_perfect_tile(i, n=4, max_innermost_factor=4)
    j_f = sch.sample_perfect_tile(j, n=3, max_innermost_factor=8)   # [blocks, WN, FN]
    if fragment_pipeline:  # KI even (>= 2): the register pipeline needs a next k-step inside every k-tile
        kk, k_pair = sch.split(kk, factors=[None, 2])
    k_f = sch.sample_perfect_tile(kk, n=2, max_innermost_factor=4)  # [KO, KI] (KI in pairs with fragment_pipeline)
    b_grp, b_row, wm, fm = sch.split(i, factors=i_f)
    bj, wn, fn = sch.split(j, factors=j_f)
    ko, ki = sch.split(kk, factors=k_f)
    if fragment_pipeline:
        ki = sch.fuse(ki, k_pair)
    sch.reorder(b0, b1, b_grp, bj, b_row, wm, wn, ko, ki, fm, fn)
    bx = sch.fuse(b0, b1, b_grp, bj, b_row)
    sch.bind(bx, "blockIdx.x")
    sch.bind(sch.fuse(wm, wn), "threadIdx.y")
    sch.annotate(s_outer, "warp_execution", 1)
    wm_rv, fm_rv = i_f[2:]
    wn_rv, fn_rv = j_f[1:]

    for idx in (0, 1):  # A, B k-tiles: cooperative cp.async fetch, rows padded by 8 elements (no bank conflicts)
        blk = sch.cache_read(s_outer, idx, SMEM)
        sch.compute_at(blk, ko)
        sch.fuse(*sch.get_loops(blk)[-2:])
        vec = sch.sample_categorical(candidates=[4, 8], probs=[0.25, 0.75])
        sch.annotate(blk, "meta_schedule.cooperative_fetch", vec)
        sch.storage_align(blk, 0, axis=-2, factor=32, offset=8)
    a_w = sch.cache_read(s_outer, 0, "warp")
    b_w = sch.cache_read(s_outer, 1, "warp")
    sch.compute_at(a_w, ki)
    sch.compute_at(b_w, ki)
    sch.set_scope(s_outer, 0, "warp")  # the accumulators: registers
    sch.decompose_reduction(s_outer, ko)
    init_inner = sch.get_sblock("S_init")
    loop_a, loop_b = cuda_space.tile_fragment(sch, a_w), cuda_space.tile_fragment(sch, b_w)

    # C from the fragments: each thread stores the elements its accumulators hold (the mma layout), 2 at a time
    c_blk = sch.get_sblock("C")
    sch.reverse_compute_at(c_blk, bx, preserve_unit_loops=True)
    i_c, j_c = sch.get_loops(c_blk)[-2:]
    wm_, ti_, ih_, il_ = sch.split(i_c, factors=[wm_rv, fm_rv, 2, 8])
    wn_, fn_, jh_, jm_, jl_ = sch.split(j_c, factors=[wn_rv, fn_rv, 2, 4, 2])
    sch.reorder(wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
    sch.bind(sch.fuse(wm_, wn_), "threadIdx.y")
    sch.bind(sch.fuse(il_, jm_), "threadIdx.x")
    # sch.vectorize(jl_)

    cuda_space.tensorize_fragments(sch, a_w, b_w, (s_outer, ("write", 0)), loop_a, loop_b, s_inner, init_inner,
                                   names)
    # [A->shared, B->shared, ldmatrix+mma]: the copies of k-tile t+stages-1 overlap the mma of k-tile t
    if fragment_pipeline:
        # [ldmatrix A, ldmatrix B, mma] of k-step ki+1 / ki: the next fragments load into a second register buffer
        # while this k-step's mma runs, so the tensor cores do not wait on shared memory at every step. The inner
        # pipeline is injected first; the k-tile's body is then [A->shared, B->shared, prologue (ldmatrix of the
        # first k-step), pipelined ki loop, epilogue (last mma)], and all three read the k-tile's shared memory
        sch.annotate(ki, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ki, "software_pipeline_order", [0, 1, 2])
        sch.annotate(ko, "software_pipeline_stage", [0, 0] + [stages - 1] * 3)
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2, 3, 4])
    else:
        sch.annotate(ko, "software_pipeline_stage", [0, 0, stages - 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
    sch.annotate(ko, "software_pipeline_async_stages", [0])
    return sch


def design_space(target_name: str, fragment_pipeline=FRAGMENT_PIPELINE):
    """The plain GEMM's Meta-Schedule space (the fused op's postprocessors and mutators)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    target_name = cuda_space.targets.resolve(target_name)
    return ms.space_generator.ScheduleFn(
        lambda s: schedule(s, target_name, fragment_pipeline=fragment_pipeline), sch_rules=[],
        postprocs=cuda_space.postprocs(target_name), mutator_probs=cuda_space.mutator_probs())
