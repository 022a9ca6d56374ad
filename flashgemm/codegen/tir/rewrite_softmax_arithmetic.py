"""Fewer instructions an element in the softmax of every CUDA kernel: exp as one FFMA + MUFU.EX2, and one reciprocal
a row instead of a division an element.

Two algebraic rewrites of the device code (a pass of the device pipeline, after keep_exp_in_accumulator):

  * exp(X - m) -> exp2(X * L - max(m, M_FLOOR) * L), L = log2(e), with X = a * c folded to a * (c * L) for a
    constant or parameter c. nvcc's fast-math expf is ex2.approx(x * L) of the rounded x = a * c - m: an FMUL, an
    FADD and an FMUL before the MUFU; here it is one FFMA (m * L and c * L are computed once, outside the element
    loops). nvcc cannot do this itself: --use_fast_math does not allow reassociation. M_FLOOR keeps m * L finite
    where m is the max's identity, float32's lowest (fully masked rows and split-N chunks): their masked logits
    (-inf) still give exp 0, not exp2(-inf + inf) = NaN.
  * a / b with b a load at constant indices of a "local" (register) buffer whose variable appears only in its
    allocation, loads and stores (no alias, no address taken), inside a loop that stores none of it -> a * r,
    r = 1 / b bound just before the outermost such loop. The normalize step's division by the row sum is a
    div.approx (MUFU.RCP + FMUL) an element or a pair: nvcc does not hoist it out of the per-element `if (sum != 0)`
    branches (the W1 kernel had 118 MUFU.RCP for 256 elements). r is computed whether or not a branch uses it:
    a reciprocal of 0 is inf, not a fault.

Both compute what fast math computed, rounded in a different place: exp's argument and the quotient change by an
ulp or two of fp32, far below an fp16/bf16 P's rounding. The one difference is at fp32's range limit: a logit beyond
+-2.3e38 overflows X * L, so a row whose max logit lies there is NaN (inf - inf), as if that logit were +inf. Only
float32 expressions are touched. FLASHGEMM_DISABLE_PASSES=rewrite_softmax_arithmetic turns both off (A/B:
benchmarks/shipped_forms_ab.py --plain-arith).

On the H100 it takes ~8 % of the W1 kernel's SASS instructions (MUFU.RCP and FMUL), but W1 moves by about 1 %: it is
not bound by instruction issue. W3 (two exps an element) gains a few percent; W2 does not move.
"""
from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx

from flashgemm.codegen.device_pass import each_function
from flashgemm.codegen.tir.keep_exp_in_accumulator import uses_var

PASS = "rewrite_softmax_arithmetic"  # its name in cuda_build.PASSES

EXP = tvm.ir.Op.get("tirx.exp")
ADDRESS_OF = tvm.ir.Op.get("tirx.address_of")
LOG2E = 1.0 / math.log(2.0)
# m * L must stay finite: a row max can be float32's lowest (the kernel's identity: a fully masked row, or a fully
# masked chunk of the split-N form), and -inf - (-inf) would make its masked elements' exp NaN instead of 0
M_FLOOR = -2.0e38


def _lanes(e) -> int:
    return tvm.DataType(str(e.ty.dtype)).lanes


def _f32(e) -> bool:
    return tvm.DataType(str(e.ty.dtype)).type_code == tvm.DataType("float32").type_code and \
        tvm.DataType(str(e.ty.dtype)).bits == 32


def _scalar(e):
    return e.value if isinstance(e, tirx.Broadcast) else e


def _times(e, factor: float):
    """e * factor with a constant (or a broadcast constant) folded in."""
    s = _scalar(e)
    if isinstance(s, tirx.FloatImm):
        folded = tirx.FloatImm("float32", float(s.value) * factor)
        return tirx.Broadcast(folded, _lanes(e)) if isinstance(e, tirx.Broadcast) else folded
    k = tirx.FloatImm("float32", factor)
    return tirx.Mul(e, tirx.Broadcast(k, _lanes(e)) if _lanes(e) > 1 else k)


def _at_least(e, floor: float):
    """max(e, floor), a constant folded."""
    s = _scalar(e)
    k = tirx.FloatImm("float32", max(float(s.value), floor) if isinstance(s, tirx.FloatImm) else floor)
    k = tirx.Broadcast(k, _lanes(e)) if _lanes(e) > 1 else k
    return k if isinstance(s, tirx.FloatImm) else tirx.Max(e, k)


def _exp_as_exp2(call, mutator):
    """exp(X - m) -> exp2(X * L - max(m, M_FLOOR) * L) (module doc); other calls unchanged."""
    if not (call.op.same_as(EXP) and _f32(call) and isinstance(call.args[0], tirx.Sub)):
        return mutator.default_mutate(call)
    x, m = mutator.mutate(call.args[0].a), mutator.mutate(call.args[0].b)
    if isinstance(x, tirx.Mul) and isinstance(_scalar(x.b), (tirx.FloatImm, tirx.Var)):
        x_l = tirx.Mul(x.a, _times(x.b, LOG2E))
    else:
        x_l = _times(x, LOG2E)
    return tirx.exp2(tirx.Sub(x_l, _times(_at_least(m, M_FLOOR), LOG2E)))


def _divisor_load(div):
    """The divisor of a / b when b is a float32 load at constant indices of a "local" buffer (or its broadcast)."""
    b = _scalar(div.b)
    if not (isinstance(b, tvm.ir.TensorLoad) and b.source.scope() == "local" and str(b.source.dtype) == "float32"):
        return None
    if not all(isinstance(i, tirx.IntImm) for i in b.indices):
        return None
    return b


def _plain_registers(func) -> set:
    """The local buffers whose variable appears only in their allocation, stores and loads: no alias over their
    memory, no address taken (an mma's accumulator is passed by address), so a loop that stores none of their
    elements leaves their values unchanged."""
    seen, accesses = {}, {}

    def var(v):
        seen[v] = seen.get(v, 0) + 1

    def access(x):
        buf = x.source if isinstance(x, tvm.ir.TensorLoad) else x.buffer
        accesses[buf] = accesses.get(buf, 0) + 1

    def address(call):
        if call.op.same_as(ADDRESS_OF) and isinstance(call.args[0], tvm.ir.TensorLoad):
            taken.append(call.args[0].source)
    taken = []
    tvm_ffi.structural_walk(func.body, ((tirx.Var, var),))
    tvm_ffi.structural_walk(func.body, ((tvm.ir.TensorLoad, access), (tirx.BufferStore, access),
                                        (tvm.ir.Call, address)))
    return {v for v, n in accesses.items() if v.scope() == "local" and seen.get(v, 0) <= n + 1
            and not any(v.same_as(t) for t in taken)}


def _hoist_reciprocals(body, plain: set):
    """Top-down over the loops: at each loop, every a / b whose b is invariant there (b's buffer in `plain` and not
    stored in the loop) becomes a * r, r = 1 / b bound just before the loop; the other divisions are left to the
    inner loops."""
    def at_loop(loop, mutator):
        divisors = []

        def find(div):
            b = _divisor_load(div)
            if b is not None and _f32(div) and any(b.source.same_as(p) for p in plain) \
                    and not any(tvm_ffi.structural_equal(b, d) for d in divisors):
                divisors.append(b)
        tvm_ffi.structural_walk(loop.body, ((tirx.Div, find),))
        recips = []
        for b in divisors:
            # with its loads replaced, the buffer no longer appears in the loop: no store there (nor allocation)
            probe = tvm_ffi.structural_map(loop.body, ((tvm.ir.TensorLoad, lambda ld: tirx.FloatImm("float32", 0.0)
                                                        if ld.source.same_as(b.source) else ld),))
            if not uses_var(probe, b.source):
                recips.append((tirx.Var(f"{b.source.name}_rcp", "float32"), b))
        if not recips:
            return mutator.default_mutate(loop)

        def on_div(div, inner):
            b = _divisor_load(div)
            hit = next((r for r, d in recips if b is not None and tvm_ffi.structural_equal(b, d)), None)
            if hit is None or not _f32(div):
                return inner.default_mutate(div)
            r = hit if _lanes(div) == 1 else tirx.Broadcast(hit, _lanes(div))
            return tirx.Mul(inner.mutate(div.a), r)

        # the divisions first (all of them, inner loops included), then the inner loops for divisors of their own
        new = tvm_ffi.structural_mutate(tvm_ffi.structural_mutate(loop.body, ((tirx.Div, on_div),)),
                                        ((tirx.For, at_loop),))
        lets = [tirx.LetStmt(r, tirx.Div(tirx.FloatImm("float32", 1.0), b)) for r, b in recips]
        return tirx.SeqStmt(lets + [tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, new,
                                             loop.thread_binding, loop.annotations, loop.step)])
    return tvm_ffi.structural_mutate(body, ((tirx.For, at_loop),))


def rewrite(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Both rewrites on one function (module doc)."""
    body = tvm_ffi.structural_mutate(func.body, ((tvm.ir.Call, _exp_as_exp2),))
    return func.with_body(_hoist_reciprocals(body, _plain_registers(func)))


# rewrite() on every device function (module doc); cuda_build.PASSES leaves it out when disabled.
rewrite_softmax_arithmetic = each_function("flashgemm.SoftmaxArithmetic", rewrite)
