# probe: plain (blocking) ORT Runs timed by benchmarks.peers.time_cuda on torch's legacy default stream vs a stream
# of its own, same process, alternating; plus host wall per Run.
import json, sys, time
import torch
from benchmarks import attention as A
from benchmarks.peers import time_cuda
bundle = sys.argv[1]
res = {}
b, h, m, d, causal = A.SHAPES["W1"]
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (torch.randn((b, h, m, d), generator=g, device="cuda", dtype=torch.float16) for _ in range(3))
fns = {"ours_attention": A._ort("attention", bundle, False, 1)(q, k, v, d ** -0.5, False),
       "ort_mha": A._ort_mha(False, 1)(q, k, v, d ** -0.5, False),
       "sdpa_flash": A._sdpa("sdpa_flash")(q, k, v, d ** -0.5, False)}
side = torch.cuda.Stream()
for rnd in range(2):
    for name, fn in fns.items():
        for where in ("default", "own"):
            ctx = torch.cuda.stream(side) if where == "own" else torch.cuda.stream(torch.cuda.default_stream())
            with ctx:
                t = time_cuda(fn, 50)["median_us"]
                torch.cuda.synchronize(); t0 = time.perf_counter()
                for _ in range(50):
                    fn()
                torch.cuda.synchronize(); wall = (time.perf_counter() - t0) / 50 * 1e6
            res.setdefault(f"{name}/{where}", []).append((round(t, 1), round(wall, 1)))
for k_, v_ in res.items():
    print(k_, "events_us, host_wall_us per round:", v_)
json.dump(res, open(sys.argv[2], "w"), indent=1)
