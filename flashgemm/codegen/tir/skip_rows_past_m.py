"""Any-length kernels: the grid covers only the row groups that hold a row below the call's M.

The any-length form (flashgemm.kernel.fused_gemm_softmax._any_length) iterates over its bound Mb x Nb, so its grid
covered Mb rows whatever M was: a call of M = 513 rows on the 768 bound ran 768 rows of GEMM and softmax, and
stored only the first 513. A block whose rows all lie past M stores nothing (P's store is guarded by i < M) and
writes no other global memory, so leaving it out changes no output; with the ladder's bounds up to 1.5x apart it
removes up to a third of the work at lengths between two bounds.

The pass runs on the scheduled module (sblocks still there), before TVM's lowering. The blockIdx.x loop
enumerates (batch, row group) with the row group innermost: block bx starts at row (bx % G) * BM, G = Mb / BM,
which the pass proves from the "P" block's row binding (every other loop variable at its start), and that every row
of the block is at or past its first; otherwise the function is left as it is. The loop then runs over
B0 * B1 * live blocks, live = ceil(M / BM), and block x stands for the old block (x / live) * G + x % live. Not an
early return: TVM's barrier planning refuses a barrier under a condition. The remapped bindings are not affine,
and TVM lowers a cross-thread reduction only under affine bindings, so the pass lowers the function's cross-thread
reductions first (left unlowered, the row statistics' reduction raced in shared memory).

FLASHGEMM_DISABLE_PASSES=skip_rows_past_m turns it off (A/B runs).
"""
from __future__ import annotations

from typing import Optional

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from flashgemm.kernel.fused_gemm_softmax import ANY_LENGTH_ATTR

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import substitute

PASS = "skip_rows_past_m"  # its name in cuda_build.PASSES


def _block_x_loop(func) -> Optional[tirx.For]:
    found = []

    def on_for(loop):
        if loop.thread_binding is not None and loop.thread_binding.thread_tag == "blockIdx.x":
            found.append(loop)
    tvm_ffi.structural_walk(func.body, ((tirx.For, on_for),))
    return found[0] if len(found) == 1 else None


def row_groups(func) -> Optional[tuple]:
    """(blockIdx.x loop, G, BM, M) for an any-length function whose blockIdx.x enumerates (batch, row group) with the
    row group innermost: block bx computes rows from (bx % G) * BM, G = Mb / BM groups of BM rows (proven from the
    "P" block's row binding, module doc); None for any other function."""
    if func.attrs is None or ANY_LENGTH_ATTR not in func.attrs:
        return None
    p = func.params[-2] if len(func.params) >= 4 else None  # (A, Bm, [Bias], [Mask], P, scale): buffers in TVM 0.27
    if not isinstance(p, tirx.Buffer) or p.name != "P" or len(p.shape) != 4 or not isinstance(p.shape[2], tirx.Var):
        return None
    m = p.shape[2]
    bx = _block_x_loop(func)
    if bx is None:
        return None
    loops, rows = {}, []

    def on_for(loop):
        loops[loop.loop_var] = loop

    def on_realize(r):
        if r.block.name_hint == "P":
            rows.append((r.iter_values[2], r.block.iter_vars[2].dom.extent))
    tvm_ffi.structural_walk(bx.body, ((tirx.For, on_for), (tvm.s_tir.SBlockRealize, on_realize)))
    if len(rows) != 1 or not isinstance(rows[0][1], tirx.IntImm):
        return None
    row, mb = rows[0][0], int(rows[0][1])
    ana = tvm.sym.analyzer.Analyzer()
    for v, loop in [(bx.loop_var, bx), *loops.items()]:
        ana.bind(v, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    first = ana.simplify(substitute(row, {v: loop.min for v, loop in loops.items()}))
    x = bx.loop_var
    bm = ana.simplify(substitute(first, {x: tirx.const(1, str(x.ty))})
                      - substitute(first, {x: tirx.const(0, str(x.ty))}))
    if not isinstance(bm, tirx.IntImm) or int(bm) <= 0 or mb % int(bm):
        return None
    bm = int(bm)
    g = mb // bm
    if not (ana.can_prove(first == tirx.floormod(x, g) * bm) and ana.can_prove(row >= first)
            and ana.can_prove(tirx.floormod(bx.extent, g) == 0)):
        return None
    return bx, g, bm, m


def skip(func):
    """func with its grid over the row groups that hold rows below M only (module doc), or func unchanged."""
    found = row_groups(func)
    if found is None:
        return func
    # TVM lowers a cross-thread reduction only in blocks whose bindings are affine, which the remapped ones are not
    # (bx / live, bx % live): lower them first
    func = s_tir.transform.LowerCrossThreadReduction()(tvm.IRModule({"main": func}))["main"]
    found = row_groups(func)
    if found is None:
        raise RuntimeError("skip_rows_past_m: lowering the cross-thread reductions hid the row groups")
    bx, g, bm, m = found
    x = bx.loop_var
    new_x = tirx.Var(x.name, str(x.ty))
    live = tirx.floordiv(m + (bm - 1), bm)  # row groups with a row below M (M >= 1: the op never launches M = 0)
    old_index = tirx.truncdiv(new_x, live) * g + tirx.truncmod(new_x, live)  # both >= 0: C's / and %
    extent = tirx.floordiv(bx.extent, g) * live

    def on_for(loop, mutator):
        if loop.same_as(bx):
            body = substitute(loop.body, {x: old_index})
            return tirx.For(new_x, loop.min, extent, loop.kind, body, loop.thread_binding, loop.annotations)
        return mutator.default_mutate(loop)
    return func.with_body(tvm_ffi.structural_mutate(func.body, ((tirx.For, on_for),)))


skip_rows_past_m = each_function("flashgemm.SkipRows", skip)
