// Canonical 4-D problem of FusedGemmSoftmax: a line-by-line port of flashgemm/op/variant.py:canonicalize.
//
// The ONNX op takes tensors of any rank with ONNX MatMul batch broadcasting; every kernel sees
//   A [B0, B1, M, K], B [B0, B1, K, N] (or [B0, B1, N, K] with transB),
//   bias / mask [B0, B1, M, N] with arbitrary element strides (0 on broadcast dims), P [B0, B1, M, N] compact.
// Both implementations must agree exactly (tests/test_ort_op.py cross-checks them through flashgemm_canonical_cli).
// No ONNX Runtime or TVM dependency, so it can be unit-tested on its own.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashgemm {

using Shape = std::vector<int64_t>;
using Strides4 = std::array<int64_t, 4>;

// An input shape combination the operator does not accept (Python: flashgemm.op.variant.ShapeError).
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct CanonicalShape {
  int64_t b0 = 1, b1 = 1, m = 0, n = 0, k = 0;
  Shape out_shape;  // P's ONNX shape: broadcast batch dims + [M, N]
  Strides4 a_strides{}, b_strides{};
  std::optional<Strides4> bias_strides, mask_strides;  // set iff the input is present
  // FusedAttention (Canonicalize with v_shape): V [B0, B1, N, D]'s strides and D; out_shape is then O's
  std::optional<Strides4> v_strides;
  int64_t d = 0;
  Strides4 out_strides{};  // P's (or O's) strides: compact unless O is BSNH
  // packed_qkv: where K and V start in the one Q/K/V tensor, in elements (Q at 0)
  int64_t k_offset = 0, v_offset = 0;

  std::array<int64_t, 5> sizes() const { return {b0, b1, m, n, k}; }
};

// ONNX-level input shapes -> the canonical problem. Throws ShapeError with the reason.
// v_shape: FusedAttention's V [..., N, D], whose batch dims must broadcast to P's; the output is then O [.., M, D].
// bsnh: FusedAttention's flags for Q, K, V, O: a flagged tensor is [batch, sequence, heads, head size], read through
// strides as [batch, heads, sequence, head size] (K needs trans_b, O two batch dims; O is then [batch, M, heads, D]).
// packed_qkv: Q, K and V are one tensor [batch, sequence, 3, heads, head size] (a_shape, b_shape and v_shape all its
// shape), Q, K and V its slices 0, 1 and 2 of dim 2, each read as BSNH (bsnh must flag all three).
using Bsnh = std::array<bool, 4>;
CanonicalShape Canonicalize(const Shape& a_shape, const Shape& b_shape, bool trans_b,
                            const Shape* bias_shape = nullptr, const Shape* mask_shape = nullptr,
                            const Shape* v_shape = nullptr, Bsnh bsnh = {false, false, false, false},
                            bool packed_qkv = false);

// "[2, 3, 4]" (Python list formatting, used in every message).
std::string ShapeStr(const Shape& s);

}  // namespace flashgemm
