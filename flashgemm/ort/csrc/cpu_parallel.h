// The CPU kernels' parallel loops run on ONNX Runtime's intra-op thread pool, not on TVM's own.
//
// TVM's llvm code starts a parallel loop through the function pointer __TVMBackendParallelLaunch that its kernel
// library exports; TVM points it at its runtime's launcher, whose thread pool spins on the same cores as ORT's
// intra-op threads. Inside a session the two pools fight (a BERT-base score site took ~8 ms a call inside ORT against
// ~6 ms standalone). Install() points a loaded CPU bundle's pointer at a launcher that hands the loop's tasks to
// KernelContext_ParallelFor of the kernel context a Scope names on the calling thread; with no Scope (the bundle's
// kernels called outside a session) it calls the launcher TVM had installed.
#pragma once

#include <string>

#include "ort_api.h"

namespace flashgemm::cpu_parallel {

// Points the __TVMBackendParallelLaunch of the kernel library so_path (already loaded) at the ORT launcher.
// Returns "" on success, else why not (the kernels then keep TVM's launcher: correct, slower inside ORT).
std::string Install(const std::string& so_path);

// While alive, the calling thread's CPU kernels run their parallel loops on ctx's intra-op thread pool.
class Scope {
 public:
  explicit Scope(OrtKernelContext* ctx);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  OrtKernelContext* prev_;
};

}  // namespace flashgemm::cpu_parallel
