#include "bundle.h"

#include <tvm/ffi/extra/json.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

#include "cpu_parallel.h"
#include "elf_check.h"

namespace flashgemm {
namespace {

// flashgemm/bundle/kernel_library.py:MANIFEST_FORMAT. Format 2 added FusedAttention's kernels (entries with "op");
// format 3 gave them their trailing zero_nan_rows argument; format 4 lists several kernel libraries under "kernels"
// (one compiled a part, in parallel); format 5's FusedAttention kernels take any row strides of Q, K, V and O (the
// op's BSNH views); format 6 adds FusedAttention's split-N kernels (entries with "split": a workspace argument, which
// an older library would not pass). An older bundle still serves FusedGemmSoftmax; its FusedAttention kernels
// (another signature) are left out before format 3, so a FusedAttention node asks for a rebuild, and serve only
// compact tensors before 5.
constexpr int64_t kManifestFormat = 6;
// How to get a good bundle: a CPU-only library serves llvm bundles; a CUDA one is meant for the local GPU's.
std::string FixHint(bool cuda_build) {
  return std::string("run flashgemm-build --target ") + (cuda_build ? "auto (the local GPU's arch)" : "llvm") +
         " (or name a built bundle: session config entry flashgemm.bundle_dir, or FLASHGEMM_BUNDLE_DIR)";
}

namespace json = tvm::ffi::json;

// A float32's bits: scale-specialized twins match the op's scale attribute exactly (-0.0 and 0.0 differ; no NaN
// reaches here, the manifest's scale is checked finite)
int64_t ScaleBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

// Typed access to one manifest field, with an error that says which field of which file is wrong.
class Fields {
 public:
  Fields(json::Object obj, std::string where, std::string path, std::string fix)
      : obj_(std::move(obj)), where_(std::move(where)), path_(std::move(path)), fix_(std::move(fix)) {}

  tvm::ffi::Any Get(const char* key) const {
    std::optional<tvm::ffi::Any> v = obj_.Get(tvm::ffi::String(key));
    if (!v.has_value()) Fail(key, "is missing");
    return *v;
  }
  std::string Str(const char* key) const {
    auto v = Get(key).as<tvm::ffi::String>();
    if (!v) Fail(key, "is not a string");
    return std::string(*v);
  }
  int64_t Int(const char* key) const {
    tvm::ffi::Any v = Get(key);
    if (auto b = v.as<bool>()) return *b;  // manifest writes 0/1, accept true/false too
    auto i = v.as<int64_t>();
    if (!i) Fail(key, "is not an integer");
    return *i;
  }
  [[noreturn]] void Fail(const char* key, const char* what) const {
    throw BundleError("flashgemm: corrupt manifest " + path_ + ": " + where_ + "\"" + key + "\" " + what +
                      ". Rebuild the bundle: " + fix_);
  }

 private:
  json::Object obj_;
  std::string where_, path_, fix_;
};

std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string VariantKey::Key() const {
  return std::string(bf16 ? "bf16" : "f16") + "_tb" + (trans_b ? "1" : "0") + "_bias" + (has_bias ? "1" : "0") +
         "_mask" + mask + "_causal" + (causal_fill ? "fill" : causal ? "1" : "0");
}

std::unique_ptr<Bundle> Bundle::Load(const std::string& dir, bool cuda_build) {
  const std::string fix = FixHint(cuda_build);
  const std::string manifest_path = dir + "/manifest.json";
  bool ok = false;
  std::string text = ReadFile(manifest_path, &ok);
  if (!ok)
    throw BundleError("flashgemm: no kernel bundle in " + dir + " (" + manifest_path + " not found). To build it, " +
                      fix);
  tvm::ffi::String err;
  json::Value root = json::Parse(tvm::ffi::String(text), &err);
  if (!err.empty())
    throw BundleError("flashgemm: corrupt manifest " + manifest_path + ": " + std::string(err) +
                      ". Rebuild the bundle: " + fix);
  auto root_obj = root.as<json::Object>();
  if (!root_obj)
    throw BundleError("flashgemm: corrupt manifest " + manifest_path + ": not a JSON object. Rebuild the bundle: " + fix);
  Fields top(*root_obj, "", manifest_path, fix);

  const int64_t format = top.Int("format");
  if (format < 1 || format > kManifestFormat)
    throw BundleError("flashgemm: " + manifest_path + " has manifest format " + std::to_string(format) +
                      " but this library reads formats 1 to " + std::to_string(kManifestFormat) +
                      "; rebuild the bundle and the library together: " + fix);

  auto b = std::unique_ptr<Bundle>(new Bundle());
  b->dir_ = dir;
  b->device_ = top.Str("device");
  b->target_ = top.Str("target");
  if (b->device_ == "cuda" && !cuda_build)
    throw BundleError("flashgemm: bundle " + dir + " holds CUDA kernels (target " + top.Str("target") +
                      ") but this libflashgemm_ort.so was built without CUDA support; use a CPU bundle (" + FixHint(false) +
                      ") or rebuild the library with CUDA");
  if (b->device_ != "cpu" && b->device_ != "cuda")
    throw BundleError("flashgemm: " + manifest_path + ": unknown device \"" + b->device_ + "\". " + fix);
  // CPU kernels compiled for an ISA level (flashgemm/spaces/llvm.py: X86_LEVEL) would die of an illegal instruction on
  // a CPU without it: refuse the bundle instead. Older manifests (no "cpu") and other -mcpu names are not checked.
  if (root_obj->Get(tvm::ffi::String("cpu")).has_value() && top.Str("cpu") == "x86-64-v3") {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("x86-64-v3"))
      throw BundleError("flashgemm: the kernels in " + dir + " need an x86-64-v3 CPU (AVX2, FMA, F16C) and this one "
                        "lacks it; build the bundle on this machine: " + fix);
#else
    throw BundleError("flashgemm: the kernels in " + dir + " were built for x86-64-v3 CPUs, not this one; build the "
                      "bundle on this machine: " + fix);
#endif
  }

  // "kernels": the kernel library's file name, or (format 4) the names of the libraries the kernels were compiled
  // into, in parts and in parallel (flashgemm/bundle/kernel_library.py: library_parts)
  std::vector<std::string> so_paths;
  if (auto names = top.Get("kernels").as<json::Array>()) {
    for (size_t i = 0; i < names->size(); ++i) {
      auto name = (*names)[i].as<tvm::ffi::String>();
      if (!name) top.Fail("kernels", "is not a list of file names");
      so_paths.push_back(dir + "/" + std::string(*name));
    }
    if (so_paths.empty()) top.Fail("kernels", "is an empty list");
  } else {
    so_paths.push_back(dir + "/" + top.Str("kernels"));
  }
  for (const std::string& so_path : so_paths) {
    {
      std::ifstream probe(so_path);
      if (!probe)
        throw BundleError("flashgemm: kernel library " + so_path + " (named in " + manifest_path + ") not found. " +
                          "To rebuild the bundle, " + fix);
    }
    // dlopen of a truncated library dies of SIGBUS rather than failing: check that the file is whole first.
    if (std::string problem = ElfProblem(so_path); !problem.empty())
      throw BundleError("flashgemm: corrupt kernel library " + so_path + " (named in " + manifest_path + "): " +
                        problem + ". Rebuild the bundle: " + fix);
    try {
      b->modules_.push_back(tvm::ffi::Module::LoadFromFile(so_path));
    } catch (const std::exception& e) {
      throw BundleError("flashgemm: cannot load kernel library " + so_path + ": " + e.what() + ". " + fix);
    }
    if (b->device_ == "cpu") {
      if (std::string why = cpu_parallel::Install(so_path); !why.empty())
        std::fprintf(stderr, "flashgemm: %s: parallel loops stay on TVM's thread pool (%s)\n", so_path.c_str(),
                     why.c_str());
    }
  }
  const std::string so_names = so_paths.size() == 1 ? so_paths[0] : "the kernel libraries of " + dir;

  auto funcs = top.Get("functions").as<json::Array>();
  if (!funcs) top.Fail("functions", "is not an array");
  for (size_t i = 0; i < funcs->size(); ++i) {
    const std::string where = "functions[" + std::to_string(i) + "].";
    auto entry_obj = (*funcs)[i].as<json::Object>();
    if (!entry_obj)
      throw BundleError("flashgemm: corrupt manifest " + manifest_path + ": " + where + " is not an object. " + fix);
    Fields e(*entry_obj, where, manifest_path, fix);
    VariantKey v;
    const std::string dtype = e.Str("dtype");
    if (dtype != "float16" && dtype != "bfloat16") e.Fail("dtype", "is neither float16 nor bfloat16");
    v.bf16 = dtype == "bfloat16";
    v.trans_b = e.Int("trans_b") != 0;
    v.has_bias = e.Int("bias") != 0;
    v.mask = e.Str("mask");
    if (v.mask != "none" && v.mask != "add" && v.mask != "bool" && v.mask != "fill")
      e.Fail("mask", "is not none|add|bool|fill");
    v.causal = e.Int("causal") != 0;
    // causal_fill (absent before it): keys past the diagonal at the lowest logit rather than masked out
    if (entry_obj->Get(tvm::ffi::String("causal_fill")).has_value()) v.causal_fill = e.Int("causal_fill") != 0;

    // op (absent before format 2): which operator the kernel computes
    std::string op = "FusedGemmSoftmax";
    if (entry_obj->Get(tvm::ffi::String("op")).has_value()) op = e.Str("op");
    if (op != "FusedGemmSoftmax" && op != "FusedAttention") e.Fail("op", "is neither FusedGemmSoftmax nor FusedAttention");
    if (op == "FusedAttention" && format < 3) continue;

    Kernel k;
    k.name = e.Str("name");
    k.tuned = e.Int("tuned") != 0;
    // schedule (absent in older manifests, whose shape-specific kernels were all tuned)
    if (entry_obj->Get(tvm::ffi::String("schedule")).has_value()) {
      k.schedule = e.Str("schedule");
      if (k.schedule != "tuned" && k.schedule != "default" && k.schedule != "generic")
        e.Fail("schedule", "is not tuned|default|generic");
      if (k.tuned != (k.schedule == "tuned")) e.Fail("schedule", "disagrees with \"tuned\"");
    } else {
      k.schedule = k.tuned ? "tuned" : "generic";
    }
    if (entry_obj->Get(tvm::ffi::String("align")).has_value()) k.align = e.Int("align");  // older manifests: 2
    tvm::ffi::Optional<tvm::ffi::Function> f;
    for (const tvm::ffi::Module& m : b->modules_) {
      f = m->GetFunction(k.name, /*query_imports=*/true);
      if (f.has_value()) break;
    }
    if (!f.has_value())
      throw BundleError("flashgemm: " + so_names + " has no function " + k.name + " listed in " + manifest_path +
                        "; the two files are out of sync. " + fix);
    k.fn = *f;
    k.row_strides = op == "FusedAttention" && format >= 5;
    if (op == "FusedAttention") {
      if (k.schedule == "generic") {
        b->attention_generic_.emplace(v.Key(), std::move(k));
        continue;
      }
      // the tensor-core kernels: tiles a head size (K == D), any batch, each N up to its max_n; "default" (the
      // shipped tiles) or "tuned" (a tile tuned at one length: kernel_library.attention_tensor_core_kernels)
      if (k.schedule != "default" && k.schedule != "tuned")
        e.Fail("schedule", "of a FusedAttention kernel is not generic, default or tuned");
      const int64_t head_size = e.Int("head_size");
      if (head_size < 1) e.Fail("head_size", "is not a positive integer");
      k.head_size = head_size;
      if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("n_multiple"));
          q.has_value() && !(*q == nullptr)) {
        if (!q->as<int64_t>() || *q->as<int64_t>() < 1) e.Fail("n_multiple", "is not a positive integer");
        k.n_multiple = *q->as<int64_t>();
      }
      // max_n (absent or null: any N): a tile for short sequences, served only to calls with N <= max_n
      if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("max_n"));
          q.has_value() && !(*q == nullptr)) {
        if (!q->as<int64_t>() || *q->as<int64_t>() < 1) e.Fail("max_n", "is not a positive integer");
        k.max_n = *q->as<int64_t>();
      }
      if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("zero_nan_rows"));
          q.has_value() && !(*q == nullptr)) {
        if (!q->as<int64_t>() || (*q->as<int64_t>() != 0 && *q->as<int64_t>() != 1))
          e.Fail("zero_nan_rows", "is neither 0 nor 1");
        k.zero_nan_rows = static_cast<int>(*q->as<int64_t>());
      }
      // split (absent or null: none): [rows, chunk] of a split-N kernel, kept apart (FindAttentionSplit)
      if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("split"));
          q.has_value() && !(*q == nullptr)) {
        auto pair = q->as<json::Array>();
        std::optional<int64_t> rows, chunk;
        if (pair && pair->size() == 2) {
          rows = (*pair)[0].as<int64_t>();
          chunk = (*pair)[1].as<int64_t>();
        }
        if (!rows || !chunk || *rows < 1 || *chunk < 1) e.Fail("split", "is not [rows, chunk] of positive integers");
        k.split_rows = *rows;
        k.split_chunk = *chunk;
        b->attention_split_[v.Key()].push_back(std::move(k));
        continue;
      }
      b->attention_head_size_[v.Key()].push_back(std::move(k));
    } else if (std::optional<tvm::ffi::Any> hs = entry_obj->Get(tvm::ffi::String("head_size"));
               hs.has_value() && !(*hs == nullptr)) {
      // FusedGemmSoftmax's tensor-core kernels: one a K, any batch and length
      if (k.schedule != "default") e.Fail("schedule", "of a kernel with a head_size is not default");
      k.head_size = e.Int("head_size");
      if (k.head_size < 1) e.Fail("head_size", "is not a positive integer");
      k.min_n = e.Int("min_n");
      if (k.min_n < 1) e.Fail("min_n", "is not a positive integer");
      k.min_m = e.Int("min_m");
      if (k.min_m < 1) e.Fail("min_m", "is not a positive integer");
      k.first_max_n = e.Int("first_max_n");
      if (k.first_max_n < k.min_n) e.Fail("first_max_n", "is less than min_n");
      if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("n_multiple"));
          q.has_value() && !(*q == nullptr)) {
        if (!q->as<int64_t>() || *q->as<int64_t>() < 1) e.Fail("n_multiple", "is not a positive integer");
        k.n_multiple = *q->as<int64_t>();
      }
      b->tensor_core_[v.Key()].push_back(std::move(k));
    } else if (k.schedule != "generic") {
      auto sizes = e.Get("sizes").as<json::Array>();
      if (!sizes || sizes->size() != 5) e.Fail("sizes", "is not a list of 5 integers");
      Sizes s{};
      for (size_t j = 0; j < 5; ++j) {
        auto d = (*sizes)[j].as<int64_t>();
        if (!d) e.Fail("sizes", "is not a list of 5 integers");
        s[j] = *d;
      }
      // any_batch (absent in older manifests: false): the kernel's batch dims are symbolic
      std::optional<tvm::ffi::Any> any = entry_obj->Get(tvm::ffi::String("any_batch"));
      const bool any_batch = any.has_value() && e.Int("any_batch") != 0;
      // fixed_batch (absent or null in older manifests): [dim, value] of an any-batch twin with that batch dim static
      std::optional<tvm::ffi::Any> fixed = entry_obj->Get(tvm::ffi::String("fixed_batch"));
      if (fixed.has_value() && !(*fixed == nullptr)) {
        auto pair = fixed->as<json::Array>();
        std::optional<int64_t> dim, value;
        if (pair && pair->size() == 2) {
          dim = (*pair)[0].as<int64_t>();
          value = (*pair)[1].as<int64_t>();
        }
        if (!dim || !value || (*dim != 0 && *dim != 1) || *value < 1)
          e.Fail("fixed_batch", "is not [0 or 1, a positive size]");
        if (!any_batch) e.Fail("fixed_batch", "is set on a kernel that is not any_batch");
        k.fixed_dim = static_cast<int>(*dim);
        k.fixed_value = *value;
      }
      // scale (absent or null in older manifests): a twin specialized on this float32 scale
      std::optional<tvm::ffi::Any> scale = entry_obj->Get(tvm::ffi::String("scale"));
      if (scale.has_value() && !(*scale == nullptr)) {
        std::optional<double> value = scale->as<double>();
        if (!value) {
          if (auto i = scale->as<int64_t>()) value = static_cast<double>(*i);
        }
        if (!value || !std::isfinite(*value)) e.Fail("scale", "is not a finite number");
        if (k.fixed_dim < 0) e.Fail("scale", "is set on a kernel that is not a fixed-batch twin");
        k.has_scale = true;
        k.scale = static_cast<float>(*value);
      }
      // any_length (absent in older manifests: false): serves every M <= sizes[2], N <= sizes[3] with K == sizes[4],
      // for any batch (the batch entries of "sizes" mean nothing)
      std::optional<tvm::ffi::Any> any_length = entry_obj->Get(tvm::ffi::String("any_length"));
      if (any_length.has_value() && e.Int("any_length") != 0) {
        if (!any_batch) e.Fail("any_length", "is set on a kernel that is not any_batch");
        if (k.has_scale) e.Fail("any_length", "is set on a kernel specialized on a scale (\"scale\" must be null)");
        if (s[2] < 1 || s[3] < 1 || s[4] < 1)
          e.Fail("sizes", "of an any_length kernel does not bound M and N (entries 2 and 3) or give K (entry 4): each "
                          "must be at least 1");
        k.any_length = true;
        k.max_m = s[2];
        k.max_n = s[3];
        k.k = s[4];
        // n_multiple (absent or null in older manifests: 1): the kernel serves only the calls whose N it divides
        std::optional<tvm::ffi::Any> n_multiple = entry_obj->Get(tvm::ffi::String("n_multiple"));
        if (n_multiple.has_value() && !(*n_multiple == nullptr)) {
          std::optional<int64_t> q = n_multiple->as<int64_t>();
          if (!q || *q < 1) e.Fail("n_multiple", "is not a positive integer");
          k.n_multiple = *q;
        }
        b->any_length_[v.Key()].push_back(std::move(k));
      } else if (std::optional<tvm::ffi::Any> q = entry_obj->Get(tvm::ffi::String("n_multiple"));
                 q.has_value() && !(*q == nullptr) && !(q->as<int64_t>() && *q->as<int64_t>() == 1)) {
        e.Fail("n_multiple", "is set on a kernel that is not any_length (it must be 1 or null)");
      } else if (k.has_scale)
        b->tuned_fixed_batch_scale_.emplace(
            std::make_pair(v.Key(), std::array<int64_t, 6>{k.fixed_dim, k.fixed_value, s[2], s[3], s[4],
                                                            ScaleBits(k.scale)}),
            std::move(k));
      else if (k.fixed_dim >= 0)
        b->tuned_fixed_batch_.emplace(
            std::make_pair(v.Key(), std::array<int64_t, 5>{k.fixed_dim, k.fixed_value, s[2], s[3], s[4]}),
            std::move(k));
      else if (any_batch)
        b->tuned_any_batch_.emplace(std::make_pair(v.Key(), std::array<int64_t, 3>{s[2], s[3], s[4]}), std::move(k));
      else
        b->tuned_.emplace(std::make_pair(v.Key(), s), std::move(k));
    } else {
      b->generic_.emplace(v.Key(), std::move(k));
    }
  }
  // FindAttention takes the first tensor-core kernel that serves the call: the smallest max_n first, any N last
  for (auto& [key, kernels] : b->attention_head_size_)
    std::stable_sort(kernels.begin(), kernels.end(), [](const Kernel& x, const Kernel& y) {
      auto bound = [](const Kernel& q) { return q.max_n > 0 ? q.max_n : std::numeric_limits<int64_t>::max(); };
      return bound(x) < bound(y);
    });
  // Find takes the first any-length kernel that serves the call: order them by preference once, here (the smallest
  // bound, then the most specialized twin: a static batch dim and N's multiple, then tuned before default).
  for (auto& [key, kernels] : b->any_length_)
    std::stable_sort(kernels.begin(), kernels.end(), [](const Kernel& x, const Kernel& y) {
      auto rank = [](const Kernel& q) {
        return std::make_tuple(q.max_m * q.max_n, -int(q.fixed_dim >= 0) - int(q.n_multiple > 1),
                               q.schedule != "tuned");
      };
      return rank(x) < rank(y);
    });
  return b;
}

const Kernel* Bundle::FindAttention(const std::string& variant_key, int64_t k, int64_t d, int64_t n,
                                    int64_t ptr_align, bool zero_nan_rows) const {
  if (auto t = attention_head_size_.find(variant_key); t != attention_head_size_.end() && k == d)
    for (const Kernel& kernel : t->second)
      if (kernel.head_size == k && kernel.align <= ptr_align && n % kernel.n_multiple == 0 &&
          (kernel.max_n == 0 || n <= kernel.max_n) &&
          (kernel.zero_nan_rows < 0 || kernel.zero_nan_rows == int(zero_nan_rows)))
        return &kernel;
  auto g = attention_generic_.find(variant_key);
  return g == attention_generic_.end() ? nullptr : &g->second;
}

const Kernel* Bundle::FindAttentionSplit(const std::string& variant_key, int64_t k, int64_t d, int64_t m, int64_t n,
                                         int64_t ptr_align, bool zero_nan_rows) const {
  if (auto t = attention_split_.find(variant_key); t != attention_split_.end() && k == d)
    for (const Kernel& kernel : t->second)
      if (kernel.head_size == k && m <= kernel.split_rows && kernel.align <= ptr_align && n % kernel.n_multiple == 0 &&
          (kernel.zero_nan_rows < 0 || kernel.zero_nan_rows == int(zero_nan_rows)))
        return &kernel;
  return nullptr;
}

const Kernel* Bundle::Find(const std::string& variant_key, const Sizes& sizes, int64_t ptr_align, float scale) const {
  const Kernel* tensor_core = nullptr;
  if (auto c = tensor_core_.find(variant_key); c != tensor_core_.end()) {
    for (const Kernel& k : c->second) {
      // its grid's y and z are B1 and B0 (CUDA's limit on those: 65535)
      if (k.head_size == sizes[4] && k.align <= ptr_align && sizes[3] % k.n_multiple == 0 && sizes[0] <= 65535 &&
          sizes[1] <= 65535) {
        tensor_core = &k;
        break;
      }
    }
  }
  // ahead of the default-schedule and any-length kernels from min_n and min_m on, of the tuned ones up to first_max_n
  const bool ahead = tensor_core && sizes[3] >= tensor_core->min_n && sizes[2] >= tensor_core->min_m;
  if (ahead && sizes[3] <= tensor_core->first_max_n) return tensor_core;
  auto serves = [&](const Kernel& k) { return k.align <= ptr_align && (!ahead || k.tuned); };
  auto t = tuned_.find({variant_key, sizes});
  if (t != tuned_.end() && serves(t->second)) return &t->second;
  for (int64_t dim : {0, 1}) {
    auto f = tuned_fixed_batch_scale_.find(
        {variant_key, {dim, sizes[dim], sizes[2], sizes[3], sizes[4], ScaleBits(scale)}});
    if (f != tuned_fixed_batch_scale_.end() && serves(f->second)) return &f->second;
  }
  for (int64_t dim : {0, 1}) {
    auto f = tuned_fixed_batch_.find({variant_key, {dim, sizes[dim], sizes[2], sizes[3], sizes[4]}});
    if (f != tuned_fixed_batch_.end() && serves(f->second)) return &f->second;
  }
  auto a = tuned_any_batch_.find({variant_key, {sizes[2], sizes[3], sizes[4]}});
  if (a != tuned_any_batch_.end() && serves(a->second)) return &a->second;
  if (auto l = any_length_.find(variant_key); l != any_length_.end()) {
    for (const Kernel& k : l->second) {
      if (k.k == sizes[4] && k.max_m >= sizes[2] && k.max_n >= sizes[3] && serves(k) &&
          (k.fixed_dim < 0 || sizes[k.fixed_dim] == k.fixed_value) && sizes[3] % k.n_multiple == 0)
        return &k;
    }
  }
  if (tensor_core) return tensor_core;
  auto g = generic_.find(variant_key);
  return g == generic_.end() ? nullptr : &g->second;
}

}  // namespace flashgemm
