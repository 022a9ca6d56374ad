"""A thread's row statistic accumulated in CHAINS independent chains instead of one serial chain.

Every form reduces a row's max and sum within a thread first, over the thread's own elements, in one accumulator:

    acc[0] = init
    for a in range(8): for b in range(2): for c in range(2):       (constant extents; W1's register kernel)
        S[i] = exp2(...); acc[0] = acc[0] + S[i]

so each FADD (FMNMX for the max) waits for the one before: 32 dependent instructions a row in W1's kernel, which
ncu charged as "wait" stalls (fixed-latency dependencies, 24 % of W1's samples with 7.65 warps an SM to hide them;
results/h100/stall-sites-w1w2-quad-float16-2026-11-28.md). Rewritten, in the device pipeline after quad_statistics:

    acc_c[0] = init; acc_c[1..] = identity (0 for a sum, init itself for a max or min)
    for ... (unrolled): ...; acc_c[f % CHAINS] = acc_c[f % CHAINS] + S[i]      f: the nest's iteration number
    acc[0] = (acc_c[0] + acc_c[1]) + (acc_c[2] + acc_c[3])

with acc_c a per-thread array indexed by constants once the nest is unrolled (it is marked so): registers. A max or
min is exact in any order; a sum is reassociated (an fp32 rounding difference, far below P's fp16/bf16 rounding).

Applied only where the code shows the shape: a one-element "local" float32 accumulator stored with a constant, then,
as the next statement that names it (a barrier may come between), a perfect nest of serial loops of constant extents (at most MAX_ITERATIONS
iterations in all) whose body (possibly under an else-less condition) stores the accumulator exactly once, as
op(acc, X) with op a float32 add, max or min and X not reading it, and reads it nowhere else. Anything else is left
as it was. FLASHGEMM_NO_SPLIT_CHAINS=1 turns it off (A/B).
"""
from __future__ import annotations

import os
from typing import Optional

import tvm
import tvm_ffi
from tvm import tirx

SWITCH = "FLASHGEMM_NO_SPLIT_CHAINS"
CHAINS = 4  # independent chains a statistic: FADD/FMNMX latency (~4 cycles) over one issue a cycle
MAX_ITERATIONS = 64  # the nest is unrolled (the chains' indices must be constants): no longer than this
_OPS = (tirx.Add, tirx.Max, tirx.Min)


def _is_acc_load(e, acc) -> bool:
    return isinstance(e, tvm.ir.TensorLoad) and e.source.same_as(acc)


def _reads(e, acc) -> int:
    n = [0]

    def load(x):
        if x.source.same_as(acc):
            n[0] += 1
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, load),))
    return n[0]


def _names(stmt, acc) -> bool:
    """Whether stmt loads or stores acc, or names it anywhere else (a call's argument)."""
    hit = [False]

    def var(v):
        if v.same_as(acc):
            hit[0] = True

    def store(st):
        if st.buffer.same_as(acc):
            hit[0] = True
    tvm_ffi.structural_walk(stmt, ((tirx.Var, var), (tirx.BufferStore, store)))
    return hit[0]


def _accumulator(s):
    """s = `acc[0] = v` with acc a one-element local float32 buffer and v a constant -> acc, else None."""
    if not (isinstance(s, tirx.BufferStore) and s.buffer.scope() == "local" and str(s.buffer.dtype) == "float32"):
        return None
    if [int(x) if isinstance(x, tirx.IntImm) else -1 for x in s.buffer.shape] != [1]:
        return None
    if not isinstance(s.value, tirx.FloatImm) or len(s.indices) != 1 or not isinstance(s.indices[0], tirx.IntImm):
        return None
    return s.buffer


def _nest(s) -> Optional[tuple]:
    """A perfect nest of serial / unrolled loops of constant extents from 0 -> (loops, body), else None."""
    loops = []
    while isinstance(s, tirx.For):
        if (s.kind not in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED) or s.thread_binding is not None
                or not isinstance(s.min, tirx.IntImm) or s.min.value != 0 or not isinstance(s.extent, tirx.IntImm)):
            return None
        loops.append(s)
        s = s.body
    return (loops, s) if loops else None


def _update(store, acc):
    """store = `acc[0] = op(acc[0], X)` (either operand order), X not reading acc -> (op type, X), else None."""
    if not (isinstance(store, tirx.BufferStore) and store.buffer.same_as(acc)):
        return None
    v = store.value
    if not isinstance(v, _OPS) or str(v.ty.dtype) != "float32":
        return None
    for mine, other in ((v.a, v.b), (v.b, v.a)):
        if _is_acc_load(mine, acc) and not _reads(other, acc):
            return type(v), other
    return None


def _split(init, nest_stmt) -> Optional[list]:
    """[allocation, inits..., the rewritten nest, the combine] for the nest `nest_stmt` that follows `init`, else
    None."""
    acc = _accumulator(init)
    nest = _nest(nest_stmt) if acc is not None else None
    if nest is None:
        return None
    loops, body = nest
    total = 1
    for lp in loops:
        total *= int(lp.extent)
    if total < 2 or total > MAX_ITERATIONS:
        return None
    cond = None
    if isinstance(body, tirx.IfThenElse) and body.else_case is None:
        if _reads(body.condition, acc):
            return None
        cond, body = body.condition, body.then_case
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    updates = [(i, _update(s, acc)) for i, s in enumerate(stmts) if isinstance(s, tirx.BufferStore)
               and s.buffer.same_as(acc)]
    if len(updates) != 1 or updates[0][1] is None:
        return None
    at, (op, x) = updates[0]
    if any(_reads(s, acc) for i, s in enumerate(stmts) if i != at) or any(_reads(lp.extent, acc) for lp in loops):
        return None
    chains = min(CHAINS, total)
    parts = tirx.decl_buffer((chains,), "float32", acc.name + "_chains", scope="local")
    flat = tirx.IntImm("int32", 0)
    for lp in loops:
        flat = flat * int(lp.extent) + lp.loop_var
    slot = [tirx.FloorMod(flat, tirx.IntImm("int32", chains))]
    stmts[at] = tirx.BufferStore(parts, op(tirx.BufferLoad(parts, slot), x), slot)
    new_body = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
    if cond is not None:
        new_body = tirx.IfThenElse(cond, new_body, None)
    for lp in reversed(loops):
        new_body = tirx.For(lp.loop_var, lp.min, lp.extent, tirx.ForKind.UNROLLED, new_body,
                            annotations=lp.annotations)
    identity = tirx.FloatImm("float32", 0.0) if op is tirx.Add else init.value
    inits = [tirx.BufferStore(parts, init.value if k == 0 else identity, [tirx.IntImm("int32", k)])
             for k in range(chains)]
    values = [tirx.BufferLoad(parts, [tirx.IntImm("int32", k)]) for k in range(chains)]
    while len(values) > 1:  # a pairwise tree
        values = [op(values[k], values[k + 1]) if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    combine = tirx.BufferStore(acc, values[0], list(init.indices))
    return [tirx.AllocBuffer(parts)] + inits + [new_body, combine]


def rewrite(func) -> tuple:
    """(func with its statistics' serial chains split, how many were split)."""
    count = [0]

    def on_seq(seq, mutator):
        stmts = [mutator.mutate(s) for s in seq.seq]
        replaced = {}
        for i, s in enumerate(stmts):
            acc = _accumulator(s)
            if acc is None:
                continue
            # the next statement that names the accumulator (a barrier may come between: the one-pass form's)
            j = next((j for j in range(i + 1, len(stmts)) if _names(stmts[j], acc)), None)
            new = _split(s, stmts[j]) if j is not None and j not in replaced else None
            if new is not None:
                replaced[j] = new
                count[0] += 1
        out = []
        for j, s in enumerate(stmts):
            out.extend(replaced.get(j, [s]))
        return tirx.SeqStmt(out)

    body = tvm_ffi.structural_mutate(func.body, ((tirx.SeqStmt, on_seq),))
    return (func.with_body(body) if count[0] else func), count[0]


@tvm.transform.module_pass(opt_level=0, name="flashgemm.SplitChains")
def split_chains(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """rewrite() on every device function, unless FLASHGEMM_NO_SPLIT_CHAINS is set (module doc)."""
    if os.environ.get(SWITCH):
        return mod
    out = {}
    for gv, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            func, _ = rewrite(func)
        out[gv] = func
    return tvm.IRModule(out, attrs=mod.attrs)
