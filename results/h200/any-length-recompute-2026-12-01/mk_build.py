# probe (run from the recompute-masks worktree): the recompute form over long bounds for masked/biased variants,
# plain (any batch) and N%4 twin (any batch), default rule; K 64
import json, os, sys, time
sys.path.insert(0, ".")
import tvm
from ort_integration.compile_worker import compile_module
from schedules import cuda_default, targets
from tir_kernels import Variant, runtime_func, tuning_func
from tuning_db.any_length import _probe_shape
out = "/work/main/build/gpu/mask"; os.makedirs(out, exist_ok=True)
targets.register_intrinsics("sm_90")
funcs, meta = {}, []
for v in [Variant("float16", True, False, "add"), Variant("float16", True, True), Variant("float16", True, False, "bool"),
          Variant("bfloat16", True, False, "add")]:
    for bound in (768, 1024, 1536, 2048):
        shape = _probe_shape(v, bound, 64)
        mod = tvm.IRModule({"main": tuning_func(v, shape, 1.0, bound=(bound, bound), recompute=True)})
        trace, _ = cuda_default.default_trace(mod, "sm_90")
        for form, extra in (("rc", {}), ("rctw", {"n_multiple": 4})):
            sch = tvm.s_tir.Schedule(runtime_func(v, shape, align=64, any_batch=True, bound=(bound, bound),
                                                  recompute=True, **extra))
            trace.apply_to_schedule(sch, remove_postproc=False)
            name = f"{form}_{v.key}_len{bound}"
            funcs[name] = sch.mod["main"].with_attr("global_symbol", name)
            meta.append({"name": name, "form": form, "key": v.key, "bound": bound})
        print(v.key, bound, flush=True)
t = time.time()
compile_module(tvm.IRModule(funcs), "sm_90").export_library(f"{out}/mask.so")
json.dump(meta, open(f"{out}/meta.json", "w"), indent=1)
print("compiled", len(funcs), f"{time.time() - t:.0f} s")
