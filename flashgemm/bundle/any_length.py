"""Any-length kernels: one kernel of a (variant, K) serves every call with M <= Mb and N <= Nb, any batch.

A model exported with dynamic batch or sequence axes meets lengths nobody built a kernel for. The kernel's
any-length form (flashgemm.kernel.fused_gemm_softmax._any_length) iterates over a static bound (Mb, Nb) and guards the
real M, N, so the one-pass tensor-core space schedules it as it schedules a static shape; rows and columns past
the real lengths cost their GEMM tile and nothing else (no P store, -inf logits). A bundle holds a ladder of
square bounds (LENGTH_BOUNDS, each at most 1.5x the one below past 128) and the op serves a call by the smallest
bound that holds it (flashgemm/ort/csrc/bundle.cc), so at most ~1.5x of the rows and columns are padding.

Long bounds (kernel_forms.ANY_LENGTH_RECOMPUTE_MIN_BOUND; ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND with a bias or mask) are
the recompute form over the bound instead (kernel_forms): a chunk of S on chip, not a whole row; its sweeps
stop at N's last chunk (flashgemm/codegen/tir/skip_chunks_past_n). From ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND (the
masked bound with a bias or mask) kernels have a twin in the recompute form (best.any_length_twin) for the calls with N
a multiple of 4 (and B0 = 1 without bias or mask: constant batch index math): P in vector stores, where a plain
any-length kernel stores P element by element (a row of P starts at a multiple of the runtime N).

Schedules are the space's default (flashgemm/spaces/cuda_default, chosen by rule, never measured): they are what a
bundle ships before anyone tunes. Lengths past the ladder's top go to the generic kernel, as do head sizes that
are not a multiple of 16.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import tvm

from flashgemm import targets
from flashgemm.op.variant import Variant, canonicalize
from flashgemm.kernel.fused_gemm_softmax import runtime_func, tuning_func

from flashgemm.bundle.best import TENSOR_CORE_ALIGN, TunedKernel, any_length_twin
from flashgemm.spaces.kernel_forms import any_length_form
from flashgemm.bundle.workers import from_portable, made_in_workers, portable

# square bounds (Mb = Nb); a call takes the smallest that holds max(M, N). Multiples of the one-pass space's pad
# factors (flashgemm/spaces/cuda_space._pad_factors: 32 rows, 64 columns past 64); 2048: rows longer than that need the
# split-N form, which needs a static N.
LENGTH_BOUNDS = (32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
# what every CUDA bundle holds unless told otherwise (flashgemm-build --any-length): the usual head sizes, both
# dtypes, B transposed (Q @ K^T), and the mask kinds exported models carry
COMMON_HEAD_SIZES = (32, 64, 80, 96, 128)
COMMON_VARIANTS = tuple(
    Variant(dtype, True, bias, mask, causal)
    for dtype in ("float16", "bfloat16")
    for bias, mask, causal in ((False, "none", False), (False, "add", False), (False, "bool", False),
                               (True, "none", False), (False, "none", True)))
# FusedAttention's tensor-core kernels add a decoder's padding row (a bias) under the causal flag, the keys past
# the diagonal masked out or (causal_fill) at the lowest logit: what flashgemm-rewrite --decoder-causal makes of every
# decoder export with a padding mask; and DeBERTa's sites: its position terms a bias, its padding a bool mask with
# mask_fill (Where(~mask, lowest, scores))
ATTENTION_COMMON_VARIANTS = COMMON_VARIANTS + tuple(Variant(dtype, True, True, mask, causal, causal_fill)
                                                    for dtype in ("float16", "bfloat16")
                                                    for mask, causal, causal_fill in (("none", True, False),
                                                                                      ("none", True, True),
                                                                                      ("fill", False, False)))


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
    from flashgemm.spaces import cuda_default, cuda_space  # noqa: PLC0415  (CUDA only)
    target = targets.resolve(target)
    if not targets.is_cuda(target):
        raise ValueError(f"any-length kernels exist for CUDA targets only, not {target!r}")
    if not serves(k):
        raise ValueError(f"any-length kernels need K % 16 == 0, not K={k}")
    out = []
    for bound in bounds:
        shape = _probe_shape(variant, bound, k)
        form = any_length_form(variant, (bound, bound), k, target)
        mod = tvm.IRModule({"main": tuning_func(variant, shape, 1.0, bound=form.bound, recompute=form.recompute)})
        try:
            trace, _ = cuda_default.default_trace(mod, target)
        except cuda_space.UnsupportedShapeError as err:
            log(f"[build] any-length {variant.key} K={k}: no kernel for lengths up to {bound} ({err})")
            continue
        sch = tvm.s_tir.Schedule(runtime_func(variant, shape, align=TENSOR_CORE_ALIGN, any_batch=True,
                                              bound=form.bound, recompute=form.recompute))
        trace.apply_to_schedule(sch, remove_postproc=False)
        out.append(TunedKernel(f"any-length-{variant.key}-k{k}-{bound}", variant, shape, sch, None, any_batch=True,
                               kind="default", form=form.name, bound=form.bound,
                               **any_length_twin(trace, variant, shape, form, target)))
    return out


TUNING_BATCH = 8  # the batch any-length kernels are tuned at (their schedules never split the batch loops)


def tuning_specs(requests, lengths: Iterable[int]) -> list:
    """Workload specs (flashgemm.op.workloads) of the any-length kernels of (variant, K, heads) `requests` at the
    bounds of LENGTH_BOUNDS that hold `lengths` (each length's smallest bound): what flashgemm-tune --from-model tunes
    for a model's symbolic sites. Each is tuned at its bound, batch TUNING_BATCH x heads, bias/mask as a padding mask
    [batch, 1, 1, N] broadcast over heads and rows."""
    bounds = sorted({next(b for b in LENGTH_BOUNDS if b >= L) for L in lengths if L <= LENGTH_BOUNDS[-1]})
    out = []
    for variant, k, heads in requests:
        if not serves(k):
            continue
        for bound in bounds:
            b = f"{TUNING_BATCH}x{heads}x{bound}x{k}"
            fields = [f"a={b}", f"b={b if variant.trans_b else f'{TUNING_BATCH}x{heads}x{k}x{bound}'}",
                      f"transB={int(variant.trans_b)}", f"causal={int(variant.causal)}", f"scale={k ** -0.5:.9g}",
                      f"dtype={variant.dtype}", "anylength=1"]
            if variant.has_bias:
                fields.append(f"bias={TUNING_BATCH}x1x1x{bound}")
            if variant.mask != "none":
                fields.append(f"mask={TUNING_BATCH}x1x1x{bound}:{variant.mask}")
            fields.append(f"name=anylen-{variant.key}-k{k}-h{heads}-len{bound}".replace("_", "-"))
            out.append(",".join(fields))
    return out


def kernels_for(requests: Iterable, target: str, bounds: Optional[Iterable[int]] = None,
                log: Callable = print, tuned: Iterable = (), jobs: int = 0) -> list:
    """default_kernels of every (variant, K) in `requests` (duplicates and unserved K skipped), but none at a
    (variant, K, bound) of a tuned any-length kernel in `tuned`. Choosing and applying a pair's default schedules
    takes seconds a bound (about 20 s a pair of 11 bounds on one core), so the pairs are made in `jobs` worker
    processes at once (workers.made_in_workers; default: workers.compile_jobs())."""
    have = {(tk.variant.key, tk.shape.sizes[4], tk.bound) for tk in tuned if tk.bound}
    todo, seen = [], set()
    for variant, k in requests:
        if (variant.key, k) in seen or not serves(k):
            continue
        seen.add((variant.key, k))
        pair_bounds = [b for b in (LENGTH_BOUNDS if bounds is None else bounds) if (variant.key, k, (b, b)) not in have]
        if pair_bounds:
            todo.append((variant, k, target, pair_bounds))
    made = made_in_workers(_portable_default_kernels, todo, log, "any-length kernels, (variant, head size) pairs", jobs)
    return [from_portable(tk) for kernels in made for tk in kernels]


def _portable_default_kernels(variant: Variant, k: int, target: str, bounds: list) -> tuple:
    """default_kernels for made_in_workers: the kernels (portable) and the lines it logged."""
    lines = []
    return [portable(tk) for tk in default_kernels(variant, k, target, bounds, log=lines.append)], lines
