"""The recompute sketches of the fused op: S is recomputed instead of kept, so a block holds one chunk of it.

The row-resident sketches keep a whole row block of S on chip: in shared memory (cuda_space: 16 x 1504 fp32 =
96 KB at W3's N = 1500, two blocks an SM) or in the mma accumulators with B resident (cuda_registers: B alone is
192 KB at W3, one block of 8-12 warps an SM). Either way a W3 SM runs one or two blocks, and the P stores of a
block (its only HBM traffic worth counting) are not overlapped by anything: W3 runs at ~4.6x its HBM floor.

Here a block of BM rows sweeps N three times, in chunks of CW columns, each chunk recomputed on tensor cores:

    blockIdx.x = (b0, b1, group of BM = WM*FM*16 rows)      warps = WM (rows, threadIdx.y) x WN (columns, .z)
    A [BM, K] -> shared memory once (read by all three sweeps)
    sweep 1, for each chunk (software-pipelined: the next chunk's B [CW, K] cp.async overlaps this one):
        S chunk (FM x FN 16x16 fp32 fragments a warp, registers) = mma.sync m16n8k16
        the lane's running max over its fragment elements (a register per row it holds)
    combine: lanes' maxima -> shared [BM, WN*4] -> one thread a row -> row_max
    sweep 2: the same GEMM, the lane's running sum of exp(logit - max); combine -> row_sum
    sweep 3: the same GEMM, P = exp(logit - max) / sum from the fragments, half2 stores to global memory

Why recompute and not split-N with a combine pass (cuda_split_n): a combine rewrites P (one more write and a read
of it: 3x the floor's P traffic), while recomputing costs tensor-core time only. At K = 64 a 16x16 fragment of S
is 4 mma.sync, cheap against the 2 bytes of P it ends in: three sweeps are 3 x 46 GFLOP at W3, against the 720 MB
of P written once. Shared memory is only A, the B chunks and the partial statistics (~30 KB), so several blocks
share an SM and one block's stores overlap another's GEMM. Why three sweeps and not two (online softmax): the
rescaling running sum is not a reduction TIR can rfactor, and the extra GEMM sweep is the cheaper one.

The kernel's recompute form (flashgemm.kernel.fused_gemm_softmax: recompute=True, a padded form) writes the GEMM three
times ("S", "S_sum", "S_p"), so each is computed at the chunk loop of its own consumer. It iterates over padded sizes
(padded_sizes: M to 16/32/64, N to 64, K to 16), so every split here is perfect.

Statistics as in cuda_registers (rfactor over (warp column, quad lane); the partial in a register of the lane
that owns the fragment elements), except that the chunk loop is the partial's outermost reduction loop: its
register accumulates across chunks, initialized before the sweep and written to shared memory after it.

Sampled knobs: rows [groups, BM/16 <= 16] then [WM, FM <= 2], columns [chunks, CW/16 <= 16] then [WN, FN <= 4 (8)]
(nested sample_perfect_tile), K tiles, B fetch vector widths; sketches: 2 or 3 pipeline stages over the chunks, each
with P stored from the fragments, two elements at a time where N is even (half2 / nv_bfloat162; see the note at the
P block), or staged through shared memory (the staged-P note below), each with A's fragments loaded at every k tile
or once a block (the resident-A note below; W3's best kernels in both dtypes are resident).

Why two elements a store: with P stored one element at a time the form is L2-bound (one L2 request per 2 bytes of
P; ncu: L2 busy, DRAM mostly idle) and no faster than the one-pass form at W3. Two elements a store make the same
kernels well over 1.5x faster, and the form then beats the one-pass form at W3 in both dtypes, in fewer trials.
Hence tuned by default on long rows (flashgemm.spaces.kernel_forms.RECOMPUTE_AUTO_MIN_N).
"""
from __future__ import annotations

import tvm

from flashgemm.spaces import cuda_registers, cuda_space
from flashgemm.spaces.cuda_space import SMEM
from flashgemm.tvm_ext.tensor_intrin import intrin_group

CHUNK_STAGES = (2, 3)
TWO_SWEEP_CHUNK = 64  # CW of the two-sweep form's chunk statistics (the three-sweep W3 winners' chunk width)
TWO_SWEEP_STAT_COLS = 32  # its statistics' column groups: 2 warp columns of 32 (the three-sweep W3 winners' tiling)


def is_recompute_form(sch: tvm.s_tir.Schedule) -> bool:
    """Whether this module is the kernel's recompute form (it alone has an "S_p" block)."""
    return any(buf.name == "S_p" for buf in sch.mod["main"].body.block.alloc_buffers)


def padded_sizes(variant, m: int, n: int, k: int):
    """(Mp, Np, Kp) of the static recompute form for this shape, or None where it does not apply: M < 16 (decoding:
    the row-vector space), a bias or mask (the static padded form takes none; the form over a bound does:
    flashgemm.spaces.kernel_forms.any_length_form). Mp a multiple of 64, else 32, when that
    pads at most 15 % of the rows, else of 16; Np of 64; Kp of 16. No limit on N: only a chunk is on chip."""
    if m < 16 or variant.has_bias or variant.mask != "none":
        return None

    def up(x, q):
        return -(-x // q) * q
    mp = next((up(m, q) for q in (64, 32) if up(m, q) - m <= 0.15 * m), up(m, 16))
    return mp, up(n, 64), up(k, 16)


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=CHUNK_STAGES, staged_p=(False, True),
             resident_a=(False, True)) -> list:
    """One sketch per pipeline depth of the chunk loops and per place of A's fragments (resident_a: loaded at
    every k tile, or once a block: the resident-A note below); the three-sweep form also one per way P leaves the
    fragments (staged_p: directly, or through shared memory: the staged-P note below)."""
    if not is_recompute_form(sch):
        raise cuda_space.UnsupportedShapeError("cuda_recompute schedules only the kernel's recompute form")
    if is_two_sweep_form(sch):
        return [_schedule2(sch.copy(), stages, res) for res in resident_a for stages in stage_options]
    return [_schedule(sch.copy(), stages, staged, res)
            for res in resident_a for staged in staged_p for stages in stage_options]


def p_vector_width(n: int) -> int:
    """Elements of P a thread stores at once when staged (the staged-P note below): 4 (8 bytes) where every row
    start allows it (N a multiple of 4, W3's 1500 included), else 2 or 1. Not 8: the same vector reads the fp32
    tile, and VerifyGPUCode rejects accesses wider than 16 bytes."""
    return next(v for v in (4, 2, 1) if n % v == 0)


# Staged P (the sketches with staged_p, _schedule): P from a shared-memory tile of the chunk's logits, row by row,
# p_vector_width elements a thread. Why: from the fragments, a warp's half2 store covers 8 rows x 16 bytes, half of
# eight 32-byte sectors; the W3 kernel, 720 MB of P, is L2-bound on such stores (as it is with 2-byte stores). Staged, a
# warp store covers whole sectors (two rows of a 64-column chunk with 8-byte vectors): half the sector writes (by count;
# not measured with ncu), for BM x CW fp32 of shared memory and a barrier a chunk. The tile holds S_p (fp32), not P
# (fp16): P's block keeps its bounds test (rows and columns past M, N of the padded form), which a copy block of a P
# tile (cache_write) would not have; such a tile also inherits P's symbolic elem_offset. Tile rows are padded by 8
# words, so that the lanes of a half warp (4 rows x 4 quad lanes, 8 bytes each) write distinct banks.
# With the same decisions staging is faster or slower than the direct stores depending on the tile (a big tile
# costs occupancy), so both are sketches and the search decides; W3's best fp16 kernel is staged.


# Resident A (the sketches with resident_a): A's fragments are loaded from shared memory once a block (ldmatrix,
# FM x K/16 tiles a warp, K/4 registers a thread a row tile) and read by every chunk of the three (two) sweeps,
# instead of once a k tile of every chunk. Why: the W3 fp16 kernel without it is bound by the shared-memory pipe
# (ncu: L1/TEX near its peak, MIO-throttle and short-scoreboard stalls), and A is half of its ldmatrix traffic
# (FM = FN = 2) while it never changes within a block. The load loop is bound to threadIdx.y (the warp row) only, so
# the warps of every column (threadIdx.z, bind_warp) run it, each filling its own registers: a copy a warp column,
# which a TIR block could not express with the warp index fused into one axis. FN <= 8.
# The two-sweep form has TWO_SWEEP_STAT_COLS-wide warp columns (its statistics are per column group: _schedule2).
# A direct record re-tiled as resident (same BM, CW and other decisions) gains little by itself; searched with these
# sketches in the space, the best W3 kernels are resident in both dtypes, and faster still with warp columns (e.g.
# BM 64, CW 64, 2 x 2 warps of 32 x 32: each warp reads half of each B chunk).


def warp_tilings(bmt: int, cwt: int) -> list:
    """(WM, FM, WN, FN) tilings of a block of bmt x cwt 16x16 tiles the three-sweep sketches can sample: FM <= 2,
    FN <= 8, at most 32 warps."""
    return [(bmt // fm, fm, cwt // fn, fn) for fm in (1, 2) for fn in (8, 4, 2, 1)
            if bmt % fm == 0 and cwt % fn == 0 and (bmt // fm) * (cwt // fn) <= 32]


def _n_samples(trace) -> int:
    return sum(inst.kind.name.startswith("Sample") for inst in trace.insts)


def _count(trace, kind: str, attr: str = "") -> int:
    return sum(inst.kind.name == kind and attr in str(inst.attrs) for inst in trace.insts)


def pipeline_stages(trace) -> int:
    """The software-pipeline depth of a three-sweep record's chunk loops (its sketch's `stages`)."""
    for inst in trace.insts:
        if inst.kind.name == "Annotate" and "software_pipeline_stage" in str(inst.attrs):
            return max(int(x) for x in inst.inputs[1]) + 1
    raise ValueError("no software pipeline in the trace")


def is_resident(trace, mod: tvm.IRModule) -> bool:
    """Whether a three-sweep record comes from a resident-A sketch (resident-A note): one register copy of A for all
    sweeps, so fewer cache reads into warp registers than one a sweep."""
    sketch = _schedule(tvm.s_tir.Schedule(mod), 2, resident_a=True).trace
    return _count(trace, "CacheRead", "warp") == _count(sketch, "CacheRead", "warp")


def is_staged(trace, mod: tvm.IRModule) -> bool:
    """Whether a three-sweep record stores P through a shared-memory tile (staged-P note): one more cache read."""
    sketch = _schedule(tvm.s_tir.Schedule(mod), 2, staged_p=True, resident_a=is_resident(trace, mod)).trace
    return _count(trace, "CacheRead") == _count(sketch, "CacheRead")


def current_decisions(trace, mod: tvm.IRModule) -> list:
    """A three-sweep record's sample decisions in the order of today's sketches: resident records tuned before warp
    columns were sampled lack that decision; they had one warp column, [WN, FN] = [1, CW/16]."""
    decisions = [trace.decisions[i] for i in trace.insts if i in trace.decisions]
    if _is_one_column_resident(trace, mod):
        decisions.insert(3, [1, int(decisions[1][1])])
    return decisions


def _is_one_column_resident(trace, mod: tvm.IRModule) -> bool:
    sketch = _schedule(tvm.s_tir.Schedule(mod), 2, resident_a=True).trace
    return is_resident(trace, mod) and _n_samples(trace) == _n_samples(sketch) - 1  # (no [WN, FN] decision)


def retiled(trace, mod: tvm.IRModule) -> list:
    """Today's resident-A traces for a resident three-sweep record tuned before warp columns were sampled: its
    decisions at every warp tiling of its block (warp_tilings), on the sketch of its own pipeline depth and P store; []
    for any other record. Why: the search mutates a record's own decisions, and such a record has no warp-column
    decision, so a database of them never reaches the new tilings by mutation; measured, these traces seed it
    (flashgemm.tune.tuner.tune's migrate_records)."""
    if not _is_one_column_resident(trace, mod):
        return []
    sketch = _schedule(tvm.s_tir.Schedule(mod), pipeline_stages(trace), staged_p=is_staged(trace, mod),
                       resident_a=True).trace
    old = current_decisions(trace, mod)
    (_, bmt), (_, cwt) = [[int(x) for x in d] for d in old[:2]]
    return [cuda_space.with_decisions(sketch, old[:2] + [[wm, fm], [wn, fn]] + old[4:])
            for wm, fm, wn, fn in warp_tilings(bmt, cwt)]


def bind_warp(sch: tvm.s_tir.Schedule, wm_, wn_) -> None:
    """A block's warps: threadIdx.y the warp row, threadIdx.z the warp column (three-sweep form). Two axes, not
    one fused, so that a loop bound to the rows alone runs in every column's warps (resident A, note above)."""
    sch.bind(wm_, "threadIdx.y")
    sch.bind(wn_, "threadIdx.z")


def _schedule(sch: tvm.s_tir.Schedule, stages: int, staged_p: bool = False,
              resident_a: bool = False) -> tvm.s_tir.Schedule:
    dtype = next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A_pad")
    names = intrin_group(str(dtype), cuda_space._is_trans_b(sch), SMEM)
    sch.compute_inline(sch.get_sblock("exp"))  # exp(logit - max) computed by the sum itself (no E buffer)

    # ---- knobs, sampled once on P's loops: rows [groups, BM/16] then [WM, FM]; columns [chunks, CW/16] then [WN, FN]
    # (nested perfect tiles: BM <= 256 and CW <= 256 rows/columns a block, at most 16 x 16 warps before VerifyGPUCode).
    # Every block reads all of B from L2 once a sweep, 3K/BM bytes of L2 traffic per byte of P: at W3 with BM = 64 that
    # was L2-bound (ncu: L2 throughput 86 %, DRAM 14 %), hence row groups up to 256 rows.
    p_blk = sch.get_sblock("P")
    b0, b1, i, j = sch.get_loops(p_blk)
    i16, i_in = sch.split(i, factors=[None, 16])
    j16, j_in = sch.split(j, factors=[None, 16])
    grp_rv, bmt_rv = sch.sample_perfect_tile(i16, n=2, max_innermost_factor=16)
    c_rv, cwt_rv = sch.sample_perfect_tile(j16, n=2, max_innermost_factor=16)
    i_grp, i_bmt = sch.split(i16, factors=[grp_rv, bmt_rv])
    j_c, j_cwt = sch.split(j16, factors=[c_rv, cwt_rv])
    wm_rv, fm_rv = sch.sample_perfect_tile(i_bmt, n=2, max_innermost_factor=2)
    wn_rv, fn_rv = sch.sample_perfect_tile(j_cwt, n=2, max_innermost_factor=8 if resident_a else 4)
    i = sch.fuse(i_grp, i_bmt, i_in)
    j = sch.fuse(j_c, j_cwt, j_in)

    def rows(loop, outer=False):  # -> ([grp,] wm, ti, ih, il): the accumulator's row structure
        return sch.split(loop, factors=([None] if outer else []) + [wm_rv, fm_rv, 2, 8])

    def cols(loop, outer=False):  # -> ([chunk,] wn, fn, jh, jm, jl): jm is the lane within a quad
        return sch.split(loop, factors=([None] if outer else []) + [wn_rv, fn_rv, 2, 4, 2])

    def bind_owner(wm_, wn_, il_, jm_):
        bind_warp(sch, wm_, wn_)
        sch.bind(sch.fuse(il_, jm_), "threadIdx.x")

    def iter_loops(block):
        """The loops of a block moved with preserve_unit_loops: one a block iterator, in the iterators' order."""
        return sch.get_loops(block)[-len(sch.get(block).iter_vars):]

    def all_threads(loop):
        """A row loop over every thread of the block, full thread extents (cuda_registers module doc)."""
        _, ry_m, ry_n, rx = sch.split(loop, factors=[None, wm_rv, wn_rv, 32])
        bind_warp(sch, ry_m, ry_n)
        sch.bind(rx, "threadIdx.x")

    def own_partial(wq, i_):
        """A (warp column x quad lane, row) nest of a partial statistic -> bound like the fragments it reads;
        returns the row loop ih (the lane's rows below it)."""
        wn_, jm_ = sch.split(wq, factors=[wn_rv, 4])
        wm_, ti_, ih_, il_ = rows(i_)
        sch.reorder(wm_, wn_, il_, jm_, ti_, ih_)
        bind_owner(wm_, wn_, il_, jm_)
        return ih_

    def stat_local(consumer, name, at):
        blk = sch.get(consumer)
        idx = next(q for q, r in enumerate(blk.reads)  # the statistic itself, not its partials
                   if r.source.name.startswith(name) and "_rf" not in r.source.name)
        sch.compute_at(sch.cache_read(consumer, idx, "local", consumer_blocks=[consumer]), at)

    # ---- P: the anchor. blockIdx over (b0, b1, row group); the chunk loop; the lane's own fragment elements, or
    # (staged_p) the chunk's rows, p_vector_width elements a thread, read from a tile the lanes fill (staged-P note)
    if staged_p:
        grp, wm_, fm_, r16 = sch.split(i, factors=[None, wm_rv, fm_rv, 16])
        c_p, wn_, fn_, c16 = sch.split(j, factors=[None, wn_rv, fn_rv, 16])
        row, col = sch.fuse(wm_, fm_, r16), sch.fuse(wn_, fn_, c16)
        sch.reorder(grp, c_p, row, col)
        vec = p_vector_width(int(sch.get(p_blk).writes[0].source.shape[3]))
        col, v = sch.split(col, factors=[None, vec])  # (the vector within a row: its bounds test stays uniform)
        _, ry_m, ry_n, rx = sch.split(sch.fuse(row, col), factors=[None, wm_rv, wn_rv, 32])
        bind_warp(sch, ry_m, ry_n)
        sch.bind(rx, "threadIdx.x")
        sch.vectorize(v)
        s_idx = next(q for q, r in enumerate(sch.get(p_blk).reads) if r.source.name == "S_p")
        tile = sch.cache_read(p_blk, s_idx, SMEM, consumer_blocks=[p_blk])
        sch.compute_at(tile, c_p, preserve_unit_loops=True)
        sch.storage_align(tile, 0, axis=-2, factor=32, offset=8)
        wm_, ti_, ih_, il_ = rows(sch.get_loops(tile)[-2])
        wn_, fn_, jh_, jm_, jl_ = cols(sch.get_loops(tile)[-1])
        sch.reorder(wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
        frag = tile
    else:
        grp, wm_, ti_, ih_, il_ = rows(i, outer=True)
        c_p, wn_, fn_, jh_, jm_, jl_ = cols(j, outer=True)
        sch.reorder(grp, c_p, wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
        frag = p_blk
    bx = sch.fuse(b0, b1, grp)
    sch.bind(bx, "blockIdx.x")
    bind_owner(wm_, wn_, il_, jm_)
    if not staged_p:  # (staged, P reads the statistics from shared memory, a broadcast a row)
        stat_local(p_blk, "row_max", ih_)
        stat_local(p_blk, "row_sum", ih_)
    # half2 stores: P (or the tile) reads the lane's two elements of S_p from a local copy, not the accumulator
    # itself (a vector read of the accumulator would make TVM retype it as float2, which LowerWarpMemory cannot split
    # into lanes). The copy sits at jh_ so that its region is exactly those two elements: higher up, the region is
    # the bounding box of the lane's strided columns, which reads other lanes' fragment elements and breaks
    # LowerWarpMemory.
    s_idx = next(q for q, r in enumerate(sch.get(frag).reads) if r.source.name == "S_p")
    sch.compute_at(sch.cache_read(frag, s_idx, "local", consumer_blocks=[frag]), jh_)  # 2 elements: exact
    sch.vectorize(jl_)

    # ---- statistics: rfactor over (warp column, quad lane), the chunk loop a reduction loop of the partial
    partial = {}
    for name in ("row_max", "row_sum"):
        blk = sch.get_sblock(name)
        c_, wn_, fn_, jh_, jm_, jl_ = cols(sch.get_loops(blk)[-1], outer=True)
        sch.reorder(wn_, jm_, c_, fn_, jh_, jl_)
        partial[name] = sch.rfactor(sch.fuse(wn_, jm_), factor_axis=3)
    for blk in (sch.get_sblock("row_sum"), partial["row_sum"], sch.get_sblock("row_max"), partial["row_max"]):
        sch.compute_at(blk, bx, preserve_unit_loops=True)
    sweeps = {}
    for name in ("row_max", "row_sum"):
        rf, blk = partial[name], sch.get_sblock(name)
        sch.set_scope(rf, 0, SMEM)
        acc = sch.cache_write(rf, 0, "local")  # the lane's partial: a register across the chunks of the sweep
        wq, _, _, i_, c_, fn_, jh_, jl_ = iter_loops(rf)
        sch.reorder(c_, wq, i_)
        ih_ = own_partial(wq, i_)
        if name == "row_sum":
            stat_local(rf, "row_max", ih_)
        sweeps[name] = c_
        sch.decompose_reduction(rf, c_)  # its init keeps the thread binding: each lane sets its own register
        _, _, i_, wq = sch.get_loops(acc)[-4:]  # the write-back to shared memory, by the owning lane
        sch.reorder(wq, i_)
        own_partial(wq, i_)
        sch.storage_align(acc, 0, axis=-2, factor=32, offset=1)
        # the combine: one thread a row over the WN*4 partials, accumulating in a register
        red, _, _, i_ = iter_loops(blk)
        sch.reorder(i_, red)
        all_threads(i_)
        sch.set_scope(blk, 0, SMEM)
        all_threads(sch.get_loops(sch.cache_write(blk, 0, "local"))[-1])

    # ---- the three GEMMs, each at the chunk loop of its consumer: [WM, FM] x [WN, FN] fragments, k tiles
    k_f = None
    gemms = []
    for s_name, c_ in (("S", sweeps["row_max"]), ("S_sum", sweeps["row_sum"]), ("S_p", c_p)):
        i_, j_, k_, s_outer, s_inner = _gemm_at(sch, s_name, c_)
        if k_f is None:
            k_f = sch.sample_perfect_tile(k_, n=2, max_innermost_factor=4)  # [KO, KI]
        wm_, fm_ = sch.split(i_, factors=[wm_rv, fm_rv])
        wn_, fn_ = sch.split(j_, factors=[wn_rv, fn_rv])
        ko, ki = sch.split(k_, factors=k_f)
        sch.reorder(wm_, wn_, ko, ki, fm_, fn_)
        bind_warp(sch, wm_, wn_)
        sch.annotate(s_outer, "warp_execution", 1)
        gemms.append((s_name, s_outer, s_inner, c_, ko, ki))

    _tensorize_and_pipeline(sch, gemms, bx, names, stages, wm_rv if resident_a else None, warps=(wm_rv, wn_rv))
    return sch


def _fetch(sch: tvm.s_tir.Schedule, blk, at, widths=(2, 4, 8), probs=(0.1, 0.3, 0.6), warps=None) -> None:
    """A global->shared copy at loop `at`, cooperatively fetched `vec` elements a thread (sampled from widths), rows
    padded against bank conflicts (both recompute forms). warps: (WM, WN) where the warps span threadIdx.y and .z
    (bind_warp), which Meta-Schedule's cooperative-fetch rewrite does not know (it binds .x and .y only, and every
    warp column would copy the whole tile): then bound here, else by that rewrite."""
    sch.compute_at(blk, at)
    fused = sch.fuse(*sch.get_loops(blk)[-2:])
    vec = sch.sample_categorical(candidates=list(widths), probs=list(probs))
    if warps is None:
        sch.annotate(blk, "meta_schedule.cooperative_fetch", vec)
    else:
        _, ty, tz, tx, v = sch.split(fused, factors=[None, *warps, 32, vec])
        bind_warp(sch, ty, tz)
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(v)
    sch.storage_align(blk, 0, axis=-2, factor=32, offset=8)


# ---------------------------------------------------------------------------------------------------------------------
# The two-sweep form (flashgemm.kernel.fused_gemm_softmax: recompute=True with chunk=CW, stat_cols=G); opt-in
# (flashgemm-tune --two-sweep-form / --forms). Why opt-in: at W3 fp16 on the H100 it is at best at parity with the
# three-sweep kernel (with two warp columns of 32; slower with one): a third less tensor-core work, but sweep 1's
# per-pair combine adds exps (ncu: a busier XU pipe) and its 120 registers leave 16 warps an SM.
def _gemm_at(sch: tvm.s_tir.Schedule, s_name: str, c_):
    """A GEMM block of S at chunk loop `c_`, its (i, j, k) loops split by 16 and the 16x16x16 inner block, which
    mma.sync matches, blockized. Returns (i, j, k, outer block, inner block) (both recompute forms)."""
    s_blk = sch.get_sblock(s_name)
    sch.compute_at(s_blk, c_, preserve_unit_loops=True)
    _, _, i_, j_, k_ = sch.get_loops(s_blk)[-5:]
    i_, i_tc = sch.split(i_, factors=[None, 16])
    j_, j_tc = sch.split(j_, factors=[None, 16])
    k_, k_tc = sch.split(k_, factors=[None, 16])
    sch.reorder(i_, j_, k_, i_tc, j_tc, k_tc)
    return i_, j_, k_, sch.blockize(i_tc), s_blk


def _tensorize_and_pipeline(sch: tvm.s_tir.Schedule, gemms: list, bx, names, stages: int, resident_wm=None,
                            warps=None) -> None:
    """The sweeps' GEMMs (name, outer block, inner block, chunk loop, ko, ki) on tensor cores, and each chunk loop
    software-pipelined (both recompute forms). resident_wm: the warp rows (WM) where A's fragments are loaded once a
    block (resident-A note), None where each k tile loads its own. warps: (WM, WN) of bind_warp (_fetch)."""
    # A [BM, K] once a block, read by every sweep. Plain scalar loads, not cp.async (it is outside the pipelined
    # loops): with the runtime form's symbolic batch strides TVM 0.27 cannot prove a vector load aligned and emits a
    # gather nvcc rejects (make_uint4 of 8 halves); the block amortizes it over its sweeps.
    outers = [g[1] for g in gemms]
    _fetch(sch, sch.cache_read(outers[0], 0, SMEM, consumer_blocks=outers), bx, widths=(1,), probs=(1.0,), warps=warps)
    a_res = None
    if resident_wm is not None:  # the warp's A fragments, [FM x 16, K], by ldmatrix once a block, before the sweeps
        a_res = sch.cache_read(outers[0], 0, "warp", consumer_blocks=outers)  # (placed after A's fetch, at bx)
        rows_, _ = sch.get_loops(a_res)[-2:]
        wm_, _ = sch.split(rows_, factors=[resident_wm, None])
        sch.bind(wm_, "threadIdx.y")
        sch.transform_layout(a_res, ("write", 0), cuda_space.mma_layout)
        sch.tensorize(cuda_space.tile_fragment(sch, a_res), names["load_a"])
    for s_name, s_blk, s_inner, c_, ko, ki in gemms:
        # (consumer_blocks: without it cache_read redirects every reader of the buffer, the other sweeps' too)
        _fetch(sch, sch.cache_read(s_blk, 1, SMEM, consumer_blocks=[s_blk]), c_, warps=warps)  # this chunk's B [CW, K]
        a_w = None if a_res is not None else sch.cache_read(s_blk, 0, "warp", consumer_blocks=[s_blk])
        b_w = sch.cache_read(s_blk, 1, "warp", consumer_blocks=[s_blk])
        if a_w is not None:
            sch.compute_at(a_w, ki)
        sch.compute_at(b_w, ki)
        sch.set_scope(s_blk, 0, "warp")  # the chunk of S is the accumulator: registers
        sch.decompose_reduction(s_blk, ko)
        loop_a = None if a_w is None else cuda_space.tile_fragment(sch, a_w)
        loop_b = cuda_space.tile_fragment(sch, b_w)
        cuda_space.tensorize_fragments(sch, a_w, b_w, (s_blk, ("write", 0)), loop_a, loop_b, s_inner,
                                       sch.get_sblock(s_name + "_init"), names)
    for producer in ("A_pad", "Bm_pad"):  # zero-filling: predicates of the global->shared copies
        sch.compute_inline(sch.get_sblock(producer))
    # software pipeline of each sweep's chunk loop: the next chunk's B (cp.async, stage 0) is fetched while this
    # chunk's GEMM and statistics (or P stores) run
    for _, _, _, c_, _, _ in gemms:
        n_stmt = sum(cuda_registers._pipeline_statements(st) for st in sch.get(c_).body.seq)
        sch.annotate(c_, "software_pipeline_stage", [0] + [stages - 1] * (n_stmt - 1))
        sch.annotate(c_, "software_pipeline_order", list(range(n_stmt)))
        sch.annotate(c_, "software_pipeline_async_stages", [0])


def is_two_sweep_form(sch: tvm.s_tir.Schedule) -> bool:
    return any(buf.name == "part_max" for buf in sch.mod["main"].body.block.alloc_buffers)


def _schedule2(sch: tvm.s_tir.Schedule, stages: int, resident_a: bool = False) -> tvm.s_tir.Schedule:
    """Sweep 1: S chunk on tensor cores -> the lane's (max, sum) of each of its column groups in the chunk, in
    registers -> the lane's running pairs (the online reducer, rfactor over the (group, quad lane) pairs); combine
    one thread a row; sweep 2: S_p chunk -> P, half2 stores. Warp columns: the kernel's column groups (stat_cols;
    WN = CW / G, FN = G / 16), so each warp's statistics are over its own fragments."""
    from flashgemm.tvm_ext import online_softmax  # noqa: PLC0415
    online_softmax.register()
    dtype = next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name == "A_pad")
    names = intrin_group(str(dtype), cuda_space._is_trans_b(sch), SMEM)
    part_buf = next(b for b in sch.mod["main"].body.block.alloc_buffers if b.name == "part_max")
    n_chunks, wn_n = int(part_buf.shape[3]), int(part_buf.shape[4]) // 4

    p_blk = sch.get_sblock("P")
    b0, b1, i, j = sch.get_loops(p_blk)
    fn_n = int(sch.get(j).extent) // n_chunks // wn_n // 16  # G / 16 fragments a warp
    i16, i_in = sch.split(i, factors=[None, 16])
    grp_rv, bmt_rv = sch.sample_perfect_tile(i16, n=2, max_innermost_factor=16)
    i_grp, i_bmt = sch.split(i16, factors=[grp_rv, bmt_rv])
    wm_rv, fm_rv = sch.sample_perfect_tile(i_bmt, n=2, max_innermost_factor=2)
    i = sch.fuse(i_grp, i_bmt, i_in)

    def rows(loop, outer=False):  # -> ([grp,] wm, ti, ih, il)
        return sch.split(loop, factors=([None] if outer else []) + [wm_rv, fm_rv, 2, 8])

    def iter_loops(block):
        return sch.get_loops(block)[-len(sch.get(block).iter_vars):]

    def all_threads(loop):
        _, ry_m, ry_n, rx = sch.split(loop, factors=[None, wm_rv, wn_n, 32])
        bind_warp(sch, ry_m, ry_n)
        sch.bind(rx, "threadIdx.x")

    def own_pairs(gq, i_):
        """A (group x quad lane, row) nest of the lanes' pairs -> bound like the fragments it reads; returns the
        row loop ih (the lane's rows below it)."""
        wn_, q_ = sch.split(gq, factors=[wn_n, 4])
        wm_, ti_, ih_, il_ = rows(i_)
        sch.reorder(wm_, wn_, il_, q_, ti_, ih_)
        bind_warp(sch, wm_, wn_)
        sch.bind(sch.fuse(il_, q_), "threadIdx.x")
        return ih_

    def stat_local(consumer, name, at):
        blk = sch.get(consumer)
        idx = next(q for q, r in enumerate(blk.reads) if r.source.name == name)
        sch.compute_at(sch.cache_read(consumer, idx, "local", consumer_blocks=[consumer]), at)

    # ---- P: blockIdx over (b0, b1, row group); the sweep-2 chunk loop; the lane's own fragment elements
    grp, wm_, ti_, ih_, il_ = rows(i, outer=True)
    c_p, wn_, fn_, jh_, jm_, jl_ = sch.split(j, factors=[n_chunks, wn_n, fn_n, 2, 4, 2])
    sch.reorder(grp, c_p, wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
    bx = sch.fuse(b0, b1, grp)
    sch.bind(bx, "blockIdx.x")
    bind_warp(sch, wm_, wn_)
    sch.bind(sch.fuse(il_, jm_), "threadIdx.x")
    stat_local(p_blk, "row_max", ih_)
    stat_local(p_blk, "row_sum", ih_)
    s_idx = next(q for q, r in enumerate(sch.get(p_blk).reads) if r.source.name == "S_p")
    sch.compute_at(sch.cache_read(p_blk, s_idx, "local", consumer_blocks=[p_blk]), jh_)  # see _schedule
    sch.vectorize(jl_)

    # ---- statistics: the online reducer rfactored over the pairs gq; its chunk loop the partial's reduction loop
    stats = sch.get_sblock("row_stats")
    _, _, _, c_s, gq_s = sch.get_loops(stats)
    rf = sch.rfactor(gq_s, factor_axis=3)
    sch.compute_at(stats, bx, preserve_unit_loops=True)
    sch.compute_at(rf, bx, preserve_unit_loops=True)
    for idx in (0, 1):
        sch.set_scope(rf, idx, SMEM)
    accs = [sch.cache_write(rf, idx, "local") for idx in (0, 1)]
    gq_, _, _, i_, c_ = iter_loops(rf)
    sch.reorder(c_, gq_, i_)
    own_pairs(gq_, i_)
    sweep1 = c_
    sch.decompose_reduction(rf, c_)
    for acc in accs:  # the write-back of the lane's pairs, by the owning lane
        _, _, i_, gq_ = sch.get_loops(acc)[-4:]
        sch.reorder(gq_, i_)
        own_pairs(gq_, i_)
    # the combine: one thread a row over the 4 x WN lane pairs
    red, _, _, i_ = iter_loops(stats)
    sch.reorder(i_, red)
    all_threads(i_)
    for idx in (0, 1):  # accumulate in registers, store once, with loops of its own (as in _schedule's combine)
        sch.set_scope(stats, idx, SMEM)
        all_threads(sch.get_loops(sch.cache_write(stats, idx, "local"))[-1])

    # ---- the lane's chunk (max, sum) of each of its groups: computed in sweep 1 from the fragments, in registers
    for name in ("part_sum", "part_max"):
        blk = sch.get_sblock(name)
        sch.compute_at(blk, sweep1, preserve_unit_loops=True)
        _, _, i_, _, gq_, r_, jl_ = iter_loops(blk)
        wn_, q_ = sch.split(gq_, factors=[wn_n, 4])
        wm_, ti_, ih_, il_ = rows(i_)
        sch.reorder(wm_, wn_, il_, q_, ti_, ih_, r_, jl_)
        bind_warp(sch, wm_, wn_)
        sch.bind(sch.fuse(il_, q_), "threadIdx.x")
        sch.set_scope(blk, 0, "local")
        sch.decompose_reduction(blk, r_)  # its init inside the sweep, not hoisted out of the pipelined loop

    # ---- the two GEMMs, each at its sweep's chunk loop: [WM, FM] x [WN, FN] fragments, k tiles
    k_f = None
    gemms = []
    for s_name, c_ in (("S", sweep1), ("S_p", c_p)):
        i_, j_, k_, s_outer, s_inner = _gemm_at(sch, s_name, c_)
        if k_f is None:
            k_f = sch.sample_perfect_tile(k_, n=2, max_innermost_factor=4)
        wm_, fm_ = sch.split(i_, factors=[wm_rv, fm_rv])
        wn_, fn_ = sch.split(j_, factors=[wn_n, fn_n])
        ko, ki = sch.split(k_, factors=k_f)
        sch.reorder(wm_, wn_, ko, ki, fm_, fn_)
        bind_warp(sch, wm_, wn_)
        sch.annotate(s_outer, "warp_execution", 1)
        gemms.append((s_name, s_outer, s_inner, c_, ko, ki))

    _tensorize_and_pipeline(sch, gemms, bx, names, stages, wm_rv if resident_a else None, warps=(wm_rv, wn_n))
    return sch
