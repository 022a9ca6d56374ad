"""Probe: compile fused_attention_wgmma configs to fatbins + a manifest for the GPU runner (run_mma.py)."""
import json, re, subprocess, sys, os, time
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
from flashgemm.kernel import fused_attention_wgmma as faw
from flashgemm.bundle.compile_worker import compile_module

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
configs = []
def add(dt, tb, bias, mask, causal, d, tile):
    configs.append(dict(dtype=dt, trans_b=tb, bias=bias, mask=mask, causal=causal, d=d, tile=tile))
exec(open(sys.argv[2]).read())
man = []
for i, c in enumerate(configs):
    t0 = time.time()
    v = Variant(c["dtype"], c["trans_b"], c["bias"], c["mask"], c["causal"])
    mma = os.environ.get("KIND") == "mma"
    if mma:
        from flashgemm.kernel import fused_attention_mma as fam
        w, mt, bn, st = fam.TILES[c["d"]]
        c["tile"] = (w, mt, bn, st)
        f = fam.runtime_func(v, c["d"])
    else:
        wg, bn, st = c["tile"][:3]
        f = faw.runtime_func(v, c["d"], wg, bn, st, pingpong=len(c["tile"]) > 3 and bool(c["tile"][3]), producer=len(c["tile"]) > 4 and bool(c["tile"][4]))
    del blobs[:]
    lib = compile_module(tvm.IRModule({"main": f}), "sm_90")
    name = f"{'m' if mma else 'w'}{i}"
    open(f"{out}/{name}.fatbin", "wb").write(blobs[-1])
    src = lib.mod.imports[0].inspect_source("cuda")
    open(f"{out}/{name}.cu", "w").write(src)
    r = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-O3", "--use_fast_math", "-Xptxas", "-v", "-o", f"/tmp/{name}.cubin",
                        f"{out}/{name}.cu"], capture_output=True, text=True)
    sigs = re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\(([^)]*)\) \{', src)
    pre = None
    if len(sigs) == 2:
        pre = dict(kernel=sigs[0][1], params=[p.strip().split()[-1] for p in sigs[0][2].split(",")],
                   types=[" ".join(p.strip().split()[:-1]) for p in sigs[0][2].split(",")])
    sig = sigs[-1]
    params = [p.strip().split()[-1] for p in sig[2].split(",")]
    types = [" ".join(p.strip().split()[:-1]) for p in sig[2].split(",")]
    D = c["d"]
    if mma:
        BM = 16 * mt * w; DP = D + 8
        k_tile = bn * DP if c["trans_b"] else D * (bn + 8)
        smem = (BM * DP + st * bn * DP + st * k_tile) * 2
    else:
        BM = 64 * wg
        smem = (BM * D + 2 * st * bn * D) * 2 + 1024
    c.update(pre=pre, name=name, kernel=sig[1], params=params, types=types, threads=int(sig[0]), BM=BM,
             smem=smem, ptxas=[l for l in r.stderr.splitlines() if "registers" in l or "spill" in l][-2:] if r.returncode == 0 else r.stderr[-500:])
    man.append(c)
    print(name, c["tile"], c["d"], c["dtype"], c["trans_b"], c["mask"], c["causal"], c["ptxas"], "%.0fs" % (time.time() - t0), flush=True)
json.dump(man, open(f"{out}/manifest.json", "w"), indent=1)
