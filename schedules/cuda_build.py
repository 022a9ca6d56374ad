"""How every CUDA kernel of the project is compiled: Meta-Schedule's builder workers, the final export
and the benchmarks all use `f_build` / `compile_cuda` / PASS_CONFIG from here.

This module is deliberately light: builder workers are fresh processes that unpickle `f_build` by
reference, so importing this module must not import TVM's tensor-intrinsic modules (16 s of TVMScript
parsing per worker on a 2-core box; with 16 workers starting at once on the GPU machine every build
of the first tuning run timed out). A tensorized module needs no intrinsic registry to compile.

TIR pipeline "flashgemm": TVM's default ("s_tir") pipeline with one change in the device finalization.
TVM 0.27's LowerWarpMemory lowers only the *first* "warp"-scope allocation of a statement sequence:
it rewrites the accesses in the allocation's siblings but does not visit the later allocations among
them. A tensor-core kernel has one accumulator and at least two A/B fragment buffers, so all but the
accumulator stayed 32x-too-large per-thread arrays indexed by threadIdx.x (`half A_warp[256]`): local
memory, a st.local/ld.local round trip per ldmatrix -> mma. Running the pass until the module stops
changing lowers them all (each run lowers one more; an already lowered buffer is "local" and skipped).
"""
from __future__ import annotations

import os

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")  # nvrtc needs cuda-bindings; inherited by workers

import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
import tvm.support.nvcc  # noqa: E402,F401  (registers tvm_callback_cuda_compile: without it codegen keeps CUDA source)
from tvm import tirx  # noqa: E402
from tvm.tirx import compilation_pipeline as _pipelines  # noqa: E402

# * use_async_copy: the pipelined global->shared copies become cp.async.
# * disable_cse_tir: TIR's common-subexpression elimination binds `threadIdx.x * 8` to a variable before
#   LowerWarpMemory runs, which then cannot see the fragment index's threadIdx.x coefficient and fails
#   ("require positive constant coefficient on warp index"). nvcc eliminates common subexpressions anyway.
# Not used: tirx.merge_static_smem (would turn static shared buffers dynamic too) breaks the generic
# kernel's cross-thread reductions in MergeSharedMemoryAllocations ("buffer_byte_offsets" check);
# the space allocates its big buffers in "shared.dyn" itself.
PASS_CONFIG = {"tirx.use_async_copy": True, "tirx.disable_cse_tir": True}
TIR_PIPELINE = "flashgemm"
_MAX_WARP_BUFFERS = 64  # fragments of one kernel; a guard against a pass that never converges


@tvm.transform.module_pass(opt_level=0, name="flashgemm.LowerAllWarpMemory")
def lower_all_warp_memory(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """LowerWarpMemory to a fixed point (module doc)."""
    lower = tirx.transform.LowerWarpMemory()
    for _ in range(_MAX_WARP_BUFFERS):
        new = lower(mod)
        if tvm_ffi.structural_equal(new, mod):
            return new
        mod = new
    return mod


def _flashgemm_pipeline(**kwargs):
    pipeline, finalize_host, _ = _pipelines.get_tir_pipeline("s_tir", **kwargs)

    def finalize_device():
        return tvm.ir.transform.Sequential([lower_all_warp_memory, tirx.transform.StmtSimplify(),
                                            tirx.transform.LowerIntrin()])
    return pipeline, finalize_host, finalize_device


_pipelines.register_tir_pipeline(TIR_PIPELINE, _flashgemm_pipeline)


_INDEX_MAP = "tirx.index_map.shared_16x16_to_ldmatrix_32x8_layout"


def _register_mma_store_index_map() -> None:
    """CodeGenCUDA emits the mma accumulator store (`mma_store`) through this index map, which TVM
    registers only when its tensor-intrinsic module is imported (what builder workers must not do,
    module doc). Register the same function here when it is missing (same body as TVM's)."""
    if tvm_ffi.get_global_func(_INDEX_MAP, allow_missing=True) is not None:
        return

    def index_map(ind):
        i, j = ind[0], ind[1]
        return tvm.runtime.convert([4 * (i % 8) + (j % 8) // 2, 4 * (j // 8) + (i // 8) * 2 + (j % 2)])
    tvm_ffi.register_global_func(_INDEX_MAP, index_map)


_register_mma_store_index_map()


class UnloweredWarpMemoryError(RuntimeError):
    """A kernel whose "warp" buffers LowerWarpMemory cannot lower and that no fallback compiles correctly."""


def warp_accumulators(mod) -> list:
    """Names of the fp32 "warp"-scope buffers (mma accumulators; A/B fragments are fp16/bf16) of a scheduled
    module: the schedule primitives allocate them on each function's root block."""
    names = []
    for _, func in mod.functions.items():
        body = getattr(func, "body", None)
        block = getattr(body, "block", None)
        for buf in getattr(block, "alloc_buffers", []):
            if buf.scope() == "warp" and str(buf.dtype) == "float32":
                names.append(buf.name)
    return names


def compile_cuda(mod, target):
    """tvm.compile for a CUDA target: inside `with target:` (nvcc builds for target.arch, not the local
    GPU), with PASS_CONFIG and the flashgemm TIR pipeline.

    Fallback: LowerWarpMemory cannot split some accumulator indices (e.g. `threadIdx.x*8 + 257` of the
    per-element accumulator store that records tuned before the mma_store change use). Such a module is
    compiled exactly as it was tuned: TVM's default pipeline with CSE (its A/B fragments then stay in
    local memory, as they were when it was measured). Only with one accumulator: TVM's pipeline lowers only
    the first "warp" buffer, and a second accumulator left unlowered computes wrong answers (its mma_fill
    zeroes lane 0's slot only), so a module with several raises UnloweredWarpMemoryError instead (a tuning
    candidate then fails to build and is counted invalid)."""
    try:
        with target, tvm.transform.PassContext(config=PASS_CONFIG):
            return tvm.compile(mod, target=target, tir_pipeline=TIR_PIPELINE)
    except tvm.error.InternalError as err:
        if "LowerWarpMemory" not in str(err) and "LowerAllWarpMemory" not in str(err):
            raise
        accumulators = warp_accumulators(mod)
        if len(accumulators) > 1:
            reason = str(err).strip().splitlines()[-1]
            raise UnloweredWarpMemoryError(
                f"LowerWarpMemory failed on a kernel with {len(accumulators)} mma accumulators "
                f"({', '.join(accumulators)}): {reason}. TVM's default pipeline would leave all but the first in "
                f"wrong per-lane arrays, so it is not compiled (a schedule bug, not an input error).") from err
    with target, tvm.transform.PassContext(config={**PASS_CONFIG, "tirx.disable_cse_tir": False}):
        return tvm.compile(mod, target=target)


def f_build(mod, target, _params=None):
    """Meta-Schedule f_build: compile_cuda of the candidate (the default builder builds for the local GPU)."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: PLC0415

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return compile_cuda(mod, target).mod
