"""Special values (README, "Special values") on every CUDA kernel kind, on the GPU: a bundle holding the generic
kernels, tuned kernels of each form the committed databases ship (one pass with S in shared memory, S in registers
with its fixed-batch and scale-specialized twins, the recompute form, split-N, the M = 1 row-vector form) and
default-schedule kernels of untuned shapes (one pass, split-N, row vector), every function run by
flashgemm.bundle.bundle_check with NaN and +inf poked into a few rows (poke_special_values) and compared with the FP64
reference: NaN rows exactly where the reference has them, zeros where a NaN sits in a fully masked row."""
from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")

import tvm  # noqa: E402

from flashgemm import targets  # noqa: E402

TUNED = ["vit-b16.f16", "bert-large.bf16", "whisper-enc.f16", "long-row-n65536.f16", "decode-m1.bf16"]
UNTUNED = ["a=2x12x100x64,b=2x12x100x64,transB=1,scale=0.125,bias=2x1x100x100,name=one-pass",
           "a=2x1x40,b=2x40x8192,scale=0.5,mask=2x1x8192:bool,name=split-n",
           "a=3x8x1x64,b=3x8x300x64,transB=1,scale=0.125,causal=1,name=row-vector"]


def _arch():
    try:
        dev = tvm.cuda(0)
        return f"sm_{dev.compute_version.replace('.', '')}" if dev.exist else None
    except Exception:  # noqa: BLE001
        return None


ARCH = _arch()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(ARCH is None, reason="no CUDA GPU visible to TVM"),
              pytest.mark.skipif(ARCH is not None and ARCH not in targets.CUDA_ARCHES,
                                 reason=f"GPU arch {ARCH} not a supported target")]


def test_every_kernel_kind_gives_nan_rows_where_the_reference_does(tmp_path):
    from flashgemm.bundle.bundle_check import check_bundle
    from flashgemm.bundle.kernel_library import export_bundle
    from flashgemm.op.variant import Variant
    from flashgemm.op.workloads import parse
    from flashgemm.bundle import best
    from flashgemm.tune import database

    root = database.default_root()
    tuned = [best.load_tuned(database.workload_dir(root, "sm_90", d), "sm_90") if ARCH == "sm_90" else
             best.transfer_tuned(database.workload_dir(root, "sm_90", d), "sm_90", ARCH, log=lambda *a: None)
             for d in TUNED]
    tuned = best.with_defaults([t for t in tuned if t is not None], [parse(s) for s in UNTUNED], ARCH,
                               log=lambda *a: None)
    variants = [Variant(dt, tb, bias, mask, causal) for dt in ("float16", "bfloat16") for tb in (False, True)
                for bias, mask, causal in ((False, "none", False), (True, "add", True), (False, "bool", False))]
    export_bundle(tmp_path, ARCH, tuned, variants=variants, log=lambda *a: None)
    lines = []
    results = check_bundle(tmp_path, log=lines.append)
    kinds = {r["kind"] for r in results}
    assert {"tuned", "default", "generic"} <= kinds, kinds
    assert any(re.search(r"_b[01]is\d+_", r["name"]) for r in results)  # a fixed-batch twin
    assert any("_scale" in r["name"] for r in results)  # a twin specialized on its scale
    bad = [line for line, r in zip(lines, results) if not r["ok"]]
    assert not bad, "\n".join(bad)
    assert sum(r["nan_rows"] > 0 for r in results) == len(results)  # every kernel met a NaN row
