# probe: the TMA kernel plain, with FA3's intra-warpgroup overlap, and with ping-pong consumers, against the shipped
# wgmma kernel and SDPA, kernel alone; every kernel specialized on zero_nan_rows = 0 as the bundle serves them
# (kernel_library.with_zero_nan_rows).  Run from the repository root on an sm_90 GPU:
#   PYTHONPATH=$PWD python3 results/h200/attention-tma-overlap-probe/probe.py OUT.json
# Kernels compile without a GPU: `probe.py --prebuild DIR` exports them as DIR/*.so, and PROBE_PREBUILT=DIR makes the
# timed run load them instead of compiling.
import json, os, sys, time, traceback
import tvm
from flashgemm import targets
from flashgemm.codegen import cuda_build
from flashgemm.kernel import fused_attention_tma as tma, fused_attention_wgmma as wgk
from flashgemm.op.variant import Variant
from flashgemm.bundle.kernel_library import with_zero_nan_rows

TARGET = tvm.target.Target({"tag": targets.CUDA_ARCHES["sm_90"], "arch": "sm_90a"})
out = {"rows": []}
built = {}

OPTIONS = {"tma": dict(overlap=False), "tma_overlap": dict(overlap=True), "tma_pingpong": dict(overlap=True, pingpong=True)}


PREBUILT = os.environ.get("PROBE_PREBUILT")


def so_path(directory, kind, v, d, tile):
    return os.path.join(directory, f"{kind}_{v.key}_d{d}_{'_'.join(map(str, tile))}.so")


def compile_kernel(kind, v, d, tile):
    f = (tma.runtime_func(v, d, *tile, **OPTIONS[kind]) if kind in OPTIONS else wgk.runtime_func(v, d, *tile))
    return cuda_build.compile_cuda(tvm.IRModule({"main": with_zero_nan_rows(f, 0)}), TARGET)


def build(kind, v, d, *tile):
    key = (kind, v.key, d, tile)
    if key not in built:
        t = time.time()
        path = PREBUILT and so_path(PREBUILT, kind, v, d, tile)
        mod = tvm.runtime.load_module(path) if path and os.path.exists(path) else compile_kernel(kind, v, d, tile)
        built[key] = mod["main"]
        print(f"built {key} in {time.time() - t:.1f} s", flush=True)
    return built[key]

def ref(q, k, v, causal, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        m, n = s.shape[-2:]
        s = s.masked_fill(torch.ones(m, n, dtype=torch.bool, device=s.device).triu(n - m + 1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double())

CASES = [  # name, dtype, (B, H, M, N, D), causal, timed
    ("odd", "float16", (2, 3, 77, 136, 64), False, False),
    ("odd-causal", "float16", (2, 3, 77, 136, 128), True, False),
    ("odd-causal-bf16", "bfloat16", (2, 3, 200, 200, 128), True, False),
    ("W1", "float16", (16, 16, 512, 512, 64), False, True),
    ("W3", "float16", (8, 20, 1500, 1500, 64), False, True),
    ("prefill", "float16", (4, 32, 2048, 2048, 128), True, True),
    ("prefill-bf16", "bfloat16", (4, 32, 2048, 2048, 128), True, True),
]
TMA_TILES = [(128, 2), (128, 3)]


def kernels(n, d):  # (kind, tile): the shipped wgmma tile as served at this N, then every TMA form and tile
    shipped = next(tuple(p) for max_n, p in wgk.TILES[d] if max_n is None or n <= max_n)
    return [("wgmma", shipped)] + [(k_, t) for k_ in OPTIONS for t in TMA_TILES]


if sys.argv[1] == "--prebuild":
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, dtype, (b, h, m, n, d), causal, timed in CASES:
        var = Variant(dtype, True, False, "none", causal)
        for kind, tile in kernels(n, d):
            path = so_path(sys.argv[2], kind, var, d, tile)
            if not os.path.exists(path):
                t = time.time()
                compile_kernel(kind, var, d, tile).export_library(path)
                print(f"exported {os.path.basename(path)} in {time.time() - t:.1f} s", flush=True)
    sys.exit(0)

import torch  # noqa: E402  (after --prebuild, which runs without torch)
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from benchmarks.peers import time_cuda  # noqa: E402

for name, dtype, (b, h, m, n, d), causal, timed in CASES:
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn((b, h, m, d), generator=g, device="cuda", dtype=tdt)
    k, v = (torch.randn((b, h, n, d), generator=g, device="cuda", dtype=tdt) for _ in range(2))
    scale = d ** -0.5
    r = ref(q, k, v, causal, scale)
    var = Variant(dtype, True, False, "none", causal)
    row = {"case": name, "dtype": dtype, "sizes": [b, h, m, n, d], "causal": causal, "systems": {}}
    flops = 4 * b * h * m * n * d * (0.5 if causal else 1.0)
    systems = {}
    for kind, tile in kernels(n, d):
        label = f"{kind}{tile}"
        try:
            fn = build(kind, var, d, *tile)
            o = torch.empty_like(q)
            call = lambda fn=fn, o=o: (fn(q, k, v, o, scale, 0), o)[1]
            call(); torch.cuda.synchronize()
            err = float((o.double() - r).abs().max())
            row["systems"][label] = {"max_abs_err": err}
            systems[label] = call
        except Exception as e:
            row["systems"][label] = {"error": f"{type(e).__name__}: {str(e)[-600:]}"}
            traceback.print_exc()
    if timed:
        for bk, be in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(be=be):
                with sdpa_kernel(be):
                    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            row["systems"][bk] = {"max_abs_err": float((run().double() - r).abs().max())}
            systems[bk] = run
        for rnd in range(2):
            for label, call in systems.items():
                t = time_cuda(call, 30)["median_us"]
                row["systems"][label].setdefault("rounds_us", []).append(round(t, 1))
        for label, s in row["systems"].items():
            if "rounds_us" in s:
                s["median_us"] = min(s["rounds_us"]); s["tflops"] = round(flops / s["median_us"] * 1e-6)
    print(name, dtype, {k_: (s.get("median_us"), s.get("max_abs_err"), s.get("error", "")[:80]) for k_, s in row["systems"].items()}, flush=True)
    out["rows"].append(row)
    json.dump(out, open(sys.argv[1], "w"), indent=1)
