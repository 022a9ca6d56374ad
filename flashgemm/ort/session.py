"""Using the custom-op library from Python's onnxruntime.

    so = session_options(bundle_dir)   # the installed op library registered, the session pointed at bundle_dir
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    (p,) = run(sess, {"A": a, "B": b})  # numpy in/out, bfloat16 included

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

from flashgemm import BUNDLE_DIR_CONFIG_KEY, LIBRARY, get_library_path
from flashgemm.bundle.elf_check import elf_problem

__all__ = ["BUNDLE_DIR_CONFIG_KEY", "LIBRARY", "LibraryError", "default_bundle_dir", "providers", "run",
           "session_options"]
MANIFEST = "manifest.json"


def default_bundle_dir(target: str = "llvm") -> Path:
    """Where flashgemm-build puts a target's bundle when not given --out: build/<target> under the current directory."""
    return Path("build") / target


class LibraryError(RuntimeError):
    """The op library cannot be registered. The message is one line naming the absolute path and the fix."""


def _build_hint(bundle_dir: Path) -> str:
    """How to put a bundle in bundle_dir: a directory named after a target builds that one."""
    target = bundle_dir.name if re.fullmatch(r"llvm|sm_\d+", bundle_dir.name) else "auto"
    return f"flashgemm-build --target {target} --out {bundle_dir}"


def _config_entry(so: ort.SessionOptions, key: str) -> Optional[str]:
    try:
        return so.get_session_config_entry(key) or None
    except Exception:  # noqa: BLE001  (onnxruntime raises when the key is not set)
        return None


def session_options(bundle_dir: Optional[os.PathLike] = None, so: Optional[ort.SessionOptions] = None,
                    library: Optional[os.PathLike] = None) -> ort.SessionOptions:
    """SessionOptions with the op library registered and its session config entry BUNDLE_DIR_CONFIG_KEY set to
    bundle_dir (absolute; a relative one resolves from the current directory; default build/llvm), unless `so`
    already names a bundle there. library: the op library to register (default: get_library_path(), the one
    installed with the package; a development build's, flashgemm.ort.native, in the tests).

    Raises LibraryError when the library is missing, cannot be loaded (dlopen: a dependency not found), or the
    bundle is missing or broken (the library's own message, which names the path and the fix)."""
    so = so or ort.SessionOptions()
    named = _config_entry(so, BUNDLE_DIR_CONFIG_KEY)
    bundle_dir = Path(named or bundle_dir or default_bundle_dir()).absolute()
    if library is None:
        try:
            library = get_library_path()
        except FileNotFoundError as err:
            raise LibraryError(str(err)) from None
    lib = Path(library).absolute()
    if not lib.is_file():
        raise LibraryError(f"flashgemm: no op library at {lib} (give the path of a built libflashgemm_ort.so, or "
                           f"leave it out for the one installed with the package)")
    problem = elf_problem(lib)  # ORT's dlopen of a truncated library dies of SIGBUS (elf_check.py)
    if problem:
        raise LibraryError(f"flashgemm: corrupt op library {lib}: {problem} (reinstall the package, or rebuild it)")
    if not named:
        if not (bundle_dir / MANIFEST).is_file():
            raise LibraryError(f"flashgemm: no bundle at {bundle_dir} (no {MANIFEST}; build one there with "
                               f"{_build_hint(bundle_dir)}, or pass the directory of a built bundle)")
        so.add_session_config_entry(BUNDLE_DIR_CONFIG_KEY, str(bundle_dir))
    try:
        so.register_custom_ops_library(str(lib))
    except Exception as err:  # onnxruntime's Fail, one type for every registration failure
        msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(err)).strip()
        if msg.startswith("flashgemm:"):  # the library's own: it names the bundle path and the fix
            raise LibraryError(msg) from err
        if "Failed to load library" not in msg:
            raise
        # dlopen's: the library is there and whole (checked above), so one of its dependencies (libtvm_ffi.so,
        # libtvm_runtime.so, libcudart, a libstdc++ version) is not; the installed library finds TVM's beside the
        # package (apache-tvm, apache-tvm-ffi), a build tree's where it was built
        dl = msg.rsplit(" with error: ", 1)[-1]
        raise LibraryError(f"flashgemm: cannot load {lib}: {dl} (install flashgemm into the environment that has "
                           f"its dependencies: pip install flashgemm's wheel or checkout there)") from err
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
