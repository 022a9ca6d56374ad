// W2 probe (session 46): the shipped tuning-form kernel (v0) against the same kernel with B's loads into shared memory
// removed (v1: wrong P, timing only), to bound what keeping B resident across row tiles could save.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
#define DECL(n) extern "C" __global__ void n(half* __restrict__, half* __restrict__, half* __restrict__, int);
DECL(w2_v0_kernel) DECL(w2_v1_kernel)
typedef void (*KF)(half*, half*, half*, int);
const int BH = 192, M = 197, N = 197, K = 64; const size_t SM = 43520; const int GRID = 2688;
int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  cudaDeviceProp pr; cudaGetDeviceProperties(&pr, 0); int drv; cudaDriverGetVersion(&drv); printf("%s driver API %d\n", pr.name, drv);
  std::vector<half> hQ((size_t)BH * M * K), hK((size_t)BH * N * K);
  srand(1); for (auto& x : hQ) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4); for (auto& x : hK) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4);
  int cb = 3; std::vector<float> ref((size_t)cb * M * N);
  for (int b = 0; b < cb; ++b) for (int i = 0; i < M; ++i) {
    std::vector<double> s(N); double mx = -1e300;
    for (int j = 0; j < N; ++j) { double acc = 0; for (int k = 0; k < K; ++k) acc += (double)__half2float(hQ[((size_t)b * M + i) * K + k]) * __half2float(hK[((size_t)b * N + j) * K + k]); s[j] = acc * 0.125; mx = fmax(mx, s[j]); }
    double sum = 0; for (int j = 0; j < N; ++j) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int j = 0; j < N; ++j) ref[((size_t)b * M + i) * N + j] = (float)(s[j] / sum);
  }
  half *dQ, *dK, *dP; CK(cudaMalloc(&dQ, hQ.size() * 2)); CK(cudaMalloc(&dK, hK.size() * 2)); CK(cudaMalloc(&dP, (size_t)BH * M * N * 2));
  CK(cudaMemcpy(dQ, hQ.data(), hQ.size() * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dK, hK.data(), hK.size() * 2, cudaMemcpyHostToDevice));
  struct V { const char* n; KF f; } vs[] = {{"v0 shipped tuning form", w2_v0_kernel}, {"v1 without B's loads", w2_v1_kernel}};
  const int NV = 2;
  for (int i = 0; i < NV; ++i) CK(cudaFuncSetAttribute(vs[i].f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SM));
  std::vector<half> pv((size_t)BH * M * N);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<std::vector<float>> ts(NV);
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < NV; ++i) {
      if (round == 0) {
        CK(cudaMemset(dP, 0, (size_t)BH * M * N * 2));
        vs[i].f<<<GRID, dim3(32, 16), SM>>>(dQ, dK, dP, 0); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(pv.data(), dP, pv.size() * 2, cudaMemcpyDeviceToHost));
        double err = 0; for (size_t k = 0; k < (size_t)cb * M * N; ++k) err = fmax(err, fabs((double)__half2float(pv[k]) - ref[k]));
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, (const void*)vs[i].f));
        printf("%-26s err vs FP64 %.2e  regs %d\n", vs[i].n, err, at.numRegs);
        for (int w = 0; w < 10; ++w) vs[i].f<<<GRID, dim3(32, 16), SM>>>(dQ, dK, dP, 0);
      }
      cudaEventRecord(a); for (int w = 0; w < 50; ++w) vs[i].f<<<GRID, dim3(32, 16), SM>>>(dQ, dK, dP, 0); cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); ts[i].push_back(ms * 1000 / 50);
    }
  for (int i = 0; i < NV; ++i) { auto t = ts[i]; std::sort(t.begin(), t.end()); printf("%-26s median %.2f us  [", vs[i].n, t[t.size() / 2]); for (float x : ts[i]) printf(" %.1f", x); printf(" ]\n"); }
}
