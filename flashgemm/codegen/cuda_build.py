"""How every CUDA kernel of the project is compiled: Meta-Schedule's builder workers, the final export
and the benchmarks all use `f_build` / `compile_cuda` / PASS_CONFIG from here.

This module is deliberately light: builder workers are fresh processes that unpickle `f_build` by reference, so
importing this module must not import TVM's tensor-intrinsic modules (seconds of TVMScript parsing per worker; with many
workers starting at once, a whole batch's builds can time out). A tensorized module needs no intrinsic registry to
compile.

The TIR pipeline "flashgemm" is TVM's default ("s_tir") pipeline with our passes around it, and CodeGenCUDA's
source hook runs our rewrites of the CUDA text: all of them, in order, are PASSES below (one entry a pass, named
verb_object; each module's docstring says what its pass does, why, and what it proves before it rewrites).
FLASHGEMM_DISABLE_PASSES=name[,name...] leaves passes out for A/B runs (flashgemm/codegen/device_pass.py); the ones
marked required cannot be left out. The CUDA-text rewrites match TVM's printed code with regular expressions: each is
there because TIR could not express it at that point of the pipeline (its module says why), and its tests compile a
shipped kernel and fail, naming the pass, when the printed code stops matching.
"""
from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
from typing import Optional

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")  # nvrtc needs cuda-bindings; inherited by workers

import tvm  # noqa: E402
import tvm_ffi  # noqa: E402
import tvm.support.nvcc  # noqa: E402,F401  (registers tvm_callback_cuda_compile: without it codegen keeps CUDA source)
from tvm import tirx  # noqa: E402
from tvm.tirx import compilation_pipeline as _pipelines  # noqa: E402

from dataclasses import dataclass  # noqa: E402
from typing import Callable, Union  # noqa: E402

from flashgemm.codegen.tir import (make_copies_async, keep_exp_in_accumulator, take_scale_out_of_max,  # noqa: E402
                                   reduce_statistics_in_quads, keep_rows_in_registers, skip_chunks_past_n,
                                   skip_rows_past_m, rewrite_softmax_arithmetic, move_statistics_to_static_shared,
                                   keep_warp_statistics_in_registers)
from flashgemm.codegen import device_pass
from flashgemm.codegen.cuda_src import (convert_bf16_by_shift, exchange_statistics_once, store_whole_sectors,
                                        unguard_normalize)
from flashgemm import targets

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


@dataclass(frozen=True)
class Pass:
    """One pass of the compile pipeline: `apply` is a TVM module pass (stages SCHEDULED and DEVICE) or a function of
    the CUDA source text (stage SOURCE)."""
    name: str
    stage: str
    apply: Union[tvm.transform.Pass, Callable[[str], str]]
    required: bool = False  # kernels are wrong or do not compile without it: never left out


SCHEDULED = "scheduled TIR, before TVM's lowering"
DEVICE = "device TIR, TVM's device finalization"
SOURCE = "CUDA source, CodeGenCUDA's postproc hook"


def _passes():
    tir = tirx.transform
    return (
        Pass("keep_warp_statistics_in_registers", SCHEDULED, keep_warp_statistics_in_registers.warp_statistics_in_registers),
        Pass("move_statistics_to_static_shared", SCHEDULED, move_statistics_to_static_shared.statistics_in_static_shared),
        Pass("skip_rows_past_m", SCHEDULED, skip_rows_past_m.skip_rows_past_m),
        Pass("skip_chunks_past_n", SCHEDULED, skip_chunks_past_n.skip_chunks_past_n),
        # (TVM's s_tir pipeline runs here)
        Pass("lower_all_warp_memory", DEVICE, lower_all_warp_memory, required=True),
        Pass("keep_exp_in_accumulator", DEVICE, keep_exp_in_accumulator.keep_exp_in_accumulator),
        Pass("rewrite_softmax_arithmetic", DEVICE, rewrite_softmax_arithmetic.rewrite_softmax_arithmetic),
        Pass("keep_rows_in_registers", DEVICE, keep_rows_in_registers.keep_rows_in_registers),
        Pass("reduce_statistics_in_quads", DEVICE, reduce_statistics_in_quads.reduce_statistics_in_quads),
        Pass("take_scale_out_of_max", DEVICE, take_scale_out_of_max.take_scale_out_of_max),
        Pass("make_copies_async", DEVICE, make_copies_async.make_copies_async),
        Pass("simplify", DEVICE, tir.StmtSimplify(), required=True),
        Pass("lower_intrinsics", DEVICE, tir.LowerIntrin(), required=True),
        Pass("check_shared_memory", DEVICE, move_statistics_to_static_shared.check_shared_memory, required=True),
        Pass("cap_registers", SOURCE, _cap_registers),
        Pass("unguard_normalize", SOURCE, unguard_normalize.unguard_recompute_normalize),
        Pass("store_whole_sectors", SOURCE, store_whole_sectors.rewrite),
        Pass("stream_p_stores", SOURCE, store_whole_sectors.stream),
        Pass("exchange_statistics_once", SOURCE, exchange_statistics_once.rewrite),
        Pass("convert_bf16_by_shift", SOURCE, convert_bf16_by_shift.bf16_to_f32_by_shift),
    )


def enabled_passes(stage: str) -> list:
    """The passes of `stage` that run, in order (FLASHGEMM_DISABLE_PASSES checked against PASSES)."""
    off = device_pass.disabled_passes()
    names = {p.name: p for p in PASSES}
    unknown = sorted(off - set(names))
    if unknown:
        raise ValueError(f"{device_pass.DISABLE_ENV} names no pass {', '.join(unknown)}; the passes: "
                         f"{', '.join(names)}")
    required = sorted(n for n in off if names[n].required)
    if required:
        raise ValueError(f"{device_pass.DISABLE_ENV}: {', '.join(required)} cannot be left out (the kernels need it)")
    return [p for p in PASSES if p.stage == stage and p.name not in off]


def _flashgemm_pipeline(**kwargs):
    pipeline, finalize_host, _ = _pipelines.get_tir_pipeline("s_tir", **kwargs)

    def finalize_device():
        return tvm.ir.transform.Sequential([p.apply for p in enabled_passes(DEVICE)])
    pipeline = tvm.ir.transform.Sequential([p.apply for p in enabled_passes(SCHEDULED)] + [pipeline])
    return pipeline, finalize_host, finalize_device


_pipelines.register_tir_pipeline(TIR_PIPELINE, _flashgemm_pipeline)


# ---- PTX beside the machine code (flashgemm-build --embed-ptx)
# TVM's nvcc callback builds a fatbin of one arch's machine code (-gencode arch=compute_XY,code=sm_XY): an sm_80 or
# sm_89 bundle then runs on no other GPU. Inside embedded_ptx() it also embeds the PTX (code=compute_XY), which the
# driver compiles at load time for a newer GPU: how the sm_80 and sm_89 bundles are run and checked on an sm_90 one.
# Shipped bundles leave it out (a cold JIT compile at load, and the op's arch check refuses them elsewhere anyway).
_ptx = threading.local()


@contextlib.contextmanager
def embedded_ptx():
    """CUDA compiles in this block embed their PTX beside the machine code (note above)."""
    before = getattr(_ptx, "on", False)
    _ptx.on = True
    try:
        yield
    finally:
        _ptx.on = before


@tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
def _compile_source(code):
    """TVM's nvcc/nvrtc callback, with the PTX embedded inside embedded_ptx() (note above)."""
    if not getattr(_ptx, "on", False):
        return tvm.support.nvcc.tvm_callback_cuda_compile(code)
    arch = str(tvm.target.Target.current().attrs["arch"])  # sm_XY or sm_90a
    v = arch[len("sm_"):]
    return tvm.support.nvcc.compile_cuda(code, target_format="fatbin", compiler="nvcc", arch=[
        "-gencode", f"arch=compute_{v},code=sm_{v}", "-gencode", f"arch=compute_{v},code=compute_{v}"])


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


# ---- occupancy of the shipped forms (flashgemm.bundle.best: TunedKernel.max_registers)
# A tuned kernel ships as its runtime forms (symbolic strides, runtime scale, any batch or a fixed-batch twin), whose
# index math can cost ptxas a few registers more than the form that was measured, and that can cross an occupancy
# step (e.g. a W3 resident-A kernel at 79 registers as tuned, 4 blocks of 192 threads an SM, and 81 as its twin, 3
# blocks: several percent slower as shipped). A function with MAX_REGISTERS_ATTR = R is
# compiled with __maxnreg__(R) in place of __launch_bounds__(threads) (CUDA >= 12.4; nvcc refuses both on one kernel):
# with R the measured form's count rounded up to the allocation unit, the shipped form keeps its occupancy (at worst
# a few bytes of spills), and never needs more registers than the launch has.
MAX_REGISTERS_ATTR = "flashgemm.max_registers"
_launch_max_registers: dict = {}  # global symbol -> R while compile_cuda runs (the postproc callback reads it)


@tvm_ffi.register_global_func("tvm_callback_cuda_postproc", override=True)
def _postproc_source(code, *_target):
    """CodeGenCUDA's source hook: the SOURCE passes of PASSES, in order."""
    for p in enabled_passes(SOURCE):
        code = p.apply(code)
    return code


def _cap_registers(code: str) -> str:
    """__launch_bounds__(T) -> __maxnreg__(R) on the kernels of functions with MAX_REGISTERS_ATTR."""
    for symbol, regs in _launch_max_registers.items():
        code = re.sub(r"__launch_bounds__\(\d+\)(\s+%s_kernel\w*\()" % re.escape(symbol),
                      lambda mt: f"__maxnreg__({regs}){mt.group(1)}", code)
    return code


PASSES = _passes()  # THE ordered table of the compile pipeline's passes (module doc)


def cubin_registers(cubin: bytes) -> int:
    """The largest register count of a cubin's kernels: the EIATTR_REGCOUNT entries of its ELF ".nv.info" section
    (cuobjdump -res-usage reads the same; it is not always installed where nvcc is)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]
    regs = []
    for name, _, _, _, off, size in sections:
        if cubin[names_at + name:cubin.index(b"\0", names_at + name)] != b".nv.info":
            continue
        p = off
        while p < off + size:  # entries: format byte, attribute byte, then a u16 value or (format 4) size + payload
            fmt, attr = cubin[p], cubin[p + 1]
            length = struct.unpack_from("<H", cubin, p + 2)[0] if fmt == 4 else 0
            if fmt == 4 and attr == 0x2F:  # EIATTR_REGCOUNT: (symbol index, registers)
                regs.append(struct.unpack_from("<I", cubin, p + 8)[0])
            p += 4 + length
    if not regs:
        raise ValueError("no register count in the cubin")
    return max(regs)


def kernel_registers(mod, target) -> Optional[int]:
    """Registers a thread of a one-kernel module's kernel, compiled as compile_cuda compiles it (the same nvcc options,
    for target's arch), rounded up to the allocation unit (8 a thread, 256 a warp); None for a module of several
    kernels (split-N's chunk and combine kernels: the cap is per function, not per kernel)."""
    ex = compile_cuda(mod, target)
    src = ex.mod.imports[0].inspect_source("cuda")
    if src.count("__global__") != 2:  # (one kernel: its declaration and its definition)
        return None
    with target:
        cubin = tvm.support.nvcc.compile_cuda(src, target_format="cubin", compiler="nvcc")
    return -(-cubin_registers(bytes(cubin)) // 8) * 8


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


def uses_wgmma(mod) -> bool:
    """Whether a scheduled module calls wgmma (a tensorized cuda_wgmma intrinsic)."""
    return "T.ptx.wgmma" in mod.script()


_wgmma_codegen_lock = threading.Lock()
_wgmma_codegen_done = False


def register_wgmma_codegen() -> None:
    """TVM 0.27's codegen of T.cuda.wgmma.noop_barrier reads `reg.dtype` (a TensorLoad has only `.ty`) and its
    helper takes the register by value, so its "+f" constraint fences a copy. Registered again, by reference
    (CUTLASS's warpgroup_fence_operand): it keeps nvcc from moving accumulator accesses across an asynchronous
    wgmma (flashgemm/spaces/cuda_wgmma). Here, not there, because builder workers import only this module."""
    global _wgmma_codegen_done
    with _wgmma_codegen_lock:
        if _wgmma_codegen_done:
            return
        from tvm.backend.cuda.codegen.registry import CODEGEN_REGISTRY, register_codegen  # noqa: PLC0415
        from tvm.backend.cuda.codegen.schema import device_intrinsic  # noqa: PLC0415
        for ty, c_type, constraint in (("float32", "float", "f"), ("uint32", "uint32_t", "r")):
            device_intrinsic(f"fg_wgmma_fence_operand_{ty}", helper_name=f"fg_wgmma_fence_operand_{ty}",
                             c_signature=f"({c_type}& reg)",
                             body=f'    asm volatile("" : "+{constraint}"(reg) :: "memory");')

        @register_codegen("cuda_wgmma_noop_barrier")
        def _noop_barrier(reg):
            res = CODEGEN_REGISTRY[f"tirx.fg_wgmma_fence_operand_{reg.ty}"]([reg])
            return res[0] if isinstance(res, tuple) else res

        _wgmma_codegen_done = True


def compile_cuda(mod, target):
    """tvm.compile for a CUDA target: inside `with target:` (nvcc builds for target.arch, not the local
    GPU), with PASS_CONFIG and the flashgemm TIR pipeline.

    Fallback: LowerWarpMemory cannot split some accumulator indices (e.g. `threadIdx.x*8 + 257` of the
    per-element accumulator store that records tuned before the mma_store change use). Such a module is
    compiled exactly as it was tuned: TVM's default pipeline with CSE (its A/B fragments then stay in
    local memory, as they were when it was measured). Only with one accumulator: TVM's pipeline lowers only
    the first "warp" buffer, and a second accumulator left unlowered computes wrong answers (its mma_fill
    zeroes lane 0's slot only), so a module with several raises UnloweredWarpMemoryError instead (a tuning
    candidate then fails to build and is counted invalid).

    Functions with MAX_REGISTERS_ATTR get that register cap (note above).

    A module that uses wgmma (flashgemm/spaces/cuda_wgmma) is built for sm_90a when sm_90 is asked: wgmma is in sm_90a's
    PTX only, and sm_90a code runs on exactly the GPUs sm_90 code does (compute capability 9.0)."""
    arch = str(target.attrs.get("arch", ""))
    if arch != "sm_90a" and uses_wgmma(mod):
        if arch != "sm_90":
            raise ValueError(f"the module uses Hopper's wgmma (flashgemm/spaces/cuda_wgmma), which {arch} lacks: build it "
                             "for sm_90, or take a record without wgmma for this arch")
        target = tvm.target.Target({"tag": targets.CUDA_ARCHES["sm_90"], "arch": "sm_90a"})
    if str(target.attrs.get("arch", "")).endswith("a"):  # sm_90a: the wgmma kernels (cuda_wgmma)
        register_wgmma_codegen()
    _launch_max_registers.clear()
    _launch_max_registers.update({str(f.attrs["global_symbol"]): int(f.attrs[MAX_REGISTERS_ATTR])
                                  for _, f in mod.functions.items()
                                  if f.attrs is not None and MAX_REGISTERS_ATTR in f.attrs
                                  and "global_symbol" in f.attrs})
    try:
        return _compile_cuda(mod, target)
    finally:
        _launch_max_registers.clear()


def _compile_cuda(mod, target):
    try:
        try:
            with target, tvm.transform.PassContext(config=PASS_CONFIG):
                return tvm.compile(mod, target=target, tir_pipeline=TIR_PIPELINE)
        except Exception as err:  # noqa: BLE001  (only the moved statistics' shared-memory overflows are retried)
            if not move_statistics_to_static_shared.overflows_static(err):
                raise
        with move_statistics_to_static_shared.left_dynamic(), target, tvm.transform.PassContext(config=PASS_CONFIG):
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
