"""The fused op in Triton: the peer that shows what a hand-written fused kernel reaches on the same GPU.

P = softmax_rowwise(scale * A @ B + bias + mask) (causal: bottom-right aligned), fp32 statistics, P in A's dtype.
One program owns BLOCK_M rows of one (b0, b1) and sweeps N twice (FlashAttention's online softmax, then recompute):
  pass 1: S tiles in registers -> running row max m and sum l (rescaled when the max grows);
  pass 2: S tiles recomputed -> P = exp(S - m) / l written once.
S never leaves the chip and needs no shared memory, at the price of computing A@B twice (cheap when K is small,
as in attention scores). Fully masked rows give zeros, never NaN. Triton's autotuner picks tiles, warps and stages.
"""
import torch
import triton
import triton.language as tl

# 8 configurations: each one costs a compile per (dtype, variant) the first time it is tried
CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
           for bm, bn, w, s in [(64, 64, 4, 2), (64, 128, 4, 3), (64, 128, 8, 2), (128, 64, 4, 3), (128, 64, 8, 2),
                                (128, 128, 8, 2), (128, 128, 8, 3), (32, 128, 4, 2)]]


@triton.jit
def _scores(a_tile, a_ptr, b_ptr, bias_ptr, mask_ptr, rows, cols, M, N, K, scale, sak, sbn, sbk, sxm, sxn, smm, smn,
            HAS_BIAS: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, ONE_K: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """scale * A@B + bias + mask for a BLOCK_M x BLOCK_N tile, fp32, -inf where masked or out of bounds.
    ONE_K (K <= BLOCK_K): A's tile was loaded once by the caller and the N sweep is the innermost loop with a
    dot, which Triton software-pipelines; otherwise a K loop."""
    if ONE_K:
        ks = tl.arange(0, BLOCK_K)
        b = tl.load(b_ptr + ks[:, None] * sbk + cols[None, :] * sbn, mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a_tile, b)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + ks[None, :] * sak, mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * sbk + cols[None, :] * sbn, mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
    s = acc * scale
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    if HAS_BIAS:
        s += tl.load(bias_ptr + rows[:, None] * sxm + cols[None, :] * sxn, mask=inside, other=0.0).to(tl.float32)
    if MASK == 1:  # additive; <= -65504 (fp16 -1e9 overflows to -inf) counts as masked, like the reference
        madd = tl.load(mask_ptr + rows[:, None] * smm + cols[None, :] * smn, mask=inside, other=0.0).to(tl.float32)
        inside &= madd > -65504.0
        s += madd
    if MASK == 2:  # bool (uint8 view): 0 = masked out
        inside &= tl.load(mask_ptr + rows[:, None] * smm + cols[None, :] * smn, mask=inside, other=0) != 0
    if CAUSAL:
        inside &= cols[None, :] <= rows[:, None] + (N - M)
    return tl.where(inside, s, float("-inf"))


@triton.autotune(configs=CONFIGS, key=["M", "N", "K", "HAS_BIAS", "MASK", "CAUSAL", "ONE_K", "BLOCK_K"])
@triton.jit
def _fused_kernel(A, B, Bias, Mask, P, M, N, K, H, scale,
                  sa0, sa1, sam, sak, sb0, sb1, sbn, sbk, sx0, sx1, sxm, sxn, sm0, sm1, smm, smn, sp0, sp1, spm, spn,
                  HAS_BIAS: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr, ONE_K: tl.constexpr,
                  BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, pid_b = tl.program_id(0), tl.program_id(1).to(tl.int64)
    i0, i1 = pid_b // H, pid_b % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    a_ptr = A + i0 * sa0 + i1 * sa1 + rows[:, None] * sam  # [BLOCK_M, 1]; _scores adds the k offsets
    b_ptr = B + i0 * sb0 + i1 * sb1
    x_ptr, m_ptr = Bias + i0 * sx0 + i1 * sx1, Mask + i0 * sm0 + i1 * sm1
    a_tile = tl.zeros((BLOCK_M, BLOCK_K), A.dtype.element_ty)
    if ONE_K:  # the block's rows of A, loaded once for both sweeps
        ks = tl.arange(0, BLOCK_K)
        a_tile = tl.load(a_ptr + ks[None, :] * sak, mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    for n0 in range(0, N, BLOCK_N):  # pass 1: online max and sum
        cols = n0 + tl.arange(0, BLOCK_N)
        s = _scores(a_tile, a_ptr, b_ptr, x_ptr, m_ptr, rows, cols, M, N, K, scale, sak, sbn, sbk, sxm, sxn, smm, smn,
                    HAS_BIAS, MASK, CAUSAL, ONE_K, BLOCK_M, BLOCK_N, BLOCK_K)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: exp(-inf - 0) = 0, no NaN
        l_i = l_i * tl.exp(m_i - m_safe) + tl.sum(tl.exp(s - m_safe[:, None]), 1)
        m_i = m_new
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    inv_l = tl.where(l_i > 0, 1.0 / l_i, 0.0)  # fully masked row -> zeros
    p_ptr = P + i0 * sp0 + i1 * sp1 + rows[:, None] * spm
    for n0 in range(0, N, BLOCK_N):  # pass 2: recompute, normalize, write P once
        cols = n0 + tl.arange(0, BLOCK_N)
        s = _scores(a_tile, a_ptr, b_ptr, x_ptr, m_ptr, rows, cols, M, N, K, scale, sak, sbn, sbk, sxm, sxn, smm, smn,
                    HAS_BIAS, MASK, CAUSAL, ONE_K, BLOCK_M, BLOCK_N, BLOCK_K)
        p = tl.exp(s - m_safe[:, None]) * inv_l[:, None]
        tl.store(p_ptr + cols[None, :] * spn, p.to(P.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def _four(t, shape, strides):
    return t.as_strided(shape, strides) if t.dim() else t.reshape(1).as_strided(shape, strides)


def prepare(wl):
    """prepare(feeds) -> zero-argument callable writing P (torch CUDA tensors, as benchmarks.peers.torch_inputs
    makes them). Broadcast bias/mask dims are passed as zero strides (the canonical 4-D form of the workload)."""
    c = wl.canonical

    def bind(feeds):
        a = _four(feeds["A"], (c.b0, c.b1, c.m, c.k), c.a_strides)
        b = _four(feeds["B"], (c.b0, c.b1, *((c.n, c.k) if wl.trans_b else (c.k, c.n))), c.b_strides)
        sbn, sbk = (b.stride(2), b.stride(3)) if wl.trans_b else (b.stride(3), b.stride(2))
        p = torch.empty(c.out_shape, dtype=feeds["A"].dtype, device=feeds["A"].device)
        p4 = p.view(c.b0, c.b1, c.m, c.n)
        bias = _four(feeds["bias"], (c.b0, c.b1, c.m, c.n), c.bias_strides) if "bias" in feeds else p4
        mask, mask_kind = p4, 0
        if "mask" in feeds:
            raw = feeds["mask"].view(torch.uint8) if feeds["mask"].dtype == torch.bool else feeds["mask"]
            mask, mask_kind = _four(raw, (c.b0, c.b1, c.m, c.n), c.mask_strides), (2 if raw.dtype == torch.uint8 else 1)
        block_k = max(16, min(64, triton.next_power_of_2(c.k)))
        grid = lambda meta: (triton.cdiv(c.m, meta["BLOCK_M"]), c.b0 * c.b1)  # noqa: E731

        def run():
            _fused_kernel[grid](a, b, bias, mask, p4, c.m, c.n, c.k, c.b1, float(wl.scale),
                                *a.stride(), b.stride(0), b.stride(1), sbn, sbk, *bias.stride(), *mask.stride(),
                                *p4.stride(), HAS_BIAS="bias" in feeds, MASK=mask_kind, CAUSAL=bool(wl.causal),
                                ONE_K=c.k <= block_k, BLOCK_K=block_k)
            return p
        return run
    return bind
