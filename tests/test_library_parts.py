"""A large bundle is compiled in parts, in parallel (kernel_library.library_parts): the manifest lists every library,
the op library and flashgemm-check-bundle find each kernel in whichever holds it, and a rebuild with fewer parts
leaves no stale library behind."""
import json
import os

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest

from flashgemm.bundle import bundle_check, kernel_library, workers
from flashgemm.bundle.kernel_library import KERNELS_SO, MANIFEST, export_bundle, kernel_libraries
from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.op.variant import Variant
from flashgemm.ort.model import make_model
from flashgemm.ort.session import run, session_options

VARIANTS = [Variant("float16", False), Variant("float16", True), Variant("bfloat16", False, True)]


@pytest.mark.parametrize("kernels, cores, parts", [(15, 16, 1), (32, 16, 2), (1000, 16, 16), (1000, 2, 2), (0, 4, 1)])
def test_one_part_a_core_of_at_least_a_part_s_kernels(kernels, cores, parts):
    assert kernel_library.KERNELS_A_PART == 16
    assert kernel_library.library_parts(kernels, cores) == parts


def test_compile_jobs_takes_the_environment_s_cap_else_every_core(monkeypatch):
    monkeypatch.setenv(workers.COMPILE_JOBS_ENV, "3")
    assert workers.compile_jobs() == 3
    assert kernel_library.library_parts(1000) == 3
    for bad in ("0", "-2", "two"):
        monkeypatch.setenv(workers.COMPILE_JOBS_ENV, bad)
        with pytest.raises(ValueError, match="FLASHGEMM_COMPILE_JOBS"):
            workers.compile_jobs()
    monkeypatch.delenv(workers.COMPILE_JOBS_ENV)
    assert workers.compile_jobs() == len(os.sched_getaffinity(0))


def test_a_bundle_in_parts_serves_every_kernel_and_a_rebuild_drops_stale_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_library, "library_parts", lambda n, cores=None: min(3, n))
    out = export_bundle(tmp_path / "b", "llvm", variants=VARIANTS, log=lambda *a: None)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["format"] == kernel_library.MANIFEST_FORMAT == 6
    assert manifest["kernels"] == [KERNELS_SO, "flashgemm_kernels.1.so", "flashgemm_kernels.2.so"]
    assert all(p.is_file() for p in kernel_libraries(out)) and not list(out.glob("*.tmp"))

    # every variant's generic kernel (one a part, round robin) serves a node through the op library
    so = session_options(out)
    rng = np.random.default_rng(0)
    for v in VARIANTS:
        a = rng.standard_normal((2, 5, 8)).astype(np.float32)
        b = rng.standard_normal((2, 6, 8) if v.trans_b else (2, 8, 6)).astype(np.float32)
        bias = rng.standard_normal((2, 5, 6)).astype(np.float32) if v.has_bias else None
        np_dtype = np.float16 if v.dtype == "float16" else ml_dtypes.bfloat16
        feeds = {"A": a.astype(np_dtype), "B": b.astype(np_dtype)}
        if bias is not None:
            feeds["bias"] = bias.astype(np_dtype)
        model = make_model(v.dtype, a.shape, b.shape, bias.shape if bias is not None else None, scale=0.5,
                           trans_b=int(v.trans_b))
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        (p,) = run(sess, feeds)
        ref = fused_gemm_softmax_ref(*(feeds[k].astype(np.float64) for k in ("A", "B")),
                                     None if bias is None else feeds["bias"].astype(np.float64), scale=0.5,
                                     trans_b=v.trans_b)
        np.testing.assert_allclose(p.astype(np.float64), ref, atol=2e-2 if v.dtype == "bfloat16" else 2e-3)
    assert all(r["ok"] for r in bundle_check.check_bundle(out, log=lambda *a: None))

    monkeypatch.setattr(kernel_library, "library_parts", lambda n, cores=None: 1)
    export_bundle(out, "llvm", variants=VARIANTS[:1], log=lambda *a: None)
    assert json.loads((out / MANIFEST).read_text())["kernels"] == [KERNELS_SO]
    assert sorted(p.name for p in out.glob("*.so")) == [KERNELS_SO]
