# times build/gpu/hy against the bundle's one-pass any-length kernels and ORT at lengths of the 512 and 768 bounds
import json, sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
from benchmarks.peers import gpu_info, ort_unfused, time_in_rounds, torch_inputs
from tir_kernels.workloads import parse
hy = tvm.runtime.load_module(sys.argv[1] + "/hy.so")
bundle = tvm.runtime.load_module(sys.argv[2] + "/flashgemm_kernels.so")
rows = []
for bound, lengths in ((512, (400, 448, 512)), (768, (516, 600, 700, 768))):
    for L in lengths:
        b0, b1, k = 16, 16, 64
        wl = parse(f"a={b0}x{b1}x{L}x{k},b={b0}x{b1}x{L}x{k},transB=1,scale=0.125,dtype=float16,name=l{L}")
        feeds = torch_inputs(wl)
        a, b = feeds["A"], feeds["B"]
        want = torch.softmax((a.double() @ b.double().transpose(-1, -2)) * 0.125, -1)
        fns = {"onepass": bundle[f"fgs_f16_tb1_bias0_masknone_causal0_default_len{bound}x{bound}_k64"],
               "recompute": hy[f"rc_len{bound}"], "rc_twin": hy[f"rctwin_len{bound}"]}
        calls = {}
        for name, fn in fns.items():
            p = torch.empty(b0, b1, L, L, dtype=a.dtype, device="cuda")
            args = [tvm_ffi.from_dlpack(t) for t in (a.view(1, b0 * b1, L, k), b.view(1, b0 * b1, L, k),
                                                     p.view(1, b0 * b1, L, L))]
            fn(*args, 0.125); torch.cuda.synchronize()
            err = float((p.double() - want).abs().max())
            assert err <= 2e-3, (name, L, err)
            calls[name] = (lambda fn=fn, args=args: fn(*args, 0.125))
        calls["ort"] = ort_unfused(wl)(dict(feeds))
        t = time_in_rounds(calls, 3, 30)
        row = {"bound": bound, "length": L, "us": {m: t[m]["median_us"] for m in calls}}
        rows.append(row)
        print(f"bound {bound} L={L}: " + "  ".join(f"{m} {u:.1f}" for m, u in row["us"].items()), flush=True)
json.dump({"env": gpu_info(), "rows": rows}, open(sys.argv[3], "w"), indent=1)
