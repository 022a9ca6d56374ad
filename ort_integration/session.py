"""Using the custom-op library from Python's onnxruntime.

    so = session_options(bundle_dir)                       # registers bundle_dir/libflashgemm_ort.so
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    (p,) = run(sess, {"A": a, "B": b})                      # numpy in/out, bfloat16 included

bfloat16: onnxruntime's Python binding cannot take or return ml_dtypes.bfloat16 numpy arrays
("Numpy_type 256 can't be converted to MLDataType"), so `run` passes them as OrtValues over a uint16 view
and copies bfloat16 outputs back out of ORT-owned memory.
"""
from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path
from typing import Mapping, Optional

import ml_dtypes
import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from .elf_check import elf_problem
from .native import LIBRARY
REPO = Path(__file__).resolve().parent.parent
# The session config entry the op library reads its bundle directory from (ort_integration/src/register.cc);
# it wins over $FLASHGEMM_BUNDLE_DIR and the library's own directory.
BUNDLE_DIR_CONFIG_KEY = "flashgemm.bundle_dir"


def default_bundle_dir(target: str = "llvm") -> Path:
    """Where scripts/build.py puts a target's bundle: <repo>/build/<target>."""
    return REPO / "build" / target


def library_path(bundle_dir: os.PathLike) -> Path:
    """The op library sits in its bundle: it loads manifest.json and the kernels from its own directory."""
    return Path(bundle_dir) / LIBRARY


class LibraryError(RuntimeError):
    """The op library cannot be registered. The message is one line naming the absolute path and the fix."""


def _build_hint(bundle_dir: Path) -> str:
    """How to put a bundle (kernels + op library) in bundle_dir: a directory named after a target builds that one."""
    target = bundle_dir.name if re.fullmatch(r"llvm|sm_\d+", bundle_dir.name) else "auto"
    return f"scripts/build.py --target {target} --out {bundle_dir}"


def session_options(bundle_dir: Optional[os.PathLike] = None, so: Optional[ort.SessionOptions] = None
                    ) -> ort.SessionOptions:
    """SessionOptions with bundle_dir's library registered. A relative bundle_dir resolves from the current directory.
    The library serves the bundle named by `so`'s config entry BUNDLE_DIR_CONFIG_KEY if set (before this call),
    else by $FLASHGEMM_BUNDLE_DIR, else its own directory's.

    Raises LibraryError when the library is missing, cannot be loaded (dlopen: a dependency not found) or its
    bundle is missing or broken (the library's own message, which names the path and the fix)."""
    given = Path(bundle_dir) if bundle_dir else default_bundle_dir()
    bundle_dir = given.absolute()
    lib = library_path(bundle_dir)
    if not lib.is_file():
        in_repo = REPO / given  # a path written from the repository's root, used from elsewhere
        if not given.is_absolute() and (in_repo / LIBRARY).is_file():
            raise LibraryError(f"flashgemm: no op library at {lib} (a relative path resolves from the current "
                               f"directory: pass {in_repo} instead, or build a bundle there with "
                               f"{_build_hint(bundle_dir)})")
        raise LibraryError(f"flashgemm: no op library at {lib} (build it with {_build_hint(bundle_dir)}, or pass "
                           f"the directory of a built bundle)")
    problem = elf_problem(lib)  # ORT's dlopen of a truncated library dies of SIGBUS (elf_check.py)
    if problem:
        raise LibraryError(f"flashgemm: corrupt op library {lib}: {problem} (rebuild it: {_build_hint(bundle_dir)})")
    so = so or ort.SessionOptions()
    try:
        so.register_custom_ops_library(str(lib))
    except Exception as err:  # onnxruntime's Fail, one type for every registration failure
        msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(err)).strip()
        if msg.startswith("flashgemm:"):  # the library's own: it names the bundle path and the fix
            raise LibraryError(msg) from err
        if "Failed to load library" not in msg:
            raise
        # dlopen's: the library is there and whole (checked above), so one of its dependencies (libtvm_ffi.so,
        # libtvm_runtime.so, a libstdc++ version) is not; they are found through the paths the build recorded
        dl = msg.rsplit(" with error: ", 1)[-1]
        raise LibraryError(f"flashgemm: cannot load {lib}: {dl} (it was built for another Python environment or "
                           f"machine; rebuild it in this one: {_build_hint(bundle_dir)})") from err
    return so


def _to_ort_value(x: np.ndarray) -> ort.OrtValue:
    x = np.ascontiguousarray(x)
    if x.dtype == ml_dtypes.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(x)


def _to_numpy(v: ort.OrtValue) -> np.ndarray:
    if v.data_type() != "tensor(bfloat16)":
        return v.numpy()
    if v.device_name().lower() != "cpu":  # memmove below reads host memory only
        raise ValueError(f"a bfloat16 output in {v.device_name()} memory; bind it to 'cpu' (io_binding) to read it")
    out = np.empty(v.shape(), dtype=np.uint16)
    if out.size:
        ctypes.memmove(out.ctypes.data, v.data_ptr(), out.nbytes)
    return out.view(ml_dtypes.bfloat16)


def providers(device: str = "cpu") -> list:
    """The execution providers of a session for a bundle's device ("cpu" or "cuda"). A CUDA bundle registers
    the op for the CUDA EP only; the CPU EP stays as ORT's fallback for ops the CUDA EP lacks."""
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError(f"this onnxruntime ({ort.__version__}, {ort.__file__}) has no CUDAExecutionProvider: "
                           f"install onnxruntime-gpu (make EXTRA=gpu ...) instead of onnxruntime")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def run(sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray], outputs=None) -> list:
    """sess.run for numpy inputs of any dtype ORT knows, bfloat16 included; returns numpy arrays. On the CUDA EP
    ORT copies the inputs to the GPU and the outputs back (outputs that are not pre-bound land in host memory).
    Errors keep ORT's status type (InvalidArgument, Fail, ...), which run_with_iobinding would lose."""
    outputs = outputs or [o.name for o in sess.get_outputs()]
    values = {k: _to_ort_value(np.asarray(v)) for k, v in feeds.items()}
    return [_to_numpy(v) for v in sess.run_with_ort_values(outputs, values)]
