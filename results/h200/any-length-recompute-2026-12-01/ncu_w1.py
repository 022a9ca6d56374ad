# one call each of the W1-shaped static tuned kernel and the 512-bound any-length default kernel (none variant), for ncu
import sys
sys.path.insert(0, ".")
import torch, tvm, tvm_ffi
bundle = tvm.runtime.load_module(sys.argv[1] + "/flashgemm_kernels.so")
L, k = 512, 64
a = torch.randn(1, 256, L, k, device="cuda", dtype=torch.float16)
b = torch.randn(1, 256, L, k, device="cuda", dtype=torch.float16)
p = torch.empty(1, 256, L, L, device="cuda", dtype=torch.float16)
args = [tvm_ffi.from_dlpack(t) for t in (a, b, p)]
for name in ("fgs_f16_tb1_bias0_masknone_causal0_m512_n512_k64", "fgs_f16_tb1_bias0_masknone_causal0_default_len512x512_k64"):
    for _ in range(2):
        bundle[name](*args, 0.125)
torch.cuda.synchronize()
print("done")
