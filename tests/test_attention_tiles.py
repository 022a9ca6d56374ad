"""FusedAttention's tiles as a Meta-Schedule space (flashgemm/spaces/attention_tiles.py): the grid, the space's
records, the kernel a candidate stands for, its build, and the evolutionary search over it."""
import os
import re
import tempfile

import pytest
import tvm
import tvm_ffi
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.kernel import fused_attention_mma, fused_attention_wgmma
from flashgemm.op.variant import Variant
from flashgemm.spaces import attention_tiles as at

F16 = Variant("float16", True, False, "none", False)
SHAPE = at.Shape(2, 4, 256, 256, 64)


def test_the_grid_holds_the_shipped_tiles_and_only_tiles_that_fit():
    hopper = at.tiles("sm_90", F16, 64)
    assert {t.form for t in hopper} == {"wgmma"}
    for _, tile in fused_attention_wgmma.TILES[64]:
        assert at.Tile("wgmma", tile) in hopper
    ampere = at.tiles("sm_80", F16, 80)
    assert {t.form for t in ampere} == {"mma"} and at.Tile("mma", fused_attention_mma.TILES[80]) in ampere
    for tile in ampere:  # every one is a kernel that fits the arch's shared memory
        assert at.shared_bytes(tile.kernel(F16, 80)) <= targets.SMEM_LIMIT["sm_80"]
    with pytest.raises(ValueError, match="CUDA targets"):
        at.tiles("llvm", F16, 64)


def test_a_record_names_its_tile_and_its_kernel_is_the_tiles_at_the_shape(tmp_path):
    mod = at.workload_module(F16, SHAPE, 0.125)
    assert at.tile_of(mod) is None
    with pytest.raises(ValueError, match="draws no FusedAttention tile"):
        at.candidate_kernel(mod)
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), space_generator=at.design_space("sm_90"),
                         task_name="main")
    (sch,) = ctx.space_generator.generate_design_space(mod)
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    wl = db.commit_workload(mod)
    options = at.tiles("sm_90", F16, 64)
    drawn = []
    for i in range(3):  # one record per tile, each trace with its own decision
        inst = next(x for x in sch.trace.insts if x.kind.name == "SampleCategorical")
        trace = sch.trace.with_decision(inst, i, remove_postproc=True)
        db.commit_tuning_record(ms.database.TuningRecord(trace, wl, [1e-5 * (3 - i)], targets.tvm_target("sm_90"),
                                                         ms.arg_info.ArgInfo.from_prim_func(mod["main"])))
        drawn.append(options[i])
    again = ms.database.JSONDatabase(work_dir=str(tmp_path))
    best = again.get_top_k(again.commit_workload(mod), 1)[0]
    replayed = tvm.s_tir.Schedule(mod)
    best.trace.apply_to_schedule(replayed, remove_postproc=False)
    assert at.tile_of(replayed.mod) == drawn[2]  # the fastest record's tile
    kernel = at.candidate_kernel(replayed.mod)
    want = at.concrete(drawn[2].kernel(F16, 64), F16, SHAPE, 0.125, buffers=False)
    assert tvm_ffi.structural_equal(kernel, want)
    # the shipped kernel, scalars aside: any length; its arguments are the workload's buffers (Meta-Schedule's
    # arguments), in order and type
    assert [(p.name, p.dtype) for p in kernel.params] == [(p.name, p.dtype) for p in mod["main"].params]
    assert not isinstance(kernel.params[0].shape[2], tvm.tirx.IntImm)  # M symbolic


def test_a_candidate_builds_through_the_tuners_builder():
    """flashgemm-tune's CUDA builder (cuda_space.f_build) builds the tile a FusedAttention candidate draws."""
    from flashgemm.spaces import cuda_space  # noqa: PLC0415
    mod = at.workload_module(Variant("bfloat16", False, True, "bool", True), at.Shape(1, 2, 128, 192, 80), 0.1)
    sch = at.design_space("sm_80").generate_design_space(mod)[0]
    builder = cuda_space.builder("sm_80", 1)
    (res,) = builder.build([ms.builder.BuilderInput(sch.mod, targets.tvm_target("sm_80"))])
    assert res.error_msg is None, res.error_msg[-2000:]
    assert os.path.getsize(res.artifact_path) > 0


def _stand_ins(options, workdir, measured, fastest=3):
    """A builder and runner in place of nvcc and the GPU: a candidate's time is its tile's distance from
    options[fastest]."""
    @derived_object
    class StandInBuilder(ms.builder.PyBuilder):
        def build(self, inputs):
            out = []
            for i in inputs:
                # (a directory each: Meta-Schedule's RemoveBuildArtifact removes the artifact's directory)
                path = os.path.join(tempfile.mkdtemp(dir=workdir), str(options.index(at.tile_of(i.mod))))
                open(path, "w").close()
                out.append(ms.builder.BuilderResult(path, None))
            return out

    @derived_object
    class StandInRunner(ms.runner.PyRunner):
        def run(self, inputs):
            out = []
            for i in inputs:
                idx = int(os.path.basename(i.artifact_path))
                measured.append(idx)
                out.append(ms.runner.LocalRunnerFuture([1e-5 * (1 + abs(idx - fastest))], None))
            return out

    return StandInBuilder(), StandInRunner()


def test_the_evolutionary_search_measures_each_tile_once_and_keeps_the_fastest(tmp_path):
    """XGBoost model, MutateCategorical, stand-ins for the builder and the runner."""
    mod = at.workload_module(F16, SHAPE, 0.125)
    options = at.tiles("sm_90", F16, 64)
    measured = []
    builder, runner = _stand_ins(options, tmp_path, measured)
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), space_generator=at.design_space("sm_90"),
                         search_strategy=ms.search_strategy.EvolutionarySearch(population_size=16,
                                                                                init_min_unmeasured=4),
                         task_name="main", num_threads=1)
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    ms.tune.tune_tasks(tasks=[ctx], task_weights=[1.0], work_dir=str(tmp_path / "work"), max_trials_global=64,
                       num_trials_per_iter=4, builder=builder, runner=runner, database=db,
                       cost_model="xgb", task_scheduler="round-robin")
    assert sorted(measured) == list(range(len(options)))  # every tile, once, then the search stops
    best = db.get_top_k(db.commit_workload(mod), 1)[0]
    sch = tvm.s_tir.Schedule(mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    assert at.tile_of(sch.mod) == options[3]


def test_flashgemm_tune_tunes_attention_into_its_own_database(tmp_path, monkeypatch):
    """tune() of an attention=1 workload: the attention form, its own database directory, the fastest tile first;
    the CPU and head sizes without the kernels are refused with the fix."""
    from flashgemm.op.workloads import parse  # noqa: PLC0415
    from flashgemm.tune import database as dbm, search, tuner  # noqa: PLC0415

    wl = parse("a=1x2x128x64,b=1x2x256x64,transB=1,scale=0.125,attention=1,name=att")
    assert wl.dir_name == "att.attention.f16" and "attention=1" in wl.spec()
    options = at.tiles("sm_90", F16, 64)
    measured = []
    monkeypatch.setattr(search, "builder_runner", lambda *a, **k: _stand_ins(options, tmp_path, measured, 5))
    prov = tuner.tune(wl, "sm_90", len(options), db_root=tmp_path, batch_size=4, progress=False,
                      log=lambda *_: None)
    assert prov["trials"] == len(options) and prov["runs"][-1]["forms"] == ["attention"]
    assert sorted(measured) == list(range(len(options)))
    wl_dir = dbm.workload_dir(tmp_path, "sm_90", wl.dir_name)
    from flashgemm.spaces.kernel_forms import tuning_modules  # noqa: PLC0415
    mods = [m for _, m in tuning_modules(wl, "sm_90")]
    db = dbm.open_json_db(wl_dir)
    top = dbm.top_records(mods, [db], 1)
    sch = tvm.s_tir.Schedule(mods[0])
    top[0].trace.apply_to_schedule(sch, remove_postproc=False)
    assert at.tile_of(sch.mod) == options[5]
    # the bundle's reading: the tile for the attention kernels, none of FusedGemmSoftmax's
    from flashgemm.bundle import attention_best, best  # noqa: PLC0415
    (t,) = attention_best.load_all("sm_90", tmp_path, log=lambda *_: None)
    assert (t.tile, t.variant, t.sizes, t.workload) == (options[5], F16, (1, 2, 128, 256, 64), wl.dir_name)
    assert best.load_all("sm_90", tmp_path, log=lambda *_: None) == []
    with pytest.raises(ValueError, match="tuned on the CUDA targets"):
        tuner.tune(wl, "llvm", 4, db_root=tmp_path, progress=False, log=lambda *_: None)
    with pytest.raises(ValueError, match="head size .K. 48 has no FusedAttention tensor-core kernel"):
        parse("a=1x2x128x48,b=1x2x256x48,transB=1,attention=1")


def _cuda_source(func) -> str:
    from flashgemm.codegen import cuda_build
    return cuda_build.compile_cuda(tvm.IRModule({"main": func}), targets.tvm_target("sm_90")).mod.imports[
        0].inspect_source("cuda")


def test_two_warpgroup_tiles_with_a_bias_or_mask_keep_two_blocks_an_sm():
    """A bias's or mask's two-warpgroup wgmma tile is compiled with at most 128 registers a thread (two blocks of 256
    threads an SM; uncapped its logits take up to 138); without either, and on one warpgroup, the launch bounds."""
    two, one = at.Tile("wgmma", (2, 128, 3)), at.Tile("wgmma", (1, 64, 2))
    for v in (Variant("float16", True, True, "none", False), Variant("bfloat16", True, False, "bool", False)):
        assert "__maxnreg__(128)" in _cuda_source(two.kernel(v, 64))
        assert "__maxnreg__" not in _cuda_source(one.kernel(v, 64))
    src = _cuda_source(two.kernel(F16, 64))
    assert "__maxnreg__" not in src and "__launch_bounds__(256)" in src


def test_a_one_row_bias_and_mask_are_read_once_a_column():
    """The one-warpgroup wgmma tile with a bias and mask: a uniform branch on their row strides (a padding mask
    [B, 1, 1, N]), or M = 1, to a chunk loop that reads a thread's 2 NTS columns of each once for both its rows."""
    src = _cuda_source(at.Tile("wgmma", (1, 64, 2)).kernel(Variant("float16", True, True, "bool", False), 64))
    assert "if ((M == 1) || ((bias_s2 == 0) && (mask_s2 == 0)))" in src
    nts = 64 // 8
    for x in ("bias", "mask"):
        assert len(re.findall(rf"{x}_c_ptr\[\d+\] = ", src)) == 2 * nts
