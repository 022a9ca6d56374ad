"""flashgemm.codegen.tir.reduce_statistics_in_quads: the register sketches' partial statistics reduced over a quad by
shuffles and combined by each reader (CUDA source and lowered device code of committed records; the numerics on the GPU,
below and in test_register_sketches, which compile every sampled register sketch with the pass)."""
import dataclasses
import re

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

from flashgemm.codegen import cuda_build
from flashgemm.codegen.tir import reduce_statistics_in_quads
from flashgemm import targets
from tests.compile_worker import disable_pass, enable_pass, pass_runs

WN_OF_W1 = 4  # the shipped W1 kernels: 4 warps across a row


def _kernel(src: str) -> str:
    return src[src.index("__global__"):]


def _source(db: str, monkeypatch, combined: bool) -> str:
    from tests.compile_worker import best_record_source_switched
    # this pass's barriers as it leaves them: exchange_statistics_once, later in the source hook, drops one more a row
    # tile
    disable_pass(monkeypatch, "exchange_statistics_once")
    return best_record_source_switched(db, monkeypatch, reduce_statistics_in_quads.PASS, off=combined)


def _capture_the_pass(monkeypatch, capture) -> None:
    """`capture` in the pass's place in the compile pipeline, which reads its passes from cuda_build.PASSES."""
    monkeypatch.setattr(cuda_build, "PASSES", tuple(dataclasses.replace(p, apply=capture)
                                                   if p.name == reduce_statistics_in_quads.PASS else p
                                                   for p in cuda_build.PASSES))


def _device_funcs(db: str, monkeypatch) -> list:
    """The device functions of a committed record's best kernel as the pass receives them (after the other device
    rewrites)."""
    from tests.compile_worker import best_record_module
    seen = []
    real = reduce_statistics_in_quads.reduce_statistics_in_quads

    @tvm.transform.module_pass(opt_level=0, name="capture")
    def capture(mod, ctx):
        funcs = [f for _, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)]
        seen.extend(funcs)
        return real(mod)
    _capture_the_pass(monkeypatch, capture)
    enable_pass(monkeypatch, reduce_statistics_in_quads.PASS)
    cuda_build.compile_cuda(best_record_module(db), targets.tvm_target("sm_90"))
    assert seen
    return seen


def _device_func(db: str, monkeypatch):
    (func,) = _device_funcs(db, monkeypatch)
    return func


@pytest.mark.parametrize("db", ["bert-large.f16", "bert-large.bf16"])
def test_the_w1_kernel_combines_its_statistics_in_each_reader(db, monkeypatch):
    combined = _kernel(_source(db, monkeypatch, combined=True))
    quad = _kernel(_source(db, monkeypatch, combined=False))
    # two statistics a row tile, in the row-tile loop and in its peeled last iteration: one barrier and the one-warp
    # combine gone each
    assert combined.count("__syncthreads") == 10 and quad.count("__syncthreads") == 6
    assert combined.count("threadIdx.y) < 1") == 12 and "threadIdx.y) < 1" not in quad
    assert quad.count("__shfl_xor_sync") == 8  # 2 statistics x 2 places x 2 shuffles
    # lane 0 of each quad stores the quad's value in a compact [row][WN] array; each reader combines WN of them
    assert quad.count("(((int)threadIdx.x) % 4) == 0)") == 4
    assert not re.search(r"__shared__ alignas\(\d+\) float row_(max|sum)_shared_dyn_shared_ptr\[", quad)
    first_reader = next(line for line in quad.splitlines() if "= max(max(row_max_rf" in line)
    assert first_reader.count("row_max_rf_shared_dyn_shared_ptr[") == WN_OF_W1


# W1: the register form (rewritten); W3: the recompute form (statistics in the dynamic pool: left); W2: the one-pass
# form (TVM's allreduce, no rfactor combine); the LM head's split-N and decoding's row-vector form: no such combine
@pytest.mark.parametrize("db, rewritten", [("bert-large.f16", ["row_max.rf_shared.dyn_shared",
                                                                "row_sum.rf_shared.dyn_shared"]),
                                           ("whisper-enc.f16", []), ("vit-b16.f16", []), ("lm-head.bf16", []),
                                           ("decode-m1.f16", [])])
def test_which_kernels_are_rewritten(db, rewritten, monkeypatch):
    funcs = _device_funcs(db, monkeypatch)  # (the split-N form: two kernels)
    assert sorted(name for func in funcs for name in reduce_statistics_in_quads.rewritten(func)) == rewritten


def _syncs(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, ((tirx.Evaluate, lambda s: found.append(s) if reduce_statistics_in_quads._is_sync(s) else None),))
    return found


def _without(stmt, victim):
    def on_seq(seq, mutator):
        keep = [mutator.mutate(s) for s in seq.seq if not s.same_as(victim)]
        return keep[0] if len(keep) == 1 else tirx.SeqStmt(keep)
    return tvm_ffi.structural_mutate(stmt, ((tirx.SeqStmt, on_seq),))


def test_the_barrier_check_sees_each_barrier_the_rewrite_needs(monkeypatch):
    func = _device_func("bert-large.f16", monkeypatch)
    new, done = reduce_statistics_in_quads.rewrite(func)
    rf = [b for b in _buffers(new) if str(b.name) in done]
    assert len(rf) == 2 and reduce_statistics_in_quads.barriers_separate(new.body, rf)
    # every barrier left separates a partial store from a read or a read from the next store, but the first ones of
    # the loop body and of the peeled tile, before the GEMM (A and B's pipeline): drop any other and the check fails
    needed = [s for s in _syncs(new.body) if not reduce_statistics_in_quads.barriers_separate(_without(new.body, s), rf)]
    assert len(needed) == 6


def _buffers(func) -> list:
    found = []

    def store(s):
        if not any(s.buffer.same_as(b) for b in found):
            found.append(s.buffer)
    tvm_ffi.structural_walk(func.body, ((tirx.BufferStore, store),))
    return found


def _shift_partial_rows(func, rf_name: str, by):
    """func with the partial stores to rf_name moved by `by` (an expression of threadIdx.x)."""
    def on_store(s, mutator):
        if str(s.buffer.name) == rf_name:
            return tirx.BufferStore(s.buffer, s.value, [s.indices[0] + by])
        return mutator.default_mutate(s)
    return func.with_body(tvm_ffi.structural_mutate(func.body, ((tirx.BufferStore, on_store),)))


def _thread_var(func, tag: str):
    found = []

    def attr(s):
        if s.attr_key == "thread_extent" and str(s.node.thread_tag) == tag:
            found.append(s.node.var)
    tvm_ffi.structural_walk(func.body, ((tirx.AttrStmt, attr),))
    return found[0]


def test_a_quad_that_does_not_hold_one_row_is_left_alone(monkeypatch):
    func = _device_func("bert-large.f16", monkeypatch)
    tx = _thread_var(func, "threadIdx.x")
    name = "row_max.rf_shared.dyn_shared"
    # each quad lane writes another row (33 floats a row): the combine would be wrong after the shuffle
    other_rows = _shift_partial_rows(func, name, tirx.floormod(tx, 4) * 33 - tirx.floormod(tx, 4))
    assert name not in reduce_statistics_in_quads.rewritten(other_rows)
    # the same row, one slot further (still within the row's 16 partials for lanes 0..2, past it for lane 3 of the
    # last warp): not a quad starting at a multiple of 4
    assert name not in reduce_statistics_in_quads.rewritten(_shift_partial_rows(func, name, tirx.IntImm("int32", 1)))
    assert "row_sum.rf_shared.dyn_shared" in reduce_statistics_in_quads.rewritten(other_rows)


def test_a_partial_store_under_a_lane_condition_is_left_alone(monkeypatch):
    func = _device_func("bert-large.f16", monkeypatch)
    tx = _thread_var(func, "threadIdx.x")
    name = "row_sum.rf_shared.dyn_shared"

    def on_store(s, mutator):
        if str(s.buffer.name) == name:
            return tirx.IfThenElse(tx < 31, s, None)
        return mutator.default_mutate(s)
    guarded = func.with_body(tvm_ffi.structural_mutate(func.body, ((tirx.BufferStore, on_store),)))
    assert reduce_statistics_in_quads.rewritten(guarded) == ["row_max.rf_shared.dyn_shared"]


def test_the_switch_turns_it_off(monkeypatch):
    the_pass = reduce_statistics_in_quads.reduce_statistics_in_quads
    mod = tvm.IRModule({"main_kernel": _device_func("bert-large.f16", monkeypatch)})
    assert not the_pass(mod).same_as(mod)  # W1's kernel is rewritten with the switch unset
    disable_pass(monkeypatch, reduce_statistics_in_quads.PASS)
    assert not pass_runs(reduce_statistics_in_quads.PASS)


GPU_CASES = {  # (b, h, m, n, k), features: W1's rows (4 warps across a row in the shipped kernel), a fully masked
    # first block of rows (causal M > N), rows of 2048 (one warp row a block, up to 16 warps across)
    "w1-rows": ((1, 4, 512, 512, 64), dict()),
    "causal-m-gt-n": ((2, 2, 128, 64, 64), dict(causal=True)),
    "k16-n2048": ((1, 2, 32, 2048, 16), dict()),
}
# whether some of a case's 4 sampled kernels take the rewrite: k16-n2048's have one row tile a block, and there TVM's
# storage planner puts the row sum's partials over the row max's (dead after its combine): left alone (_aliases)
REWRITTEN = {"w1-rows": True, "causal-m-gt-n": True, "k16-n2048": False}


def _sampled_device_funcs(case: str, dtype: str, monkeypatch) -> list:
    """The device functions of a case's 4 sampled register sketches, as the pass receives them (compiled here)."""
    import tests.test_gpu_kernels as g
    from flashgemm.spaces import cuda_registers, cuda_space
    monkeypatch.setattr(g, "ARCH", "sm_90")
    (b, h, m, n, k), feat = GPU_CASES[case]
    c = g._case(dtype, b, h, m, n, k, **feat)
    seen = []
    real = reduce_statistics_in_quads.reduce_statistics_in_quads

    @tvm.transform.module_pass(opt_level=0, name="capture")
    def capture(mod, ctx):
        seen.extend(f for _, f in mod.functions.items() if isinstance(f, tirx.PrimFunc))
        return real(mod)
    _capture_the_pass(monkeypatch, capture)
    for rt in g._space_candidates(g._variant(dtype, c), g._canon(c), c["scale"], count=4,
                                  space=lambda s: cuda_registers.schedule(s, "sm_90")):
        cuda_space.build(rt.mod, "sm_90")
    return seen


def test_statistics_that_share_memory_are_left_alone(monkeypatch):
    # one row tile a block: the planner gives the row sum's partials a view of the row max's allocation; with each
    # reader combining the max's partials after the sum's are stored, both would be live at once
    funcs = _sampled_device_funcs("k16-n2048", "float16", monkeypatch)
    assert len(funcs) == 4
    for func in funcs:
        fams = reduce_statistics_in_quads._find_combines(func)
        assert fams and all(reduce_statistics_in_quads._aliases(func, c.rf) for c in fams)
        assert reduce_statistics_in_quads.rewritten(func) == []


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_register_sketches_with_and_without_the_rewrite(dtype, case, monkeypatch):
    """Sampled register sketches (every form), each compiled with the rewrite and without it (the one-warp combine):
    both match the FP64 reference, and each other within the rounding of the quad's other summation order."""
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.spaces import cuda_registers, cuda_space
    (b, h, m, n, k), feat = GPU_CASES[case]
    c = g._case(dtype, b, h, m, n, k, **feat)
    variant, shape = g._variant(dtype, c), g._canon(c)
    rewritten = 0
    for rt in g._space_candidates(variant, shape, c["scale"], count=4,
                                  space=lambda s: cuda_registers.schedule(s, g.ARCH)):
        out = {}
        for combined in (True, False):
            if combined:
                disable_pass(monkeypatch, reduce_statistics_in_quads.PASS)
            else:
                enable_pass(monkeypatch, reduce_statistics_in_quads.PASS)
            src = cuda_space.build(rt.mod, g.ARCH).mod.imports[0].inspect_source("cuda")
            rewritten += (not combined) and "__shfl_xor_sync" in src
            print(case, dtype, "rewritten" if "__shfl_xor_sync" in src else "as is", "switch off" if combined else "")
            out[combined] = g._run(cuda_space.build(rt.mod, g.ARCH), dtype, c, shape)
            g._check(out[combined], c, dtype)
        if feat.get("causal") and m > n:
            assert np.all(out[False][..., : m - n, :] == 0)  # fully masked rows stay exact zeros
        assert np.abs(out[True] - out[False]).max() <= (1e-3 if dtype == "float16" else 8e-3)
    assert bool(rewritten) == REWRITTEN[case]
