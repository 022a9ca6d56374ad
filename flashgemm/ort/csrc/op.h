// flashgemm::FusedGemmSoftmax(A, B, [bias], [mask]) -> P = softmax_rowwise(scale * A @ B + bias + mask), causal opt.
// flashgemm::FusedAttention(Q, K, V, [bias], [mask]) -> O = FusedGemmSoftmax(Q, K, bias, mask) @ V, P never stored:
// the same attributes, masks, broadcasting and special values; V [..., N, D] broadcasts to P's batch dims. Its own
// attribute zero_nan_rows (0 | 1) makes a NaN row of P a zero row (O's row 0 · V), as exports of PyTorch's SDPA do.
// Both ops' attribute mask_fill (0 | 1): a bool mask's false entry is T's lowest logit instead of masked out, as
// Where(mask, logits, lowest) computes it (torch's masked_fill with finfo.min): a row false everywhere is uniform.
// Attribute causal_fill (0 | 1, with causal and a bias): a key past the diagonal is at s + T's lowest instead of masked
// out, as a decoder's mask of the scores' shape (its causal rule and padding in one) puts it; the kernels skip those
// keys for a row tile unless a row of it sees only keys at the lowest.
//
// Types: A, B, bias, an additive mask and P share one T in {float16, bfloat16}; the mask may instead be bool.
// ORT infers a custom op's output type from the kernel registrations, so the op is registered once per T with A
// and P concrete (T) and B/bias/mask type-generic: a node with an unsupported A type is rejected by ORT's schema
// check at session creation, and every other type error (B != A, bias != A, mask not T|bool) reaches Compute
// and comes back as an INVALID_ARGUMENT status that names the inputs.
#pragma once

#include <mutex>
#include <set>
#include <string>

#include "bundle.h"
#include "canonical.h"
#include "ort_api.h"

namespace flashgemm {

constexpr const char* kOpName = "FusedGemmSoftmax";
constexpr const char* kAttentionOpName = "FusedAttention";

// One kernel object per node, of either op (attention: FusedAttention).
class FusedKernel {
 public:
  FusedKernel(const OrtKernelInfo* info, const Bundle& bundle, bool attention);
  // Returns nullptr on success; never throws (Compute may run concurrently on several threads: no mutable state).
  OrtStatusPtr ComputeV2(OrtKernelContext* ctx) const;

 private:
  Ort::Status Compute(OrtKernelContext* ctx) const;
  // On the GPU the generic kernel is 6-14x slower than a shape-specific one, and on the CPU (its normal path) it
  // trails ORT's own MatMul + Softmax from BERT-base's site size up: a WARNING through ORT's logger, once per sizes
  // (the kernel object is per node), naming the fix.
  void WarnGeneric(OrtKernelContext* ctx, const Sizes& sizes, int64_t d, bool on_cpu) const;

  const Bundle& bundle_;
  bool attention_ = false;
  float scale_ = 1.0f;
  bool trans_b_ = false, causal_ = false, verbose_ = false;
  bool mask_fill_ = false;  // a bool mask's false entry is T's lowest logit (the kernels' variant mask "fill")
  bool causal_fill_ = false;  // keys past the causal diagonal at the lowest logit (s + lowest), not masked out
  bool zero_nan_rows_ = false;  // FusedAttention: a NaN row of P is 0 (the SDPA export's Where(IsNaN(P), 0, P))
  Bsnh bsnh_{false, false, false, false};  // FusedAttention: which of Q, K, V, O are [batch, seq, heads, head size]
  bool packed_qkv_ = false;  // FusedAttention: Q, K, V one tensor [batch, seq, 3, heads, head size], given thrice
  // FLASHGEMM_VERBOSE: each (kernel, sizes) is reported once per node, not on every run.
  mutable std::mutex logged_mu_;
  mutable std::set<std::string> logged_;
  // the sizes warned about (WarnGeneric)
  mutable std::mutex warned_mu_;
  mutable std::set<Sizes> warned_;
  std::string node_;  // "FusedGemmSoftmax (node 'x')" or "FusedAttention (node 'x')", prefix of every message
};

class FusedOp : public Ort::CustomOpBase<FusedOp, FusedKernel, /*WithStatus=*/true> {
 public:
  // type: T of this overload; ep: e.g. "CPUExecutionProvider". bundle must outlive every session.
  // infer_shape: install InferShape. ORT 1.21-1.23 crash (SIGSEGV) building the shape-inference context of a
  // node whose absent optional input (bias) precedes a present one (mask); there P's shape stays unset in the graph.
  // attention: FusedAttention (Q, K, V, bias, mask -> O), else FusedGemmSoftmax (A, B, bias, mask -> P).
  FusedOp(ONNXTensorElementDataType type, const char* ep, const Bundle* bundle, bool infer_shape, bool attention)
      : type_(type), ep_(ep), bundle_(bundle), attention_(attention) {
    if (infer_shape)
      OrtCustomOp::InferOutputShapeFn = attention ? InferShape<true> : InferShape<false>;
  }

  // P's type and shape for ORT's graph, from A's and B's: broadcast(A's batch dims, B's) + [M, N], a symbolic dim
  // kept where the inputs give one, unknown where two different symbols meet. Sizes that no call can take (K
  // mismatch, batch dims that do not broadcast) leave P's shape unset: Compute rejects such a call with its message.
  // (The C API, not Ort::ShapeInferContext: that one drops the input's element type, which P shares; and not named
  // InferOutputShape, the name Ort::CustomOpBase installs with that context.)
  // FusedAttention's O: the same batch dims, + [M, D] (V's last dim).
  template <bool kAttention>
  static OrtStatusPtr ORT_API_CALL InferShape(const OrtCustomOp* op, OrtShapeInferContext* ctx);

  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const;

  const char* GetName() const { return attention_ ? kAttentionOpName : kOpName; }
  const char* GetExecutionProviderType() const { return ep_; }

  size_t GetInputTypeCount() const { return attention_ ? 5 : 4; }  // A (Q), B (K), [V], bias, mask
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i == 0 ? type_ : ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return i < (attention_ ? 3u : 2u) ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return type_; }

 private:
  ONNXTensorElementDataType type_;
  const char* ep_;
  const Bundle* bundle_;
  bool attention_;
};

}  // namespace flashgemm
