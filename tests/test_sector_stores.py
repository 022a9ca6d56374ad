"""Whole-sector P stores (schedules/sector_stores): the register sketches' P loop, with the exp kept in the
accumulator, stores through a quad shuffle and one 8-byte store a lane. CPU only: the rewrite on a P loop of the
W1 kernel's shape, the loops and addresses it must leave alone, P's offset factor it relies on, and the tuned W1
kernels in every shipped form. The GPU numerics are check_bundle's and the register-sketch GPU tests'; the timing is
benchmarks/shipped_forms_ab.py --half-sectors's."""
import re
from pathlib import Path

import pytest

from schedules import sector_stores

REPO = Path(__file__).resolve().parent.parent
ZERO = "0x0p+0f/*0.000000e+00*/"
# the sum pass with the exp kept (exp_in_accumulator's mark), then the W1 twin's P loop as CodeGenCUDA writes it
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


def test_the_p_loop_stores_whole_sectors_through_a_quad_shuffle():
    out = sector_stores.rewrite(SUM + P_LOOP)
    assert "*(half2*)(P_ptr" not in out
    assert out.count("__shfl_sync(0xffffffffu, fg_pair[") == 4
    store = re.search(r"\*\(uint2\*\)\(P_ptr \+ (.*)\) = fg_v;", out)
    assert store and "((((int)threadIdx.x) & 3) * 4)" in store.group(1)  # lane q: columns 4q..4q+3
    assert "fg_pair[ax3_2_2] = *(unsigned*)&__1;" in out  # each half2 kept, in the jh loop it was computed in
    assert out.index("fg_pair[ax3_2_2] =") < out.index("__shfl_sync")  # the shuffles after the jh loop
    assert sector_stores.rewrite(out) == out  # nothing left to rewrite


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
    assert sector_stores.rewrite(src) == src


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("FLASHGEMM_NO_SECTOR_STORES", "1")
    assert sector_stores.rewrite(SUM + P_LOOP) == SUM + P_LOOP


def test_p_offset_factor_the_proof_relies_on_is_declared_by_the_runtime_forms():
    from tir_kernels import fused_gemm_softmax as fgs
    from tir_kernels.workloads import parse
    assert sector_stores.P_OFFSET_FACTOR == fgs.P_OFFSET_FACTOR
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

    from schedules import cuda_build, targets
    from tuning_db import best
    monkeypatch.delenv("FLASHGEMM_NO_SECTOR_STORES", raising=False)
    monkeypatch.delenv("FLASHGEMM_NO_EXP_REUSE", raising=False)
    seen = []

    def keep(code, *args):
        out = cuda_build._postproc_source(code, *args)
        seen.append(out)
        return out
    tvm_ffi.register_global_func("tvm_callback_cuda_postproc", keep, override=True)
    try:
        targets.register_intrinsics("sm_90")
        tk = best.load_tuned(REPO / "tuning_db" / "sm_90" / "bert-large.f16", "sm_90")
        for sch in (tk.schedule, tk.twin):  # any batch (symbolic batch dims: divisions in the address) and the twin
            cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(sch, "main")}), targets.tvm_target("sm_90"))
            src = seen[-1]
            assert src.count("exp2f(") == 2 and src.count("fg_pair[2]") == 2  # the loop and its pipeline epilogue
            assert not re.search(r"\*\(half2\*\)\(P_ptr", src)
            assert src.count("fg_store_cs((uint2*)(P_ptr + ") == 2  # streamed (schedules/streaming_stores)
    finally:
        tvm_ffi.register_global_func("tvm_callback_cuda_postproc", cuda_build._postproc_source, override=True)
