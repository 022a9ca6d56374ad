// The few CUDA runtime calls the op makes on the CUDA EP, resolved at run time from the libcudart.so.13 that
// libtvm_runtime_cuda.so (our DT_NEEDED in CUDA builds) has loaded: no compile-time CUDA toolkit dependency.
#pragma once

#include <string>

namespace flashgemm::cuda_rt {

// Each returns "" on success, else a message naming the call and CUDA's error string.
std::string SetDevice(int device);
std::string ComputeCapability(int device, int* major, int* minor);
// Stream-ordered: a buffer of `bytes` zero bytes valid on `stream` until FreeAsync on the same stream.
std::string ZerosAsync(void** ptr, size_t bytes, void* stream);
// The device's streaming multiprocessors.
std::string MultiprocessorCount(int device, int* count);
std::string FreeAsync(void* ptr, void* stream);
// Stream-ordered: `bytes` zero bytes written at ptr.
std::string MemsetZeroAsync(void* ptr, size_t bytes, void* stream);

}  // namespace flashgemm::cuda_rt
