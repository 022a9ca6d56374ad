"""Where the evolutionary search's CPU time goes, per candidate: replaying a trace of the design space, each
postprocessor, and the cost model's feature extraction. No GPU needed (sm_* targets only compile-check).

    python -m flashgemm.tune.search_profile --target sm_90 --workload vit-b16 [--candidates 40]
    python -m flashgemm.tune.search_profile --target sm_90 --workload lm-head --form split-n-wide

Every candidate the search scores costs one replay, the postprocessors and one feature extraction, on one core;
a search of population P with G evolve iterations scores about P * (G + 1) of them a batch. flashgemm-tune's
provenance gives the search's wall time per run; this gives its cost per candidate, to tell which part to cut.
"""
from __future__ import annotations

import argparse
import collections
import time

import tvm
from tvm.s_tir import meta_schedule as ms

from flashgemm import targets
from flashgemm.op.workloads import parse

from flashgemm.spaces.kernel_forms import design_space, form_module, forms
from flashgemm.spaces.intrinsics import register_intrinsics


def profile(workload, target_name: str, candidates: int = 40, seed: int = 1, form: str = "") -> dict:
    """{'candidates', 'valid', 'ms_per_candidate': {stage: ms}} over `candidates` random points of the space of the
    workload's `form` (kernel_forms.forms: a name; "" is the primary form)."""
    target_name = targets.resolve(target_name)
    register_intrinsics(target_name)
    available = forms(workload, target_name)
    chosen = [f for f in available if f.name == form] if form else available[:1]
    if not chosen:
        raise ValueError(f"{workload.dir_name} on {target_name} has no form {form!r}; its forms: "
                         f"{', '.join(f.name for f in available)}")
    mod = form_module(workload, chosen[0])
    ctx = ms.TuneContext(mod=mod, target=targets.tvm_target(target_name), space_generator=design_space(target_name),
                         task_name="profile", num_threads=1, rand_state=seed)
    sketches = ctx.generate_design_space()
    postprocs = ctx.space_generator.postprocs
    features = ms.feature_extractor.PerStoreFeature()
    spent = collections.defaultdict(float)
    valid = 0
    for i in range(candidates):
        t = time.perf_counter()
        sch = tvm.s_tir.Schedule(mod, seed=seed + i)
        # the sketch's instructions without its decisions: every sample draws afresh, as Meta-Schedule's
        # initial population does (replaying the sketch's own trace would repeat one point per sketch)
        sketch = sketches[i % len(sketches)].trace
        tvm.s_tir.Trace(sketch.insts, {}).apply_to_schedule(sch, remove_postproc=True)
        spent["replay"] += time.perf_counter() - t
        ok = True
        for post in postprocs:
            name = getattr(post, "name", None) or type(post).__name__
            if name == "_PyPostproc":  # our Python postprocessors (VerifyGPUCodeArch) show up under this
                name = "VerifyGPUCode"
            t = time.perf_counter()
            ok = post.apply(sch)
            spent[f"postproc {name}"] += time.perf_counter() - t
            if not ok:
                break
        if ok:
            valid += 1
            t = time.perf_counter()
            features.extract_from(ctx, [ms.MeasureCandidate(sch, [])])
            spent["features"] += time.perf_counter() - t
    return {"candidates": candidates, "valid": valid,
            "ms_per_candidate": {k: 1e3 * v / candidates for k, v in spent.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="sm_90", help="llvm | sm_80 | sm_89 | sm_90 (default sm_90)")
    ap.add_argument("--workload", required=True, help="a preset or a spec, as for flashgemm-tune")
    ap.add_argument("--dtype", default=None, choices=["float16", "bfloat16"])
    ap.add_argument("--candidates", type=int, default=40)
    ap.add_argument("--form", default="", help="a form of the workload (flashgemm-tune --forms names them; "
                                               "default: the primary one)")
    args = ap.parse_args(argv)
    if args.candidates < 1:
        ap.error("--candidates must be at least 1")
    try:
        workload = parse(args.workload, args.dtype)
        out = profile(workload, args.target, args.candidates, form=args.form)
    except (ValueError, targets.TargetError) as err:
        ap.error(str(err))
    print(f"{workload.dir_name} on {args.target}: {out['candidates']} candidates, {out['valid']} valid; "
          f"CPU time per candidate (one core):")
    for stage, ms_ in out["ms_per_candidate"].items():
        print(f"  {stage:40s} {ms_:8.1f} ms")
    print(f"  {'total':40s} {sum(out['ms_per_candidate'].values()):8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
