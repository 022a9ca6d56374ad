"""Meta-Schedule design space of the long-row (split-N) form on tensor cores: LM heads, N = 65536.

When a block of S rows no longer fits in shared memory (cuda_space.check_shape: N > ~3580 on sm_90), the row-resident
variant cannot keep the rows on chip. The split-N form (flashgemm.kernel.fused_gemm_softmax, `chunk=CW`) runs two
kernels instead:
    pass 1  blockIdx.x = (b0, b1, chunk of CW columns, row tile of BM rows)   W warps, 32 lanes
            the row-resident GEMM tile (cuda_space._tensor_core_tile: cp.async pipeline, ldmatrix,
            mma.sync m16n8k16) of BM x CW into S in shared memory; per row the chunk max m_c and sum
            l_c = sum exp(x - m_c); P <- exp(x - m_c) (P's dtype); m_c, l_c -> a [.., M, N/CW] workspace
    pass 2  blockIdx.x = (b0, b1, row): m = max_c m_c, l = sum_c l_c exp(m_c - m) (cross-thread
            reductions over the chunks), then P <- P * exp(m_c - m) / l in place, vectorized

Why combine-and-rescale and not recompute. The main user is the LM head (4096 x 32000 x 4096): it is
bound by its GEMM (1.07 TFLOP against 0.56 GB of HBM floor traffic), so recomputing S for a second
pass would double the dominant cost, while rescaling P adds 2 x |P| of traffic (+0.5 GB, ~0.17 ms
at 3 TB/s) to a ~2 ms op. For small-K long rows (N = 65536, K = 64) recompute would move less data;
that variant is not in the space yet.

On sm_90, where the shape tiles exactly, the space also has wgmma sketches of pass 1 (flashgemm/spaces/cuda_wgmma:
warpgroup tiles of 64 WG x CW, Hopper's async tensor cores; built for sm_90a); this epilogue and pass 2 are shared.

Chunk-major rasterization: the chunk index is outside the row tile in blockIdx.x, so consecutive
blocks share one CW-column slice of B while A (32 MB for the LM head) stays in the 50 MB L2; the
other order streams all of B (256 MB) from HBM once per row tile.

Sampled knobs: a 2-D grid of warps: rows per block = warps over rows x 16-row fragments per warp,
warps over columns x fragments per warp over the chunk's CW/16 column tiles (each warp loads only its
rows of A and its columns of B); K tiling (k-tiles x BK/16), the A/B fetch vector widths, the pass-2 vector width;
pipeline depth 2 or 3 as separate sketches.
"""
from __future__ import annotations

import tvm

from flashgemm.spaces import cuda_space
from flashgemm.spaces.cuda_space import PIPELINE_STAGES, SMEM
from flashgemm.tvm_ext.tensor_intrin import intrin_group

PASS2_THREADS = 128
CHUNK_WIDTHS = (128, 64, 32, 16)  # preferred first; CW must divide N (the kernel: no partial chunk)
# The wide form's chunk (sm_90, wgmma only: flashgemm/spaces/cuda_wgmma): an m64n256 wgmma tile a warpgroup does twice
# the work of CW = 128 between the k-tile's barriers; its fp32 S tile (128 x 256) aliases the pipeline buffers, one
# block an SM. On the H100 it beats CW = 128 on the LM head (bf16) by about a fifth.
WIDE_CHUNK = 256


def wide_chunk_for(target_name: str, m: int, n: int, k: int) -> int:
    """CW of the wide split-N form (tuned beside the primary one) for a shape on a target, or 0 where it has none:
    long rows on sm_90 that the wgmma split-N sketches tile with chunks of WIDE_CHUNK."""
    from flashgemm.spaces import cuda_wgmma  # noqa: PLC0415
    from flashgemm import targets
    if not targets.is_cuda(target_name) or targets.resolve(target_name) != "sm_90" or not chunk_for(
            target_name, m, n, k):
        return 0
    fits = any(cuda_wgmma.split_n_fits(m, n, k, WIDE_CHUNK, wg) for wg in cuda_wgmma.SPLIT_N_WGS)
    return WIDE_CHUNK if fits else 0


def chunk_for(target_name: str, m: int, n: int, k: int) -> int:
    """The chunk width CW of the split-N form for a shape on a target, or 0 for the one-pass
    (row-resident) form. Split-N is chosen exactly when the row-resident variant cannot hold the
    rows (cuda_space.LongRowError) and some CW divides N; other shapes keep their old path (an
    N that is not a multiple of 16 beyond the row-resident limit still goes to the generic kernel)."""
    from flashgemm import targets  # noqa: PLC0415
    if not targets.is_cuda(target_name):
        return 0
    try:
        cuda_space.check_shape(targets.resolve(target_name), m, n, k)
        return 0
    except cuda_space.LongRowError:
        return next((cw for cw in CHUNK_WIDTHS if n % cw == 0), 0)
    except cuda_space.UnsupportedShapeError:
        return 0


def is_split_n(sch: tvm.s_tir.Schedule) -> bool:
    """Whether the module is the split-N form of the kernel."""
    try:
        sch.get_sblock("chunk_max")
        return True
    except Exception:  # noqa: BLE001  (tvm raises ScheduleError for a missing block)
        return False


def chunk_width(sch: tvm.s_tir.Schedule) -> int:
    """CW: the extent of the chunk_max reduction loop."""
    return int(sch.get(sch.get_loops(sch.get_sblock("chunk_max"))[-1]).extent)


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=PIPELINE_STAGES) -> list:
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    if m == 1:
        raise cuda_space.UnsupportedShapeError(
            "M=1 (decoding) has no split-N form: the row-vector space (flashgemm/spaces/cuda_row_vector) serves it")
    cw = chunk_width(sch)
    if cw not in CHUNK_WIDTHS:  # the wide form (WIDE_CHUNK): its S tile of BM x 256 fits only the wgmma sketches
        raise cuda_space.UnsupportedShapeError(
            f"split-N chunk width {cw} has no mma.sync sketch (widths {CHUNK_WIDTHS}): the wide form is wgmma-only "
            "(flashgemm/spaces/cuda_wgmma.split_n_schedule, sm_90)")
    dtype = next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A")
    names = intrin_group(str(dtype), cuda_space._is_trans_b(sch), SMEM)

    # ---- pass 1: GEMM tile BM x CW, S in shared memory
    s_blk = sch.get_sblock("S")
    # M is padded to a multiple of 64 (a small M wastes MMAs, not traffic: an LM head at small M is bound
    # by reading B) so that blocks of 64 and 128 rows always exist: blocks of 16 or 32 rows, and some of
    # 64 with a single k tile, fail TVM 0.27's build (MergeSharedMemoryAllocations retypes an fp16 tile as
    # fp32: "tvm_access_ptr element type must match"); VerifyGPUCode rejects those candidates.
    m_fac = 64
    npad = -(-n // cw) * cw
    pad_a, pad_b = bool(m % m_fac or k % 16), bool(npad != n or k % 16)
    pad_s = bool(m % m_fac or npad != n)
    if pad_a or pad_b or pad_s:  # zero-padded operands read under a predicate (see cuda_space)
        sch.pad_einsum(s_blk, [1, 1, m_fac, cw, 16])
    if pad_s:
        sch.compute_inline(sch.get_sblock("S_pad"))

    b0, b1, i, j, kk, s_outer, s_inner = cuda_space.mma_tiles(sch, s_blk)

    jc, jt = sch.split(j, factors=[None, cw // 16])
    i_f = sch.sample_perfect_tile(i, n=3, max_innermost_factor=4)       # [row tiles, warps over rows, frags]
    j_f = sch.sample_perfect_tile(jt, n=2, max_innermost_factor=4)      # [warps over columns, frags/warp]
    k_f = sch.sample_perfect_tile(kk, n=2, max_innermost_factor=4)      # [k tiles, BK/16]
    ib, my, mi = sch.split(i, factors=i_f)
    jy, ji = sch.split(jt, factors=j_f)
    ko, ki = sch.split(kk, factors=k_f)
    sch.reorder(b0, b1, jc, ib, my, jy, ko, ki, mi, ji)
    bx = sch.fuse(b0, b1, jc, ib)  # chunk-major: see the module doc
    sch.bind(bx, "blockIdx.x")
    ty = sch.fuse(my, jy)  # a 2-D grid of warps: each loads only its rows of A and its columns of B
    sch.bind(ty, "threadIdx.y")
    sch.annotate(s_outer, "warp_execution", 1)
    for name in ("chunk_max", "chunk_sum", "P_chunk", "chunk_stats"):
        sch.reverse_compute_at(sch.get_sblock(name), bx)

    cuda_space._tensor_core_tile(sch, s_outer, s_inner, ko, ki, ty, pad_a, pad_b, names)

    warps = (j_f[0], i_f[1])  # threadIdx.y extent = their product: split by both, fuse the two

    def split_warps(loop, *inner):
        parts = sch.split(loop, factors=[None, *warps, *inner])
        sch.bind(sch.fuse(parts[1], parts[2]), "threadIdx.y")
        return parts[3:]

    epilogue(sch, split_warps, n)
    pass2(sch)
    return cuda_space.pipeline_sketches(sch, ko, stage_options)


def epilogue(sch: tvm.s_tir.Schedule, split_warps, n: int) -> None:
    """Pass 1's epilogue, under blockIdx.x (the blocks reverse-computed there): the chunk statistics and P_chunk
    from the S tile in shared memory, a warp per row, lanes (threadIdx.x, 32) over the columns. split_warps(loop,
    *inner) splits a row loop over the block's warps, binds them, and returns the `inner` loops."""
    # Static "shared", not the merged dynamic pool: TVM 0.27's MergeSharedMemoryAllocations, reusing a dead
    # fp16 A/B tile for these fp32 rows, retypes the tile's ldmatrix pointer ("tvm_access_ptr element type
    # must match the source buffer") and the build fails for some tilings.
    sch.set_scope(sch.get_sblock("chunk_max"), 0, "shared")
    sch.set_scope(sch.get_sblock("chunk_sum"), 0, "shared")

    def rows_cols(name):
        """(row, column) loops of an epilogue block under bx: the unit chunk loop is fused away."""
        loops = sch.get_loops(sch.get_sblock(name))
        inner = [lp for lp in loops[1:] if sch.get(lp).thread_binding is None]
        if len(inner) == 1:  # one row (M = 1 cannot happen; BM = rows) -> add the row loop
            return sch.add_unit_loop(inner[0]), inner[0]
        return inner[0], sch.fuse(*inner[1:]) if len(inner) > 2 else inner[1]

    for name in ("chunk_max", "chunk_sum"):
        r, c = rows_cols(name)
        split_warps(r)
        _, cx = sch.split(c, factors=[None, 32])
        sch.bind(cx, "threadIdx.x")
    r, c = rows_cols("P_chunk")
    split_warps(r)
    _, cx, cv = sch.split(c, factors=[None, 32, 4])
    sch.bind(cx, "threadIdx.x")
    if n % 4 == 0:
        sch.vectorize(cv)
    r, c = rows_cols("chunk_stats")
    rc = sch.fuse(r, c)
    (rx,) = split_warps(rc, 32)
    sch.bind(rx, "threadIdx.x")


def pass2(sch: tvm.s_tir.Schedule) -> None:
    """Pass 2: one block per row: combine the chunk statistics, rescale P in place."""
    p_blk = sch.get_sblock("P")
    pb0, pb1, pi, pj = sch.get_loops(p_blk)
    row = sch.fuse(pb0, pb1, pi)
    sch.bind(row, "blockIdx.x")
    for name in ("row_sum", "row_max"):
        blk = sch.get_sblock(name)
        sch.compute_at(blk, row)
        sch.set_scope(blk, 0, "shared")
        _, cx = sch.split(sch.get_loops(blk)[-1], factors=[None, PASS2_THREADS])
        sch.bind(cx, "threadIdx.x")
    # vector width of the rescale: at most 4 (its fp32 math is 4 x 4 bytes; VerifyGPUCode caps vectors at 16 B).
    # N is a multiple of CW >= 16, so every width keeps rows aligned.
    pv = sch.sample_categorical(candidates=[1, 2, 4], probs=[0.2, 0.3, 0.5])
    _, px, pvv = sch.split(pj, factors=[None, PASS2_THREADS, pv])
    sch.vectorize(pvv)
    sch.bind(px, "threadIdx.x")
