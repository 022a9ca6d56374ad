"""One call each of FusedAttention (through ORT, the bundle's kernel) and SDPA's cuDNN and flash backends at the
named shapes, inside cudaProfilerStart/Stop, for `ncu --profile-from-start off` to count their instructions.

    ncu --profile-from-start off --section InstructionStats ... python3 sass_mix.py BUNDLE prefill,W1
"""
import sys

import torch

from benchmarks.attention import SHAPES, _ort, _sdpa

bundle, shapes = sys.argv[1], sys.argv[2].split(",")
with torch.cuda.stream(torch.cuda.Stream()):
    for name in shapes:
        b, h, m, d, causal = SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((b, h, m, d), generator=g, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d ** -0.5
        calls = {"ours": _ort("attention", bundle, True, 1)(q, k, v, scale, causal),
                 "sdpa_cudnn": _sdpa("sdpa_cudnn")(q, k, v, scale, causal),
                 "sdpa_flash": _sdpa("sdpa_flash")(q, k, v, scale, causal)}
        ref = calls["sdpa_cudnn"]().float()
        for n, f in calls.items():
            for _ in range(3):
                out = f()
            torch.cuda.synchronize()
            print(name, n, "max diff vs cuDNN", float((out.float() - ref).abs().max()), flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        for n, f in calls.items():
            f()
            torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
