// Window geometry shared by the pooling kernels (pool.cpp: 2-D; pool3d.cpp: 3-D and adaptive max).
#pragma once
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "ir/attrs.h"

namespace ag::pool {

inline int64_t div_floor(int64_t a, int64_t b) {
  int64_t q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}

// PyTorch's pooling_output_shape.
inline int64_t out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t o = div_floor(in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0), stride) + 1;
  if (ceil && (o - 1) * stride >= in + pad) --o;
  return o;
}

// A per-spatial-dim attribute (kernel, stride, padding, dilation) of an n-D pool: n values, or one
// for every dim; `dflt` when absent or empty.
inline std::vector<int64_t> spatial_attr(const Attrs& a, const char* op, const char* key, std::vector<int64_t> dflt,
                                         size_t n) {
  std::vector<int64_t> v = a.ints(key, dflt);
  if (v.empty()) v = dflt;
  if (v.size() == 1) v.assign(n, v[0]);
  AG_CHECK(v.size() == n, op, ": ", key, " must have 1 or ", n, " values, got ", v.size());
  return v;
}

}  // namespace ag::pool
