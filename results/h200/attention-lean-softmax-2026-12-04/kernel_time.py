"""FusedAttention's wgmma kernels alone (no ORT), bundles side by side: for each shape the function the op would
serve (variant, head size, the shortest max_n >= N), N back-to-back launches timed by CUDA events, rounds
interleaved across the bundles. argv: OUT.json BUNDLE..."""
import json, sys
import numpy as np
import torch
import tvm
from flashgemm.bundle.kernel_library import KernelLibraries, kernel_libraries

SHAPES = {"W1": (16, 16, 512, 64, False), "W2": (16, 12, 197, 64, False), "W3": (8, 20, 1500, 64, False),
          "prefill": (4, 32, 2048, 128, True)}

def pick(manifest, causal, d, n):
    fs = [f for f in manifest["functions"] if f.get("op") == "FusedAttention" and f.get("form") == "wgmma"
          and f.get("zero_nan_rows") == 0 and f.get("head_size") == d and bool(f["causal"]) == causal
          and f["dtype"] == "float16" and f["trans_b"]]
    fs = [f for f in fs if f.get("max_n") is None or n <= f["max_n"]]
    fs.sort(key=lambda f: f.get("max_n") or 1 << 30)
    return fs[0]

if __name__ == "__main__":
    out, bundles = sys.argv[1], sys.argv[2:]
    dev = tvm.cuda(0)
    libs = {b: (KernelLibraries(kernel_libraries(b)), json.load(open(f"{b}/manifest.json"))) for b in bundles}
    res = []
    for shape, (B, H, L, D, causal) in SHAPES.items():
        rng = np.random.default_rng(0)
        q, k, v = (tvm.runtime.tensor(rng.standard_normal((B, H, L, D)).astype(np.float16), dev) for _ in range(3))
        o = tvm.runtime.empty((B, H, L, D), "float16", dev)
        fns = {}
        for b, (mod, man) in libs.items():
            f = pick(man, causal, D, L)
            fns[b] = (f["name"], mod[f["name"]])
        times = {b: [] for b in bundles}
        reps = 200 if L < 1000 else 50
        for rnd in range(5):
            for b in bundles:
                fn = fns[b][1]
                for _ in range(5):
                    fn(q, k, v, o, np.float32(D ** -0.5), 0)
                dev.sync()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(reps):
                    fn(q, k, v, o, np.float32(D ** -0.5), 0)
                e.record(); e.synchronize(); dev.sync()
                times[b].append(s.elapsed_time(e) * 1e3 / reps)
        for b in bundles:
            r = {"shape": shape, "bundle": b, "function": fns[b][0], "us_rounds": times[b],
                 "median_us": float(np.median(times[b]))}
            res.append(r)
            print(f"{shape:8s} {b:10s} {r['median_us']:8.1f} us  rounds {' '.join(f'{t:.1f}' for t in times[b])}  {fns[b][0]}", flush=True)
    json.dump(res, open(out, "w"), indent=1)
