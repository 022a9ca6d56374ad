#include "cpu_parallel.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace flashgemm::cpu_parallel {
namespace {

// tvm/runtime/c_backend_api.h (the TVM headers are not part of the build; these two are its stable C ABI)
struct TVMParallelGroupEnv {
  void* sync_handle;
  int32_t num_task;
};
using ParallelLambda = int (*)(int task_id, TVMParallelGroupEnv* penv, void* cdata);
using ParallelLaunch = int (*)(ParallelLambda flambda, void* cdata, int num_task);

thread_local OrtKernelContext* current = nullptr;
// TVM's launcher as the first installed library had it (the same function for every library of the process).
std::atomic<ParallelLaunch> tvm_launch{nullptr};

struct Job {
  ParallelLambda fn;
  void* cdata;
  TVMParallelGroupEnv env;
  std::atomic<int> status{0};
};

void RunTask(void* user, size_t i) {
  auto* job = static_cast<Job*>(user);
  if (int rc = job->fn(static_cast<int>(i), &job->env, job->cdata); rc != 0) job->status.store(rc);
}

// A loop of num_task == 0 ("as many tasks as workers") is cut into twice the hardware threads: ORT's pool takes
// them dynamically, so uneven rows (causal) still balance. The lambda splits its range by env.num_task.
int OrtLaunch(ParallelLambda fn, void* cdata, int num_task) {
  OrtKernelContext* ctx = current;
  if (ctx == nullptr) {
    ParallelLaunch tvm = tvm_launch.load();
    if (tvm != nullptr) return tvm(fn, cdata, num_task);
  }
  if (num_task <= 0) num_task = static_cast<int>(std::max(1u, 2 * std::thread::hardware_concurrency()));
  Job job{fn, cdata, {nullptr, num_task}};
  OrtStatus* st = ctx == nullptr ? nullptr
                                 : Ort::GetApi().KernelContext_ParallelFor(ctx, RunTask, static_cast<size_t>(num_task),
                                                                           0, &job);
  if (ctx == nullptr || st != nullptr) {  // no pool to run on: the tasks one after another, here
    if (st != nullptr) Ort::GetApi().ReleaseStatus(st);
    job.status.store(0);
    for (int i = 0; i < num_task; ++i) RunTask(&job, static_cast<size_t>(i));
  }
  return job.status.load();
}

}  // namespace

std::string Install(const std::string& so_path) {
  // RTLD_NOLOAD: the handle of the copy TVM already loaded (the pointer lives in its data segment), never a second.
  void* handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return "not loaded: " + std::string(dlerror());
  auto* slot = reinterpret_cast<ParallelLaunch*>(dlsym(handle, "__TVMBackendParallelLaunch"));
  if (slot != nullptr && *slot != OrtLaunch) {  // (none: a library without parallel loops, nothing to do)
    ParallelLaunch expected = nullptr;
    tvm_launch.compare_exchange_strong(expected, *slot);
    *slot = OrtLaunch;
  }
  dlclose(handle);  // drops only the reference RTLD_NOLOAD added
  return "";
}

Scope::Scope(OrtKernelContext* ctx) : prev_(current) { current = ctx; }
Scope::~Scope() { current = prev_; }

}  // namespace flashgemm::cpu_parallel
