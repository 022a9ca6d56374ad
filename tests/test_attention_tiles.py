"""FusedAttention's tiles as a Meta-Schedule space (flashgemm/spaces/attention_tiles.py): the grid, the space's
records, the kernel a candidate stands for, its build, and the evolutionary search over it."""
import os
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
    want = at.concrete(drawn[2].kernel(F16, 64), F16, SHAPE, 0.125)
    assert tvm_ffi.structural_equal(kernel, want)
    # the candidate's arguments (Meta-Schedule's, from the workload) are the kernel's
    assert [str(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(kernel)] == \
        [str(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(mod["main"])]


def test_a_candidate_builds_through_the_builder():
    mod = at.workload_module(Variant("bfloat16", False, True, "bool", True), at.Shape(1, 2, 128, 192, 80), 0.1)
    sch = at.design_space("sm_80").generate_design_space(mod)[0]
    builder = ms.builder.LocalBuilder(max_workers=1, f_build=at.f_build, timeout_sec=600)
    (res,) = builder.build([ms.builder.BuilderInput(sch.mod, targets.tvm_target("sm_80"))])
    assert res.error_msg is None, res.error_msg[-2000:]
    assert os.path.getsize(res.artifact_path) > 0


def test_the_evolutionary_search_measures_each_tile_once_and_keeps_the_fastest(tmp_path):
    """XGBoost model, MutateCategorical, a stand-in builder and runner (a tile's time: its distance from tile 3)."""
    mod = at.workload_module(F16, SHAPE, 0.125)
    options = at.tiles("sm_90", F16, 64)
    measured = []

    @derived_object
    class StandInBuilder(ms.builder.PyBuilder):
        def build(self, inputs):
            out = []
            for i in inputs:
                # (a directory each: Meta-Schedule's RemoveBuildArtifact removes the artifact's directory)
                path = os.path.join(tempfile.mkdtemp(dir=tmp_path), str(options.index(at.tile_of(i.mod))))
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
                out.append(ms.runner.LocalRunnerFuture([1e-5 * (1 + abs(idx - 3))], None))
            return out

    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target("sm_90"), space_generator=at.design_space("sm_90"),
                         search_strategy=ms.search_strategy.EvolutionarySearch(population_size=16,
                                                                                init_min_unmeasured=4),
                         task_name="main", num_threads=1)
    (tmp_path / "db").mkdir()
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    ms.tune.tune_tasks(tasks=[ctx], task_weights=[1.0], work_dir=str(tmp_path / "work"), max_trials_global=64,
                       num_trials_per_iter=4, builder=StandInBuilder(), runner=StandInRunner(), database=db,
                       cost_model="xgb", task_scheduler="round-robin")
    assert sorted(measured) == list(range(len(options)))  # every tile, once, then the search stops
    best = db.get_top_k(db.commit_workload(mod), 1)[0]
    sch = tvm.s_tir.Schedule(mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    assert at.tile_of(sch.mod) == options[3]
