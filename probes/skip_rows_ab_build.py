# A/B of schedules/skip_rows: the default any-length kernels (f16, transB, no mask, K 64) at bounds 768/1024/2048,
# compiled with and without the pass, exported to build/gpu/skipab/{on,off}.so
import json, os, sys
sys.path.insert(0, ".")
import tvm
from ort_integration.compile_worker import compile_module
from tir_kernels import Variant
from tuning_db import any_length
out = "build/gpu/skipab"; os.makedirs(out, exist_ok=True)
v = Variant("float16", True)
kernels = any_length.default_kernels(v, 64, "sm_90", [768, 1024, 2048], log=print)
mod = tvm.IRModule({f"len{tk.bound[0]}": tk.shipped_func(tk.schedule, f"len{tk.bound[0]}") for tk in kernels})
for mode in ("on", "off"):
    if mode == "off":
        os.environ["FLASHGEMM_NO_SKIP_ROWS"] = "1"
    lib = compile_module(mod, "sm_90")
    lib.export_library(f"{out}/{mode}.so")
    print(mode, "done", flush=True)
json.dump([tk.bound[0] for tk in kernels], open(f"{out}/bounds.json", "w"))
