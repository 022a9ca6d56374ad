"""Row statistics reduced over a quad by warp shuffles, and combined by every thread that reads them.

The register sketches (cuda_registers) keep S in the mma accumulators. A fragment row lies in the 4 lanes of a quad
(lane % 4) of each of the WN warps of a warp row, and TIR cannot bind one loop to both a row and a quad lane, so each
statistic is rfactor-ed over (warp column, quad lane): every lane stores the partial over its own fragment elements
to shared memory, and then, between two barriers, one thread a row (the first warp) combines the row's WN*4
partials and stores the statistic, which the other warps wait for and read back. After LowerWarpMemory:

    RF[row * s + wn*4 + lane%4] = partial[0]                       every lane (row from the lane and loops)
    if (ty < 1) { C[0] = init }  __syncthreads()
    for r < WN*4: if (ty < 1) { C[0] = op(C[0], RF[row' * s + r]) }
    if (ty < 1) { ST[row'] = C[0] }  __syncthreads()
    ...  x[0] = ST[row]                                            each reader

This pass, in the device pipeline after the exp and arithmetic rewrites, makes it:

    p = op(partial, shfl_xor(partial, 1)); p = op(p, shfl_xor(p, 2))     the quad's four partials, in every lane
    if (lane % 4 == 0) { RF[row * WN + wn] = p }
    __syncthreads()
    ...  x[0] = op(RF[row * WN + 0], ..., RF[row * WN + WN - 1])  each reader combines its own row

One barrier and the one-warp combine gone a statistic (W1's kernel: 10 -> 6 barriers, no warp waiting on warp 0's
16 serial loads a row): W1's fp16 kernel ~10 % faster on the H200.

It is applied to a statistic only where the lowered code proves it safe (`_Family.check`), else the kernel is left
as it was:
  * the combine has exactly the shape above (guard, init, barrier, a loop of R = 4*WN loads of RF at consecutive
    indices, one store of ST, barrier), in every place it occurs (the row-tile loop and its peeled last iteration);
    its init is op's identity; ST's element is the combine's row, and RF's row stride s follows from it;
  * RF is written only by plain stores of a one-element local partial, read only by the combine; ST only written by
    the combine and read only by whole-value copies into one-element local buffers; C used only by the combine;
  * at every partial store, for every quad (lanes 4a..4a+3): the 4 lanes write 4 consecutive slots of one row,
    starting at a multiple of 4, below R (proved with TVM's analyzer over the loop and thread ranges); threadIdx.x
    has extent 32 (one warp, so shfl_xor reaches the quad) and no condition around the store depends on it, so all
    32 lanes shuffle together;
  * after the rewrite, between any read of RF and the next store to it, and between any store and the next read, in
    program order around loops, there is a barrier that no condition encloses.
Only statistics in static shared memory (their own buffers: move_statistics_to_static_shared) are seen; the recompute
forms, whose statistics share the dynamic pool, are left alone.

FLASHGEMM_DISABLE_PASSES=reduce_statistics_in_quads turns it off (A/B: benchmarks/shipped_forms_ab.py
--combined-statistics).
"""
from __future__ import annotations

import tvm
import tvm.sym.analyzer
import tvm_ffi
from tvm import tirx

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import is_load, substitute, uses_var

PASS = "reduce_statistics_in_quads"  # its name in cuda_build.PASSES
SYNC = tvm.ir.Op.get("tirx.tvm_storage_sync")
SHARED = "shared"
QUAD = 4
WARP = 32
_FULL_MASK = 0xFFFFFFFF
_LOWEST = -3.4028234663852886e38  # float32's lowest: the max's identity in the kernel


class _Skip(Exception):
    """A statistic whose code does not have the proven shape: left alone."""


def _is_sync(s) -> bool:
    return (isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) and s.value.op.same_as(SYNC)
            and str(s.value.args[0].value).startswith("shared"))


def _one_local(buf) -> bool:
    return buf.scope() == "local" and [int(x) for x in buf.shape] == [1]


def _guarded_store(s, guard=None):
    """`if (guard) { B[i] = v }` (no else) -> (guard, store), else None; the guard structurally equal to `guard`."""
    if not (isinstance(s, tirx.IfThenElse) and s.else_case is None and isinstance(s.then_case, tirx.BufferStore)):
        return None
    if guard is not None and not tvm_ffi.structural_equal(s.condition, guard):
        return None
    return s.condition, s.then_case


def _reduce_op(value, acc):
    """op(C[0], x) with C = acc -> ("max" | "sum", x), else None."""
    if isinstance(value, tirx.Max) and is_load(value.a, acc):
        return "max", value.b
    if isinstance(value, tirx.Add) and is_load(value.a, acc):
        return "sum", value.b
    return None


def _is_identity(op: str, init) -> bool:
    if not isinstance(init, tirx.FloatImm):
        return False
    v = float(init.value)
    return v == 0.0 if op == "sum" else (v == float("-inf") or v <= _LOWEST)


def _apply(op: str, a, b):
    return tirx.Max(a, b) if op == "max" else tirx.Add(a, b)


def _tree(op: str, xs: list):
    """op over xs, pairwise (a balanced tree: fewer dependent adds than a chain)."""
    while len(xs) > 1:
        xs = [_apply(op, xs[i], xs[i + 1]) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
    return xs[0]


class _Combine:
    """One place of a statistic's combine: seq[at .. at+4] of a SeqStmt (module doc)."""

    def __init__(self, seq, at):
        init, sync1, loop, final, sync2 = seq[at:at + 5]
        got = _guarded_store(init)
        if got is None or not _is_sync(sync1) or not _is_sync(sync2) or not isinstance(loop, tirx.For):
            raise _Skip("not a combine")
        self.guard, init_store = got
        self.acc = init_store.buffer
        if not _one_local(self.acc):
            raise _Skip("the combine's accumulator is not a one-element local buffer")
        body = _guarded_store(loop.body, self.guard)
        fin = _guarded_store(final, self.guard)
        if body is None or fin is None or not body[1].buffer.same_as(self.acc):
            raise _Skip("the combine's loop or store is not guarded like its init")
        red = _reduce_op(body[1].value, self.acc)
        if red is None or not is_load(red[1]) or len(red[1].indices) != 1:
            raise _Skip("the combine's loop is not op(C[0], RF[i])")
        self.op, rf_load = red
        if not _is_identity(self.op, init_store.value):
            raise _Skip("the combine's init is not its op's identity")
        self.rf, self.rf_index, self.r = rf_load.source, rf_load.indices[0], loop.loop_var
        if not (isinstance(loop.min, tirx.IntImm) and int(loop.min.value) == 0 and isinstance(loop.extent, tirx.IntImm)):
            raise _Skip("the combine's loop does not run 0..R")
        self.n_partials = int(loop.extent.value)
        st = fin[1]
        if not (is_load(st.value, self.acc) and len(st.indices) == 1):
            raise _Skip("the combine's store is not ST[row] = C[0]")
        self.st, self.st_index = st.buffer, st.indices[0]
        self.stmts = [init, sync1, loop, final, sync2]


def _find_combines(func) -> list:
    found = []

    def visit(seq):
        for at in range(len(seq.seq) - 4):
            try:
                found.append(_Combine(seq.seq, at))
            except _Skip:
                pass
    tvm_ffi.structural_walk(func.body, ((tirx.SeqStmt, visit),))
    return found


class _Context:
    """Loops, thread extents and conditions around each statement of interest (one program-order walk)."""

    def __init__(self, func, rf, st, acc):
        self.rf, self.st, self.acc = rf, st, acc
        self.threads: dict = {}  # thread tag -> (var, extent)
        self.partials: list = []  # (store, loops, conditions)
        self.readers: list = []  # (store, loops) x[0] = ST[h]
        self._loops, self._conds = [], []
        self.walk(func.body)

    def walk(self, s):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.walk(x)
        elif isinstance(s, tirx.For):
            self._loops.append(s)
            self.walk(s.body)
            self._loops.pop()
        elif isinstance(s, tirx.IfThenElse):
            self._conds.append(s.condition)
            self.walk(s.then_case)
            if s.else_case is not None:
                self.walk(s.else_case)
            self._conds.pop()
        elif isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent":
                iv = s.node
                self.threads[str(iv.thread_tag)] = (iv.var, s.value)
            self.walk(s.body)
        elif isinstance(s, tirx.BufferStore):
            self.store(s)
        elif hasattr(s, "body") and not isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            self.walk(s.body)

    def store(self, s):
        if s.buffer.same_as(self.rf):
            if not (is_load(s.value) and _one_local(s.value.source) and len(s.indices) == 1):
                raise _Skip("RF written by something other than a partial")
            self.partials.append((s, list(self._loops), list(self._conds)))
        elif is_load(s.value, self.st):
            if not (_one_local(s.buffer) and len(s.value.indices) == 1):
                raise _Skip("ST read into something other than a one-element local")
            self.readers.append((s, list(self._loops)))


def _uses(func, buf) -> int:
    """How many loads and stores of buf (its data Var) func has."""
    n = [0]

    def load(e):
        if e.source.same_as(buf):
            n[0] += 1

    def store(s):
        if s.buffer.same_as(buf):
            n[0] += 1
    tvm_ffi.structural_walk(func.body, ((tvm.ir.TensorLoad, load), (tirx.BufferStore, store)))
    return n[0]


BUFFER_DATA = tvm.ir.Op.get("tirx.buffer_data")


def buffer_storage(func) -> list:
    """[(buffer, the buffer whose memory it is)] for every buffer of func: a DeclBuffer's buffer is a view of the
    buffers its data expression names (buffer_data(B), maybe offset), followed to an allocation."""
    decls, views = [], []
    tvm_ffi.structural_walk(func.body, ((tirx.DeclBuffer, decls.append),))
    for d in decls:  # (outside the walk: a walk in a walk's callback is not reentrant)
        named = []
        tvm_ffi.structural_walk(d.data, ((tvm.ir.Call, lambda c: named.extend(c.args[:1]) if c.op.same_as(BUFFER_DATA)
                                          else None),))
        if named:
            views.append((d.buffer, named[0]))
    seen = []

    def see(b):
        if not any(b.same_as(x) for x in seen):
            seen.append(b)
    tvm_ffi.structural_walk(func.body, ((tvm.ir.TensorLoad, lambda e: see(e.source)),
                                        (tirx.BufferStore, lambda st: see(st.buffer)),
                                        (tirx.AllocBuffer, lambda st: see(st.buffer)),
                                        (tirx.DeclBuffer, lambda st: see(st.buffer))))

    def root(b):
        for _ in range(len(views) + 1):
            nxt = next((base for view, base in views if view.same_as(b)), None)
            if nxt is None or nxt.same_as(b):
                return b
            b = nxt
        return b
    return [(b, root(b)) for b in seen]


def storage_root(storage: list, buf):
    """The buffer whose memory `buf` is (buffer_storage's pairs), else buf itself."""
    return next((r for b, r in storage if b.same_as(buf)), buf)


def _aliases(func, buf) -> list:
    """The other buffers of func over buf's memory. TVM's storage planner lets a statistic's partials reuse the other
    statistic's (dead) partials through a view of its allocation: after the rewrite both would be live at once."""
    storage = buffer_storage(func)
    mine = storage_root(storage, buf)
    return [b for b, r in storage if r.same_as(mine) and not b.same_as(buf)]


def _loads_in(stmts, buf) -> int:
    n = [0]

    def load(e):
        if e.source.same_as(buf):
            n[0] += 1
    for s in stmts:
        tvm_ffi.structural_walk(s, ((tvm.ir.TensorLoad, load),))
    return n[0]


class _Family:
    """A statistic: its partials buffer RF, its buffer ST, its combine accumulator C, and every place of its combine."""

    def __init__(self, func, combines):
        first = combines[0]
        self.func, self.combines = func, combines
        self.rf, self.st, self.acc, self.op, self.n_partials = first.rf, first.st, first.acc, first.op, first.n_partials
        self.wn = self.n_partials // QUAD
        self.stride = None

    def check(self):
        """Prove the rewrite safe (module doc), or raise _Skip. Sets the row stride s of RF."""
        if self.rf.scope() != SHARED or self.st.scope() != SHARED:
            raise _Skip("statistics outside static shared memory")
        if str(self.rf.dtype) != "float32" or self.n_partials % QUAD or self.n_partials == 0:
            raise _Skip("not R = 4*WN float32 partials")
        for c in self.combines:
            if (c.op, c.n_partials) != (self.op, self.n_partials) or not c.acc.same_as(self.acc):
                raise _Skip("the combine's places differ")
        for buf in (self.rf, self.st, self.acc):
            if _aliases(self.func, buf):
                raise _Skip(f"{buf.name}'s memory is shared with another buffer (the planner's reuse)")
        ctx = _Context(self.func, self.rf, self.st, self.acc)
        tx = ctx.threads.get("threadIdx.x")
        if tx is None or not isinstance(tx[1], tirx.IntImm) or int(tx[1].value) != WARP:
            raise _Skip("threadIdx.x is not one warp")
        self.tx = tx[0]
        # RF read only by the combines; C used only there; ST stored only there
        if _loads_in([self.func.body], self.rf) != len(self.combines):
            raise _Skip("RF read outside the combine")
        acc_uses = sum(_loads_in(c.stmts, self.acc) + 2 for c in self.combines)  # (its init and loop: 2 stores)
        if _uses(self.func, self.acc) != acc_uses:
            raise _Skip("the combine's accumulator used elsewhere")
        st_stores = _uses(self.func, self.st) - len(ctx.readers)
        if st_stores != len(self.combines) or not ctx.partials or not ctx.readers:
            raise _Skip("ST written outside the combine, or nothing to rewrite")
        ana = tvm.sym.analyzer.Analyzer()
        for var, ext in ctx.threads.values():
            ana.bind(var, tvm.ir.Range.from_min_extent(0, ext))
        self.stride = self._stride(ana)
        for store, loops, conds in ctx.partials:
            self._check_partial(store, loops, conds, ana)
        self.ctx = ctx

    def _stride(self, ana) -> int:
        """RF's row stride s: under the combine's guard, RF's index at r = 0 is ST's index (the row) times s, and r
        steps one slot. Same s at every place."""
        strides = set()
        for c in self.combines:
            idx0 = substitute(c.rf_index, {c.r: tirx.IntImm("int32", 0)})
            step = ana.simplify(substitute(c.rf_index, {c.r: c.r + 1}) - c.rf_index)
            if not (isinstance(step, tirx.IntImm) and int(step.value) == 1):
                raise _Skip("the combine does not read consecutive partials")
            with ana.constraint_scope(c.guard):
                row = ana.simplify(c.st_index)
                base = ana.simplify(idx0)
                d_row = ana.simplify(substitute(row, {self.tx: self.tx + 1}) - row)
                d_base = ana.simplify(substitute(base, {self.tx: self.tx + 1}) - base)
                if not (isinstance(d_row, tirx.IntImm) and isinstance(d_base, tirx.IntImm) and int(d_row.value) > 0
                        and int(d_base.value) % int(d_row.value) == 0):
                    raise _Skip("the combine's row is not a linear function of threadIdx.x")
                s = int(d_base.value) // int(d_row.value)
                if s < self.n_partials or not ana.can_prove_equal(base, row * s):
                    raise _Skip("RF is not [row, s >= R]")
            strides.add(s)
        if len(strides) != 1:
            raise _Skip("the combine's places use different strides")
        return strides.pop()

    def _check_partial(self, store, loops, conds, ana):
        if any(uses_var(cond, self.tx) for cond in conds):
            raise _Skip("a partial store under a condition on threadIdx.x: the quad would not shuffle together")
        a, b = tirx.Var("quad", "int32"), tirx.Var("quad_lane", "int32")
        with ana.constraint_scope(tirx.all(*conds) if conds else tirx.const(True, "bool")):
            for lp in loops:
                ana.bind(lp.loop_var, tvm.ir.Range.from_min_extent(lp.min, lp.extent))
            ana.bind(a, tvm.ir.Range.from_min_extent(0, WARP // QUAD))
            ana.bind(b, tvm.ir.Range.from_min_extent(0, QUAD))
            idx = store.indices[0]
            lane0 = substitute(idx, {self.tx: a * QUAD})
            laneb = substitute(idx, {self.tx: a * QUAD + b})
            s = self.stride
            proofs = (ana.can_prove_equal(tirx.floordiv(laneb, s), tirx.floordiv(lane0, s)),
                      ana.can_prove_equal(tirx.floormod(laneb, s), tirx.floormod(lane0, s) + b),
                      ana.can_prove_equal(tirx.floormod(tirx.floormod(lane0, s), QUAD), 0),
                      ana.can_prove(tirx.floormod(lane0, s) + (QUAD - 1) < self.n_partials))
            if not all(proofs):
                raise _Skip(f"a partial store's quad lanes do not write one row's consecutive slots {proofs}")

    # ---- the rewrite
    def partial(self, store):
        """RF[idx] = p[0] -> p[0] = op(p, shfl_xor(p, 1)); p[0] = op(p, shfl_xor(p, 2)); lane 0: RF[row*WN + wn]."""
        p = store.value
        mask = tirx.const(_FULL_MASK, "uint32")
        stmts = []
        for lane_mask in (1, 2):
            cur = tirx.BufferLoad(p.source, list(p.indices))
            shuffled = tirx.op.tvm_warp_shuffle_xor(mask, cur, lane_mask, WARP, WARP)
            stmts.append(tirx.BufferStore(p.source, _apply(self.op, cur, shuffled), list(p.indices)))
        idx = store.indices[0]
        row = tirx.floordiv(idx, self.stride)
        wn = tirx.floordiv(tirx.floormod(idx, self.stride), QUAD)
        compact = tirx.BufferStore(self.rf, tirx.BufferLoad(p.source, list(p.indices)), [row * self.wn + wn])
        stmts.append(tirx.IfThenElse(tirx.floormod(self.tx, QUAD) == 0, compact, None))
        return tirx.SeqStmt(stmts)

    def reader(self, store):
        """x[0] = ST[h] -> x[0] = op over the row's WN quad partials."""
        h = store.value.indices[0]
        loads = [tirx.BufferLoad(self.rf, [h * self.wn + w]) for w in range(self.wn)]
        return tirx.BufferStore(store.buffer, _tree(self.op, loads), list(store.indices))


def _linear_events(stmt, family_bufs, storage=()) -> list:
    """Program-order events of the function body: ("sync",), ("sync?",) a barrier under a condition,
    ("read", mem), ("write", mem) for the memory of the buffers given (their allocations: storage, from buffer_storage),
    through any buffer over it; each loop's body twice (its back edge)."""
    out = []

    def walk(s, conditional):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                walk(x, conditional)
        elif isinstance(s, tirx.For):
            walk(s.body, conditional)
            walk(s.body, conditional)
        elif isinstance(s, tirx.IfThenElse):
            reads(s.condition)
            walk(s.then_case, True)
            if s.else_case is not None:
                walk(s.else_case, True)
        elif _is_sync(s):
            out.append(("sync?",) if conditional else ("sync",))
        elif isinstance(s, tirx.BufferStore):
            reads(s.value)
            for i in s.indices:
                reads(i)
            mem = storage_root(storage, s.buffer)
            if any(mem.same_as(b) for b in family_bufs):
                out.append(("write", mem))
        elif isinstance(s, tirx.AttrStmt):
            walk(s.body, conditional)
        elif isinstance(s, tirx.Evaluate):
            reads(s.value)
        elif hasattr(s, "body") and not isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            walk(s.body, conditional)

    def reads(e):
        def load(x):
            mem = storage_root(storage, x.source)
            if any(mem.same_as(b) for b in family_bufs):
                out.append(("read", mem))
        tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, load),))
    walk(stmt, False)
    return out


def barriers_separate(stmt, bufs, storage=()) -> bool:
    """Whether, for the memory of each buffer of bufs, every read and the next write, and every write and the next read,
    have an unconditional barrier between them in program order (loops taken twice: module doc). Writes after writes
    and reads after reads need none (the partials' slots are distinct: _Family.check)."""
    seen: list = []  # (buffer, kind) since the last barrier
    storage = list(storage)
    bufs = [storage_root(storage, b) for b in bufs]
    for ev in _linear_events(stmt, bufs, storage):
        if ev[0] == "sync":
            seen = []
        elif ev[0] == "sync?":
            continue
        else:
            kind, buf = ev
            if any(b.same_as(buf) and k != kind for b, k in seen):
                return False
            seen.append((buf, kind))
    return True


def rewrite(func) -> tuple:
    """(func with every statistic proven safe rewritten, names of their partial buffers)."""
    combines = _find_combines(func)
    families: list = []
    for c in combines:
        fam = next((f for f in families if f[0].rf.same_as(c.rf)), None)
        if fam is None:
            families.append([c])
        else:
            fam.append(c)
    done = []
    for group in families:
        fam = _Family(func, group)
        try:
            fam.check()
        except _Skip:
            continue
        try:
            new = _apply_family(func, fam)
        except _Skip:
            continue
        if not barriers_separate(new.body, [fam.rf], buffer_storage(new)):
            continue
        func = new
        done.append(str(fam.rf.name))
    return func, done


def _apply_family(func, fam: _Family):
    """func with fam's partial stores and readers rewritten, its combines (but their first barrier) and the
    allocations of ST and C removed."""
    partials = [s for s, _, _ in fam.ctx.partials]
    readers = [s for s, _ in fam.ctx.readers]
    dropped = [c.stmts[k] for c in fam.combines for k in (0, 2, 3, 4)]

    def gone(s) -> bool:
        if any(s.same_as(d) for d in dropped):
            return True
        return isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)) and (s.buffer.same_as(fam.st)
                                                                      or s.buffer.same_as(fam.acc))

    def on_seq(seq, mutator):
        keep = [mutator.mutate(s) for s in seq.seq if not gone(s)]
        return keep[0] if len(keep) == 1 else tirx.SeqStmt(keep)

    def on_store(s, mutator):
        if any(s.same_as(p) for p in partials):
            return fam.partial(s)
        if any(s.same_as(r) for r in readers):
            return fam.reader(s)
        return mutator.default_mutate(s)

    body = tvm_ffi.structural_mutate(func.body, ((tirx.SeqStmt, on_seq), (tirx.BufferStore, on_store)))
    if _uses(func.with_body(body), fam.st) or _uses(func.with_body(body), fam.acc):
        raise _Skip("ST or C still used after the rewrite")
    return func.with_body(body)


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
reduce_statistics_in_quads = each_function("flashgemm.QuadStatistics", lambda f: rewrite(f)[0])


def rewritten(func) -> list:
    """Names of the partial buffers rewrite() would rewrite in func (tests, tools)."""
    return rewrite(func)[1]

