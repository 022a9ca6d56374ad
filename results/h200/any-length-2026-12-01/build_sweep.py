# candidates of the any-length default rule, compiled into one bundle-like library (manifest of the candidates)
import json, sys, time
sys.path.insert(0, "/work/main")
import tvm
from ort_integration.kernel_library import _entry, any_length_name
from ort_integration.compile_worker import compile_module
from schedules import cuda_default
from schedules.cuda_default import VEC_CHOICES, PV_CHOICES, UNROLL_CHOICES
from tir_kernels import Variant, runtime_func, tuning_func
from tuning_db import any_length
from tuning_db.best import TENSOR_CORE_ALIGN
out = sys.argv[1]
funcs, entries = {}, []
def cand(bm, w, f, bk=2, unroll=16):
    def c(m, n, k, trans_b, mt, nt, kt):
        if mt % bm or nt % (w * f) or kt % bk:
            return []
        return [{"i": [mt // bm, bm], "j": [nt // (w * f), w, f], "k": [kt // bk, bk], "vec_a": 3, "vec_b": 3 if trans_b else 0,
                 "pv": 0, "unroll": UNROLL_CHOICES.index(unroll), "stages": 2}]
    return c
CANDS = {"bm1w4f1": (1, 4, 1), "bm1w8f1": (1, 8, 1), "bm1w4f2": (1, 4, 2), "bm2w4f1": (2, 4, 1), "bm2w8f1": (2, 8, 1),
         "bm4w4f1": (4, 4, 1), "bm4w8f1": (4, 8, 1), "bm4w16f1": (4, 16, 1), "bm2w4f2": (2, 4, 2), "bm1w2f2": (1, 2, 2)}
for k in (32, 64):
  v = Variant("float16", True, True, "none", False)
  for bound in (128, 256, 384, 512, 768, 1024):
    shape = any_length._probe_shape(v, bound, k)
    mod = tvm.IRModule({"main": tuning_func(v, shape, 1.0, bound=(bound, bound))})
    for cname, (bm, w, f) in CANDS.items():
        try:
            trace, c = cuda_default.default_trace(mod, "sm_90", candidates=cand(bm, w, f))
        except Exception as e:
            print("skip", k, bound, cname, str(e)[:80]); continue
        sch = tvm.s_tir.Schedule(runtime_func(v, shape, align=TENSOR_CORE_ALIGN, any_batch=True, bound=(bound, bound)))
        trace.apply_to_schedule(sch, remove_postproc=False)
        name = any_length_name(v, (bound, bound), k) + "_" + cname
        funcs[name] = sch.mod["main"].with_attr("global_symbol", name)
        e = _entry(name, v, shape, align=TENSOR_CORE_ALIGN, any_batch=True, schedule="default", bound=(bound, bound))
        e["cand"] = cname
        entries.append(e)
print(len(funcs), "kernels", flush=True)
t = time.time()
import os; os.makedirs(out, exist_ok=True)
compile_module(tvm.IRModule(funcs), "sm_90").export_library(out + "/flashgemm_kernels.so")
json.dump({"functions": entries, "device": "cuda", "target": "sm_90", "kernels": "flashgemm_kernels.so"}, open(out + "/manifest.json", "w"), indent=1)
print("compiled", time.time() - t)
