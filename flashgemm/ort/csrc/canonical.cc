// Port of flashgemm/op/variant.py:canonicalize. Keep the two in lockstep (same steps, same error conditions).
#include "canonical.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace flashgemm {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// Tensors whose strides enter the merge test: A, B, bias, mask, V, P or O (absent inputs keep all-zero strides,
// which never block a merge, just as Python leaves them out of the dict).
enum { kA, kB, kBias, kMask, kV, kP, kNumTensors };
using BatchStrides = std::array<int64_t, kNumTensors>;

// Saturating product: the int32 limit checks must not be fooled by int64 overflow on absurd shapes.
int64_t SatMul(int64_t a, int64_t b) {
  __int128 r = static_cast<__int128>(a) * b;
  return r > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(r);
}

std::string OptShapeStr(const Shape* s) { return s ? ShapeStr(*s) : "None"; }

Shape Broadcast(const Shape& x, const Shape& y, const char* what) {
  size_t rank = std::max(x.size(), y.size());
  Shape out(rank, 1);
  for (const Shape* s : {&x, &y}) {
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t d = (*s)[i];
      size_t j = rank - s->size() + i;
      if (d != out[j] && d != 1 && out[j] != 1)
        throw ShapeError(std::string(what) + ": batch dims [" + ShapeStr(x) + ", " + ShapeStr(y) +
                         "] are not broadcastable");
      if (d != 1) out[j] = d;
    }
  }
  return out;
}

Shape CompactStrides(const Shape& shape) {
  Shape strides(shape.size(), 0);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    acc = SatMul(acc, shape[i]);
  }
  return strides;
}

// Element strides of a compact tensor `shape` read as if broadcast to `full` (0 = broadcast).
Shape AlignedStrides(const Shape& shape, const Shape& full) {
  Shape own = CompactStrides(shape), out(full.size(), 0);
  size_t pad = full.size() - shape.size();
  for (size_t i = pad; i < full.size(); ++i) out[i] = shape[i - pad] == 1 ? 0 : own[i - pad];
  return out;
}

// A BSNH tensor [batch, sequence, heads, head size] read as [batch, heads, sequence, head size]: that shape, the
// strides of its two batch dims (0 where 1: broadcast) and its row stride (heads * head size). packed: the tensor is
// [batch, sequence, 3, heads, head size] (packed_qkv), whose rows hold Q's, K's and V's heads one after another.
struct BsnhView {
  std::array<int64_t, 2> batch_strides{};
  int64_t row = 0;
};

BsnhView ViewBsnh(Shape& shape, const char* name, bool packed) {
  if (packed && (shape.size() != 5 || shape[2] != 3))
    throw ShapeError(std::string(name) + " is packed with K and V (attribute packed_qkv), so Q, K and V must be one "
                     "tensor [batch, sequence, 3, heads, head size], got shape " + ShapeStr(shape));
  if (packed) shape = {shape[0], shape[1], shape[3], shape[4]};
  if (shape.size() != 4)
    throw ShapeError(std::string(name) + " is BSNH (attribute bsnh), so it must be [batch, sequence, heads, head "
                     "size], got shape " + ShapeStr(shape));
  const int64_t b = shape[0], s = shape[1], h = shape[2], d = shape[3], row = SatMul(SatMul(h, d), packed ? 3 : 1);
  shape = {b, h, s, d};
  return {{b == 1 ? 0 : SatMul(s, row), h == 1 ? 0 : d}, row};
}

}  // namespace

std::string ShapeStr(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

CanonicalShape Canonicalize(const Shape& a_shape_in, const Shape& b_shape_in, bool trans_b, const Shape* bias_shape,
                            const Shape* mask_shape, const Shape* v_shape_in, Bsnh bsnh, bool packed_qkv) {
  for (const Shape* s : {&a_shape_in, &b_shape_in})
    for (int64_t d : *s)
      if (d < 0) throw ShapeError("negative dimension");
  const bool bq = bsnh[0], bk = bsnh[1], bv = bsnh[2], bo = bsnh[3];
  if ((bq || bk || bv || bo) && !v_shape_in) throw ShapeError("bsnh is FusedAttention's (it needs V)");
  if (bk && !trans_b)
    throw ShapeError("K is BSNH (attribute bsnh), which is [batch, sequence, heads, head size]: that needs "
                     "transB=1");
  if (packed_qkv && !(bq && bk && bv && v_shape_in))
    throw ShapeError("packed_qkv reads Q, K and V as [batch, sequence, heads, head size]: attribute bsnh must flag "
                     "Q, K and V (bsnh = [1, 1, 1, 0 or 1])");
  if (packed_qkv && (a_shape_in != b_shape_in || a_shape_in != *v_shape_in))
    throw ShapeError("packed_qkv: Q, K and V must be the one tensor [batch, sequence, 3, heads, head size], got "
                     "shapes " + ShapeStr(a_shape_in) + ", " + ShapeStr(b_shape_in) + ", " + ShapeStr(*v_shape_in));
  Shape a_shape = a_shape_in, b_shape = b_shape_in;
  std::optional<BsnhView> view[kNumTensors];  // where BSNH
  if (bq) view[kA] = ViewBsnh(a_shape, "Q", packed_qkv);
  if (bk) view[kB] = ViewBsnh(b_shape, "K", packed_qkv);
  if (a_shape.size() < 2) throw ShapeError("A must have rank >= 2 ([..., M, K]), got shape " + ShapeStr(a_shape));
  if (b_shape.size() < 2)
    throw ShapeError("B must have rank >= 2 ([..., K, N] or [..., N, K] with transB=1), got shape " +
                     ShapeStr(b_shape));
  const int64_t m = a_shape[a_shape.size() - 2], k = a_shape.back();
  const int64_t b_r = b_shape[b_shape.size() - 2], b_c = b_shape.back();
  const int64_t n = trans_b ? b_r : b_c, kb = trans_b ? b_c : b_r;
  if (k != kb)
    throw ShapeError("K mismatch: A is " + ShapeStr(a_shape) + " (K=" + std::to_string(k) + ") but B is " +
                     ShapeStr(b_shape) + " (K=" + std::to_string(kb) + ", transB=" + std::to_string(int(trans_b)) +
                     ")");
  const Shape a_batch(a_shape.begin(), a_shape.end() - 2), b_batch(b_shape.begin(), b_shape.end() - 2);
  const Shape batch = Broadcast(a_batch, b_batch, "A and B");
  const size_t nb = batch.size();
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  int64_t dv = -1;  // V's D
  Shape v_batch, v_shape_own;
  const Shape* v_shape = nullptr;
  if (v_shape_in) {
    for (int64_t d : *v_shape_in)
      if (d < 0) throw ShapeError("negative dimension");
    v_shape_own = *v_shape_in;
    if (bv) view[kV] = ViewBsnh(v_shape_own, "V", packed_qkv);
    v_shape = &v_shape_own;
    if (v_shape->size() < 2 || (*v_shape)[v_shape->size() - 2] != n)
      throw ShapeError("V must be [..., N, D] with N=" + std::to_string(n) + " (the columns of Q·K), got shape " +
                       ShapeStr(*v_shape));
    v_batch.assign(v_shape->begin(), v_shape->end() - 2);
    bool ok = v_batch.size() <= batch.size();
    for (size_t i = 0; ok && i < v_batch.size(); ++i) {
      int64_t d = v_batch[v_batch.size() - 1 - i], o = batch[batch.size() - 1 - i];
      ok = d == 1 || d == o;
    }
    if (!ok)
      throw ShapeError("V's batch dims " + ShapeStr(v_batch) + " do not broadcast to those of Q·K " + ShapeStr(batch));
    dv = v_shape->back();
  }

  // bias / mask: broadcastable to the output, strides aligned to the output's dims.
  std::optional<Shape> extra[2];
  const Shape* extra_shapes[2] = {bias_shape, mask_shape};
  const char* extra_names[2] = {"bias", "mask"};
  for (int e = 0; e < 2; ++e) {
    const Shape* shp = extra_shapes[e];
    if (!shp) continue;
    bool ok = shp->size() <= out_shape.size();
    for (size_t i = 0; ok && i < shp->size(); ++i) {
      int64_t d = (*shp)[shp->size() - 1 - i], o = out_shape[out_shape.size() - 1 - i];
      ok = d == 1 || d == o;
    }
    if (!ok)
      throw ShapeError(std::string(extra_names[e]) + " of shape " + ShapeStr(*shp) +
                       " is not broadcastable to the output shape " + ShapeStr(out_shape));
    extra[e] = AlignedStrides(*shp, out_shape);
  }

  // Per-tensor strides over the batch dims only (element units), 0 where broadcast.
  std::vector<BatchStrides> bs(nb, BatchStrides{});
  {
    const Shape sa = AlignedStrides(a_batch, batch), sb = AlignedStrides(b_batch, batch), sp = CompactStrides(batch);
    const Shape sv = v_shape ? AlignedStrides(v_batch, batch) : Shape(nb, 0);
    const int64_t a_blk = SatMul(m, k), b_blk = SatMul(n, k), p_blk = SatMul(m, v_shape ? dv : n);
    for (size_t i = 0; i < nb; ++i) {
      bs[i][kA] = SatMul(sa[i], a_blk);
      bs[i][kB] = SatMul(sb[i], b_blk);
      bs[i][kBias] = extra[0] ? (*extra[0])[i] : 0;
      bs[i][kMask] = extra[1] ? (*extra[1])[i] : 0;
      bs[i][kV] = SatMul(sv[i], SatMul(n, std::max<int64_t>(dv, 0)));
      bs[i][kP] = SatMul(sp[i], p_blk);
    }
  }
  if (bo) {
    if (nb != 2)
      throw ShapeError("O is BSNH (attribute bsnh), so Q·K must have two batch dims [batch, heads], got " +
                       ShapeStr(batch));
    view[kP] = BsnhView{{SatMul(SatMul(m, batch[1]), dv), dv}, SatMul(batch[1], dv)};
  }
  for (int t = 0; t < kNumTensors; ++t)  // a BSNH tensor's batch strides are its own (rank 4: the last two dims)
    if (view[t])
      for (size_t i = 0; i < nb; ++i) bs[i][t] = i + 2 < nb ? 0 : view[t]->batch_strides[i + 2 - nb];
  // Coalesce batch dims: drop size-1 dims, merge neighbours that every tensor walks contiguously.
  std::vector<std::pair<int64_t, BatchStrides>> merged;  // outermost last while building
  for (size_t i = nb; i-- > 0;) {  // innermost first
    int64_t d = batch[i];
    if (d == 1) continue;
    if (!merged.empty()) {
      auto& [d_in, st_in] = merged.back();
      bool contiguous = true;
      for (int t = 0; t < kNumTensors; ++t) contiguous = contiguous && bs[i][t] == SatMul(st_in[t], d_in);
      if (contiguous) {
        d_in = SatMul(d, d_in);
        continue;
      }
    }
    merged.emplace_back(d, bs[i]);
  }
  std::reverse(merged.begin(), merged.end());
  if (merged.size() > 2)
    throw ShapeError("batch broadcast pattern of A " + ShapeStr(a_shape) + ", B " + ShapeStr(b_shape) + ", bias " +
                     OptShapeStr(bias_shape) + ", mask " + OptShapeStr(mask_shape) + " needs " +
                     std::to_string(merged.size()) +
                     " independent batch dims; the kernels take two. Expand (materialize) the bias/mask "
                     "or reshape the inputs so that fewer batch dims broadcast differently.");
  while (merged.size() < 2) merged.insert(merged.begin(), {1, BatchStrides{}});
  const auto& [b0, s0] = merged[0];
  const auto& [b1, s1] = merged[1];

  CanonicalShape c;
  c.b0 = b0;
  c.b1 = b1;
  c.m = m;
  c.n = n;
  c.k = k;
  c.out_shape = out_shape;
  c.a_strides = {s0[kA], s1[kA], view[kA] ? view[kA]->row : k, 1};
  c.b_strides = {s0[kB], s1[kB], view[kB] ? view[kB]->row : trans_b ? k : n, 1};
  c.out_strides = {s0[kP], s1[kP], view[kP] ? view[kP]->row : v_shape ? dv : n, 1};
  if (extra[0]) c.bias_strides = Strides4{s0[kBias], s1[kBias], (*extra[0])[nb], (*extra[0])[nb + 1]};
  if (extra[1]) c.mask_strides = Strides4{s0[kMask], s1[kMask], (*extra[1])[nb], (*extra[1])[nb + 1]};
  if (v_shape) {
    c.v_strides = Strides4{s0[kV], s1[kV], view[kV] ? view[kV]->row : dv, 1};
    c.d = dv;
    c.out_shape[c.out_shape.size() - 1] = dv;
    if (bo) c.out_shape = {batch[0], m, batch[1], dv};
    if (packed_qkv) {
      c.k_offset = SatMul(a_shape_in[3], a_shape_in[4]);
      c.v_offset = SatMul(c.k_offset, 2);
    }
  }

  const int64_t bb = SatMul(b0, b1);
  const int64_t d0 = std::max<int64_t>(dv, 0);
  if (std::max(SatMul(SatMul(bb, m), std::max({n, k, d0})), SatMul(SatMul(bb, n), std::max(k, d0))) > kInt32Max)
    throw ShapeError("problem (" + std::to_string(b0) + ", " + std::to_string(b1) + ", " + std::to_string(m) + ", " +
                     std::to_string(n) + ", " + std::to_string(k) +
                     ") has tensors of more than 2^31 elements; the kernels index in int32");
  int64_t out_elems = 1;
  for (int64_t d : c.out_shape) out_elems = SatMul(out_elems, d);
  if (out_elems > kInt32Max)
    throw ShapeError("output of " + std::to_string(out_elems) + " elements exceeds the int32 index range");
  return c;
}

}  // namespace flashgemm
