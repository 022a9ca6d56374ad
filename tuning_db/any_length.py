"""Any-length kernels: one kernel of a (variant, K) serves every call with M <= Mb and N <= Nb, any batch.

A model exported with dynamic batch or sequence axes meets lengths nobody built a kernel for. The template's
any-length form (tir_kernels.fused_gemm_softmax._any_length) iterates over a static bound (Mb, Nb) and guards the
real M, N, so the one-pass tensor-core space schedules it as it schedules a static shape; rows and columns past
the real lengths cost their GEMM tile and nothing else (no P store, -inf logits). A bundle holds a ladder of
square bounds (LENGTH_BOUNDS, each at most 1.5x the one below past 128) and the op serves a call by the smallest
bound that holds it (ort_integration/src/bundle.cc), so at most ~1.5x of the rows and columns are padding.

Schedules are the space's default (schedules/cuda_default, chosen by rule, never measured): they are what a
bundle ships before anyone tunes. Lengths past the ladder's top go to the generic kernel, as do head sizes that
are not a multiple of 16.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import tvm

from schedules import targets
from tir_kernels import Variant, canonicalize, runtime_func, tuning_func

from .best import TENSOR_CORE_ALIGN, TunedKernel

# square bounds (Mb = Nb); a call takes the smallest that holds max(M, N). Multiples of the one-pass space's pad
# factors (schedules/cuda_space._pad_factors: 32 rows, 64 columns past 64); 2048: rows longer than that need the
# split-N form, which needs a static N.
LENGTH_BOUNDS = (32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
# what every CUDA bundle holds unless told otherwise (scripts/build.py --any-length): the usual head sizes, both
# dtypes, B transposed (Q @ K^T), and the mask kinds exported models carry
COMMON_HEAD_SIZES = (32, 64, 80, 96, 128)
COMMON_VARIANTS = tuple(
    Variant(dtype, True, bias, mask, causal)
    for dtype in ("float16", "bfloat16")
    for bias, mask, causal in ((False, "none", False), (False, "add", False), (False, "bool", False),
                               (True, "none", False), (False, "none", True)))


def serves(k: int) -> bool:
    """Whether any-length kernels exist for head size K (the form needs K % 16 == 0)."""
    return k > 0 and k % 16 == 0


def common() -> list:
    """(variant, K) of the any-length kernels every CUDA bundle ships by default."""
    return [(v, k) for v in COMMON_VARIANTS for k in COMMON_HEAD_SIZES]


def _probe_shape(variant: Variant, bound: int, k: int):
    """The canonical shape the default schedule is chosen on: one batch, M = N = the bound."""
    b_shape = (1, 1, bound, k) if variant.trans_b else (1, 1, k, bound)
    full = (1, 1, bound, bound)
    return canonicalize((1, 1, bound, k), b_shape, variant.trans_b, full if variant.has_bias else None,
                        full if variant.mask != "none" else None)


def default_kernels(variant: Variant, k: int, target: str, bounds: Iterable[int] = LENGTH_BOUNDS,
                    log: Callable = print) -> list:
    """The any-length default-schedule kernels of (variant, K) on a CUDA target, one a bound of `bounds` the space
    can schedule (a bound it cannot, e.g. rows too long for shared memory on a smaller GPU, is logged and left
    out: longer calls go to the generic kernel)."""
    from schedules import cuda_default, cuda_space  # noqa: PLC0415  (CUDA only)
    target = targets.resolve(target)
    if not targets.is_cuda(target):
        raise ValueError(f"any-length kernels exist for CUDA targets only, not {target!r}")
    if not serves(k):
        raise ValueError(f"any-length kernels need K % 16 == 0, not K={k}")
    out = []
    for bound in bounds:
        shape = _probe_shape(variant, bound, k)
        mod = tvm.IRModule({"main": tuning_func(variant, shape, 1.0, bound=(bound, bound))})
        try:
            trace, _ = cuda_default.default_trace(mod, target)
        except cuda_space.UnsupportedShapeError as err:
            log(f"[build] any-length {variant.key} K={k}: no kernel for lengths up to {bound} ({err})")
            continue
        sch = tvm.s_tir.Schedule(runtime_func(variant, shape, align=TENSOR_CORE_ALIGN, any_batch=True,
                                              bound=(bound, bound)))
        trace.apply_to_schedule(sch, remove_postproc=False)
        out.append(TunedKernel(f"any-length-{variant.key}-k{k}-{bound}", variant, shape, sch, None, any_batch=True,
                               kind="default", form="any-length", bound=(bound, bound)))
    return out


def model_requests(paths, log: Callable = print) -> list:
    """(variant, K) of the fused sites with a symbolic length in the models at `paths` (rewritten or not)."""
    from ort_integration.rewrite import model_any_length  # noqa: PLC0415
    out = []
    for path in paths:
        found = model_any_length(path)
        if found:
            log(f"{path}: {len(found)} site kind(s) with symbolic lengths: "
                + ", ".join(f"{v.key} K={k}" for v, k in found))
        out += [x for x in found if x not in out]
    return out


def kernels_for(requests: Iterable, target: str, bounds: Optional[Iterable[int]] = None,
                log: Callable = print) -> list:
    """default_kernels of every (variant, K) in `requests` (duplicates and unserved K skipped)."""
    out, seen = [], set()
    for variant, k in requests:
        if (variant.key, k) in seen or not serves(k):
            continue
        seen.add((variant.key, k))
        out += default_kernels(variant, k, target, LENGTH_BOUNDS if bounds is None else bounds, log)
    return out
