"""CPU spike (session 17, 2026-11-25): can TVM 0.27's TIR express FlashAttention's online softmax statistics as one
reduction that rfactor (and so cross-thread / per-lane partials) accepts? A two-value reducer (m, l) combined as
(max(m1, m2), l1 exp(m1 - M) + l2 exp(m2 - M)) registered with s_tir.schedule.RegisterReducer: yes, rfactor splits it
(output beside this file). Caveats seen: the block body must bind both values with T.Bind and store exactly those
vars (rfactor's condition 3/7); an element's own (x, 1) does not match (the parser folds `1 * exp(..)`), so the
right-hand side must be loads, e.g. per-chunk (max, sum) pairs, which is also what keeps it at one exp an element;
Python callbacks left in TVM's registry crash the interpreter at exit (TVMFFIPyCallbackClosure::Deleter after
finalization), hence the os._exit. Not used by the kernels yet: the two-sweep recompute form it would allow is next.
Run: .venv/bin/python results/cpu/online-softmax-reducer-spike-2026-11-25.py
"""
import tvm, tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

reg = tvm_ffi.get_global_func("s_tir.schedule.RegisterReducer")

def combiner(x, y):  # (m, l) (+) (m', l')
    m = tirx.max(x[0], y[0])
    return [m, x[1] * tirx.exp(x[0] - m) + y[1] * tirx.exp(y[0] - m)]

def identity(vals):
    return [tirx.min_value(vals[0].ty), tirx.FloatImm("float32", 0.0)]

reg(2, combiner, identity)
print("registered")

@T.prim_func(s_tir=True)
def f(CM: T.Buffer((64, 256), "float32"), CS: T.Buffer((64, 256), "float32"), M: T.Buffer((64,), "float32"), L: T.Buffer((64,), "float32")):
    for i, j in T.grid(64, 256):
        with T.sblock("stats"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                M[vi] = T.min_value("float32")
                L[vi] = T.float32(0)
            v_m = T.Bind(T.max(M[vi], CM[vi, vj]))
            v_l = T.Bind(L[vi] * T.exp(M[vi] - T.max(M[vi], CM[vi, vj])) + CS[vi, vj] * T.exp(CM[vi, vj] - T.max(M[vi], CM[vi, vj])))
            M[vi] = v_m
            L[vi] = v_l

sch = tvm.s_tir.Schedule(f)
blk = sch.get_sblock("stats")
i, j = sch.get_loops(blk)
jo, ji = sch.split(j, factors=[None, 32])
rf = sch.rfactor(ji, factor_axis=1)
print(sch.mod.script()[:4000])
import sys, os
sys.stdout.flush(); os._exit(0)
