// Times the W1 variants of make_w1_one_exchange.py (one binary, alternating rounds); checks each against an FP64 reference.
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
extern "C" __global__ void w1_t0_kernel(half* __restrict__, half* __restrict__, half* __restrict__, int);
#define DECL(n) extern "C" __global__ void n(half* __restrict__, half* __restrict__, half* __restrict__, int, int, int, int);
DECL(w1_v0_kernel) DECL(w1_v1_kernel)
typedef void (*KF)(half*, half*, half*, int, int, int, int);
const int BH = 256, M = 512, N = 512, K = 64; const size_t SM = 82944; const int GRID = 256;
static void launch(int i, KF f, half* q, half* k, half* p) {
  if (i == 0) w1_t0_kernel<<<GRID, dim3(32, 4), SM>>>(q, k, p, 0);
  else f<<<GRID, dim3(32, 4), SM>>>(q, k, p, M * K, BH, N * K, 0);
}
int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  cudaDeviceProp pr; cudaGetDeviceProperties(&pr, 0); printf("%s\n", pr.name);
  std::vector<half> hQ((size_t)BH * M * K), hK((size_t)BH * N * K);
  srand(1); for (auto& x : hQ) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4); for (auto& x : hK) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4);
  int cb = 2; std::vector<float> ref((size_t)cb * M * N);
  for (int b = 0; b < cb; ++b) for (int i = 0; i < M; ++i) {
    std::vector<double> s(N); double mx = -1e300;
    for (int j = 0; j < N; ++j) { double acc = 0; for (int k = 0; k < K; ++k) acc += (double)__half2float(hQ[((size_t)b * M + i) * K + k]) * __half2float(hK[((size_t)b * N + j) * K + k]); s[j] = acc * 0.125; mx = fmax(mx, s[j]); }
    double sum = 0; for (int j = 0; j < N; ++j) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int j = 0; j < N; ++j) ref[((size_t)b * M + i) * N + j] = (float)(s[j] / sum);
  }
  half *dQ, *dK, *dP; CK(cudaMalloc(&dQ, hQ.size() * 2)); CK(cudaMalloc(&dK, hK.size() * 2)); CK(cudaMalloc(&dP, (size_t)BH * M * N * 2));
  CK(cudaMemcpy(dQ, hQ.data(), hQ.size() * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dK, hK.data(), hK.size() * 2, cudaMemcpyHostToDevice));
  struct V { const char* n; KF f; } vs[] = {{"t0 tuning form", nullptr}, {"v0 twin_scale (shipped)", w1_v0_kernel},
    {"v1 v0, one exchange", w1_v1_kernel}};
  const int NV = sizeof(vs) / sizeof(vs[0]);
  CK(cudaFuncSetAttribute(w1_t0_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SM));
  for (int i = 1; i < NV; ++i) CK(cudaFuncSetAttribute(vs[i].f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SM));
  std::vector<half> p0((size_t)BH * M * N), pv((size_t)BH * M * N);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  std::vector<std::vector<float>> ts(NV);
  for (int round = 0; round < rounds; ++round)
    for (int i = 0; i < NV; ++i) {
      if (round == 0) {
        CK(cudaMemset(dP, 0, (size_t)BH * M * N * 2));
        launch(i, vs[i].f, dQ, dK, dP); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(pv.data(), dP, pv.size() * 2, cudaMemcpyDeviceToHost));
        if (i == 0) p0 = pv;
        double err = 0, d0 = 0; for (size_t k = 0; k < (size_t)cb * M * N; ++k) err = fmax(err, fabs((double)__half2float(pv[k]) - ref[k]));
        for (size_t k = 0; k < pv.size(); ++k) d0 = fmax(d0, fabs((double)__half2float(pv[k]) - __half2float(p0[k])));
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, i == 0 ? (const void*)w1_t0_kernel : (const void*)vs[i].f));
        printf("%-24s err %.2e  max|P - P_v0| %.2e  regs %d\n", vs[i].n, err, d0, at.numRegs);
        for (int w = 0; w < 10; ++w) launch(i, vs[i].f, dQ, dK, dP);
      }
      cudaEventRecord(a); for (int w = 0; w < 50; ++w) launch(i, vs[i].f, dQ, dK, dP); cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); ts[i].push_back(ms * 1000 / 50);
    }
  for (int i = 0; i < NV; ++i) { auto t = ts[i]; std::sort(t.begin(), t.end()); printf("%-24s median %.2f us  [", vs[i].n, t[t.size() / 2]); for (float x : ts[i]) printf(" %.1f", x); printf(" ]\n"); }
}
