"""Probe: compile fused_attention_mma configs to cubins + a manifest for the GPU runner."""
import json, re, subprocess, sys, os
import tvm, tvm_ffi
import flashgemm.codegen.cuda_build  # noqa: F401
blobs = []
_orig = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
@tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
def _record(code, *rest):
    out = _orig(code, *rest)
    blobs.append(bytes(out))
    return out
from flashgemm.op.variant import Variant
from flashgemm.kernel import fused_attention_mma as fam
from flashgemm.bundle.compile_worker import compile_module

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
configs = []
def add(dt, tb, bias, mask, causal, d, tile):
    configs.append(dict(dtype=dt, trans_b=tb, bias=bias, mask=mask, causal=causal, d=d, tile=tile))
for tile in [(4,1,64,2),(4,2,64,2),(8,1,64,2),(4,1,32,2),(4,1,64,3)]:
    add("float16", True, False, "none", False, 64, tile)
for tile in [(4,1,64,2),(8,1,64,2),(4,1,32,2),(4,2,32,2)]:
    add("float16", True, False, "none", False, 128, tile)
    add("float16", True, False, "none", True, 128, tile)
for d in (32, 80, 96):
    add("float16", True, False, "none", False, d, (4,1,64,2))
add("bfloat16", True, False, "none", False, 64, (4,1,64,2))
add("float16", False, False, "none", False, 64, (4,1,64,2))
add("float16", True, True, "add", False, 64, (4,1,64,2))
add("bfloat16", False, False, "bool", True, 64, (4,1,64,2))
add("float16", True, False, "add", True, 64, (4,1,64,1))
man = []
for i, c in enumerate(configs):
    v = Variant(c["dtype"], c["trans_b"], c["bias"], c["mask"], c["causal"])
    w, mt, bn, st = c["tile"]
    f = fam.runtime_func(v, c["d"], w, mt, bn, st)
    del blobs[:]
    lib = compile_module(tvm.IRModule({"main": f}), "sm_90")
    open(f"{out}/k{i}.fatbin", "wb").write(blobs[-1])
    src = lib.mod.imports[0].inspect_source("cuda")
    name = f"k{i}"
    open(f"{out}/{name}.cu", "w").write(src)
    r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-O3", "--use_fast_math", "-Xptxas", "-v", "-o", f"{out}/{name}.cubin",
                        f"{out}/{name}.cu"], capture_output=True, text=True)
    info = re.findall(r"Used (\d+) registers|(\d+) bytes spill stores", r.stderr)
    sigs = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{', src)
    pre = None
    if len(sigs) == 2:
        pre = dict(kernel=sigs[0][1], params=[p.strip().split()[-1] for p in sigs[0][2].split(",")],
                   types=[" ".join(p.strip().split()[:-1]) for p in sigs[0][2].split(",")])
    class _S:
        def __init__(self, t): self.t = t
        def group(self, i): return self.t[i - 1]
    sig = _S(sigs[-1])
    params = [p.strip().split()[-1] for p in sig.group(3).split(",")]
    types = [" ".join(p.strip().split()[:-1]) for p in sig.group(3).split(",")]
    D = c["d"]; BM = 16 * mt * w; DP = D + 8
    k_tile = bn * DP if c["trans_b"] else D * (bn + 8)
    smem = (BM * DP + st * bn * DP + st * k_tile) * 2
    c.update(pre=pre, name=name, kernel=sig.group(2), params=params, types=types, threads=int(sig.group(1)), BM=BM,
             smem=smem, ptxas=r.stderr.strip().splitlines()[-2:] if r.returncode == 0 else r.stderr)
    man.append(c)
    print(name, c["tile"], c["d"], c["dtype"], c["trans_b"], c["mask"], c["causal"], c["ptxas"], flush=True)
json.dump(man, open(f"{out}/manifest.json", "w"), indent=1)
