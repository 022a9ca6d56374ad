#include "op.h"

#include <tvm/ffi/container/tensor.h>  // AnyView from DLTensor*
#include <tvm/ffi/extra/c_env_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "canonical.h"
#include "cpu_parallel.h"
#include "cuda_rt.h"

namespace flashgemm {
namespace {

constexpr auto kF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
constexpr auto kBF16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
constexpr auto kBool = ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;

const char* TypeName(ONNXTensorElementDataType t) {
  switch (t) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64: return "int64";
    default: return "an unsupported type";
  }
}

// One input as seen by Compute (absent optional inputs have present == false).
struct Input {
  explicit Input(const char* n) : name(n) {}
  const char* name;
  bool present = false;
  ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  Shape shape;
  const void* data = nullptr;

  std::string Describe() const {
    return std::string(name) + ": " + (present ? std::string(TypeName(type)) + " " + ShapeStr(shape) : "absent");
  }
};

DLDataType DLType(ONNXTensorElementDataType t) {
  if (t == kBool) return DLDataType{kDLUInt, 8, 1};  // ORT bools are one byte; kernels read uint8 != 0
  return t == kBF16 ? DLDataType{kDLBfloat, 16, 1} : DLDataType{kDLFloat, 16, 1};
}

// A DLTensor view (no copy, not owned) with explicit shape and strides, kept alive for the call.
struct View {
  std::array<int64_t, 4> shape, strides;
  DLTensor t{};
  View(const void* data, DLDevice dev, DLDataType dtype, std::array<int64_t, 4> shape_, std::array<int64_t, 4> st)
      : shape(shape_), strides(st) {
    t.data = const_cast<void*>(data);
    t.device = dev;
    t.ndim = 4;
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.data();
    t.byte_offset = 0;
  }
  View(const View&) = delete;
};

// Reads an optional attribute; "absent" gives the default, a present attribute of the wrong type is an error
// (silently falling back to the default would give wrong answers).
template <typename T>
T Attr(const OrtKernelInfo* info, const char* name, T dflt) {
  T v{};
  OrtStatus* st;
  if constexpr (std::is_same_v<T, float>)
    st = Ort::GetApi().KernelInfoGetAttribute_float(info, name, &v);
  else
    st = Ort::GetApi().KernelInfoGetAttribute_int64(info, name, &v);
  if (st == nullptr) return v;
  Ort::Status status(st);
  if (status.GetErrorMessage().find("No attribute") != std::string::npos) return dflt;
  throw Ort::Exception("attribute " + std::string(name) + ": " + status.GetErrorMessage(), ORT_INVALID_ARGUMENT);
}

bool BoolAttr(const OrtKernelInfo* info, const char* name) {
  int64_t v = Attr<int64_t>(info, name, 0);
  if (v != 0 && v != 1)
    throw Ort::Exception("attribute " + std::string(name) + " must be 0 or 1, got " + std::to_string(v),
                         ORT_INVALID_ARGUMENT);
  return v == 1;
}

// FusedAttention's bsnh: absent, or four 0/1 flags for Q, K, V, O (flashgemm/ort/op_schema.py)
Bsnh BsnhAttr(const OrtKernelInfo* info) {
  size_t n = 0;
  OrtStatus* st = Ort::GetApi().KernelInfoGetAttributeArray_int64(info, "bsnh", nullptr, &n);
  if (st != nullptr) {
    Ort::Status status(st);
    if (status.GetErrorMessage().find("No attribute") != std::string::npos) return {false, false, false, false};
    throw Ort::Exception("attribute bsnh: " + status.GetErrorMessage(), ORT_INVALID_ARGUMENT);
  }
  std::vector<int64_t> v(n);
  if (n) Ort::ThrowOnError(Ort::GetApi().KernelInfoGetAttributeArray_int64(info, "bsnh", v.data(), &n));
  bool ok = v.size() == 4;
  for (int64_t x : v) ok = ok && (x == 0 || x == 1);
  if (!ok)
    throw Ort::Exception("attribute bsnh must be four 0/1 flags (Q, K, V, O), got " + std::to_string(v.size()) +
                             " value(s)",
                         ORT_INVALID_ARGUMENT);
  return {v[0] == 1, v[1] == 1, v[2] == 1, v[3] == 1};
}

// A scale for the verbose dispatch line: 9 significant digits read back as the same float32
std::string ScaleText(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(x));
  return buf;
}

#ifdef FLASHGEMM_WITH_CUDA
// "" when the bundle's kernels run on this GPU, else why not. A cubin built for sm_XY runs on compute capability
// X.Z with Z >= Y (same major): an sm_80 bundle serves an sm_86 GPU, an sm_90 one serves no Ampere or Ada GPU.
// Checked once per (bundle, device): the answer cannot change while the process lives.
std::string CheckArch(const Bundle& bundle, int device) {
  static std::mutex mu;
  static std::map<std::pair<const Bundle*, int>, std::string> checked;
  std::lock_guard<std::mutex> lock(mu);
  auto it = checked.find({&bundle, device});
  if (it != checked.end()) return it->second;
  int major = 0, minor = 0;
  std::string err = cuda_rt::ComputeCapability(device, &major, &minor);
  const std::string& t = bundle.target();  // sm_XY
  if (err.empty() && (t.size() != 5 || t.compare(0, 3, "sm_") != 0 || major != t[3] - '0' || minor < t[4] - '0'))
    err = "the kernel bundle in " + bundle.dir() + " was built for " + t + " but GPU " + std::to_string(device) +
          " is sm_" + std::to_string(major) + std::to_string(minor) +
          "; build one for this GPU: flashgemm-build --target auto (or --target sm_" + std::to_string(major) +
          std::to_string(minor) + ")";
  return checked[{&bundle, device}] = err;
}

// The split-N kernels' splits (FindAttentionSplit): a call whose B0 B1 blocks of one row tile leave SMs idle (a
// decoder's generation step) splits N so that every SM gets kSplitBlocksPerSm blocks, each split at least
// kSplitMinChunks chunks (its copies' pipeline); 1 (no split) where the tiles alone fill the GPU or N is too short.
// Two blocks an SM: the fastest of 2 to 64 splits at 1 x 32 heads x 4096 keys on the H200 (8 splits, 26.8 us; 13,
// three an SM, 31.6; benchmarks/split_n_ab.py, BENCHMARKS.md "Generation steps").
constexpr int64_t kSplitBlocksPerSm = 2, kSplitMinChunks = 2;
int64_t SplitCount(int64_t blocks, int64_t n, int64_t chunk, int sms) {
  if (blocks >= sms) return 1;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t s = std::min((kSplitBlocksPerSm * sms + blocks - 1) / blocks, chunks / kSplitMinChunks);
  if (s < 2) return 1;
  const int64_t per = (chunks + s - 1) / s;
  return (chunks + per - 1) / per;  // (no empty split)
}
#endif

}  // namespace

FusedKernel::FusedKernel(const OrtKernelInfo* info, const Bundle& bundle, bool attention)
    : bundle_(bundle), attention_(attention) {
  std::string name;
  try {
    name = Ort::ConstKernelInfo(info).GetNodeName();
  } catch (const Ort::Exception&) {
  }
  node_ = std::string(attention ? kAttentionOpName : kOpName) + " (node '" + name + "')";
  try {
    scale_ = Attr<float>(info, "scale", 1.0f);
    // A NaN or infinite scale makes every unmasked logit NaN or infinite: rows of NaN that no input caused. It is a
    // model error, so the session fails to load rather than every call returning NaN.
    if (!std::isfinite(scale_))
      throw Ort::Exception("attribute scale is " + ScaleText(scale_) +
                               ": it must be a finite number (fix the value in the model)",
                           ORT_INVALID_ARGUMENT);
    trans_b_ = BoolAttr(info, "transB");
    causal_ = BoolAttr(info, "causal");
    mask_fill_ = BoolAttr(info, "mask_fill");
    causal_fill_ = BoolAttr(info, "causal_fill");
    if (causal_fill_ && !causal_)
      throw Ort::Exception("attribute causal_fill puts the keys past the causal diagonal at the lowest logit: it needs "
                           "causal=1 (set causal, or drop causal_fill)",
                           ORT_INVALID_ARGUMENT);
    if (attention_) {
      zero_nan_rows_ = BoolAttr(info, "zero_nan_rows");
      bsnh_ = BsnhAttr(info);
      if (bsnh_[1] && !trans_b_)
        throw Ort::Exception("attribute bsnh flags K as [batch, sequence, heads, head size], which needs transB=1",
                             ORT_INVALID_ARGUMENT);
      packed_qkv_ = BoolAttr(info, "packed_qkv");
      if (packed_qkv_ && !(bsnh_[0] && bsnh_[1] && bsnh_[2]))
        throw Ort::Exception("attribute packed_qkv reads Q, K and V as [batch, sequence, heads, head size] slices of "
                             "one tensor: it needs bsnh = [1, 1, 1, 0 or 1] and transB=1",
                             ORT_INVALID_ARGUMENT);
    }
  } catch (const Ort::Exception& e) {
    throw Ort::Exception(node_ + ": " + e.what(), ORT_INVALID_ARGUMENT);
  }
  const char* v = std::getenv("FLASHGEMM_VERBOSE");
  verbose_ = v && std::strcmp(v, "0") != 0 && *v;
}

OrtStatusPtr FusedKernel::ComputeV2(OrtKernelContext* ctx) const {
  try {
    return Compute(ctx).release();
  } catch (const std::exception& e) {  // Ort::Exception, tvm::ffi::Error, std::bad_alloc, ...
    return Ort::Status((node_ + ": " + e.what()).c_str(), ORT_RUNTIME_EXCEPTION).release();
  }
}

Ort::Status FusedKernel::Compute(OrtKernelContext* raw_ctx) const {
  Ort::KernelContext ctx(raw_ctx);
  // slots: A (Q), B (K), V (FusedAttention only), bias, mask
  Input in[5] = {Input(attention_ ? "Q" : "A"), Input(attention_ ? "K" : "B"), Input("V"), Input("bias"),
                 Input("mask")};
  const size_t n_in = ctx.GetInputCount();
  DLDevice dev{kDLCPU, 0};
  for (size_t i = 0; i < 5 && i < n_in; ++i) {
    Ort::ConstValue v = ctx.GetInput(i);
    if (v == nullptr) continue;
    auto info = v.GetTensorTypeAndShapeInfo();
    Input& slot = in[attention_ || i < 2 ? i : i + 1];
    slot.present = true;
    slot.type = info.GetElementType();
    slot.shape = info.GetShape();
    slot.data = v.GetTensorRawData();
#ifdef FLASHGEMM_WITH_CUDA
    if (i == 0) {
      Ort::ConstMemoryInfo mi = v.GetTensorMemoryInfo();
      if (mi.GetDeviceType() == OrtMemoryInfoDeviceType_GPU) dev = DLDevice{kDLCUDA, mi.GetDeviceId()};
    }
#endif
  }
  const Input &a = in[0], &b = in[1], &v = in[2], &bias = in[3], &mask = in[4];
  auto fail = [&](const std::string& why) {
    return Ort::Status((node_ + ": " + why + " [" + a.Describe() + ", " + b.Describe() + ", " +
                        (attention_ ? v.Describe() + ", " : std::string()) + bias.Describe() + ", " +
                        mask.Describe() + "]")
                           .c_str(),
                       ORT_INVALID_ARGUMENT);
  };
  const char* a_name = a.name;

  // Types.
  const ONNXTensorElementDataType t = a.type;
  const std::string share = attention_ ? "; Q, K, V, bias, an additive mask and O must share one type"
                                       : "; A, B, bias, an additive mask and P must share one type";
  if (t != kF16 && t != kBF16)
    return fail(std::string(a_name) + " is " + TypeName(t) + "; supported: float16, bfloat16");
  for (const Input* x : {&b, &v, &bias})
    if (x->present && x->type != t)
      return fail(std::string(a_name) + " is " + TypeName(t) + " but " + x->name + " is " + TypeName(x->type) + share);
  if (mask.present && mask.type != t && mask.type != kBool)
    return fail(std::string("mask is ") + TypeName(mask.type) + "; it must be bool or the type of " + a_name + " (" +
                TypeName(t) + ")");
  if (causal_fill_ && !bias.present)
    return fail("attribute causal_fill reads the padding left of a decoder's mask as the bias, but bias is absent "
                "(give the bias, or drop causal_fill)");
  if (mask_fill_ && !(mask.present && mask.type == kBool))
    return fail(std::string("attribute mask_fill=1 gives a bool mask's false entries the lowest logit, but mask is ") +
                (mask.present ? TypeName(mask.type) : std::string("absent")) +
                " (give a bool mask, or drop the attribute)");

  // Shapes.
  CanonicalShape c;
  try {
    c = Canonicalize(a.shape, b.shape, trans_b_, bias.present ? &bias.shape : nullptr,
                     mask.present ? &mask.shape : nullptr, attention_ ? &v.shape : nullptr, bsnh_, packed_qkv_);
  } catch (const ShapeError& e) {
    return fail(e.what());
  }
  if (packed_qkv_ && (a.data != b.data || a.data != v.data))
    return fail("attribute packed_qkv: Q, K and V must be the same tensor [batch, sequence, 3, heads, head size] "
                "(give its name as all three inputs)");
  // packed_qkv: K and V start k_offset and v_offset elements into the one tensor (2-byte elements)
  const void* k_in = static_cast<const char*>(b.data) + c.k_offset * 2;
  const void* v_in = static_cast<const char*>(v.data) + c.v_offset * 2;

  Ort::UnownedValue out = ctx.GetOutput(0, c.out_shape);
  // empty output: nothing to compute (FusedAttention's N = 0 is not: every row is fully masked, O is zeros)
  if (c.b0 * c.b1 * c.m * (attention_ ? c.d : c.n) == 0) return Ort::Status{nullptr};

  VariantKey key;
  key.bf16 = t == kBF16;
  key.trans_b = trans_b_;
  key.has_bias = bias.present;
  key.mask = !mask.present ? "none" : mask.type != kBool ? "add" : mask_fill_ ? "fill" : "bool";
  key.causal = causal_;
  key.causal_fill = causal_fill_;
  const Sizes sizes = c.sizes();
  uintptr_t bits = reinterpret_cast<uintptr_t>(a.data) | reinterpret_cast<uintptr_t>(k_in) |
                   reinterpret_cast<uintptr_t>(v_in) | reinterpret_cast<uintptr_t>(bias.data) |
                   reinterpret_cast<uintptr_t>(mask.data) | reinterpret_cast<uintptr_t>(out.GetTensorMutableRawData()) |
                   uintptr_t{256};
  const int64_t ptr_align = static_cast<int64_t>(bits & (~bits + 1));  // lowest set bit (absent inputs: null)
  const Kernel* kernel = attention_ ? bundle_.FindAttention(key.Key(), c.k, c.d, c.n, ptr_align, zero_nan_rows_)
                                    : bundle_.Find(key.Key(), sizes, ptr_align, scale_);
  if (!kernel)
    return Ort::Status((node_ + ": the kernel bundle in " + bundle_.dir() + " has no " +
                        (attention_ ? kAttentionOpName : kOpName) + " kernel for variant " + key.Key() +
                        "; rebuild it with every variant (run flashgemm-build --target " + bundle_.target() +
                        (attention_ ? " --attention)" : ")"))
                           .c_str(),
                       ORT_FAIL);
  // FusedAttention on CUDA: the split-N kernel where the call's row tiles leave SMs idle (SplitCount)
  int64_t splits = 1;
#ifdef FLASHGEMM_WITH_CUDA
  if (attention_ && dev.device_type == kDLCUDA && kernel->head_size > 0)
    if (const Kernel* split = bundle_.FindAttentionSplit(key.Key(), c.k, c.d, c.m, c.n, ptr_align, zero_nan_rows_)) {
      int sms = 0;
      if (std::string err = cuda_rt::MultiprocessorCount(dev.device_id, &sms); !err.empty())
        return Ort::Status((node_ + ": " + err).c_str(), ORT_FAIL);
      splits = SplitCount(c.b0 * c.b1, c.n, split->split_chunk, sms);
      if (splits > 1) kernel = split;
    }
#endif
  if (attention_ && (bsnh_[0] || bsnh_[1] || bsnh_[2] || bsnh_[3]) && !kernel->row_strides)
    return Ort::Status((node_ + ": attribute bsnh (tensors read and written in place as [batch, sequence, heads, "
                        "head size]) needs a bundle whose FusedAttention kernels take row strides, and " +
                        bundle_.dir() + " was built before them; rebuild it (flashgemm-build --target " +
                        bundle_.target() + " --attention)")
                           .c_str(),
                       ORT_FAIL);
  if (verbose_) {
    char line[512];
    std::snprintf(line, sizeof(line), "flashgemm: %s (%s) sizes=[%lld,%lld,%lld,%lld,%lld]%s\n", kernel->name.c_str(),
                  (kernel->schedule +
                   (kernel->fixed_dim < 0 ? std::string()
                                          : ", B" + std::to_string(kernel->fixed_dim) + "=" +
                                                std::to_string(kernel->fixed_value)) +
                   (kernel->has_scale ? ", scale=" + ScaleText(kernel->scale) : std::string()) +
                   (kernel->n_multiple > 1 ? ", N%" + std::to_string(kernel->n_multiple) + "=0" : std::string()) +
                   (kernel->any_length ? ", any length <= " + std::to_string(kernel->max_m) + "x" +
                                             std::to_string(kernel->max_n)
                    : kernel->split_rows > 0 ? ", N in " + std::to_string(splits) + " splits"
                    : kernel->head_size > 0 && kernel->max_n > 0 ? ", N<=" + std::to_string(kernel->max_n)
                    : kernel->min_n > 0                           ? ", K=" + std::to_string(kernel->head_size)
                                                                  : std::string()))
                      .c_str(),
                  static_cast<long long>(sizes[0]),
                  static_cast<long long>(sizes[1]), static_cast<long long>(sizes[2]),
                  static_cast<long long>(sizes[3]), static_cast<long long>(sizes[4]),
                  dev.device_type == kDLCUDA ? (" on cuda:" + std::to_string(dev.device_id)).c_str() : "");
    std::lock_guard<std::mutex> lock(logged_mu_);
    if (logged_.insert(line).second) std::fputs(line, stderr);
  }

  // No silent cliff: the generic kernel on a GPU, or on the CPU at a size where it trails ORT's own MatMul +
  // Softmax (from BERT-base's 128x128x64 sites up), is said once per node and sizes.
  constexpr int64_t kCpuSlowWork = int64_t{128} * 128 * 64;  // M * N * K of one head
  if (kernel->schedule == "generic" &&
      (dev.device_type == kDLCUDA || c.m * c.n * std::max(c.k, attention_ ? c.d : 0) >= kCpuSlowWork))
    WarnGeneric(raw_ctx, sizes, c.d, dev.device_type != kDLCUDA);

  // K == 0: A @ B is all zeros, but a reduction of extent 0 never runs its init. Feed K = 1 with zero rows
  // instead (A and B read a zero vector of max(M, N) elements through stride-0 batch dims).
  const void* a_data = a.data;
  const void* b_data = k_in;
  int64_t k = c.k;
  std::vector<uint16_t> zeros;
  const size_t zero_count = static_cast<size_t>(std::max(c.m, c.n));
  if (k == 0) {
    if (dev.device_type == kDLCPU) {
      zeros.assign(zero_count, 0);
      a_data = b_data = zeros.data();
    }
    k = 1;
    c.a_strides = {0, 0, 1, 1};
    c.b_strides = {0, 0, trans_b_ ? 1 : c.n, 1};
  }

#ifdef FLASHGEMM_WITH_CUDA
  // TVM's CUDA launcher runs on the current device and reads the stream from TVMFFIEnvGetStream (thread-local):
  // run on the input's GPU and ORT's compute stream, and give TVM back its previous stream afterwards.
  void* stream = nullptr;
  TVMFFIStreamHandle prev = nullptr;
  void* device_zeros = nullptr;
  if (dev.device_type == kDLCUDA) {
    if (std::string err = CheckArch(bundle_, dev.device_id); !err.empty())
      return Ort::Status((node_ + ": " + err).c_str(), ORT_FAIL);
    if (std::string err = cuda_rt::SetDevice(dev.device_id); !err.empty())
      return Ort::Status((node_ + ": " + err).c_str(), ORT_FAIL);
    stream = ctx.GetGPUComputeStream();
    if (c.k == 0) {  // the zero vector, in device memory and ordered on ORT's stream
      if (std::string err = cuda_rt::ZerosAsync(&device_zeros, zero_count * 2, stream); !err.empty())
        return Ort::Status((node_ + ": " + err).c_str(), ORT_FAIL);
      a_data = b_data = device_zeros;
    }
    TVMFFIEnvSetStream(dev.device_type, dev.device_id, stream, &prev);
  }
  struct Restore {
    DLDevice dev;
    TVMFFIStreamHandle prev;
    void *stream, *zeros, *work = nullptr;
    OrtAllocator* allocator = nullptr;
    ~Restore() {
      if (dev.device_type != kDLCUDA) return;
      TVMFFIEnvSetStream(dev.device_type, dev.device_id, prev, nullptr);
      if (zeros) cuda_rt::FreeAsync(zeros, stream);  // after the kernel, in stream order
      if (work) allocator->Free(allocator, work);
      if (allocator) Ort::GetApi().ReleaseAllocator(allocator);
    }
  } restore{dev, prev, stream, device_zeros};
  // the split-N kernel's workspace, float32 [splits, B0, B1, M (D + 2)] (each split's partial rows), from the CUDA
  // EP's allocator (its arena: no cudaMalloc a call, which measured slower than the split saves at ORT's level);
  // freed after the launches, as ORT's own kernels free their scratch: the block's next user runs on this stream
  if (splits > 1) {
    const size_t bytes = static_cast<size_t>(splits * c.b0 * c.b1 * c.m * (c.d + 2)) * 4;
    const OrtMemoryInfo* mem = out.GetTensorMemoryInfo();
    if (OrtStatus* st = Ort::GetApi().KernelContext_GetAllocator(raw_ctx, mem, &restore.allocator))
      return Ort::Status(st);
    restore.work = restore.allocator->Alloc(restore.allocator, bytes);
    if (!restore.work)
      return Ort::Status((node_ + ": the CUDA EP's allocator gave no workspace of " + std::to_string(bytes) +
                          " bytes for the split-N kernel").c_str(), ORT_FAIL);
  }
#endif

  // FusedAttention with N = 0: every row is fully masked, so O is zeros (the kernels' reductions over an empty row
  // would never run their init).
  if (attention_ && c.n == 0) {
    void* o = out.GetTensorMutableRawData();
    const size_t bytes = static_cast<size_t>(c.b0 * c.b1 * c.m * c.d) * 2;
#ifdef FLASHGEMM_WITH_CUDA
    if (dev.device_type == kDLCUDA) {
      if (std::string err = cuda_rt::MemsetZeroAsync(o, bytes, stream); !err.empty())
        return Ort::Status((node_ + ": " + err).c_str(), ORT_FAIL);
      return Ort::Status{nullptr};
    }
#endif
    std::memset(o, 0, bytes);
    return Ort::Status{nullptr};
  }

  const DLDataType dt = DLType(t);
  View va(a_data, dev, dt, {c.b0, c.b1, c.m, k}, c.a_strides);
  View vb(b_data, dev, dt, trans_b_ ? std::array<int64_t, 4>{c.b0, c.b1, c.n, k} : std::array<int64_t, 4>{c.b0, c.b1, k, c.n},
          c.b_strides);
  std::optional<View> vv, vbias, vmask;
  if (attention_) vv.emplace(v_in, dev, dt, std::array<int64_t, 4>{c.b0, c.b1, c.n, c.d}, *c.v_strides);
  if (bias.present) vbias.emplace(bias.data, dev, dt, std::array<int64_t, 4>{c.b0, c.b1, c.m, c.n}, *c.bias_strides);
  if (mask.present)
    vmask.emplace(mask.data, dev, DLType(mask.type), std::array<int64_t, 4>{c.b0, c.b1, c.m, c.n}, *c.mask_strides);
  const int64_t cols = attention_ ? c.d : c.n;  // P's N or O's D
  // P compact (its kernels declare no strides); O through its strides (BSNH or compact)
  View vp(out.GetTensorMutableRawData(), dev, dt, {c.b0, c.b1, c.m, cols},
          attention_ ? c.out_strides : Strides4{c.b1 * c.m * cols, c.m * cols, cols, 1});

  std::optional<View> vwork;
#ifdef FLASHGEMM_WITH_CUDA
  if (splits > 1) {
    const int64_t row = c.m * (c.d + 2);
    vwork.emplace(restore.work, dev, DLDataType{kDLFloat, 32, 1}, std::array<int64_t, 4>{splits, c.b0, c.b1, row},
                  Strides4{c.b0 * c.b1 * row, c.b1 * row, row, 1});
  }
#endif

  // fn(A, B, [bias], [mask], P, scale); FusedAttention's fn(Q, K, V, [bias], [mask], O, scale, zero_nan_rows), the
  // split-N kernel's with its workspace after O
  tvm::ffi::AnyView args[9];
  int n_args = 0;
  args[n_args++] = &va.t;
  args[n_args++] = &vb.t;
  if (vv) args[n_args++] = &vv->t;
  if (vbias) args[n_args++] = &vbias->t;
  if (vmask) args[n_args++] = &vmask->t;
  args[n_args++] = &vp.t;
  if (vwork) args[n_args++] = &vwork->t;
  args[n_args++] = static_cast<double>(scale_);
  if (attention_) args[n_args++] = static_cast<int64_t>(zero_nan_rows_);

  tvm::ffi::Any rv;
  try {
    cpu_parallel::Scope on_ort_threads(raw_ctx);  // (CPU kernels' parallel loops; CUDA kernels have none)
    kernel->fn.CallPacked(args, n_args, &rv);
  } catch (const std::exception& e) {
    return Ort::Status((node_ + ": kernel " + kernel->name + " failed: " + e.what()).c_str(), ORT_RUNTIME_EXCEPTION);
  }
  return Ort::Status{nullptr};
}

void FusedKernel::WarnGeneric(OrtKernelContext* ctx, const Sizes& sizes, int64_t d, bool on_cpu) const {
  {
    std::lock_guard<std::mutex> lock(warned_mu_);
    if (!warned_.insert(sizes).second) return;
  }
  const std::string sizes_text = "[" + std::to_string(sizes[0]) + "," + std::to_string(sizes[1]) + "," +
                                 std::to_string(sizes[2]) + "," + std::to_string(sizes[3]) + "," +
                                 std::to_string(sizes[4]) + "]";
  std::string msg;
  if (attention_)
    msg = node_ + ": the bundle " + bundle_.dir() + " serves FusedAttention at sizes [B0,B1,M,N,K]=" + sizes_text +
          ", head size " + std::to_string(d) + " with its generic kernel, slower than the unfused MatMul, Softmax " +
          "and MatMul it replaces. " +
          (on_cpu ? std::string("On the CPU every FusedAttention call runs it") :
                    "The tensor-core kernels serve head sizes 32, 64, 80, 96 and 128 with Q's and V's equal, "
                    "16-byte aligned tensors and, with K as [D, N], N a multiple of 8, in the variants the bundle was "
                    "built with (flashgemm-build --attention: the common ones; add this model's with --from-model "
                    "MODEL.onnx, or build all with --attention all)") +
          ". For speed rewrite the model without --attention (flashgemm-rewrite), which keeps P and fuses the scores";
  else if (on_cpu)
    msg = node_ + ": on the CPU the op runs TVM's generic llvm kernel, and at sizes [B0,B1,M,N,K]=" + sizes_text +
          " that is slower than ONNX Runtime's own MatMul + Softmax (the op is built for NVIDIA GPUs; its CPU kernels "
          "let every stage run without one). For CPU inference run the original model, not the rewritten one";
  else
    msg = node_ + ": no tuned or default-schedule kernel in the bundle " + bundle_.dir() + " serves sizes " +
          "[B0,B1,M,N,K]=" + sizes_text + ", so the generic kernel runs them on the GPU, much slower (6-14x) than a " +
          "tuned or default-schedule kernel. Rebuild the bundle for the model's shapes: flashgemm-build --target " +
          bundle_.target() + " --from-model <model.onnx> (tuning them with flashgemm-tune --from-model makes them " +
          "faster still)";
  try {
    const OrtLogger* raw = nullptr;
    Ort::ThrowOnError(Ort::GetApi().KernelContext_GetLogger(ctx, &raw));
    Ort::Logger logger(raw);
    ORT_CXX_LOG_NOEXCEPT(logger, ORT_LOGGING_LEVEL_WARNING, msg.c_str());
  } catch (const std::exception&) {  // a warning that cannot be logged must not fail the run
  }
}

namespace {

// A dim for shape inference: a size, a symbol (dim_param), or unknown (size -1, no symbol).
struct Dim {
  int64_t size = -1;
  std::string sym;
  bool Known() const { return size >= 0; }
};

std::vector<Dim> InputDims(const OrtApi& api, OrtShapeInferContext* ctx, size_t i,
                           ONNXTensorElementDataType* type = nullptr) {
  OrtTensorTypeAndShapeInfo* info = nullptr;  // (owned by the context: not released here)
  Ort::ThrowOnError(api.ShapeInferContext_GetInputTypeShape(ctx, i, &info));
  if (type) Ort::ThrowOnError(api.GetTensorElementType(info, type));
  size_t rank = 0;
  Ort::ThrowOnError(api.GetDimensionsCount(info, &rank));
  std::vector<int64_t> sizes(rank);
  std::vector<const char*> syms(rank, nullptr);
  if (rank) {
    Ort::ThrowOnError(api.GetDimensions(info, sizes.data(), rank));
    Ort::ThrowOnError(api.GetSymbolicDimensions(info, syms.data(), rank));
  }
  std::vector<Dim> out(rank);
  for (size_t d = 0; d < rank; ++d) {
    out[d].size = sizes[d] >= 0 ? sizes[d] : -1;
    if (out[d].size < 0 && syms[d] && *syms[d]) out[d].sym = syms[d];
  }
  return out;
}

// Two dims that must broadcast: a known 1 gives the other; two known sizes must be equal (nullopt: they do not
// broadcast); a known size against a symbol or unknown dim gives the size (at a valid call the other is that size
// or 1); the same symbol twice itself; anything else unknown.
std::optional<Dim> BroadcastDim(const Dim& x, const Dim& y) {
  if (x.Known() && x.size == 1) return y;
  if (y.Known() && y.size == 1) return x;
  if (x.Known() && y.Known()) return x.size == y.size ? std::optional<Dim>(x) : std::nullopt;
  if (x.Known()) return x;
  if (y.Known()) return y;
  if (!x.sym.empty() && x.sym == y.sym) return x;
  return Dim{};
}

}  // namespace

template <bool kAttention>
OrtStatusPtr ORT_API_CALL FusedOp::InferShape(const OrtCustomOp*, OrtShapeInferContext* ctx) {
  const OrtApi& api = Ort::GetApi();
  try {
    bool trans_b = false;
    const OrtOpAttr* attr = nullptr;
    if (OrtStatus* st = api.ShapeInferContext_GetAttribute(ctx, "transB", &attr)) {
      api.ReleaseStatus(st);  // absent: the default (0)
    } else if (attr != nullptr) {
      int64_t v = 0;
      size_t bytes = 0;
      Ort::ThrowOnError(api.ReadOpAttr(attr, ORT_OP_ATTR_INT, &v, sizeof(v), &bytes));
      trans_b = v == 1;
    }
    Bsnh bsnh{false, false, false, false};  // FusedAttention's BSNH tensors: dims 1 and 2 swapped
    if (OrtStatus* st = api.ShapeInferContext_GetAttribute(ctx, "bsnh", &attr)) {
      api.ReleaseStatus(st);
    } else if (kAttention && attr != nullptr) {
      int64_t v[4] = {0, 0, 0, 0};
      size_t bytes = 0;
      if (OrtStatus* rs = api.ReadOpAttr(attr, ORT_OP_ATTR_INTS, v, sizeof(v), &bytes)) {
        api.ReleaseStatus(rs);
        return nullptr;  // (not four flags: the kernel's attribute error at session load)
      }
      for (int i = 0; i < 4; ++i) bsnh[i] = bytes == sizeof(v) && v[i] == 1;
    }
    bool packed = false;  // packed_qkv: Q, K, V [batch, sequence, 3, heads, head size], each a BSNH slice
    if (OrtStatus* st = api.ShapeInferContext_GetAttribute(ctx, "packed_qkv", &attr)) {
      api.ReleaseStatus(st);
    } else if (kAttention && attr != nullptr) {
      int64_t v = 0;
      size_t bytes = 0;
      Ort::ThrowOnError(api.ReadOpAttr(attr, ORT_OP_ATTR_INT, &v, sizeof(v), &bytes));
      packed = v == 1;
    }
    auto swap12 = [packed](std::vector<Dim>& x, bool flagged) {
      if (packed && x.size() == 5) x.erase(x.begin() + 2);
      if (flagged && x.size() == 4) std::swap(x[1], x[2]);
    };
    ONNXTensorElementDataType type{};
    std::vector<Dim> a = InputDims(api, ctx, 0, &type), b = InputDims(api, ctx, 1);
    swap12(a, bsnh[0]);
    swap12(b, bsnh[1]);
    if (a.size() < 2 || b.size() < 2) return nullptr;  // (unknown rank, or Compute's rank error at the call)
    const Dim &m = a[a.size() - 2], &k = a.back();
    const Dim &n = trans_b ? b[b.size() - 2] : b.back(), &kb = trans_b ? b.back() : b[b.size() - 2];
    if (k.Known() && kb.Known() && k.size != kb.size) return nullptr;  // (Compute's K error at the call)
    const size_t rank = std::max(a.size(), b.size());
    std::vector<Dim> out(rank);
    for (size_t i = 2; i < rank; ++i) {  // batch dims, aligned from the right
      const size_t ia = a.size() > i ? a.size() - 1 - i : SIZE_MAX, ib = b.size() > i ? b.size() - 1 - i : SIZE_MAX;
      const Dim one{1, {}};
      std::optional<Dim> d = BroadcastDim(ia == SIZE_MAX ? one : a[ia], ib == SIZE_MAX ? one : b[ib]);
      if (!d) return nullptr;  // (Compute's broadcast error at the call)
      out[rank - 1 - i] = *d;
    }
    out[rank - 2] = m;
    out[rank - 1] = n;
    if (kAttention) {  // O: [batch..., M, D]; V's batch dims must broadcast to P's (Compute's error otherwise)
      std::vector<Dim> v = InputDims(api, ctx, 2);
      swap12(v, bsnh[2]);
      if (v.size() < 2 || v.size() > rank) return nullptr;
      out[rank - 1] = v.back();
      if (bsnh[3] && out.size() == 4) std::swap(out[1], out[2]);  // O as [batch, M, heads, D]
    }
    std::vector<int64_t> sizes;
    std::vector<const char*> syms;
    for (const Dim& d : out) {
      sizes.push_back(d.size);
      syms.push_back(d.sym.c_str());
    }
    OrtTensorTypeAndShapeInfo* info = nullptr;
    Ort::ThrowOnError(api.CreateTensorTypeAndShapeInfo(&info));
    std::unique_ptr<OrtTensorTypeAndShapeInfo, void (*)(OrtTensorTypeAndShapeInfo*)> own(
        info, [](OrtTensorTypeAndShapeInfo* p) { Ort::GetApi().ReleaseTensorTypeAndShapeInfo(p); });
    Ort::ThrowOnError(api.SetTensorElementType(info, type));
    Ort::ThrowOnError(api.SetDimensions(info, sizes.data(), sizes.size()));
    Ort::ThrowOnError(api.SetSymbolicDimensions(info, syms.data(), syms.size()));
    Ort::ThrowOnError(api.ShapeInferContext_SetOutputTypeShape(ctx, 0, info));
    return nullptr;
  } catch (const Ort::Exception& e) {
    return api.CreateStatus(e.GetOrtErrorCode(), e.what());
  } catch (const std::exception& e) {
    return api.CreateStatus(ORT_FAIL, e.what());
  }
}

template OrtStatusPtr ORT_API_CALL FusedOp::InferShape<false>(const OrtCustomOp*, OrtShapeInferContext*);
template OrtStatusPtr ORT_API_CALL FusedOp::InferShape<true>(const OrtCustomOp*, OrtShapeInferContext*);

OrtStatusPtr FusedOp::CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
  try {
    *kernel = new FusedKernel(info, *bundle_, attention_);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return api.CreateStatus(e.GetOrtErrorCode(), e.what());
  } catch (const std::exception& e) {
    return api.CreateStatus(ORT_FAIL, e.what());
  }
}

}  // namespace flashgemm
