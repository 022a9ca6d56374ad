import sys, time
sys.path.insert(0, ".")  # with _padded's Mp >= M check relaxed for symbolic M, N
import tvm
from tvm import tirx
from tir_kernels import Variant
from tir_kernels.fused_gemm_softmax import _template
from schedules import cuda_recompute
v = Variant("float16", True)
sizes = (tirx.Var("B0", "int32"), tirx.Var("B1", "int32"), tirx.Var("M", "int32"), tirx.Var("N", "int32"), 64)
t = time.time()
f = _template(v, sizes, strided=True, pad=(1024, 1024, 64), recompute=True).with_attr("global_symbol", "main")
print("template ok", time.time() - t)
sch = tvm.s_tir.Schedule(tvm.IRModule({"main": f}), seed=1)
try:
    outs = cuda_recompute.schedule(sch, "sm_90", stage_options=(2,), staged_p=(False,), resident_a=(False,))
    print("sketches", len(outs))
    from schedules import cuda_build
    with tvm.target.Target({"tag": "nvidia/nvidia-h100", "arch": "sm_90"}) as tgt:
        pass
    from ort_integration.compile_worker import compile_module
    lib = compile_module(outs[0].mod, "sm_90")
    src = lib.mod.imports[0].inspect_source()
    print("compiled", len(src), "M+" in src.replace(" ", ""), src.count("__syncthreads"))
except Exception as e:
    import traceback; traceback.print_exc(limit=3); print("FAIL", type(e).__name__, str(e)[:500])
