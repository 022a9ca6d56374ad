// Test driver for canonical.cc (not shipped): lets tests/test_ort_op.py compare Canonicalize with the Python
// flashgemm.op.variant.canonicalize on many shape combinations in one process.
// stdin, one case per line:  A;B;transB;bias;mask[;V[;bsnh[;packed_qkv]]]   shapes as comma lists, "" = rank 0,
//                            "none" = absent; bsnh: four 0/1 flags (Q, K, V, O); packed_qkv: 0/1.
// stdout, one line per case: "ok b0,b1,m,n,k;out;a_strides;b_strides;bias_strides|none;mask_strides|none"
//                            (with V: ";v_strides;d" appended; with bsnh: ";out_strides" after them; with
//                            packed_qkv: ";k_offset,v_offset" last)
//                        or  "err <message>".
#include <iostream>
#include <sstream>
#include <string>

#include "canonical.h"

namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

flashgemm::Shape ParseShape(const std::string& s) {
  flashgemm::Shape out;
  if (s.empty()) return out;
  for (const auto& d : Split(s, ',')) out.push_back(std::stoll(d));
  return out;
}

template <typename C>
std::string Join(const C& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) out += (i ? "," : "") + std::to_string(c[i]);
  return out;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    auto f = Split(line, ';');
    if (f.size() < 5 || f.size() > 8) {
      std::cout << "err bad input line\n";
      continue;
    }
    flashgemm::Shape a = ParseShape(f[0]), b = ParseShape(f[1]), bias, mask, v;
    const bool has_v = f.size() >= 6, has_bsnh = f.size() >= 7, has_packed = f.size() == 8;
    if (has_v) v = ParseShape(f[5]);
    flashgemm::Bsnh bsnh{false, false, false, false};
    if (has_bsnh) {
      flashgemm::Shape flags = ParseShape(f[6]);
      for (size_t i = 0; i < 4 && i < flags.size(); ++i) bsnh[i] = flags[i] != 0;
    }
    bool has_bias = f[3] != "none", has_mask = f[4] != "none";
    if (has_bias) bias = ParseShape(f[3]);
    if (has_mask) mask = ParseShape(f[4]);
    try {
      auto c = flashgemm::Canonicalize(a, b, f[2] == "1", has_bias ? &bias : nullptr, has_mask ? &mask : nullptr,
                                       has_v ? &v : nullptr, bsnh, has_packed && f[7] == "1");
      std::cout << "ok " << Join(c.sizes()) << ';' << Join(c.out_shape) << ';' << Join(c.a_strides) << ';'
                << Join(c.b_strides) << ';' << (c.bias_strides ? Join(*c.bias_strides) : "none") << ';'
                << (c.mask_strides ? Join(*c.mask_strides) : "none");
      if (has_v) std::cout << ';' << Join(*c.v_strides) << ';' << c.d;
      if (has_bsnh) std::cout << ';' << Join(c.out_strides);
      if (has_packed) std::cout << ';' << c.k_offset << ',' << c.v_offset;
      std::cout << '\n';
    } catch (const flashgemm::ShapeError& e) {
      std::cout << "err " << e.what() << '\n';
    }
  }
  return 0;
}
