# times build/gpu/mask (recompute plain / twin) against the bundle's one-pass any-length kernels, padding masks
# [B, 1, 1, N] (bias likewise), batch 8 x 16 heads, K 64; FP64 check of every output first
import json, sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
from benchmarks.peers import gpu_info, time_in_rounds
d, bundle_dir, out = sys.argv[1:4]
lib = tvm.runtime.load_module(f"{d}/mask.so")
bundle = tvm.runtime.load_module(f"{bundle_dir}/flashgemm_kernels.so")
meta = json.load(open(f"{d}/meta.json"))
prev = {768: 512, 1024: 768, 1536: 1024, 2048: 1536}
B, H, K = 8, 16, 64
rows = []
for key in sorted({m["key"] for m in meta}):
    dt = torch.bfloat16 if key.startswith("bf16") else torch.float16
    for bound in (768, 1024, 1536, 2048):
        for L in (prev[bound] + 1, (prev[bound] + bound) // 2 // 4 * 4, bound):
            g = torch.Generator(device="cuda").manual_seed(L)
            a = torch.randn(B, H, L, K, device="cuda", dtype=dt, generator=g)
            b = torch.randn(B, H, L, K, device="cuda", dtype=dt, generator=g)
            keep = torch.ones(B, L, dtype=torch.bool, device="cuda")
            for i in range(B):
                keep[i, L - 37 * i:] = False  # padding at the end of each sequence but the first
            s = (a.double() @ b.double().transpose(-1, -2)) * K ** -0.5
            if "bias1" in key:
                extra = (torch.randn(B, 1, 1, L, device="cuda", generator=g) * 0.5).to(dt)
                s = s + extra.double()
            elif "maskadd" in key:
                extra = torch.where(keep, 0.0, -1e9).to(dt).view(B, 1, 1, L)
                s = s.masked_fill(~keep.view(B, 1, 1, L), float("-inf"))
            else:
                extra = keep.to(torch.uint8).view(B, 1, 1, L)
                s = s.masked_fill(~keep.view(B, 1, 1, L), float("-inf"))
            want = torch.softmax(s, -1)
            del s
            full = extra.expand(B, H, L, L)
            fns = {"onepass": bundle[f"fgs_{key}_default_len{bound}x{bound}_k64"],
                   "recompute": lib[f"rc_{key}_len{bound}"]}
            if L % 4 == 0:
                fns["rc_twin"] = lib[f"rctw_{key}_len{bound}"]
            calls = {}
            for name, fn in fns.items():
                p = torch.empty(B, H, L, L, device="cuda", dtype=dt)
                args = [tvm_ffi.from_dlpack(t) for t in (a, b, full, p)]
                fn(*args, float(K ** -0.5)); torch.cuda.synchronize()
                err = float((p.double() - want).abs().max())
                assert err <= (2e-3 if dt == torch.float16 else 1.6e-2), (name, key, bound, L, err)
                calls[name] = (lambda fn=fn, args=args: fn(*args, float(K ** -0.5)))
            del want
            t = time_in_rounds(calls, 3, 20)
            row = {"key": key, "bound": bound, "length": L, "us": {m: t[m]["median_us"] for m in calls}}
            rows.append(row)
            u = row["us"]
            print(f"{key} bound {bound} L={L}: " + "  ".join(f"{m} {x:.1f}" for m, x in u.items())
                  + f"  onepass/best-rc {u['onepass'] / min(u['recompute'], u.get('rc_twin', 1e9)):.2f}x", flush=True)
            torch.cuda.empty_cache()
json.dump({"env": gpu_info(), "batch": [B, H], "k": K, "rows": rows}, open(out, "w"), indent=1)
