"""The recompute sketches (flashgemm/spaces/cuda_recompute.py): S recomputed over column chunks in three sweeps.

CPU (compile-only, no GPU): where the form applies, that tune() offers it by default on long rows only, and for sm_80 /
sm_89 / sm_90 that sampled candidates are valid at a stated rate, build with nvcc with the accumulators in registers and
the B chunks fetched by cp.async, and replay on the shipped runtime form.
GPU (marked gpu): numerics of sampled candidates against the FP64 reference, aligned and padded shapes, causal,
B [K, N], and rows longer than any row-resident sketch takes.
"""
from __future__ import annotations

import json
import re
import textwrap

import numpy as np
import pytest
from flashgemm.spaces import kernel_forms
from flashgemm.spaces.intrinsics import register_intrinsics

REPO = __import__("pathlib").Path(__file__).resolve().parent.parent
SEEDS = 10
VALID_FLOOR = 0.3  # measured (CPU, compile-only): 4/10 .. 10/10; invalid: more than 1024 threads a block
CODEGEN = [("sm_90", "float16", "a=1x2x1500x64,b=1x2x1500x64,transB=1"),        # W3's rows, padded
           ("sm_80", "bfloat16", "a=2x3x197x64,b=2x3x197x64,transB=1,causal=1"),
           ("sm_89", "float16", "a=2x2x100x40,b=2x2x40x1000")]                  # K padded, B [K, N]

WORKER = textwrap.dedent(r'''
    import json, os, sys
    os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tests.compile_worker import sample_and_build
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_modules
    from flashgemm.spaces import cuda_space
    from flashgemm import targets
    from flashgemm.spaces.intrinsics import register_intrinsics

    assert tvm.runtime.enabled("cuda"), "TVM's CUDA runtime did not load: nvcc would never run"
    out = []
    for arch, dtype, spec, seeds, form_name in json.loads(sys.argv[1]):
        register_intrinsics(arch)
        wl = parse(spec, dtype)
        modules = tuning_modules(wl, arch)
        assert any(f.name == form_name for f, _ in modules), [f for f, _ in modules]
        form, mod = next(fm for fm in modules if fm[0].name == form_name)
        ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main", rand_state=5,
                             space_generator=cuda_space.design_space(arch))
        out.append({"arch": arch, "spec": spec,
                    **sample_and_build(ctx, mod, wl, arch, seeds, pad=form.pad, recompute=True, chunk=form.chunk,
                                     stat_cols=form.stat_cols)})
    print("RESULT" + json.dumps(out))
''')


def test_where_the_recompute_form_applies():
    from flashgemm.spaces import cuda_recompute
    from flashgemm.op.variant import Variant
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuned_forms
    plain = Variant("float16", True)
    assert cuda_recompute.padded_sizes(plain, 1500, 1500, 64) == (1536, 1536, 64)   # W3
    assert cuda_recompute.padded_sizes(plain, 197, 197, 64) == (224, 256, 64)       # W2
    assert cuda_recompute.padded_sizes(plain, 512, 512, 64) == (512, 512, 64)       # aligned: no padding
    assert cuda_recompute.padded_sizes(plain, 64, 65536, 64) == (64, 65536, 64)     # no limit on N
    assert cuda_recompute.padded_sizes(plain, 1, 2048, 64) is None                  # decoding: row-vector space
    assert cuda_recompute.padded_sizes(Variant("float16", True, has_bias=True), 197, 197, 64) is None
    assert cuda_recompute.padded_sizes(Variant("float16", True, mask="add"), 197, 197, 64) is None
    w3, w1 = parse("whisper-enc"), parse("bert-large")
    # auto (the default): long rows only (kernel_forms.RECOMPUTE_AUTO_MIN_N; measured to win at W3's 1500 on the H100)
    assert [f.name for f in tuned_forms(w3, "sm_90")] == ["one-pass", "recompute"]
    assert [f.name for f in tuned_forms(w1, "sm_90")] == ["one-pass"]
    assert [f.name for f in tuned_forms(w3, "sm_90", recompute_form=False)] == ["one-pass"]
    assert [f.name for f in tuned_forms(w1, "sm_90", recompute_form=True)] == ["one-pass", "recompute"]
    assert [f.name for f in tuned_forms(w3, "sm_90", True, True)] == ["one-pass", "padded", "recompute"]
    assert [f.name for f in tuned_forms(w3, "llvm", True, True)] == ["one-pass"]
    # the LM head on Hopper: split-N and its wide (wgmma, CW = 256) form, tuned by default; elsewhere split-N only
    assert [f.name for f in tuned_forms(parse("lm-head"), "sm_90", True, True)] == ["split-n", "split-n-wide"]
    assert [f.name for f in tuned_forms(parse("lm-head"), "sm_80")] == ["split-n"]
    # --forms: exactly the forms named (the primary one may be left out), and a clear error for one the shape lacks
    assert [f.name for f in tuned_forms(w3, "sm_90", only=("recompute2",))] == ["recompute2"]
    assert [f.name for f in tuned_forms(w3, "sm_90", False, False, only=("recompute", "one-pass"))] == \
        ["one-pass", "recompute"]
    with pytest.raises(ValueError, match="no form recompute2; its forms: one-pass"):
        tuned_forms(w3, "llvm", only=("recompute2",))


def test_tune_refuses_a_form_the_shape_lacks_before_any_work(tmp_path):
    from flashgemm.op.workloads import parse
    from flashgemm.tune import tuner
    with pytest.raises(ValueError, match="has no form padded"):
        tuner.tune(parse("demo"), "llvm", 4, db_root=tmp_path, only_forms=("padded",))
    assert not any(tmp_path.rglob("database_*.json"))  # nothing tuned, no database written


def test_recompute_template_form_needs_padded_sizes():
    from flashgemm.kernel.fused_gemm_softmax import tuning_func
    from flashgemm.op.workloads import parse
    wl = parse("whisper-enc")
    with pytest.raises(ValueError, match="pad="):
        tuning_func(wl.variant, wl.canonical, wl.scale, recompute=True)
    pad = (1536, 1536, 64)
    with pytest.raises(ValueError, match=re.escape("G | CW")):  # the statistics' column groups must tile the chunk
        tuning_func(wl.variant, wl.canonical, wl.scale, chunk=64, pad=pad, recompute=True, stat_cols=24)
    part = next(b for b in tuning_func(wl.variant, wl.canonical, wl.scale, chunk=64, pad=pad, recompute=True,
                                       stat_cols=32).body.block.alloc_buffers if b.name == "part_max")
    assert [int(x) for x in part.shape[3:]] == [1536 // 64, 2 * 4]  # (chunks, column groups x quad lanes)


@pytest.fixture(scope="module")
def codegen(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return {r["spec"]: r for r in run_compile_worker(WORKER, [[*c, SEEDS, "recompute"] for c in CODEGEN],
                                                     tmp_path_factory)}


@pytest.fixture(scope="module")
def codegen_two_sweeps(tmp_path_factory):
    from tests.compile_worker import run_compile_worker
    return {r["spec"]: r for r in run_compile_worker(WORKER, [[*c, SEEDS, "recompute2"] for c in CODEGEN],
                                                     tmp_path_factory)}


@pytest.mark.parametrize("arch, dtype, spec", CODEGEN)
def test_two_sweep_sketches_build(codegen_two_sweeps, arch, dtype, spec):
    """The two-sweep form (S twice, FlashAttention's online statistics): valid, builds, two accumulators in the
    lanes' registers, the chunk statistics in registers, two warp columns, P two elements a store where N is even."""
    r = codegen_two_sweeps[spec]
    assert r["sketches"] == 4  # one per pipeline depth x A's fragments loaded per k tile or once a block
    assert r["valid"] >= VALID_FLOOR * r["seeds"], f"{r['valid']}/{r['seeds']} valid"
    assert r["builds"] and all(b["ok"] for b in r["builds"]), [b.get("error") for b in r["builds"]]
    for b in r["builds"]:
        src = b["src"]
        assert "mma.sync.aligned.m16n8k16" in src and "ldmatrix" in src and "cp.async" in src
        assert "S_sum_warp_ptr" not in src  # two sweeps, not three
        for name in ("S_warp_ptr", "S_p_warp_ptr"):
            decl = next(ln for ln in src.splitlines() if f" {name}[" in ln and "alignas" in ln)
            assert int(decl.split("[")[1].split("]")[0]) <= 64, decl
        assert "part_max_local_ptr[" in src and "part_sum_local_ptr[" in src
        assert "threadIdx.z" in src  # warp columns: CW / TWO_SWEEP_STAT_COLS = 2 of them
        # resident A (sketches 2, 3): one register array for both sweeps; else one a sweep at least (the pipelined
        # chunk loop's prologue has its own)
        assert (_a_fragment_buffers(src) == 1) == (b["sketch"] >= 2)


def _a_fragment_buffers(src: str) -> int:
    """Register arrays of A's fragments (declarations): one for all sweeps where A's fragments are resident."""
    return len(re.findall(r"alignas\(\d+\) \w+ A_pad_shared_dyn_warp_ptr(?:_\d+)?\[", src))


@pytest.mark.parametrize("arch, dtype, spec", CODEGEN)
def test_recompute_sketches_build_with_chunks_of_s_in_registers(codegen, arch, dtype, spec):
    r = codegen[spec]
    # one per pipeline depth of the chunk loops x P from the fragments or staged x A's fragments per k tile or resident
    assert r["sketches"] == 8
    assert r["valid"] >= VALID_FLOOR * r["seeds"], f"{r['valid']}/{r['seeds']} valid"
    assert r["builds"] and all(b["ok"] for b in r["builds"]), [b.get("error") for b in r["builds"]]
    for b in r["builds"]:
        src = b["src"]
        ptx = "bf16" if dtype == "bfloat16" else "f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32" in src
        assert "ldmatrix" in src and "cp.async" in src
        # three sweeps, three accumulators, each lowered to the lane's registers (never a 32x per-thread copy, and
        # S never in shared memory: only A, the B chunks and the statistics are)
        assert src.count("_warp_ptr[") >= 3
        staged, resident = (b["sketch"] // 2) % 2 == 1, b["sketch"] >= 4  # the order of cuda_recompute.schedule
        for name in ("S_warp_ptr", "S_sum_warp_ptr", "S_p_warp_ptr"):
            decl = next(ln for ln in src.splitlines() if f" {name}[" in ln and "alignas" in ln)
            # FM*FN*8 floats a lane at most: FM <= 2, FN <= 4 (resident A, one warp column: FN <= 8)
            assert int(decl.split("[")[1].split("]")[0]) <= (128 if resident else 64), decl
        # P leaves the fragments two elements a store where N is even (1.7x faster at W3 than one: results/h100);
        # an odd N (197) keeps scalar stores, its rows being only 2-byte aligned. Staged (sketches 2, 3, 6, 7), P is
        # stored p_vector_width(N) elements a store, read from the fp32 tile as wide
        from flashgemm.spaces.cuda_recompute import p_vector_width
        from flashgemm.op.workloads import parse
        n = parse(spec, dtype).canonical.sizes[3]
        assert (_a_fragment_buffers(src) == 1) == resident  # else one a sweep at least (see the two-sweep test)
        lanes = p_vector_width(n) if staged else 2
        vec = f"*({'nv_bfloat16' if dtype == 'bfloat16' else 'half'}{lanes}*)(P_ptr"
        if lanes == 1:
            assert "P_ptr[" in src and "*(nv_bfloat16" not in src and "*(half" not in src
        else:
            assert (vec in src) == (n % lanes == 0), (n, vec)
        if staged and lanes > 1:
            assert f"*(float{lanes}*)(((float*)buf_dyn_shmem_ptr)" in src  # the tile, read as wide


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_resident_a_with_warp_columns_keeps_a_copy_of_a_a_column(arch):
    """Resident A with two warp columns (threadIdx.z, cuda_recompute.bind_warp): one register array of A's fragments
    (each warp fills its own, by rows only), while the shared-memory copies are split over both columns (not done
    once a column); each warp accumulates its half of the chunk. W3's recompute form, compile-only (nvcc, each
    arch)."""
    import tvm

    from flashgemm.codegen import cuda_build
    from flashgemm.spaces import cuda_recompute, cuda_space
    from flashgemm import targets
    from flashgemm.op.workloads import parse
    from flashgemm.spaces.kernel_forms import tuning_modules
    mod = next(m for f, m in tuning_modules(parse("whisper-enc"), arch) if f.name == "recompute")
    sketch = cuda_recompute._schedule(tvm.s_tir.Schedule(mod), 2, resident_a=True).trace
    # BM 96 = 3 warp rows x 2 fragments, CW 64 = 2 warp columns x 2 fragments; k tiles 4 x 1; fetch widths 1, 8
    decisions = [[16, 6], [24, 4], [3, 2], [2, 2], [4, 1], 0, 2, 2, 2]
    samples = [i for i in sketch.insts if i.kind.name.startswith("Sample")]
    assert len(samples) == len(decisions)
    for inst, dec in zip(samples, decisions):
        sketch = sketch.with_decision(inst, dec, remove_postproc=True)
    sch = tvm.s_tir.Schedule(mod)
    sketch.apply_to_schedule(sch, remove_postproc=True)
    from tvm.s_tir import meta_schedule as ms
    register_intrinsics(arch)
    postprocs = ms.TuneContext(mod=mod, target=targets.tvm_target(arch), task_name="main",
                               space_generator=cuda_space.design_space(arch)).space_generator.postprocs
    assert all(p.apply(sch) for p in postprocs)
    src = cuda_build.compile_cuda(sch.mod, targets.tvm_target(arch)).mod.imports[0].inspect_source("cuda")
    assert re.search(r"__launch_bounds__\(192\)", src)  # 3 x 2 warps
    assert _a_fragment_buffers(src) == 1
    # every global->shared copy (A's once, B's chunks) spans both warp columns: no column copies a tile again
    stores = [ln for ln in src.splitlines() if "buf_dyn_shmem_ptr" in ln and ("cp_async" in ln or "= condval" in ln)]
    assert stores and all("threadIdx.z" in ln for ln in stores), stores
    for name in ("S_warp_ptr", "S_sum_warp_ptr", "S_p_warp_ptr"):  # FM x FN x 8 floats a lane
        decl = next(ln for ln in src.splitlines() if f" {name}[" in ln and "alignas" in ln)
        assert int(decl.split("[")[1].split("]")[0]) == 2 * 2 * 8, decl


def test_migrating_resident_records_measures_each_warp_tiling_once(tmp_path, stand_in_measurement):
    """tune(migrate_records=N) (flashgemm.tune.seeding.migrate): the best resident W3 records of
    tests/data/w3-resident-one-column (one warp column, tuned before warp columns were sampled; the two with their
    provenance) re-expressed at every warp tiling of their blocks, each measured (here by a stand-in runner) and
    committed to the work database, once."""
    from flashgemm import targets
    from flashgemm.op.workloads import parse
    from flashgemm.tune import database as dbm
    from flashgemm.tune import seeding, tuner
    measured = stand_in_measurement
    register_intrinsics("sm_90")
    wl = parse("whisper-enc")
    fixture = REPO / "tests" / "data" / "w3-resident-one-column" / "sm_90" / "whisper-enc.f16"
    committed = dbm.open_json_db(fixture)
    work = tmp_path / "work"
    n, valid = seeding.migrate(wl, "sm_90", work, [committed], 2, 2, print)
    assert n == valid == len(measured) >= 8  # two records, six tilings each at most (a few may exceed 1024 threads)
    mod = next(m for f, m in kernel_forms.tuning_modules(wl, "sm_90") if f.name == "recompute")
    recs = dbm.open_json_db(work).get_all_tuning_records()
    assert len(recs) == n and all(dbm.mean_secs(r) for r in recs)
    tilings = {str(list(r.trace.decisions.values())[2:4]) for r in recs}
    assert len(tilings) == n
    assert {int(list(r.trace.decisions.values())[3][0]) for r in recs} == {1, 2, 4}  # warp columns (WN)
    assert all(kernel_forms.form_of(r, kernel_forms.tuning_modules(wl, "sm_90")).name == "recompute" for r in recs)
    assert recs[0].workload.mod.script() == mod.script()
    assert seeding.migrate(wl, "sm_90", work, [committed], 2, 2, print) == (0, 0)  # once a work directory

    # through tune(): the migrated trials add to the committed ones (a budget they fill leaves no search to run)
    import shutil
    db = tmp_path / "db" / "sm_90" / "whisper-enc.f16"
    shutil.copytree(fixture, db)
    before = json.loads((db / "provenance.json").read_text())["trials"]
    measured.clear()
    prov = tuner.tune(wl, "sm_90", before + n, db_root=tmp_path / "db", migrate_records=2, progress=False)
    assert len(measured) == n and prov["trials"] == before + n
    last = prov["runs"][-1]
    assert last["strategy"] == "migrated" and last["trials"] == last["valid"] == n


CASES = {  # (b, h, m, n, k), features (no bias or mask: the padded form takes none)
    "w3-rows1500": ((1, 2, 1500, 1500, 64), dict()),
    "w1-aligned": ((2, 4, 512, 512, 64), dict()),
    "w2-197": ((2, 3, 197, 197, 64), dict()),
    "causal-m-lt-n-k40": ((2, 2, 100, 200, 40), dict(causal=True)),
    "causal-m-gt-n": ((2, 2, 150, 90, 64), dict(causal=True)),   # the first 60 rows fully masked: zeros
    "b-not-transposed-odd": ((2, 2, 70, 130, 24), dict(trans_b=False)),
    "long-row-8192": ((1, 2, 32, 8192, 64), dict()),               # longer than any row-resident sketch
}


@pytest.mark.gpu
@pytest.mark.parametrize("form", ["3sweeps", "3sweeps-staged", "3sweeps-resident-a", "3sweeps-resident-a-columns",
                                  "2sweeps", "2sweeps-resident-a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES))
def test_recompute_sketch_numerics(dtype, case, form):
    """Sampled candidates of the sketches against the FP64 reference: the three-sweep form with P stored from the
    fragments or staged through shared memory, the two-sweep form, each also with A's fragments resident (the
    resident three-sweep candidates: one P direct, one staged; "-columns": candidates with two or more warp
    columns, each holding its own copy of A's fragments; nothing read or written out of bounds: compute-sanitizer
    memcheck's job, results/ has the runs)."""
    two_sweeps = form.startswith("2sweeps")
    resident = ("resident-a" in form,)
    staged = (False, True) if form.startswith("3sweeps-resident-a") else (form == "3sweeps-staged",)
    # [WN, FN], the three-sweep sketches' fourth decision (cuda_recompute._schedule)
    accept = (lambda d: int(d[3][0]) > 1) if form.endswith("-columns") else None
    import tests.test_gpu_kernels as g
    if g.ARCH is None:
        pytest.skip("no CUDA GPU visible to TVM")
    from flashgemm.spaces import cuda_recompute, cuda_space
    (b, h, m, n, k), feat = CASES[case]
    c = g._case(dtype, b, h, m, n, k, **feat)
    variant, shape = g._variant(dtype, c), g._canon(c)
    pad = cuda_recompute.padded_sizes(variant, m, n, k)
    assert pad is not None
    for rt in g._space_candidates(variant, shape, c["scale"], count=2, pad=pad, recompute=True,
                                  recompute_chunk=cuda_recompute.TWO_SWEEP_CHUNK if two_sweeps else 0,
                                  stat_cols=cuda_recompute.TWO_SWEEP_STAT_COLS if two_sweeps else 0,
                                  space=lambda s: cuda_recompute.schedule(s, g.ARCH, staged_p=staged,
                                                                          resident_a=resident), accept=accept):
        p = g._run(cuda_space.build(rt.mod, g.ARCH), dtype, c, shape)
        g._check(p, c, dtype)
        if feat.get("causal") and m > n:
            assert np.all(p[..., : m - n, :] == 0)
