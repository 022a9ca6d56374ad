"""Compile CUDA kernels on a machine without a GPU driver (CI, a build box: `flashgemm-build --target sm_80`).

TVM 0.27 loads its CUDA runtime (libtvm_runtime_cuda) at import only when libcuda.so.1, the driver, loads.
Without it `tvm.compile` for a CUDA target silently keeps the CUDA *source* in the module (nvcc never runs),
and the exported kernel library then fails to load inside ONNX Runtime ("fmt=='cuda' requires
tvm_callback_cuda_compile"). The fix used by flashgemm-build and the compile-only tests: a stub libcuda.so.1
whose functions all return CUDA_ERROR_NO_DEVICE, put on LD_LIBRARY_PATH of a fresh process. TVM's CUDA runtime
then loads, codegen calls nvcc, and the library holds fatbins; nothing is ever run. A real driver is never
shadowed (the stub is only made where libcuda.so.1 does not load).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

STUB_C = r"""
typedef int CUresult;
#define NODEV 100 /* CUDA_ERROR_NO_DEVICE */
CUresult cuDeviceGetName(void){return NODEV;}
CUresult cuFuncSetAttribute(void){return NODEV;}
CUresult cuGetErrorName(int e, const char** s){ if(s) *s="CUDA_ERROR_NO_DEVICE"; return 0;}
CUresult cuGetErrorString(int e, const char** s){ if(s) *s="no CUDA device (stub libcuda)"; return 0;}
CUresult cuLaunchKernelEx(void){return NODEV;}
CUresult cuModuleGetFunction(void){return NODEV;}
CUresult cuModuleLoadData(void){return NODEV;}
CUresult cuModuleUnload(void){return NODEV;}
CUresult cuTensorMapEncodeTiled(void){return NODEV;}
"""
GUARD = "FLASHGEMM_STUB_LIBCUDA"  # set in the re-executed process: never re-exec twice


class CudaCodegenError(RuntimeError):
    """CUDA kernels cannot be compiled in this process (no TVM CUDA runtime)."""


def real_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def cuda_codegen_ready() -> bool:
    """Whether tvm.compile for CUDA runs nvcc in this process."""
    import tvm  # noqa: PLC0415
    return bool(tvm.runtime.enabled("cuda"))


def default_dir() -> Path:
    """Where the stub is kept between runs: $XDG_CACHE_HOME/flashgemm/stub-libcuda (~/.cache by default)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flashgemm" / "stub-libcuda"


def build_stub(out_dir: Optional[os.PathLike] = None) -> Path:
    """out_dir/libcuda.so.1 (compiled once with the system C compiler; default_dir() if not given); returns out_dir."""
    out = Path(out_dir) if out_dir else default_dir()
    lib = out / "libcuda.so.1"
    if lib.exists():
        return out
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise CudaCodegenError("no CUDA driver here and no C compiler (cc/gcc) to build the stub libcuda.so.1 that "
                               "lets TVM compile CUDA kernels without one; install gcc, or build on a GPU machine")
    out.mkdir(parents=True, exist_ok=True)
    (out / "stub_libcuda.c").write_text(STUB_C)
    tmp = out / "libcuda.so.1.tmp"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp), "-Wl,-soname,libcuda.so.1", str(out / "stub_libcuda.c")],
                   check=True)
    os.replace(tmp, lib)
    return out


def env_with_stub(stub_dir: os.PathLike, env: dict | None = None) -> dict:
    env = dict(os.environ if env is None else env)
    env["LD_LIBRARY_PATH"] = str(stub_dir) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    env[GUARD] = "1"
    return env


def require_cuda_codegen() -> None:
    """Raise CudaCodegenError with the fix when this process cannot compile CUDA kernels."""
    if cuda_codegen_ready():
        return
    why = ("even with the stub libcuda.so.1 on LD_LIBRARY_PATH" if os.environ.get(GUARD)
           else "(no CUDA driver: libcuda.so.1 does not load)")
    raise CudaCodegenError(f"TVM's CUDA runtime is not loaded in this process {why}, so CUDA kernels would be kept "
                           f"as source and fail to load in ONNX Runtime. Run flashgemm-build (it compiles through a "
                           f"stub driver on GPU-less machines), or start Python with a libcuda.so.1 on LD_LIBRARY_PATH "
                           f"(flashgemm/codegen/cuda_stub.py builds one)")
