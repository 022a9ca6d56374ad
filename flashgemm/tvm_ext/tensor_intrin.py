"""Tensor intrinsics the CUDA schedules need and TVM 0.27 does not register.

TVM registers ldmatrix + mma.sync m16n8k16 intrinsics for fp16 only
(`tvm.s_tir.tensor_intrin.cuda`): `get_ldmatrix_intrin` asserts dtype == "float16" for k=16 and
`get_mma_intrin` has no "bfloat16" entry in its PTX dtype table. The PTX codegen itself handles bf16
(`mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`, ldmatrix is dtype-agnostic .b16).

How the bf16 intrinsics are made (the "exec-patching trick"): we take the *source* of TVM's two fp16
generator functions, apply two textual edits (relax the dtype assert; add "bfloat16": "bf16" to the
dtype table), and re-execute the patched source in a copy of the TVM module's namespace. The edited
source is compiled under TVM's own file name and padded with newlines so that every line keeps its
original line number: the TVMScript parser of the nested `@T.prim_func` definitions re-reads their
text from the file by (filename, line), and would otherwise find the wrong lines ("Function must be
decorated"). The nested prim_func bodies themselves are never edited, so what the parser re-reads is
exactly what was executed. If a future TVM changes those lines, `_patched` raises a clear error naming
the edit that no longer applies, instead of registering something wrong.

Also registered: the bf16 ldmatrix variants for "shared.dyn" (dynamic shared memory) buffers, and a
store of a 16x16 fp32 mma accumulator into *static* "shared" scope (TVM only has "global" and
"shared.dyn" variants), written as plain per-thread stores.

`register()` is idempotent (runs once per process; `override=True` makes a re-import harmless) and is
called at import. Names: `intrin_group(dtype, trans_b)`.
"""
from __future__ import annotations

import inspect
import threading

import sys

import tvm_ffi
from tvm.s_tir import TensorIntrin

# cuda_build registers a copy of the ldmatrix index map that TVM's module below registers without override: when
# cuda_build came first, drop its copy (same body) so that the import does not fail with "already registered".
if "tvm.s_tir.tensor_intrin.cuda" not in sys.modules:
    _INDEX_MAP = "tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout"
    if tvm_ffi.get_global_func(_INDEX_MAP, allow_missing=True) is not None:
        tvm_ffi.remove_global_func(_INDEX_MAP)
from flashgemm.tvm_ext.shallow_stack import shallow_stack  # noqa: E402

# Our modules get TVM's intrinsic modules only through this one, so that the first import (which parses all 546 of
# them) is the shallow one, several times faster (shallow_stack's doc; tests/test_shallow_stack checks that no other
# module imports them first).
with shallow_stack():
    import tvm.s_tir.tensor_intrin.cuda as _tc  # noqa: E402  (importing registers TVM's own fp16 intrinsics)
from tvm.s_tir.tensor_intrin.cuda import shared_16x16_to_ldmatrix_32x8_layout  # noqa: E402,F401  (re-exported)

# names of what we register
LDMATRIX_BF16_A = "mma_ldmatrix_bf16_a"
LDMATRIX_BF16_B = "mma_ldmatrix_bf16_b"
LDMATRIX_BF16_B_TRANS = "mma_ldmatrix_bf16_b_trans"
LDMATRIX_BF16_A_DYN = "mma_ldmatrix_bf16_a_dyn"
LDMATRIX_BF16_B_DYN = "mma_ldmatrix_bf16_b_dyn"
LDMATRIX_BF16_B_TRANS_DYN = "mma_ldmatrix_bf16_b_trans_dyn"
MMA_BF16BF16F32 = "mma_bf16bf16f32"
MMA_BF16BF16F32_TRANS_B = "mma_bf16bf16f32_trans_b"
MMA_STORE_F32_SHARED = "fg_mma_store_16x16_f32_shared"

_lock = threading.Lock()
_done = False


def _patched(fn, edits):
    """Re-execute TVM's generator `fn` with textual `edits`, keeping its line numbers (see module doc)."""
    lines, start = inspect.getsourcelines(fn)
    src = "\n" * (start - 1) + "".join(lines)
    for old, new in edits:
        if old not in src:
            raise RuntimeError(
                f"flashgemm.tvm_ext.tensor_intrin: cannot derive the bf16 intrinsics: the text {old!r} is no longer in "
                f"{fn.__module__}.{fn.__name__} ({_tc.__file__}); this TVM version needs a new patch")
        src = src.replace(old, new, 1)
    ns = dict(vars(_tc))
    exec(compile(src, _tc.__file__, "exec"), ns)  # noqa: S102 - TVM's own source, two literal edits
    return ns[fn.__name__]


def register() -> None:
    global _done
    with _lock, shallow_stack():
        if _done:
            return
        get_ldmatrix = _patched(_tc.get_ldmatrix_intrin,
                                [('assert dtype == "float16"', 'assert dtype in ("float16", "bfloat16")')])
        get_mma = _patched(_tc.get_mma_intrin, [('"float16": "fp16",', '"float16": "fp16", "bfloat16": "bf16",')])
        reg = lambda name, pair: TensorIntrin.register(name, *pair, override=True)  # noqa: E731
        reg(LDMATRIX_BF16_A, get_ldmatrix(16, "bfloat16", "A", False))
        reg(LDMATRIX_BF16_B, get_ldmatrix(16, "bfloat16", "B", False))
        reg(LDMATRIX_BF16_B_TRANS, get_ldmatrix(16, "bfloat16", "B", True))
        reg(LDMATRIX_BF16_A_DYN, get_ldmatrix(16, "bfloat16", "A", False, "shared.dyn"))
        reg(LDMATRIX_BF16_B_DYN, get_ldmatrix(16, "bfloat16", "B", False, "shared.dyn"))
        reg(LDMATRIX_BF16_B_TRANS_DYN, get_ldmatrix(16, "bfloat16", "B", True, "shared.dyn"))
        reg(MMA_BF16BF16F32, get_mma(16, "bfloat16", "bfloat16", "float32", False, False))
        reg(MMA_BF16BF16F32_TRANS_B, get_mma(16, "bfloat16", "bfloat16", "float32", False, True))
        reg(MMA_STORE_F32_SHARED, _tc.get_mma_store_intrin("float32", 8, "shared", False))
        _done = True


def intrin_group(dtype: str, trans_b: bool, scope: str = "shared") -> dict:
    """ldmatrix/mma/fill/store intrinsic names for A [M,K] row-major and B [K,N] (or [N,K] if trans_b)
    in shared memory of `scope` ("shared" or "shared.dyn"), fp32 accumulation, accumulator stored to a
    buffer of the same scope."""
    register()
    if scope not in ("shared", "shared.dyn"):
        raise ValueError(f"scope must be shared or shared.dyn, got {scope!r}")
    dyn = "_dyn" if scope == "shared.dyn" else ""
    tb = "_trans" if trans_b else ""
    if dtype == "float16":
        load_a, load_b = f"mma_ldmatrix_f16_a{dyn}", f"mma_ldmatrix_f16_b{tb}{dyn}"
        compute = _tc.MMA_f16f16f32_TRANS_B_INTRIN if trans_b else _tc.MMA_f16f16f32_INTRIN
    elif dtype == "bfloat16":
        load_a, load_b = f"mma_ldmatrix_bf16_a{dyn}", f"mma_ldmatrix_bf16_b{tb}{dyn}"
        compute = MMA_BF16BF16F32_TRANS_B if trans_b else MMA_BF16BF16F32
    else:
        raise ValueError(f"no tensor-core intrinsics for dtype {dtype!r} (float16, bfloat16)")
    store = MMA_STORE_F32_SHARED if scope == "shared" else _tc.MMA_store_16x16_f32_shared_dyn_INTRIN
    return {"load_a": load_a, "load_b": load_b, "compute": compute,
            "init": _tc.MMA_fill_16x16_f32_INTRIN, "store": store}

register()
