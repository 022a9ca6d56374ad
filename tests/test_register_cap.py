"""The register cap of shipped CUDA kernels (flashgemm/codegen/cuda_build.py, MAX_REGISTERS_ATTR;
flashgemm.bundle.best's TunedKernel.max_registers): a tuned kernel's runtime forms are compiled with no more registers a
thread than its measured (tuning) form took, so that their extra index math cannot cost an occupancy step. CPU only:
nvcc compiles and its cubin is read; the GPU timing is a benchmark's."""
import re
from pathlib import Path

import pytest
from tests.compile_worker import disable_pass

REPO = Path(__file__).resolve().parent.parent
W3 = REPO / "flashgemm" / "databases" / "sm_90" / "whisper-enc.f16"


@pytest.fixture(scope="module")
def w3():
    from flashgemm.bundle import best
    return best.load_tuned(W3, "sm_90")


def test_a_tuned_cuda_kernel_ships_with_the_registers_it_was_measured_with(w3):
    import tvm

    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    target = targets.tvm_target("sm_90")
    assert w3.max_registers and w3.max_registers % 8 == 0 and w3.max_registers <= 255
    capped_mod = tvm.IRModule({"main": w3.shipped_func(w3.twin, "main")})
    src = cuda_build.compile_cuda(capped_mod, target).mod.imports[0].inspect_source("cuda")
    assert re.search(r"__maxnreg__\(%d\)\s+main_kernel\(" % w3.max_registers, src)
    assert "__launch_bounds__" not in src  # (nvcc refuses both on one kernel)
    assert cuda_build.kernel_registers(capped_mod, target) <= w3.max_registers


def test_the_cap_is_per_function_and_leaves_others_alone(w3):
    import tvm

    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    funcs = {"capped": w3.shipped_func(w3.twin, "capped"),
             "plain": w3.twin.mod["main"].with_attr("global_symbol", "plain")}
    src = cuda_build.compile_cuda(tvm.IRModule(funcs), targets.tvm_target("sm_90")).mod.imports[0].inspect_source(
        "cuda")
    assert re.search(r"__maxnreg__\(\d+\)\s+capped_kernel\(", src)
    assert re.search(r"__launch_bounds__\(\d+\)\s+plain_kernel\(", src)


def test_no_cap_on_llvm_or_when_asked_not_to(monkeypatch):
    from flashgemm.bundle import best
    llvm_db = REPO / "tests" / "data" / "llvm-slow-export" / "llvm" / "demo.f16"  # (a committed llvm database)
    assert best.load_tuned(llvm_db, "llvm").max_registers is None
    disable_pass(monkeypatch, "cap_registers")
    assert best.load_tuned(W3, "sm_90").max_registers is None


def test_cubin_registers_reads_a_cubin_and_refuses_other_bytes():
    from flashgemm.codegen import cuda_build
    with pytest.raises(ValueError, match="ELF"):
        cuda_build.cubin_registers(b"not a cubin at all")
