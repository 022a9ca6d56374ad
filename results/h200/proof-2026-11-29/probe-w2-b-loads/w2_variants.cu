
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

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 700)
#define __shfl_sync(mask, var, lane, width) \
        __shfl((var), (lane), (width))

#define __shfl_down_sync(mask, var, offset, width) \
        __shfl_down((var), (offset), (width))

#define __shfl_up_sync(mask, var, offset, width) \
        __shfl_up((var), (offset), (width))
#endif

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
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0() {
  asm volatile("cp.async.wait_group 0;" :  :  : "memory");
}
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1() {
  asm volatile("cp.async.wait_group 1;" :  :  : "memory");
}
__forceinline__ __device__ void tvm_builtin_ptx_cp_async_commit_group_async_commit_group() {
  asm volatile("cp.async.commit_group;" :  : );
}

__forceinline__ __device__ void ptx_cp_async_legacy_cg_16_2_2(void* dst, int dst_off, void* src, int src_off) {
  uint8_t* dst_p = (uint8_t*)dst + dst_off * 2;
  uint8_t* src_p = (uint8_t*)src + src_off * 2;
  unsigned int dst_addr = __cvta_generic_to_shared(dst_p);
  asm volatile("cp.async.cg.shared.global [%0], [%1], %2;"
    :: "r"(dst_addr), "l"(src_p), "n"(16));
}

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

extern "C" __global__ void __launch_bounds__(512) w2_v0_kernel(half* __restrict__ A_ptr, half* __restrict__ Bm_ptr, half* __restrict__ P_ptr, int elem_offset) {
  extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];
  alignas(64) float S_pad_warp_ptr[8];
  alignas(64) half A_pad_shared_dyn_warp_ptr[8];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr[8];
  alignas(64) half A_pad_shared_dyn_warp_ptr_1[8];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_1[8];
  alignas(64) float in_thread_row_max_shared_dyn_local_ptr[1];
  alignas(64) float red_buf0_ptr[1];
  alignas(64) float in_thread_row_sum_shared_dyn_local_ptr[1];
  alignas(64) float red_buf0_ptr_1[1];
  for (int i = 0; i < 8; ++i) {
S_pad_warp_ptr[0 + i] = 0.0;}
;
  if (((int)threadIdx.y) < 2) {
    ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, (((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)), A_ptr, ((((((((int)blockIdx.x) / 14) * 12608) + ((((int)blockIdx.x) % 14) * 1024)) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)), (((((((int)blockIdx.x) % 14) * 16) + (((int)threadIdx.y) * 8)) + (((int)threadIdx.x) >> 2)) < 197));
  }
  ptx_cp_async_legacy_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 1280), Bm_ptr, (((((((int)blockIdx.x) / 14) * 12608) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)));
  ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 6400), Bm_ptr, ((((((((int)blockIdx.x) / 14) * 12608) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)) + 8192), (((((int)threadIdx.y) * 8) + (((int)threadIdx.x) >> 2)) < 69));
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  if (((int)threadIdx.y) < 2) {
    ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 640), A_ptr, (((((((((int)blockIdx.x) / 14) * 12608) + ((((int)blockIdx.x) % 14) * 1024)) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)) + 32), (((((((int)blockIdx.x) % 14) * 16) + (((int)threadIdx.y) * 8)) + (((int)threadIdx.x) >> 2)) < 197));
  }
  ptx_cp_async_legacy_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 11520), Bm_ptr, ((((((((int)blockIdx.x) / 14) * 12608) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)) + 32));
  ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 16640), Bm_ptr, ((((((((int)blockIdx.x) / 14) * 12608) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)) + 8224), (((((int)threadIdx.y) * 8) + (((int)threadIdx.x) >> 2)) < 69));
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1();
  __syncthreads();

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[0])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 1280)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[16])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 1296)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0();
  __syncthreads();

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[640])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 11520)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[656])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 11536)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }
  __syncthreads();
  for (int local_id = 0; local_id < 8; ++local_id) {
(&(((float*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 16) + 640)]))[((((((local_id % 4) / 2) * 8) + (threadIdx.x / 4)) * 264) + ((((local_id / 4) * 8) + ((threadIdx.x % 4) * 2)) + (local_id % 2)))] = S_pad_warp_ptr[0 + local_id];
}
;
  in_thread_row_max_shared_dyn_local_ptr[0] = -CUDART_INF_F;
  __syncthreads();
  alignas(64) float row_0_ptr[7];
  alignas(64) float row_0_exp_ptr[7];
  #pragma unroll
  for (int ax1_0 = 0; ax1_0 < 7; ++ax1_0) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0 * 32) + ((int)threadIdx.x)) < 197)) {
      row_0_ptr[ax1_0] = ((float*)buf_dyn_shmem_ptr)[((((((int)threadIdx.y) * 264) + (ax1_0 * 32)) + ((int)threadIdx.x)) + 640)];
      in_thread_row_max_shared_dyn_local_ptr[0] = max(in_thread_row_max_shared_dyn_local_ptr[0], row_0_ptr[ax1_0]);
    }
  }
  in_thread_row_max_shared_dyn_local_ptr[0] = max((in_thread_row_max_shared_dyn_local_ptr[0] * 0x1p-3f/*1.250000e-01*/), -0x1.fffffep+127f/*-3.402823e+38*/);
  alignas(64) float t0_ptr[1];
  alignas(64) uint mask_ptr[1];
  red_buf0_ptr[0] = in_thread_row_max_shared_dyn_local_ptr[0];
  mask_ptr[0] = __activemask();
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 16, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 8, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 4, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 2, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 1, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  red_buf0_ptr[0] = __shfl_sync(mask_ptr[0], red_buf0_ptr[0], (((int)threadIdx.y) * 32), 32);
  if ((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) {
  }
  in_thread_row_sum_shared_dyn_local_ptr[0] = 0x0p+0f/*0.000000e+00*/;
  #pragma unroll
  for (int ax1_0_1 = 0; ax1_0_1 < 7; ++ax1_0_1) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0_1 * 32) + ((int)threadIdx.x)) < 197)) {
      row_0_exp_ptr[ax1_0_1] = exp2f(((row_0_ptr[ax1_0_1] * 0x1.71547652b82fep-3f/*1.803369e-01*/) - (max(red_buf0_ptr[0], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/)));
      in_thread_row_sum_shared_dyn_local_ptr[0] = (in_thread_row_sum_shared_dyn_local_ptr[0] + row_0_exp_ptr[ax1_0_1]);
    }
  }
  alignas(64) float t0_ptr_1[1];
  alignas(64) uint mask_ptr_1[1];
  red_buf0_ptr_1[0] = in_thread_row_sum_shared_dyn_local_ptr[0];
  mask_ptr_1[0] = __activemask();
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 16, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 8, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 4, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 2, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 1, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  red_buf0_ptr_1[0] = __shfl_sync(mask_ptr_1[0], red_buf0_ptr_1[0], (((int)threadIdx.y) * 32), 32);
  if ((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) {
  }
  float red_buf0_rcp = (0x1p+0f/*1.000000e+00*/ / red_buf0_ptr_1[0]);
  #pragma unroll
  for (int ax1_0_2 = 0; ax1_0_2 < 7; ++ax1_0_2) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0_2 * 32) + ((int)threadIdx.x)) < 197)) {
      float condval;
      if (0x0p+0f/*0.000000e+00*/ < red_buf0_ptr_1[0]) {
        condval = (row_0_exp_ptr[ax1_0_2] * red_buf0_rcp);
      } else {
        condval = 0x0p+0f/*0.000000e+00*/;
      }
      P_ptr[(((((((((int)blockIdx.x) / 14) * 38809) + ((((int)blockIdx.x) % 14) * 3152)) + (((int)threadIdx.y) * 197)) + (ax1_0_2 * 32)) + ((int)threadIdx.x)) + elem_offset)] = ((half)condval);
    }
  }
}


extern "C" __global__ void __launch_bounds__(512) w2_v1_kernel(half* __restrict__ A_ptr, half* __restrict__ Bm_ptr, half* __restrict__ P_ptr, int elem_offset) {
  extern __shared__ __align__(64) uchar buf_dyn_shmem_ptr[];
  alignas(64) float S_pad_warp_ptr[8];
  alignas(64) half A_pad_shared_dyn_warp_ptr[8];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr[8];
  alignas(64) half A_pad_shared_dyn_warp_ptr_1[8];
  alignas(64) half Bm_pad_shared_dyn_warp_ptr_1[8];
  alignas(64) float in_thread_row_max_shared_dyn_local_ptr[1];
  alignas(64) float red_buf0_ptr[1];
  alignas(64) float in_thread_row_sum_shared_dyn_local_ptr[1];
  alignas(64) float red_buf0_ptr_1[1];
  for (int i = 0; i < 8; ++i) {
S_pad_warp_ptr[0 + i] = 0.0;}
;
  if (((int)threadIdx.y) < 2) {
    ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, (((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)), A_ptr, ((((((((int)blockIdx.x) / 14) * 12608) + ((((int)blockIdx.x) % 14) * 1024)) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)), (((((((int)blockIdx.x) % 14) * 16) + (((int)threadIdx.y) * 8)) + (((int)threadIdx.x) >> 2)) < 197));
  }
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  if (((int)threadIdx.y) < 2) {
    ptx_cp_async_legacy_pred_cg_16_2_2(buf_dyn_shmem_ptr, ((((((int)threadIdx.y) * 320) + ((((int)threadIdx.x) >> 2) * 40)) + ((((int)threadIdx.x) & 3) * 8)) + 640), A_ptr, (((((((((int)blockIdx.x) / 14) * 12608) + ((((int)blockIdx.x) % 14) * 1024)) + (((int)threadIdx.y) * 512)) + ((((int)threadIdx.x) >> 2) * 64)) + ((((int)threadIdx.x) & 3) * 8)) + 32), (((((((int)blockIdx.x) % 14) * 16) + (((int)threadIdx.y) * 8)) + (((int)threadIdx.x) >> 2)) < 197));
  }
  tvm_builtin_ptx_cp_async_commit_group_async_commit_group();
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_1();
  __syncthreads();

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[0])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 1280)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[16])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 1296)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }
  tvm_builtin_ptx_cp_async_wait_group_async_wait_group_0();
  __syncthreads();

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[640])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 11520)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[656])) + (((((int)threadIdx.x) & 15) * 40) + ((((int)threadIdx.x) >> 4) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    unsigned int addr = __cvta_generic_to_shared((&(((half*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 640) + 11536)])) + ((((((int)threadIdx.x) >> 4) * 320) + ((((int)threadIdx.x) & 7) * 40)) + (((((int)threadIdx.x) & 15) >> 3) * 8)));
    __asm__ __volatile__(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
      "{%0, %1, %2, %3}, [%4];\n"
      : "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[2]), "=r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[3])
      : "r"(addr)
    );
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 0))[0]), "=f"(((float *)(S_pad_warp_ptr + 0))[1]), "=f"(((float *)(S_pad_warp_ptr + 0))[2]), "=f"(((float *)(S_pad_warp_ptr + 0))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[0]), "f"(((float *)(S_pad_warp_ptr + 0))[1]), "f"(((float *)(S_pad_warp_ptr + 0))[2]), "f"(((float *)(S_pad_warp_ptr + 0))[3]));
  }

  {
    __asm__ __volatile__(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      :  "=f"(((float *)(S_pad_warp_ptr + 4))[0]), "=f"(((float *)(S_pad_warp_ptr + 4))[1]), "=f"(((float *)(S_pad_warp_ptr + 4))[2]), "=f"(((float *)(S_pad_warp_ptr + 4))[3])
      : "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[0]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[1]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[2]), "r"(((unsigned *)(A_pad_shared_dyn_warp_ptr_1 + 0))[3]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[0]), "r"(((unsigned *)(Bm_pad_shared_dyn_warp_ptr_1 + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[0]), "f"(((float *)(S_pad_warp_ptr + 4))[1]), "f"(((float *)(S_pad_warp_ptr + 4))[2]), "f"(((float *)(S_pad_warp_ptr + 4))[3]));
  }
  __syncthreads();
  for (int local_id = 0; local_id < 8; ++local_id) {
(&(((float*)buf_dyn_shmem_ptr)[((((int)threadIdx.y) * 16) + 640)]))[((((((local_id % 4) / 2) * 8) + (threadIdx.x / 4)) * 264) + ((((local_id / 4) * 8) + ((threadIdx.x % 4) * 2)) + (local_id % 2)))] = S_pad_warp_ptr[0 + local_id];
}
;
  in_thread_row_max_shared_dyn_local_ptr[0] = -CUDART_INF_F;
  __syncthreads();
  alignas(64) float row_0_ptr[7];
  alignas(64) float row_0_exp_ptr[7];
  #pragma unroll
  for (int ax1_0 = 0; ax1_0 < 7; ++ax1_0) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0 * 32) + ((int)threadIdx.x)) < 197)) {
      row_0_ptr[ax1_0] = ((float*)buf_dyn_shmem_ptr)[((((((int)threadIdx.y) * 264) + (ax1_0 * 32)) + ((int)threadIdx.x)) + 640)];
      in_thread_row_max_shared_dyn_local_ptr[0] = max(in_thread_row_max_shared_dyn_local_ptr[0], row_0_ptr[ax1_0]);
    }
  }
  in_thread_row_max_shared_dyn_local_ptr[0] = max((in_thread_row_max_shared_dyn_local_ptr[0] * 0x1p-3f/*1.250000e-01*/), -0x1.fffffep+127f/*-3.402823e+38*/);
  alignas(64) float t0_ptr[1];
  alignas(64) uint mask_ptr[1];
  red_buf0_ptr[0] = in_thread_row_max_shared_dyn_local_ptr[0];
  mask_ptr[0] = __activemask();
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 16, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 8, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 4, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 2, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  t0_ptr[0] = __shfl_down_sync(mask_ptr[0], red_buf0_ptr[0], 1, 32);
  red_buf0_ptr[0] = max(red_buf0_ptr[0], t0_ptr[0]);
  red_buf0_ptr[0] = __shfl_sync(mask_ptr[0], red_buf0_ptr[0], (((int)threadIdx.y) * 32), 32);
  if ((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) {
  }
  in_thread_row_sum_shared_dyn_local_ptr[0] = 0x0p+0f/*0.000000e+00*/;
  #pragma unroll
  for (int ax1_0_1 = 0; ax1_0_1 < 7; ++ax1_0_1) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0_1 * 32) + ((int)threadIdx.x)) < 197)) {
      row_0_exp_ptr[ax1_0_1] = exp2f(((row_0_ptr[ax1_0_1] * 0x1.71547652b82fep-3f/*1.803369e-01*/) - (max(red_buf0_ptr[0], -0x1.2ced32a16a1b1p+127f/*-2.000000e+38*/) * 0x1.71547652b82fep+0f/*1.442695e+00*/)));
      in_thread_row_sum_shared_dyn_local_ptr[0] = (in_thread_row_sum_shared_dyn_local_ptr[0] + row_0_exp_ptr[ax1_0_1]);
    }
  }
  alignas(64) float t0_ptr_1[1];
  alignas(64) uint mask_ptr_1[1];
  red_buf0_ptr_1[0] = in_thread_row_sum_shared_dyn_local_ptr[0];
  mask_ptr_1[0] = __activemask();
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 16, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 8, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 4, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 2, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  t0_ptr_1[0] = __shfl_down_sync(mask_ptr_1[0], red_buf0_ptr_1[0], 1, 32);
  red_buf0_ptr_1[0] = (red_buf0_ptr_1[0] + t0_ptr_1[0]);
  red_buf0_ptr_1[0] = __shfl_sync(mask_ptr_1[0], red_buf0_ptr_1[0], (((int)threadIdx.y) * 32), 32);
  if ((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) {
  }
  float red_buf0_rcp = (0x1p+0f/*1.000000e+00*/ / red_buf0_ptr_1[0]);
  #pragma unroll
  for (int ax1_0_2 = 0; ax1_0_2 < 7; ++ax1_0_2) {
    if (((((((int)blockIdx.x) % 14) * 16) + ((int)threadIdx.y)) < 197) && (((ax1_0_2 * 32) + ((int)threadIdx.x)) < 197)) {
      float condval;
      if (0x0p+0f/*0.000000e+00*/ < red_buf0_ptr_1[0]) {
        condval = (row_0_exp_ptr[ax1_0_2] * red_buf0_rcp);
      } else {
        condval = 0x0p+0f/*0.000000e+00*/;
      }
      P_ptr[(((((((((int)blockIdx.x) / 14) * 38809) + ((((int)blockIdx.x) % 14) * 3152)) + (((int)threadIdx.y) * 197)) + (ax1_0_2 * 32)) + ((int)threadIdx.x)) + elem_offset)] = ((half)condval);
    }
  }
}


