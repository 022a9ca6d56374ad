#include "cuda_rt.h"

#include <dlfcn.h>

namespace flashgemm::cuda_rt {
namespace {

constexpr int kAttrMajor = 75, kAttrMinor = 76;  // cudaDevAttrComputeCapabilityMajor / Minor
constexpr int kAttrMultiprocessors = 16;  // cudaDevAttrMultiProcessorCount

struct Api {
  int (*set_device)(int) = nullptr;
  int (*get_attribute)(int*, int, int) = nullptr;
  int (*malloc_async)(void**, size_t, void*) = nullptr;
  int (*memset_async)(void*, int, size_t, void*) = nullptr;
  int (*free_async)(void*, void*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string missing;  // why the API is unusable, "" when it is

  Api() {
    void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudart.so.13", RTLD_NOW);
    if (!h) {
      missing = "libcudart.so.13 cannot be loaded (install the CUDA 13 runtime that onnxruntime-gpu uses)";
      return;
    }
    Bind(h, "cudaSetDevice", &set_device);
    Bind(h, "cudaDeviceGetAttribute", &get_attribute);
    Bind(h, "cudaMallocAsync", &malloc_async);
    Bind(h, "cudaMemsetAsync", &memset_async);
    Bind(h, "cudaFreeAsync", &free_async);
    Bind(h, "cudaGetErrorString", &error_string);
  }
  template <typename F>
  void Bind(void* h, const char* name, F* fn) {
    *fn = reinterpret_cast<F>(dlsym(h, name));
    if (!*fn && missing.empty()) missing = std::string("libcudart.so.13 lacks ") + name;
  }
  std::string Check(int rc, const char* call) const {
    if (rc == 0) return "";
    return std::string(call) + " failed: " + (error_string ? error_string(rc) : "error " + std::to_string(rc));
  }
};

const Api& api() {
  static const Api a;
  return a;
}

}  // namespace

std::string SetDevice(int device) {
  if (!api().missing.empty()) return api().missing;
  return api().Check(api().set_device(device), "cudaSetDevice");
}

std::string ComputeCapability(int device, int* major, int* minor) {
  if (!api().missing.empty()) return api().missing;
  std::string err = api().Check(api().get_attribute(major, kAttrMajor, device), "cudaDeviceGetAttribute");
  return err.empty() ? api().Check(api().get_attribute(minor, kAttrMinor, device), "cudaDeviceGetAttribute") : err;
}

std::string ZerosAsync(void** ptr, size_t bytes, void* stream) {
  if (!api().missing.empty()) return api().missing;
  std::string err = api().Check(api().malloc_async(ptr, bytes, stream), "cudaMallocAsync");
  if (!err.empty()) return err;
  err = api().Check(api().memset_async(*ptr, 0, bytes, stream), "cudaMemsetAsync");
  if (!err.empty()) api().free_async(*ptr, stream);
  return err;
}

std::string MultiprocessorCount(int device, int* count) {
  if (!api().missing.empty()) return api().missing;
  return api().Check(api().get_attribute(count, kAttrMultiprocessors, device), "cudaDeviceGetAttribute");
}

std::string MemsetZeroAsync(void* ptr, size_t bytes, void* stream) {
  if (!api().missing.empty()) return api().missing;
  return api().Check(api().memset_async(ptr, 0, bytes, stream), "cudaMemsetAsync");
}

std::string FreeAsync(void* ptr, void* stream) {
  if (!api().missing.empty()) return api().missing;
  return api().Check(api().free_async(ptr, stream), "cudaFreeAsync");
}

}  // namespace flashgemm::cuda_rt
