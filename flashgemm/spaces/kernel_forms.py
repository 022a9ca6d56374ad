"""The kernel forms: which forms of the kernel (flashgemm.kernel.fused_gemm_softmax) a workload is tuned and shipped in
on a target, and the IRModule of each. One registry, read by tuning (flashgemm.tune.tuner: the forms a run searches)
and by the bundle (flashgemm.bundle: the form a record replays in, the any-length kernels and their twins).

    one-pass      rows resident on chip (the primary form of rows up to the split-N threshold)
    split-n       long rows in chunks of N (cuda_split_n); split-n-wide: wgmma, CW = 256 (sm_90)
    padded        M, N, K padded for the register sketches (cuda_registers.padded_sizes)
    recompute     three sweeps over N chunks, S recomputed (cuda_recompute); recompute2: two sweeps
    any-length    symbolic batch, M and N up to a bound; any-length-recompute: the recompute form over a bound
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import tvm
import tvm_ffi

from flashgemm import targets
from flashgemm.kernel.fused_gemm_softmax import tuning_func
from flashgemm.op.workloads import Workload


def split_n_chunk(workload: Workload, target_name: Optional[str]) -> int:
    """The kernel form a workload is tuned and shipped in on a target: 0 (one pass, rows resident) or
    the chunk width of the long-row split-N form (flashgemm/spaces/cuda_split_n.chunk_for)."""
    if target_name is None or not targets.is_cuda(target_name):
        return 0
    from flashgemm.spaces import cuda_split_n  # noqa: PLC0415
    _, _, m, n, k = workload.canonical.sizes
    return cuda_split_n.chunk_for(target_name, m, n, k)


@dataclasses.dataclass(frozen=True)
class Form:
    """One form of the kernel a workload is tuned in (flashgemm.kernel.fused_gemm_softmax.tuning_func's chunk /
    pad)."""
    name: str  # "one-pass", "split-n", "split-n-wide", "padded", "recompute" or "recompute2"
    chunk: int = 0
    pad: Optional[tuple] = None
    recompute: bool = False
    stat_cols: int = 0  # the two-sweep form's column groups of chunk statistics (0: the chunk)
    bound: Optional[tuple] = None  # the any-length form's (Mb, Nb)


def forms(workload: Workload, target_name: Optional[str] = None) -> list:
    """The kernel forms a workload can be tuned in on a target, the primary one first: one pass (rows resident)
    or split-N (long rows); on CUDA, for shapes the register sketches take only when padded (W2/W3: 197, 1500), the
    padded form too (flashgemm/spaces/cuda_registers.padded_sizes). tune(padded_form=True) tunes each form as a task of
    one run (round robin); the database keeps the fastest records of any form, and each replays on its own.
    The padded form is opt-in: on the H100 it has not beaten the primary form at W2 or W3, and a second task halves each
    form's share of the trials. Last, for shapes with M >= 16 and no bias or mask (not long rows: they have split-N),
    the recompute form (flashgemm/spaces/cuda_recompute), tuned by default where rows are at least RECOMPUTE_AUTO_MIN_N
    long (tuned_forms). On sm_90, long rows also have the wide split-N form (wgmma only, CW = 256:
    cuda_split_n.WIDE_CHUNK), tuned by default beside the primary one."""
    if workload.attention:  # FusedAttention: its tensor-core tiles (flashgemm/spaces/attention_tiles)
        if target_name is not None and not targets.is_cuda(target_name):
            raise ValueError(f"{workload.dir_name}: FusedAttention is tuned on the CUDA targets (its tensor-core "
                             f"tiles); on {target_name} it runs its generic kernel")
        return [Form("attention")]
    if workload.any_length:  # one form: the one-pass space over the bound, or on long rows its recompute form
        return [any_length_form(workload.variant, workload.bound, workload.canonical.sizes[4], target_name)]
    chunk = split_n_chunk(workload, target_name)
    out = [Form("split-n" if chunk else "one-pass", chunk)]
    if chunk:  # on Hopper, the wide split-N form too (wgmma with CW = 256: cuda_split_n.WIDE_CHUNK)
        from flashgemm.spaces import cuda_split_n  # noqa: PLC0415
        wide = cuda_split_n.wide_chunk_for(target_name, *workload.canonical.sizes[2:])
        if wide:
            out.append(Form("split-n-wide", wide))
    if not chunk and target_name is not None and targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_registers  # noqa: PLC0415
        _, _, m, n, k = workload.canonical.sizes
        pad = cuda_registers.padded_sizes(targets.resolve(target_name), workload.variant, m, n, k)
        if pad is not None:
            out.append(Form("padded", 0, pad))
        from flashgemm.spaces import cuda_recompute  # noqa: PLC0415
        pad = cuda_recompute.padded_sizes(workload.variant, m, n, k)
        if pad is not None:
            out.append(Form("recompute", 0, pad, recompute=True))
            out.append(Form("recompute2", cuda_recompute.TWO_SWEEP_CHUNK, pad, recompute=True,
                            stat_cols=cuda_recompute.TWO_SWEEP_STAT_COLS))
    return out


# Any-length kernels of bounds at least this long are the recompute form over the bound, where it applies
# (any_length_form). Why: the one-pass form keeps a 16-row block's whole S row (Nb fp32) in shared memory, one or two
# blocks an SM on long rows; the recompute form keeps a chunk of S on chip. At the lengths each bound serves, the
# recompute form's default schedule is faster than the one-pass one from the 1024 bound (K 64) up, slower on 512
# and 768.
ANY_LENGTH_RECOMPUTE_MIN_BOUND = 1024


# From this bound up (and below ANY_LENGTH_RECOMPUTE_MIN_BOUND), the one-pass any-length kernel's twin
# (best.any_length_twin) is the recompute form: with P in vector stores it is clearly faster than the one-pass
# kernel on the 768 bound, about even on 512.
ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND = 768
# With a bias or mask, kernel and twin are the recompute form from this bound up: the better of its plain kernel
# and twin beats the one-pass kernel on the 1536 and 2048 bounds, but not reliably on 1024 (a bias loses there)
# or 768 (padding masks [B, 1, 1, N]).
ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND = 1536


def _recompute_over(variant, bound: tuple, k: int, target_name: Optional[str], min_bound: int) -> Optional[Form]:
    """The recompute form over `bound` where it applies from `min_bound` on (ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND
    at least for a variant with a bias or mask): CUDA, B transposed (with B as [K, N] a chunk's rows start at
    multiples of N, which a vector copy cannot assume), K a multiple of 16; pad = the bound and K, so its traces are
    those of the static recompute form at M = Mb, N = Nb."""
    if variant.has_bias or variant.mask != "none":
        min_bound = max(min_bound, ANY_LENGTH_MASKED_RECOMPUTE_MIN_BOUND)
    if (target_name is not None and targets.is_cuda(target_name) and min(int(x) for x in bound) >= min_bound
            and variant.trans_b and k % 16 == 0):
        return Form("any-length-recompute", pad=(int(bound[0]), int(bound[1]), k), recompute=True,
                    bound=tuple(bound))
    return None


def any_length_form(variant, bound: tuple, k: int, target_name: Optional[str]) -> Form:
    """The form of the any-length kernel of (variant, bound, K) on a target: the recompute form over the bound from
    ANY_LENGTH_RECOMPUTE_MIN_BOUND where it applies (_recompute_over), else the one-pass any-length form."""
    return (_recompute_over(variant, bound, k, target_name, ANY_LENGTH_RECOMPUTE_MIN_BOUND)
            or Form("any-length", bound=tuple(bound)))


def any_length_twin_form(variant, bound: tuple, k: int, target_name: Optional[str]) -> Optional[Form]:
    """The form of the twin of the any-length kernel of (variant, bound, K) (best.any_length_twin): the recompute
    form over the bound from ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND where it applies, else None (no twin)."""
    return _recompute_over(variant, bound, k, target_name, ANY_LENGTH_RECOMPUTE_TWIN_MIN_BOUND)


# The recompute form is tuned by default (recompute_form=None) on rows at least this long: on the H100 it beats
# the one-pass form at W3 (N = 1500) in both dtypes (with half2 P stores, in a quarter of the trials), and loses
# to it at W1 (N = 512) and W2 (N = 197, even with warp columns and resident A, and in two sweeps).
# Shorter rows keep one form and all the trials.
RECOMPUTE_AUTO_MIN_N = 1024


def tuned_forms(workload: Workload, target_name: Optional[str], padded_form: bool = False,
                recompute_form: Optional[bool] = None, two_sweep_form: bool = False,
                only: Optional[Sequence[str]] = None) -> list:
    """The forms one tune() run searches: the primary form, plus the other ones asked for that the shape has.
    recompute_form None (auto): the recompute form where N >= RECOMPUTE_AUTO_MIN_N; True/False: always/never.
    only: exactly these forms by name (the flags above are then ignored); ValueError names the ones the shape has."""
    if only:
        all_forms = forms(workload, target_name)
        names = [f.name for f in all_forms]
        unknown = [name for name in only if name not in names]
        if unknown:
            raise ValueError(f"{workload.dir_name} on {target_name} has no form {', '.join(unknown)}; its forms: "
                             f"{', '.join(names)}")
        return [f for f in all_forms if f.name in only]
    if recompute_form is None:
        recompute_form = workload.canonical.sizes[3] >= RECOMPUTE_AUTO_MIN_N
    extra = {name for name, asked in (("padded", padded_form), ("recompute", recompute_form),
                                      ("recompute2", two_sweep_form), ("split-n-wide", True)) if asked}
    all_forms = forms(workload, target_name)
    return [all_forms[0]] + [f for f in all_forms[1:] if f.name in extra]


def form_module(workload: Workload, form: Form) -> tvm.IRModule:
    if form.name == "attention":
        from flashgemm.spaces import attention_tiles  # noqa: PLC0415
        b0, b1, m, n, k = workload.canonical.sizes
        return attention_tiles.workload_module(workload.variant, attention_tiles.Shape(b0, b1, m, n, k),
                                               workload.scale)
    func = tuning_func(workload.variant, workload.canonical, workload.scale, chunk=form.chunk, pad=form.pad,
                       recompute=form.recompute, stat_cols=form.stat_cols, bound=form.bound)
    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def tuning_module(workload: Workload, target_name: Optional[str] = None) -> tvm.IRModule:
    """The IRModule of the primary form (forms()[0]): what Meta-Schedule tunes, and the database is keyed by, for
    a workload on a target (the form depends on the target only for long rows: split_n_chunk)."""
    return form_module(workload, forms(workload, target_name)[0])


def tuning_modules(workload: Workload, target_name: Optional[str] = None) -> list:
    """(Form, IRModule) of every form the workload is tuned in on the target."""
    return [(f, form_module(workload, f)) for f in forms(workload, target_name)]


def form_of(record, modules: list) -> Form:
    """The form a tuning record was measured in (its workload's module), among tuning_modules()."""
    for form, mod in modules:
        if tvm_ffi.structural_equal(record.workload.mod, mod):
            return form
    raise ValueError("the record belongs to none of the workload's forms")


def design_space(target_name: str, mod: Optional[tvm.IRModule] = None):
    """Our Meta-Schedule design space for a target: the fused tensor-core space (CUDA) or the llvm one; for a
    FusedAttention workload `mod`, its tiles (flashgemm/spaces/attention_tiles)."""
    from flashgemm.spaces import attention_tiles  # noqa: PLC0415
    if mod is not None and attention_tiles.is_workload(mod):
        return attention_tiles.design_space(target_name)
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_space  # noqa: PLC0415
        return cuda_space.design_space(target_name)
    from flashgemm.spaces import llvm  # noqa: PLC0415
    return llvm.design_space()
