"""The register sketches' row statistics exchanged once a row tile
(flashgemm/codegen/cuda_src/exchange_statistics_once).

CPU: the committed W1 kernels lose one barrier a row tile and combine their warps' partial sums with exp(m_w - m)
weights; the kernels without exp kept in the accumulator (W2, W3) are not touched; a row tile that fails one of the
checks (no barrier before it, other elements in the sum than in the max, an exp in P) is left as it is; the switch.
GPU: every W1 kernel the bundle ships with and without it, against FP64 and against each other. Timing:
benchmarks/shipped_forms_ab.py --two-exchanges."""
import re

import numpy as np
import pytest
import tvm

from flashgemm.codegen.cuda_src import exchange_statistics_once
from flashgemm.spaces.intrinsics import register_intrinsics
from tests.compile_worker import best_record_source, best_record_source_switched, disable_pass, enable_pass, pass_runs

MARK = "/* exchange_statistics_once: no barrier */"


@pytest.fixture(scope="module")
def w1_sources():
    """The W1 fp16 tuning form's CUDA as compiled (the rewrite on) and without the pass exchange_statistics_once
    (off)."""
    with pytest.MonkeyPatch.context() as mp:
        off = best_record_source_switched("bert-large.f16", mp, exchange_statistics_once.PASS, True)
        on = best_record_source_switched("bert-large.f16", mp, exchange_statistics_once.PASS, False)
    return on, off


def test_the_w1_kernel_exchanges_its_statistics_once_a_row_tile(w1_sources):
    on, off = w1_sources
    # two row-tile copies (the pipelined loop and its last tile): one barrier fewer each
    assert on.count(MARK) == 2
    assert off.count("__syncthreads();") - on.count("__syncthreads();") == 2
    assert on.count("float fg_mw[4];") == 1
    # the sum takes exp against the lane's own warp maximum; P weighs each warp's partial sum by exp(m_w - m)
    assert len(re.findall(r"row_max_shared_dyn_local_ptr\w*\[0\] = fg_mw\[", on)) == 2
    assert len(re.findall(r"row_sum_rf_shared_dyn_shared_ptr\[[^\n]*?\] \* exp2f\(\(max\(row_max_rf_shared_dyn_shared_ptr", on)) == 8
    assert len(re.findall(r"_rcp\w* = exp2f\(\(max\(fg_mw\[", on)) == 2
    # nothing else changes: the rewrite is the whole difference, and applying it again finds nothing to do
    assert exchange_statistics_once.rewrite(off) == on
    assert exchange_statistics_once.rewrite(on) == on


def test_the_runtime_scale_kernels_are_rewritten_the_same_way():
    """The plain twin and the any-batch kernel (scale an argument: their max reads X * scale) lose the same barrier
    and take the same combine as the scale twin."""
    from pathlib import Path

    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    from flashgemm.bundle import best
    register_intrinsics("sm_90")
    tk = best.load_tuned(Path(__file__).resolve().parent.parent / "flashgemm" / "databases" / "sm_90" / "bert-large.f16", "sm_90")
    for sch in (tk.twin, tk.schedule):
        src = cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(sch, "main")}),
                                      targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
        assert len(re.findall(r"= max\(row_max_rf_shared_dyn_local_ptr\w*\[0\], \(S_warp_ptr\[[^\n]*\] \* scale\)\);",
                              src)) == 2
        assert src.count(MARK) == 2 and src.count("float fg_mw[4];") == 1
        assert len(re.findall(r"_rcp\w* = exp2f\(\(max\(fg_mw\[", src)) == 2


@pytest.mark.parametrize("db", ["vit-b16.f16", "whisper-enc.f16"])
def test_kernels_without_exp_in_the_accumulator_are_not_touched(db):
    src = best_record_source(db)
    assert not exchange_statistics_once.applies(src) and MARK not in src and "fg_mw" not in src


def _first_tile(src: str) -> tuple:
    """(start, end) of the pipelined loop's row tile in an unrewritten W1 source: its max loop to the second barrier."""
    store = exchange_statistics_once._MAX_STORE.search(src)
    start = src.rfind("for (int ax3_1 = 0;", 0, store.start())
    end = src.index("__syncthreads();", src.index("__syncthreads();", store.end()) + 1)
    return start, end


@pytest.mark.parametrize("case", ["no barrier before the tile", "other elements in the sum", "an exp in P"])
def test_a_tile_it_cannot_prove_is_left_alone(w1_sources, case):
    _, off = w1_sources
    start, end = _first_tile(off)
    if case == "no barrier before the tile":
        top = off.rfind("__syncthreads();", 0, start)
        src = off[:top] + off[top + len("__syncthreads();"):]
    elif case == "other elements in the sum":
        tile = off[start:end]
        tile = re.sub(r"(S_warp_ptr\[\(\(\(\(\(ax3_1_1 \* 64\)) \+ (\(ax4_1 \* 8\))", r"\1 + 1) + \2", tile, count=1)
        assert tile != off[start:end]
        src = off[:start] + tile + off[end:]
    else:
        p_at = off.index("float row_sum_shared_dyn_local_rcp = ", start)
        line_end = off.index("\n", p_at)
        src = off[:line_end] + "\n        row_sum_shared_dyn_local_rcp = exp2f(row_sum_shared_dyn_local_rcp);" + off[line_end:]
    out = exchange_statistics_once.rewrite(src)
    assert out.count(MARK) == 1  # only the last tile, which the edit did not touch
    assert out[:out.index(MARK)].count("fg_mw[ax3_1 *") == 0


def test_the_switch_turns_it_off(w1_sources, monkeypatch):
    _, off = w1_sources
    assert exchange_statistics_once.rewrite(off) != off and pass_runs(exchange_statistics_once.PASS)
    disable_pass(monkeypatch, exchange_statistics_once.PASS)
    assert not pass_runs(exchange_statistics_once.PASS)


@pytest.mark.gpu
@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_w1_kernels_with_one_exchange_match_fp64_and_the_kernels_without(db, monkeypatch):
    """Every W1 kernel the bundle ships (the scale twin, the plain twin with its runtime scale, the any-batch kernel),
    built with and without the rewrite, against FP64 and against each other."""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.codegen import cuda_build
    from flashgemm import targets
    tk, dtype, c = g.committed_twin_case(db)
    # one rounding more a factor: at most one step of P's dtype apart
    step = 2.0 ** -10 if dtype == "float16" else 2.0 ** -7
    for name, sch, scale in (("scale twin", tk.twin, tk.scale), ("plain twin", tk.twin, None),
                             ("any-batch", tk.schedule, None)):
        ps = {}
        for on in (True, False):
            if on:
                enable_pass(monkeypatch, exchange_statistics_once.PASS)
            else:
                disable_pass(monkeypatch, exchange_statistics_once.PASS)
            built = cuda_build.compile_cuda(tvm.IRModule({"main": tk.shipped_func(sch, "main", scale)}),
                                            targets.tvm_target(g.ARCH))
            assert (MARK in built.mod.imports[0].inspect_source("cuda")) == on, name
            ps[on] = g._run(built, dtype, c, g._canon(c))
            g._check(ps[on], c, dtype)
        assert float(np.abs(ps[True].astype(np.float64) - ps[False].astype(np.float64)).max()) <= step, name
