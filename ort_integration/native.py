"""Build libflashgemm_ort.so (ort_integration/CMakeLists.txt) and place it in a kernel bundle directory.

    from ort_integration.native import build_custom_op_library
    build_custom_op_library("build/llvm")      # -> build/llvm/libflashgemm_ort.so

The library loads manifest.json and flashgemm_kernels.so from its own directory (or $FLASHGEMM_BUNDLE_DIR),
so it lives inside the bundle. Needs cmake, make and g++ (C++17); the ORT headers are fetched on first use
(fetch_ort_headers.sh, Debian trixie's libonnxruntime-dev, into build/ort-headers). Incremental: a rebuild
with nothing changed takes a second or two.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_ORT_HEADERS = REPO / "build" / "ort-headers"
LIBRARY = "libflashgemm_ort.so"
CANONICAL_CLI = "flashgemm_canonical_cli"  # test driver of src/canonical.cc, built alongside


def build_dir(with_cuda: bool = False) -> Path:
    """The CMake build tree of one configuration."""
    return REPO / "build" / f"native-{'cuda' if with_cuda else 'cpu'}"


def fetch_ort_include_dir(log=print) -> Path:
    """build/ort-headers/include/onnxruntime, fetched if missing."""
    inc = DEFAULT_ORT_HEADERS / "include" / "onnxruntime"
    if not (inc / "onnxruntime_c_api.h").is_file():
        log(f"fetching ONNX Runtime headers into {DEFAULT_ORT_HEADERS} ...")
        _run([str(HERE / "fetch_ort_headers.sh"), str(DEFAULT_ORT_HEADERS)], log)
    return inc


def tvm_locations() -> dict:
    """CMake cache entries for tvm-ffi (its CMake package) and TVM's runtime libraries, without importing tvm."""
    import tvm_ffi.libinfo  # noqa: PLC0415  (light: does not load the TVM compiler)

    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        raise RuntimeError("apache-tvm is not installed in this Python environment")
    return {
        "TVM_FFI_CMAKE_DIR": str(tvm_ffi.libinfo.find_cmake_path()),
        "TVM_LIBDIR": str(Path(spec.origin).parent / "lib"),
    }


def build_custom_op_library(bundle_dir: os.PathLike, ort_include_dir: Optional[os.PathLike] = None,
                            with_cuda: bool = False, log=print) -> Path:
    """Configure + build with CMake into build/native-<cpu|cuda>, copy the library into bundle_dir; returns its path."""
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake not found (apt-get install cmake g++ make)")
    inc = Path(ort_include_dir) if ort_include_dir else fetch_ort_include_dir(log)
    out = build_dir(with_cuda)
    defs = {
        "Python_EXECUTABLE": sys.executable,
        "ORT_INCLUDE_DIR": str(inc.resolve()),
        "FLASHGEMM_WITH_CUDA": "ON" if with_cuda else "OFF",
        "CMAKE_BUILD_TYPE": "Release",
        **tvm_locations(),
    }
    log(f"building {LIBRARY} in {out} ...")
    _run(["cmake", "-S", str(HERE), "-B", str(out), *[f"-D{k}={v}" for k, v in defs.items()]], log)
    _run(["cmake", "--build", str(out), "-j", str(os.cpu_count() or 2)], log)
    bundle_dir = Path(bundle_dir)
    bundle_dir.mkdir(parents=True, exist_ok=True)
    dst = bundle_dir / LIBRARY
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copy2(out / LIBRARY, tmp)
    os.replace(tmp, dst)  # rename: a process that has the old library mapped keeps running
    log(f"{dst}")
    return dst


def _run(cmd, log):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}")
    return proc.stdout
