"""Build libflashgemm_ort.so from the source tree (CMakeLists.txt) into a development build tree, and copy it to a
directory: for the tests and for changes to the C++ op. An installed package ships the library built
(flashgemm.get_library_path(); `pip install .` runs the same CMake project through scikit-build-core).

    from flashgemm.ort.native import build_custom_op_library
    build_custom_op_library("build/dev-lib")      # -> build/dev-lib/libflashgemm_ort.so

Needs cmake, make and g++ (C++17); it compiles against the ONNX Runtime C/C++ API headers vendored in
third_party/onnxruntime (API 21: any ORT from 1.21 on loads it). Incremental: a rebuild with nothing changed takes a
second or two. The build tree's library finds TVM's runtime where this environment has it (absolute RUNPATH).

A failure is a NativeBuildError: one line with the fix (the tool to install, or the log to read). The full output
of every step (CMake configure, compile) goes to build/native-<cpu|cuda>/build.log.
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

from flashgemm import LIBRARY

SOURCE_DIR = Path(__file__).resolve().parents[2]  # the source tree's root, where CMakeLists.txt is
ORT_INCLUDE_DIR = SOURCE_DIR / "third_party" / "onnxruntime" / "include"  # vendored (third_party/onnxruntime/README.md)
CANONICAL_CLI = "flashgemm_canonical_cli"  # test driver of csrc/canonical.cc, built alongside
BUILD_LOG = "build.log"
INSTALL_HINT = "apt-get install cmake make g++ (cmake also: pip install cmake)"


class NativeBuildError(RuntimeError):
    """The custom-op library could not be built; the message is one line naming the fix or the log to read."""


def build_dir(with_cuda: bool = False) -> Path:
    """The CMake build tree of one configuration."""
    return SOURCE_DIR / "build" / f"native-{'cuda' if with_cuda else 'cpu'}"


def tvm_locations() -> dict:
    """CMake cache entries for tvm-ffi (its CMake package) and TVM's runtime libraries, without importing tvm."""
    import tvm_ffi.libinfo  # noqa: PLC0415  (light: does not load the TVM compiler)

    spec = importlib.util.find_spec("tvm")
    if spec is None or spec.origin is None:
        raise NativeBuildError(f"apache-tvm is not installed in this Python environment ({sys.executable}): "
                               "pip install -e . in the source tree")
    return {
        "TVM_FFI_CMAKE_DIR": str(tvm_ffi.libinfo.find_cmake_path()),
        "TVM_LIBDIR": str(Path(spec.origin).parent / "lib"),
    }


def build_custom_op_library(bundle_dir: os.PathLike, ort_include_dir: Optional[os.PathLike] = None,
                            with_cuda: bool = False, log=print) -> Path:
    """Configure + build with CMake into build/native-<cpu|cuda>, copy the library into bundle_dir; returns its path.
    Only from a source tree: an installed package has no CMakeLists.txt and ships the library built.
    Raises NativeBuildError (one line) when a tool is missing or a step fails; every step's output is in
    build/native-<cpu|cuda>/build.log, rewritten by each build."""
    if not (SOURCE_DIR / "CMakeLists.txt").is_file():
        raise NativeBuildError(f"no source tree at {SOURCE_DIR} (CMakeLists.txt): an installed flashgemm ships the op "
                               "library built (flashgemm.get_library_path())")
    missing = missing_tools()
    if missing:
        raise NativeBuildError(f"building {LIBRARY} needs cmake, make and a C++17 compiler; not found: "
                               f"{', '.join(missing)}; install them: {INSTALL_HINT}")
    out = build_dir(with_cuda)
    out.mkdir(parents=True, exist_ok=True)
    # one build at a time in a build tree (parallel test workers, two shells): cmake and make are not safe to run
    # twice at once in one tree; the second waits, then finds the library up to date
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log_file = out / BUILD_LOG
        log_file.write_text("")
        inc = Path(ort_include_dir) if ort_include_dir else ORT_INCLUDE_DIR
        if not (inc / "onnxruntime_c_api.h").is_file():
            raise NativeBuildError(f"{inc} has no onnxruntime_c_api.h: give the directory of ONNX Runtime's C/C++ "
                                   "API headers (the repository vendors them in third_party/onnxruntime/include)")
        defs = {
            "Python_EXECUTABLE": sys.executable,
            "ORT_INCLUDE_DIR": str(inc.resolve()),
            "FLASHGEMM_WITH_CUDA": "ON" if with_cuda else "OFF",
            "CMAKE_BUILD_TYPE": "Release",
            **tvm_locations(),
        }
        _forget_other_source(out)
        log(f"building {LIBRARY} in {out} ...")
        _run(["cmake", "-S", str(SOURCE_DIR), "-B", str(out), *[f"-D{k}={v}" for k, v in defs.items()]], log_file,
             f"configuring {LIBRARY} (cmake)")
        _run(["cmake", "--build", str(out), "-j", str(os.cpu_count() or 2)], log_file, f"compiling {LIBRARY}")
        bundle_dir = Path(bundle_dir)
        bundle_dir.mkdir(parents=True, exist_ok=True)
        dst = bundle_dir / LIBRARY
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.copy2(out / LIBRARY, tmp)
        os.replace(tmp, dst)  # rename: a process that has the old library mapped keeps running
        log(f"{dst}")
    return dst


def _forget_other_source(out: Path) -> None:
    """CMake refuses a build tree configured from another source directory (a moved checkout): start it afresh."""
    cache = out / "CMakeCache.txt"
    if cache.is_file():
        home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
        if home and Path(home.group(1)).resolve() != SOURCE_DIR:
            cache.unlink()
            shutil.rmtree(out / "CMakeFiles", ignore_errors=True)


def missing_tools() -> list:
    """The build tools not on PATH: cmake, make (CMake's default generator; ninja when $CMAKE_GENERATOR names it) and
    a C++ compiler ($CXX, else c++, g++ or clang++)."""
    builder = "ninja" if os.environ.get("CMAKE_GENERATOR", "").lower().startswith("ninja") else "make"
    missing = [tool for tool in ("cmake", builder) if shutil.which(tool) is None]
    cxx = os.environ.get("CXX", "").split()
    if not (shutil.which(cxx[0]) if cxx else any(shutil.which(c) for c in ("c++", "g++", "clang++"))):
        missing.append(f"a C++ compiler ({cxx[0]}, from $CXX)" if cxx else "a C++ compiler (g++)")
    return missing


# what marks the line worth quoting from a failed step's output, most telling first
_ERROR_LINES = (re.compile(r"\berror\b", re.I), re.compile(r"No such file|not found|fatal|needs ", re.I))


def _first_error(lines: list) -> str:
    """The first line of a failed step's output that says what went wrong (with the line after it when it ends
    with a colon, as CMake's "CMake Error at ...:" does), else the last line."""
    lines = [line.strip() for line in lines if line.strip()]
    for pattern in _ERROR_LINES:
        for i, line in enumerate(lines):
            if pattern.search(line):
                return f"{line} {lines[i + 1]}" if line.endswith(":") and i + 1 < len(lines) else line
    return lines[-1] if lines else "no output"


def _run(cmd, log_file: Path, step: str, hint: str = ""):
    """Run one build step, its output appended to log_file; NativeBuildError naming the step, the first error line
    of its output and the log (the whole output stays there), or the missing tool."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        start = fh.tell()  # this step's own output starts here
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
        except OSError as err:
            raise NativeBuildError(f"{step} failed: cannot run {cmd[0]} ({err.strerror})") from None
    if proc.returncode != 0:
        with open(log_file, "rb") as fh:
            fh.seek(start)
            output = fh.read().decode(errors="replace").splitlines()
        raise NativeBuildError(f"{step} failed (exit {proc.returncode}): {_first_error(output)[:300]}; "
                               f"full output in {log_file}" + (f"; {hint}" if hint else ""))
