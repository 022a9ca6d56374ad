"""The Triton peer of the benchmark (benchmarks/triton_fused.py) is checked like our kernels before its times
count: P against the FP64 reference, fp16 and bf16, every variant and the odd shapes (GPU only).
Tolerances: fp16 atol 2e-3, bf16 atol 1.6e-2 (P rounded to the dtype), as for our kernels."""
import numpy as np
import pytest

from flashgemm.op.reference import fused_gemm_softmax_ref
from flashgemm.op.workloads import parse

pytestmark = pytest.mark.gpu
ATOL = {"float16": 2e-3, "bfloat16": 1.6e-2}
CASES = [
    "a=4x3x197x64,b=4x3x197x64,transB=1,scale=0.125",                      # ViT rows, odd M and N
    "a=2x4x128x64,b=2x4x128x64,transB=1,scale=0.125,bias=2x1x128x128",    # bias broadcast over heads
    "a=2x4x64x64,b=2x4x80x64,transB=1,mask=2x1x1x80:bool",                # padding mask (+ a fully masked row)
    "a=2x4x64x64,b=2x4x80x64,transB=1,mask=2x1x64x80:add",                # additive, -inf and -1e9 entries
    "a=2x2x48x64,b=2x2x96x64,transB=1,causal=1",                          # causal, M != N (bottom-right)
    "a=3x40x72,b=3x72x300",                                               # transB = 0, K = 72, N = 300
    "a=8x16x1x64,b=8x16x2048x64,transB=1",                                # M = 1
    "a=16x64x1,b=16x1x64",                                                # K = 1
    "a=2x64x200,b=2x200x96",                                              # K > 64: the K loop
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("spec", CASES)
def test_triton_peer_matches_reference(spec, dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    pytest.importorskip("triton")
    from benchmarks import peers, triton_fused  # noqa: PLC0415
    wl = parse(spec, dtype)
    feeds = peers.torch_inputs(wl, seed=3)
    if "mask" in feeds:  # make row 0 of batch 0 fully masked: it must come out all zeros
        m = feeds["mask"]
        m[0, ..., 0, :] = False if m.dtype == torch.bool else float("-inf")
        if m.dtype != torch.bool:
            m[1, ..., 1, :3] = -1e9  # an fp16 -1e9 overflows to -inf: still just masked
    p = triton_fused.prepare(wl)(feeds)().float().cpu().numpy()

    def host(t):
        return t.cpu().numpy() if t.dtype == torch.bool else t.float().cpu().numpy()
    ref = fused_gemm_softmax_ref(host(feeds["A"]), host(feeds["B"]),
                                 host(feeds["bias"]) if "bias" in feeds else None,
                                 host(feeds["mask"]) if "mask" in feeds else None,
                                 scale=wl.scale, trans_b=wl.trans_b, causal=wl.causal)
    np.testing.assert_allclose(p.astype(np.float64), ref, rtol=0, atol=ATOL[dtype])
    if "mask" in feeds:
        assert not p[0, ..., 0, :].any()
