// Hand-written probes of the register design at W3 (Whisper encoder scores, 160 x 1500 x 1500 x 64, fp16, scale
// 0.125): S never leaves the mma accumulators, one pass, B (all 1500 rows, padded to 1536) resident in shared memory.
//   block = 12 warps; warp w owns columns [128w, 128w + 128) of every row tile (16 mma n8 tiles);
//   row tile = 32 rows (two m16 tiles): 128 fp32 accumulators a lane;
//   persistent: one block an SM walks a contiguous range of (head, row tile) items, B reloaded when the head changes,
//   A of the next item prefetched by cp.async while this one runs;
//   P stored from the accumulators, exchanged within the quad so each lane stores 8 bytes (whole 32-byte sectors),
//   with the streaming hint (__stcs).
// Columns 1500..1535 (the last warp's padding) are set to -inf after the GEMM, so max, sum and P need no guard but
// the store's.
// kernel:             the statistics as the TVM register sketches compute them: row max across the block (quad
//                     shuffles, shared memory, barrier), then exp and row sum (the same, barrier), then P; three
//                     barriers a tile.
// kernel_one_barrier: each warp's own row max and sum of exp(x - own max), exchanged once (FlashAttention's
//                     combine: m = max m_w, sum = sum_w s_w exp(m_w - m)); P = e * exp(m_w - m) / sum. One barrier
//                     a tile, the A-ready wait folded into it; A and the statistics double-buffered.
#include <cuda_fp16.h>
#include <cstdint>

namespace w3probe {
constexpr int M = 1500, N = 1500, K = 64, NP = 1536, WARPS = 12, BM = 32, TILES = (M + BM - 1) / BM;
constexpr int B_BYTES = NP * K * 2, A_BYTES = BM * K * 2;
constexpr int SMEM = B_BYTES + 2 * A_BYTES + 4 * BM * WARPS * 4;
constexpr float C = 0.125f * 1.4426950408889634f;  // scale (> 0, a constant) times log2(e)

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// row r of a [rows][64] fp16 tile, 16-byte chunk c: chunks swizzled by the row's low 3 bits (bank-conflict free)
__device__ __forceinline__ int swz(int r, int c) { return r * 64 + ((c ^ (r & 7)) << 3); }
// B's tile with PERM (gemm): one 8x8 ldmatrix reads rows {0,1,4,5,8,9,12,13} (+2) of a 16-row group, so the key is
// bits 0, 2 and 3 of the row
template <bool PERM>
__device__ __forceinline__ int swz_b(int r, int c) {
  return PERM ? r * 64 + ((c ^ ((r & 1) | ((r >> 1) & 2) | ((r >> 1) & 4))) << 3) : swz(r, c);
}
__device__ __forceinline__ void cp16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void ldsm4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void load_a(half* sA, const half* A, int item, int tid) {
  if (tid < BM * 8) {
    int h = item / TILES, r = (item % TILES) * BM + (tid >> 3), ch = tid & 7;
    bool ok = r < M;
    cp16(sA + swz(tid >> 3, ch), A + ((size_t)h * M + (ok ? r : 0)) * K + ch * 8, ok);
  }
  commit();
}
template <bool PERM = false>
__device__ __forceinline__ void load_b(half* sB, const half* B, int h, int tid) {  // rows >= N zero-filled
  for (int i = tid; i < NP * 8; i += WARPS * 32) {
    int r = i >> 3, ch = i & 7;
    bool ok = r < N;
    cp16(sB + swz_b<PERM>(r, ch), B + ((size_t)h * N + (ok ? r : 0)) * K + ch * 8, ok);
  }
  commit();
}
// S = A_tile B^T for FM m16 tiles x this warp's FN n8 tiles from column col0; padded columns -inf
// PERM: the pair of n8 tiles np computes the 16 columns in the order that leaves lane q of a quad holding columns
// 4q..4q+3 (tile 2np: 4q, 4q+1; tile 2np+1: 4q+2, 4q+3) instead of 2q, 2q+1 and 8+2q, 9+2q: ldmatrix reads B's rows
// in that order, so P needs no exchange between lanes for 8-byte stores. Row max and sum do not care about the order.
template <int FM, int FN, bool PERM = false>
__device__ __forceinline__ void gemm(float (&s)[FM][FN][4], const half* a_tile, const half* sB, int col0, int lane) {
#pragma unroll
  for (int mt = 0; mt < FM; ++mt)
#pragma unroll
    for (int nt = 0; nt < FN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t af[FM][4];
#pragma unroll
    for (int mt = 0; mt < FM; ++mt) ldsm4(af[mt], a_tile + swz(mt * 16 + (lane & 15), ks * 2 + (lane >> 4)));
#pragma unroll
    for (int np = 0; np < FN / 2; ++np) {  // two n8 tiles: matrices (n 0-7, k lo), (n 0-7, k hi), (n 8-15, k lo), (n 8-15, k hi)
      uint32_t bf[4];
      const int t = lane >> 4, c = lane & 7;  // matrix row c of tile t
      const int n = PERM ? 4 * (c >> 1) + 2 * t + (c & 1) : 8 * t + c;
      ldsm4(bf, sB + swz_b<PERM>(col0 + np * 16 + n, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < FM; ++mt) {
        mma(s[mt][2 * np], af[mt], bf[0], bf[1]);
        mma(s[mt][2 * np + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
  if (col0 + FN * 8 > N) {
#pragma unroll
    for (int nt = 0; nt < FN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (col0 + (nt >> 1) * 16 + (PERM ? 4 * (lane & 3) + 2 * (nt & 1) : 8 * (nt & 1) + 2 * (lane & 3)) + (e & 1) >= N)
#pragma unroll
          for (int mt = 0; mt < FM; ++mt) s[mt][nt][e] = -INFINITY;
  }
}
// P[row, this warp's columns] = e * f, 8 bytes a lane (the quad's 16 columns exchanged).
// Every lane of the warp calls it (the quad shuffles), valid or not: only the store is guarded.
template <int FM, int FN, bool PERM = false>
__device__ __forceinline__ void store_row(half* prow, bool valid, const float (&s)[FM][FN][4], int mt, int hi, float f,
                                          int col0, int lane) {
  const int q = lane & 3;
#pragma unroll
  for (int np = 0; np < FN / 2; ++np) {
    if (PERM) {  // this lane's four columns are 4q..4q+3 already
      __half2 h0 = __floats2half2_rn(s[mt][2 * np][2 * hi] * f, s[mt][2 * np][2 * hi + 1] * f);
      __half2 h1 = __floats2half2_rn(s[mt][2 * np + 1][2 * hi] * f, s[mt][2 * np + 1][2 * hi + 1] * f);
      int col = col0 + np * 16 + 4 * q;
      if (valid && col < N) __stcs((uint2*)(prow + col), make_uint2(*(uint32_t*)&h0, *(uint32_t*)&h1));
      continue;
    }
    __half2 h0 = __floats2half2_rn(s[mt][2 * np][2 * hi] * f, s[mt][2 * np][2 * hi + 1] * f);
    __half2 h1 = __floats2half2_rn(s[mt][2 * np + 1][2 * hi] * f, s[mt][2 * np + 1][2 * hi + 1] * f);
    uint32_t u0 = *(uint32_t*)&h0, u1 = *(uint32_t*)&h1;
    // lane q stores columns 4q..4q+3 of the 16: held by lanes 2q, 2q+1 (mod 4), tile 2np for q < 2 else 2np+1
    int src0 = (lane & ~3) | ((2 * q) & 3), src1 = (lane & ~3) | ((2 * q + 1) & 3);
    uint32_t a0 = __shfl_sync(0xffffffffu, u0, src0), a1 = __shfl_sync(0xffffffffu, u1, src0);
    uint32_t b0 = __shfl_sync(0xffffffffu, u0, src1), b1 = __shfl_sync(0xffffffffu, u1, src1);
    uint2 v = q < 2 ? make_uint2(a0, b0) : make_uint2(a1, b1);
    int col = col0 + np * 16 + 4 * q;
    if (valid && col < N) __stcs((uint2*)(prow + col), v);
  }
}
__device__ __forceinline__ float max12(const float* p) {
  float4 x = ((const float4*)p)[0], y = ((const float4*)p)[1], z = ((const float4*)p)[2];
  return fmaxf(fmaxf(fmaxf(fmaxf(x.x, x.y), fmaxf(x.z, x.w)), fmaxf(fmaxf(y.x, y.y), fmaxf(y.z, y.w))),
               fmaxf(fmaxf(z.x, z.y), fmaxf(z.z, z.w)));
}
__device__ __forceinline__ float sum12(const float* p) {
  float4 x = ((const float4*)p)[0], y = ((const float4*)p)[1], z = ((const float4*)p)[2];
  return ((x.x + x.y) + (x.z + x.w)) + ((y.x + y.y) + (y.z + y.w)) + ((z.x + z.y) + (z.z + z.w));
}
__device__ __forceinline__ float quad_max(float m) {
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  return fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__global__ void __launch_bounds__(WARPS * 32, 1) kernel(const half* __restrict__ A, const half* __restrict__ B,
                                                        half* __restrict__ P, int heads) {
  extern __shared__ __align__(128) uint8_t smem[];
  half* sB = (half*)smem;
  half* sA = (half*)(smem + B_BYTES);
  float* sMax = (float*)(smem + B_BYTES + 2 * A_BYTES);
  float* sSum = sMax + BM * WARPS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int items = heads * TILES;
  const int first = (int)((long long)blockIdx.x * items / gridDim.x), last = (int)((long long)(blockIdx.x + 1) * items / gridDim.x);
  int head = -1;
  if (first < last) load_a(sA, A, first, tid);
  for (int item = first, buf = 0; item < last; ++item, buf ^= 1) {
    const int h = item / TILES, row0 = (item % TILES) * BM;
    if (h != head) { __syncthreads(); load_b(sB, B, h, tid); head = h; }
    if (item + 1 < last) { load_a(sA + (buf ^ 1) * BM * K, A, item + 1, tid); asm volatile("cp.async.wait_group 1;\n" ::); }
    else asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    float s[2][16][4];
    gemm(s, sA + buf * BM * K, sB, warp * 128, lane);
    // this lane's rows: mt*16 + (lane>>2) + 8*hi
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        float m = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) m = fmaxf(m, fmaxf(s[mt][nt][2 * hi], s[mt][nt][2 * hi + 1]));
        m = quad_max(m);
        if ((lane & 3) == 0) sMax[(mt * 16 + (lane >> 2) + 8 * hi) * WARPS + warp] = m;
      }
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const float mc = max12(sMax + (mt * 16 + (lane >> 2) + 8 * hi) * WARPS) * C;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float v = exp2f(fmaf(s[mt][nt][2 * hi + e], C, -mc));
            s[mt][nt][2 * hi + e] = v;
            sum += v;
          }
        sum = quad_sum(sum);
        if ((lane & 3) == 0) sSum[(mt * 16 + (lane >> 2) + 8 * hi) * WARPS + warp] = sum;
      }
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        int r = mt * 16 + (lane >> 2) + 8 * hi;
        store_row(P + ((size_t)h * M + row0 + r) * N, row0 + r < M, s, mt, hi, 1.f / sum12(sSum + r * WARPS), warp * 128, lane);
      }
  }
}

// Ablations (timing only, the result is not P): store_p = 0 skips P's stores (what the GEMM and the softmax cost
// without the writes); exp_p = 0 replaces exp2 by its argument (what the MUFU exps cost).
template <bool PERM>
__global__ void __launch_bounds__(WARPS * 32, 1) kernel_one_barrier(const half* __restrict__ A, const half* __restrict__ B,
                                                                    half* __restrict__ P, int heads, int store_p = 1, int exp_p = 1) {
  extern __shared__ __align__(128) uint8_t smem[];
  half* sB = (half*)smem;
  half* sA = (half*)(smem + B_BYTES);
  float* sMax = (float*)(smem + B_BYTES + 2 * A_BYTES);  // [2][BM][WARPS], then sSum the same
  float* sSum = sMax + 2 * BM * WARPS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
  const int items = heads * TILES;
  const int first = (int)((long long)blockIdx.x * items / gridDim.x), last = (int)((long long)(blockIdx.x + 1) * items / gridDim.x);
  if (first >= last) return;
  int head = first / TILES;
  load_b<PERM>(sB, B, head, tid);
  load_a(sA, A, first, tid);
  if (first + 1 < last) load_a(sA + BM * K, A, first + 1, tid);
  asm volatile("cp.async.wait_group 1;\n" ::);
  __syncthreads();
  for (int item = first, buf = 0; item < last; ++item, buf ^= 1) {
    const int h = item / TILES, row0 = (item % TILES) * BM;
    if (h != head) {  // a new head: B again (rare: once or twice a block); everything in flight lands first
      asm volatile("cp.async.wait_group 0;\n" ::);
      __syncthreads();
      load_b<PERM>(sB, B, h, tid);
      asm volatile("cp.async.wait_group 0;\n" ::);
      __syncthreads();
      head = h;
    }
    float s[2][16][4];
    gemm<2, 16, PERM>(s, sA + buf * BM * K, sB, warp * 128, lane);
    float* xm = sMax + buf * BM * WARPS;
    float* xs = sSum + buf * BM * WARPS;
    float mw[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        float m = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) m = fmaxf(m, fmaxf(s[mt][nt][2 * hi], s[mt][nt][2 * hi + 1]));
        m = quad_max(m) * C;  // the warp's max of this row (-inf: all its columns padded)
        const float mu = m == -INFINITY ? 0.f : m;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float x = fmaf(s[mt][nt][2 * hi + e], C, -mu);
            float v = exp_p ? exp2f(x) : x;
            s[mt][nt][2 * hi + e] = v;
            sum += v;
          }
        sum = quad_sum(sum);
        mw[mt][hi] = m;
        if ((lane & 3) == 0) { int r = mt * 16 + (lane >> 2) + 8 * hi; xm[r * WARPS + warp] = m; xs[r * WARPS + warp] = sum; }
      }
    asm volatile("cp.async.wait_group 0;\n" ::);  // A of the next item (this thread's copies)
    __syncthreads();                               // ... everyone's, and the statistics
    if (item + 2 < last) load_a(sA + buf * BM * K, A, item + 2, tid);  // this buffer is free: every warp's GEMM is done
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        int r = mt * 16 + (lane >> 2) + 8 * hi;
        const float m = max12(xm + r * WARPS);
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += xs[r * WARPS + w] * exp2f(xm[r * WARPS + w] - m);
        const float f = mw[mt][hi] == -INFINITY ? 0.f : exp2f(mw[mt][hi] - m) / sum;
        store_row<2, 16, PERM>(P + ((size_t)h * M + row0 + r) * N, store_p && row0 + r < M, s, mt, hi, f, warp * 128, lane);
      }
  }
}

// kernel_two_groups: two groups of 6 warps, each its own 16-row tiles (the block's tiles alternately), its own A
// buffers, statistics and named barrier, so one group's P stores overlap the other's GEMM; warp gw of a group owns
// columns [256 gw, 256 gw + 256) (32 n8 tiles, 128 accumulators a lane). One block (a slice of one head's row
// tiles) an SM; grid (splits, heads).
constexpr int GW = 6, GBM = 16, GTILES = (M + GBM - 1) / GBM, GA = GBM * K;
constexpr int G_SMEM = B_BYTES + 2 * 2 * GA * 2 + 2 * 2 * 2 * GBM * GW * 4;
__device__ __forceinline__ void load_a16(half* sA, const half* A, int h, int tile, int gtid) {
  if (gtid < GBM * 8) {
    int r = tile * GBM + (gtid >> 3), ch = gtid & 7;
    bool ok = r < M;
    cp16(sA + swz(gtid >> 3, ch), A + ((size_t)h * M + (ok ? r : 0)) * K + ch * 8, ok);
  }
  commit();
}
__global__ void __launch_bounds__(2 * GW * 32, 1) kernel_two_groups(const half* __restrict__ A, const half* __restrict__ B,
                                                                    half* __restrict__ P) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp / GW, gw = warp % GW, gtid = threadIdx.x - g * GW * 32;
  const int h = blockIdx.y, t0 = blockIdx.x * GTILES / gridDim.x, t1 = (blockIdx.x + 1) * GTILES / gridDim.x;
  half* sB = (half*)smem;
  half* sA = (half*)(smem + B_BYTES) + g * 2 * GA;
  float* sMax = (float*)(smem + B_BYTES + 2 * 2 * GA * 2) + g * 2 * 2 * GBM * GW;  // [2 bufs][GBM][GW], then sums
  float* sSum = sMax + 2 * GBM * GW;
  load_b(sB, B, h, threadIdx.x);
  const int first = t0 + g;
  if (first < t1) load_a16(sA, A, h, first, gtid); else commit();
  if (first + 2 < t1) load_a16(sA + GA, A, h, first + 2, gtid); else commit();
  asm volatile("cp.async.wait_group 1;\n" ::);
  __syncthreads();
  for (int t = first, buf = 0; t < t1; t += 2, buf ^= 1) {
    float s[1][32][4];
    const int col0 = gw * 256;
    gemm(s, sA + buf * GA, sB, col0, lane);
    float* xm = sMax + buf * GBM * GW;
    float* xs = sSum + buf * GBM * GW;
    float mw[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      float m = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) m = fmaxf(m, fmaxf(s[0][nt][2 * hi], s[0][nt][2 * hi + 1]));
      m = quad_max(m) * C;
      const float mu = m == -INFINITY ? 0.f : m;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = exp2f(fmaf(s[0][nt][2 * hi + e], C, -mu));
          s[0][nt][2 * hi + e] = v;
          sum += v;
        }
      sum = quad_sum(sum);
      mw[hi] = m;
      if ((lane & 3) == 0) { int r = (lane >> 2) + 8 * hi; xm[r * GW + gw] = m; xs[r * GW + gw] = sum; }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);  // A of this group's next tile (this thread's copies)
    asm volatile("bar.sync %0, %1;\n" :: "r"(1 + g), "r"(GW * 32));
    if (t + 4 < t1) load_a16(sA + buf * GA, A, h, t + 4, gtid); else commit();
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      int r = (lane >> 2) + 8 * hi, row = t * GBM + r;
      float m = xm[r * GW];
#pragma unroll
      for (int w = 1; w < GW; ++w) m = fmaxf(m, xm[r * GW + w]);
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < GW; ++w) sum += xs[r * GW + w] * exp2f(xm[r * GW + w] - m);
      const float f = mw[hi] == -INFINITY ? 0.f : exp2f(mw[hi] - m) / sum;
      store_row(P + ((size_t)h * M + row) * N, row < M, s, 0, hi, f, col0, lane);
    }
  }
}
}  // namespace w3probe
