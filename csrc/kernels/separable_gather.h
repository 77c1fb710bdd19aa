// A separable gather: out = x[..., i_0, .., i_{k-1}] (aten.index with integer
// index tensors on x's trailing dims d0..d0+k-1) where every index tensor,
// broadcast to the index shape B, varies along at most one dim of B, as the
// gathers that F.interpolate and the pads decompose into do
// (x[:, :, ih[:, None], iw]). Then the source offset of out[p, b_0, .., b_n]
// is p * pre_stride + base + sum_d tab_d[b_d]: one small table per dim of B,
// filled once per run from the index tensors. fused_elementwise reads such a
// gather as one of its inputs, tile by tile (passes/fuse_gathers.cpp), so the
// gathered tensor is never stored.
#pragma once
#include <algorithm>
#include <vector>

#include "kernels/common.h"

namespace ag {

struct SeparableGather {
  Shape bshape;             // broadcast shape of the index tensors
  int64_t pre_stride = 0;   // elements of x per position of the dims before d0
  Shape out_shape;          // x.shape[:d0] + bshape
  // per index tensor
  std::vector<char> i32;
  Shape numel, dim_size, dim_stride, dim, vary, step;  // vary: the dim of B it varies along (-1: none)
  Shape tab_start;          // per dim of B; the tables hold total() offsets, then base
  int64_t total() const { return tab_start.back() + bshape.back(); }
  size_t table_bytes() const { return static_cast<size_t>(total() + 1) * sizeof(int64_t); }

  // False (and nothing else) when the gather is not of this form.
  static bool plan(const TensorType& x, const std::vector<TensorType>& idx, const Shape& dims, SeparableGather* g) {
    const int64_t k = static_cast<int64_t>(idx.size());
    if (k < 1 || k > 16 || static_cast<int64_t>(dims.size()) != k || !x.is_static()) return false;
    for (int64_t j = 0; j < k; ++j) {
      if ((idx[j].dtype != DType::i64 && idx[j].dtype != DType::i32) || !idx[j].is_static()) return false;
      if (dims[j] != dims[0] + j) return false;
    }
    if (dims.back() != x.rank() - 1) return false;  // indexed dims must be the trailing ones
    SeparableGather s;
    try {
      s.bshape = idx[0].shape();
      for (int64_t j = 1; j < k; ++j) s.bshape = broadcast_shapes(s.bshape, idx[j].shape());
    } catch (const Error&) {
      return false;
    }
    const int nbd = static_cast<int>(s.bshape.size());
    if (nbd < 1 || nbd > 16) return false;
    Shape xs = contiguous_strides(x.shape());
    s.pre_stride = dims[0] > 0 ? xs[dims[0] - 1] : 0;
    for (int64_t d = 0; d < dims[0]; ++d) s.out_shape.push_back(x.size(d));
    for (int64_t b : s.bshape) s.out_shape.push_back(b);
    for (int64_t j = 0; j < k; ++j) {
      Shape bs = broadcast_strides(idx[j].shape(), s.bshape);
      int64_t vd = -1;
      for (int d = 0; d < nbd; ++d)
        if (bs[d] != 0 && s.bshape[d] > 1) {
          if (vd >= 0) return false;
          vd = d;
        }
      s.i32.push_back(idx[j].dtype == DType::i32);
      s.numel.push_back(idx[j].numel());
      s.dim_size.push_back(x.size(dims[j]));
      s.dim_stride.push_back(xs[dims[j]]);
      s.dim.push_back(dims[j]);
      s.vary.push_back(vd);
      s.step.push_back(vd >= 0 ? bs[vd] : 0);
    }
    int64_t t = 0;
    for (int d = 0; d < nbd; ++d) {
      s.tab_start.push_back(t);
      t += s.bshape[d];
    }
    *g = std::move(s);
    return true;
  }

  // Checks every index (throws naming `what`) and fills tab (table_bytes()).
  void prepare(const void* const* idx, int64_t* tab, const char* what) const {
    const int64_t n = total();
    for (int64_t i = 0; i <= n; ++i) tab[i] = 0;
    for (size_t j = 0; j < i32.size(); ++j) {
      auto ld = [&](int64_t q) {
        return i32[j] ? static_cast<const int32_t*>(idx[j])[q] : static_cast<const int64_t*>(idx[j])[q];
      };
      const int64_t size = dim_size[j];
      for (int64_t q = 0; q < numel[j]; ++q) {
        int64_t v = ld(q);
        if (v < -size || v >= size)
          fail(what, ": index ", v, " is out of bounds for dimension ", dim[j], " with size ", size);
      }
      auto off = [&](int64_t q) {
        int64_t v = ld(q);
        return (v < 0 ? v + size : v) * dim_stride[j];
      };
      if (vary[j] < 0) {
        tab[n] += off(0);
        continue;
      }
      int64_t* t = tab + tab_start[vary[j]];
      for (int64_t i = 0; i < bshape[vary[j]]; ++i) t[i] += off(i * step[j]);
    }
  }

  // dst[0, n) = conv(x[source of output element b + i]) for i in [0, n).
  template <typename T, typename Conv>
  void load(const T* x, const int64_t* tab, int64_t b, int64_t n, float* dst, Conv conv) const {
    const int nbd = static_cast<int>(bshape.size());
    const int64_t L = bshape.back();
    int64_t ctr[16];
    int64_t rr = b / L, j = b % L;
    for (int d = nbd - 2; d >= 0; --d) {
      ctr[d] = rr % bshape[d];
      rr /= bshape[d];
    }
    int64_t pidx = rr;
    const int64_t* tl = tab + tab_start[nbd - 1];
    const int64_t base = tab[total()];
    int64_t pos = 0;
    while (pos < n) {
      int64_t off = base + pidx * pre_stride;
      for (int d = 0; d < nbd - 1; ++d) off += tab[tab_start[d] + ctr[d]];
      const int64_t len = std::min(L - j, n - pos);
      const T* s = x + off;
      const int64_t* t = tl + j;
      float* o = dst + pos;
      for (int64_t i = 0; i < len; ++i) o[i] = conv(s[t[i]]);
      pos += len;
      j = 0;
      int d = nbd - 2;
      for (; d >= 0; --d) {
        if (++ctr[d] < bshape[d]) break;
        ctr[d] = 0;
      }
      if (d < 0) ++pidx;
    }
  }
};

}  // namespace ag
