
#ifdef __CUDACC_RTC__
  #include <cuda/std/cstdint>
  using cuda::std::uint8_t;
  using cuda::std::uint16_t;
  using cuda::std::uint32_t;
  using cuda::std::uint64_t;
  using cuda::std::int8_t;
  using cuda::std::int16_t;
  using cuda::std::int32_t;
  using cuda::std::int64_t;

  #include <cuda/std/type_traits>
  namespace std {
    using cuda::std::is_same;
    using cuda::std::is_same_v;
    using cuda::std::is_integral;
    using cuda::std::is_signed;
    using cuda::std::is_unsigned;
    using cuda::std::is_floating_point;
    using cuda::std::enable_if;
    using cuda::std::conditional;
  }

  // NVRTC uses asm/volatile instead of __asm__/__volatile__ (gcc extension).
  #ifndef __asm__
  #define __asm__ asm
  #endif
  #ifndef __volatile__
  #define __volatile__ volatile
  #endif
#else
  #include <cstdint>
  #include <type_traits>
  #include <cuda.h>
#endif

#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ >= 530)
#include <cuda_fp16.h>
__device__ half max(half a, half b)
{
  return __hgt(__half(a), __half(b)) ? a : b;
}
__device__ half min(half a, half b)
{
  return __hlt(__half(a), __half(b)) ? a : b;
}
#endif // __CUDA_ARCH__ >= 530

// Pack two half values.
static inline __device__ __host__ unsigned
__pack_half2(const half x, const half y) {
  unsigned v0 = *((unsigned short *)&x);
  unsigned v1 = *((unsigned short *)&y);
  return (v1 << 16) | v0;
}

#define CUDA_UNSUPPORTED_HALF_MATH_BINARY(HALF_MATH_NAME, FP32_MATH_NAME) \
static inline __device__ __host__ half HALF_MATH_NAME(half x, half y) {   \
  float tmp_x = __half2float(x);                                          \
  float tmp_y = __half2float(y);                                          \
  float result = FP32_MATH_NAME(tmp_x, tmp_y);                            \
  return __float2half(result);                                            \
}

#define CUDA_UNSUPPORTED_HALF_MATH_UNARY(HALF_MATH_NAME, FP32_MATH_NAME) \
static inline __device__ __host__ half HALF_MATH_NAME(half x) {          \
  float tmp_x = __half2float(x);                                         \
  float result = FP32_MATH_NAME(tmp_x);                                  \
  return __float2half(result);                                           \
}

// Some fp16 math functions are not supported in cuda_fp16.h,
// so we define them here to make sure the generated CUDA code
// is valid.
#if defined(__CUDA_ARCH__)
#if (__CUDA_ARCH__ >= 530)
CUDA_UNSUPPORTED_HALF_MATH_BINARY(hpow, powf)
#if ((__CUDACC_VER_MAJOR__ < 12) || ((__CUDACC_VER_MAJOR__ == 12) && (__CUDACC_VER_MINOR__ < 8)))
CUDA_UNSUPPORTED_HALF_MATH_UNARY(htanh, tanhf)
#endif
CUDA_UNSUPPORTED_HALF_MATH_UNARY(htan, tanf)
CUDA_UNSUPPORTED_HALF_MATH_UNARY(hatan, atanf)
CUDA_UNSUPPORTED_HALF_MATH_UNARY(herf, erf)
#else
CUDA_UNSUPPORTED_HALF_MATH_UNARY(hexp, exp)
#endif
#endif

#undef CUDA_UNSUPPORTED_HALF_MATH_BINARY
#undef CUDA_UNSUPPORTED_HALF_MATH_UNARY

template <typename T, typename TVec2>
struct __align__(8) half4_bfloat164 {
  T x, y, z, w;
  __host__ __device__ half4_bfloat164() : x(T(0)), y(T(0)), z(T(0)), w(T(0)) {}
  __host__ __device__ half4_bfloat164(T x, T y, T z, T w) : x(x), y(y), z(z), w(w) {}

};

using half4 = half4_bfloat164<__half, __half2>;
__host__ __device__ half4 make_half4(__half x, __half y, __half z, __half w) {
    return half4(x, y, z, w);
}

#include <math_constants.h>

#include <mma.h>

#if (((__CUDACC_VER_MAJOR__ == 11) && (__CUDACC_VER_MINOR__ >= 4)) || \
     (__CUDACC_VER_MAJOR__ > 11))
#define TVM_ENABLE_L2_PREFETCH 1
#else
#define TVM_ENABLE_L2_PREFETCH 0
#endif

#ifdef _WIN32
  using uint = unsigned int;
  using uchar = unsigned char;
  using ushort = unsigned short;
  using int64_t = long long;
  using uint64_t = unsigned long long;
#else
  #define uint unsigned int
  #define uchar unsigned char
  #define ushort unsigned short
#endif

__forceinline__ __device__ void ptx_cp_async_legacy_pred_cg_16_2_2(void* dst, int dst_off, void* src, int src_off, int predicate) {
  uint8_t* dst_p = (uint8_t*)dst + dst_off * 2;
  uint8_t* src_p = (uint8_t*)src + src_off * 2;
  unsigned int dst_addr = __cvta_generic_to_shared(dst_p);
  __asm__ __volatile__(
    "{\n"
    " .reg .pred p;\n"
    " setp.eq.u32 p, %3, 1;\n"
    " @p cp.async.cg.shared.global [%0], [%1], %2;\n"
    " @!p st.shared.v4.u32 [%0], {%4, %4, %4, %4};\n"
    "}\n"
    :: "r"(dst_addr), "l"(src_p), "n"(16), "r"(predicate), "r"(0)
  );
}

__forceinline__ __device__ void ptx_cp_async_legacy_cg_16_2_2(void* dst, int dst_off, void* src, int src_off) {
  uint8_t* dst_p = (uint8_t*)dst + dst_off * 2;
  uint8_t* src_p = (uint8_t*)src + src_off * 2;
  unsigned int dst_addr = __cvta_generic_to_shared(dst_p);
  asm volatile("cp.async.cg.shared.global [%0], [%1], %2;"
    :: "r"(dst_addr), "l"(src_p), "n"(16));
}
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1() {
  asm volatile("cp.async.wait_group 1;" :  :  : "memory");
}

__forceinline__ __device__ void ptx_cp_async_legacy_pred_ca_8_2_2(void* dst, int dst_off, void* src, int src_off, int predicate) {
  uint8_t* dst_p = (uint8_t*)dst + dst_off * 2;
  uint8_t* src_p = (uint8_t*)src + src_off * 2;
  unsigned int dst_addr = __cvta_generic_to_shared(dst_p);
  __asm__ __volatile__(
    "{\n"
    " .reg .pred p;\n"
    " setp.eq.u32 p, %3, 1;\n"
    " @p cp.async.ca.shared.global [%0], [%1], %2;\n"
    " @!p st.shared.v2.u32 [%0], {%4, %4};\n"
    "}\n"
    :: "r"(dst_addr), "l"(src_p), "n"(8), "r"(predicate), "r"(0)
  );
}
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_commit_group_async_commit_group() {
  asm volatile("cp.async.commit_group;" :  : );
}
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0() {
  asm volatile("cp.async.wait_group 0;" :  :  : "memory");
}

__forceinline__ __device__ void ptx_cp_async_legacy_ca_8_2_2(void* dst, int dst_off, void* src, int src_off) {
  uint8_t* dst_p = (uint8_t*)dst + dst_off * 2;
  uint8_t* src_p = (uint8_t*)src + src_off * 2;
  unsigned int dst_addr = __cvta_generic_to_shared(dst_p);
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
    :: "r"(dst_addr), "l"(src_p), "n"(8));
}
extern "C" __global__ void __maxnreg__(96) w3_twin_scale_kernel(half* __restrict__ A_ptr, half* __restrict__ Bm_ptr, half* __restrict__ P_ptr, int A_s1, int B1, int B_s1, int elem_offset);
extern "C" __global__ void __maxnreg__(96) w3_twin_scale_kernel(half* __restrict__ A_ptr, half* __restrict__ Bm_ptr, half* __restrict__ P_ptr, int A_s1, int B1, int B_s1, int elem_offset) {
  extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];
  alignas(64) float row_max_rf_shared_dyn_local_ptr[25];
  alignas(64) half A_pad_shared_dyn_warp_ptr[64];
  alignas(64) float S_warp_ptr[32];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr[16];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_1[16];
  alignas(64) float row_max_shared_dyn_local_ptr[1];
  alignas(64) float row_sum_rf_shared_dyn_local_ptr[25];
  alignas(64) float S_sum_warp_ptr[32];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_2[16];
  alignas(64) float row_max_shared_dyn_local_ptr_1[1];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_3[16];
  alignas(64) float row_max_shared_dyn_local_ptr_2[1];
  alignas(64) float row_sum_shared_dyn_local_ptr[1];
  alignas(64) float S_p_warp_ptr[32];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_4[16];
  alignas(64) float S_p_local_ptr[2];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_5[16];
  alignas(64) float S_p_local_ptr_1[2];
  for (int ax3_1_init = 0; ax3_1_init < 2; ++ax3_1_init) {
    for (int ax3_2_init = 0; ax3_2_init < 2; ++ax3_2_init) {
      row_max_rf_shared_dyn_local_ptr[((ax3_1_init * 16) + (ax3_2_init * 8))] = -0x1.fffffep+127f/*-3.402823e+38*/;
    }
  }
  for (int ax0_ax1_fused_0 = 0; ax0_ax1_fused_0 < 32; ++ax0_ax1_fused_0) {
    half condval;
    if ((((((int)blockIdx.x) % 24) * 16) + (ax0_ax1_fused_0 >> 1)) < 375) {
      condval = A_ptr[(((((((((int)blockIdx.x) % 24) * 4096) + (ax0_ax1_fused_0 * 128)) + (((int)threadIdx.y) * 64)) + (((int)threadIdx.z) * 32)) + ((((int)blockIdx.x) / 24) * A_s1)) + ((int)threadIdx.x))];
    } else {
      condval = __float2half_rn(0x0p+0f/*0.000000e+00*/);
    }
    ((half*)buf_dyn_shmem_ptr)[(((((ax0_ax1_fused_0 * 144) + (((int)threadIdx.y) * 72)) + (((int)threadIdx.z) * 32)) + ((int)threadIdx.x)) + 256)] = condval;
  }
  __syncthreads();
  for (int ax2_1_0 = 0; ax2_1_0 < 2; ++ax2_1_0) {
    for (int ax3_0 = 0; ax3_0 < 4; ++ax3_0) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((int)threadIdx.y) * 2304) + (ax2_1_0 * 1152)) + (ax3_0 * 16)) + 256)])) + (((((int)threadIdx.x) & 15) * 72) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_1_0 * 32) + (ax3_0 * 8))))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_1_0 * 32) + (ax3_0 * 8))))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_1_0 * 32) + (ax3_0 * 8))))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_1_0 * 32) + (ax3_0 * 8))))[3])
      : "r"(addr)
    );
  }
    }
  }
  __syncthreads();
  for (int ax0_ax1_fused_0_1 = 0; ax0_ax1_fused_0_1 < 8; ++ax0_ax1_fused_0_1) {
    ptx_cp_async_legacy_ca_8_2_2(buf_dyn_shmem_ptr, ((((((ax0_ax1_fused_0_1 * 576) + (((int)threadIdx.y) * 288)) + (((int)threadIdx.z) * 144)) + ((((int)threadIdx.x) >> 4) * 72)) + ((((int)threadIdx.x) & 15) * 4)) + 256), Bm_ptr, (((((ax0_ax1_fused_0_1 * 512) + (((int)threadIdx.y) * 256)) + (((int)threadIdx.z) * 128)) + (((int)threadIdx.x) * 4)) + ((((int)blockIdx.x) / 24) * B_s1)));
  }
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  for (int ax4 = 0; ax4 < 23; ++ax4) {
    __syncthreads();
    for (int ax0_ax1_fused_0_2 = 0; ax0_ax1_fused_0_2 < 8; ++ax0_ax1_fused_0_2) {
      ptx_cp_async_legacy_pred_ca_8_2_2(buf_dyn_shmem_ptr, (((((((((ax4 + 1) & 1) * 4608) + (ax0_ax1_fused_0_2 * 576)) + (((int)threadIdx.y) * 288)) + (((int)threadIdx.z) * 144)) + ((((int)threadIdx.x) >> 4) * 72)) + ((((int)threadIdx.x) & 15) * 4)) + 256), Bm_ptr, (((((((ax4 * 4096) + (ax0_ax1_fused_0_2 * 512)) + (((int)threadIdx.y) * 256)) + (((int)threadIdx.z) * 128)) + (((int)threadIdx.x) * 4)) + ((((int)blockIdx.x) / 24) * B_s1)) + 4096), ((((ax4 * 16) + (ax0_ax1_fused_0_2 * 2)) + ((int)threadIdx.y)) < 359));
    }
    tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
    tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1();
    __syncthreads();
    for (int ax2_0_1_init = 0; ax2_0_1_init < 2; ++ax2_0_1_init) {
      for (int ax3_0_1_init = 0; ax3_0_1_init < 2; ++ax3_0_1_init) {
        for (int i = 0; i < 8; ++i) {
S_warp_ptr[((ax2_0_1_init * 16) + (ax3_0_1_init * 8)) + i] = 0.0;}
;
      }
    }
    for (int ax4_0_0 = 0; ax4_0_0 < 4; ++ax4_0_0) {
      for (int ax0_0 = 0; ax0_0 < 2; ++ax0_0) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((ax4 & 1) * 4608) + (((int)threadIdx.z) * 2304)) + (ax0_0 * 1152)) + (ax4_0_0 * 16)) + 256)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax0_0 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax0_0 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax0_0 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax0_0 * 8)))[3])
      : "r"(addr)
    );
  }
      }
      for (int ax2_0_1 = 0; ax2_0_1 < 2; ++ax2_0_1) {
        for (int ax3_0_1 = 0; ax3_0_1 < 2; ++ax3_0_1) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[0]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[1]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[2]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax3_0_1 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + (ax3_0_1 * 8)))[1]), "f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[0]), "f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[1]), "f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[2]), "f"(((float *)(S_warp_ptr + ((ax2_0_1 * 16) + (ax3_0_1 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[0]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[1]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[2]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1 * 32) + (ax4_0_0 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + ((ax3_0_1 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + ((ax3_0_1 * 8) + 4)))[1]), "f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[0]), "f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[1]), "f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[2]), "f"(((float *)(S_warp_ptr + (((ax2_0_1 * 16) + (ax3_0_1 * 8)) + 4)))[3]));
  }
        }
      }
    }
    for (int ax3_1 = 0; ax3_1 < 2; ++ax3_1) {
      for (int ax3_2 = 0; ax3_2 < 2; ++ax3_2) {
        for (int ax5 = 0; ax5 < 2; ++ax5) {
          for (int ax6 = 0; ax6 < 2; ++ax6) {
            for (int ax7 = 0; ax7 < 2; ++ax7) {
              row_max_rf_shared_dyn_local_ptr[((ax3_1 * 16) + (ax3_2 * 8))] = max(row_max_rf_shared_dyn_local_ptr[((ax3_1 * 16) + (ax3_2 * 8))], (S_warp_ptr[(((((ax3_1 * 16) + (ax5 * 8)) + (ax6 * 4)) + (ax3_2 * 2)) + ax7)] * 0x1p-3f/*1.250000e-01*/));
            }
          }
        }
      }
    }
  }
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0();
  __syncthreads();
  for (int ax2_0_1_init_1 = 0; ax2_0_1_init_1 < 2; ++ax2_0_1_init_1) {
    for (int ax3_0_1_init_1 = 0; ax3_0_1_init_1 < 2; ++ax3_0_1_init_1) {
      for (int i = 0; i < 8; ++i) {
S_warp_ptr[((ax2_0_1_init_1 * 16) + (ax3_0_1_init_1 * 8)) + i] = 0.0;}
;
    }
  }
  for (int ax4_0_0_1 = 0; ax4_0_0_1 < 4; ++ax4_0_0_1) {
    for (int ax0_0_1 = 0; ax0_0_1 < 2; ++ax0_0_1) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((int)threadIdx.z) * 2304) + (ax0_0_1 * 1152)) + (ax4_0_0_1 * 16)) + 4864)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax0_0_1 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax0_0_1 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax0_0_1 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax0_0_1 * 8)))[3])
      : "r"(addr)
    );
  }
    }
    for (int ax2_0_1_1 = 0; ax2_0_1_1 < 2; ++ax2_0_1_1) {
      for (int ax3_0_1_1 = 0; ax3_0_1_1 < 2; ++ax3_0_1_1) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[0]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[1]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[2]), "=f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax3_0_1_1 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + (ax3_0_1_1 * 8)))[1]), "f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[0]), "f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[1]), "f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[2]), "f"(((float *)(S_warp_ptr + ((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[0]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[1]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[2]), "=f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_1 * 32) + (ax4_0_0_1 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + ((ax3_0_1_1 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + ((ax3_0_1_1 * 8) + 4)))[1]), "f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[0]), "f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[1]), "f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[2]), "f"(((float *)(S_warp_ptr + (((ax2_0_1_1 * 16) + (ax3_0_1_1 * 8)) + 4)))[3]));
  }
      }
    }
  }
  for (int ax3_1_1 = 0; ax3_1_1 < 2; ++ax3_1_1) {
    for (int ax3_2_1 = 0; ax3_2_1 < 2; ++ax3_2_1) {
      for (int ax5_1 = 0; ax5_1 < 2; ++ax5_1) {
        for (int ax6_1 = 0; ax6_1 < 2; ++ax6_1) {
          for (int ax7_1 = 0; ax7_1 < 2; ++ax7_1) {
            float condval_1;
            if (((((((int)threadIdx.z) * 8) + (ax5_1 * 4)) + (ax6_1 * 2)) + ((((int)threadIdx.x) & 3) >> 1)) < 7) {
              condval_1 = (S_warp_ptr[(((((ax3_1_1 * 16) + (ax5_1 * 8)) + (ax6_1 * 4)) + (ax3_2_1 * 2)) + ax7_1)] * 0x1p-3f/*1.250000e-01*/);
            } else {
              condval_1 = -CUDART_INF_F;
            }
            row_max_rf_shared_dyn_local_ptr[((ax3_1_1 * 16) + (ax3_2_1 * 8))] = max(row_max_rf_shared_dyn_local_ptr[((ax3_1_1 * 16) + (ax3_2_1 * 8))], condval_1);
          }
        }
      }
    }
  }
  __syncthreads();
  for (int ax2_1 = 0; ax2_1 < 2; ++ax2_1) {
    for (int ax2_2 = 0; ax2_2 < 2; ++ax2_2) {
      ((float*)buf_dyn_shmem_ptr)[(((((((((int)threadIdx.y) * 1056) + (ax2_1 * 528)) + (ax2_2 * 264)) + ((((int)threadIdx.x) >> 2) * 33)) + (((int)threadIdx.z) * 4)) + (((int)threadIdx.x) & 3)) + 128)] = row_max_rf_shared_dyn_local_ptr[((ax2_1 * 16) + (ax2_2 * 8))];
    }
  }
  if (((int)threadIdx.y) < 1) {
    row_max_shared_dyn_local_ptr[0] = -0x1.fffffep+127f/*-3.402823e+38*/;
  }
  __syncthreads();
  for (int ax0 = 0; ax0 < 8; ++ax0) {
    if (((int)threadIdx.y) < 1) {
      row_max_shared_dyn_local_ptr[0] = max(row_max_shared_dyn_local_ptr[0], ((float*)buf_dyn_shmem_ptr)[(((((((int)threadIdx.y) * 2112) + (((int)threadIdx.z) * 1056)) + (((int)threadIdx.x) * 33)) + ax0) + 128)]);
    }
  }
  __syncthreads();
  if (((int)threadIdx.y) < 1) {
    ((float*)buf_dyn_shmem_ptr)[(((((int)threadIdx.z) * 32) + ((int)threadIdx.x)) + 64)] = row_max_shared_dyn_local_ptr[0];
  }
  for (int ax3_1_init_1 = 0; ax3_1_init_1 < 2; ++ax3_1_init_1) {
    for (int ax3_2_init_1 = 0; ax3_2_init_1 < 2; ++ax3_2_init_1) {
      row_sum_rf_shared_dyn_local_ptr[((ax3_1_init_1 * 16) + (ax3_2_init_1 * 8))] = 0x0p+0f/*0.000000e+00*/;
    }
  }
  for (int ax0_ax1_fused_0_3 = 0; ax0_ax1_fused_0_3 < 4; ++ax0_ax1_fused_0_3) {
    ptx_cp_async_legacy_cg_16_2_2(buf_dyn_shmem_ptr, ((((((ax0_ax1_fused_0_3 * 1152) + (((int)threadIdx.y) * 576)) + (((int)threadIdx.z) * 288)) + ((((int)threadIdx.x) >> 3) * 72)) + ((((int)threadIdx.x) & 7) * 8)) + 256), Bm_ptr, (((((ax0_ax1_fused_0_3 * 1024) + (((int)threadIdx.y) * 512)) + (((int)threadIdx.z) * 256)) + (((int)threadIdx.x) * 8)) + ((((int)blockIdx.x) / 24) * B_s1)));
  }
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  for (int ax4_1 = 0; ax4_1 < 23; ++ax4_1) {
    __syncthreads();
    for (int ax0_ax1_fused_0_4 = 0; ax0_ax1_fused_0_4 < 4; ++ax0_ax1_fused_0_4) {
      ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, (((((((((ax4_1 + 1) & 1) * 4608) + (ax0_ax1_fused_0_4 * 1152)) + (((int)threadIdx.y) * 576)) + (((int)threadIdx.z) * 288)) + ((((int)threadIdx.x) >> 3) * 72)) + ((((int)threadIdx.x) & 7) * 8)) + 256), Bm_ptr, (((((((ax4_1 * 4096) + (ax0_ax1_fused_0_4 * 1024)) + (((int)threadIdx.y) * 512)) + (((int)threadIdx.z) * 256)) + (((int)threadIdx.x) * 8)) + ((((int)blockIdx.x) / 24) * B_s1)) + 4096), (((((ax4_1 * 16) + (ax0_ax1_fused_0_4 * 4)) + (((int)threadIdx.y) * 2)) + ((int)threadIdx.z)) < 359));
    }
    tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
    tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1();
    __syncthreads();
    for (int ax2_0_1_init_2 = 0; ax2_0_1_init_2 < 2; ++ax2_0_1_init_2) {
      for (int ax3_0_1_init_2 = 0; ax3_0_1_init_2 < 2; ++ax3_0_1_init_2) {
        for (int i = 0; i < 8; ++i) {
S_sum_warp_ptr[((ax2_0_1_init_2 * 16) + (ax3_0_1_init_2 * 8)) + i] = 0.0;}
;
      }
    }
    for (int ax4_0_0_2 = 0; ax4_0_0_2 < 4; ++ax4_0_0_2) {
      for (int ax0_0_2 = 0; ax0_0_2 < 2; ++ax0_0_2) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((ax4_1 & 1) * 4608) + (((int)threadIdx.z) * 2304)) + (ax0_0_2 * 1152)) + (ax4_0_0_2 * 16)) + 256)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax0_0_2 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax0_0_2 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax0_0_2 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax0_0_2 * 8)))[3])
      : "r"(addr)
    );
  }
      }
      for (int ax2_0_1_2 = 0; ax2_0_1_2 < 2; ++ax2_0_1_2) {
        for (int ax3_0_1_2 = 0; ax3_0_1_2 < 2; ++ax3_0_1_2) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[0]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[1]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[2]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax3_0_1_2 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + (ax3_0_1_2 * 8)))[1]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[0]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[1]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[2]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[0]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[1]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[2]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_2 * 32) + (ax4_0_0_2 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + ((ax3_0_1_2 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_2 + ((ax3_0_1_2 * 8) + 4)))[1]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[0]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[1]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[2]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_2 * 16) + (ax3_0_1_2 * 8)) + 4)))[3]));
  }
        }
      }
    }
    for (int ax3_1_2 = 0; ax3_1_2 < 2; ++ax3_1_2) {
      for (int ax3_2_2 = 0; ax3_2_2 < 2; ++ax3_2_2) {
        row_max_shared_dyn_local_ptr_1[0] = ((float*)buf_dyn_shmem_ptr)[(((((((int)threadIdx.y) * 32) + (ax3_1_2 * 16)) + (ax3_2_2 * 8)) + (((int)threadIdx.x) >> 2)) + 64)];
        for (int ax5_2 = 0; ax5_2 < 2; ++ax5_2) {
          for (int ax6_2 = 0; ax6_2 < 2; ++ax6_2) {
            for (int ax7_2 = 0; ax7_2 < 2; ++ax7_2) {
              row_sum_rf_shared_dyn_local_ptr[((ax3_1_2 * 16) + (ax3_2_2 * 8))] = (row_sum_rf_shared_dyn_local_ptr[((ax3_1_2 * 16) + (ax3_2_2 * 8))] + exp2f(((S_sum_warp_ptr[(((((ax3_1_2 * 16) + (ax5_2 * 8)) + (ax6_2 * 4)) + (ax3_2_2 * 2)) + ax7_2)] * 0x1.71547652b82fep-3f/*1.803369e-01*/) - (max(row_max_shared_dyn_local_ptr_1[0], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/))));
            }
          }
        }
      }
    }
  }
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0();
  __syncthreads();
  for (int ax2_0_1_init_3 = 0; ax2_0_1_init_3 < 2; ++ax2_0_1_init_3) {
    for (int ax3_0_1_init_3 = 0; ax3_0_1_init_3 < 2; ++ax3_0_1_init_3) {
      for (int i = 0; i < 8; ++i) {
S_sum_warp_ptr[((ax2_0_1_init_3 * 16) + (ax3_0_1_init_3 * 8)) + i] = 0.0;}
;
    }
  }
  for (int ax4_0_0_3 = 0; ax4_0_0_3 < 4; ++ax4_0_0_3) {
    for (int ax0_0_3 = 0; ax0_0_3 < 2; ++ax0_0_3) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((int)threadIdx.z) * 2304) + (ax0_0_3 * 1152)) + (ax4_0_0_3 * 16)) + 4864)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax0_0_3 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax0_0_3 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax0_0_3 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax0_0_3 * 8)))[3])
      : "r"(addr)
    );
  }
    }
    for (int ax2_0_1_3 = 0; ax2_0_1_3 < 2; ++ax2_0_1_3) {
      for (int ax3_0_1_3 = 0; ax3_0_1_3 < 2; ++ax3_0_1_3) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[0]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[1]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[2]), "=f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax3_0_1_3 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + (ax3_0_1_3 * 8)))[1]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[0]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[1]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[2]), "f"(((float *)(S_sum_warp_ptr + ((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[0]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[1]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[2]), "=f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_3 * 32) + (ax4_0_0_3 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + ((ax3_0_1_3 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_3 + ((ax3_0_1_3 * 8) + 4)))[1]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[0]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[1]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[2]), "f"(((float *)(S_sum_warp_ptr + (((ax2_0_1_3 * 16) + (ax3_0_1_3 * 8)) + 4)))[3]));
  }
      }
    }
  }
  for (int ax3_1_3 = 0; ax3_1_3 < 2; ++ax3_1_3) {
    for (int ax3_2_3 = 0; ax3_2_3 < 2; ++ax3_2_3) {
      row_max_shared_dyn_local_ptr_2[0] = ((float*)buf_dyn_shmem_ptr)[(((((((int)threadIdx.y) * 32) + (ax3_1_3 * 16)) + (ax3_2_3 * 8)) + (((int)threadIdx.x) >> 2)) + 64)];
      for (int ax5_3 = 0; ax5_3 < 2; ++ax5_3) {
        for (int ax6_3 = 0; ax6_3 < 2; ++ax6_3) {
          for (int ax7_3 = 0; ax7_3 < 2; ++ax7_3) {
            float condval_2;
            if (((((((int)threadIdx.z) * 8) + (ax5_3 * 4)) + (ax6_3 * 2)) + ((((int)threadIdx.x) & 3) >> 1)) < 7) {
              condval_2 = (S_sum_warp_ptr[(((((ax3_1_3 * 16) + (ax5_3 * 8)) + (ax6_3 * 4)) + (ax3_2_3 * 2)) + ax7_3)] * 0x1p-3f/*1.250000e-01*/);
            } else {
              condval_2 = -CUDART_INF_F;
            }
            row_sum_rf_shared_dyn_local_ptr[((ax3_1_3 * 16) + (ax3_2_3 * 8))] = (row_sum_rf_shared_dyn_local_ptr[((ax3_1_3 * 16) + (ax3_2_3 * 8))] + exp2f(((condval_2 * 0x1.71547652b82fep+0f/*1.442695e+00*/) - (max(row_max_shared_dyn_local_ptr_2[0], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/))));
          }
        }
      }
    }
  }
  __syncthreads();
  for (int ax2_1_1 = 0; ax2_1_1 < 2; ++ax2_1_1) {
    for (int ax2_2_1 = 0; ax2_2_1 < 2; ++ax2_2_1) {
      ((float*)buf_dyn_shmem_ptr)[(((((((((int)threadIdx.y) * 1056) + (ax2_1_1 * 528)) + (ax2_2_1 * 264)) + ((((int)threadIdx.x) >> 2) * 33)) + (((int)threadIdx.z) * 4)) + (((int)threadIdx.x) & 3)) + 128)] = row_sum_rf_shared_dyn_local_ptr[((ax2_1_1 * 16) + (ax2_2_1 * 8))];
    }
  }
  if (((int)threadIdx.y) < 1) {
    row_sum_shared_dyn_local_ptr[0] = 0x0p+0f/*0.000000e+00*/;
  }
  __syncthreads();
  for (int ax0_1 = 0; ax0_1 < 8; ++ax0_1) {
    if (((int)threadIdx.y) < 1) {
      row_sum_shared_dyn_local_ptr[0] = (row_sum_shared_dyn_local_ptr[0] + ((float*)buf_dyn_shmem_ptr)[(((((((int)threadIdx.y) * 2112) + (((int)threadIdx.z) * 1056)) + (((int)threadIdx.x) * 33)) + ax0_1) + 128)]);
    }
  }
  __syncthreads();
  if (((int)threadIdx.y) < 1) {
    ((float*)buf_dyn_shmem_ptr)[((((int)threadIdx.z) * 32) + ((int)threadIdx.x))] = row_sum_shared_dyn_local_ptr[0];
  }
  for (int ax0_ax1_fused_0_5 = 0; ax0_ax1_fused_0_5 < 4; ++ax0_ax1_fused_0_5) {
    ptx_cp_async_legacy_cg_16_2_2(buf_dyn_shmem_ptr, ((((((ax0_ax1_fused_0_5 * 1152) + (((int)threadIdx.y) * 576)) + (((int)threadIdx.z) * 288)) + ((((int)threadIdx.x) >> 3) * 72)) + ((((int)threadIdx.x) & 7) * 8)) + 256), Bm_ptr, (((((ax0_ax1_fused_0_5 * 1024) + (((int)threadIdx.y) * 512)) + (((int)threadIdx.z) * 256)) + (((int)threadIdx.x) * 8)) + ((((int)blockIdx.x) / 24) * B_s1)));
  }
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  for (int j_0_0_j_0_1_j_1_fused_0 = 0; j_0_0_j_0_1_j_1_fused_0 < 23; ++j_0_0_j_0_1_j_1_fused_0) {
    __syncthreads();
    for (int ax0_ax1_fused_0_6 = 0; ax0_ax1_fused_0_6 < 4; ++ax0_ax1_fused_0_6) {
      ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, (((((((((j_0_0_j_0_1_j_1_fused_0 + 1) & 1) * 4608) + (ax0_ax1_fused_0_6 * 1152)) + (((int)threadIdx.y) * 576)) + (((int)threadIdx.z) * 288)) + ((((int)threadIdx.x) >> 3) * 72)) + ((((int)threadIdx.x) & 7) * 8)) + 256), Bm_ptr, (((((((j_0_0_j_0_1_j_1_fused_0 * 4096) + (ax0_ax1_fused_0_6 * 1024)) + (((int)threadIdx.y) * 512)) + (((int)threadIdx.z) * 256)) + (((int)threadIdx.x) * 8)) + ((((int)blockIdx.x) / 24) * B_s1)) + 4096), (((((j_0_0_j_0_1_j_1_fused_0 * 16) + (ax0_ax1_fused_0_6 * 4)) + (((int)threadIdx.y) * 2)) + ((int)threadIdx.z)) < 359));
    }
    tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
    tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1();
    __syncthreads();
    for (int ax2_0_1_init_4 = 0; ax2_0_1_init_4 < 2; ++ax2_0_1_init_4) {
      for (int ax3_0_1_init_4 = 0; ax3_0_1_init_4 < 2; ++ax3_0_1_init_4) {
        for (int i = 0; i < 8; ++i) {
S_p_warp_ptr[((ax2_0_1_init_4 * 16) + (ax3_0_1_init_4 * 8)) + i] = 0.0;}
;
      }
    }
    for (int ax4_0_0_4 = 0; ax4_0_0_4 < 4; ++ax4_0_0_4) {
      for (int ax0_0_4 = 0; ax0_0_4 < 2; ++ax0_0_4) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((j_0_0_j_0_1_j_1_fused_0 & 1) * 4608) + (((int)threadIdx.z) * 2304)) + (ax0_0_4 * 1152)) + (ax4_0_0_4 * 16)) + 256)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax0_0_4 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax0_0_4 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax0_0_4 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax0_0_4 * 8)))[3])
      : "r"(addr)
    );
  }
      }
      for (int ax2_0_1_4 = 0; ax2_0_1_4 < 2; ++ax2_0_1_4) {
        for (int ax3_0_1_4 = 0; ax3_0_1_4 < 2; ++ax3_0_1_4) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[0]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[1]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[2]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax3_0_1_4 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + (ax3_0_1_4 * 8)))[1]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[0]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[1]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[2]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[0]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[1]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[2]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_4 * 32) + (ax4_0_0_4 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + ((ax3_0_1_4 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_4 + ((ax3_0_1_4 * 8) + 4)))[1]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[0]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[1]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[2]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_4 * 16) + (ax3_0_1_4 * 8)) + 4)))[3]));
  }
        }
      }
    }
    __syncthreads();
    for (int ax2_1_2 = 0; ax2_1_2 < 2; ++ax2_1_2) {
      for (int ax2_2_2 = 0; ax2_2_2 < 2; ++ax2_2_2) {
        for (int ax3_1_4 = 0; ax3_1_4 < 2; ++ax3_1_4) {
          for (int ax3_2_4 = 0; ax3_2_4 < 2; ++ax3_2_4) {
            for (int ax0_2 = 0; ax0_2 < 2; ++ax0_2) {
              S_p_local_ptr[ax0_2] = S_p_warp_ptr[(((((ax2_1_2 * 16) + (ax3_1_4 * 8)) + (ax3_2_4 * 4)) + (ax2_2_2 * 2)) + ax0_2)];
            }
            *(float2*)(((float*)buf_dyn_shmem_ptr) + (((((((((((int)threadIdx.y) * 2304) + (ax2_1_2 * 1152)) + (ax2_2_2 * 576)) + ((((int)threadIdx.x) >> 2) * 72)) + (((int)threadIdx.z) * 32)) + (ax3_1_4 * 16)) + (ax3_2_4 * 8)) + ((((int)threadIdx.x) & 3) * 2)) + 4736)) = *(float2*)(S_p_local_ptr + 0);
          }
        }
      }
    }
    __syncthreads();
    for (int i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 = 0; i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 < 8; ++i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0) {
      if (((((((int)blockIdx.x) % 24) * 16) + (i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 2)) + ((int)threadIdx.y)) < 375) {
        half4 __1;
        float4 condval_3;
        {
          float4 __2;
            float4 __3;
            float4 __4;
              float4 __5;
                float4 v_ = *(float4*)(((float*)buf_dyn_shmem_ptr) + ((((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 576) + (((int)threadIdx.y) * 288)) + (((int)threadIdx.z) * 144)) + ((((int)threadIdx.x) >> 4) * 72)) + ((((int)threadIdx.x) & 15) * 4)) + 4736));
                float4 v__1 = make_float4(0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/);
                __5.x = (v_.x*v__1.x);
                __5.y = (v_.y*v__1.y);
                __5.z = (v_.z*v__1.z);
                __5.w = (v_.w*v__1.w);
              float4 v__2 = make_float4((max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/));
              __4.x = (__5.x-v__2.x);
              __4.y = (__5.y-v__2.y);
              __4.z = (__5.z-v__2.z);
              __4.w = (__5.w-v__2.w);
            __3.x = exp2f(__4.x);
            __3.y = exp2f(__4.y);
            __3.z = exp2f(__4.z);
            __3.w = exp2f(__4.w);
            float4 v__3 = make_float4(((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))]);
            __2.x = (__3.x/v__3.x);
            __2.y = (__3.y/v__3.y);
            __2.z = (__3.z/v__3.z);
            __2.w = (__3.w/v__3.w);
          condval_3 = __2;
        }
        if (!(0x0p+0f/*0.000000e+00*/ < ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))])) {
          condval_3 = make_float4(0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/);
        }
        __1.x = (half)(condval_3.x);
        __1.y = (half)(condval_3.y);
        __1.z = (half)(condval_3.z);
        __1.w = (half)(condval_3.w);
        *(half4*)(P_ptr + ((((((((((((int)blockIdx.x) / 24) * 2250000) + ((((int)blockIdx.x) % 24) * 96000)) + (i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0 * 12000)) + (((int)threadIdx.y) * 6000)) + (((int)threadIdx.z) * 3000)) + ((((int)threadIdx.x) >> 4) * 1500)) + (j_0_0_j_0_1_j_1_fused_0 * 64)) + ((((int)threadIdx.x) & 15) * 4)) + elem_offset)) = __1;
      }
    }
  }
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0();
  __syncthreads();
  for (int ax2_0_1_init_5 = 0; ax2_0_1_init_5 < 2; ++ax2_0_1_init_5) {
    for (int ax3_0_1_init_5 = 0; ax3_0_1_init_5 < 2; ++ax3_0_1_init_5) {
      for (int i = 0; i < 8; ++i) {
S_p_warp_ptr[((ax2_0_1_init_5 * 16) + (ax3_0_1_init_5 * 8)) + i] = 0.0;}
;
    }
  }
  for (int ax4_0_0_5 = 0; ax4_0_0_5 < 4; ++ax4_0_0_5) {
    for (int ax0_0_5 = 0; ax0_0_5 < 2; ++ax0_0_5) {

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((((int)threadIdx.z) * 2304) + (ax0_0_5 * 1152)) + (ax4_0_0_5 * 16)) + 4864)])) + ((((((int)threadIdx.x) >> 4) * 576) + ((((int)threadIdx.x) & 7) * 72)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax0_0_5 * 8)))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax0_0_5 * 8)))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax0_0_5 * 8)))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax0_0_5 * 8)))[3])
      : "r"(addr)
    );
  }
    }
    for (int ax2_0_1_5 = 0; ax2_0_1_5 < 2; ++ax2_0_1_5) {
      for (int ax3_0_1_5 = 0; ax3_0_1_5 < 2; ++ax3_0_1_5) {

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[0]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[1]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[2]), "=f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax3_0_1_5 * 8)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + (ax3_0_1_5 * 8)))[1]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[0]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[1]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[2]), "f"(((float *)(S_p_warp_ptr + ((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8))))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[0]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[1]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[2]), "=f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + ((ax2_0_1_5 * 32) + (ax4_0_0_5 * 8))))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + ((ax3_0_1_5 * 8) + 4)))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_5 + ((ax3_0_1_5 * 8) + 4)))[1]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[0]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[1]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[2]), "f"(((float *)(S_p_warp_ptr + (((ax2_0_1_5 * 16) + (ax3_0_1_5 * 8)) + 4)))[3]));
  }
      }
    }
  }
  __syncthreads();
  for (int ax2_1_3 = 0; ax2_1_3 < 2; ++ax2_1_3) {
    for (int ax2_2_3 = 0; ax2_2_3 < 2; ++ax2_2_3) {
      for (int ax3_1_5 = 0; ax3_1_5 < 2; ++ax3_1_5) {
        for (int ax3_2_5 = 0; ax3_2_5 < 2; ++ax3_2_5) {
          for (int ax0_3 = 0; ax0_3 < 2; ++ax0_3) {
            S_p_local_ptr_1[ax0_3] = S_p_warp_ptr[(((((ax2_1_3 * 16) + (ax3_1_5 * 8)) + (ax3_2_5 * 4)) + (ax2_2_3 * 2)) + ax0_3)];
          }
          *(float2*)(((float*)buf_dyn_shmem_ptr) + (((((((((((int)threadIdx.y) * 2304) + (ax2_1_3 * 1152)) + (ax2_2_3 * 576)) + ((((int)threadIdx.x) >> 2) * 72)) + (((int)threadIdx.z) * 32)) + (ax3_1_5 * 16)) + (ax3_2_5 * 8)) + ((((int)threadIdx.x) & 3) * 2)) + 4736)) = *(float2*)(S_p_local_ptr_1 + 0);
        }
      }
    }
  }
  __syncthreads();
  for (int i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 = 0; i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 < 8; ++i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1) {
    if ((((((((int)blockIdx.x) % 24) * 16) + (i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 2)) + ((int)threadIdx.y)) < 375) && ((((int)threadIdx.x) & 15) < 7)) {
      half4 __6;
      float4 condval_4;
      {
        float4 __7;
          float4 __8;
          float4 __9;
            float4 __10;
              float4 v__4 = *(float4*)(((float*)buf_dyn_shmem_ptr) + ((((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 576) + (((int)threadIdx.y) * 288)) + (((int)threadIdx.z) * 144)) + ((((int)threadIdx.x) >> 4) * 72)) + ((((int)threadIdx.x) & 15) * 4)) + 4736));
              float4 v__5 = make_float4(0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/, 0x1.71547652b82fep-3f/*1.803369e-01*/);
              __10.x = (v__4.x*v__5.x);
              __10.y = (v__4.y*v__5.y);
              __10.z = (v__4.z*v__5.z);
              __10.w = (v__4.w*v__5.w);
            float4 v__6 = make_float4((max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/), (max(((float*)buf_dyn_shmem_ptr)[(((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4)) + 64)], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/));
            __9.x = (__10.x-v__6.x);
            __9.y = (__10.y-v__6.y);
            __9.z = (__10.z-v__6.z);
            __9.w = (__10.w-v__6.w);
          __8.x = exp2f(__9.x);
          __8.y = exp2f(__9.y);
          __8.z = exp2f(__9.z);
          __8.w = exp2f(__9.w);
          float4 v__7 = make_float4(((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))], ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))]);
          __7.x = (__8.x/v__7.x);
          __7.y = (__8.y/v__7.y);
          __7.z = (__8.z/v__7.z);
          __7.w = (__8.w/v__7.w);
        condval_4 = __7;
      }
      if (!(0x0p+0f/*0.000000e+00*/ < ((float*)buf_dyn_shmem_ptr)[((((i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 8) + (((int)threadIdx.y) * 4)) + (((int)threadIdx.z) * 2)) + (((int)threadIdx.x) >> 4))])) {
        condval_4 = make_float4(0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/, 0x0p+0f/*0.000000e+00*/);
      }
      __6.x = (half)(condval_4.x);
      __6.y = (half)(condval_4.y);
      __6.z = (half)(condval_4.z);
      __6.w = (half)(condval_4.w);
      *(half4*)(P_ptr + ((((((((((((int)blockIdx.x) / 24) * 2250000) + ((((int)blockIdx.x) % 24) * 96000)) + (i_0_0_i_0_1_i_1_fused_1_i_0_0_i_0_1_i_1_fused_2_i_0_0_i_0_1_i_1_fused_3_fused_j_0_0_j_0_1_j_1_fused_1_j_0_0_j_0_1_j_1_fused_2_j_0_0_j_0_1_j_1_fused_3_fused_0_fused_0_1 * 12000)) + (((int)threadIdx.y) * 6000)) + (((int)threadIdx.z) * 3000)) + ((((int)threadIdx.x) >> 4) * 1500)) + ((((int)threadIdx.x) & 15) * 4)) + elem_offset) + 1472)) = __6;
    }
  }
}

