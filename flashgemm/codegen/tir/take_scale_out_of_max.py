"""A constant positive scale taken out of the row max: max_i(x_i * c) = c * max_i(x_i), one multiply a row instead of
one an element.

The kernel's row max reads the scaled logits, so after lowering every kernel's max pass is

    m[0] = LOWEST;  ...;  for ...: [if (...)] m[0] = max(m[0], X * c);

with m a per-thread scalar ("local", constant index) and LOWEST float32's lowest. Where c is a constant > 0 (the
tuning forms, and the shipped kernels specialized on a model's scale: flashgemm.bundle.best.with_scale), this pass
rewrites it to

    m[0] = -inf;  ...;  for ...: m[0] = max(m[0], X);  m[0] = max(m[0] * c, LOWEST);

Exact, not an approximation: rounding is monotonic, so for c > 0 the largest of the rounded products is the rounded
product of the largest x. The -inf start and the closing max keep the no-element case (every iteration predicated
off) at LOWEST, as before. It is applied only where the loop reads m in its own updates and nowhere else, and stores
m only through them; a runtime scale is left alone (its sign is unknown: a negative scale needs the min).

Why only constants (H200, W1's shipped twin edited by hand): with the runtime scale hoisted it gains ~0.5 %, with
max and min of the raw values and a select by the sign ~1 %, with the scale a constant and hoisted ~2.5 %; a constant
scale alone is slightly slower. FLASHGEMM_DISABLE_PASSES=take_scale_out_of_max turns it off (A/B).
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx
import tvm

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import uses_var

PASS = "take_scale_out_of_max"  # its name in cuda_build.PASSES
LOWEST = -3.4028234663852886e38


def _f32(e) -> bool:
    return str(e.ty.dtype) == "float32"


def _scalar_slot(store):
    """(buffer, indices) of a float32 store to a local buffer at constant indices, else None."""
    if not isinstance(store, tirx.BufferStore) or store.buffer.scope() != "local" or not _f32(store.value):
        return None
    if not all(isinstance(i, tirx.IntImm) for i in store.indices):
        return None
    return store.buffer, store.indices


def _same_slot(load, buf, idx) -> bool:
    return isinstance(load, tvm.ir.TensorLoad) and load.source.same_as(buf) and \
        tvm_ffi.structural_equal(load.indices, idx)


def _update_factor(store, buf, idx):
    """c of an update `buf[idx] = max(buf[idx], X * c)` with c a float32 constant > 0, else None."""
    v = store.value
    if not isinstance(v, tirx.Max) or not _same_slot(v.a, buf, idx) or not isinstance(v.b, tirx.Mul):
        return None
    c = v.b.b
    return float(c.value) if isinstance(c, tirx.FloatImm) and float(c.value) > 0.0 else None


def _loop_factor(loop, buf, idx):
    """(c, a load of buf[idx]) when every store to buf in `loop` is an update of that form with the same c and buf is
    read only there, else None."""
    stores, loads, factors, slot_loads = [0], [0], [], []

    def on_store(st):
        if st.buffer.same_as(buf):
            stores[0] += 1
            if _scalar_slot(st) is not None and tvm_ffi.structural_equal(st.indices, idx):
                factors.append(_update_factor(st, buf, idx))
                slot_loads.append(st.value.a if isinstance(st.value, tirx.Max) else None)

    def on_load(ld):
        if ld.source.same_as(buf):
            loads[0] += 1
    tvm_ffi.structural_walk(loop, ((tirx.BufferStore, on_store), (tvm.ir.TensorLoad, on_load)))
    if not factors or len(factors) != stores[0] or loads[0] != stores[0] or None in factors:
        return None
    if len(set(factors)) != 1:
        return None
    # the buffer's variable appears only in those stores and loads (no address taken, no alias)
    probe = tvm_ffi.structural_map(loop, ((tvm.ir.TensorLoad, lambda ld: tirx.FloatImm("float32", 0.0)
                                           if ld.source.same_as(buf) else ld),))
    probe = tvm_ffi.structural_map(probe, ((tirx.BufferStore, lambda st: tirx.Evaluate(0)
                                            if st.buffer.same_as(buf) else st),))
    return None if uses_var(probe, buf) else (factors[0], slot_loads[0])


def _unscaled(loop, buf, idx):
    def on_store(st, mutator):
        if not st.buffer.same_as(buf):
            return mutator.default_mutate(st)
        return tirx.BufferStore(st.buffer, tirx.Max(st.value.a, st.value.b.a), st.indices)
    return tvm_ffi.structural_mutate(loop, ((tirx.BufferStore, on_store),))


def _hoist_in_seq(seq, mutator):
    stmts = [mutator.mutate(s) for s in seq.seq]
    out, i = [], 0
    while i < len(stmts):
        s = stmts[i]
        slot = _scalar_slot(s)
        if slot is None or not isinstance(s.value, tirx.FloatImm) or float(s.value.value) > LOWEST * (1 - 1e-7):
            out.append(s)
            i += 1
            continue
        buf, idx = slot
        # the first statement after the init that mentions the buffer: the max loop, or give up
        j = i + 1
        while j < len(stmts) and not uses_var(stmts[j], buf):
            j += 1
        hit = _loop_factor(stmts[j], buf, idx) if j < len(stmts) and isinstance(stmts[j], tirx.For) else None
        if hit is None:
            out.append(s)
            i += 1
            continue
        out.append(tirx.BufferStore(buf, tirx.FloatImm("float32", float("-inf")), idx))
        out += stmts[i + 1:j]
        out.append(_unscaled(stmts[j], buf, idx))
        c, load = hit
        out.append(tirx.BufferStore(buf, tirx.Max(tirx.Mul(load, tirx.FloatImm("float32", c)),
                                                  tirx.FloatImm("float32", LOWEST)), idx))
        i = j + 1
    return tirx.SeqStmt(out)


def rewrite(func: tirx.PrimFunc) -> tirx.PrimFunc:
    return func.with_body(tvm_ffi.structural_mutate(func.body, ((tirx.SeqStmt, _hoist_in_seq),)))


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
take_scale_out_of_max = each_function("flashgemm.MaxScale", rewrite)
