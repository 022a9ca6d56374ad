# probe: recompute-form any-length kernels + twins at the 512 and 768 bounds (f16, K 64, none), and the one-pass
# any-length kernel at 512 with the static rule's 64-row blocks, for timing against the shipped one-pass kernels
import json, os, sys
sys.path.insert(0, ".")
import tvm
from ort_integration.compile_worker import compile_module
from tir_kernels import Variant
from tuning_db import any_length, tuner
out = "build/gpu/hy"; os.makedirs(out, exist_ok=True)
v = Variant("float16", True)
funcs = {}
tuner.ANY_LENGTH_RECOMPUTE_MIN_BOUND = 0
for tk in any_length.default_kernels(v, 64, "sm_90", [512, 768], log=print):
    funcs[f"rc_len{tk.bound[0]}"] = tk.shipped_func(tk.schedule, f"rc_len{tk.bound[0]}")
    funcs[f"rctwin_len{tk.bound[0]}"] = tk.shipped_func(tk.twin, f"rctwin_len{tk.bound[0]}")
compile_module(tvm.IRModule(funcs), "sm_90").export_library(f"{out}/hy.so")
print("compiled", list(funcs))
