"""Export the runtime kernel bundle of one target: one TVM `.so` with every kernel, and its manifest.

Bundle layout (a directory, by default `build/<target>/`):

    flashgemm_kernels.so     every kernel, one exported function each
    manifest.json            which function serves which (variant, canonical shape); read by the C++ op
    libflashgemm_ort.so      the ONNX Runtime custom-op library (ort_integration/native.py builds it)

Kernel calling convention (all kernels, see tir_kernels/fused_gemm_softmax.py):
    fn(A, B, [bias], [mask], P, scale: float32)
with canonical 4-D DLTensors; A/B batch strides and all bias/mask strides are free (0 = broadcast).
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import struct
from pathlib import Path
from typing import Iterable, Optional

import tvm

from schedules import targets
from tir_kernels import CanonicalShape, Variant, runtime_func
from tuning_db.best import TENSOR_CORE_ALIGN, TunedKernel

MANIFEST_FORMAT = 1
KERNELS_SO = "flashgemm_kernels.so"
MANIFEST = "manifest.json"
# seconds one tuned llvm kernel may take to compile alone before the bundle leaves it out (export_bundle)
LLVM_COMPILE_LIMIT_S = 120.0


def generic_name(variant: Variant) -> str:
    return f"fgs_{variant.key}_generic"


def tuned_name(variant: Variant, shape: CanonicalShape, any_batch: bool, kind: str = "tuned",
               fixed_batch: Optional[tuple] = None, scale: Optional[float] = None) -> str:
    """A kernel for any batch (runtime_func(any_batch=True)) is named by variant and M, N, K only, its fixed-batch
    twin with one batch dim static (TunedKernel.twin) with "b0is1_" or "b1is<n>_", the twin specialized on a scale
    with "_scale" and the scale's float32 bits in hex; a default (untuned) schedule's name says so."""
    b0, b1, m, n, k = shape.sizes
    batch = f"b{fixed_batch[0]}is{fixed_batch[1]}_" if fixed_batch else "" if any_batch else f"b{b0}x{b1}_"
    bits = f"_scale{struct.unpack('<I', struct.pack('<f', scale))[0]:08x}" if scale is not None else ""
    return f"fgs_{variant.key}_{'default_' if kind == 'default' else ''}{batch}m{m}_n{n}_k{k}{bits}"


def _entry(name, variant, shape=None, workload=None, run_secs=None, tuned_on=None, transferred=False, align=2,
           any_batch=False, schedule=None, fixed_batch=None, scale=None):
    return {
        "name": name,
        "dtype": variant.dtype,
        "trans_b": int(variant.trans_b),
        "bias": int(variant.has_bias),
        "mask": variant.mask,
        "causal": int(variant.causal),
        # schedule: "tuned" (the best measured record), "default" (schedules/cuda_default: the tensor-core space's
        # schedule chosen by rule for a shape nobody tuned, never measured) or "generic" (any shape)
        "schedule": schedule or ("tuned" if shape is not None else "generic"),
        "tuned": (schedule or "tuned") == "tuned" and shape is not None,
        "sizes": list(shape.sizes) if shape is not None else None,  # [B0, B1, M, N, K] as tuned / scheduled
        # any_batch: the kernel serves every B0, B1 with these M, N, K (batch dims symbolic); else exactly `sizes`
        "any_batch": bool(any_batch),
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
        # (build.py --target sm_80 with only sm_90 databases), re-validated for this one but never
        # measured on it, i.e. untuned here; run_secs is then the other arch's time
        "tuned_on": tuned_on,
        "transferred": bool(transferred),
    }


def generic_schedule(target_name: str, func):
    if targets.is_cuda(target_name):
        from schedules import cuda_generic  # noqa: PLC0415  (GPU spaces: their own issue)
        return cuda_generic.generic_schedule(func)
    from schedules import llvm  # noqa: PLC0415
    return llvm.generic_schedule(func)


def _compile_alone(mod_json: str, target_name: str) -> None:
    """In a pool worker: compile one kernel by itself (the parent only asks whether this finishes in time)."""
    from tvm import ir  # noqa: PLC0415
    target = targets.tvm_target(target_name)
    with target:
        tvm.compile(ir.load_json(mod_json), target=target)


def _leave_out_slow_llvm_kernels(funcs: dict, entries: list, target_name: str, limit_s: float, log) -> None:
    """Drop from `funcs`/`entries` each tuned kernel that does not compile alone within `limit_s` seconds.

    Why: a tuning record can build in the tuner and still not finish compiling for the bundle. The tuner builds
    the kernel with static strides; the bundle's kernel has free (symbolic) batch and mask strides, and with a
    large explicit unroll (pragma_auto_unroll_max_step 512 + vectorize) LLVM's optimizer then ran for more than
    200 s on one demo kernel (2026-11-26; 17 s for its tuning form). One such kernel would hold the whole bundle,
    so each tuned kernel is first compiled alone in a worker process that is killed at the limit; the ones left
    out are served by their variant's generic kernel. Generic kernels (our own fixed schedule) are not probed.
    CUDA bundles are not probed either: their device code goes through nvcc, which has not shown this."""
    from tvm.support.popen_pool import PopenPoolExecutor  # noqa: PLC0415

    from tuning_db.tuner import _export_repo_path  # noqa: PLC0415
    tuned = [e["name"] for e in entries if e["schedule"] != "generic"]
    if not tuned:
        return
    log(f"checking that each of {len(tuned)} tuned kernels compiles within {limit_s:g} s ...")
    _export_repo_path()  # the workers unpickle _compile_alone by reference: a checkout run without install too
    pool = PopenPoolExecutor(max_workers=min(len(tuned), os.cpu_count() or 1), timeout=limit_s)
    futures = {n: pool.submit(_compile_alone, tvm.ir.save_json(tvm.IRModule({n: funcs[n]})), target_name)
               for n in tuned}
    for name, fut in futures.items():
        try:
            fut.result()
            continue
        except TimeoutError:  # the pool killed the worker
            why = f"its compile did not finish in {limit_s:g} s"
        except Exception as err:  # noqa: BLE001  (a record that replays but does not compile: same fallback)
            last = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            why = f"it does not compile ({last})"
        entry = next(e for e in entries if e["name"] == name)
        log(f"warning: left out tuned kernel {name} (workload {entry['workload']}): {why}; its calls go to the "
            f"generic kernel. Retune the workload, or give it more time (build.py --compile-limit)")
        del funcs[name]
        entries.remove(entry)
    pool.shutdown(wait=True)


def export_bundle(out_dir: os.PathLike, target_name: str, tuned: Iterable[TunedKernel] = (),
                  variants: Optional[Iterable[Variant]] = None, log=print,
                  compile_limit_s: Optional[float] = LLVM_COMPILE_LIMIT_S,
                  scale_twins: Optional[bool] = None, embed_ptx: bool = False) -> Path:
    """Compile generic kernels for `variants` (default: all 48) plus the tuned kernels into one .so.
    compile_limit_s: on llvm, a tuned kernel that does not compile alone within it is left out, with a warning
    (_leave_out_slow_llvm_kernels); None or 0: no limit.
    scale_twins: also ship each fixed-batch twin specialized on its workload's scale (default: on CUDA targets,
    where the constant lets schedules/max_scale take the scale out of the row max; the llvm pipeline has no use for
    it).
    embed_ptx: CUDA only, the kernels' PTX beside their machine code (schedules.cuda_build.embedded_ptx), so that a
    newer GPU's driver can run them: to check an sm_80 or sm_89 bundle on an sm_90 GPU (scripts/check_bundle.py)."""
    target_name = targets.resolve(target_name)
    if embed_ptx and not targets.is_cuda(target_name):
        raise ValueError("embed_ptx: only CUDA targets have PTX")
    if scale_twins is None:
        scale_twins = targets.is_cuda(target_name)
    target = targets.tvm_target(target_name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    funcs, entries = {}, []
    for v in (list(variants) if variants is not None else Variant.all()):
        name = generic_name(v)
        funcs[name] = generic_schedule(target_name, runtime_func(v, name=name)).mod["main"].with_attr(
            "global_symbol", name)
        entries.append(_entry(name, v))
    for tk in tuned:
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
                                  any_batch=tk.any_batch, schedule=tk.kind, fixed_batch=fixed, scale=scale))
    if compile_limit_s and not targets.is_cuda(target_name):
        _leave_out_slow_llvm_kernels(funcs, entries, target_name, compile_limit_s, log)
    n_default = sum(e["schedule"] == "default" for e in entries)
    n_twins = sum(bool(e["fixed_batch"]) and e["scale"] is None for e in entries)
    n_scaled = sum(e["scale"] is not None for e in entries)
    log(f"compiling {len(funcs)} kernels ({sum(e['tuned'] and not e['fixed_batch'] for e in entries)} tuned"
        f"{f', {n_twins} fixed-batch twins' if n_twins else ''}"
        f"{f', {n_scaled} twins specialized on their scale' if n_scaled else ''}"
        f"{f', {n_default} default-schedule' if n_default else ''}) for {target_name} ...")
    if targets.is_cuda(target_name):
        from schedules import cuda_build, cuda_stub  # noqa: PLC0415  (the tuned kernels were measured built this way)
        cuda_stub.require_cuda_codegen()  # else the library would hold CUDA source that ORT cannot load
        with cuda_build.embedded_ptx() if embed_ptx else contextlib.nullcontext():
            ex = cuda_build.compile_cuda(tvm.IRModule(funcs), target)
    else:
        with target:
            ex = tvm.compile(tvm.IRModule(funcs), target=target)
    so_path = out_dir / KERNELS_SO
    tmp = so_path.with_suffix(".so.tmp")
    ex.export_library(str(tmp))
    os.replace(tmp, so_path)  # never leave a half-written library behind
    manifest = {
        "format": MANIFEST_FORMAT,
        "target": target_name,
        "device": "cuda" if targets.is_cuda(target_name) else "cpu",
        "kernels": KERNELS_SO,
        "tvm_version": tvm.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "functions": entries,
    }
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out_dir / MANIFEST)
    return out_dir
