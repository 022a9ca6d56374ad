// Entry point: RegisterCustomOps, called by ORT when a session options object registers this library.
// Loads the kernel bundle (manifest + kernels .so) right away, so a missing or broken bundle fails here with a
// message that names the path and the fix, not later at the first Run.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "bundle.h"
#include "op.h"
#include "ort_api.h"

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base);

namespace {

#ifdef FLASHGEMM_WITH_CUDA
constexpr bool kCudaBuild = true;
#else
constexpr bool kCudaBuild = false;
#endif

// A relative path made absolute against the current directory: error messages then name the file that was
// looked for, and a later chdir cannot point a cached registration at another bundle.
std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return path == "." ? cwd : std::string(cwd) + "/" + path;
}

// The session config entry that names a session's bundle directory (SessionOptions.add_session_config_entry before
// register_custom_ops_library): several sessions of one process can each load their own bundle.
constexpr const char* kBundleDirKey = "flashgemm.bundle_dir";

// A session config entry, or "" where the session has none.
std::string SessionConfig(const OrtApi* api, const OrtSessionOptions* options, const char* key) {
  int has = 0;
  if (OrtStatus* st = api->HasSessionConfigEntry(options, key, &has)) {
    api->ReleaseStatus(st);
    return "";
  }
  size_t size = 0;
  if (!has) return "";
  if (OrtStatus* st = api->GetSessionConfigEntry(options, key, nullptr, &size)) {
    api->ReleaseStatus(st);
    return "";
  }
  std::string value(size, '\0');
  if (OrtStatus* st = api->GetSessionConfigEntry(options, key, value.data(), &size)) {
    api->ReleaseStatus(st);
    return "";
  }
  value.resize(size > 0 ? size - 1 : 0);  // size counts the terminating NUL
  return value;
}

// The bundle: the session's config entry kBundleDirKey, else FLASHGEMM_BUNDLE_DIR, else this library's directory.
std::string BundleDir(const OrtApi* api, const OrtSessionOptions* options) {
  if (std::string dir = SessionConfig(api, options, kBundleDirKey); !dir.empty()) return Absolute(dir);
  if (const char* env = std::getenv("FLASHGEMM_BUNDLE_DIR"); env && *env) return Absolute(env);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&RegisterCustomOps), &info) && info.dli_fname) {
    std::string path = info.dli_fname;
    size_t slash = path.rfind('/');
    return Absolute(slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash));
  }
  return Absolute(".");
}

// ORT dlopens us RTLD_LOCAL, and TVM dlopens kernels RTLD_LOCAL with no DT_NEEDED: their error path
// (TVMFFIErrorSetRaisedFromCStrParts) and context symbols resolve from the global scope only. Promote the
// already-loaded TVM libraries (our DT_NEEDED) to it; RTLD_NOLOAD never loads a second copy.
void PromoteTvmLibsToGlobal() {
  for (const char* soname : {"libtvm_ffi.so", "libtvm_runtime.so"}) dlopen(soname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
#ifdef FLASHGEMM_WITH_CUDA
  dlopen("libtvm_runtime_cuda.so", RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
#endif
}

// One bundle and one domain per bundle directory, created once and never freed: sessions may outlive any
// owner we could give them, and static destructors may run after ORT is gone. (OrtCustomOp has no virtual
// destructor either.) Keyed by directory so that the bundle can differ between registrations.
struct Registered {
  const flashgemm::Bundle* bundle;
  OrtCustomOpDomain* domain;
};

// Whether this ORT ("1.22.0") runs a custom op's shape inference safely: from 1.24 on (see FusedGemmSoftmaxOp).
bool ShapeInferenceWorks(const char* version) {
  int major = 0, minor = 0;
  if (version == nullptr || std::sscanf(version, "%d.%d", &major, &minor) != 2) return false;
  return major > 1 || (major == 1 && minor >= 24);
}

Registered RegisterFor(bool infer_shape, const std::string& dir) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Registered>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(dir); it != cache->end()) return it->second;

  const flashgemm::Bundle* bundle = flashgemm::Bundle::Load(dir, kCudaBuild).release();  // throws BundleError
  // ORT infers P's type from the registrations: one overload per T (see op.h).
  const char* ep = bundle->device() == "cuda" ? "CUDAExecutionProvider" : "CPUExecutionProvider";
  auto* domain = new Ort::CustomOpDomain("flashgemm");
  for (bool attention : {false, true})
    for (auto t : {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16})
      domain->Add(new flashgemm::FusedOp(t, ep, bundle, infer_shape, attention));
  Registered r{bundle, *domain};
  cache->emplace(dir, r);
  return r;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // ORT_API_VERSION is that of the headers we compiled with; any ORT at least that new serves it.
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr)  // API 1 always exists and has CreateStatus
    return api_base->GetApi(1)->CreateStatus(
        ORT_FAIL, ("flashgemm: ONNX Runtime is older than the headers this library was built with (ORT API " +
                   std::to_string(ORT_API_VERSION) + ")")
                      .c_str());
  Ort::InitApi(api);
  PromoteTvmLibsToGlobal();
  try {
    Registered r = RegisterFor(ShapeInferenceWorks(api_base->GetVersionString()), BundleDir(api, options));
    return api->AddCustomOpDomain(options, r.domain);
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, e.what());
  }
}
