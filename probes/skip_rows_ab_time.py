# times the skipab kernels: each bound at lengths up to it, pass on and off, alternating rounds (same inputs)
import json, sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
from benchmarks.peers import time_in_rounds
d = sys.argv[1]
on, off = (tvm.runtime.load_module(f"{d}/{m}.so") for m in ("on", "off"))
cases = {768: [513, 600, 700, 768], 1024: [800, 900, 1024], 2048: [1600, 1800, 2048]}
rows = []
for bound, lengths in cases.items():
    for L in lengths:
        b0, b1, k = 16, 16, 64
        a = torch.randn(b0, b1, L, k, device="cuda", dtype=torch.float16)
        b = torch.randn(b0, b1, L, k, device="cuda", dtype=torch.float16)
        ps = {m: torch.empty(b0, b1, L, L, device="cuda", dtype=torch.float16) for m in ("on", "off")}
        args = {m: [tvm_ffi.from_dlpack(t) for t in (a, b, ps[m])] for m in ps}
        want = torch.softmax((a.double() @ b.double().transpose(-1, -2)) * k ** -0.5, -1)
        calls = {}
        for m, lib in (("on", on), ("off", off)):
            fn = lib[f"len{bound}"]
            fn(*args[m], float(k ** -0.5)); torch.cuda.synchronize()
            err = float((ps[m].double() - want).abs().max())
            assert err < 2e-3, (m, bound, L, err)
            calls[m] = (lambda fn=fn, m=m: fn(*args[m], float(k ** -0.5)))
        t = time_in_rounds(calls, 5, 20)
        row = {"bound": bound, "length": L, "us": {m: t[m]["median_us"] for m in calls},
               "round_medians_us": {m: t[m]["round_medians_us"] for m in calls}}
        rows.append(row)
        print(f"bound {bound} L={L}: skip on {row['us']['on']:.1f} us, off {row['us']['off']:.1f} us, "
              f"off/on {row['us']['off'] / row['us']['on']:.2f}x", flush=True)
json.dump({"batch": [16, 16], "k": 64, "dtype": "float16", "rows": rows}, open(sys.argv[2], "w"), indent=1)
