"""The plain GEMM path of the tensor-core space: flashgemm/kernel/gemm.py scheduled with the fused op's GEMM machinery.

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
FRAGMENT_PIPELINE) the A/B fragments double-buffered in registers across the k-steps.

K-split (blockIdx over K slices, for long K and few output tiles: a 256 x 256 output is 4 blocks of 128 x 128 on a
132-SM GPU). Separate sketches, offered when the output is small (k_split_offered): the K loop is split into KS
slices (KS sampled, a categorical knob) and rfactor'ed, so that

    kernel 1  blockIdx.x = (k slice, row group, block column, block row): the GEMM above over K/KS, the fp32
              partial tile stored from the fragments to a workspace S_rf [KS, M, N]
    kernel 2  4 consecutive output elements a thread: C = cast(sum over the KS partials), 16-byte loads

The reduction is a second pass over KS x M x N x 4 bytes rather than atomics: fp32 atomicAdd into a zeroed
buffer would need a third kernel for the cast, and its sum order (so the result) would change from run to run.
Hopper's wgmma is flashgemm/spaces/cuda_wgmma's space (sm_90a); this one is mma.sync on every arch. Not done: TMA.
"""
from __future__ import annotations

import tvm

from flashgemm.spaces import cuda_space
from flashgemm.spaces.cuda_space import SMEM, UnsupportedShapeError
from flashgemm.tvm_ext.tensor_intrin import intrin_group

STAGES = (2, 3, 4)
K_SPLITS = (2, 4, 8, 16)
K_SLICE_MIN = 64  # elements of K per slice: at least 4 k-steps of 16, or the partial pass costs more than it saves
K_SPLIT_WORKSPACE = 64 << 20  # bytes of fp32 partials at most
K_SPLIT_OUTPUT_MAX = 1 << 20  # output elements (64 blocks of 128 x 128) above which k-split sketches are left out
REDUCE_THREADS = 256
REDUCE_VEC = 4  # output elements a thread of the reduction kernel: 16-byte fp32 loads (the most VerifyGPUCode allows)


# The fragment pipeline (register double buffer of the A/B fragments, _schedule) is opt-in: on 4096^3 fp16 (H100)
# its best candidate is slower than the best without it: nvcc already schedules the unrolled k-steps' ldmatrix
# ahead of their mma, and the second fragment buffer costs registers.
FRAGMENT_PIPELINE = (False,)


def k_split_factors(m: int, n: int, k: int) -> list:
    """The k-split factors KS the space may sample for a shape: KS divides K's 16-element steps, every slice
    keeps K_SLICE_MIN elements, and the partials fit K_SPLIT_WORKSPACE."""
    return [ks for ks in K_SPLITS
            if (k // 16) % ks == 0 and k // ks >= K_SLICE_MIN and ks * m * n * 4 <= K_SPLIT_WORKSPACE]


def k_split_offered(m: int, n: int, k: int) -> bool:
    """Whether the k-split sketches join the space by default: a small output (few blocks) and a K to split."""
    return m * n <= K_SPLIT_OUTPUT_MAX and bool(k_split_factors(m, n, k))


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=STAGES,
             fragment_pipeline=FRAGMENT_PIPELINE, k_split=None) -> list:
    """One sketch per pipeline depth, fragment_pipeline choice (False, True or both) and k-split form
    (k_split: None = without, plus with where k_split_offered; False = without only; True = with only)."""
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    if m % 16 or n % 16 or k % 16:
        raise UnsupportedShapeError(f"the plain GEMM path takes M, N, K multiples of 16 (got {m}, {n}, {k})")
    forms = {None: (False, True) if k_split_offered(m, n, k) else (False,), False: (False,), True: (True,)}[k_split]
    if True in forms and not k_split_factors(m, n, k):
        raise UnsupportedShapeError(f"no k-split factor of {K_SPLITS} fits M={m}, N={n}, K={k} (slices of at least "
                                    f"{K_SLICE_MIN}, partials of at most {K_SPLIT_WORKSPACE >> 20} MiB)")
    return [_schedule(sch.copy(), stages, frag, split)
            for split in forms for stages in stage_options for frag in fragment_pipeline]


def _split_k(sch: tvm.s_tir.Schedule):
    """rfactor S over KS sampled K slices: block S_rf [KS, b0, b1, M, N] (slice loop outermost), then S (the sum
    over the slices) and C, which become the reduction kernel. Returns S_rf."""
    factors = k_split_factors(*cuda_space._sizes(sch.mod["main"])[2:])
    b0, b1, i, j, kk = sch.get_loops(sch.get_sblock("S"))
    ks = sch.sample_categorical(candidates=factors, probs=[1 / len(factors)] * len(factors))
    kc, _ = sch.split(kk, factors=[ks, None])
    rf = sch.rfactor(kc, 0)
    loops = sch.get_loops(rf)  # b0, b1, i, j, kc, k in the slice
    sch.reorder(loops[4], *loops[:4])

    # kernel 2: REDUCE_VEC consecutive output elements a thread (M x N is a multiple of 256, so the split is exact
    # and any bounds check falls outside the vector): the KS partials summed in registers, 16-byte loads, then the
    # cast and one vector store
    c_blk = sch.get_sblock("C")
    rest, vec = sch.split(sch.fuse(*sch.get_loops(c_blk)), factors=[None, REDUCE_VEC])
    bx, tx = sch.split(rest, factors=[None, REDUCE_THREADS])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    s_sum = sch.get_sblock("S")
    sch.compute_at(s_sum, tx)
    sch.set_scope(s_sum, 0, "local")
    sch.vectorize(sch.get_loops(s_sum)[-1])  # compute_at put the slice loop outside the element loop
    sch.vectorize(vec)
    return rf


def _schedule(sch: tvm.s_tir.Schedule, stages: int, fragment_pipeline: bool = False,
              k_split: bool = False) -> tvm.s_tir.Schedule:
    dtype = str(next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A"))
    names = intrin_group(dtype, cuda_space._is_trans_b(sch), SMEM)
    s_blk = _split_k(sch) if k_split else sch.get_sblock("S")
    lead = (sch.get_loops(s_blk)[0],) if k_split else ()  # the slice loop
    *_, b0, b1, i, j, kk, s_outer, s_inner = cuda_space.mma_tiles(sch, s_blk)
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
    sch.reorder(*lead, b0, b1, b_grp, bj, b_row, wm, wn, ko, ki, fm, fn)
    bx = sch.fuse(*lead, b0, b1, b_grp, bj, b_row)
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
    if k_split:  # the accumulators: registers, stored (fp32) to the partials' workspace like C below
        c_blk = sch.cache_write(s_outer, 0, "warp")
        acc, acc_layout = (c_blk, ("read", 0)), cuda_space.mma_layout_k_split
    else:
        sch.set_scope(s_outer, 0, "warp")  # the accumulators: registers
        c_blk = sch.get_sblock("C")
        acc, acc_layout = (s_outer, ("write", 0)), cuda_space.mma_layout
    sch.decompose_reduction(s_outer, ko)
    init_inner = sch.get_sblock("S_rf_init" if k_split else "S_init")
    loop_a, loop_b = cuda_space.tile_fragment(sch, a_w), cuda_space.tile_fragment(sch, b_w)

    # C (or the partials) from the fragments: each thread stores the elements its accumulators hold (the mma
    # layout), 2 at a time
    sch.reverse_compute_at(c_blk, bx, preserve_unit_loops=True)
    i_c, j_c = sch.get_loops(c_blk)[-2:]
    wm_, ti_, ih_, il_ = sch.split(i_c, factors=[wm_rv, fm_rv, 2, 8])
    wn_, fn_, jh_, jm_, jl_ = sch.split(j_c, factors=[wn_rv, fn_rv, 2, 4, 2])
    sch.reorder(wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
    sch.bind(sch.fuse(wm_, wn_), "threadIdx.y")
    sch.bind(sch.fuse(il_, jm_), "threadIdx.x")
    # (vectorizing jl_, the 2 neighbouring elements of a thread, fails LowerWarpMemory's rewrite in TVM 0.27)

    cuda_space.tensorize_fragments(sch, a_w, b_w, acc, loop_a, loop_b, s_inner, init_inner, names, acc_layout)
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


def k_split_of(trace) -> int:
    """KS of a scheduled trace: the k-split's sampled factor (the categorical before the RFactor), 1 without."""
    insts = list(trace.insts)
    for idx, inst in enumerate(insts):
        if inst.kind.name == "RFactor":
            sample = next(x for x in reversed(insts[:idx]) if x.kind.name == "SampleCategorical")
            return int(sample.attrs[0][int(trace.decisions[sample])])
    return 1


def design_space(target_name: str, fragment_pipeline=FRAGMENT_PIPELINE, k_split=None):
    """The plain GEMM's Meta-Schedule space (the fused op's postprocessors and mutators)."""
    from tvm.s_tir import meta_schedule as ms  # noqa: PLC0415
    target_name = cuda_space.targets.resolve(target_name)
    return ms.space_generator.ScheduleFn(
        lambda s: schedule(s, target_name, fragment_pipeline=fragment_pipeline, k_split=k_split), sch_rules=[],
        postprocs=cuda_space.postprocs(target_name), mutator_probs=cuda_space.mutator_probs())
