// A 3x3 convolution (stride 1, one group) on channels-last f32 bytes by Winograd's minimal filtering,
// F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015): each 2x2 block
// of output pixels (a tile) comes from a 4x4 block of input pixels through 16 products of transformed
// values instead of 36, so the GEMM work falls to 16/36 of a direct convolution's. The three steps run on
// a block of tiles at a time, on one thread, while the block stays in that core's cache:
//   V[16][tiles][C] = B^T d B  (each tile's 4x4 input pixels d, per channel)
//   M[16][tiles][K] = V[xi] @ U[xi]  (16 GEMMs: oneDNN's batched matmul on one thread, U = G g G^T, the
//                                     weights transformed and packed once)
//   y = A^T M A + bias        (each tile's 2x2 output pixels, per channel)
// The transforms' coefficients are 0, +-1 and +-1/2: sums of a few products, a rounding error of the
// direct convolution's size (tests/cpp/test_conv_winograd.cpp against a double-precision direct convolution;
// tests/python/test_fusion_epilogue.py against eager and the direct path). The transformed weights are shared
// by the plans made from the same weights (make). oneDNN 3.2 has no Winograd convolution on x86;
// ResNet-style 3x3 layers are compute-bound there, and this is the one way to run them in fewer operations.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/onednn_util.h"

namespace ag::winograd {

struct Plan {
  int64_t N = 0, H = 0, W = 0, C = 0, K = 0;  // input [N, H, W, C], K output channels
  int64_t pt = 0, pl = 0, Ho = 0, Wo = 0;     // top and left padding; the output's height and width
  int64_t th = 0, tw = 0, T = 0, Tb = 0;      // tiles down and across, in all, in a block
  dnnl_util::Exec gemm;                       // [16, Tb, C] x [16, C, K] -> [16, Tb, K]
  dnnl_util::Buffer u, bias, zeros;           // transformed weights (packed), bias [K], C zeros
  // The direct convolution's weights [K][C][3][3] as the caller holds them (they outlive the plan) and the
  // per-channel scale folded into w (empty: none), for blocks whose result holds an inf or NaN (block)
  const float* wd = nullptr;
  dnnl_util::Buffer scale;
  size_t pad_bytes = 0;                       // the GEMM's scratchpad (per thread)
  struct Tile {
    int64_t n, i, j;  // image, row of tiles, column of tiles
  };
  Tile tile(int64_t t) const { return {t / (th * tw), t / tw % th, t % tw}; }
  int64_t blocks() const { return (T + Tb - 1) / Tb; }
  int64_t slot_floats() const { return 16 * Tb * (C + K); }  // V and M of one block
};

// From f32 weights [K][C][3][3] (already scaled by a folded per-channel mul) and an optional f32 bias [K];
// w_direct: the weights before that scale, `scale` (nullptr: none), kept for the direct sums (block);
// `threads`: how many threads share the tiles (the block size gives each a few blocks).
Plan make(const float* w, const float* bias, const float* w_direct, const float* scale, int64_t N, int64_t H,
          int64_t W, int64_t C, int64_t K, int64_t pt, int64_t pl, int64_t Ho, int64_t Wo, int threads);

// The tiles of blocks [b0, b1) on the calling thread: y (NHWC [N, Ho, Wo, K]) written, then
// rows(p0, p1) called for each run of output pixels [p0, p1) (flat indices into [N * Ho * Wo]) it wrote,
// for the post-ops. slot: Plan::slot_floats() floats; args and pad: the thread's GEMM arguments and
// scratchpad.
template <typename Rows>
void run_blocks(const Plan& p, const float* x, float* y, int64_t b0, int64_t b1, float* slot, dnnl_util::Args& args,
                void* pad, Rows&& rows);

// (the part of run_blocks that is not the post-op callback; a block whose result holds an inf or NaN is
// computed again by the direct sums, which keep eager's infs where the transforms' differences make NaN)
void block(const Plan& p, const float* x, float* y, int64_t t0, int64_t t1, float* slot, dnnl_util::Args& args,
           void* pad);

template <typename Rows>
void run_blocks(const Plan& p, const float* x, float* y, int64_t b0, int64_t b1, float* slot, dnnl_util::Args& args,
                void* pad, Rows&& rows) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = b * p.Tb, t1 = std::min(p.T, t0 + p.Tb);
    block(p, x, y, t0, t1, slot, args, pad);
    // the pixels written, as few runs as they make: each row of tiles' one or two rows of pixels, merged
    // with the next where they meet (whole rows of tiles: one run)
    int64_t q0 = 0, q1 = 0;
    auto emit = [&](int64_t p0, int64_t p1) {
      if (p0 != q1) {
        if (q1 > q0) rows(q0, q1);
        q0 = p0;
      }
      q1 = p1;
    };
    for (int64_t t = t0; t < t1;) {
      const auto [n, i, j0] = p.tile(t);
      const int64_t j1 = std::min(p.tw, j0 + (t1 - t));  // this tile row's tiles in the block
      for (int64_t a = 0; a < 2 && 2 * i + a < p.Ho; ++a) {
        const int64_t row = (n * p.Ho + 2 * i + a) * p.Wo;
        emit(row + 2 * j0, row + std::min(2 * j1, p.Wo));
      }
      t += j1 - j0;
    }
    if (q1 > q0) rows(q0, q1);
  }
}

}  // namespace ag::winograd
