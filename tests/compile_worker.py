"""Compile-only CUDA tests' helpers (not a test module): the worker process (run_compile_worker) and the CUDA
source of a committed database's best record as the export compiles it (best_record_source)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from flashgemm.codegen import cuda_stub
from flashgemm.spaces.intrinsics import register_intrinsics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def run_compile_worker(worker: str, request: list, tmp_path_factory) -> list:
    """Run `worker` (Python source that prints "RESULT" + JSON) in a fresh process that can compile CUDA without a
    GPU: nvcc on PATH, TVM's nvcc mode, and the stub libcuda.so.1 where no real driver is present (as in
    test_cuda_codegen). Skips without nvcc; returns the parsed JSON."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not found (CUDA toolkit needed for compile-only CUDA tests)")
    env = dict(os.environ, TVM_CUDA_COMPILE_MODE="nvcc",
               PATH=os.path.dirname(nvcc) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not cuda_stub.real_driver_present():
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            pytest.skip("no C compiler to build the stub libcuda.so.1")
        env = cuda_stub.env_with_stub(cuda_stub.build_stub(tmp_path_factory.mktemp("stubcuda")), env)
    proc = subprocess.run([sys.executable, "-c", worker, json.dumps(request)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert proc.returncode == 0 and lines, f"build worker failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT"):])


def sample_and_build(ctx, mod, wl, arch: str, seeds: int, **runtime_kw) -> dict:
    """In a worker: sample `seeds` candidates from ctx's sketches (round robin), count those the postprocessors
    accept, and build the first valid one of each sketch with nvcc, as tuned (its CUDA source kept) and replayed
    on the runtime form flashgemm-build ships (any batch; runtime_kw: pad=, recompute=, ...)."""
    import tvm  # noqa: PLC0415  (workers only: the test process need not import TVM's CUDA side)
    from tvm.s_tir.schedule import Trace  # noqa: PLC0415

    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    from flashgemm.kernel.fused_gemm_softmax import runtime_func  # noqa: PLC0415
    from flashgemm.bundle.best import TENSOR_CORE_ALIGN  # noqa: PLC0415

    sketches = ctx.generate_design_space()
    valid, builds, built = 0, [], set()
    for seed in range(1, seeds + 1):
        k = seed % len(sketches)
        sch = tvm.s_tir.Schedule(mod, seed=seed)
        Trace(sketches[k].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        if not all(p.apply(sch) for p in ctx.space_generator.postprocs):
            continue
        valid += 1
        if k in built:
            continue
        built.add(k)
        try:
            src = cuda_space.build(sch.mod, arch).mod.imports[0].inspect_source("cuda")
            rt = tvm.s_tir.Schedule(tvm.IRModule({"main": runtime_func(wl.variant, wl.canonical,
                                                                        align=TENSOR_CORE_ALIGN, any_batch=True,
                                                                        **runtime_kw)}))
            sch.trace.apply_to_schedule(rt, remove_postproc=False)  # what flashgemm-build ships: any batch
            cuda_space.build(rt.mod, arch)
            builds.append({"ok": True, "src": src, "sketch": k})
        except Exception as err:  # noqa: BLE001
            builds.append({"ok": False, "error": str(err)[-2000:], "sketch": k})
    return {"sketches": len(sketches), "valid": valid, "seeds": seeds, "builds": builds}


def best_record_module(db: str, target: str = "sm_90"):
    """flashgemm/databases/<target>/<db>'s best record applied to its tuning form: the scheduled IRModule (not
    compiled)."""
    from pathlib import Path

    import tvm

    from flashgemm import targets
    from flashgemm.tune import database
    from flashgemm.tune.database import open_json_db
    register_intrinsics(target)
    root = database.default_root() / target / db
    rec = min(open_json_db(root).get_all_tuning_records(), key=lambda r: sum(float(s) for s in r.run_secs))
    sch = tvm.s_tir.Schedule(rec.workload.mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def disable_pass(monkeypatch, name: str) -> None:
    """Leave flashgemm.codegen.cuda_build's pass `name` out of this process's compiles for the rest of the test."""
    from flashgemm.codegen import device_pass
    monkeypatch.setenv(device_pass.DISABLE_ENV, ",".join(sorted(device_pass.disabled_passes() | {name})))


def enable_pass(monkeypatch, name: str) -> None:
    """Undo disable_pass(name) for the rest of the test."""
    from flashgemm.codegen import device_pass
    off = device_pass.disabled_passes() - {name}
    if off:
        monkeypatch.setenv(device_pass.DISABLE_ENV, ",".join(sorted(off)))
    else:
        monkeypatch.delenv(device_pass.DISABLE_ENV, raising=False)


def pass_runs(name: str) -> bool:
    """Whether the compile pipeline runs the pass `name` now (flashgemm/codegen/cuda_build.enabled_passes)."""
    from flashgemm.codegen import cuda_build
    return any(p.name == name for stage in (cuda_build.SCHEDULED, cuda_build.DEVICE, cuda_build.SOURCE)
               for p in cuda_build.enabled_passes(stage))


def best_record_source_switched(db: str, monkeypatch, name: str, off: bool) -> str:
    """best_record_source with the pass `name` left out (off) or run, for the rest of the test."""
    (disable_pass if off else enable_pass)(monkeypatch, name)
    return best_record_source(db)


def best_record_source(db: str, target: str = "sm_90") -> str:
    """The CUDA source of flashgemm/databases/<target>/<db>'s best record in its tuning form, compiled by
    flashgemm.codegen.cuda_build.compile_cuda (the device pipeline and the source hook as the export runs them)."""
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    mod = best_record_module(db, target)
    return cuda_build.compile_cuda(mod, targets.tvm_target(target)).mod.imports[0].inspect_source("cuda")
