"""How every CUDA kernel of the project is compiled: Meta-Schedule's builder workers, the final export
and the benchmarks all use `f_build` / `compile_cuda` / PASS_CONFIG from here.

This module is deliberately light: builder workers are fresh processes that unpickle `f_build` by
reference, so importing this module must not import TVM's tensor-intrinsic modules (16 s of TVMScript
parsing per worker on a 2-core box; with 16 workers starting at once on the GPU machine every build
of the first tuning run timed out). A tensorized module needs no intrinsic registry to compile.

The TIR pipeline "flashgemm" is TVM's default ("s_tir") pipeline with our passes around it, and CodeGenCUDA's
source hook runs our rewrites of the CUDA text: all of them, in order, are PASSES below (one entry a pass, named
verb_object; each module's docstring says what its pass does, why, and what it proves before it rewrites).
FLASHGEMM_DISABLE_PASSES=name[,name...] leaves passes out for A/B runs (schedules/device_pass.py); the ones marked
required cannot be left out. The CUDA-text rewrites match TVM's printed code with regular expressions: each is
there because TIR could not express it at that point of the pipeline (its module says why), and its tests compile
a shipped kernel and fail, naming the pass, when the printed code stops matching.
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

from . import (async_copies, device_pass, exp_in_accumulator, max_scale, one_exchange,  # noqa: E402
               quad_statistics, row_registers, sector_stores, skip_chunks, skip_rows, softmax_arithmetic,
               static_statistics, targets, warp_statistics)

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
        Pass("keep_warp_statistics_in_registers", SCHEDULED, warp_statistics.warp_statistics_in_registers),
        Pass("move_statistics_to_static_shared", SCHEDULED, static_statistics.statistics_in_static_shared),
        Pass("skip_rows_past_m", SCHEDULED, skip_rows.skip_rows),
        Pass("skip_chunks_past_n", SCHEDULED, skip_chunks.skip_chunks),
        # (TVM's s_tir pipeline runs here)
        Pass("lower_all_warp_memory", DEVICE, lower_all_warp_memory, required=True),
        Pass("keep_exp_in_accumulator", DEVICE, exp_in_accumulator.exp_in_accumulator),
        Pass("rewrite_softmax_arithmetic", DEVICE, softmax_arithmetic.softmax_arithmetic),
        Pass("keep_rows_in_registers", DEVICE, row_registers.row_registers),
        Pass("reduce_statistics_in_quads", DEVICE, quad_statistics.quad_statistics),
        Pass("take_scale_out_of_max", DEVICE, max_scale.max_scale),
        Pass("make_copies_async", DEVICE, async_copies.async_copies),
        Pass("simplify", DEVICE, tir.StmtSimplify(), required=True),
        Pass("lower_intrinsics", DEVICE, tir.LowerIntrin(), required=True),
        Pass("check_shared_memory", DEVICE, static_statistics.check_shared_memory, required=True),
        Pass("cap_registers", SOURCE, _cap_registers),
        Pass("unguard_normalize", SOURCE, unguard_recompute_normalize),
        Pass("store_whole_sectors", SOURCE, sector_stores.rewrite),
        Pass("stream_p_stores", SOURCE, sector_stores.stream),
        Pass("exchange_statistics_once", SOURCE, one_exchange.rewrite),
        Pass("convert_bf16_by_shift", SOURCE, bf16_to_f32_by_shift),
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


# ---- PTX beside the machine code (scripts/build.py --embed-ptx)
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


# ---- occupancy of the shipped forms (tuning_db.best: TunedKernel.max_registers)
# A tuned kernel ships as its runtime forms (symbolic strides, runtime scale, any batch or a fixed-batch twin), whose
# index math can cost ptxas a few registers more than the form that was measured, and that can cross an occupancy
# step: the W3 resident-A winner took 79 registers as tuned (4 blocks of 192 threads an SM) and 81 as its twin (3
# blocks): 759.8 us in tuning, 806.3 us as shipped (H200, 2026-11-26). A function with MAX_REGISTERS_ATTR = R is
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


# ---- the normalize step without a branch (the recompute form's kernels)
# The template writes P = (row_sum == 0 ? 0 : E / row_sum) as T.if_then_else: a fully masked row (sum 0) gives zeros,
# and a NaN sum (a NaN or +inf logit in the row) fails the test, so the row comes out NaN (README: special values).
# CodeGenCUDA prints it as an if/else whose else holds the whole element computation (exp, division):
#     if (SUM == 0x0p+0f/*0.000000e+00*/) { condval = 0; } else { ...; condval = E / SUM; }
# nvcc keeps it a branch per element or vector (a BSSY/BSYNC convergence region each, the reciprocal inside).
# unguard_normalize computes the else's body unconditionally and then zeroes the result where the test holds:
#     { ...; condval = E / SUM; }  if (SUM == 0x0p+0f/*0.000000e+00*/) { condval = 0; }
# Same values for every input (a zero sum gives 0, a NaN sum NaN). The body only reads what the branch read, and
# every such read sits inside the bounds guard that encloses the if, not under the sum test, so it is as safe
# unguarded. Only this exact shape is touched: a test `X == 0`, a then of `V = <zeros>;`, an else whose body ends
# in `V = ...;`.
# Where it pays (H100, benchmarks/shipped_forms_ab.py --guarded, results/h100/unguard-ab-*): the recompute form's
# W3 kernels ran 7-8 % faster as shipped (fixed-batch twin, median of 5 alternating rounds: fp16 747 against 801 us,
# bf16 734 against 800), but the register sketch's W1 kernels ran 20 % *slower* (143-146 against 119-120 us), though
# its SASS went from 140 to 12 BSSY and from 128 to 8 MUFU.RCP, kept its occupancy and spills nothing: a P pass no
# longer paced by its exps and reciprocals sends P's half-sector stores in bursts, and they, not the math, bound the
# kernel (sector_stores' module doc; with its whole-sector stores this rewrite changes W1 by < 1 %).
# The shared-S form (W2) moved by 1 %. So the hook applies it to the recompute form's kernels only, recognised by its
# third copy of S (`S_p_*` in the source: tir_kernels' recompute template is the only one with an "S_p" buffer).
_ZERO = r"0x0p\+0f/\*0\.000000e\+00\*/"
_SUM_TEST = re.compile(r"^(?P<ind>[ \t]*)if \((?=[^\n]* == %s\) \{\n)" % _ZERO, re.M)
_ZERO_THEN = re.compile(r"\{\n[ \t]*(?P<var>\w+) = (?P<zero>(?:make_float\d\()?%s(?:, %s)*\)?);\n[ \t]*\} else \{"
                        % (_ZERO, _ZERO))


def _closing(code: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket that closes code[i] (== open_), or -1."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return -1


_RECOMPUTE_FORM = re.compile(r"\bS_p_(?:warp|local|shared)")


def unguard_recompute_normalize(code: str) -> str:
    """unguard_normalize on the recompute form's kernels (note above)."""
    if not _RECOMPUTE_FORM.search(code):
        return code
    return unguard_normalize(code)


def unguard_normalize(code: str) -> str:
    """The normalize step's `if (SUM == 0) {V = 0;} else {...}` -> `{...} if (SUM == 0) {V = 0;}` (note above)."""
    out, pos = [], 0
    for m in _SUM_TEST.finditer(code):
        if m.start() < pos:
            continue
        cond_open = m.end() - 1
        cond_close = _closing(code, cond_open, "(", ")")
        if cond_close < 0 or not re.search(r" == %s$" % _ZERO, code[cond_open + 1:cond_close]):
            continue
        then = _ZERO_THEN.match(code, cond_close + 2)
        if then is None:
            continue
        body_open = then.end() - 1
        body_close = _closing(code, body_open, "{", "}")
        if body_close < 0:
            continue
        body, var = code[body_open + 1:body_close], then.group("var")
        if not re.search(r"(^|\n)[ \t]*%s = [^;]*;\s*$" % re.escape(var), body):
            continue
        ind = m.group("ind")
        out += [code[pos:m.start()], f"{ind}{{{body}}}\n{ind}if ({code[cond_open + 1:cond_close]}) {{\n",
                f"{ind}  {var} = {then.group('zero')};\n{ind}}}"]
        pos = body_close + 1
    return "".join(out) + code[pos:]


# ---- bf16 -> fp32 conversions
# CodeGenCUDA writes a cast to fp32 as `((float)x)`; for an nv_bfloat16 x that is cuda_bf16.h's conversion
# operator, an inline-asm cvt.f32.bf16, and ptxas then keeps every bf16 load from shared memory a 2-byte LDS.U16. Its
# fp16 twin (cvt.f32.f16 -> HADD2.F32, which reads either half of a register) lets ptxas merge four consecutive loads
# into one LDS.64. The one-row GEMV (cuda_row_vector: decode-m1) reads B from shared memory element by element and
# converts each: SASS of the same schedule has 512 LDS.U16 in bf16 against 34 LDS.64 + 18 LDS for 128 elements in
# fp16, and ran 18.5 us in bf16 against 10.8 us in fp16 (H100, 2026-11-26). The conversion is exact as a bit shift
# (bf16 is fp32's upper half), and written so (no asm) ptxas merges the loads (64 LDS.128 in the same kernel).
# So every `((float)E)` becomes `(flashgemm_f32(E))`: a template that casts, overloaded for nv_bfloat16.
BF16_TO_F32 = """
template <typename T> static __device__ __forceinline__ float flashgemm_f32(T x) { return (float)x; }
static __device__ __forceinline__ float flashgemm_f32(nv_bfloat16 x) {
  return __uint_as_float(((unsigned int)__bfloat16_as_ushort(x)) << 16);
}
"""


def bf16_to_f32_by_shift(code: str) -> str:
    """Rewrite the fp32 casts of a CUDA source that uses nv_bfloat16 (note above); other sources are unchanged."""
    if "nv_bfloat16" not in code:
        return code
    kernel = code.find('extern "C" __global__')  # (the helper goes before the kernels: the preamble keeps its casts)
    if kernel < 0:
        return code
    return code[:kernel] + BF16_TO_F32 + _rewrite_f32_casts(code[kernel:])


def _rewrite_f32_casts(code: str) -> str:
    """`((float)E)` -> `(flashgemm_f32(E))`, E up to the parenthesis that closes the cast's own (nested casts too)."""
    out, pos, cast = [], 0, "((float)"
    while (at := code.find(cast, pos)) >= 0:
        end = _closing(code, at, "(", ")")
        if end < 0:
            raise ValueError(f"unbalanced parentheses after offset {at} of the CUDA source")
        out.append(code[pos:at] + "(flashgemm_f32(" + _rewrite_f32_casts(code[at + len(cast):end]) + "))")
        pos = end + 1
    return "".join(out) + code[pos:]


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
    wgmma (schedules/cuda_wgmma). Here, not there, because builder workers import only this module."""
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

    A module that uses wgmma (schedules/cuda_wgmma) is built for sm_90a when sm_90 is asked: wgmma is in sm_90a's
    PTX only, and sm_90a code runs on exactly the GPUs sm_90 code does (compute capability 9.0)."""
    arch = str(target.attrs.get("arch", ""))
    if arch != "sm_90a" and uses_wgmma(mod):
        if arch != "sm_90":
            raise ValueError(f"the module uses Hopper's wgmma (schedules/cuda_wgmma), which {arch} lacks: build it "
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
            if not static_statistics.overflows_static(err):
                raise
        with static_statistics.left_dynamic(), target, tvm.transform.PassContext(config=PASS_CONFIG):
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
