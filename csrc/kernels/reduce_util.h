// Helpers shared by the reduction-like kernel files (reduce, softmax, norm,
// pool): reduction-dim parsing and inference, the (outer, reduce, inner)
// geometry a reduction is run with, and a vectorizable float exp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common.h"

namespace ag {

// Which dims of a rank-`rank` tensor a `dims` attribute reduces. An empty list
// means all dims (when `empty_is_all`); negative dims wrap; duplicates throw.
// A 0-d tensor accepts dim 0 / -1 (reducing nothing).
inline std::vector<bool> reduce_mask(const char* op, int64_t rank, const std::vector<int64_t>& dims,
                                     bool empty_is_all = true) {
  std::vector<bool> m(rank, dims.empty() && empty_is_all);
  for (int64_t d : dims) {
    int64_t r = std::max<int64_t>(rank, 1);
    AG_CHECK(d >= -r && d < r, op, ": dim ", d, " is out of range for a tensor of rank ", rank);
    if (rank == 0) continue;
    int64_t nd = d < 0 ? d + rank : d;
    AG_CHECK(!m[nd], op, ": dim ", nd, " appears more than once in the reduction dims");
    m[nd] = true;
  }
  return m;
}

inline Shape reduced_shape(const Shape& s, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!mask[i]) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// The reduction of a contiguous tensor, after dropping size-1 dims and merging
// neighbouring dims of the same kind:
//   Inner:   out[o]       = reduce_r x[o*R + r]              (rows reduced)
//   Outer:   out[o*I + i] = reduce_r x[(o*R + r)*I + i]      (strided, vectorized over i)
//   General: out[k]       = reduce_r x[kept_off[k] + red_off[r]]
struct ReduceGeom {
  enum Path { Inner, Outer, General } path = Inner;
  int64_t O = 1, R = 1, I = 1;
  int64_t out_numel = 1, red_numel = 1;
  std::vector<int64_t> kept_off, red_off;  // General only
};

inline ReduceGeom make_reduce_geom(const Shape& s, const std::vector<bool>& mask) {
  ReduceGeom g;
  struct Grp { int64_t size; bool red; };
  std::vector<Grp> grps;
  for (size_t i = 0; i < s.size(); ++i) {
    if (mask[i]) g.red_numel *= s[i];
    else g.out_numel *= s[i];
    if (s[i] == 1) continue;
    if (!grps.empty() && grps.back().red == mask[i]) grps.back().size *= s[i];
    else grps.push_back({s[i], static_cast<bool>(mask[i])});
  }
  // Normalize to start with a kept group and end with a kept group (size 1 if absent).
  if (grps.empty() || grps.front().red) grps.insert(grps.begin(), {1, false});
  if (grps.back().red) grps.push_back({1, false});
  if (grps.size() == 1) {  // nothing reduced
    g.path = ReduceGeom::Outer;
    g.O = 1, g.R = 1, g.I = grps[0].size;
  } else if (grps.size() == 3) {
    g.O = grps[0].size, g.R = grps[1].size, g.I = grps[2].size;
    g.path = g.I == 1 ? ReduceGeom::Inner : ReduceGeom::Outer;
  } else {
    g.path = ReduceGeom::General;
    // Offsets of every kept position and every reduced position (contiguous strides).
    Shape st = contiguous_strides(s);
    g.kept_off.assign(1, 0);
    g.red_off.assign(1, 0);
    for (size_t i = 0; i < s.size(); ++i) {
      auto& v = mask[i] ? g.red_off : g.kept_off;
      std::vector<int64_t> nv;
      nv.reserve(v.size() * s[i]);
      for (int64_t b : v)
        for (int64_t j = 0; j < s[i]; ++j) nv.push_back(b + j * st[i]);
      v.swap(nv);
    }
  }
  return g;
}

// Geometry for a reduction (or scan) along one dim: O outer, R along, I inner.
inline void split_at_dim(const Shape& s, int64_t dim, int64_t& O, int64_t& R, int64_t& I) {
  O = 1, R = s.empty() ? 1 : s[dim], I = 1;
  for (int64_t i = 0; i < dim; ++i) O *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) I *= s[i];
}

// Grain (in units of items costing `work` elements each) so each chunk does ~32K elements.
inline int64_t grain_for(int64_t work) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(work, 1)); }

// exp for float that GCC vectorizes inside `#pragma omp simd` loops (Cephes
// polynomial, ~1 ulp). NaN propagates, large arguments saturate to inf, very
// negative ones flush to 0 (no denormal results).
inline float vexp(float x) {
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;  // NaN passes through both clamps
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  float fx = (xc * 1.44269504088896341f + magic) - magic;
  float g = xc - fx * 0.693359375f;
  g = g - fx * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * g + 1.3981999507e-3f;
  p = p * g + 8.3334519073e-3f;
  p = p * g + 4.1665795894e-2f;
  p = p * g + 1.6666665459e-1f;
  p = p * g + 5.0000001201e-1f;
  p = p * g * g + g + 1.0f;
  int32_t n = static_cast<int32_t>(fx);
  // 2^n as two factors so that n = 128 (x near hi) does not overflow the exponent
  int32_t n1 = n >> 1, n2 = n - n1;
  float s1 = __builtin_bit_cast(float, (n1 + 127) << 23), s2 = __builtin_bit_cast(float, (n2 + 127) << 23);
  float r = p * s1 * s2;
  r = x > hi ? std::numeric_limits<float>::infinity() : r;
  r = x < lo ? 0.0f : r;
  return r;
}
inline double vexp(double x) { return std::exp(x); }

}  // namespace ag
