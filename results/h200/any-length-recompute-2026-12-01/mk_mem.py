# memcheck probe: each recompute kernel/twin of the 1024 bound once, batch 2 x 2, L 1021 (twin 1020), padding masks
import json, sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
d = sys.argv[1]
lib = tvm.runtime.load_module(f"{d}/mask.so")
for m in json.load(open(f"{d}/meta.json")):
    if m["bound"] != 1024:
        continue
    dt = torch.bfloat16 if m["key"].startswith("bf16") else torch.float16
    L = 1020 if m["form"] == "rctw" else 1021
    a = torch.randn(2, 2, L, 64, device="cuda", dtype=dt); b = torch.randn(2, 2, L, 64, device="cuda", dtype=dt)
    extra = (torch.ones(2, 1, 1, L, device="cuda", dtype=torch.uint8) if "maskbool" in m["key"]
             else torch.zeros(2, 1, 1, L, device="cuda", dtype=dt)).expand(2, 2, L, L)
    p = torch.empty(2, 2, L, L, device="cuda", dtype=dt)
    lib[m["name"]](*[tvm_ffi.from_dlpack(t) for t in (a, b, extra, p)], 0.125); torch.cuda.synchronize()
    print("ran", m["name"], flush=True)
