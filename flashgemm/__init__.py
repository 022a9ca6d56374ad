"""FlashGEMM: P = softmax_rowwise(scale * A @ B + bias + mask), optionally causal, as one fused kernel written in TVM
TensorIR, tuned by Meta-Schedule per GPU, and run in ONNX Runtime as the custom op flashgemm::FusedGemmSoftmax.

    import flashgemm, onnxruntime as ort
    so = flashgemm.session_options("build/sm_90")   # the op library registered, pointed at a built bundle
    sess = ort.InferenceSession("model.rewritten.onnx", so, providers=["CUDAExecutionProvider"])

or, with ORT's own calls:

    so = ort.SessionOptions()
    so.register_custom_ops_library(flashgemm.get_library_path())
    so.add_session_config_entry("flashgemm.bundle_dir", "build/sm_90")

The stages, in the order the data takes them: op (the contract) -> kernel (TensorIR) -> spaces (design spaces) ->
codegen (the compile pipeline) -> tune (Meta-Schedule, databases) -> bundle (kernels .so + manifest) -> ort (the op
library, sessions, the graph rewrite); cli holds the commands (flashgemm-tune, flashgemm-build, flashgemm-rewrite, ...).
Light: importing flashgemm loads neither TVM nor onnxruntime.
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

LIBRARY = "libflashgemm_ort.so"
BUNDLE_DIR_CONFIG_KEY = "flashgemm.bundle_dir"  # the session config entry the op library reads (csrc/register.cc)

try:
    __version__ = importlib.metadata.version("flashgemm")
except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"


def get_library_path() -> str:
    """The ONNX Runtime custom-op library installed with the package (flashgemm/lib/libflashgemm_ort.so), for
    SessionOptions.register_custom_ops_library. It finds TVM's runtime in the same environment (its RUNPATH is
    relative to itself) and serves the bundle named by the session config entry flashgemm.bundle_dir, else
    $FLASHGEMM_BUNDLE_DIR. FileNotFoundError, naming the fix, when the package was not installed with it."""
    here = Path(__file__).resolve().parent / "lib" / LIBRARY  # a wheel install
    if here.is_file():
        return str(here)
    try:  # an editable install keeps built files in site-packages, apart from the sources
        for file in importlib.metadata.files("flashgemm") or ():
            if file.name == LIBRARY:
                path = Path(file.locate()).resolve()
                if path.is_file():
                    return str(path)
    except importlib.metadata.PackageNotFoundError:
        pass
    raise FileNotFoundError(f"flashgemm: no {LIBRARY} installed with the package at {here.parent} (install the "
                            f"package with its op library: pip install <flashgemm checkout or wheel>; for CUDA "
                            f"bundles add -Ccmake.define.FLASHGEMM_WITH_CUDA=ON)")


def session_options(bundle_dir=None, so=None):
    """onnxruntime.SessionOptions with the op library registered and pointed at bundle_dir (flashgemm.ort.session)."""
    from flashgemm.ort import session  # noqa: PLC0415  (loads onnxruntime)
    return session.session_options(bundle_dir, so)
