# times build/gpu/rcab: one-pass vs recompute any-length defaults (and ORT MatMul+Softmax) at lengths each bound serves
import json, sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
from benchmarks.peers import gpu_info, ort_unfused, time_in_rounds, torch_inputs
from tir_kernels.workloads import parse
d = sys.argv[1]
libs = {m: tvm.runtime.load_module(f"{d}/{m}.so") for m in ("rcab", "rcab_skip")}
meta = json.load(open(f"{d}/meta.json"))
prev = {512: 384, 768: 512, 1024: 768, 1536: 1024, 2048: 1536}
rows = []
for dtype, causal, k in [("float16", 0, 64), ("float16", 0, 128), ("float16", 1, 64), ("bfloat16", 0, 64)]:
    for bound in (512, 768, 1024, 1536, 2048):
        fns = {m["form"]: libs["rcab_skip" if m["form"] == "recskip" else "rcab"][m["name"]] for m in meta
               if (m["dtype"], m["causal"], m["k"], m["bound"]) == (dtype, causal, k, bound)}
        lengths = [prev[bound] + 1, (prev[bound] + bound) // 2, bound] if (dtype, causal, k) == ("float16", 0, 64) \
            else [prev[bound] + 1, bound]
        for L in lengths:
            b0, b1 = (16, 16) if k == 64 else (8, 16)
            wl = parse(f"a={b0}x{b1}x{L}x{k},b={b0}x{b1}x{L}x{k},transB=1,causal={causal},scale={k ** -0.5:.9g},"
                       f"dtype={dtype},name=len{L}")
            feeds = torch_inputs(wl)
            a, b = feeds["A"], feeds["B"]
            s = (a.double() @ b.double().transpose(-1, -2)) * k ** -0.5
            if causal:
                s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
            want = torch.softmax(s, -1)
            del s
            calls = {}
            for form, fn in fns.items():
                p = torch.empty(b0, b1, L, L, dtype=a.dtype, device="cuda")
                args = [tvm_ffi.from_dlpack(t) for t in (a, b, p)]
                fn(*args, float(k ** -0.5)); torch.cuda.synchronize()
                err = float((p.double() - want).abs().max())
                tol = 2e-3 if dtype == "float16" else 1.6e-2
                assert err <= tol, (form, dtype, causal, k, bound, L, err)
                calls[form] = (lambda fn=fn, args=args: fn(*args, float(k ** -0.5)))
            del want
            if not causal:
                try:
                    calls["ort"] = ort_unfused(wl)(dict(feeds))
                except LookupError as err:
                    print("ORT skipped", err)
            t = time_in_rounds(calls, 3, 20)
            row = {"dtype": dtype, "causal": causal, "k": k, "batch": [b0, b1], "bound": bound, "length": L,
                   "us": {m: t[m]["median_us"] for m in calls}}
            rows.append(row)
            print(f"{dtype} c{causal} k{k} bound {bound} L={L}: " + "  ".join(f"{m} {u:.1f}" for m, u in row["us"].items())
                  + f"  onepass/recompute {row['us']['onepass'] / row['us']['recompute']:.2f}x onepass/recskip {row['us']['onepass'] / row['us']['recskip']:.2f}x", flush=True)
            torch.cuda.empty_cache()
json.dump({"env": gpu_info(), "rows": rows}, open(sys.argv[2], "w"), indent=1)
