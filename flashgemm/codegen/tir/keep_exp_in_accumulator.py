"""One exp an element in the register sketches: the row sum stores exp(logit - max) into the mma accumulator, and
the normalize step reads it back instead of computing it again.

The register sketches (cuda_registers) keep S in the mma accumulators and recompute E = exp(logit - max) for the row
sum and again for P (the kernel's E block is inlined: a buffer of its own spills).
After LowerWarpMemory the accumulator is a per-thread "local" array, and the device code reads

    m = row_max[r(...)];  for ...: sum += exp(S[i] * c - m)          (sum pass, each element i once)
    m' = row_max[r(...)]; for ...: P[...] = f(exp(S[i..i+l] * c - m'))  (normalize pass)

The pass below rewrites the sum to `S[i] = exp(S[i] * c - m); sum += S[i]` and the normalize step's exp to `S[i]`:
the same values, half the MUFU.EX2 and the scale / subtraction of the second pass gone, with no extra register (S is
dead after P). It is applied to an accumulator only when the device code proves it safe, in program order:

  * every read of S is the max pass (`max(acc, S[i] * c)`), a sum-pass exp or a normalize exp (anything else: no);
  * between two writes of S (mma, mma_fill, stores) the reads come as: max reads, then sums, then normalize exps;
  * the sum pass's loops that do not also enclose the write enumerate each element at most once (constant extents);
  * each normalize exp reads elements the sum pass covered since the last write, with the same c and with its max
    loaded from the same index of the same buffer as the sum pass's max for that element (checked per element,
    the loop variables enumerated and the indices simplified), that max's local copy stored unconditionally, and
    that buffer not stored to between the sum pass and the normalize step. (A store through another buffer over the
    same memory, e.g. the row sums' part of the shared pool, is not seen; the sketches write the max once a row
    tile, before the sum pass, and the GPU numerics tests run every register sketch with the rewrite.)

Anything it cannot prove leaves the kernel as it was. FLASHGEMM_DISABLE_PASSES=keep_exp_in_accumulator turns it
off (A/B).
Alone it makes the W1 kernel slower (P's half-sector stores, no longer paced by the exps, become the limit); with
store_whole_sectors, which the CUDA source hook applies to the kernels this pass rewrote, ~1.4x faster (H100).
"""
from __future__ import annotations

import itertools
import math
from typing import Optional

import tvm
import tvm.sym.analyzer
import tvm_ffi
from tvm import tirx

from flashgemm.codegen.device_pass import each_function

PASS = "keep_exp_in_accumulator"  # its name in cuda_build.PASSES

EXP = tvm.ir.Op.get("tirx.exp")
_MAX_ENUMERATION = 4096  # loop-variable combinations one pattern may enumerate (the W1 sum pass: 128)


class _Unsafe(Exception):
    """The accumulator's reads do not follow the proven shape: leave it alone."""


def is_load(e, buf=None) -> bool:
    """Whether e loads from a buffer (from `buf` when given)."""
    return isinstance(e, tvm.ir.TensorLoad) and (buf is None or e.source.same_as(buf))


def _scalar(e):
    """A value or the value it broadcasts."""
    return e.value if isinstance(e, tirx.Broadcast) else e


def _exp_of_logit(e) -> Optional[tuple]:
    """exp(S[idx] * c - m[0]) (c optional: a constant or a scalar parameter, the runtime forms' scale; c and m
    possibly broadcast) -> (S, idx, c or None, m), else None. S a float32 "local" buffer, m a one-element "local"
    buffer."""
    if not (isinstance(e, tvm.ir.Call) and e.op.same_as(EXP) and isinstance(e.args[0], tirx.Sub)):
        return None
    logit, m_term = e.args[0].a, e.args[0].b
    c = None
    if isinstance(logit, tirx.Mul):
        c = _scalar(logit.b)
        logit = logit.a
        if not isinstance(c, (tirx.FloatImm, tirx.Var)):
            return None
    m = _scalar(m_term)
    if not (is_load(logit) and is_load(m) and len(logit.indices) == 1):
        return None
    s_buf, m_buf = logit.source, m.source
    if s_buf.scope() != "local" or str(s_buf.dtype) != "float32" or m_buf.scope() != "local":
        return None
    if [int(x) for x in m_buf.shape] != [1]:
        return None
    return s_buf, logit.indices[0], c, m_buf


def _same_scale(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, tirx.FloatImm) and isinstance(b, tirx.FloatImm):
        return float(a.value) == float(b.value)
    return a.same_as(b)


def _sum_of_exp(store) -> Optional[tuple]:
    """acc[0] = acc[0] + exp(...) -> _exp_of_logit(...), else None."""
    v = store.value
    if not (isinstance(v, tirx.Add) and is_load(v.a, store.buffer) and len(store.indices) == 1):
        return None
    return _exp_of_logit(v.b)


def _max_read(e, s_buf) -> bool:
    """max(acc, S[i] * c) or max(acc, S[i])."""
    if not isinstance(e, tirx.Max):
        return False
    b = e.b.a if isinstance(e.b, tirx.Mul) else e.b
    return is_load(b, s_buf)


def _loads_of(e, s_buf) -> int:
    n = [0]

    def count(x):
        if is_load(x, s_buf):
            n[0] += 1
    tvm_ffi.structural_walk(e, ((tvm.ir.TensorLoad, count),))
    return n[0]


def uses_var(e, var) -> bool:
    """Whether `var` appears in e (a buffer is a Var in TVM 0.27: S's loads, and `S.data` passed to mma)."""
    hit = [False]

    def check(v):
        if v.same_as(var):
            hit[0] = True
    tvm_ffi.structural_walk(e, ((tirx.Var, check),))
    return hit[0]


def substitute(e, values: dict):
    """e with each Var that is a key of `values` replaced by its value."""
    return tvm_ffi.structural_map(e, ((tirx.Var, lambda v: values.get(v, v)),))


class _Checker:
    """Program-order walk of one device function for one accumulator S (module doc)."""

    def __init__(self, s_buf, params=()):
        self.s = s_buf
        self.params = list(params)  # the function's parameters: a scale that is a Var must be one
        self.analyzer = tvm.sym.analyzer.Analyzer()
        self.loops: list = []  # enclosing For nodes
        self.conditional = 0  # depth of IfThenElse
        self.m_defs: dict = {}  # local m buffer -> (value, under a condition)
        self.write_loops: list = []  # the loops around the last write of S
        self.sum_loops: list = []  # the loops around each sum pass since that write
        self.loop_vars: list = []  # every For variable seen so far
        self.phase = "logits"  # logits -> sums -> normalize, back to logits at a write
        self.covered: dict = {}  # element -> (c, max index) of the sum that stored its exp
        self.max_sources: list = []  # the buffers the sums since the last write loaded their max from
        self.sums = self.uses = 0

    # -- statements
    def stmt(self, s):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, tirx.For):
            self.expr(s.extent)
            self.loops.append(s)
            self.loop_vars.append(s.loop_var)
            self.stmt(s.body)
            self.loops.pop()
        elif isinstance(s, tirx.IfThenElse):
            self.expr(s.condition)
            self.conditional += 1
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.conditional -= 1
        elif isinstance(s, tirx.BufferStore):
            self.store(s)
        elif isinstance(s, tirx.Evaluate):
            if uses_var(s, self.s):  # mma, mma_fill: S written (a call that only read it is as safe here)
                self.write()
        elif isinstance(s, tirx.AttrStmt):
            self.expr(s.value)
            self.stmt(s.body)
        elif isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)) and s.buffer.same_as(self.s):
            self.write()  # (its definition)
        elif hasattr(s, "body"):
            self.stmt(s.body)
        elif uses_var(s, self.s):
            raise _Unsafe(f"S in a {type(s).__name__}")

    def expr(self, e):
        if uses_var(e, self.s):
            raise _Unsafe("S read outside the proven patterns")

    def write(self):
        self.phase, self.covered, self.write_loops, self.sum_loops = "logits", {}, list(self.loops), []
        self.max_sources = []

    def _common(self, loops) -> int:
        """How many outer loops the current position shares with `loops`."""
        n = 0
        while n < min(len(loops), len(self.loops)) and loops[n].same_as(self.loops[n]):
            n += 1
        return n

    def store(self, st):
        if st.buffer.same_as(self.s):
            self.write()
            return
        buf = st.buffer
        if any(src.same_as(buf) for src in self.max_sources):
            raise _Unsafe("the max's buffer written between the sum pass and the normalize step")
        if buf.scope() == "local" and [int(x) for x in buf.shape] == [1]:
            self.m_defs[buf] = (st.value, self.conditional > 0)
        for idx in st.indices:
            self.expr(idx)
        pat = _sum_of_exp(st)
        if pat is not None and pat[0].same_as(self.s):
            if _loads_of(st.value, self.s) != 1:
                raise _Unsafe("a sum that reads S twice")
            self.sum(pat)
            return
        v = st.value
        n = _loads_of(v, self.s)
        if n == 0:
            return
        if _max_read(v, self.s) and n == 1:
            if self.phase != "logits":
                raise _Unsafe("a max read after the sum pass")
            return
        uses = []

        def find(x):
            p = _exp_of_logit(x)
            if p is not None and p[0].same_as(self.s):
                uses.append(p)
        tvm_ffi.structural_walk(v, ((tvm.ir.Call, find),))
        if len(uses) != n:
            raise _Unsafe("S read outside an exp of the logit")
        for p in uses:
            self.use(p)

    # -- the patterns
    def _elements(self, pat):
        """[(element, c, max index)] over the loops entered since S's last write, enumerated."""
        _, idx, c, m_buf = pat
        if isinstance(c, tirx.Var) and not any(c.same_as(p) for p in self.params):
            raise _Unsafe("a scale that is not a parameter of the function")
        m_val, m_cond = self.m_defs.get(m_buf, (None, True))
        if m_val is None or m_cond or not is_load(m_val):
            raise _Unsafe("the max's local copy is not a plain load")
        inner = self.loops[self._common(self.write_loops):]
        extents = []
        for lp in inner:
            if not isinstance(lp.extent, tirx.IntImm) or not isinstance(lp.min, tirx.IntImm):
                raise _Unsafe("a loop of non-constant extent")
            extents.append(range(int(lp.min.value), int(lp.min.value) + int(lp.extent.value)))
        if math.prod(len(r) for r in extents) > _MAX_ENUMERATION:
            raise _Unsafe("too many loop iterations to enumerate")
        if isinstance(idx, tirx.Ramp):
            if not (isinstance(idx.stride, tirx.IntImm) and int(idx.stride.value) == 1):
                raise _Unsafe("a strided vector read")
            base, lanes = idx.base, int(idx.lanes)
        else:
            base, lanes = idx, 1
        out = []
        for vals in itertools.product(*extents):
            env = {lp.loop_var: tirx.IntImm(lp.loop_var.ty, v) for lp, v in zip(inner, vals)}
            b = self.analyzer.simplify(substitute(base, env))
            if not isinstance(b, tirx.IntImm):
                raise _Unsafe("an element index that depends on more than the loops")
            m_idx = tuple(self.analyzer.simplify(substitute(x, env)) for x in m_val.indices)
            if any(uses_var(x, v) for x in m_idx for v in self.loop_vars
                   if not any(v.same_as(lp.loop_var) for lp in self.loops)):
                raise _Unsafe("the max's index names a loop that has ended")
            for lane in range(lanes):
                out.append((int(b.value) + lane, c, m_val.source, m_idx))
        return out

    def sum(self, pat):
        if self.phase == "normalize":
            raise _Unsafe("a sum after the normalize step")
        self.phase = "sums"
        for el, c, src, m_idx in self._elements(pat):
            if el in self.covered:
                raise _Unsafe("an element summed twice")
            self.covered[el] = (c, src, m_idx)
        self.sum_loops.append(list(self.loops))
        self.max_sources += [src for _, src, _ in self.covered.values()
                             if not any(src.same_as(x) for x in self.max_sources)]
        self.sums += 1

    def use(self, pat):
        if self.phase not in ("sums", "normalize"):
            raise _Unsafe("a normalize exp without a sum pass before it")
        self.phase = "normalize"
        # a loop around both a sum and this read, inside the write's loops, would interleave them per iteration,
        # which the enumeration (all iterations at once) does not see
        write_level = self._common(self.write_loops)
        if any(self._common(loops) > write_level for loops in self.sum_loops):
            raise _Unsafe("a normalize exp in a loop of the sum pass")
        for el, c, src, m_idx in self._elements(pat):
            got = self.covered.get(el)
            same_max = got is not None and got[1].same_as(src) and len(got[2]) == len(m_idx) and all(
                self.analyzer.can_prove_equal(a, b) for a, b in zip(got[2], m_idx))
            if not same_max or not _same_scale(got[0], c):
                raise _Unsafe(f"element {el} normalized with another max, scale or no sum")
        self.uses += 1


def _accumulators(func) -> list:
    """The float32 local buffers read by an exp of the logit in a sum pass."""
    found = []

    def visit(st):
        pat = _sum_of_exp(st)
        if pat is not None and not any(b.same_as(pat[0]) for b in found):
            found.append(pat[0])
    tvm_ffi.structural_walk(func.body, ((tirx.BufferStore, visit),))
    return found


def rewrite(func) -> tuple:
    """(func with the rewrite on every accumulator proven safe, names of those accumulators)."""
    safe = []
    for s_buf in _accumulators(func):
        checker = _Checker(s_buf, func.params)
        try:
            checker.stmt(func.body)
        except _Unsafe:
            continue
        if checker.sums and checker.uses:
            safe.append(s_buf)
    if not safe:
        return func, []

    def ours(buf):
        return any(buf.same_as(s) for s in safe)

    def on_store(st, mutator):
        pat = _sum_of_exp(st)
        if pat is None or not ours(pat[0]):
            return mutator.default_mutate(st)
        s_buf, idx = pat[0], pat[1]
        exp_call = st.value.b
        keep = tirx.BufferStore(s_buf, exp_call, [idx])
        add = tirx.BufferStore(st.buffer, tirx.Add(st.value.a, tirx.BufferLoad(s_buf, [idx])), list(st.indices))
        return tirx.SeqStmt([keep, add])

    def on_call(call, mutator):
        pat = _exp_of_logit(call)
        if pat is None or not ours(pat[0]):
            return mutator.default_mutate(call)
        return tirx.BufferLoad(pat[0], [pat[1]])

    body = tvm_ffi.structural_mutate(func.body, ((tirx.BufferStore, on_store), (tvm.ir.Call, on_call)))
    return func.with_body(body), [str(b.name) for b in safe]


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
keep_exp_in_accumulator = each_function("flashgemm.ExpInAccumulator", lambda f: rewrite(f)[0])
