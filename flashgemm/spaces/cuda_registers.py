"""Register-resident sketches of the fused op on tensor cores: S never leaves the mma accumulators.

The row-resident sketches of cuda_space store every 16x16 accumulator into an fp32 S tile in shared
memory and run the softmax from there (one write and three reads of S through shared memory). These
sketches keep S where mma.sync leaves it, in registers, and run the softmax on the fragments:

    blockIdx.x = (b0, b1, group of RT row tiles)       warps = WM (rows) x WN (columns), 32 lanes
    [B resident: B [N, K] (all of it) -> shared memory once per block, reused by its RT row tiles]
    for each of the RT row tiles of BM = WM*FM*16 rows:
        A tile (and B k-tile when not resident) -> shared memory, cp.async multi-stage over K
        S (fp32, FM x FN fragments per warp, "warp" scope = registers) = mma.sync m16n8k16
        row max:  per lane over its fragments -> shared [BM, WN*4] -> one thread a row combines
        row sum:  exp(logit - max) per lane ... the same two steps
        P = exp(logit - max) / sum from the fragments, half2 stores straight to global memory
    After LowerWarpMemory two rewrites of the compile pipeline change the last two steps (cuda_build): the row sum
    keeps exp(logit - max) in the accumulator and P reads it back (keep_exp_in_accumulator), and P's stores become whole
    32-byte sectors through a quad shuffle (store_whole_sectors). Together they make W1 ~1.4x faster on the H100.

Why it is written with rfactor. A fragment row is spread over the 4 lanes of a quad and over the WN
warps of a row. TIR cannot bind one loop to both a row (spatial) and a quad lane (reduction), so each
statistic is rfactor-ed over (warp column, quad lane): the partial block is spatial in those and
reduces only over the lane's own fragment elements (registers), the combine block reduces the
WN*4 partials of a row from shared memory. The accumulator layout (transform_layout with the ldmatrix
32x8 map) makes the lane of every element the loop bound to threadIdx.x, so LowerWarpMemory turns S
into plain registers (no shuffles).

Each phase is placed under the row-tile loop and split by the same (warp, lane) ownership as the GEMM,
in loops of its own bound to threadIdx.y/x; TVM's LiftThreadBinding merges them, so the accumulator
allocation ends up inside threadIdx.y and compacts to one warp's fragments. Thread loops always have
the block's full extents: TVM 0.27 puts no predicate on a thread loop shorter than its launch extent.

Limits: M a multiple of 16 and N a multiple of 64 as the module's S block iterates. Other M, N take the kernel's padded
form (padded_sizes; kernel_forms.forms): padding inside the schedule does not work, the statistics would need
predicated partials whose placement TVM derives wrongly from an unpadded producer, while the padded form's blocks all
iterate over the padded extents, so only P's stores carry a guard. N <= 2048 (registers; rows wider than WIDE_N take one
warp row a block); no bias or mask (`serves`: as shipped, with symbolic strides, their element-wise reads make these
sketches slower than the shared-memory ones). Other shapes and variants use the shared-memory sketches only.
Sampled knobs: row tiles [groups, RT, WM, FM <= 2] and column tiles [WN, FN <= 8] (sample_perfect_tile; at most
128 fp32 accumulators a thread), K tiles,
A/B fetch vector widths; sketches (FORMS): B resident (RT row tiles a block) or B streamed with A over K (RT=1),
each with 2 or 3 pipeline stages over K; and "row-pipelined": B resident, A fetched a whole row tile (all of K) at a
time and the row-tile loop software-pipelined instead of the K loop, so the next row tile's cp.async overlaps this
one's GEMM and softmax. Why: at K = 64 there is one K tile, so the K pipeline hides nothing; a W1 kernel without
it waits on A at the start of each of its 8 row tiles with 2 blocks an SM (ncu: long-scoreboard stalls).
"""
from __future__ import annotations

import tvm

from flashgemm.spaces import cuda_space
from flashgemm.spaces.cuda_space import PIPELINE_STAGES, SMEM
from flashgemm.tvm_ext.tensor_intrin import intrin_group

# the resident B copy's vector widths (elements) and their probabilities; older records had only 1
# (vectorized_b_fetch re-expresses them)
B_FETCH_WIDTHS, B_FETCH_PROBS = (1, 2, 4, 8), (0.1, 0.1, 0.2, 0.6)
MAX_N = 2048  # FM*FN*8 fp32 accumulators a thread: beyond this every tiling spills registers
WIDE_N = 1024  # rows wider than this: one warp row a block (see _schedule)


def applies(m: int, n: int, k: int) -> bool:
    """Whether the register sketches serve this (M, N, K) (module doc: limits)."""
    return m > 1 and m % 16 == 0 and n % 64 == 0 and n <= MAX_N


def padded_sizes(target_name: str, variant, m: int, n: int, k: int):
    """(Mp, Np, Kp) of the kernel's padded form (flashgemm.kernel.fused_gemm_softmax: pad=) for a shape these sketches
    do not serve as it is, or None. The padded form iterates over Mp x Np x Kp with zero-filled A/B, -inf logits in the
    padded columns and guarded P stores, so every split here is perfect (the W2/W3 shapes: 197, 1500). Np is a multiple
    of 64; Mp of 64, else 32, when that pads at most 15 % of the rows (more factors for the row tiles: 1500 -> 1536,
    197 -> 224), else of 16; Kp of 16. None for: shapes already served, M < 16 (decoding: the row-vector space), a bias
    or mask (their reads would need the same guards), Np > MAX_N, or an Np whose smallest B-streamed stage does not fit
    the arch's shared memory (sm_89 at N = 1500)."""
    if m < 16 or applies(m, n, k) or variant.has_bias or variant.mask != "none":
        return None
    def up(x, q):
        return -(-x // q) * q
    mp = next((up(m, q) for q in (64, 32) if up(m, q) - m <= 0.15 * m), up(m, 16))
    np_, kp = up(n, 64), up(k, 16)
    if np_ > MAX_N or np_ * (16 + 8) * 2 * 2 + 16 * 1024 > cuda_space.SMEM_LIMIT[target_name]:
        return None
    return mp, np_, kp


def is_padded_form(sch: tvm.s_tir.Schedule) -> bool:
    """Whether this module is the kernel's padded form (it alone has a zero-filled A copy before scheduling)."""
    return _has_block(sch, "A_pad")


def serves(sch: tvm.s_tir.Schedule) -> bool:
    """Whether the register sketches serve this module: the shape (applies) and a variant that reads no bias or
    mask. Each logit is computed three times (max, sum, P) from the fragments, and a bias/mask element is read
    where its fragment lives: 2-byte loads spread over 8 rows a warp instruction. With the runtime form's symbolic
    bias strides that makes BERT's padding-mask site far slower as shipped than in the (static-stride) tuning form
    that Meta-Schedule measures, and slower than with S in shared memory: the tuner would pick a kernel that is
    slower as shipped."""
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    reads = {r.source.name for r in sch.get(sch.get_sblock("row_max")).reads}
    return applies(m, n, k) and not reads & {"Bias", "Mask"}


FORMS = ("b-resident", "b-streamed", "row-pipelined")


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=PIPELINE_STAGES, forms=FORMS) -> list:
    """The register sketches for this module: B resident and B streamed, each pipelined over K with every depth of
    stage_options, and B resident with the row tiles pipelined (module doc)."""
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    if not serves(sch):
        raise cuda_space.UnsupportedShapeError(f"no register-resident sketch for M={m}, N={n} or a variant with a "
                                               f"bias or mask (module doc, serves)")
    out = []
    for form in forms:
        if form == "row-pipelined":
            out.append(_schedule(sch.copy(), 2, True, row_pipeline=True))
        else:
            out += [_schedule(sch.copy(), stages, form == "b-resident") for stages in stage_options]
    return out


def vectorized_b_fetch(trace):
    """A register-sketch record tuned when the resident B copy was scalar, re-expressed with that copy 8 elements wide:
    its trace's JSON up to the postprocessors, the copy's sample given today's widths and the widest chosen (the
    postprocessors, applied again, then split and vectorize it); None for any other record (a streamed or zero-filled B
    has no such sample; the recompute form's scalar copy is of A). Why: the search only mutates a record's own
    decisions, and an old record's sample offers only width 1 (flashgemm.tune.tuner.tune's migrate_records measures
    these)."""
    insts, decisions = trace.as_json()
    end = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
    # the block each CacheRead made -> the index of the operand it copies (1: B, as fetch(1, ...) below)
    operand = {x[3][0]: int(x[2][0]) for x in insts[:end] if x[0] == "CacheRead"}
    scalar = [i for i, inst in enumerate(insts[:end]) if inst[0] == "SampleCategorical"
              and [int(c) for c in inst[2][0]] == [1] and len(inst[2][1]) == 1
              and any(x[0] == "Annotate" and x[1][1] == inst[3][0] and x[2] == ["meta_schedule.cooperative_fetch"]
                      and operand.get(x[1][0]) == 1 for x in insts[i + 1:end])]
    if len(scalar) != 1:
        return None
    at = scalar[0]
    insts = [list(inst) for inst in insts[:end]]
    insts[at] = [insts[at][0], insts[at][1], [list(B_FETCH_WIDTHS), list(B_FETCH_PROBS)], insts[at][3]]
    widest = len(B_FETCH_WIDTHS) - 1
    return [insts, [[i, widest if i == at else d] for i, d in decisions if i < end]]


def _has_block(sch: tvm.s_tir.Schedule, name: str) -> bool:
    """Whether the module has the zero-filled copy `name` (its buffer, at the root, has the block's name): a query
    of the IR, so no instruction enters the trace."""
    return any(buf.name == name for buf in sch.mod["main"].body.block.alloc_buffers)


def _pipeline_statements(stmt) -> int:
    """How many statements one statement of a loop body is when InjectSoftwarePipeline sees it: LiftThreadBinding
    has removed the thread-bound loops by then, so the statements of a thread loop's body count one by one."""
    while isinstance(stmt, tvm.tirx.For) and stmt.thread_binding is not None:
        if isinstance(stmt.body, tvm.tirx.SeqStmt):
            return sum(_pipeline_statements(st) for st in stmt.body.seq)
        stmt = stmt.body
    return 1


def _schedule(sch: tvm.s_tir.Schedule, stages: int, resident_b: bool, row_pipeline: bool = False) -> tvm.s_tir.Schedule:
    _, _, m, n, k = cuda_space._sizes(sch.mod["main"])
    dtype = next(r.source.dtype for r in sch.get(sch.get_sblock("S")).reads if r.source.name in ("A", "A_pad"))
    names = intrin_group(str(dtype), cuda_space._is_trans_b(sch), SMEM)
    s_blk = sch.get_sblock("S")
    # K padded to 16 (zero-filled A/B tiles) here; the kernel's padded form (padded_sizes) comes with
    # zero-filled A_pad / Bm_pad blocks of its own, and either way the global->shared copies inline them
    if k % 16:
        sch.pad_einsum(s_blk, [1, 1, 16, 16, 16])
    zero_filled = _has_block(sch, "A_pad")
    sch.compute_inline(sch.get_sblock("exp"))  # exp(logit - max) recomputed by the sum and by P (no E buffer)

    # ---- GEMM tiling: row tiles [groups, RT, WM, FM], column tiles [WN, FN], k tiles [KO, KI]
    b0, b1, i, j, kk, s_outer, s_inner = cuda_space.mma_tiles(sch, s_blk)
    # FM <= 2 and FN <= 8 fragments a warp: at most 128 fp32 accumulators a thread (more spills registers)
    if n > WIDE_N:
        # wide rows: one warp row (WM = 1; the N fragments need WN >= Np/256 warps, so a second warp row would pass
        # 1024 threads or starve the accumulators of registers), up to 16 fragments a warp
        i_f = sch.sample_perfect_tile(i, n=3 if resident_b else 2, max_innermost_factor=2)
        i_f = [*i_f[:-1], 1, i_f[-1]]
    else:
        i_f = sch.sample_perfect_tile(i, n=4 if resident_b else 3, max_innermost_factor=2)
    if resident_b:
        grp, rt, wm, fm = sch.split(i, factors=i_f)
    else:
        (grp, wm, fm), rt = sch.split(i, factors=i_f), None
    wm_rv, fm_rv = i_f[-2:]
    j_f = sch.sample_perfect_tile(j, n=2, max_innermost_factor=16 if n > WIDE_N else 8)      # [WN, FN]
    k_f = sch.sample_perfect_tile(kk, n=2, max_innermost_factor=4)     # [KO, KI]
    wn, fn = sch.split(j, factors=j_f)
    ko, ki = sch.split(kk, factors=k_f)
    if rt is not None:
        sch.reorder(b0, b1, grp, rt, wm, wn, ko, ki, fm, fn)
    else:
        sch.reorder(b0, b1, grp, wm, wn, ko, ki, fm, fn)
    bx = sch.fuse(b0, b1, grp)
    sch.bind(bx, "blockIdx.x")
    sch.bind(sch.fuse(wm, wn), "threadIdx.y")
    sch.annotate(s_outer, "warp_execution", 1)
    tile = rt if rt is not None else bx  # every softmax phase of one row tile sits under this loop
    wn_rv, fn_rv = j_f

    def fetch(idx, at, producer, widths=(2, 4, 8), probs=(0.1, 0.3, 0.6)):
        blk = sch.cache_read(s_outer, idx, SMEM)
        sch.compute_at(blk, at)
        if producer is not None:  # zero-padding of K: a predicate of the global->shared copy
            sch.compute_inline(producer)
        sch.fuse(*sch.get_loops(blk)[-2:])
        vec = sch.sample_categorical(candidates=list(widths), probs=list(probs))
        sch.annotate(blk, "meta_schedule.cooperative_fetch", vec)
        sch.storage_align(blk, 0, axis=-2, factor=32, offset=8)
    fetch(0, rt if row_pipeline else ko, sch.get_sblock("A_pad") if zero_filled else None)
    if resident_b:
        # B once a block, outside the pipelined k loop. Vectorized, it becomes cp.async in the compile pipeline
        # (flashgemm/codegen/tir/make_copies_async: TVM 0.27 cannot prove a plain vector load aligned with the runtime
        # forms' symbolic batch strides). A zero-filled B (padded K or form) is a predicated load the pass leaves alone:
        # scalar.
        widths, probs = (B_FETCH_WIDTHS, B_FETCH_PROBS) if not zero_filled and k % 16 == 0 else ((1,), (1.0,))
        fetch(1, bx, sch.get_sblock("Bm_pad") if zero_filled else None, widths=widths, probs=probs)
    else:
        fetch(1, ko, sch.get_sblock("Bm_pad") if zero_filled else None)
    a_w = sch.cache_read(s_outer, 0, "warp")
    b_w = sch.cache_read(s_outer, 1, "warp")
    sch.compute_at(a_w, ki)
    sch.compute_at(b_w, ki)
    sch.set_scope(s_outer, 0, "warp")  # S itself is the accumulator: registers, never shared memory
    sch.decompose_reduction(s_outer, ko)
    init_inner = sch.get_sblock("S_init")

    loop_a, loop_b = cuda_space.tile_fragment(sch, a_w), cuda_space.tile_fragment(sch, b_w)

    def iter_loops(block):
        """The loops of a block moved with preserve_unit_loops: one a block iterator, in the iterators' order."""
        return sch.get_loops(block)[-len(sch.get(block).iter_vars):]

    def rows(loop):  # a row loop of the tile -> (wm, ti, ih, il): the accumulator's row structure
        return sch.split(loop, factors=[wm_rv, fm_rv, 2, 8])

    def cols(loop):  # a column loop -> (wn, fn, jh, jm, jl): jm is the lane within a quad
        return sch.split(loop, factors=[wn_rv, fn_rv, 2, 4, 2])

    def own(block):
        """Split a (row, column) block like the accumulators it reads: (ty, tx, ti, ih, fn, jh, jl)."""
        i_, j_ = iter_loops(block)[-2:]
        wm_, ti_, ih_, il_ = rows(i_)
        wn_, fn_, jh_, jm_, jl_ = cols(j_)
        sch.reorder(wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
        sch.bind(sch.fuse(wm_, wn_), "threadIdx.y")
        sch.bind(sch.fuse(il_, jm_), "threadIdx.x")
        return ih_, jl_

    def all_threads(loop):
        """A row loop over every thread of the block, full thread extents (module doc)."""
        _, ry_m, ry_n, rx = sch.split(loop, factors=[None, wm_rv, wn_rv, 32])
        sch.bind(sch.fuse(ry_m, ry_n), "threadIdx.y")
        sch.bind(rx, "threadIdx.x")

    def row_stat_local(consumer, name, at):
        blk = sch.get(consumer)
        idx = next(q for q, r in enumerate(blk.reads)  # the statistic (renamed by set_scope), not its partials
                   if r.source.name.startswith(name) and "_rf" not in r.source.name)
        sch.compute_at(sch.cache_read(consumer, idx, "local", consumer_blocks=[consumer]), at)

    # ---- statistics: rfactor over (warp column, quad lane) at the root, then everything under the tile
    partial = {}
    for name in ("row_max", "row_sum"):
        blk = sch.get_sblock(name)
        wn_, fn_, jh_, jm_, jl_ = cols(sch.get_loops(blk)[-1])
        sch.reorder(wn_, jm_, fn_, jh_, jl_)
        partial[name] = sch.rfactor(sch.fuse(wn_, jm_), factor_axis=3)
    for blk in (partial["row_max"], sch.get_sblock("row_max"), partial["row_sum"], sch.get_sblock("row_sum"),
                sch.get_sblock("P")):
        sch.reverse_compute_at(blk, tile, preserve_unit_loops=True)  # keep every split loop, unit ones too
    for name in ("row_max", "row_sum"):
        rf, blk = partial[name], sch.get_sblock(name)
        wq, _, _, i_, fn_, jh_, jl_ = iter_loops(rf)  # (warp column x lane, b0, b1, row, fn, jh, jl)
        wn_, jm_ = sch.split(wq, factors=[wn_rv, 4])
        wm_, ti_, ih_, il_ = rows(i_)
        sch.reorder(wm_, wn_, il_, jm_, ti_, ih_, fn_, jh_, jl_)
        sch.bind(sch.fuse(wm_, wn_), "threadIdx.y")
        sch.bind(sch.fuse(il_, jm_), "threadIdx.x")
        sch.set_scope(rf, 0, SMEM)
        acc = sch.cache_write(rf, 0, "local")  # the lane's partial accumulates in a register
        sch.reverse_compute_at(acc, ih_)
        sch.storage_align(acc, 0, axis=-2, factor=32, offset=1)  # the combine reads a row a lane: no conflicts
        if name == "row_sum":
            row_stat_local(rf, "row_max", ih_)
        red, _, _, i_ = iter_loops(blk)  # (partials, b0, b1, row)
        sch.reorder(i_, red)
        all_threads(i_)
        sch.set_scope(blk, 0, SMEM)
        # The combine accumulates in a register and stores once. Its store keeps loops of its own (cache_write
        # puts them under the tile loop), split like the combine's: under the combine's thread loop TVM 0.27
        # would bound the store by the buffer instead of the split's predicate and write past the block's rows.
        all_threads(sch.get_loops(sch.cache_write(blk, 0, "local"))[-1])

    p_blk = sch.get_sblock("P")
    ih_, jl_ = own(p_blk)
    row_stat_local(p_blk, "row_max", ih_)
    row_stat_local(p_blk, "row_sum", ih_)
    sch.vectorize(jl_)  # half2 stores (N is even)

    # ---- fragments: layouts, then tensor cores
    cuda_space.tensorize_fragments(sch, a_w, b_w, (s_outer, ("write", 0)), loop_a, loop_b, s_inner, init_inner,
                                   names)
    if row_pipeline:
        # the next row tile's A (cp.async, stage 0) is fetched while this one's GEMM and softmax run (stage 1)
        n_stmt = sum(_pipeline_statements(st) for st in sch.get(rt).body.seq)
        sch.annotate(rt, "software_pipeline_stage", [0] + [stages - 1] * (n_stmt - 1))
        sch.annotate(rt, "software_pipeline_order", list(range(n_stmt)))
        sch.annotate(rt, "software_pipeline_async_stages", [0])
        return sch
    # software pipeline over the k tiles: [A->shared, (B->shared,) ldmatrix+mma], the copies cp.async
    n_stmt = 2 if resident_b else 3
    sch.annotate(ko, "software_pipeline_stage", [0] * (n_stmt - 1) + [stages - 1])
    sch.annotate(ko, "software_pipeline_order", list(range(n_stmt)))
    sch.annotate(ko, "software_pipeline_async_stages", [0])
    return sch

