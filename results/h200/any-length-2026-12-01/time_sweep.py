# time every candidate of the sweep bundle at its bound and at ~0.8 of it; torch eager as the yardstick
import json, sys, time
import numpy as np, torch, tvm, tvm_ffi
from benchmarks.peers import time_cuda, torch_fn, torch_inputs
from tir_kernels.workloads import parse
d = sys.argv[1]
man = json.load(open(d + "/manifest.json"))
mod = tvm.runtime.load_module(d + "/flashgemm_kernels.so")
rows = []
groups = {}
for f in man["functions"]:
    groups.setdefault((f["sizes"][4], f["sizes"][2]), []).append(f)
for (k, bound), fs in sorted(groups.items()):
    heads = 12 if k == 32 else 16
    for L in (bound, int(bound * 0.8) + 1):
        wl = parse(f"a=8x{heads}x{L}x{k},b=8x{heads}x{L}x{k},transB=1,scale={k ** -0.5},bias=8x1x1x{L},dtype=float16,name=s")
        c = wl.canonical
        feeds = torch_inputs(wl)
        p = torch.empty(c.out_shape, dtype=torch.float16, device="cuda")
        bias = feeds["bias"].as_strided((c.b0, c.b1, c.m, c.n), c.bias_strides)
        args = [tvm_ffi.from_dlpack(feeds["A"]), tvm_ffi.from_dlpack(feeds["B"]), tvm_ffi.from_dlpack(bias), tvm_ffi.from_dlpack(p)]
        ref = torch_fn(wl)
        want = ref(feeds["A"], feeds["B"], feeds["bias"]).double()
        t_torch = time_cuda(lambda: ref(feeds["A"], feeds["B"], feeds["bias"]), 50)["median_us"]
        line = {"k": k, "bound": bound, "L": L, "torch_us": t_torch, "cands": {}}
        for f in fs:
            fn = mod[f["name"]]
            fn(*args, float(wl.scale)); torch.cuda.synchronize()
            err = float((p.double() - want).abs().max())
            t = time_cuda(lambda: fn(*args, float(wl.scale)), 50)["median_us"]
            line["cands"][f["cand"]] = {"us": t, "err": err}
        rows.append(line)
        best = min(line["cands"].items(), key=lambda kv: kv[1]["us"])
        print(f"K={k} bound={bound} L={L} torch {t_torch:.1f} | " + " ".join(f"{n}={v['us']:.1f}" for n, v in line["cands"].items()) + f" | best {best[0]}", flush=True)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
