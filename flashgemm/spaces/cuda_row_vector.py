"""Meta-Schedule design space of the one-row case (M = 1: decoding, one query over the keys) on CUDA.

With one row, S = A[1 x K] @ B is a matrix-vector product: every element of B is used once, so the op is
bound by reading B (decode-m1: 33.5 MB of B against 0.5 MB of P) and tensor cores have nothing to do (a
16-row mma tile would be 15/16 padding). The tensor-core space also cannot take M = 1 (TVM 0.27's
shared-memory merge fails on its candidates). So this space is a GEMV with the softmax fused behind it:

    blockIdx.x = (b0, b1, row)                         T = W x 32 threads (threadIdx.x)
    for column chunk (serial over Npad in chunks of V x T columns):
        acc[V] (fp32, registers) = 0
        transB (B is [N, K]):
            for k tile (BK = kb x kv), software-pipelined (2 or 4 stages):
                A's k tile and the chunk's B rows [V x T, BK] -> shared memory, kv-wide cp.async copies
                acc[v] += A[k] * B[column, k]     (from shared memory)
        else (B is [K, N]):
            A's row -> shared memory (read by every thread: a broadcast)
            for k: acc[v] += A[k] * B[k, column]   (straight from global memory: a warp's lanes read
                                                    consecutive columns, coalesced)
        acc -> S (fp32, shared memory, one row of Npad floats: S never leaves the chip)
    row max, sum of exp (cross-thread reductions over the T threads), P = exp(x - max) / sum written once,
    vectorized when N allows.

Column j = ((chunk x W + warp) x 32 + lane) x V + v: a thread's V columns are consecutive (strided columns
would make the per-thread accumulator regions bounding boxes of the whole chunk). N is padded to a multiple
of N_PAD = 256 = 32 lanes x the largest V, so that every split of the column loop is exact whatever V is
sampled (pad_einsum; B's padding becomes a predicate of its copy or of the product, never a padded copy of B
in memory; the padded S columns are never read by the softmax). K is split exactly (kv, a power of two
dividing K; sample_perfect_tile over K / kv): no K padding, and K = 1 works.

Why transB stages B through shared memory although nothing reuses it: the loads of a thread's own B rows
would be vectors straight from global memory, whose alignment depends on the symbolic batch strides of the
runtime kernel; TVM 0.27 then emits an element-wise gather that nvcc rejects for fp16 x 8. cp.async takes
the address as it is, and the pipeline keeps (stages - 1) k tiles of loads in flight. B [K, N] needs no
staging: its coalesced scalar loads across the lanes are already full-width transactions.

Sampled knobs: columns per thread V, warps W (1-16) and so the chunk count, the k tiling (kv and kb), the
unroll depth of the GEMV, the P store width; the pipeline depth as separate sketches.

Limit: one row of S must fit in shared memory (N up to ~56K on sm_90, ~40K on sm_80, ~24K on sm_89); longer
rows raise cuda_space.UnsupportedShapeError and the generic kernel serves them.
"""
from __future__ import annotations

import tvm

from flashgemm.spaces import cuda_space
from flashgemm.spaces.cuda_space import SMEM

N_PAD = 256          # 32 lanes x the largest V: every split of the column loop is exact
MAX_WARPS = 16       # threads per block <= 512
A_STATIC_MAX_K = 8192  # A's row (K halves) in static shared memory up to 16 KB
PIPELINE_STAGES = (2, 4)  # transB: k-tile pipeline depths, one sketch each (a GEMV wants loads in flight)


def applies(m: int) -> bool:
    """Whether a shape takes this space rather than the tensor-core one."""
    return m == 1


def kv_choices(k: int) -> list:
    """The k vector widths the space samples: powers of two dividing K (half vectors have 2, 4 or 8 lanes)."""
    return [c for c in (1, 2, 4, 8) if k % c == 0]


def check_shape(target_name: str, m: int, n: int, k: int) -> None:
    """Raise UnsupportedShapeError when one row of S and the smallest staging do not fit in shared memory."""
    npad = -(-n // N_PAD) * N_PAD
    need = npad * 4 + k * 2 + 1024  # S row + A's row (at most K halves) + the statistics
    limit = cuda_space.SMEM_LIMIT[target_name]
    if need > limit:
        raise cuda_space.UnsupportedShapeError(
            f"M=1 with N={n}: one row of S needs {need} bytes of shared memory, the {target_name} limit is {limit}; "
            f"the generic kernel serves it")


def _fuse_below(sch, blk, loop):
    """Fuse the loops of `blk` under `loop` (where it was computed at) into one."""
    loops = sch.get_loops(blk)
    at = next(x for x, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(loop)))
    return sch.fuse(*loops[at + 1:])


def schedule(sch: tvm.s_tir.Schedule, target_name: str, stage_options=PIPELINE_STAGES) -> list:
    """The space's sketches: one for B [K, N], one per pipeline depth for B [N, K]."""
    func = sch.mod["main"]
    _b0, _b1, m, n, k = cuda_space._sizes(func)
    check_shape(target_name, m, n, k)
    trans_b = cuda_space._is_trans_b(sch)

    s_blk = sch.get_sblock("S")
    pad_b = bool(n % N_PAD)
    if pad_b:
        sch.pad_einsum(s_blk, [1, 1, 1, N_PAD, 1])
        sch.compute_inline(sch.get_sblock("S_pad"))  # the softmax blocks read the padded S row
    sch.compute_inline(sch.get_sblock("exp"))

    # ---- the GEMV: column j = ((chunk * W + warp) * 32 + lane) * V + v, V consecutive columns a thread
    b0, b1, i, j, kk = sch.get_loops(s_blk)
    ja, jv = sch.split(j, factors=sch.sample_perfect_tile(j, n=2, max_innermost_factor=8))  # V: 1..8
    jb, lane = sch.split(ja, factors=[None, 32])             # exact: N_PAD / 32 is a multiple of 8
    w_f = sch.sample_perfect_tile(jb, n=2, max_innermost_factor=MAX_WARPS)  # [chunks, warps W]
    jo, jw = sch.split(jb, factors=w_f)
    kvs = kv_choices(k)  # B's (and A's) copy vector width on the transB path
    kv_f = sch.sample_categorical(candidates=kvs, probs=[1.0 / len(kvs)] * len(kvs))
    kk, kv = sch.split(kk, factors=[None, kv_f])
    kb_f = sch.sample_perfect_tile(kk, n=2, max_innermost_factor=8)  # [k tiles, kv vectors a tile]
    ko, kb = sch.split(kk, factors=kb_f)
    sch.reorder(b0, b1, i, jo, jw, lane, ko, kb, kv, jv)
    bx = sch.fuse(b0, b1, i)
    sch.bind(bx, "blockIdx.x")
    tx = sch.fuse(jw, lane)
    sch.bind(tx, "threadIdx.x")
    for name in ("row_max", "row_sum", "P"):
        sch.reverse_compute_at(sch.get_sblock(name), bx)

    if trans_b:
        # B [.., N, K]: per k tile, A's k tile and the chunk's B rows [V x T, BK] go to shared memory by
        # kv-wide cp.async copies, software-pipelined (the copies of tile t + stages - 1 in flight while tile t
        # is multiplied). (Vector loads straight from global memory are not possible here: their alignment
        # depends on the symbolic batch strides, and TVM 0.27 then emits an element-wise gather that nvcc
        # rejects for fp16 x 8; cp.async takes the address as it is.)
        def fetch(idx, producer, scope):
            blk = sch.cache_read(s_blk, idx, scope)
            sch.compute_at(blk, ko, preserve_unit_loops=True)
            if producer is not None:  # B's zero padding becomes the copy's predicate
                sch.compute_inline(producer)
            return blk, _fuse_below(sch, blk, ko)

        # A's k tile (BK = kb x kv elements): kb threads, one kv vector each. (A cooperative fetch would
        # spread it over all T threads under a per-lane predicate, which the cp.async rewrite rejects.)
        # In static shared memory (at most 64 halves): as a one-element "shared.dyn" buffer (BK = 1) TVM 0.27's
        # MergeSharedMemoryAllocations loses its offset and the build fails ("buffer_byte_offsets").
        _, a_loop = fetch(0, None, "shared")
        a_t, a_v = sch.split(a_loop, factors=[None, kv_f])
        sch.vectorize(a_v)
        _, a_w, a_l = sch.split(a_t, factors=[None, w_f[1], 32])  # the block's T threads, the first kb busy
        sch.bind(sch.fuse(a_w, a_l), "threadIdx.x")
        # B's [V x T rows, BK] tile: exactly V x kb kv-vectors a thread (kv | BK: no vector straddles a row)
        b_sh, _ = fetch(1, sch.get_sblock("Bm_pad") if pad_b else None, SMEM)
        sch.annotate(b_sh, "meta_schedule.cooperative_fetch", kv_f)
        # Rows padded to 8 (mod 16) halves: 16-byte aligned for the cp.async copies, and the lanes' reads of
        # rows V apart spread over 8 banks instead of 2-4. The product reads B's tile from shared memory
        # element by element: a kv-vector read into registers would make TVM 0.27's StorageRewrite retype
        # the tile as a buffer of vectors, which its cp.async rewrite then rejects. (ptxas merges those element
        # loads itself; for bf16 only because cuda_build converts bf16 to fp32 by a bit shift.)
        sch.storage_align(b_sh, 0, axis=-2, factor=16, offset=8)
    else:
        # B [.., K, N]: the lanes read consecutive columns straight from global memory (coalesced; scalar
        # loads, whose alignment nothing needs); the padded columns as a predicate in the product, never a
        # padded copy of B. A's row once per chunk to shared memory (scalar copies: every thread then reads
        # the same element, a broadcast). In static shared memory while it is small: TVM 0.27's
        # MergeSharedMemoryAllocations loses the offset of a one-element "shared.dyn" buffer (K = 1).
        if pad_b:
            sch.compute_inline(sch.get_sblock("Bm_pad"))
        a_sh = sch.cache_read(s_blk, 0, "shared" if k <= A_STATIC_MAX_K else SMEM)
        sch.compute_at(a_sh, jo, preserve_unit_loops=True)
        _fuse_below(sch, a_sh, jo)
        sch.annotate(a_sh, "meta_schedule.cooperative_fetch", tvm.tirx.IntImm("int32", 1))

    # accumulators in registers, the finished row of S in shared memory
    acc = sch.cache_write(s_blk, 0, "local")
    sch.reverse_compute_at(acc, tx, preserve_unit_loops=True)
    sch.set_scope(acc, 0, SMEM)
    sch.decompose_reduction(s_blk, ko)
    u = sch.sample_categorical(candidates=[0, 16, 64, 512], probs=[0.25] * 4)
    sch.annotate(tx, "pragma_auto_unroll_max_step", u)
    sch.annotate(tx, "pragma_unroll_explicit", 1)

    # ---- softmax of the row from shared memory, the block's threads over the columns
    # The statistics in static shared memory: as single floats in "shared.dyn", TVM 0.27's
    # MergeSharedMemoryAllocations loses their offsets ("buffer_byte_offsets") and the build fails.
    sch.set_scope(sch.get_sblock("row_max"), 0, "shared")
    sch.set_scope(sch.get_sblock("row_sum"), 0, "shared")
    w_rv = w_f[1]

    def over_threads(name, vec=None):
        blk = sch.get_sblock(name)
        c = sch.get_loops(blk)[-1]
        if vec is None:
            _, cw, cl = sch.split(c, factors=[None, w_rv, 32])
        else:
            _, cw, cl, cv = sch.split(c, factors=[None, w_rv, 32, vec])
            if n % 4 == 0:  # rows start vector-aligned only when N % pv == 0 (else scalar stores)
                sch.vectorize(cv)
        sch.bind(sch.fuse(cw, cl), "threadIdx.x")

    over_threads("row_max")
    over_threads("row_sum")
    pv = sch.sample_categorical(candidates=[1, 2, 4], probs=[0.2, 0.3, 0.5])
    over_threads("P", pv)
    if not trans_b:
        return [sch]
    return cuda_space.pipeline_sketches(sch, ko, stage_options)
