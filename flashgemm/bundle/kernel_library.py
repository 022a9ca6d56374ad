"""Export the runtime kernel bundle of one target: TVM `.so` libraries with every kernel, and its manifest.

Bundle layout (a directory, by default `build/<target>/`):

    flashgemm_kernels.so     the kernels, one exported function each (a large bundle's are compiled in parts,
                             in parallel: also flashgemm_kernels.1.so, ...; library_parts)
    manifest.json            which function serves which (variant, canonical shape); read by the C++ op
    libflashgemm_ort.so      the ONNX Runtime custom-op library (flashgemm/ort/native.py builds it)

Kernel calling convention (see flashgemm/kernel/fused_gemm_softmax.py and fused_attention.py):
    fn(A, B, [bias], [mask], P, scale: float32)              FusedGemmSoftmax
    fn(Q, K, V, [bias], [mask], O, scale: float32)           FusedAttention (manifest "op")
with canonical 4-D DLTensors; A/B (Q/K/V) batch strides and all bias/mask strides are free (0 = broadcast).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional

import tvm

from flashgemm import targets
from flashgemm.op.variant import CanonicalShape, Variant
from flashgemm.kernel import fused_attention, fused_attention_mma, fused_attention_wgmma, fused_gemm_softmax_wgmma
from flashgemm.kernel.fused_gemm_softmax import runtime_func
from flashgemm.bundle.best import TENSOR_CORE_ALIGN, TunedKernel, with_constant_argument
from flashgemm.bundle.attention_best import served_tiles
from flashgemm.bundle.workers import compile_jobs, from_json, made_in_workers

from flashgemm.bundle.compile_worker import compile_module  # noqa: F401  (the bundle's compile: workers load little)

# 2: entries name their "op" (FusedAttention's kernels); 3: FusedAttention's kernels take zero_nan_rows after the scale;
# 4: "kernels" lists the kernel libraries (library_parts); 5: FusedAttention's kernels take any row strides of Q, K,
# V and O (the op's BSNH views, attribute bsnh); 6: FusedAttention's split-N kernels ("split", a workspace argument).
# The op library reads 1 to 6 (an older bundle's FusedAttention kernels are left out before 3, serve compact tensors
# only before 5: flashgemm/ort/csrc/bundle.cc)
MANIFEST_FORMAT = 6
KERNELS_SO = "flashgemm_kernels.so"  # the first kernel library; the others flashgemm_kernels.<i>.so
# fewest kernels a library part holds (library_parts): a compile worker takes seconds to start (TVM's import)
KERNELS_A_PART = 16
MANIFEST = "manifest.json"
# seconds one tuned kernel may take to compile alone before the bundle leaves it out (export_bundle); the whole
# bundle's compile is given as many seconds a kernel it holds
COMPILE_LIMIT_S = 120.0
# the command that runs one time-limited compile (compile_worker), its arguments appended
WORKER = [sys.executable, "-m", "flashgemm.bundle.compile_worker"]


class CompileError(RuntimeError):
    """The bundle did not compile, or not within its time limit, with no tuned kernel left to leave out; the message
    is one line naming the fix or the log to read."""


def generic_name(variant: Variant) -> str:
    return f"fgs_{variant.key}_generic"


def attention_generic_name(variant: Variant) -> str:
    return f"fa_{variant.key}_generic"


def attention_mma_name(variant: Variant, head_size: int) -> str:
    return f"fa_{variant.key}_mma_d{head_size}"


def attention_wgmma_name(variant: Variant, head_size: int, max_n: Optional[int] = None) -> str:
    return f"fa_{variant.key}_wgmma_d{head_size}" + (f"_n{max_n}" if max_n else "")


def attention_split_name(variant: Variant, head_size: int) -> str:
    return f"fa_{variant.key}_split_d{head_size}"


def attention_tuned_name(variant: Variant, head_size: int, tile, max_n: Optional[int] = None) -> str:
    """A tuned tile's kernel (attention_best.served_tiles): named by its tile too, "_t" and its parameters."""
    return (f"fa_{variant.key}_{tile.form}_d{head_size}_t{'x'.join(str(p) for p in tile.params)}"
            + (f"_n{max_n}" if max_n else ""))


def attention_tensor_core_kernels(target_name: str, variant: Variant, tuned=()) -> list:
    """FusedAttention's tensor-core kernels a CUDA bundle ships for `variant`: (name, PrimFunc, manifest fields).
    sm_90: the wgmma kernel for its head sizes (flashgemm/kernel/fused_attention_wgmma.py), every other head size and
    arch: the mma.sync kernel (fused_attention_mma.py); each head size's tiles with the longest N each serves: the
    shipped TILES, and ahead of them the tuned tiles of `tuned` (attention_best.TunedTile) for this variant
    (attention_best.served_tiles). Every arch and head size also ships the split-N form (fused_attention_mma's split,
    manifest "split" [rows, chunk]), which the op takes for calls of few row tiles (a decoder's generation step)."""
    out = []
    for d in fused_attention_mma.HEAD_SIZES:
        for max_n, tile, t in served_tiles(target_name, variant, d, tuned):
            if t is not None:
                name = attention_tuned_name(variant, d, tile, max_n)
            elif tile.form == "wgmma":
                name = attention_wgmma_name(variant, d, max_n)
            else:
                name = attention_mma_name(variant, d)
            kernel = fused_attention_wgmma if tile.form == "wgmma" else fused_attention_mma
            fields = dict(form=tile.form, align=kernel.ALIGN, n_multiple=kernel.n_multiple(variant), head_size=d,
                          max_n=max_n, schedule="default")
            if t is not None:
                fields.update(schedule="tuned", sizes=t.sizes, workload=t.workload, run_secs=t.run_secs,
                              tuned_on=t.tuned_on)
            for zero_nan_rows in (0, 1):
                fname = name + ZERO_NAN_ROWS_SUFFIX * zero_nan_rows
                out.append((fname, with_zero_nan_rows(tile.kernel(variant, d, name=fname), zero_nan_rows),
                            dict(fields, zero_nan_rows=zero_nan_rows)))
        warps, mt, bn, _ = fused_attention_mma.SPLIT_TILES[d]
        for zero_nan_rows in (0, 1):
            fname = attention_split_name(variant, d) + ZERO_NAN_ROWS_SUFFIX * zero_nan_rows
            func = fused_attention_mma.runtime_func(variant, d, name=fname, split=True)
            out.append((fname, with_zero_nan_rows(func, zero_nan_rows),
                        dict(form="split", align=fused_attention_mma.ALIGN,
                             n_multiple=fused_attention_mma.n_multiple(variant), head_size=d, schedule="default",
                             split=[16 * mt * warps, bn], zero_nan_rows=zero_nan_rows)))
    return out


def variant_kernels(target_name: str, variant: Variant, attention: bool, tensor_core: bool, tuned=()) -> list:
    """The kernels a bundle ships for every shape of `variant`, in manifest order: (name, PrimFunc, manifest entry).
    FusedGemmSoftmax's generic kernel; with `attention` FusedAttention's, and with `tensor_core` (CUDA) its
    tensor-core kernels (attention_tensor_core_kernels, the tuned tiles of `tuned` among them)."""
    name = generic_name(variant)
    out = [(name, generic_schedule(target_name, runtime_func(variant, name=name)).mod["main"].with_attr(
        "global_symbol", name), _entry(name, variant))]
    if attention:
        name = attention_generic_name(variant)
        out.append((name, attention_generic_func(target_name, variant, name),
                    _entry(name, variant, op="FusedAttention")))
        if tensor_core:
            out += [(name, func, _entry(name, variant, op="FusedAttention", **fields))
                    for name, func, fields in attention_tensor_core_kernels(target_name, variant, tuned)]
    return out


def _portable_variant_kernels(*args) -> tuple:
    """variant_kernels for workers.made_in_workers: the functions as JSON, and no lines."""
    return [(name, tvm.ir.save_json(func), entry) for name, func, entry in variant_kernels(*args)], []


def _functions(made: list) -> list:
    """The _portable_* workers' results with their functions made again (from JSON)."""
    return [[(name, from_json(func), x) for name, func, x in kernels] for kernels in made]


def pair_kernels(target_name: str, variant: Variant, k: int) -> list:
    """FusedGemmSoftmax's tensor-core kernels of (variant, K) (gemm_softmax_tensor_core_kernels): (name, PrimFunc,
    manifest entry)."""
    return [(name, func, _entry(name, variant, schedule="default", **fields))
            for name, func, fields in gemm_softmax_tensor_core_kernels(target_name, variant, (k,))]


def _portable_pair_kernels(*args) -> tuple:
    """pair_kernels for workers.made_in_workers: the functions as JSON, and no lines."""
    return [(name, tvm.ir.save_json(func), entry) for name, func, entry in pair_kernels(*args)], []


ZERO_NAN_ROWS_SUFFIX = "_zeronan"  # the name of a tensor-core kernel's zero_nan_rows = 1 specialization


def with_zero_nan_rows(func: tvm.tirx.PrimFunc, value: int) -> tvm.tirx.PrimFunc:
    """A FusedAttention kernel specialized on its zero_nan_rows argument (which stays, ignored). Why: as an argument
    beside the scale it costs the wgmma kernel's (2, 128, 3) tile 42 % at W3 on the H200 (373.7 against 262.7 us, a
    register cliff: results/h200/attention-tuning-2026-12-03); the op serves each node the kernel of its attribute's
    value (manifest "zero_nan_rows")."""
    (param,) = [p for p in func.params if p.name == "zero_nan_rows"]
    return with_constant_argument(func, param, tvm.tirx.IntImm(str(param.ty.dtype), value))


def gemm_softmax_wgmma_name(variant: Variant, k: int) -> str:
    return f"fgs_{variant.key}_wgmma_k{k}"


def gemm_softmax_tensor_core_kernels(target_name: str, variant: Variant,
                                     ks=fused_gemm_softmax_wgmma.HEAD_SIZES) -> list:
    """FusedGemmSoftmax's Hopper kernels (sm_90 only; flashgemm/kernel/fused_gemm_softmax_wgmma.py) of `variant` for
    the K of `ks` it takes: (name, PrimFunc, manifest fields). The op serves one to the calls of its K with N >= min_n
    and M >= min_m ahead of the default-schedule and any-length kernels (up to N = first_max_n ahead of the tuned ones
    too), and to the others that only the generic kernel would serve otherwise."""
    if targets.resolve(target_name) != "sm_90":
        return []
    out = []
    for k in sorted(set(ks) & set(fused_gemm_softmax_wgmma.HEAD_SIZES)):
        name = gemm_softmax_wgmma_name(variant, k)
        out.append((name, fused_gemm_softmax_wgmma.runtime_func(variant, k, name=name),
                    dict(form="wgmma", align=fused_gemm_softmax_wgmma.ALIGN,
                         n_multiple=fused_gemm_softmax_wgmma.n_multiple(variant), head_size=k,
                         min_n=fused_gemm_softmax_wgmma.MIN_N, min_m=fused_gemm_softmax_wgmma.MIN_M,
                         first_max_n=fused_gemm_softmax_wgmma.FIRST_MAX_N)))
    return out


def tuned_name(variant: Variant, shape: CanonicalShape, any_batch: bool, kind: str = "tuned",
               fixed_batch: Optional[tuple] = None, scale: Optional[float] = None) -> str:
    """A kernel for any batch (runtime_func(any_batch=True)) is named by variant and M, N, K only, its fixed-batch
    twin with one batch dim static (TunedKernel.twin) with "b0is1_" or "b1is<n>_", the twin specialized on a scale
    with "_scale" and the scale's float32 bits in hex; a default (untuned) schedule's name says so."""
    b0, b1, m, n, k = shape.sizes
    batch = f"b{fixed_batch[0]}is{fixed_batch[1]}_" if fixed_batch else "" if any_batch else f"b{b0}x{b1}_"
    bits = f"_scale{struct.unpack('<I', struct.pack('<f', scale))[0]:08x}" if scale is not None else ""
    return f"fgs_{variant.key}_{'default_' if kind == 'default' else ''}{batch}m{m}_n{n}_k{k}{bits}"


def any_length_name(variant: Variant, bound: tuple, k: int, kind: str = "default", fixed_batch=None,
                    n_multiple: int = 1) -> str:
    """An any-length kernel: named by variant, bound and K (its twin: and the batch dim it fixes, N's multiple)."""
    twin = (f"_b{fixed_batch[0]}eq{fixed_batch[1]}" if fixed_batch else "") + (f"_n{n_multiple}" if n_multiple > 1
                                                                                 else "")
    return f"fgs_{variant.key}_{'default_' if kind == 'default' else ''}len{bound[0]}x{bound[1]}_k{k}{twin}"


def _entry(name, variant, shape=None, workload=None, run_secs=None, tuned_on=None, transferred=False, align=2,
           any_batch=False, schedule=None, fixed_batch=None, scale=None, bound=None, form=None, n_multiple=1,
           op="FusedGemmSoftmax", head_size=None, max_n=None, min_n=None, min_m=None, first_max_n=None, sizes=None,
           zero_nan_rows=None, split=None):
    if sizes is None and shape is not None:
        sizes = [1, 1, *bound, shape.sizes[4]] if bound else shape.sizes
    return {
        "name": name,
        # op: the operator the kernel computes, "FusedGemmSoftmax" or "FusedAttention" (its generic kernels, and on
        # CUDA its tensor-core kernels: form "mma" or "wgmma", one or more tiles a head size, schedule "default"
        # (the shipped tiles) or "tuned" (attention_best: a tuned tile, "sizes" its workload's))
        "op": op,
        # head_size: a tensor-core kernel's K, which serves every B0, B1, M and N of it: FusedAttention's
        # (attention_tensor_core_kernels; Q's and V's head size both this, N up to max_n where that is set) and
        # FusedGemmSoftmax's (gemm_softmax_tensor_core_kernels; where N >= min_n and M >= min_m ahead of the
        # default-schedule and any-length kernels, up to first_max_n of the tuned ones too; else before the generic
        # kernel); null for the others
        "head_size": head_size,
        "max_n": max_n,
        # zero_nan_rows: a FusedAttention tensor-core kernel specialized on the node attribute's value (0 or 1), served
        # only to nodes with it (with_zero_nan_rows); null for the others
        "zero_nan_rows": zero_nan_rows,
        # split: [rows, chunk] of a FusedAttention split-N kernel (fused_attention_mma's split form: a float32
        # workspace argument after O), served to calls of M <= rows whose row tiles leave SMs idle; null for the others
        "split": split,
        "min_n": min_n,
        "min_m": min_m,
        "first_max_n": first_max_n,
        "dtype": variant.dtype,
        "trans_b": int(variant.trans_b),
        "bias": int(variant.has_bias),
        "mask": variant.mask,
        "causal": int(variant.causal),
        "causal_fill": int(variant.causal_fill),
        # schedule: "tuned" (the best measured record), "default" (flashgemm/spaces/cuda_default: the tensor-core
        # space's schedule chosen by rule for a shape nobody tuned, never measured) or "generic" (any shape)
        "schedule": schedule or ("tuned" if sizes is not None else "generic"),
        "tuned": (schedule or "tuned") == "tuned" and sizes is not None,
        # [B0, B1, M, N, K] as tuned / scheduled (a tuned FusedAttention tile's: its workload's); an any-length
        # kernel's: [1, 1, Mb, Nb, K], its bound
        "sizes": list(sizes) if sizes is not None else None,
        # any_batch: the kernel serves every B0, B1 with these M, N, K (batch dims symbolic); else exactly `sizes`
        "any_batch": bool(any_batch),
        # any_length: the kernel serves every M <= Mb and N <= Nb (sizes) of its K, any batch
        # (flashgemm.bundle.any_length); the op takes the smallest bound that holds a call
        "any_length": bool(bound),
        # n_multiple: an any-length kernel that serves only the calls whose N is a multiple of it (its P stores are
        # vectors: flashgemm.kernel.fused_gemm_softmax.runtime_func's n_multiple), preferred there to the one without at
        # the same bound; a FusedAttention tensor-core kernel's with K as [D, N] (its rows copied in 16-byte chunks)
        "n_multiple": int(n_multiple),
        # form: the kernel form (flashgemm.kernel.fused_gemm_softmax) it is scheduled on (kernel_forms.forms:
        # "one-pass", "recompute", "any-length", "any-length-recompute", ...); "generic" for the generic kernels.
        # Reporting only: dispatch reads sizes, any_length and the twins' fields
        "form": form or ("generic" if sizes is None else "one-pass"),
        # fixed_batch: [dim, value] for an any-batch kernel's twin that serves only the calls whose canonical batch
        # dim `dim` (0: B0, 1: B1) equals `value`, preferred there to the plain any-batch kernel (constant index
        # math); null for the others
        "fixed_batch": list(fixed_batch) if fixed_batch else None,
        # scale: a twin specialized on this float32 scale (TunedKernel.shipped_func(scale=)): served only to the calls
        # whose scale attribute is exactly this value, before the plain twin; null for the others
        "scale": scale,
        # align: the byte alignment the kernel was compiled to assume for its pointers (runtime_func's align);
        # the op gives a call with less aligned pointers to the generic kernel instead
        "align": align,
        "workload": workload,
        "run_secs": run_secs,
        # tuned_on: the arch whose measurements chose this kernel. transferred: a record of another arch
        # (flashgemm-build --target sm_80 with only sm_90 databases), re-validated for this one but never
        # measured on it, i.e. untuned here; run_secs is then the other arch's time
        "tuned_on": tuned_on,
        "transferred": bool(transferred),
    }


def generic_schedule(target_name: str, func):
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_generic  # noqa: PLC0415  (GPU spaces: their own issue)
        return cuda_generic.generic_schedule(func)
    from flashgemm.spaces import llvm  # noqa: PLC0415
    return llvm.generic_schedule(func)


def attention_generic_func(target_name: str, variant: Variant, name: str):
    """FusedAttention's generic kernel of `variant` for the target, scheduled, named `name`."""
    if targets.is_cuda(target_name):
        from flashgemm.spaces import cuda_generic  # noqa: PLC0415
        sch = cuda_generic.attention_generic_schedule(
            fused_attention.runtime_func(variant, name=name, chunk=cuda_generic.THREADS))
    else:
        from flashgemm.spaces import llvm  # noqa: PLC0415
        sch = llvm.attention_generic_schedule(fused_attention.runtime_func(variant, name=name))
    return sch.mod["main"].with_attr("global_symbol", name)


@dataclasses.dataclass
class CompileJob:
    """One compile for run_compiles: `mod`, exported as a library to `export_to` when given; with `registers`, the
    register count of its kernel (compile_worker --registers) written to `export_to` instead."""
    name: str
    mod: tvm.IRModule
    export_to: Optional[Path] = None
    registers: bool = False
    embed_ptx: bool = False


class CompileFailure(NamedTuple):
    """Why a CompileJob gave no module: it ran past its limit (timed_out), or failed (the last line of its output,
    all of which is in `log`)."""
    timed_out: bool
    limit_s: float
    last_line: str = ""
    log: Optional[Path] = None

    def why(self) -> str:
        if self.timed_out:
            return f"its compile did not finish in {self.limit_s:g} s"
        return f"it does not compile ({self.last_line}; full output in {self.log})"


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the worker has exited, without reaping it: until proc.wait() its pid, which is its process group's id,
    cannot be given to another process, so a signal to that group reaches only what the worker started."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _end(proc: subprocess.Popen) -> int:
    """SIGKILL the worker's process group (all of it at the limit; whatever it started and left behind otherwise),
    then reap the worker; its exit status."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.wait()


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "no output"


def run_compiles(jobs: list, target_name: str, limit_s: float, work_dir: Path,
                 parallel: Optional[int] = None, progress: Optional[Callable] = None) -> dict:
    """Each job compiled (compile_module) in a worker process (compile_worker) that leads a process group of its own,
    at most `parallel` at once (default: one a core). A worker still running limit_s seconds after it started is
    killed with its whole group (nvcc, cicc, ptxas). Returns {job name: None when it compiled, else a
    CompileFailure}. The workers' output goes to work_dir, kept only for the jobs that failed (their CompileFailure
    names it). progress(number of jobs done), if given, as each one ends. No worker, nor anything one started,
    outlives this call, however it ends (an interrupt too)."""
    env = dict(os.environ)
    parallel = max(1, parallel or compile_jobs())
    pending, running, results = list(enumerate(jobs)), {}, {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                i, job = pending.pop(0)
                mod_path, log = work_dir / f"job{i}.json", work_dir / f"job{i}.log"
                mod_path.write_text(tvm.ir.save_json(job.mod))
                with open(log, "wb") as fh:
                    proc = subprocess.Popen([*WORKER, *(["--registers"] if job.registers else []),
                                             *(["--embed-ptx"] if job.embed_ptx else []),
                                             target_name, str(mod_path),
                                             *([str(job.export_to)] if job.export_to else [])],
                                            stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)
                running[i] = (job, proc, time.monotonic() + limit_s, mod_path, log)
            time.sleep(0.05)
            for i, (job, proc, deadline, mod_path, log) in list(running.items()):
                if _exited(proc):
                    status = _end(proc)
                    results[job.name] = None if status == 0 else CompileFailure(
                        False, limit_s, _last_line(log) if status > 0 else f"killed by signal {-status}", log)
                elif time.monotonic() >= deadline:
                    _end(proc)
                    results[job.name] = CompileFailure(True, limit_s)
                else:
                    continue
                del running[i]
                if progress is not None:
                    progress(len(results))
                mod_path.unlink(missing_ok=True)
                if results[job.name] is None or results[job.name].timed_out:
                    log.unlink(missing_ok=True)
    finally:
        for _, proc, _, _, _ in running.values():
            _end(proc)
    return results


def library_parts(n_kernels: int, cores: Optional[int] = None) -> int:
    """How many libraries a bundle of n_kernels is compiled into, one worker a part, all at once: TVM lowers a module's
    kernels one after another and nvcc compiles them as one source, so in one process a CUDA bundle takes about 1.5 s
    a tensor-core kernel (17.5 s for one variant's 12 FusedAttention kernels) and a bundle of hundreds of them runs
    past ten minutes. One part a core, each of at least KERNELS_A_PART kernels."""
    return max(1, min(cores or compile_jobs(), n_kernels // KERNELS_A_PART))


def library_names(parts: int) -> list:
    """The file names of a bundle's `parts` kernel libraries."""
    return [KERNELS_SO] + [f"flashgemm_kernels.{i}.so" for i in range(1, parts)]


def kernel_libraries(bundle_dir: os.PathLike) -> list:
    """The kernel library files of the bundle in `bundle_dir`, as its manifest names them (one name, not a list,
    before manifest format 4)."""
    bundle_dir = Path(bundle_dir)
    names = json.loads((bundle_dir / MANIFEST).read_text())["kernels"]
    return [bundle_dir / n for n in ([names] if isinstance(names, str) else names)]


class KernelLibraries:
    """A bundle's kernel libraries, loaded (tvm.runtime.load_module): libs[name] is the function of that name in
    whichever library holds it (KeyError when none does)."""

    def __init__(self, paths: Iterable[os.PathLike]):
        self.modules = [tvm.runtime.load_module(str(p)) for p in paths]

    def __getitem__(self, name: str):
        for m in self.modules:
            if m.implements_function(name, True):
                return m.get_function(name, True)
        raise KeyError(f"no kernel library of the bundle has a function {name}")


def _leave_out(funcs: dict, entries: list, names: list, why, log) -> None:
    """Drop the tuned kernels `names` from `funcs`/`entries`, each with a warning saying why (why(name)) and that its
    calls go to its variant's generic kernel."""
    for name in names:
        entry = next(e for e in entries if e["name"] == name)
        log(f"warning: left out tuned kernel {name} (workload {entry['workload']}): {why(name)}; its calls go to the "
            f"generic kernel. Retune the workload, or give it more time (flashgemm-build --compile-limit)")
        del funcs[name]
        entries.remove(entry)


def _leave_out_slow_kernels(funcs: dict, entries: list, target_name: str, limit_s: float, work_dir: Path,
                            log) -> None:
    """Drop from `funcs`/`entries` each tuned kernel that does not compile alone within `limit_s` seconds (or does not
    compile at all): each is compiled alone in a worker killed, with everything it started (nvcc), at the limit
    (run_compiles); the ones left out are served by their variant's generic kernel, with a warning naming them.
    Generic kernels (our own fixed schedule) are not probed: the whole bundle's limit (_compile_bundle) covers them."""
    tuned = [e["name"] for e in entries if e["schedule"] != "generic"]
    if not tuned:
        return
    log(f"checking that each of {len(tuned)} tuned kernels compiles within {limit_s:g} s ...")
    results = run_compiles([CompileJob(n, tvm.IRModule({n: funcs[n]})) for n in tuned], target_name, limit_s,
                           work_dir, parallel=min(len(tuned), compile_jobs()))
    _leave_out(funcs, entries, [n for n in tuned if results[n] is not None], lambda n: results[n].why(), log)


def _compile_bundle(funcs: dict, entries: list, target_name: str, limit_s: float, out_dir: Path, work_dir: Path,
                    log, embed_ptx: bool = False) -> list:
    """Compile `funcs` into library_parts(len(funcs)) libraries in out_dir (each as <name>.tmp), one worker a part, all
    at once, each killed after limit_s seconds a kernel it holds (the per-kernel limit, scaled to the part). Past that
    limit the tuned kernels are probed one by one (_leave_out_slow_kernels, where that was not done before the bundle)
    and the slow ones left out; if the bundle still does not finish, every tuned kernel is left out, with the
    per-kernel limit's warning, and the generic kernels are compiled alone under the same rule. Returns the libraries'
    names. CompileError (one line) when they do not finish either, or the bundle fails to compile."""
    def attempt():
        names = list(funcs)
        n = library_parts(len(names))
        parts, files = [names[i::n] for i in range(n)], library_names(n)  # round robin: each part a mix of forms
        part_limit = limit_s * max(len(p) for p in parts)
        jobs = [CompileJob(f, tvm.IRModule({k: funcs[k] for k in p}), out_dir / (f + ".tmp"), embed_ptx=embed_ptx)
                for f, p in zip(files, parts)]
        if n > 1:
            log(f"... in {n} libraries of about {len(parts[0])} kernels, compiled at once")
        start = time.monotonic()
        results = run_compiles(jobs, target_name, part_limit, work_dir, parallel=n,
                               progress=(lambda done: log(f"{done} of {n} libraries compiled "
                                                          f"({time.monotonic() - start:.0f} s)")) if n > 1 else None)
        failures = [r for r in results.values() if r is not None]
        return next((r for r in failures if not r.timed_out), failures[0] if failures else None), part_limit, files

    failure, part_limit, files = attempt()
    tuned = [e["name"] for e in entries if e["schedule"] != "generic"]
    if failure is not None and failure.timed_out and tuned and targets.is_cuda(target_name):
        log(f"the bundle's compile did not finish in {part_limit:g} s: looking for the slow tuned kernels ...")
        _leave_out_slow_kernels(funcs, entries, target_name, limit_s, work_dir, log)
        failure, part_limit, files = attempt()
        tuned = [e["name"] for e in entries if e["schedule"] != "generic"]
    if failure is not None and failure.timed_out and tuned:
        _leave_out(funcs, entries, tuned,
                   lambda _: f"the bundle's compile did not finish in {part_limit:g} s ({limit_s:g} s a kernel)", log)
        log(f"compiling the {len(funcs)} generic kernels alone for {target_name} ...")
        failure, part_limit, files = attempt()
    if failure is None:
        return files
    if failure.timed_out:
        raise CompileError(f"the {target_name} bundle ({len(funcs)} generic kernel{'s' if len(funcs) != 1 else ''}) "
                           f"did not compile in {part_limit:g} s ({limit_s:g} s a kernel); give it more time: "
                           f"flashgemm-build --compile-limit SECONDS (a kernel; 0: no limit)")
    raise CompileError(f"the {target_name} bundle does not compile: {failure.last_line}; full output in {failure.log}")


def _compile_limited(funcs: dict, entries: list, target_name: str, limit_s: float, out_dir: Path, log,
                     embed_ptx: bool = False) -> list:
    """export_bundle's compile under its limit, in worker processes (run_compiles) whose output lands in a temporary
    directory, kept only when a failure names a log in it.

    On llvm each tuned kernel is first compiled alone (_leave_out_slow_kernels): a tuning record can build in the
    tuner and still not finish compiling for the bundle, whose kernel has free (symbolic) batch and mask strides;
    with a large explicit unroll (pragma_auto_unroll_max_step 512 + vectorize) LLVM's optimizer ran for more than
    200 s on one demo kernel (17 s for its tuning form), and one such kernel would hold the whole bundle until its
    limit. nvcc has shown no such case, and probing every CUDA kernel would compile each twice, so a CUDA bundle is
    compiled at once and its tuned kernels probed only when it runs past its limit (_compile_bundle)."""
    if targets.is_cuda(target_name):
        from flashgemm.codegen import cuda_stub  # noqa: PLC0415
        cuda_stub.require_cuda_codegen()  # here, before any worker: one clear error instead of one a worker
    work_dir = Path(tempfile.mkdtemp(prefix="flashgemm-compile-"))
    try:
        if not targets.is_cuda(target_name):
            _leave_out_slow_kernels(funcs, entries, target_name, limit_s, work_dir, log)
        _log_compiling(funcs, entries, target_name, log)
        return _compile_bundle(funcs, entries, target_name, limit_s, out_dir, work_dir, log, embed_ptx)
    finally:
        if not any(work_dir.iterdir()):
            shutil.rmtree(work_dir, ignore_errors=True)


def _log_compiling(funcs: dict, entries: list, target_name: str, log) -> None:
    n_any = sum(e["any_length"] for e in entries)
    n_default = sum(e["schedule"] == "default" and not e["any_length"] for e in entries)
    n_twins = sum(bool(e["fixed_batch"]) and e["scale"] is None for e in entries)
    n_scaled = sum(e["scale"] is not None for e in entries)
    log(f"compiling {len(funcs)} kernels ({sum(e['tuned'] and not e['fixed_batch'] for e in entries)} tuned"
        f"{f', {n_twins} fixed-batch twins' if n_twins else ''}"
        f"{f', {n_scaled} twins specialized on their scale' if n_scaled else ''}"
        f"{f', {n_default} default-schedule' if n_default else ''}"
        f"{f', {n_any} any-length' if n_any else ''}) for {target_name} ...")


def export_bundle(out_dir: os.PathLike, target_name: str, tuned: Iterable[TunedKernel] = (),
                  variants: Optional[Iterable[Variant]] = None, log=print,
                  compile_limit_s: Optional[float] = COMPILE_LIMIT_S,
                  scale_twins: Optional[bool] = None, embed_ptx: bool = False, attention: bool = False,
                  tensor_core: Iterable[tuple] = (), attention_tuned: Iterable = (),
                  attention_tensor_core: Optional[Iterable[Variant]] = None) -> Path:
    """Compile generic kernels for `variants` (default: all of Variant.all()) plus the tuned kernels into one .so.
    On sm_90 also FusedGemmSoftmax's tensor-core kernel (gemm_softmax_tensor_core_kernels) of every (variant, K) the
    bundle serves with a kernel of `tuned` (tuned, default-schedule or any-length) and of the (variant, K) pairs of
    `tensor_core`, where it takes that K: each serves every length of its K, past what the shape kernels cover.
    attention: also FusedAttention's kernels of `variants`: the generic ones (flashgemm/kernel/fused_attention.py)
    and, on CUDA, its tensor-core kernels (attention_tensor_core_kernels), with the tuned tiles of `attention_tuned`
    (attention_best.load_all) ahead of the shipped ones. attention_tensor_core: the variants that get those tensor-core
    kernels (default: every one of `variants`; a tuned tile's variant always does); the others' FusedAttention nodes
    take the generic kernel (the op warns).
    compile_limit_s: seconds a tuned kernel may take to compile alone; the whole bundle's compile, in a worker
    process, gets as many a kernel it holds; a tuned kernel past its limit is left out with a warning and served by
    its generic kernel (_compile_limited); no compile outlives its limit. None or 0: no limit, everything compiled in
    this process. CompileError (one line) when the bundle does not compile, or not in time even without tuned
    kernels.
    scale_twins: also ship each fixed-batch twin specialized on its workload's scale (default: on CUDA targets,
    where the constant lets flashgemm/codegen/tir/take_scale_out_of_max take the scale out of the row max; the llvm
    pipeline has no use for it).
    embed_ptx: CUDA only, the kernels' PTX beside their machine code (flashgemm.codegen.cuda_build.embedded_ptx), so
    that a newer GPU's driver can run them: to check an sm_80 or sm_89 bundle on an sm_90 GPU
    (flashgemm-check-bundle)."""
    target_name = targets.resolve(target_name)
    if embed_ptx and not targets.is_cuda(target_name):
        raise ValueError("embed_ptx: only CUDA targets have PTX")
    if scale_twins is None:
        scale_twins = targets.is_cuda(target_name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    attention_tuned = list(attention_tuned)
    tc_keys = None if attention_tensor_core is None else (
        {v.key for v in attention_tensor_core} | {t.variant.key for t in attention_tuned})
    funcs, entries = {}, []
    variants = list(variants) if variants is not None else Variant.all()
    cuda = targets.is_cuda(target_name)
    tasks = [(target_name, v, attention, cuda and (tc_keys is None or v.key in tc_keys), attention_tuned)
             for v in variants]
    tuned = list(tuned)
    pairs = {(v.key, k): (v, k) for v, k in [(tk.variant, tk.shape.sizes[4]) for tk in tuned] + list(tensor_core)}
    pair_tasks = [(target_name, v, k) for v, k in sorted(pairs.values(), key=lambda p: (p[0].key, p[1]))]
    # CUDA: seconds a task (a FusedAttention tensor-core kernel takes ~0.5 s to make, a variant has 20-24), made in
    # worker processes; an llvm bundle's few, quick kernels in this one
    if cuda:
        made = _functions(made_in_workers(_portable_variant_kernels, tasks, log,
                                          "generic and FusedAttention tensor-core kernels, variants")
                          + made_in_workers(_portable_pair_kernels, pair_tasks, log,
                                            "FusedGemmSoftmax tensor-core kernels, (variant, K) pairs"))
    else:
        made = [variant_kernels(*task) for task in tasks] + [pair_kernels(*task) for task in pair_tasks]
    for kernels in made:
        for name, func, entry in kernels:
            funcs[name] = func
            entries.append(entry)
    for tk in tuned:
        if tk.bound is not None:
            if not tk.any_batch:  # its trace tiles the batch loops: it cannot serve every batch as dispatch assumes
                log(f"[build] {tk.workload}: the any-length kernel's schedule fixes the batch; left out")
                continue
            name = any_length_name(tk.variant, tk.bound, tk.shape.sizes[4], tk.kind)
            if name in funcs:
                continue
            shipped = [(name, tk.schedule, None, 1, tk.form)]
            if tk.twin is not None:
                shipped.append((any_length_name(tk.variant, tk.bound, tk.shape.sizes[4], tk.kind, tk.fixed_batch,
                                                tk.n_multiple), tk.twin, tk.fixed_batch, tk.n_multiple,
                                tk.twin_form or tk.form))
            for fname, sch, fixed, n_multiple, form in shipped:
                funcs[fname] = tk.shipped_func(sch, fname)
                entries.append(_entry(fname, tk.variant, tk.shape, tk.workload, tk.run_secs,
                                      None if tk.kind == "default" else (tk.source_target or target_name),
                                      tk.source_target is not None, align=TENSOR_CORE_ALIGN, any_batch=True,
                                      schedule=tk.kind, bound=tk.bound, form=form, fixed_batch=fixed,
                                      n_multiple=n_multiple))
            continue
        name = tuned_name(tk.variant, tk.shape, tk.any_batch, tk.kind)
        if name in funcs:  # two workloads with one (variant, M, N, K): the first (load_all sorts by time) serves
            continue
        forms = [(name, tk.schedule, None, None)]
        if tk.twin is not None:
            forms.append((tuned_name(tk.variant, tk.shape, True, tk.kind, tk.fixed_batch), tk.twin, tk.fixed_batch,
                          None))
            if scale_twins and tk.scale is not None:
                forms.append((tuned_name(tk.variant, tk.shape, True, tk.kind, tk.fixed_batch, tk.scale), tk.twin,
                              tk.fixed_batch, tk.scale))
        for fname, sch, fixed, scale in forms:
            funcs[fname] = tk.shipped_func(sch, fname, scale)
            entries.append(_entry(fname, tk.variant, tk.shape, tk.workload, tk.run_secs,
                                  None if tk.kind == "default" else (tk.source_target or target_name),
                                  tk.source_target is not None,
                                  align=TENSOR_CORE_ALIGN if targets.is_cuda(target_name) else 2,
                                  any_batch=tk.any_batch, schedule=tk.kind, fixed_batch=fixed, scale=scale,
                                  form=tk.form))
    try:
        if not compile_limit_s:
            _log_compiling(funcs, entries, target_name, log)
            libraries = [KERNELS_SO]
            compile_module(tvm.IRModule(funcs), target_name, embed_ptx).export_library(str(out_dir / (KERNELS_SO
                                                                                                      + ".tmp")))
        else:
            libraries = _compile_limited(funcs, entries, target_name, compile_limit_s, out_dir, log, embed_ptx)
    except BaseException:
        for tmp in out_dir.glob("flashgemm_kernels*.so.tmp"):
            tmp.unlink(missing_ok=True)
        raise
    for stale in out_dir.glob("flashgemm_kernels.*.so"):  # parts of an earlier build of this directory
        if stale.name not in libraries:
            stale.unlink()
    for name in libraries:
        os.replace(out_dir / (name + ".tmp"), out_dir / name)  # never leave a half-written library behind
    manifest = {
        "format": MANIFEST_FORMAT,
        "target": target_name,
        "device": "cuda" if targets.is_cuda(target_name) else "cpu",
        "kernels": libraries,
        "tvm_version": tvm.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "functions": entries,
    }
    if not targets.is_cuda(target_name):  # the CPU the kernels need (spaces/llvm.export_mcpu; bundle.cc checks it)
        from flashgemm.spaces import llvm  # noqa: PLC0415
        manifest["cpu"] = llvm.export_mcpu()
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out_dir / MANIFEST)
    return out_dir
