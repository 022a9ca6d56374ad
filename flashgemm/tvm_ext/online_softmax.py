"""FlashAttention's online softmax statistics as one TIR reduction: the (max, sum) pair combined as

    (m1, l1) + (m2, l2) = (M, l1 exp(m1 - M) + l2 exp(m2 - M)),  M = max(m1, m2);  identity (lowest float, 0)

registered with TVM's reducer registry (s_tir.schedule.RegisterReducer), so rfactor and cross-thread reductions
accept a block written in exactly this form (the two-sweep recompute form's "row_stats" in
flashgemm.kernel.fused_gemm_softmax):

    v_max = T.Bind(T.max(m, m2))
    v_sum = T.Bind(l * T.exp(m - T.max(m, m2)) + l2 * T.exp(m2 - T.max(m, m2)))
    m = v_max; l = v_sum

(Registered, rfactor splits such a block as it splits a plain sum.)
"""
from __future__ import annotations

import ctypes

_registered = False


def _combiner(x, y):
    from tvm import tirx  # noqa: PLC0415
    m = tirx.max(x[0], y[0])
    return [m, x[1] * tirx.exp(x[0] - m) + y[1] * tirx.exp(y[0] - m)]


def _identity(values):
    from tvm import tirx  # noqa: PLC0415
    return [tirx.min_value(values[0].ty), tirx.FloatImm("float32", 0.0)]


def register() -> None:
    """Register the reducer once per process (idempotent)."""
    global _registered
    if _registered:
        return
    import tvm_ffi  # noqa: PLC0415
    functions = [tvm_ffi.convert(_combiner), tvm_ffi.convert(_identity)]
    # TVM's registry is a C++ static that outlives the interpreter: when it is destroyed at exit, releasing a Python
    # callback then crashes (TVMFFIPyCallbackClosure::Deleter after finalization). Keep one reference forever.
    lib = ctypes.CDLL(tvm_ffi.libinfo.find_libtvm_ffi())
    for f in functions:
        lib.TVMFFIObjectIncRef(ctypes.c_void_p(f.__chandle__()))
    tvm_ffi.get_global_func("s_tir.schedule.RegisterReducer")(2, *functions)
    _registered = True
