"""bf16 -> fp32 conversions in the CUDA sources (flashgemm/codegen/cuda_src/convert_bf16_by_shift.py): every
`((float)x)` of a source that uses nv_bfloat16 becomes a call that converts a bf16 by a bit shift (no inline asm), so
that ptxas can merge the bf16 loads from shared memory (decode-m1 bf16: 18.8 -> 11.0 us on the H100).
CPU only: the rewrite itself, and nvcc compiling a tuned bf16 kernel with it; the GPU numerics
and timing are the GPU tests' and a benchmark's."""
from pathlib import Path

import pytest
from tests.compile_worker import disable_pass, enable_pass, pass_runs

REPO = Path(__file__).resolve().parent.parent

SOURCE = ('#include <cuda_bf16.h>\n__device__ float keep(half h) { return ((float)h); }\n'
          'extern "C" __global__ void k(nv_bfloat16* a, float* o) {\n'
          '  o[0] = (((float)a[0]) * ((float)((int)threadIdx.x))) + ((float)((nv_bfloat16*)a)[(1 + (2))]);\n}\n')


def test_every_float_cast_of_a_bf16_source_goes_through_the_shift_helper():
    from flashgemm.codegen.cuda_src.convert_bf16_by_shift import BF16_TO_F32, bf16_to_f32_by_shift
    out = bf16_to_f32_by_shift(SOURCE)
    kernel = out[out.index('extern "C"'):]
    assert "((float)" not in kernel
    assert kernel.count("flashgemm_f32(") == 3
    assert "(flashgemm_f32(((nv_bfloat16*)a)[(1 + (2))]))" in kernel  # the operand up to its own closing parenthesis
    assert "(flashgemm_f32(((int)threadIdx.x)))" in kernel  # other types keep a plain cast (the C++ template)
    assert out.index(BF16_TO_F32) < out.index('extern "C"')
    assert "keep(half h) { return ((float)h); }" in out  # the preamble before the kernels is left as it was


def test_sources_without_bf16_or_with_the_switch_off_are_unchanged(monkeypatch):
    from flashgemm.codegen.cuda_src.convert_bf16_by_shift import bf16_to_f32_by_shift
    fp16 = SOURCE.replace("nv_bfloat16", "half")
    assert bf16_to_f32_by_shift(fp16) == fp16
    assert bf16_to_f32_by_shift(SOURCE) != SOURCE and pass_runs("convert_bf16_by_shift")
    disable_pass(monkeypatch, "convert_bf16_by_shift")
    assert not pass_runs("convert_bf16_by_shift")
    enable_pass(monkeypatch, "convert_bf16_by_shift")
    with pytest.raises(ValueError, match="unbalanced"):
        bf16_to_f32_by_shift(SOURCE.replace("(1 + (2))]);", "(1 + (2)];"))


def test_a_tuned_bf16_gemv_compiles_with_the_shift():
    """The committed decode-m1 bf16 kernel (the one-row GEMV that reads B from shared memory element by element),
    compiled as the export compiles it: nvcc takes the rewritten source and no fp32 cast is left in the kernel."""
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    from flashgemm.bundle import best
    tuned = best.load_tuned(REPO / "flashgemm" / "databases" / "sm_90" / "decode-m1.bf16", "sm_90")
    import tvm
    src = cuda_build.compile_cuda(tvm.IRModule({"main": tuned.shipped_func(tuned.schedule, "main")}),
                                  targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
    kernel = src[src.index('extern "C" __global__'):]
    assert "((float)" not in kernel and kernel.count("flashgemm_f32(") >= 64  # K = 64 products a column at least
    assert "__uint_as_float" in src
