// Times the hand register-design probe (w3_register_probe.cu) against the shipped W3 fp16 scale twin's CUDA
// (w3_twin_scale.cu: TVM's source of tuning_db/sm_90/whisper-enc.f16's best record, as build.py ships it), alternating
// rounds in one process; checks both against an FP64 reference (2 heads) and each other (all heads).
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <algorithm>
#include "w3_register_probe.cu"
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
extern "C" __global__ void w3_twin_scale_kernel(half* __restrict__, half* __restrict__, half* __restrict__, int, int, int, int);
int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int rounds = argc > 1 ? atoi(argv[1]) : 7;
  cudaDeviceProp pr; cudaGetDeviceProperties(&pr, 0); printf("%s, %d SMs\n", pr.name, pr.multiProcessorCount);
  const int H = 160, M = 1500, N = 1500, K = 64;
  std::vector<half> hQ((size_t)H * M * K), hK((size_t)H * N * K);
  srand(1); for (auto& x : hQ) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4); for (auto& x : hK) x = __float2half((rand() / (float)RAND_MAX - 0.5f) * 4);
  const int refh[2] = {0, H - 1}; std::vector<float> ref((size_t)2 * M * N);
  for (int t = 0; t < 2; ++t) for (int i = 0; i < M; ++i) {
    int b = refh[t]; std::vector<double> s(N); double mx = -1e300;
    for (int j = 0; j < N; ++j) { double acc = 0; for (int k = 0; k < K; ++k) acc += (double)__half2float(hQ[((size_t)b * M + i) * K + k]) * __half2float(hK[((size_t)b * N + j) * K + k]); s[j] = acc * 0.125; mx = fmax(mx, s[j]); }
    double sum = 0; for (int j = 0; j < N; ++j) { s[j] = exp(s[j] - mx); sum += s[j]; }
    for (int j = 0; j < N; ++j) ref[((size_t)t * M + i) * N + j] = (float)(s[j] / sum);
  }
  half *dQ, *dK, *dP; size_t np = (size_t)H * M * N;
  CK(cudaMalloc(&dQ, hQ.size() * 2)); CK(cudaMalloc(&dK, hK.size() * 2)); CK(cudaMalloc(&dP, np * 2));
  CK(cudaMemcpy(dQ, hQ.data(), hQ.size() * 2, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dK, hK.data(), hK.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(w3_twin_scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 37376));
  CK(cudaFuncSetAttribute(w3probe::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, w3probe::SMEM));
  CK(cudaFuncSetAttribute(w3probe::kernel_two_groups, cudaFuncAttributeMaxDynamicSharedMemorySize, w3probe::G_SMEM));
  int splits = argc > 2 ? atoi(argv[2]) : 4;
  CK(cudaFuncSetAttribute(w3probe::kernel_one_barrier<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, w3probe::SMEM));
  CK(cudaFuncSetAttribute(w3probe::kernel_one_barrier<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, w3probe::SMEM));
  int sms = pr.multiProcessorCount;
  auto run = [&](int v) {
    if (v == 0) w3_twin_scale_kernel<<<3840, dim3(32, 2, 2), 37376>>>(dQ, dK, dP, M * K, H, N * K, 0);
    else if (v == 1) w3probe::kernel<<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H);
    else if (v == 2) w3probe::kernel_one_barrier<false><<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H);
    else if (v == 4) w3probe::kernel_one_barrier<false><<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H, 0);
    else if (v == 5) w3probe::kernel_one_barrier<true><<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H);
    else if (v == 6) w3probe::kernel_one_barrier<false><<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H, 1, 0);
    else if (v == 7) w3probe::kernel_one_barrier<false><<<sms, w3probe::WARPS * 32, w3probe::SMEM>>>(dQ, dK, dP, H, 0, 0);
    else w3probe::kernel_two_groups<<<dim3(splits, H), 2 * w3probe::GW * 32, w3probe::G_SMEM>>>(dQ, dK, dP);
  };
  const int NV = 8;
  const char* names[NV] = {"TVM scale twin (shipped)", "hand: three barriers", "hand: one barrier", "hand: two warp groups", "one barrier, no P stores", "one barrier, B rows permuted", "one barrier, no exp", "one barrier, no exp, no P"};
  std::vector<half> p0(np), pv(np);
  std::vector<std::vector<float>> ts(NV);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int round = 0; round < rounds; ++round)
    for (int v = 0; v < NV; ++v) {
      if (round == 0) {
        CK(cudaMemset(dP, 0xff, np * 2)); run(v); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(pv.data(), dP, np * 2, cudaMemcpyDeviceToHost));
        if (v == 0) p0 = pv;
        if (v == 4 || v >= 6) { printf("%-30s (writes nothing: not checked)\n", names[v]); for (int w = 0; w < 5; ++w) run(v); continue; }
        double err = 0, d0 = 0;
        for (int t = 0; t < 2; ++t) for (size_t k = 0; k < (size_t)M * N; ++k)
          err = fmax(err, fabs((double)__half2float(pv[(size_t)refh[t] * M * N + k]) - ref[(size_t)t * M * N + k]));
        size_t bad = 0; for (size_t k = 0; k < np; ++k) { double d = fabs((double)__half2float(pv[k]) - __half2float(p0[k])); if (!(d <= 1e-2)) ++bad; else d0 = fmax(d0, d); }
        cudaFuncAttributes at; CK(cudaFuncGetAttributes(&at, v == 0 ? (const void*)w3_twin_scale_kernel : v == 1 ? (const void*)w3probe::kernel : v == 2 || v == 4 || v >= 6 ? (const void*)w3probe::kernel_one_barrier<false> : v == 5 ? (const void*)w3probe::kernel_one_barrier<true> : (const void*)w3probe::kernel_two_groups));
        printf("%-30s max|P - P_fp64| %.2e (2 heads)  max|P - P_twin| %.2e, %zu elements off (all heads)  regs %d spill %zu\n",
               names[v], err, d0, bad, at.numRegs, (size_t)at.localSizeBytes);
        for (int w = 0; w < 5; ++w) run(v);
      }
      cudaEventRecord(a); for (int w = 0; w < 10; ++w) run(v); cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); ts[v].push_back(ms * 1000 / 10);
    }
  for (int v = 0; v < NV; ++v) { auto t = ts[v]; std::sort(t.begin(), t.end()); printf("%-30s median %.1f us  [", names[v], (t.empty() ? 0.f : t[t.size() / 2])); for (float x : ts[v]) printf(" %.1f", x); printf(" ]\n"); }
}
