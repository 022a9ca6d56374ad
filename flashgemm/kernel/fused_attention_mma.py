"""FusedAttention's tiled tensor-core kernel for CUDA (sm_80 and later): FlashAttention-2's design in TensorIR.

O = softmax_rowwise(scale * Q @ K + bias + mask) @ V with the contract of flashgemm/kernel/fused_attention.py, written
with its thread bindings (a schedule of the online form cannot bind a tile's rows to threads: the running
statistics have no compact dataflow), the tensor-core steps as PTX intrinsics (ldmatrix, mma.sync m16n8k16,
cp.async):

    blockIdx.x = tiles of BM = 16 MT WARPS rows (causal: the longest first), y = heads (B1), z = batch (B0);
    threadIdx.y = warp, x = lane
    Q tile -> shared (cp.async) -> A fragments in registers, kept for the whole row tile
    for each chunk of BN columns (causal: up to the tile's last visible column), `stages` shared buffers:
        K and V chunks -> shared by cp.async, the next chunk's copies in flight during this chunk's math
        S = Q K^T: mma.sync, B fragments by ldmatrix (K as [N, D]: plain; as [D, N]: .trans)
        the logits in registers, log2-scaled, with the bias and mask, bounded (past N, across the diagonal)
        only in a chunk that may cross either (a bias and mask of one row, a padding mask [B, 1, 1, N], read a
        thread's columns once for its 2 MT rows, in a chunk loop of its own behind a uniform branch); row max
        across the quad (lanes 4g..4g+3 hold row g's columns) by shuffles; running max m, thread-partial
        running sum l, O rescaled by exp2(m_old - m_new)
        P = exp2(logit - m) cast to the input type in registers: the S accumulator's layout is the A fragment's
        O += P V: mma.sync, B fragments by ldmatrix.trans of V's [BN, D] chunk
    O = O / (l summed over the quad); a zero row (fully masked, l = 0, or NaN with zero_nan_rows) 0 * V

Causal tiles skip the chunks past their diagonal, where the unfused graph's 0 * V is still NaN for a NaN or inf in V:
a first kernel of the same function ("V_last") records, per band of V's rows, 1 + the last row of each column that
holds one, and a tile makes O's column NaN when that row is past its last chunk. V is read
once more for it, in 16-byte copies (19 us of the causal prefill shape's 430-660: BENCHMARKS.md), instead of once a
tile.

Fragment layouts (mma.m16n8k16, lane = 4 g + t): the accumulator's register r holds row g + 8 (r / 2), column
2 t + r % 2 of its 16 x 8 tile. Shared rows are padded by 8 elements (16 bytes), so that the 8 rows an ldmatrix
reads fall in distinct bank groups.

Special values as the definition: exp2 of the logit's log2-scaled distance to the running max (a NaN or +inf
logit makes the row's sum NaN, so its O is NaN); the running max starts at float32's lowest, so a fully masked
row's probabilities are 0, never NaN, and its accumulator sums 0 * V: 0, or NaN where V's column holds a NaN or
inf (zero_or_o). With zero_nan_rows a NaN row's probabilities go to P V as 0 (l stays NaN) and it is stored as a
fully masked one. Rows past M and columns past N read row M - 1 and column N - 1 (clamped
addresses) and are masked (-inf) or not stored.

Requirements (the bundle entry records them; dispatch checks them): every pointer 16-byte aligned, K (the head
size) = D in HEAD_SIZES; with K as [D, N] (trans_b = 0), N % 8 = 0 (16-byte chunks of K's rows).

The split-N form (runtime_func's split; flash-decoding) serves calls of few query rows, a decoder's generation step,
whose B x H blocks would leave most SMs idle: blockIdx.x also splits the tile's chunks, each split writes its rows'
partial O, running max and sum to a workspace, and a second kernel combines them (SPLIT_TILES: one warp of 16 rows).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import tvm
from tvm.script import tirx as T

from flashgemm.kernel.fused_attention import zero_or_o
from flashgemm.op.variant import (ATTENTION_HEAD_SIZES, ATTENTION_N_MULTIPLE_KN, BOOL_MASK_KINDS, FILL_LOGIT,
                                  MASKED_AT_OR_BELOW, Variant)

HEAD_SIZES = ATTENTION_HEAD_SIZES
# the tile each head size ships with (warps, mt, bn, stages): the fastest of the measured sweep at W1-W3 (d = 64) and
# the causal prefill shape (d = 128): results/h200/attention-mma-2026-12-02
TILES = {32: (4, 2, 64, 2), 64: (4, 2, 64, 2), 80: (4, 1, 64, 2), 96: (4, 1, 64, 2), 128: (4, 1, 32, 2)}
# the split-N form's tile (runtime_func's split), every head size: one warp of one 16-row tile, so that a call of one
# query row (a decoder's step) wastes the least of each chunk's mma work
SPLIT_TILES = {d: (1, 1, 64, 2) for d in HEAD_SIZES}
ALIGN = 16  # bytes: every pointer (cp.async copies 16-byte chunks)
LOG2E = 1.4426950408889634
LOWEST = -3.4028234663852886e38
PAD = 8  # elements of padding after each shared row
# causal: V's non-finite values past a tile's diagonal are found by a first kernel, in V_SPLITS bands of rows a head
# (a block of V_THREADS threads a band, V_BATCH rows a thread in flight)
V_SPLITS, V_THREADS, V_BATCH = 16, 256, 4


def _strides(name: str, n: int):
    return tuple(tvm.tirx.Var(f"{name}_s{i}", "int32") for i in range(n))


def n_multiple(variant: Variant) -> int:
    """N must be a multiple of this: K as [D, N] is copied in 16-byte chunks of its rows."""
    return 1 if variant.trans_b else ATTENTION_N_MULTIPLE_KN


def Parts(variant: Variant, D: int, BN: int, NT: int, mt: int, B0, B1, M, N,
          fetched: str = "", bound_edges_only: bool = False) -> SimpleNamespace:
    """What the tensor-core kernels (this one, fused_attention_wgmma's and fused_gemm_softmax_wgmma's) share, for
    head size D, chunks of BN columns, NT threads and mt 16-row tiles a warp (all keep S and O in mma.sync's m16n8
    accumulator layout): logit masking, the online softmax over a chunk, the causal V_last pass and O's epilogue.
    fetched: where the logits read Bias and Mask. "" in place, element by element; "elements": the kernel fetched a
    chunk's into registers (fetch_bias_mask, a thread's elements in S's accumulator order) while its S was computed,
    so that the loads' latency leaves each chunk's serial chain; "columns": Bias and Mask are one row broadcast (a
    padding mask [B, 1, 1, N]: row stride 0, see one_row), and the kernel fetched a thread's columns of the chunk
    once for all its rows (fetch_columns): 2 NTS values where "elements" reads 4 mt NTS.
    bound_edges_only: with a bias or mask, only the chunks that may cross N or the diagonal test each column against
    them (the others skip two instructions an element, for one more unrolled copy of the logits: registers)."""
    if fetched not in ("", "elements", "columns"):
        raise ValueError(f"fetched={fetched!r}")
    dt, has_bias, mask_kind, causal = variant.dtype, variant.has_bias, variant.mask, variant.causal
    NTS, DTS = BN // 8, D // 8
    VR = V_THREADS // (D // 8)  # the V_last pass: rows of a band read at once
    exponent = 0x7C00 if dt == "float16" else 0x7F80  # every exponent bit set: an inf or a NaN

    def not_finite(x):  # on the bits (the simplifier folds x - x != 0 to false)
        return T.bitwise_and(T.reinterpret("uint16", x), T.uint16(exponent)) == T.uint16(exponent)

    def row_of(m0, w, g, mi, i):  # the row of the thread's accumulator element i of 16-row tile mi
        return m0 + (w * mt + mi) * 16 + i % 4 // 2 * 8 + g

    def col_of(n0, t4, i):  # ... and its column
        return n0 + i // 4 * 8 + t4 * 2 + i % 2

    def at(X, b0, b1, i, j, k):
        """Bias's or Mask's element at row i, column j (clamped to row M - 1, column N - 1), or the fetched one for
        the thread's element k of the chunk."""
        if fetched == "elements":
            return X[k]
        if fetched == "columns":  # element k's column: pair k // 4 of its n8 tile, then k's half
            return X[k % (NTS * 4) // 4 * 2 + k % 2]
        return X[b0, b1, T.min(i, M - 1), T.min(j, N - 1)]

    def one_row(Bias, Mask):
        """Whether Bias and Mask (those the variant has) are one row for every row of S (row stride 0, or M = 1):
        the kernels then take the "columns" Parts."""
        rows = [X.strides[2] == 0 for X, has in ((Bias, has_bias), (Mask, mask_kind != "none")) if has]
        return tvm.tirx.Or(M == 1, tvm.tirx.all(*rows)) if rows else T.bool(False)

    def logit(s, Bias, Mask, scale_l2, b0, b1, i, j, k, bounded=True):
        """The masked logit (log2-scaled) of S's element s at row i, column j (the thread's element k of the
        chunk); bounded: -inf past N and the diagonal (a chunk that edge says crosses neither needs no bound)."""
        x = s * scale_l2
        if has_bias:
            x = x + T.cast(at(Bias, b0, b1, i, j, k), "float32") * T.float32(LOG2E)
        if mask_kind == "add":
            mv = T.cast(at(Mask, b0, b1, i, j, k), "float32")
            x = T.Select(mv <= T.float32(MASKED_AT_OR_BELOW), T.float32(-math.inf), x + mv * T.float32(LOG2E))
        elif mask_kind == "bool":
            x = T.Select(at(Mask, b0, b1, i, j, k) != T.uint8(0), x, T.float32(-math.inf))
        elif mask_kind == "fill":  # (FILL_LOGIT: bfloat16's lowest in log2 units would be past float32's)
            x = T.Select(at(Mask, b0, b1, i, j, k) != T.uint8(0), x, T.float32(FILL_LOGIT[dt] * LOG2E))
        if not bounded:
            return x
        ok = j < N
        if causal and variant.causal_fill:  # past the diagonal: s + the fill, as the padding bias has it
            x = T.Select(j <= i + (N - M), x, s * scale_l2 + T.float32(FILL_LOGIT[dt] * LOG2E))
        elif causal:  # bottom-right aligned diagonal (FlashAttention >= 2.1)
            ok = tvm.tirx.all(ok, j <= i + (N - M))
        return T.Select(ok, x, T.float32(-math.inf))

    def tile_end(m0, BM, need=None):
        """The end of the columns the tile at row m0 computes: N, or (causal) its last visible column + 1; with
        causal_fill and need (need_all's), N where a row of the tile may see only keys at the lowest (every key then
        counts), else the diagonal's. (An expression that loads `need`: only inside a loop or a store, where TVM's
        shared-memory planning allows loads; without need, causal_fill's loop reach, N.)"""
        diagonal = T.max(T.min(N, m0 + BM + (N - M)), 0)
        if not causal:
            return N
        if not variant.causal_fill:
            return diagonal
        return N if need is None else T.Select(need[0] != 0, N, diagonal)

    @T.macro
    def need_all(need, Bias, b0, b1, m0, tid):
        """causal_fill: need[0] = 1 unless the tile's first row (the fewest visible keys: later rows see those too)
        has a visible key whose bias is above the lowest, read from a bias of one row (a padding mask), the block's
        threads a column in NT each and their finds OR-ed by __syncthreads_or; a bias of rows, or a mask, leaves it
        1 (every chunk computed: exact, slower). Every thread of the block runs it (a uniform branch)."""
        need[0] = 1
        if mask_kind == "none":
            if Bias.strides[2] == 0 or M == 1:
                need[0] = 0  # (here: whether the thread found a kept key)
                for c in T.serial((T.max(T.min(N, m0 + (N - M) + 1), 0) + NT - 1) // NT):
                    if c * NT + tid < T.min(N, m0 + (N - M) + 1):
                        if T.cast(Bias[b0, b1, 0, c * NT + tid], "float32") > T.float32(MASKED_AT_OR_BELOW):
                            need[0] = 1
                need[0] = 1 - T.call_extern("int32", "__syncthreads_or", need[0])

    def edge(n0, m0):
        """Whether the chunk at column n0 of the tile at row m0 needs its columns bounded: it may cross N or the
        diagonal, or (not bound_edges_only) has a bias or mask (a Python True: every chunk)."""
        if (has_bias or mask_kind != "none") and not bound_edges_only:
            return True
        past = n0 + BN > N
        return tvm.tirx.Or(past, n0 + BN - 1 > m0 + (N - M)) if causal else past

    def v_bad_at(v_bad, c):
        return v_bad[c] != 0 if causal else False

    @T.macro
    def record_v_last(V, V_last):
        """Per V_SPLITS bands of V's rows, 1 + the last row of each column holding a NaN or inf (0: none): a block a
        band, 16 bytes of a row a thread."""
        for sz in T.thread_binding(B0, thread="blockIdx.z"):
            for sy in T.thread_binding(B1, thread="blockIdx.y"):
                for sx in T.thread_binding(V_SPLITS, thread="blockIdx.x"):
                    for sr in T.thread_binding(VR, thread="threadIdx.y"):
                        for sc in T.thread_binding(D // 8, thread="threadIdx.x"):
                            with T.sblock("V_last"):
                                c0, c1, band, cr, cc = T.axis.remap("SSSSS", [sz, sy, sx, sr, sc])
                                T.reads()
                                T.writes()
                                staged = T.sblock_alloc_buffer((V_BATCH * VR * D,), dt, scope="shared")
                                last = T.sblock_alloc_buffer((8,), "int32", scope="local")
                                lasts = T.sblock_alloc_buffer((VR, D), "int32", scope="shared")
                                rows: T.let[T.int32] = (N + V_SPLITS - 1) // V_SPLITS
                                end: T.let[T.int32] = T.min(N, band * rows + rows)
                                for e in T.unroll(8):
                                    last[e] = 0
                                for i in T.serial((rows + V_BATCH * VR - 1) // (V_BATCH * VR)):
                                    # V_BATCH rows a thread in flight (16-byte copies), then their 8 columns checked
                                    for u in T.unroll(V_BATCH):
                                        if band * rows + (i * V_BATCH + u) * VR + cr < end:
                                            T.s_tir.cp_async_raw.legacy(
                                                staged.data, (u * VR + cr) * D + cc * 8, V.data,
                                                c0 * V.strides[0] + c1 * V.strides[1]
                                                + (band * rows + (i * V_BATCH + u) * VR + cr) * V.strides[2]
                                                + cc * 8, 16,
                                                dtype=dt)
                                    T.ptx.cp.async_.commit_group()
                                    T.ptx.cp.async_.wait_group(0)
                                    for u in T.unroll(V_BATCH):
                                        if band * rows + (i * V_BATCH + u) * VR + cr < end:
                                            for e in T.unroll(8):
                                                last[e] = T.Select(
                                                    not_finite(staged[(u * VR + cr) * D + cc * 8 + e]),
                                                    band * rows + (i * V_BATCH + u) * VR + cr + 1, last[e])
                                for e in T.unroll(8):
                                    lasts[cr, cc * 8 + e] = last[e]
                                T.tvm_storage_sync("shared")
                                if cr * (D // 8) + cc < D:  # a thread a column: the band's last
                                    last[0] = 0
                                    for j in T.serial(VR):
                                        last[0] = T.max(last[0], lasts[j, cr * (D // 8) + cc])
                                    V_last[band, c0, c1, cr * (D // 8) + cc] = last[0]

    @T.macro
    def fetch_bias_mask(bias_r, mask_r, Bias, Mask, b0, b1, m0, n0, w, g, t4):
        """fetched "elements": the thread's elements of the chunk at column n0 of Bias and Mask (those the variant
        has) into bias_r and mask_r, in S's accumulator order (reads clamped to row M - 1, column N - 1)."""
        for mi in T.unroll(mt):
            for i in T.unroll(NTS * 4):
                if has_bias:
                    bias_r[mi * NTS * 4 + i] = Bias[b0, b1, T.min(row_of(m0, w, g, mi, i), M - 1),
                                                    T.min(col_of(n0, t4, i), N - 1)]
                if mask_kind != "none":
                    mask_r[mi * NTS * 4 + i] = Mask[b0, b1, T.min(row_of(m0, w, g, mi, i), M - 1),
                                                    T.min(col_of(n0, t4, i), N - 1)]

    @T.macro
    def fetch_columns(bias_c, mask_c, Bias, Mask, b0, b1, n0, t4):
        """fetched "columns": the thread's 2 NTS columns of the chunk at n0 of Bias's and Mask's row (those the
        variant has) into bias_c and mask_c (columns clamped to N - 1)."""
        for c in T.unroll(NTS * 2):
            if has_bias:
                bias_c[c] = Bias[b0, b1, 0, T.min(n0 + c // 2 * 8 + t4 * 2 + c % 2, N - 1)]
            if mask_kind != "none":
                mask_c[c] = Mask[b0, b1, 0, T.min(n0 + c // 2 * 8 + t4 * 2 + c % 2, N - 1)]

    @T.macro
    def logits(s_acc, Bias, Mask, scale_l2, b0, b1, m0, n0, w, g, t4):
        """The chunk's logits in place (log2-scaled; with the bias and mask where the variant has them; bounded
        where a column may be past N or the diagonal: the interior chunks skip those tests)."""
        if edge(n0, m0):
            for mi in T.unroll(mt):
                for i in T.unroll(NTS * 4):
                    s_acc[mi * NTS * 4 + i] = logit(s_acc[mi * NTS * 4 + i], Bias, Mask, scale_l2, b0, b1,
                                                    row_of(m0, w, g, mi, i), col_of(n0, t4, i), mi * NTS * 4 + i)
        elif has_bias or mask_kind != "none":  # (edge is True when not bound_edges_only)
            for mi in T.unroll(mt):
                for i in T.unroll(NTS * 4):
                    s_acc[mi * NTS * 4 + i] = logit(s_acc[mi * NTS * 4 + i], Bias, Mask, scale_l2, b0, b1,
                                                    row_of(m0, w, g, mi, i), col_of(n0, t4, i), mi * NTS * 4 + i,
                                                    bounded=False)
        else:
            for i in T.unroll(mt * NTS * 4):
                s_acc[i] = s_acc[i] * scale_l2

    @T.macro
    def softmax_chunk(s_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2, b0, b1, m0, n0, w, g, t4):
        """The chunk's logits, then the online softmax: s_acc becomes P = exp2(logit - m), m_run and l_run
        (thread-partial) move on, alpha = O's rescale factor."""
        logits(s_acc, Bias, Mask, scale_l2, b0, b1, m0, n0, w, g, t4)
        for mi in T.unroll(mt):
            for h in T.unroll(2):
                m_chunk[mi * 2 + h] = T.float32(LOWEST)
                for i in T.unroll(NTS * 2):
                    m_chunk[mi * 2 + h] = T.max(m_chunk[mi * 2 + h], s_acc[(mi * NTS + i // 2) * 4 + h * 2 + i % 2])
                m_chunk[mi * 2 + h] = T.max(m_run[mi * 2 + h], T.cuda.warp_max(m_chunk[mi * 2 + h], 4))
                alpha[mi * 2 + h] = T.exp2(m_run[mi * 2 + h] - m_chunk[mi * 2 + h])
                m_run[mi * 2 + h] = m_chunk[mi * 2 + h]
                l_run[mi * 2 + h] = l_run[mi * 2 + h] * alpha[mi * 2 + h]
                for nt in T.unroll(NTS):
                    for e in T.unroll(2):
                        s_acc[(mi * NTS + nt) * 4 + h * 2 + e] = T.exp2(
                            s_acc[(mi * NTS + nt) * 4 + h * 2 + e] - m_run[mi * 2 + h])
                        l_run[mi * 2 + h] = l_run[mi * 2 + h] + s_acc[(mi * NTS + nt) * 4 + h * 2 + e]

    @T.macro
    def rescale_o(o_acc, alpha):
        for mi in T.unroll(mt):
            for h in T.unroll(2):
                for dj in T.unroll(DTS):
                    for e in T.unroll(2):
                        o_acc[(mi * DTS + dj) * 4 + h * 2 + e] = (o_acc[(mi * DTS + dj) * 4 + h * 2 + e]
                                                                  * alpha[mi * 2 + h])

    @T.macro
    def online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2, b0, b1, m0, n0, w, g, t4,
                       zero_nan_rows):
        """softmax_chunk, then O rescaled. zero_nan_rows: a NaN row's l stays NaN, but its NaN probabilities and
        rescale factors (+inf - +inf) become 0 and 1, so that its O accumulator stays finite unless V's column is
        not: what store_o needs for the row's 0 * V."""
        softmax_chunk(s_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2, b0, b1, m0, n0, w, g, t4)
        if zero_nan_rows != 0:
            for i in T.unroll(mt * NTS * 4):
                s_acc[i] = T.Select(T.isnan(s_acc[i]), T.float32(0), s_acc[i])
            for i in T.unroll(mt * 2):
                alpha[i] = T.Select(T.isnan(alpha[i]), T.float32(1), alpha[i])
        rescale_o(o_acc, alpha)

    @T.macro
    def find_v_bad(v_bad, v_last, V_last, b0, b1, n_end, tid):
        """Causal: v_bad[c] = 1 where V's column c holds a NaN or inf in a row from n_end on (V_last's bands; the
        tile's chunks skip those rows). Run before the chunks, so that the loads' latency hides behind theirs;
        store_o reads v_bad after a barrier."""
        if causal:
            for i in T.serial((D - tid + NT - 1) // NT):
                v_last[0] = 0
                for band in T.unroll(V_SPLITS):
                    v_last[0] = T.max(v_last[0], V_last[band, b0, b1, i * NT + tid])
                v_bad[i * NT + tid] = T.Select(v_last[0] > n_end, 1, 0)

    def bits(x):
        return T.cast(T.reinterpret("uint16", T.cast(x, dt)), "uint32")

    def pack(lo, hi):  # two values of the input type as one 32-bit word (lo in the low half)
        return T.bitwise_or(T.shift_left(bits(hi), T.uint32(16)), bits(lo))

    def o_value(o_acc, l_run, inv_l, v_bad, mi, h, dj, t4, e, zero_nan_rows):
        """O's element e of the thread's pair in n8 tile dj, half h of 16-row tile mi (float32)."""
        return T.Select(v_bad_at(v_bad, dj * 8 + t4 * 2 + e), T.float32(math.nan),
                        zero_or_o(o_acc[(mi * DTS + dj) * 4 + h * 2 + e], l_run[mi * 2 + h], zero_nan_rows,
                                  inv_l[mi * 2 + h]))

    @T.macro
    def store_o(O, O32, o_acc, l_run, inv_l, v_bad, b0, b1, m0, w, g, t4, zero_nan_rows):
        """O = O / l (quad sum; a reciprocal a row), NaN where l is; a zero row (zero_row: fully masked, or NaN with
        zero_nan_rows) is the unfused graph's 0 * V: its accumulator summed only 0 * V, so it is 0, or non-finite in
        a column of V holding a NaN or inf. Causal: the chunks past the tile's diagonal were skipped, but 0 * V is
        still NaN in each column of V holding a NaN or inf in those rows (v_bad, from find_v_bad). A thread's two
        adjacent columns leave as one 32-bit store through O32, O's words (O's strides and offset are even: D is)."""
        if causal:
            T.tvm_storage_sync("shared")
        for mi in T.unroll(mt):
            for h in T.unroll(2):
                l_run[mi * 2 + h] = T.cuda.warp_sum(l_run[mi * 2 + h], 4)
                inv_l[mi * 2 + h] = T.float32(1) / l_run[mi * 2 + h]
                row: T.let[T.int32] = m0 + (w * mt + mi) * 16 + h * 8 + g
                if row < M:
                    for dj in T.unroll(DTS):
                        O32[(O.elem_offset + b0 * O.strides[0] + b1 * O.strides[1] + row * O.strides[2] + dj * 8
                             + t4 * 2) // 2] = pack(
                                 o_value(o_acc, l_run, inv_l, v_bad, mi, h, dj, t4, 0, zero_nan_rows),
                                 o_value(o_acc, l_run, inv_l, v_bad, mi, h, dj, t4, 1, zero_nan_rows))

    return SimpleNamespace(fetched=fetched, record_v_last=record_v_last, fetch_bias_mask=fetch_bias_mask,
                           one_row=one_row, fetch_columns=fetch_columns, logits=logits,
                           softmax_chunk=softmax_chunk, online_softmax=online_softmax, find_v_bad=find_v_bad, pack=pack,
                           store_o=store_o, tile_end=tile_end, need_all=need_all)


def finish(func: tvm.tirx.PrimFunc, variant: Variant, name: str, split: bool = False) -> tvm.tirx.PrimFunc:
    """The kernel with only the parameters its variant has (bias, mask; the split form's workspace after O), named
    `name`, marked scheduled."""
    q, k, v, bias, mask, o, *work, scale, zero_nan_rows = func.params
    keep = [q, k, v] + ([bias] if variant.has_bias else []) + ([mask] if variant.mask != "none" else []) + [
        o] + (work if split else []) + [scale, zero_nan_rows]
    func = tvm.tirx.PrimFunc(keep, func.body, func.ret_type, func.attrs)
    return func.with_attr({"global_symbol": name, "tirx.is_scheduled": True})


def runtime_func(variant: Variant, d: int, warps: int = 0, mt: int = 1, bn: int = 64, stages: int = 2,
                 name: str = "main", split: bool = False) -> tvm.tirx.PrimFunc:
    """The kernel fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows) for head size `d` (Q and K's K = V's D = d),
    B0, B1, M, N symbolic. Tile: `warps` warps of `mt` 16-row mma tiles each (BM = 16 mt warps rows), chunks of `bn`
    columns, `stages` shared buffers for the K/V chunks.

    split: the split-N form (flash-decoding), for calls of few row tiles (a decoder's generation step: B x H blocks
    of one query row would leave most SMs idle), fn(Q, K, V, [bias], [mask], O, Work, scale, zero_nan_rows) with
    Work float32 [S, B0, B1, M (D + 2)] (the caller's workspace; S, the splits, is its first dim): blockIdx.x = row
    tiles x S, split s computing the tile's chunks s ceil(C / S) ... of its C and writing its rows' partial O
    accumulator (scaled to its running max m), m and l to Work; a second kernel ("combine") weighs each split by
    exp2(m_s - max m) and stores O (zero_or_o), so that NaN rows, fully masked rows and 0 * V come out as the one-pass
    kernel's. A causal call must be one row tile (M <= BM: the tile sees every column, so no chunk is skipped and
    no V_last pass is needed): the op serves only M <= BM with it (manifest "split" [BM, BN]; it splits where
    B0 B1 blocks leave SMs idle, two blocks an SM: flashgemm/ort/csrc/op.cc, SplitCount)."""
    if d not in HEAD_SIZES:
        raise ValueError(f"head size {d}: the mma kernel has {HEAD_SIZES}")
    if not warps:  # the shipped tile
        warps, mt, bn, stages = (SPLIT_TILES if split else TILES)[d]
    if bn % 16 or bn * d // 8 % (32 * warps) or (16 * mt * warps) * d // 8 % (32 * warps):
        raise ValueError(f"tile bn={bn} warps={warps} mt={mt}: chunks of 16 columns, whole 16-byte copies a thread")
    dt = variant.dtype
    ab = "fp16" if dt == "float16" else "bf16"
    trans_b, mask_kind, causal = variant.trans_b, variant.mask, variant.causal
    mask_dtype = "uint8" if mask_kind in BOOL_MASK_KINDS else dt
    BM, BN, D, NT = 16 * mt * warps, bn, d, 32 * warps
    DP = D + PAD  # a padded shared row of Q, K ([N, D]) and V
    BNP = BN + PAD  # a padded shared row of K as [D, N]
    KS, NTS, DTS = D // 16, BN // 8, D // 8  # k-steps of Q K^T, n8 tiles of S, n8 tiles of O
    k_tile = BN * DP if trans_b else D * BNP  # one stage's K chunk
    B0, B1, M, N = (tvm.tirx.Var(n, "int32") for n in ("B0", "B1", "M", "N"))
    S = tvm.tirx.Var("S", "int32")  # the split form's splits (Work's first dim)
    splits = S if split else 1
    WR = D + 2  # a split's partial row in Work: O's accumulator, m, l
    # every row stride symbolic too: Q, K ([N, D]), V and O may be BSNH views (flashgemm/op/variant.py:canonicalize)
    sq, sk, sv = _strides("Q", 3), _strides("K", 3 if trans_b else 2), _strides("V", 3)
    k_shape = (B0, B1, N, D) if trans_b else (B0, B1, D, N)
    k_strides = (*sk, 1) if trans_b else (*sk, N, 1)
    q_copies = BM * D // 8 // NT  # 16-byte copies a thread per Q tile
    k_copies = BN * D // 8 // NT  # ... per K or V chunk

    parts = Parts(variant, D, BN, NT, mt, B0, B1, M, N, bound_edges_only=True)
    # a bias and mask of one row (a padding mask [B, 1, 1, N]) take a uniform branch to a chunk loop that reads a
    # thread's columns of a chunk once for its 2 mt rows
    by_columns = variant.has_bias or mask_kind != "none"
    cols = Parts(variant, D, BN, NT, mt, B0, B1, M, N, fetched="columns", bound_edges_only=True)

    @T.macro
    def copy_chunk(chunk, stage, Ks, Vs, Km, V, b0, b1, tid):
        """K's and V's chunk `chunk` (rows past N read row N - 1) to shared stage `stage`, 16 bytes a cp.async."""
        for c in T.unroll(k_copies):
            r: T.let[T.int32] = (c * NT + tid) // (D // 8)
            ch: T.let[T.int32] = (c * NT + tid) % (D // 8)
            T.s_tir.cp_async_raw.legacy(
                Vs.data, stage * BN * DP + r * DP + ch * 8, V.data,
                b0 * sv[0] + b1 * sv[1] + T.min(chunk * BN + r, N - 1) * sv[2] + ch * 8, 16, dtype=dt)
            if trans_b:
                T.s_tir.cp_async_raw.legacy(
                    Ks.data, stage * k_tile + r * DP + ch * 8, Km.data,
                    b0 * sk[0] + b1 * sk[1] + T.min(chunk * BN + r, N - 1) * sk[2] + ch * 8, 16, dtype=dt)
        if not trans_b:  # K as [D, N]: rows of BN columns (N % 8 = 0, so a chunk past N - 8 is all masked)
            for c in T.unroll(k_copies):
                r: T.let[T.int32] = (c * NT + tid) // (BN // 8)
                ch: T.let[T.int32] = (c * NT + tid) % (BN // 8)
                T.s_tir.cp_async_raw.legacy(
                    Ks.data, stage * k_tile + r * BNP + ch * 8, Km.data,
                    b0 * sk[0] + b1 * sk[1] + r * N + T.min(chunk * BN + ch * 8, N - 8), 16, dtype=dt)

    @T.macro
    def chunk_loop(ps, bias_x, mask_x, Bias, Mask, Km, V, Qs, Ks, Vs, q_frag, b_frag, p_frag, s_acc, o_acc, m_run,
                   l_run, m_chunk, alpha, scale_l2, b0, b1, m0, w, lane, g, t4, tid, n_chunks, zero_nan_rows,
                   limit, c0):
        """The chunk loop, its logits those of Parts ps: reading Bias and Mask in place, or the registers bias_x
        and mask_x (ps.fetched "columns"). Each Parts gets its own loop, so that a uniform branch between two keeps
        each loop's registers as a kernel of one would. limit: the chunks computed, of the loop's n_chunks (the
        tile's, with causal_fill: tile_end's with need, a block-uniform value read in the loop). c0: the first
        chunk's index (the split form's split; else 0): iteration j computes chunk c0 + j."""
        for j in T.serial(n_chunks):
            if j < limit:
                # the copies of chunk j + stages - 1 (its stage last held chunk j - 1)
                nj: T.let[T.int32] = j + stages - 1
                stn: T.let[T.int32] = nj % stages
                if nj < limit:
                    copy_chunk(c0 + nj, stn, Ks, Vs, Km, V, b0, b1, tid)
                T.ptx.cp.async_.commit_group()
                T.ptx.cp.async_.wait_group(stages - 1)
                T.tvm_storage_sync("shared")
                st: T.let[T.int32] = j % stages
                n0: T.let[T.int32] = (c0 + j) * BN
                if j == 0:  # the Q tile's A fragments, once
                    for mi, ks in T.grid(mt, KS):
                        T.ptx_legacy.ldmatrix(
                            False, 4, ".b16", q_frag.data, (mi * KS + ks) * 8, Qs.access_ptr("r"),
                            ((w * mt + mi) * 16 + (lane // 8) % 2 * 8 + lane % 8) * DP
                            + ks * 16 + lane // 16 * 8, dtype=dt)
                if ps.fetched == "columns":  # in flight while S is computed
                    ps.fetch_columns(bias_x, mask_x, Bias, Mask, b0, b1, n0, t4)
                # S = Q K^T
                for i in T.unroll(mt * NTS * 4):
                    s_acc[i] = T.float32(0)
                for ks in T.unroll(KS):
                    for p in T.unroll(NTS // 2):
                        if trans_b:  # K's rows n, columns k: B fragments as stored
                            T.ptx_legacy.ldmatrix(
                                False, 4, ".b16", b_frag.data, 0, Ks.access_ptr("r"),
                                st * k_tile + (p * 16 + lane // 16 * 8 + lane % 8) * DP
                                + ks * 16 + (lane // 8) % 2 * 8, dtype=dt)
                        else:  # K's rows k, columns n: transposed
                            T.ptx_legacy.ldmatrix(
                                True, 4, ".b16", b_frag.data, 0, Ks.access_ptr("r"),
                                st * k_tile + (ks * 16 + (lane // 8) % 2 * 8 + lane % 8) * BNP
                                + p * 16 + lane // 16 * 8, dtype=dt)
                        for mi in T.unroll(mt):
                            for h in T.unroll(2):
                                T.ptx_legacy.mma(
                                    "m16n8k16", "row", "col", ab, ab, "fp32",
                                    q_frag.data, (mi * KS + ks) * 8, b_frag.data, h * 4,
                                    s_acc.data, (mi * NTS + p * 2 + h) * 4, False,
                                    dtype="float32")
                if ps.fetched == "":
                    ps.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, Bias, Mask, scale_l2, b0, b1, m0,
                                      n0, w, g, t4, zero_nan_rows)
                else:
                    ps.online_softmax(s_acc, o_acc, m_run, l_run, m_chunk, alpha, bias_x, mask_x, scale_l2, b0, b1,
                                      m0, n0, w, g, t4, zero_nan_rows)
                for i in T.unroll(mt * NTS * 4):
                    p_frag[i] = T.cast(s_acc[i], dt)
                # O += P V (P's A fragment for k-step kk is S's n8 tiles 2 kk and 2 kk + 1)
                for kk in T.unroll(BN // 16):
                    for dp in T.unroll(DTS // 2):
                        T.ptx_legacy.ldmatrix(
                            True, 4, ".b16", b_frag.data, 0, Vs.access_ptr("r"),
                            st * BN * DP + (kk * 16 + (lane // 8) % 2 * 8 + lane % 8) * DP
                            + dp * 16 + lane // 16 * 8, dtype=dt)
                        for mi in T.unroll(mt):
                            for h in T.unroll(2):
                                T.ptx_legacy.mma(
                                    "m16n8k16", "row", "col", ab, ab, "fp32",
                                    p_frag.data, (mi * NTS + kk * 2) * 4, b_frag.data, h * 4,
                                    o_acc.data, (mi * DTS + dp * 2 + h) * 4, False,
                                    dtype="float32")
                T.tvm_storage_sync("shared")

    @T.macro
    def store_partial(Work, o_acc, m_run, l_run, b0, b1, m0, sp, w, g, t4):
        """The split form's epilogue: split sp's rows of the tile as they stand (O's accumulator, scaled to the running
        max m; m; l summed over the quad) to Work, for combine."""
        for mi in T.unroll(mt):
            for h in T.unroll(2):
                l_run[mi * 2 + h] = T.cuda.warp_sum(l_run[mi * 2 + h], 4)
                row: T.let[T.int32] = m0 + (w * mt + mi) * 16 + h * 8 + g
                if row < M:
                    for dj in T.unroll(DTS):
                        for e in T.unroll(2):
                            Work[sp, b0, b1, row * WR + dj * 8 + t4 * 2 + e] = o_acc[(mi * DTS + dj) * 4 + h * 2 + e]
                    if t4 == 0:
                        Work[sp, b0, b1, row * WR + D] = m_run[mi * 2 + h]
                        Work[sp, b0, b1, row * WR + D + 1] = l_run[mi * 2 + h]

    @T.macro
    def combine(Work, O, zero_nan_rows):
        """The split form's second kernel, a block a row and a thread a column of O: the splits' partials weighed by
        exp2(m_s - m) for the row's max m (1 where m_s = m, so that a +inf max weighs its split 1, not NaN), summed,
        and O = zero_or_o(sum of accumulators, sum of l): a NaN or +inf logit's NaN l, a fully masked row's l = 0 and
        a split's 0 * NaN in V reach O as in the one-pass kernel."""
        for cz in T.thread_binding(B0, thread="blockIdx.z"):
            for cy in T.thread_binding(B1, thread="blockIdx.y"):
                for cx in T.thread_binding(M, thread="blockIdx.x"):
                    for ct in T.thread_binding(D, thread="threadIdx.x"):
                        with T.sblock("combine"):
                            c0, c1, i, c = T.axis.remap("SSSS", [cz, cy, cx, ct])
                            T.reads()
                            T.writes()
                            r = T.sblock_alloc_buffer((4,), "float32", scope="local")  # max, l, O's sum, a weight
                            r[0] = T.float32(LOWEST)
                            for sp in T.serial(S):
                                r[0] = T.max(r[0], Work[sp, c0, c1, i * WR + D])
                            r[1] = T.float32(0)
                            r[2] = T.float32(0)
                            for sp in T.serial(S):
                                r[3] = T.Select(Work[sp, c0, c1, i * WR + D] == r[0], T.float32(1),
                                                T.exp2(Work[sp, c0, c1, i * WR + D] - r[0]))
                                r[1] = r[1] + Work[sp, c0, c1, i * WR + D + 1] * r[3]
                                r[2] = r[2] + Work[sp, c0, c1, i * WR + c] * r[3]
                            O[c0, c1, i, c] = T.cast(zero_or_o(r[2], r[1], zero_nan_rows), dt)

    def chunk_limit(m0, need):  # the chunks the tile at m0 computes (Parts.tile_end; need: need_all's)
        return (parts.tile_end(m0, BM, need) + BN - 1) // BN

    def own_limit(m0, need, c0, n_chunks):
        """The chunks this block computes: the tile's (chunk_limit), or the split form's share of them from c0, at
        most n_chunks (so that no split copies its neighbour's first chunk)."""
        return T.min(chunk_limit(m0, need) - c0, n_chunks) if split else chunk_limit(m0, need)

    @T.prim_func(s_tir=True)
    def fused_attention_mma(q_h: T.handle, k_h: T.handle, v_h: T.handle, bias_h: T.handle, mask_h: T.handle,
                            o_h: T.handle, work_h: T.handle, scale: T.float32, zero_nan_rows: T.int32):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        Q = T.match_buffer(q_h, (B0, B1, M, D), dt, strides=(*sq, 1), align=16)
        Km = T.match_buffer(k_h, k_shape, dt, strides=k_strides, align=16)
        V = T.match_buffer(v_h, (B0, B1, N, D), dt, strides=(*sv, 1), align=16)
        Bias = T.match_buffer(bias_h, (B0, B1, M, N), dt, strides=_strides("bias", 4), align=2, offset_factor=1)
        Mask = T.match_buffer(mask_h, (B0, B1, M, N), mask_dtype, strides=_strides("mask", 4), align=1,
                              offset_factor=1)
        O = T.match_buffer(o_h, (B0, B1, M, D), dt, strides=(*_strides("O", 3), 1), align=16, offset_factor=1)
        if split:
            Work = T.match_buffer(work_h, (S, B0, B1, M * WR), "float32")
        O32 = T.decl_buffer((B0 * O.strides[0] // 2,), "uint32", data=O.data)  # two elements a word
        # causal: per V_SPLITS bands of V's rows, 1 + the last row of each column holding a NaN or inf (0: none)
        V_last = T.alloc_buffer((V_SPLITS, B0, B1, D), "int32")
        if causal and not split:
            parts.record_v_last(V, V_last)
        for bz in T.thread_binding(B0, thread="blockIdx.z"):
            for by in T.thread_binding(B1, thread="blockIdx.y"):
                for bx in T.thread_binding((M + BM - 1) // BM * splits, thread="blockIdx.x"):
                    for ty in T.thread_binding(warps, thread="threadIdx.y"):
                        for tx in T.thread_binding(32, thread="threadIdx.x"):
                            with T.sblock("attention"):
                                b0, b1, bs, w, lane = T.axis.remap("SSSSS", [bz, by, bx, ty, tx])
                                T.reads()
                                T.writes()
                                Qs = T.sblock_alloc_buffer((BM * DP,), dt, scope="shared.dyn")
                                Ks = T.sblock_alloc_buffer((stages * k_tile,), dt, scope="shared.dyn")
                                Vs = T.sblock_alloc_buffer((stages * BN * DP,), dt, scope="shared.dyn")
                                q_frag = T.sblock_alloc_buffer((mt * KS * 8,), dt, scope="local")
                                b_frag = T.sblock_alloc_buffer((8,), dt, scope="local")
                                p_frag = T.sblock_alloc_buffer((mt * NTS * 4,), dt, scope="local")
                                s_acc = T.sblock_alloc_buffer((mt * NTS * 4,), "float32", scope="local")
                                o_acc = T.sblock_alloc_buffer((mt * DTS * 4,), "float32", scope="local")
                                m_run = T.sblock_alloc_buffer((mt * 2,), "float32", scope="local")
                                l_run = T.sblock_alloc_buffer((mt * 2,), "float32", scope="local")
                                m_chunk = T.sblock_alloc_buffer((mt * 2,), "float32", scope="local")
                                alpha = T.sblock_alloc_buffer((mt * 2,), "float32", scope="local")
                                v_bad = T.sblock_alloc_buffer((D,), "int32", scope="shared")
                                v_last = T.sblock_alloc_buffer((1,), "int32", scope="local")
                                inv_l = T.sblock_alloc_buffer((mt * 2,), "float32", scope="local")
                                fill_need = T.sblock_alloc_buffer((1,), "int32", scope="local")
                                bias_c = T.sblock_alloc_buffer((NTS * 2 if by_columns else 1,), dt, scope="local")
                                mask_c = T.sblock_alloc_buffer((NTS * 2 if by_columns else 1,), mask_dtype,
                                                               scope="local")
                                tid: T.let[T.int32] = w * 32 + lane
                                g: T.let[T.int32] = lane // 4
                                t4: T.let[T.int32] = lane % 4
                                # causal: the longest tiles (the last rows) first, so that the short ones fill the tail
                                bt: T.let[T.int32] = bs // splits  # the row tile, and its split
                                sp: T.let[T.int32] = bs % splits
                                m0: T.let[T.int32] = ((M + BM - 1) // BM - 1 - bt if causal else bt) * BM
                                scale_l2: T.let[T.float32] = scale * T.float32(LOG2E)
                                if variant.causal_fill:
                                    parts.need_all(fill_need, Bias, b0, b1, m0, tid)
                                # chunks: all of N, or (causal) up to the tile's last visible column (causal_fill:
                                # the loop reaches N, and limit, read in it, says how far the tile computes)
                                n_end: T.let[T.int32] = parts.tile_end(m0, BM)
                                # split: a split's share of the tile's chunks, from its first c0 (the last
                                # splits' may be short or empty: their partial rows are a fully masked row's)
                                n_chunks: T.let[T.int32] = ((n_end + BN - 1) // BN + splits - 1) // splits
                                c0: T.let[T.int32] = sp * n_chunks
                                for i in T.unroll(mt * DTS * 4):
                                    o_acc[i] = T.float32(0)
                                for i in T.unroll(mt * 2):
                                    m_run[i] = T.float32(LOWEST)
                                    l_run[i] = T.float32(0)
                                # the Q tile (rows past M read row M - 1)
                                for c in T.unroll(q_copies):
                                    r: T.let[T.int32] = (c * NT + tid) // (D // 8)
                                    ch: T.let[T.int32] = (c * NT + tid) % (D // 8)
                                    T.s_tir.cp_async_raw.legacy(
                                        Qs.data, r * DP + ch * 8, Q.data,
                                        b0 * sq[0] + b1 * sq[1] + T.min(m0 + r, M - 1) * sq[2] + ch * 8, 16, dtype=dt)
                                # chunk 0's K and V (stage 0), with the Q tile in one group
                                for st in T.unroll(stages - 1):
                                    if st < own_limit(m0, fill_need, c0, n_chunks):
                                        copy_chunk(c0 + st, st, Ks, Vs, Km, V, b0, b1, tid)
                                    T.ptx.cp.async_.commit_group()
                                if not split:
                                    parts.find_v_bad(v_bad, v_last, V_last, b0, b1, parts.tile_end(m0, BM, fill_need),
                                                     tid)
                                if by_columns:
                                    if cols.one_row(Bias, Mask):
                                        chunk_loop(cols, bias_c, mask_c, Bias, Mask, Km, V, Qs, Ks, Vs, q_frag, b_frag,
                                                   p_frag, s_acc, o_acc, m_run, l_run, m_chunk, alpha, scale_l2, b0,
                                                   b1, m0, w, lane, g, t4, tid, n_chunks, zero_nan_rows,
                                                   own_limit(m0, fill_need, c0, n_chunks), c0)
                                    else:
                                        chunk_loop(parts, bias_c, mask_c, Bias, Mask, Km, V, Qs, Ks, Vs, q_frag,
                                                   b_frag, p_frag, s_acc, o_acc, m_run, l_run, m_chunk, alpha,
                                                   scale_l2, b0, b1, m0, w, lane, g, t4, tid, n_chunks, zero_nan_rows,
                                                   own_limit(m0, fill_need, c0, n_chunks), c0)
                                else:
                                    chunk_loop(parts, bias_c, mask_c, Bias, Mask, Km, V, Qs, Ks, Vs, q_frag, b_frag,
                                               p_frag, s_acc, o_acc, m_run, l_run, m_chunk, alpha, scale_l2, b0, b1,
                                               m0, w, lane, g, t4, tid, n_chunks, zero_nan_rows,
                                               own_limit(m0, fill_need, c0, n_chunks), c0)
                                T.ptx.cp.async_.wait_group(0)  # (a causal tile past every column copied Q only)
                                if split:
                                    store_partial(Work, o_acc, m_run, l_run, b0, b1, m0, sp, w, g, t4)
                                else:
                                    parts.store_o(O, O32, o_acc, l_run, inv_l, v_bad, b0, b1, m0, w, g, t4,
                                                  zero_nan_rows)
        if split:
            combine(Work, O, zero_nan_rows)

    return finish(fused_attention_mma, variant, name, split)
