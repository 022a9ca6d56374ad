# ncu of the causal prefill (4 x 32 x 2048 x 2048 x 128, fp16): shipped wgmma tile, TMA ping-pong and overlap (128, 3), cuDNN; the kernels as probe.py --prebuild DIR exports them (PROBE_PREBUILT=DIR)
import os, sys, torch, tvm
from torch.nn.attention import SDPBackend, sdpa_kernel
P = os.environ.get("PROBE_PREBUILT", ".gpuprobe") + "/"  # probe.py --prebuild DIR
k = {n: tvm.runtime.load_module(P + f)["main"] for n, f in [
    ("wgmma", "wgmma_f16_tb1_bias0_masknone_causal1_d128_2_64_2.so"),
    ("pingpong", "tma_pingpong_f16_tb1_bias0_masknone_causal1_d128_128_3.so"),
    ("overlap", "tma_overlap_f16_tb1_bias0_masknone_causal1_d128_128_3.so")]}
q, kk, v = (torch.randn((4, 32, 2048, 128), device="cuda", dtype=torch.float16) for _ in range(3))
o = torch.empty_like(q)
def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True, scale=128 ** -0.5)
for _ in range(3):
    for f in k.values(): f(q, kk, v, o, 128 ** -0.5, 0)
    cudnn()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for f in k.values(): f(q, kk, v, o, 128 ** -0.5, 0)
cudnn()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
