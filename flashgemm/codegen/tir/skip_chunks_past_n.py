"""Any-length recompute kernels: each sweep runs over the column chunks that hold a column below the call's N.

The recompute form over a bound (flashgemm.kernel.fused_gemm_softmax._padded with M, N symbolic;
flashgemm/spaces/cuda_recompute) sweeps the bound's Nb columns in chunks of CW, three times: a call of N = 1025 on the
1536 bound computed 24 chunks of GEMM a sweep where 17 hold its columns. A chunk whose columns all lie at or past N adds
nothing: its logits are -inf (no part of the row's max or sum) and P's stores are guarded by j < N. So the chunk loops
run over min(E, ceil(N / CW)) chunks instead of their E = Nb / CW.

The pass runs on the scheduled module (sblocks still there), before TVM's lowering, so the software pipeline of each
chunk loop is built over the new extent. A chunk loop is a software-pipelined loop (cuda_recompute annotates each
sweep's) whose global copy of B reads, in B's N dimension, rows c * CW + r with 0 <= r < CW for chunk c (proven with
TVM's analyzer; B transposed, as any_length_form requires). Loops it cannot prove that of are left alone.

FLASHGEMM_DISABLE_PASSES=skip_chunks_past_n turns it off (A/B runs).
"""
from __future__ import annotations

from typing import Optional

import tvm
import tvm_ffi
from tvm import tirx

from flashgemm.kernel.fused_gemm_softmax import ANY_LENGTH_ATTR

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import substitute

PASS = "skip_chunks_past_n"  # its name in cuda_build.PASSES
_PIPELINED = "software_pipeline_stage"


def _b_rows(func) -> Optional[tuple]:
    """(B's buffer, its N extent) of a transposed-B any-length function ([B0, B1, N, K]), else None."""
    if func.attrs is None or ANY_LENGTH_ATTR not in func.attrs:
        return None
    b = func.params[1] if len(func.params) > 1 else None  # (A, Bm, ..., P, scale): buffers in TVM 0.27
    if not isinstance(b, tirx.Buffer) or b.name != "Bm" or len(b.shape) != 4 or not isinstance(b.shape[2], tirx.Var):
        return None
    return b, b.shape[2]


def chunk_width(loop: tirx.For, b_buf: tirx.Buffer) -> Optional[int]:
    """CW of a chunk loop: the loop's copies of B read rows c * CW + r, 0 <= r < CW, of B's N dimension (module doc);
    None where a read of B under the loop is not of that form, or there is none."""
    if not isinstance(loop.extent, tirx.IntImm):
        return None
    c = loop.loop_var
    loops, widths, ok = {}, [], [True]

    def on_for(inner):
        loops[inner.loop_var] = inner

    def on_realize(realize):
        blk = realize.block
        for region in blk.reads:
            if not region.source.same_as(b_buf):
                continue
            row = region.region[2]
            if not isinstance(row.extent, tirx.IntImm) or int(row.extent) != 1:
                ok[0] = False
                return
            binding = substitute(row.min, {iv.var: val for iv, val in zip(blk.iter_vars, realize.iter_values)})
            widths.append(binding)
    tvm_ffi.structural_walk(loop.body, ((tirx.For, on_for), (tvm.s_tir.SBlockRealize, on_realize)))
    if not ok[0] or not widths:
        return None
    ana = tvm.sym.analyzer.Analyzer()
    for v, lp in loops.items():
        if isinstance(lp.min, tirx.IntImm) and isinstance(lp.extent, tirx.IntImm):
            ana.bind(v, tvm.ir.Range.from_min_extent(lp.min, lp.extent))
    out = set()
    for row in widths:
        at0 = ana.simplify(substitute(row, {c: tirx.const(0, str(c.ty))}))
        w = ana.simplify(substitute(row, {c: tirx.const(1, str(c.ty))}) - at0)
        if not isinstance(w, tirx.IntImm) or int(w) <= 0:
            return None
        if not (ana.can_prove(row == c * int(w) + at0) and ana.can_prove(at0 >= 0) and ana.can_prove(at0 < int(w))):
            return None
        out.add(int(w))
    return out.pop() if len(out) == 1 else None


def skip(func):
    """func with its chunk loops over the chunks that hold columns below N only (module doc), or func unchanged."""
    found = _b_rows(func)
    if found is None:
        return func
    b_buf, n = found

    def on_for(loop, mutator):
        loop = mutator.default_mutate(loop)
        if _PIPELINED not in loop.annotations:
            return loop
        cw = chunk_width(loop, b_buf)
        if cw is None:
            return loop
        live = tirx.Min(loop.extent, tirx.floordiv(n + (cw - 1), cw))  # (N >= 1: the op never launches N = 0)
        return tirx.For(loop.loop_var, loop.min, live, loop.kind, loop.body, loop.thread_binding, loop.annotations)
    return func.with_body(tvm_ffi.structural_mutate(func.body, ((tirx.For, on_for),)))


skip_chunks_past_n = each_function("flashgemm.SkipChunks", skip)
