"""Stage 1 of the data's path: the operator in TensorIR, its variants, and the NumPy reference."""
from .variant import CanonicalShape, ShapeError, Variant, canonicalize  # noqa: F401
from .fused_gemm_softmax import MASKED_AT_OR_BELOW, runtime_func, tuning_func  # noqa: F401
from .reference import fused_gemm_softmax_ref  # noqa: F401
