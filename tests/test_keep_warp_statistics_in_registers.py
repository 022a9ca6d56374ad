"""flashgemm.codegen.tir.keep_warp_statistics_in_registers: a warp allreduce's row statistics kept in registers (CUDA
source of committed records and of a small hand-scheduled kernel; W2's numerics and racecheck on the GPU:
results/h100)."""
import re

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from flashgemm.codegen import cuda_build
from flashgemm.codegen.tir import keep_rows_in_registers, keep_warp_statistics_in_registers
from flashgemm import targets
from tests.compile_worker import disable_pass, pass_runs

BATCH, ROWS, COLS = 3, 16, 64


def _kernel(src: str) -> str:
    return src[src.index("__global__"):]


def _source(db: str, monkeypatch, shared: bool) -> str:
    from tests.compile_worker import best_record_source_switched
    return best_record_source_switched(db, monkeypatch, keep_warp_statistics_in_registers.PASS, off=shared)


def _scheduled_record(db: str):
    from tests.compile_worker import best_record_module
    return best_record_module(db)["main"]


def test_the_w2_kernel_keeps_its_statistics_in_registers(monkeypatch):
    # W2's one-pass kernel: a warp a row, TVM's shuffle allreduce. In shared memory each statistic took a lane-0
    # store between two barriers and the warp's reloads; in registers the readers use the shuffle's broadcast result.
    # (keep_rows_in_registers off: with it the normalize loop reads the stored exps and no longer names the max)
    disable_pass(monkeypatch, keep_rows_in_registers.PASS)
    shared = _kernel(_source("vit-b16.f16", monkeypatch, shared=True))
    regs = _kernel(_source("vit-b16.f16", monkeypatch, shared=False))
    assert shared.count("__syncthreads") == 8 and regs.count("__syncthreads") == 4
    lane0_store = re.compile(r"\(\(int\)threadIdx\.x\) == 0\)\) \{\s*"
                             r"\(\(float\*\)buf_dyn_shmem_ptr\)\[[^\]]*\] = red_buf")
    assert len(lane0_store.findall(shared)) == 2 and not lane0_store.findall(regs)
    # the normalize loop divides by the row sum's register (its reciprocal: rewrite_softmax_arithmetic) and subtracts
    # the max's
    p_loop = regs[regs.rindex("for (int"):]
    assert "red_buf0_ptr[0]" in p_loop and "red_buf0_rcp" in p_loop and "buf_dyn_shmem_ptr)[((int)threadIdx.y)]" \
        not in p_loop


# W1: the register form (rfactor partials combined across warps, no allreduce); W3: the recompute form; the LM head:
# the split-N normalize (an allreduce over 128 threads, several warps: left, module doc); decoding: the row-vector form
# (the same); W2: the one-pass form
@pytest.mark.parametrize("db, moved", [("bert-large.f16", []), ("whisper-enc.f16", []), ("lm-head.bf16", []),
                                       ("decode-m1.f16", []), ("vit-b16.f16", ["row_max", "row_sum"]),
                                       ("vit-b16.bf16", ["row_max", "row_sum"])])
def test_which_statistics_move(db, moved):
    func = _scheduled_record(db)
    assert sorted(name for name, _, _ in keep_warp_statistics_in_registers.statistics_to_move(func)) == moved
    assert keep_warp_statistics_in_registers.move(func).same_as(func) == (not moved)


def rows_minus_max(shift: int):
    """P = X - max of row (i + shift) % ROWS, a block a batch: the smallest kernel with a row statistic."""
    @T.prim_func(s_tir=True)
    def f(X: T.Buffer((BATCH, ROWS, COLS), "float32"), P: T.Buffer((BATCH, ROWS, COLS), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        row_max = T.sblock_alloc_buffer((BATCH, ROWS), "float32")
        for b, i, j in T.grid(BATCH, ROWS, COLS):
            with T.sblock("row_max"):
                vb, vi, vj = T.axis.remap("SSR", [b, i, j])
                with T.init():
                    row_max[vb, vi] = T.min_value("float32")
                row_max[vb, vi] = T.max(row_max[vb, vi], X[vb, vi, vj])
        for b, i, j in T.grid(BATCH, ROWS, COLS):
            with T.sblock("P"):
                vb, vi, vj = T.axis.remap("SSS", [b, i, j])
                P[vb, vi, vj] = X[vb, vi, vj] - row_max[vb, (vi + shift) % ROWS]
    return f


def scheduled(case: str, scope: str = "shared.dyn") -> tvm.IRModule:
    """rows_minus_max scheduled as the one-pass form does (a warp a row, lanes over columns), or with one change that
    makes a thread read a statistic its own warp did not compute."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": rows_minus_max(1 if case == "other-row" else 0)}))
    rm, p = sch.get_sblock("row_max"), sch.get_sblock("P")
    sch.bind(sch.get_loops(p)[0], "blockIdx.x")
    sch.compute_at(rm, sch.get_loops(p)[0])
    sch.set_scope(rm, 0, scope)
    for blk in (rm, p):
        i, j = sch.get_loops(blk)[-2:]
        if case == "block-wide" and blk == rm:  # the reduction over two warps (threadIdx.y too)
            _, jy, jx = sch.split(j, factors=[None, 2, 32])
            sch.bind(jy, "threadIdx.y")
            sch.bind(jx, "threadIdx.x")
            continue
        if case != "block-wide" and not (case == "serial-rows" and blk == p):
            sch.bind(i, "threadIdx.y")
        _, jx = sch.split(j, factors=[None, 16 if case == "half-warp" else 32])
        sch.bind(jx, "threadIdx.x")
    return sch.mod


@pytest.mark.parametrize("case, moves", [("warp", True), ("half-warp", True), ("other-row", False),
                                         ("serial-rows", False), ("block-wide", False)])
def test_a_statistic_moves_only_where_each_thread_reads_its_own_warps(case, moves):
    mod = scheduled(case)
    assert bool(keep_warp_statistics_in_registers.statistics_to_move(mod["main"])) == moves
    src = _kernel(cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda"))
    assert ("__shared__" in src) == (not moves)  # moved: the kernel has no shared memory left


def test_the_switch_turns_it_off(monkeypatch):
    mod = scheduled("warp")
    assert not keep_warp_statistics_in_registers.warp_statistics_in_registers(mod).same_as(mod) and pass_runs(keep_warp_statistics_in_registers.PASS)
    disable_pass(monkeypatch, keep_warp_statistics_in_registers.PASS)
    assert not pass_runs(keep_warp_statistics_in_registers.PASS)


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["warp", "half-warp", "other-row"])
def test_moved_statistics_numerics(case):
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    ex = cuda_build.compile_cuda(scheduled(case), targets.tvm_target(g.ARCH))
    x = np.random.default_rng(0).standard_normal((BATCH, ROWS, COLS)).astype("float32")
    dev = tvm.cuda(0)
    p = tvm.runtime.tensor(np.zeros_like(x), dev)
    ex(tvm.runtime.tensor(x, dev), p)
    shift = 1 if case == "other-row" else 0
    ref = x - np.roll(x.max(axis=2), -shift, axis=1)[:, :, None]
    np.testing.assert_array_equal(p.numpy(), ref)
