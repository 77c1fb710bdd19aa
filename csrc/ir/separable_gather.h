// A separable gather: out = x[..., i_0, .., i_{k-1}] (aten.index with integer
// index tensors on x's trailing dims d0..d0+k-1) where every index tensor,
// broadcast to the index shape B, varies along at most one dim of B, as the
// gathers that F.interpolate and the pads decompose into do
// (x[:, :, ih[:, None], iw]). Then the source offset of out[p, b_0, .., b_n]
// is p * pre_stride + base + sum_d tab_d[b_d]: one small table per dim of B,
// filled once per run from the index tensors. fused_elementwise reads such a
// gather as one of its inputs, tile by tile (passes/fuse_gathers.cpp), so the
// gathered tensor is never stored. This is the plan (the fused_elementwise op's "gathers"
// contract, read by the pass and by inference); kernels/separable_gather.h runs it.
#pragma once
#include <algorithm>
#include <vector>

#include "base/error.h"
#include "ir/types.h"

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

};

}  // namespace ag
