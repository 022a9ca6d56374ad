// The kernel bundle (flashgemm/bundle/kernel_library.py:export_bundle): manifest.json + flashgemm_kernels.so.
// Loaded once when RegisterCustomOps runs; immutable afterwards, so lookups need no lock.
#pragma once

#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace flashgemm {

using Sizes = std::array<int64_t, 5>;  // canonical [B0, B1, M, N, K]

// Compile-time choices of a kernel; Key() is flashgemm.op.variant.Variant.key.
struct VariantKey {
  bool bf16 = false;  // else float16
  bool trans_b = false;
  bool has_bias = false;
  std::string mask = "none";  // none | add | bool | fill (bool, a false entry the lowest logit)
  bool causal = false;
  bool causal_fill = false;  // with causal: keys past the diagonal at the lowest logit (s + lowest), not masked out

  std::string Key() const;
};

struct Kernel {
  tvm::ffi::Function fn;
  std::string name;
  bool tuned = false;
  std::string schedule = "generic";  // manifest "schedule": tuned | default (untuned, shape-specific) | generic
  int64_t align = 2;  // bytes every pointer argument must be aligned to (manifest "align")
  int fixed_dim = -1;  // manifest "fixed_batch" [dim, value]: an any-batch twin with that batch dim static (-1: none)
  int64_t fixed_value = 0;
  bool has_scale = false;  // manifest "scale": a fixed-batch twin specialized on this scale, served only to it
  float scale = 0.0f;
  // manifest "any_length": serves every call of its variant with M <= max_m, N <= max_n and K == k (any batch);
  // a FusedAttention tensor-core kernel's max_n (0: any N) bounds the N it serves
  bool any_length = false;
  int64_t max_m = 0, max_n = 0, k = 0;
  int64_t n_multiple = 1;  // manifest "n_multiple" (any-length kernels): serves only the calls whose N it divides
  // manifest "head_size" (the tensor-core kernels): serves K == head_size (FusedAttention's: K == D == head_size)
  int64_t head_size = 0;
  // manifest "zero_nan_rows" (FusedAttention's tensor-core kernels; absent or null: -1, any): a kernel specialized
  // on the attribute's value, served only to nodes with that value
  int zero_nan_rows = -1;
  // manifest "min_n", "first_max_n", "min_m" (FusedGemmSoftmax's tensor-core kernels): preferred to every other
  // kernel where min_n <= N <= first_max_n and M >= min_m, to all but the tuned ones where N > first_max_n
  int64_t min_n = 0, first_max_n = 0, min_m = 0;
  // FusedAttention's kernels from manifest format 5 on: any row strides (BSNH views); older ones compact tensors only
  bool row_strides = false;
  // manifest "split" [rows, chunk] (FusedAttention's split-N kernels, flash-decoding): serves calls of M <= rows, its
  // splits of N in chunks of `chunk` columns, with a float32 workspace (the op's: FusedKernel::SplitCount); 0: none
  int64_t split_rows = 0, split_chunk = 0;
};

// Thrown for every bundle problem; the message names the path and how to fix it.
class BundleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Bundle {
 public:
  // Reads dir/manifest.json, checks format and device, loads the kernels .so and resolves every listed function.
  // cuda_build: whether this library was built with FLASHGEMM_WITH_CUDA (a "cuda" bundle needs it).
  static std::unique_ptr<Bundle> Load(const std::string& dir, bool cuda_build);

  // The tensor-core kernel of the call's K where min_n <= N <= first_max_n and M >= min_m (past first_max_n only a
  // tuned kernel of the shape comes before it); else the shape's own kernel, tuned or default-schedule (exact sizes;
  // else an any-batch twin whose static batch dim matches, the one specialized on `scale` (bit for bit) first; else
  // one for any batch with these M, N, K), else an any-length kernel whose bound holds M and N and whose K is the
  // call's (the smallest bound; at equal bounds a matching fixed-batch twin before a plain one, tuned before
  // default), else the tensor-core kernel of the call's K (any N), else the generic one of the variant, else nullptr.
  // ptr_align: the largest power of two dividing every pointer argument; a kernel compiled to assume more (tuned
  // CUDA kernels: 64 bytes) is skipped, the generic kernel assumes nothing.
  const Kernel* Find(const std::string& variant_key, const Sizes& sizes, int64_t ptr_align, float scale) const;
  // FusedAttention's kernel of the variant: its tensor-core kernel for head size k when Q's and V's head sizes are
  // both k (k == d), every pointer is aligned as it assumes, N is a multiple of its n_multiple and the node's
  // zero_nan_rows is the kernel's; else the generic one; else nullptr.
  const Kernel* FindAttention(const std::string& variant_key, int64_t k, int64_t d, int64_t n, int64_t ptr_align,
                              bool zero_nan_rows) const;
  // FusedAttention's split-N kernel of the variant for head size k (k == d) serving M = m rows, on FindAttention's
  // terms (alignment, N's multiple, zero_nan_rows); else nullptr. Whether to split is the caller's choice.
  const Kernel* FindAttentionSplit(const std::string& variant_key, int64_t k, int64_t d, int64_t m, int64_t n,
                                   int64_t ptr_align, bool zero_nan_rows) const;

  const std::string& dir() const { return dir_; }
  const std::string& device() const { return device_; }  // "cpu" | "cuda"
  const std::string& target() const { return target_; }  // "llvm" | "sm_80" | "sm_89" | "sm_90"

 private:
  std::string dir_, device_, target_;
  std::vector<tvm::ffi::Module> modules_;  // keep the kernel libraries loaded
  std::unordered_map<std::string, Kernel> generic_;
  std::unordered_map<std::string, std::vector<Kernel>> tensor_core_;  // FusedGemmSoftmax's, with a "head_size"
  std::unordered_map<std::string, Kernel> attention_generic_;  // manifest "op": "FusedAttention"
  std::unordered_map<std::string, std::vector<Kernel>> attention_head_size_;  // ... with a "head_size"
  std::unordered_map<std::string, std::vector<Kernel>> attention_split_;  // ... with a "split"
  std::map<std::pair<std::string, Sizes>, Kernel> tuned_;  // exact [B0, B1, M, N, K]
  std::map<std::pair<std::string, std::array<int64_t, 3>>, Kernel> tuned_any_batch_;  // [M, N, K]
  // any-batch twins with one batch dim static (manifest "fixed_batch"), preferred for the calls with that value:
  // [dim, value, M, N, K]
  std::map<std::pair<std::string, std::array<int64_t, 5>>, Kernel> tuned_fixed_batch_;
  // those twins specialized on a scale (manifest "scale"): [dim, value, M, N, K, the scale's float32 bits]
  std::map<std::pair<std::string, std::array<int64_t, 6>>, Kernel> tuned_fixed_batch_scale_;
  // any-length kernels (manifest "any_length") per variant key, sorted at load in the order Find prefers them:
  // smallest max_m * max_n first, then fixed-batch twins before plain ones, then tuned before default; Find takes
  // the first that serves the call
  std::unordered_map<std::string, std::vector<Kernel>> any_length_;
};

}  // namespace flashgemm
