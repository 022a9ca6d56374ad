"""flashgemm.codegen.tir.move_statistics_to_static_shared: the row statistics in static shared memory, so that TVM keeps
only the barriers their dependences need (CUDA source of committed records; the numerics and racecheck are the GPU
tests' and the sanitizer's job: results/h100)."""
import re

import pytest
import tvm

from flashgemm.codegen import cuda_build
from flashgemm.codegen.tir import reduce_statistics_in_quads, move_statistics_to_static_shared
from flashgemm import targets
from tests.compile_worker import disable_pass

WRITE = re.compile(r"\b(\w+_shared_ptr)\[[^\]]*\]\s*=[^=]")
READ = re.compile(r"\b(\w+_shared_ptr)\[")


def _kernel(src: str) -> str:
    return src[src.index("__global__"):]


def _static_statistics(src: str) -> list:
    return re.findall(r"__shared__ alignas\(\d+\) float (row_(?:max|sum)\w*_shared_ptr)\[", src)


def _reads_before_a_barrier(src: str) -> list:
    """Lines that read a static statistics buffer after a store to it with no __syncthreads between, in source
    order (a straight-line approximation of the barrier planner's job: loop bodies are read once)."""
    dirty, bad = set(), []
    for line in _kernel(src).splitlines():
        if "__syncthreads()" in line:
            dirty.clear()
            continue
        written = WRITE.search(line)
        reads = set(READ.findall(line)) - ({written.group(1)} if written else set())
        bad += [line.strip() for name in reads if name in dirty]
        if written:
            dirty.add(written.group(1))
    return bad


def _source(db: str, monkeypatch, dynamic: bool) -> str:
    from tests.compile_worker import best_record_source_switched
    # this pass alone: reduce_statistics_in_quads, after it in the pipeline, removes the combine and its second barrier
    disable_pass(monkeypatch, reduce_statistics_in_quads.PASS)
    return best_record_source_switched(db, monkeypatch, move_statistics_to_static_shared.PASS, off=dynamic)


def test_the_w1_kernel_keeps_the_barriers_its_statistics_need(monkeypatch):
    # W1's register kernel: a row tile's row-sum loop lost the two barriers an iteration that TVM planned when the
    # statistics shared dynamic memory with A and B; every read of a statistic still follows a barrier after its store
    dynamic = _source("bert-large.f16", monkeypatch, dynamic=True)
    static = _source("bert-large.f16", monkeypatch, dynamic=False)
    assert _kernel(dynamic).count("__syncthreads") == 19 and _kernel(static).count("__syncthreads") == 10
    assert not _static_statistics(dynamic)
    assert sorted(_static_statistics(static)) == sorted(f"{name}_shared_dyn_shared_ptr" for name in
                                                        ("row_max", "row_max_rf", "row_sum", "row_sum_rf"))
    assert not _reads_before_a_barrier(static)


def test_the_straight_line_check_sees_a_missing_barrier(monkeypatch):
    static = _source("bert-large.f16", monkeypatch, dynamic=False)
    body = _kernel(static)
    # drop the barrier between the row max's store (warp 0) and the row-sum loop's reads of it
    store = body.index("row_max_shared_dyn_shared_ptr[((int)threadIdx.x)] =")
    cut = body.index("__syncthreads();", store)
    broken = body[:cut] + body[cut + len("__syncthreads();"):]
    assert any("row_max_shared_dyn_shared_ptr[" in line for line in _reads_before_a_barrier(broken))


def test_kernels_that_reduce_across_threads_keep_dynamic_statistics(monkeypatch):
    # W2's one-pass kernel: its row max is TVM's allreduce, stored by lane 0 and read back by the warp at the same
    # index, the pattern ThreadSync takes for one thread's (module doc of move): left as it was
    assert _source("vit-b16.f16", monkeypatch, dynamic=False) == _source("vit-b16.f16", monkeypatch, dynamic=True)


def _scheduled(db: str):
    from tests.compile_worker import best_record_module
    return best_record_module(db)


# W1: the register form; W2: the one-pass form (an allreduce); W3: the recompute form (S computed three times)
@pytest.mark.parametrize("db, cross_thread, moved", [("bert-large.f16", False, True), ("vit-b16.f16", True, False),
                                                     ("whisper-enc.f16", False, False)])
def test_which_kernels_move(db, cross_thread, moved):
    func = _scheduled(db)["main"]
    assert move_statistics_to_static_shared.has_cross_thread_reduction(func) == cross_thread
    assert (not move_statistics_to_static_shared.move(func).same_as(func)) == moved


def test_a_kernel_over_the_static_limit_is_compiled_with_dynamic_statistics(monkeypatch):
    # ptxas refuses more than 48 KB of static shared memory: compile_cuda compiles such a kernel again without the move
    mod, real = _scheduled("bert-large.f16"), tvm.compile
    calls = []

    def compile_(mod, *args, **kwargs):
        calls.append(move_statistics_to_static_shared._OFF.get())
        if not move_statistics_to_static_shared._OFF.get():
            raise RuntimeError("ptxas error   : Entry function 'main_kernel' uses too much shared data (0xd000 bytes, "
                               "0xc000 max)")
        return real(mod, *args, **kwargs)
    monkeypatch.setattr(tvm, "compile", compile_)
    src = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
    assert calls == [False, True] and not _static_statistics(src) and _kernel(src).count("__syncthreads") == 19


def test_other_compile_errors_are_not_retried(monkeypatch):
    mod = _scheduled("bert-large.f16")

    def compile_(*_args, **_kwargs):
        raise RuntimeError("ptxas error   : something else")
    monkeypatch.setattr(tvm, "compile", compile_)
    with pytest.raises(RuntimeError, match="something else"):
        cuda_build.compile_cuda(mod, targets.tvm_target("sm_90"))


@pytest.mark.parametrize("static, dynamic, ok", [
    (8704, 36864, True),            # 44.5 KB in all: no opt-in needed
    (8960, 46080, False),           # 53.5 KB, but TVM opts in only past 48 KB of dynamic memory (failed to launch)
    (8448, 82944, True),            # W1's kernel: opted in, far below the limit
    (4480, 228864, False),          # past sm_90's 227 KB
    (49 * 1024, 60 * 1024, False),  # static memory alone past 48 KB (ptxas refuses it)
])
def test_launchable(static, dynamic, ok):
    assert move_statistics_to_static_shared.launchable(static, dynamic, 227 * 1024) == ok


def test_a_kernel_that_would_not_launch_keeps_dynamic_statistics(monkeypatch):
    # check_shared_memory raises for the moved kernel; compile_cuda compiles it again without the move
    mod = _scheduled("bert-large.f16")
    monkeypatch.setattr(move_statistics_to_static_shared, "launchable", lambda *_: False)
    src = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
    assert not _static_statistics(src) and _kernel(src).count("__syncthreads") == 19


def test_compiling_a_moved_kernel_imports_no_tensor_intrinsics(tmp_path):
    # Meta-Schedule's builder workers import cuda_build alone (its module doc): the pass and its launch check must
    # not pull in TVM's tensor-intrinsic modules (seconds of parsing a worker; cuda_build's index map clashes with them)
    import subprocess
    import sys
    from tests.compile_worker import REPO
    (tmp_path / "w1.json").write_text(tvm.ir.save_json(_scheduled("bert-large.f16")))
    code = f"""
import sys, tvm
from flashgemm.codegen import cuda_build
from flashgemm import targets
mod = tvm.ir.load_json(open({str(tmp_path / "w1.json")!r}).read())
src = cuda_build.compile_cuda(mod, targets.tvm_target("sm_90")).mod.imports[0].inspect_source("cuda")
assert "row_max_rf_shared_dyn_shared_ptr" in src, "not moved"
print(sorted(m for m in sys.modules if m.startswith("tvm.s_tir.tensor_intrin")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "PYTHONPATH": REPO})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
