"""Stage 1 of the data's path: the operator in TensorIR, its variants, and the NumPy reference.

The names are loaded on first use (PEP 562), so that importing `tir_kernels.variant` or the reference
does not load TVM (the graph rewrite and the op's Python helpers need no compiler).
"""
import importlib

_EXPORTS = {
    "CanonicalShape": "variant", "ShapeError": "variant", "Variant": "variant", "canonicalize": "variant",
    "MASKED_AT_OR_BELOW": "variant", "runtime_func": "fused_gemm_softmax",
    "tuning_func": "fused_gemm_softmax", "fused_gemm_softmax_ref": "reference",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tir_kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
