"""Whole-sector P stores (flashgemm/codegen/cuda_src/store_whole_sectors): the register sketches' P loop, with the exp
kept in the accumulator, stores through a quad shuffle and one 8-byte streaming store a lane. CPU: the rewrite on a P
loop of the W1 kernel's shape, the loops and addresses it must leave alone, P's offset factor it relies on, the store
nvcc makes of it, and the tuned W1 kernels in every shipped form. GPU: W1's shipped twin gives the same P with and
without the streaming hint (the other GPU numerics are check_bundle's and the register-sketch GPU tests'; the timing is
benchmarks/shipped_forms_ab.py --half-sectors's and --cached-stores's)."""
import re
from pathlib import Path

import numpy as np
import pytest

from flashgemm.codegen.cuda_src import store_whole_sectors
from flashgemm.spaces.intrinsics import register_intrinsics
from tests.compile_worker import disable_pass, enable_pass

REPO = Path(__file__).resolve().parent.parent
ZERO = "0x0p+0f/*0.000000e+00*/"
# the sum pass with the exp kept (keep_exp_in_accumulator's mark), then the W1 twin's P loop as CodeGenCUDA writes it
STORE = ("            *(half2*)(P_ptr + ((((((((((((int)blockIdx.x) * 262144) + (i_0_1 * 16384)) + (ax2_1 * 8192)) + "
         "(ax2_2 * 4096)) + ((((int)threadIdx.x) >> 2) * 512)) + (((int)threadIdx.y) * 128)) + (ax3_1_2 * 16)) + "
         "(ax3_2_2 * 8)) + ((((int)threadIdx.x) & 3) * 2)) + elem_offset)) = __1;")
SUM = "      S_warp_ptr[((a * 64) + b)] = expf(((S_warp_ptr[((a * 64) + b)] * scale) - m_ptr[0]));\n"
P_LOOP = f"""    for (int ax2_1 = 0; ax2_1 < 2; ++ax2_1) {{
        for (int ax3_1_2 = 0; ax3_1_2 < 8; ++ax3_1_2) {{
          for (int ax3_2_2 = 0; ax3_2_2 < 2; ++ax3_2_2) {{
            half2 __1;
            float2 condval;
            if ({ZERO} < row_sum_ptr[0]) {{
              float2 v_ = *(float2*)(S_warp_ptr + (((ax2_1 * 64) + (ax3_1_2 * 8)) + (ax3_2_2 * 4)));
              condval = make_float2(v_.x / row_sum_ptr[0], v_.y / row_sum_ptr[0]);
            }} else {{
              condval = make_float2({ZERO}, {ZERO});
            }}
            __1.x = (half)(condval.x);
            __1.y = (half)(condval.y);
{STORE}
          }}
        }}
    }}
"""


def _source_passes(code: str) -> str:
    """The CUDA-source passes of the compile pipeline that run (cuda_build.PASSES, FLASHGEMM_DISABLE_PASSES)."""
    from flashgemm.codegen import cuda_build  # noqa: PLC0415
    for p in cuda_build.enabled_passes(cuda_build.SOURCE):
        code = p.apply(code)
    return code


def test_the_p_loop_stores_whole_sectors_through_a_quad_shuffle():
    out = store_whole_sectors.stream(store_whole_sectors.rewrite(SUM + P_LOOP))
    assert "*(half2*)(P_ptr" not in out
    assert out.count("__shfl_sync(0xffffffffu, fg_pair[") == 4
    store = re.search(r"__stcs\(\(uint2\*\)\(P_ptr \+ (.*)\), fg_v\);", out)  # streaming: evict-first
    assert out.count("P_ptr") == 1
    assert store and "((((int)threadIdx.x) & 3) * 4)" in store.group(1)  # lane q: columns 4q..4q+3
    assert "fg_pair[ax3_2_2] = *(unsigned*)&__1;" in out  # each half2 kept, in the jh loop it was computed in
    assert out.index("fg_pair[ax3_2_2] =") < out.index("__shfl_sync")  # the shuffles after the jh loop
    assert store_whole_sectors.rewrite(out) == out  # nothing left to rewrite


@pytest.mark.parametrize("case", ["no-exp-kept", "lane-stride", "row-not-aligned", "inside-if", "runtime-bound",
                                  "division-minus"])
def test_loops_and_addresses_it_cannot_prove_are_left_alone(case):
    src = SUM + P_LOOP
    if case == "no-exp-kept":  # the exp computed twice: the P pass is paced by its exps, whole sectors lose there
        src = P_LOOP
    elif case == "lane-stride":  # the lanes of a quad 4 elements apart: not the mma fragment's layout
        src = src.replace("& 3) * 2)) + elem_offset", "& 3) * 4)) + elem_offset")
    elif case == "row-not-aligned":  # rows 510 elements apart: an 8-byte store would be misaligned
        src = src.replace(">> 2) * 512)", ">> 2) * 510)")
    elif case == "inside-if":  # a lane that skips the loop would skip the shuffles
        src = SUM + "    if (((int)threadIdx.y) < 1) {\n" + P_LOOP + "    }\n"
    elif case == "runtime-bound":  # a loop whose trip count may differ between lanes
        src = SUM + "    for (int r = 0; r < rows_ptr[((int)threadIdx.x)]; ++r) {\n" + P_LOOP + "    }\n"
    elif case == "division-minus":  # C's truncating division and Python's floor division may disagree
        src = src.replace("(((int)blockIdx.x) * 262144)", "(((((int)blockIdx.x) - 1) / 3) * 262144)")
    assert store_whole_sectors.rewrite(src) == src


def test_the_switch_turns_it_off(monkeypatch):
    assert "__stcs((uint2*)(P_ptr" in _source_passes(SUM + P_LOOP)
    disable_pass(monkeypatch, "store_whole_sectors")
    assert _source_passes(SUM + P_LOOP) == SUM + P_LOOP


def test_the_streaming_switch_keeps_a_plain_store(monkeypatch):
    disable_pass(monkeypatch, "stream_p_stores")
    out = _source_passes(SUM + P_LOOP)
    assert "__stcs" not in out and re.search(r"\*\(uint2\*\)\(P_ptr \+ .*\) = fg_v;", out)


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_the_lane_store_is_one_8_byte_streaming_store(arch, tmp_path, monkeypatch):
    """nvcc (as TVM calls it: -O3, fast math) on the rewritten loop in a kernel: st.global.cs.v2 (8 bytes,
    evict-first), one a column tile, and no other global store."""
    import shutil
    import subprocess
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    enable_pass(monkeypatch, "stream_p_stores")
    body = store_whole_sectors.stream(store_whole_sectors.rewrite(SUM + P_LOOP))
    body = body.replace("__1.x = (half)", "__1.x = __float2half").replace("__1.y = (half)", "__1.y = __float2half")
    src = ("#include <cuda_fp16.h>\n"
           'extern "C" __global__ void __launch_bounds__(128) k(half* __restrict__ P_ptr, float* __restrict__ rows, '
           "float scale, int elem_offset) {\n"
           "  float S_warp_ptr[128]; float m_ptr[1]; float row_sum_ptr[1];\n"
           "  for (int i = 0; i < 128; ++i) S_warp_ptr[i] = rows[i * 128 + threadIdx.x];\n"
           "  m_ptr[0] = rows[0]; row_sum_ptr[0] = rows[1];\n"
           "  for (int a = 0; a < 2; ++a) for (int b = 0; b < 64; ++b) for (int i_0_1 = 0; i_0_1 < 16; ++i_0_1)\n"
           "  for (int ax2_2 = 0; ax2_2 < 2; ++ax2_2) {\n" + body + "  }\n}\n")
    (tmp_path / "k.cu").write_text(src)
    subprocess.run(["nvcc", f"-arch={arch}", "-O3", "--use_fast_math", "-ptx", "-o", str(tmp_path / "k.ptx"),
                    str(tmp_path / "k.cu")], check=True, capture_output=True)
    ptx = (tmp_path / "k.ptx").read_text()
    stores = re.findall(r"\bst\.global[\w.]*", ptx)
    assert stores and set(stores) == {"st.global.cs.v2.u32"}, stores


def test_p_offset_factor_the_proof_relies_on_is_declared_by_the_runtime_forms():
    from flashgemm.kernel import fused_gemm_softmax as fgs
    from flashgemm.op.workloads import parse
    assert store_whole_sectors.P_OFFSET_FACTOR == fgs.P_OFFSET_FACTOR
    wl = parse("bert-large", "float16")

    def p_factor(func):
        return int(next(p for p in func.params if p.name == "P").ty.offset_factor)  # (a buffer is a Var in 0.27)
    # the runtime forms (tensor-core alignment) bind P with it; the generic kernels and the tuning form do not
    assert p_factor(fgs.runtime_func(wl.variant, wl.canonical, align=64, any_batch=True)) == fgs.P_OFFSET_FACTOR
    assert p_factor(fgs.runtime_func(wl.variant, wl.canonical, align=2)) == 1
    assert p_factor(fgs.tuning_func(wl.variant, wl.canonical, wl.scale)) == 1


def test_the_tuned_w1_kernels_store_whole_sectors_in_every_shipped_form(monkeypatch):
    import tvm
    import tvm_ffi

    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    from flashgemm.bundle import best
    enable_pass(monkeypatch, "store_whole_sectors")
    enable_pass(monkeypatch, "keep_exp_in_accumulator")
    disable_pass(monkeypatch, "exchange_statistics_once")  # its combine adds exps of the row statistics, not of P
    seen = []

    def keep(code, *args):
        out = cuda_build._postproc_source(code, *args)
        seen.append(out)
        return out
    tvm_ffi.register_global_func("tvm_callback_cuda_postproc", keep, override=True)
    try:
        register_intrinsics("sm_90")
        tk = best.load_tuned(REPO / "flashgemm" / "databases" / "sm_90" / "bert-large.f16", "sm_90")
        for sch in (tk.schedule, tk.twin):  # any batch (symbolic batch dims: divisions in the address) and the twin
            cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(sch, "main")}), targets.tvm_target("sm_90"))
            src = seen[-1]
            assert src.count("exp2f(") == 2 and src.count("fg_pair[2]") == 2  # the loop and its pipeline epilogue
            assert not re.search(r"\*\(half2\*\)\(P_ptr", src)
            assert src.count("__stcs((uint2*)(P_ptr + ") == 2 and src.count("P_ptr + ") == 2  # streamed
    finally:
        tvm_ffi.register_global_func("tvm_callback_cuda_postproc", cuda_build._postproc_source, override=True)


def _w1_twin_p(db: str, streaming: bool, monkeypatch):
    """P of the committed database's shipped twin (flashgemm.bundle.best) on random inputs, with or without the hint."""
    import tvm

    import tests.test_gpu_kernels as g
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    if streaming:
        enable_pass(monkeypatch, "stream_p_stores")
    else:
        disable_pass(monkeypatch, "stream_p_stores")
    # the twin fixes one batch dim (B0 = 1, or B1 = the tuned heads) and takes any size of the other
    tk, dtype, c = g.committed_twin_case(db)
    built = cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(tk.twin, "main")}),
                                    targets.tvm_target(g.ARCH))
    assert ("__stcs(" in built.mod.imports[0].inspect_source("cuda")) == streaming
    return g._run(built, dtype, c, g._canon(c)), c, dtype


@pytest.mark.gpu
@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_w1_twin_gives_the_same_p_with_and_without_the_streaming_hint(db, monkeypatch):
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    p_on, c, dtype = _w1_twin_p(db, True, monkeypatch)
    p_off, _, _ = _w1_twin_p(db, False, monkeypatch)
    g._check(p_on, c, dtype)
    assert np.array_equal(p_on, p_off)
