# A/B: the any-length default kernels of long bounds in the one-pass form, the recompute form, and the recompute form
# with skip_chunks (rcab.so: onepass_* and recompute_* compiled with FLASHGEMM_NO_SKIP_CHUNKS=1; rcab_skip.so: recskip_*)
import json, os, sys, time
sys.path.insert(0, ".")
import tvm
from ort_integration.compile_worker import compile_module
from tir_kernels import Variant
from tuning_db import any_length, tuner
out = "build/gpu/rcab"; os.makedirs(out, exist_ok=True)
cases = [(Variant("float16", True), 64), (Variant("float16", True), 128), (Variant("float16", True, causal=True), 64),
         (Variant("bfloat16", True), 64)]
bounds = [512, 768, 1024, 1536, 2048]
funcs, skipf, meta = {}, {}, []
for form, minb in (("onepass", 10 ** 9), ("recompute", 0), ("recskip", 0)):
    tuner.ANY_LENGTH_RECOMPUTE_MIN_BOUND = minb
    for v, k in cases:
        t = time.time()
        for tk in any_length.default_kernels(v, k, "sm_90", bounds, log=print):
            assert (tk.form == "any-length-recompute") == (form != "onepass"), tk.form
            name = f"{form}_{v.key}_k{k}_len{tk.bound[0]}"
            (skipf if form == "recskip" else funcs)[name] = tk.shipped_func(tk.schedule, name)
            meta.append({"name": name, "form": form, "dtype": v.dtype, "causal": int(v.causal), "k": k, "bound": tk.bound[0]})
        print(form, v.key, k, f"{time.time() - t:.0f} s", flush=True)
t = time.time()
os.environ["FLASHGEMM_NO_SKIP_CHUNKS"] = "1"
compile_module(tvm.IRModule(funcs), "sm_90").export_library(f"{out}/rcab.so")
del os.environ["FLASHGEMM_NO_SKIP_CHUNKS"]
compile_module(tvm.IRModule(skipf), "sm_90").export_library(f"{out}/rcab_skip.so")
print("compiled", len(funcs) + len(skipf), f"{time.time() - t:.0f} s")
json.dump(meta, open(f"{out}/meta.json", "w"), indent=1)
