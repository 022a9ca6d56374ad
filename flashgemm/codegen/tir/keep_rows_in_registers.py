"""The one-pass form's row sweeps read S from shared memory once: the row is kept in registers, and exp computed once.

The row-resident sketches of cuda_space store S into shared memory and run the softmax as three sweeps over each
row, a warp a row, lanes over the columns (W2's shipped kernel, after LowerWarpMemory and rewrite_softmax_arithmetic):

    for c in range(7): if G(c): mx = max(mx, S[I(c)] * s)                      -- sweep 1
    <warp allreduce of mx>
    for c in range(7): if G(c): sum = sum + exp2(S[I(c)] * a - max(m, F) * b)  -- sweep 2
    <warp allreduce of sum>
    for c in range(7): if G(c): P[...] = cast(if_then_else(sum != 0, exp2(S[I(c)] * a - ...) * r, 0))  -- sweep 3

so every element is loaded from shared memory three times and its exp computed twice; ncu puts W2's one-pass kernel
without this pass on exactly that (short-scoreboard waits on shared loads, MIO throttle).
This pass, in the device pipeline after rewrite_softmax_arithmetic, rewrites such a group of sibling sweeps to

    sweep 1:  row[c] = S[I(c)]; mx = max(mx, row[c] * s)
    sweep 2:  row_exp[c] = exp2(row[c] * a - ...); sum = sum + row_exp[c]
    sweep 3:  P[...] = cast(if_then_else(sum != 0, row_exp[c] * r, 0))

with `row` and `row_exp` per-thread arrays of the sweep's trip count, indexed by constants once the sweeps are
unrolled (they are marked so): registers. One shared load and one exp an element.

A group is rewritten only where that is proven from the code, not assumed: the sweeps are statements of one
sequence, each a nest of serial loops of constant extents (at most MAX_ELEMENTS iterations in all) around an
else-less condition (or none) and one store; their nests, conditions and S indices are the same up to the loop
variables' names; the condition and the index use only the loop variables, the launch's thread and block indices and
the function's parameters; S is a float32 shared buffer that no sweep writes, through any view of its allocation
(such a sweep neither joins nor opens a group), and that nothing between the first and the last sweep writes or
passes to a call (any store or call on S's memory: every view of the same allocation counts). The exp of a later
sweep is replaced only where it is the same expression as the one the earlier sweep stored (after S's loads became
`row`), and none of the buffers it reads is written between the two sweeps. A sweep that reads S otherwise keeps its
shared loads (still correct: S did not change). Everything else is left as it was.

FLASHGEMM_DISABLE_PASSES=keep_rows_in_registers turns it off (A/B).
"""
from __future__ import annotations

from typing import Optional

import tvm
import tvm_ffi
from tvm import tirx

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import substitute
from flashgemm.codegen.tir.reduce_statistics_in_quads import storage_root, buffer_storage

PASS = "keep_rows_in_registers"  # its name in cuda_build.PASSES
MAX_ELEMENTS = 32  # registers a thread for the row (and as many for its exps): W2 7, a row of 1024 over a warp 32
_SHARED = ("shared", "shared.dyn")
_EXPS = (tvm.ir.Op.get("tirx.exp"), tvm.ir.Op.get("tirx.exp2"))


class _Sweep:
    """A nest of serial loops of constant extents around an else-less condition and one store, that loads a float32
    shared buffer at one index: the loops, the condition (or None), the store, the buffer, the index."""

    def __init__(self, loops, cond, store, buf, index):
        self.loops, self.cond, self.store, self.buf, self.index = loops, cond, store, buf, index

    @property
    def size(self) -> int:
        n = 1
        for lp in self.loops:
            n *= int(lp.extent)
        return n

    def flat(self):
        """The nest's iteration number (row-major over its loops)."""
        idx = tirx.IntImm("int32", 0)
        for lp in self.loops:
            idx = idx * int(lp.extent) + lp.loop_var
        return idx

    def renamed(self, e, other: "_Sweep"):
        """e with this nest's loop variables replaced by `other`'s."""
        return substitute(e, {a.loop_var: b.loop_var for a, b in zip(self.loops, other.loops)})


def _shared_loads(e) -> list:
    out = []
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, lambda x: out.append(x) if x.source.scope() in _SHARED else None),))
    return out


def _as_sweep(s) -> Optional[_Sweep]:
    """s as a _Sweep (class doc), else None."""
    loops = []
    while isinstance(s, tirx.For):
        if (s.kind not in (tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED) or s.thread_binding is not None
                or not isinstance(s.min, tirx.IntImm) or s.min.value != 0 or not isinstance(s.extent, tirx.IntImm)):
            return None
        loops.append(s)
        s = s.body
    cond = None
    if isinstance(s, tirx.IfThenElse):
        if s.else_case is not None:
            return None
        cond, s = s.condition, s.then_case
    if not loops or not isinstance(s, tirx.BufferStore):
        return None
    loads = _shared_loads(s.value) + [x for i in s.indices for x in _shared_loads(i)]
    if cond is not None:
        loads += _shared_loads(cond)
    if not loads:
        return None
    buf, index = loads[0].source, loads[0].indices
    if str(buf.dtype) != "float32" or len(index) != 1 or not all(
            x.source.same_as(buf) and tvm_ffi.structural_equal(x.indices[0], index[0]) for x in loads):
        return None
    if s.buffer.same_as(buf):
        return None
    sweep = _Sweep(loops, cond, s, buf, index[0])
    return sweep if sweep.size <= MAX_ELEMENTS else None


def _invariant(e, allowed: set) -> bool:
    """Whether every variable of e is in `allowed` (loop variables of the nest, launch indices, parameters) and e
    loads nothing."""
    ok = [True]

    def var(v):
        if not any(v.same_as(a) for a in allowed):
            ok[0] = False

    def load(_x):
        ok[0] = False
    tvm_ffi.structural_walk(e, ((tirx.Var, var), (tvm.ir.TensorLoad, load)))
    return ok[0]


def _same_nest(a: _Sweep, b: _Sweep) -> bool:
    """b iterates as a does, under the same condition, loading S at the same index (up to loop names)."""
    if not a.buf.same_as(b.buf) or len(a.loops) != len(b.loops):
        return False
    if any(int(x.extent) != int(y.extent) for x, y in zip(a.loops, b.loops)):
        return False
    if (a.cond is None) != (b.cond is None):
        return False
    if a.cond is not None and not tvm_ffi.structural_equal(b.renamed(b.cond, a), a.cond):
        return False
    return tvm_ffi.structural_equal(b.renamed(b.index, a), a.index)


def _touches(stmt, bufs: list) -> bool:
    """Whether stmt stores to one of `bufs` or names one in a call's arguments (a pointer, or a load inside a call:
    conservatively a write)."""
    hit = [False]

    def mine(b) -> bool:
        return any(b.same_as(x) for x in bufs)

    def store(s):
        if mine(s.buffer):
            hit[0] = True

    def call(c):
        def var(v):
            if mine(v):
                hit[0] = True
        for arg in c.args:
            tvm_ffi.structural_walk(arg, ((tirx.Var, var),))

    tvm_ffi.structural_walk(stmt, ((tirx.BufferStore, store), (tvm.ir.Call, call)))
    return hit[0]


def _stores_to(sw: _Sweep, bufs: list) -> bool:
    return any(sw.store.buffer.same_as(b) for b in bufs)


def _buffers_read(e) -> list:
    out = []
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, lambda x: out.append(x.source)),))
    return out


def _reads(e, buf) -> bool:
    hit = [False]

    def load(x):
        if x.source.same_as(buf):
            hit[0] = True
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, load),))
    return hit[0]


def _exp_calls(e, row) -> list:
    """The exp / exp2 calls of e that read `row`."""
    out = []

    def call(c):
        if any(c.op.same_as(op) for op in _EXPS) and _reads(c, row):
            out.append(c)
    tvm_ffi.structural_walk(e, ((tvm.ir.Call, call),))
    return out


def _replace(e, old, new):
    """e with every subexpression structurally equal to `old` replaced by `new`."""
    def visit(x, mutator):
        if tvm_ffi.structural_equal(x, old):
            return new
        return mutator.default_mutate(x)
    return tvm_ffi.structural_mutate(e, ((type(old), visit),))


def _load_replacer(buf, new):
    """A structural_mutate callback: loads of buf -> new (a factory: the callback takes exactly two arguments)."""
    def load(x, mutator):
        return new if x.source.same_as(buf) else mutator.default_mutate(x)
    return load


def _unrolled(loops, body):
    for lp in reversed(loops):
        body = tirx.For(lp.loop_var, lp.min, lp.extent, tirx.ForKind.UNROLLED, body, annotations=lp.annotations)
    return body


def _memory(storage: list, buf) -> list:
    """buf and every other buffer over the same allocation; storage: the function's (buffer, allocation) pairs
    (reduce_statistics_in_quads.buffer_storage)."""
    root = storage_root(storage, buf)
    return [buf] + [b for b, r in storage if r.same_as(root)]


class _Group:
    """The sweeps of one sequence that share S, nest, condition and index with the first (module doc)."""

    def __init__(self, first: _Sweep, at: int, storage: list):
        self.first, self.at, self.storage = first, at, storage
        self.members = [(at, first)]

    def memory(self, buf) -> list:
        return _memory(self.storage, buf)


def _rewrite_group(seq: list, group: _Group, serial: list) -> list:
    """seq with the group's sweeps rewritten (module doc); serial[0] numbers the new buffers."""
    first = group.first
    n = first.size
    name = f"row_{serial[0]}"
    serial[0] += 1
    row = tirx.decl_buffer((n,), "float32", name, scope="local")
    row_exp = tirx.decl_buffer((n,), "float32", name + "_exp", scope="local")

    def to_first(e, sw):
        return substitute(e, {b.loop_var: a.loop_var for a, b in zip(first.loops, sw.loops)})

    def to_member(e, sw):
        return substitute(e, {a.loop_var: b.loop_var for a, b in zip(first.loops, sw.loops)})

    # S's loads -> row[i] in every sweep
    values = {}
    for at, sw in group.members:
        load = _load_replacer(sw.buf, tirx.BufferLoad(row, [sw.flat()]))
        values[at] = (tvm_ffi.structural_mutate(sw.store.value, ((tvm.ir.TensorLoad, load),)),
                      [tvm_ffi.structural_mutate(i, ((tvm.ir.TensorLoad, load),)) for i in sw.store.indices])
    # the first sweep with one exp of the row stores it; later sweeps with the same exp, and nothing
    # it reads written in between, read it back (in the first sweep's loop names: exp_expr)
    exp_at, exp_expr, reusers = None, None, []
    for at, sw in group.members:
        exps = _exp_calls(values[at][0], row)
        if exp_expr is None:
            if len(exps) == 1:
                exp_at, exp_expr = at, to_first(exps[0], sw)
            continue
        mine = to_member(exp_expr, sw)
        read = [b for b in _buffers_read(mine) if not b.same_as(row)]
        between = seq[exp_at + 1:at]
        # (the exp's own sweep counts too, by its store: its calls name what the exp reads)
        exp_sweep = dict(group.members)[exp_at]
        if any(tvm_ffi.structural_equal(c, mine) for c in exps) and \
                not any(_touches(s, group.memory(b)) for s in between for b in read) and \
                not any(_stores_to(exp_sweep, group.memory(b)) for b in read):
            reusers.append(at)
    if not reusers:
        exp_at = None
    out = list(seq)
    for at, sw in group.members:
        flat = sw.flat()
        value, indices = values[at]
        stmts = []
        if at == group.at:
            stmts.append(tirx.BufferStore(row, tirx.BufferLoad(sw.buf, [sw.index]), [flat]))
        if at == exp_at or at in reusers:
            mine = to_member(exp_expr, sw)
            if at == exp_at:
                stmts.append(tirx.BufferStore(row_exp, mine, [flat]))
            value = _replace(value, mine, tirx.BufferLoad(row_exp, [flat]))
        stmts.append(tirx.BufferStore(sw.store.buffer, value, indices))
        body = stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)
        if sw.cond is not None:
            body = tirx.IfThenElse(sw.cond, body, None)
        out[at] = _unrolled(sw.loops, body)
    allocs = [tirx.AllocBuffer(row)] + ([tirx.AllocBuffer(row_exp)] if exp_at is not None else [])
    return out[:group.at] + allocs + out[group.at:]


def _groups(seq: list, allowed: set, storage: list) -> list:
    """The rewritable groups of a sequence's statements (module doc)."""
    groups, open_ = [], []
    for at, s in enumerate(seq):
        sw = _as_sweep(s)
        joined = False
        # a sweep that itself stores to S's allocation (through any view) neither joins nor opens a group: the rows
        # kept in registers would go stale. (Its one store is its only write: the calls in its value are pure, and
        # _touches would count their loads of S as writes.)
        if sw is not None and not any(_stores_to(sw, g.memory(g.first.buf)) for g in open_):
            for g in open_:
                if _same_nest(g.first, sw):
                    g.members.append((at, sw))
                    joined = True
                    break
        if sw is not None and not joined and not _stores_to(sw, _memory(storage, sw.buf)):
            loop_vars = {lp.loop_var for lp in sw.loops}
            scope = allowed | loop_vars
            if (sw.cond is None or _invariant(sw.cond, scope)) and _invariant(sw.index, scope):
                g = _Group(sw, at, storage)
                open_.append(g)
                groups.append(g)
                joined = True
        # a statement that writes a group's S (other than by its own sweeps' loads) closes that group
        for g in list(open_):
            if joined and any(m[0] == at for m in g.members):
                continue
            if _touches(s, g.memory(g.first.buf)):
                open_.remove(g)
    return [g for g in groups if len(g.members) > 1]


def rewrite(func) -> tuple:
    """(func with its one-pass row sweeps reading S once, how many groups were rewritten)."""
    launch = []

    def attr(s):
        if s.attr_key == "thread_extent":
            launch.append(s.node.var)
    tvm_ffi.structural_walk(func.body, ((tirx.AttrStmt, attr),))
    allowed = set(launch) | {p for p in func.params}
    storage = buffer_storage(func)
    count, serial = [0], [0]

    def on_seq(seq, mutator):
        stmts = [mutator.mutate(s) for s in seq.seq]
        for g in reversed(_groups(stmts, allowed, storage)):  # (from the last: earlier positions stay valid)
            stmts = _rewrite_group(stmts, g, serial)
            count[0] += 1
        return tirx.SeqStmt(stmts)

    body = tvm_ffi.structural_mutate(func.body, ((tirx.SeqStmt, on_seq),))
    return (func.with_body(body) if count[0] else func), count[0]


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
keep_rows_in_registers = each_function("flashgemm.RowRegisters", lambda f: rewrite(f)[0])
