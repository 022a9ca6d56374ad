"""schedules.split_chains (a thread's row statistics accumulated in independent chains): hand-built device code,
rewritten and left alone; the committed W1 and W2 kernels' CUDA source; on the GPU, W1's kernel with and without the
rewrite against each other and FP64."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from schedules import cuda_build, split_chains, targets


def _statistics(case: str = "sum"):
    """A thread's sum of exps over a nest of 8 x 2 x 2 elements (W1's register kernel), or ("max-if") a max over a
    guarded loop of 7 (the one-pass form), or a variant the pass must leave alone."""
    @T.prim_func
    def f(p: T.handle("float32", "global")):
        P = T.decl_buffer((64,), "float32", data=p)
        tx = T.launch_thread("threadIdx.x", 32)
        S = T.alloc_buffer((32,), "float32", scope="local")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for a in range(8):
            for b in range(2):
                for c in range(2):
                    S[a * 4 + b * 2 + c] = T.exp2(S[a * 4 + b * 2 + c])
                    acc[0] = acc[0] + S[a * 4 + b * 2 + c]
        P[tx] = acc[0]

    @T.prim_func
    def g(p: T.handle("float32", "global")):
        P = T.decl_buffer((64,), "float32", data=p)
        tx = T.launch_thread("threadIdx.x", 32)
        S = T.alloc_buffer((224,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(-3.4028234663852886e38)
        for c in range(7):
            if c * 32 + tx < 197:
                acc[0] = T.max(acc[0], S[c * 32 + tx])
        P[tx] = acc[0]

    @T.prim_func
    def h(p: T.handle("float32", "global"), n: T.int32):
        P = T.decl_buffer((64,), "float32", data=p)
        tx = T.launch_thread("threadIdx.x", 32)
        S = T.alloc_buffer((32,), "float32", scope="local")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        acc[0] = T.float32(0)
        for a in range(8):
            acc[0] = acc[0] * S[a]
        acc[0] = T.float32(0)
        for a in range(8):
            acc[0] = acc[0] + S[a]
            S[a] = acc[0]
        acc[0] = T.float32(0)
        for a in range(n):
            acc[0] = acc[0] + S[a]
        acc[0] = T.float32(0)
        for a in range(65):
            acc[0] = acc[0] + S[a % 32]
        acc[0] = T.float32(0)
        P[tx] = acc[0]
        for a in range(8):
            acc[0] = acc[0] + S[a]
        P[tx + 32] = acc[0]
    return {"sum": f, "max-if": g, "left-alone": h}[case]


def _stores(func, name_end: str) -> list:
    out = []
    tvm_ffi.structural_walk(func.body, ((tirx.BufferStore, lambda s: out.append(s)
                                         if s.buffer.name.endswith(name_end) else None),))
    return out


def test_a_sum_over_a_nest_becomes_four_chains_then_a_tree():
    out, count = split_chains.rewrite(_statistics("sum"))
    assert count == 1
    chains = _stores(out, "_chains")
    assert [float(s.value.value) for s in chains[:4]] == [0.0] * 4  # the init, then the sum's identity
    (update,) = chains[4:]
    assert isinstance(update.value, tirx.Add) and isinstance(update.indices[0], tirx.FloorMod)
    (combine,) = [s for s in _stores(out, "acc") if isinstance(s.value, tirx.Add)]
    assert "acc_chains[0] + acc_chains[1] + (acc_chains[2] + acc_chains[3])" in out.script()
    fors = []
    tvm_ffi.structural_walk(out.body, ((tirx.For, fors.append),))
    assert [f.kind for f in fors] == [tirx.ForKind.UNROLLED] * 3  # (constant chain indices: registers)


def test_a_guarded_max_keeps_its_guard_and_its_init_in_every_chain():
    out, count = split_chains.rewrite(_statistics("max-if"))
    assert count == 1
    inits = _stores(out, "_chains")[:4]
    assert all(float(s.value.value) == -3.4028234663852886e38 for s in inits)  # max: idempotent, exact
    ifs = []
    tvm_ffi.structural_walk(out.body, ((tirx.IfThenElse, ifs.append),))
    (guard,) = ifs
    assert isinstance(guard.then_case.value, tirx.Max) and guard.then_case.buffer.name == "acc_chains"


def test_what_it_leaves_alone():
    # a product; a nest that reads the accumulator elsewhere; a symbolic extent; more than MAX_ITERATIONS; no nest
    # right after the init
    func = _statistics("left-alone")
    out, count = split_chains.rewrite(func)
    assert count == 0 and out.same_as(func)


def test_the_switch_turns_it_off(monkeypatch):
    mod = tvm.IRModule({"main_kernel": _statistics("sum")})
    assert not split_chains.split_chains(mod).same_as(mod)
    monkeypatch.setenv(split_chains.SWITCH, "1")
    assert split_chains.split_chains(mod).same_as(mod)


@pytest.mark.parametrize("db, chains", [("bert-large.f16", 4), ("vit-b16.f16", 2)])
def test_the_committed_kernels_split_their_statistics(db, chains, monkeypatch):
    """W1's register kernel: max and sum, each in its two row-tile copies (the pipelined loop's prologue and body),
    split; W2's one-pass kernel: its max and sum sweeps. The register kernel keeps its whole-sector P stores
    (sector_stores recognises it by the exp kept in the accumulator, which this pass does not touch)."""
    from tests.compile_worker import best_record_source_switched
    src = best_record_source_switched(db, monkeypatch, split_chains.SWITCH, off=False)
    kernel = src[src.index("__global__"):]
    assert kernel.count("_chains_ptr") and len(set(
        __import__("re").findall(r"\w+_chains_ptr(?:_\d+)?\[4\]", kernel))) == chains
    if db.startswith("bert"):
        assert "fg_pair" in kernel
    before = best_record_source_switched(db, monkeypatch, split_chains.SWITCH, off=True)
    assert "_chains_ptr" not in before


@pytest.mark.gpu
def test_w1_kernel_with_and_without_the_rewrite(monkeypatch):
    """The committed W1 fp16 record as tuned, compiled with and without the pass, on the same inputs: both within
    tolerance of FP64 and within one fp16 step of each other (the sum is reassociated); the bf16 twin against FP64."""
    import tests.test_gpu_kernels as g
    from tests.test_async_copies import REPO, _best, _run_tuning_form, _twin
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    wl, rec, mod = _best(REPO / "tuning_db" / "sm_90" / "bert-large.f16")
    sch = tvm.s_tir.Schedule(mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    c = g._case("float16", *wl.canonical.sizes[:2], 512, 512, 64, scale=float(wl.scale))
    shape = g._canon(c)
    out = []
    for off in (False, True):
        if off:
            monkeypatch.setenv(split_chains.SWITCH, "1")
        built = cuda_build.compile_cuda(sch.mod, targets.tvm_target(g.ARCH))
        assert ("_chains_ptr" in built.mod.imports[0].inspect_source("cuda")) != off
        out.append(_run_tuning_form(built, "float16", c, shape))
        g._check(out[-1], c, "float16")
    monkeypatch.delenv(split_chains.SWITCH)
    assert np.abs(out[0] - out[1]).max() <= 2.0 ** -11
    wl, rec, _ = _best(REPO / "tuning_db" / "sm_90" / "bert-large.bf16")
    c = g._case("bfloat16", 1, 8, 512, 512, 64, scale=float(wl.scale))
    twin = cuda_build.compile_cuda(_twin(wl, rec.trace).mod, targets.tvm_target(g.ARCH))
    assert "_chains_ptr" in twin.mod.imports[0].inspect_source("cuda")
    g._check(g._run(twin, "bfloat16", c, g._canon(c)), c, "bfloat16")
