"""Probe: can Meta-Schedule 0.27 tune FusedAttention's hand-written kernels as sketches of one workload?

Workload: the generic FusedAttention definition specialized to one shape (buffers only: scale constant,
zero_nan_rows 0). Space: one schedule that draws a tile index (SampleCategorical) and annotates the root block
with it. Builder: reads the annotation and builds the wgmma kernel of that tile, specialized the same way.
Checks: the space, a JSON database round trip of the records, replay of a stored trace, and the candidates'
build through ms.builder.LocalBuilder with our f_build (nvcc, sm_90a)."""
import sys
import tempfile
import time

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from flashgemm.kernel import fused_attention as fa, fused_attention_wgmma as fw
from flashgemm.op.variant import Variant

KEY = "flashgemm.attention_tile"
SHAPE = dict(B0=2, B1=4, M=512, N=512, D=64)
TILES = [(1, 64, 2), (2, 64, 2), (2, 128, 2), (2, 128, 3), (1, 128, 2)]
VARIANT = Variant("float16", True, False, "none", False)


def concrete(func, scale=0.125):
    b0, b1, m, n, d = (SHAPE[k] for k in ("B0", "B1", "M", "N", "D"))
    shapes = {"Q": (b0, b1, m, d), "K": (b0, b1, n, d), "Km": (b0, b1, n, d), "V": (b0, b1, n, d),
              "O": (b0, b1, m, d)}
    pmap = {}
    for p in func.params:
        if p.name in shapes:
            s = shapes[p.name]
            strides = [s[1] * s[2] * s[3], s[2] * s[3], s[3], 1]
            pmap[p] = tvm.tirx.decl_buffer(s, VARIANT.dtype, name=p.name, strides=strides if len(p.strides) else None,
                                           data_alignment=p.data_alignment, offset_factor=p.offset_factor,
                                           elem_offset=p.elem_offset)
        elif p.name == "scale":
            pmap[p] = tvm.tirx.FloatImm("float32", scale)
        elif p.name == "zero_nan_rows":
            pmap[p] = tvm.tirx.IntImm("int32", 0)
    return func.specialize(pmap)


def space(sch):
    v = sch.sample_categorical(candidates=list(range(len(TILES))), probs=[1.0 / len(TILES)] * len(TILES))
    rv = sch.get_sblock(ROOT_BLOCK)
    sch.annotate(rv, KEY, v)
    return [sch]


def f_build(mod, target, _params):
    main = mod["main"]
    tile = None

    def visit(node):
        nonlocal tile
        if KEY in node.annotations:
            tile = int(node.annotations[KEY])
    tvm_ffi.structural_walk(main.body, ((tvm.s_tir.SBlock, visit),))
    wg, bn, stages = TILES[tile]
    kern = concrete(fw.runtime_func(VARIANT, SHAPE["D"], wg, bn, stages))
    from flashgemm.codegen.cuda_build import compile_cuda  # noqa: PLC0415
    return compile_cuda(tvm.IRModule({"main": kern}), target).mod


if __name__ == "__main__" and "--search" not in sys.argv:
    t0 = time.time()
    gen = concrete(fa.runtime_func(VARIANT))
    print(gen.params, file=sys.stderr)
    mod = tvm.IRModule({"main": gen})
    sch0 = tvm.s_tir.Schedule(mod)
    names = []
    tvm_ffi.structural_walk(gen.body, ((tvm.s_tir.SBlock, lambda b: names.append(b.name_hint)),))
    print("blocks", names)
    ROOT_BLOCK = names[0]
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    ctx = ms.TuneContext(mod=mod, target=target, space_generator=ms.space_generator.ScheduleFn(
        space, sch_rules=[], postprocs=[], mutator_probs={}), task_name="main")
    ctx = ctx.clone() if hasattr(ctx, "clone") else ctx
    spaces = ctx.space_generator.generate_design_space(mod)
    print("design spaces", len(spaces), spaces[0].trace)
    # records: sample 3 decisions, store them, read them back, replay
    with tempfile.TemporaryDirectory() as tmp:
        db = ms.database.JSONDatabase(work_dir=tmp)
        wl = db.commit_workload(mod)
        cands = []
        for seed in range(3):
            s = tvm.s_tir.Schedule(mod, seed=seed + 1)
            s2 = space(s)[0]
            cands.append(s2)
            db.commit_tuning_record(ms.database.TuningRecord(s2.trace, wl, [1e-5 * (seed + 1)], target,
                                                             ms.arg_info.ArgInfo.from_prim_func(gen)))
        db2 = ms.database.JSONDatabase(work_dir=tmp)
        top = db2.get_top_k(db2.commit_workload(mod), 3)
        print("records back", len(top), [str(r.trace).count(KEY) for r in top])
        s3 = tvm.s_tir.Schedule(mod)
        top[0].trace.apply_to_schedule(s3, remove_postproc=False)
        print("replayed annotation", s3.mod["main"].script().count(KEY))
        builder = ms.builder.LocalBuilder(max_workers=1, f_build=f_build, timeout_sec=300)
        res = builder.build([ms.builder.BuilderInput(c.mod, target) for c in cands[:2]])
        for r in res:
            print("build", r.error_msg[-3000:] if r.error_msg else r.artifact_path)
    print("seconds", round(time.time() - t0, 1))


def search_probe(trials=12, batch=4):
    """The evolutionary search with the XGBoost cost model and MutateCategorical over this space, measured by a
    stand-in runner (time = a function of the tile): does it run, stop, and keep the best?"""
    import os  # noqa: PLC0415
    from tvm.ir.utils import derived_object  # noqa: PLC0415
    from flashgemm.spaces.mutate_categorical import MutateCategorical  # noqa: PLC0415

    gen = concrete(fa.runtime_func(VARIANT))
    mod = tvm.IRModule({"main": gen})
    globals()["ROOT_BLOCK"] = "S"
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})

    def tile_of(m):
        found = []
        tvm_ffi.structural_walk(m["main"].body, ((tvm.s_tir.SBlock, lambda b: found.extend(
            [int(b.annotations[KEY])] if KEY in b.annotations else [])),))
        return found[0]

    @derived_object
    class FakeBuilder(ms.builder.PyBuilder):
        def build(self, inputs):
            out = []
            for i in inputs:
                # (its own directory: Meta-Schedule's RemoveBuildArtifact removes the artifact's whole directory)
                path = os.path.join(tempfile.mkdtemp(dir=tmp), f"mod.tile{tile_of(i.mod)}")
                open(path, "w").close()
                out.append(ms.builder.BuilderResult(path, None))
            return out

    @derived_object
    class FakeRunner(ms.runner.PyRunner):
        def run(self, inputs):
            futs = []
            for i in inputs:
                tile = int(i.artifact_path.rsplit(".tile", 1)[1])
                futs.append(ms.runner.LocalRunnerFuture([1e-5 * (1 + abs(tile - 3))], None))
            return futs

    with tempfile.TemporaryDirectory() as tmp:
        ctx = ms.TuneContext(
            mod=mod, target=target, task_name="main", num_threads=1,
            space_generator=ms.space_generator.ScheduleFn(space, sch_rules=[], postprocs=[],
                                                          mutator_probs={MutateCategorical(): 1.0}),
            search_strategy=ms.search_strategy.EvolutionarySearch(population_size=16, init_min_unmeasured=4))
        db = ms.database.JSONDatabase(work_dir=tmp)
        t0 = time.time()
        ms.tune.tune_tasks(tasks=[ctx], task_weights=[1.0], work_dir=tmp, max_trials_global=trials,
                           num_trials_per_iter=batch, builder=FakeBuilder(), runner=FakeRunner(), database=db,
                           cost_model="xgb", task_scheduler="round-robin")
        recs = db.get_all_tuning_records()
        best = db.get_top_k(db.commit_workload(mod), 1)[0]
        s = tvm.s_tir.Schedule(mod)
        best.trace.apply_to_schedule(s, remove_postproc=False)
        print("search: records", len(recs), "tiles measured", sorted(tile_of(r.trace.as_schedule(mod).mod)
                                                                    if hasattr(r.trace, "as_schedule") else -1
                                                                    for r in recs),
              "best tile", tile_of(s.mod), "seconds", round(time.time() - t0, 1))


if __name__ == "__main__" and "--search" in sys.argv:
    search_probe()
