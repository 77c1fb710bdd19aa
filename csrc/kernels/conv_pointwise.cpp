#include "kernels/conv_pointwise.h"

#include <algorithm>
#include <cstring>

#include "kernels/simd.h"

namespace ag::pointwise {

using namespace simd;

Packed pack(const float* w, const float* bias, int64_t O, int64_t K) {
  Packed p;
  p.K = K, p.O = O, p.Op = (O + 7) / 8 * 8;  // (a whole number of 8-lane vectors: either width's tail)
  p.w = dnnl_util::alloc_buffer(static_cast<size_t>(K * p.Op) * 4);
  p.b = dnnl_util::alloc_buffer(static_cast<size_t>(p.Op) * 4);
  float* pw = static_cast<float*>(p.w.data());
  float* pb = static_cast<float*>(p.b.data());
  std::memset(pw, 0, static_cast<size_t>(K * p.Op) * 4);
  std::memset(pb, 0, static_cast<size_t>(p.Op) * 4);
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) pw[k * p.Op + o] = w[o * K + k];
  if (bias) std::memcpy(pb, bias, static_cast<size_t>(O) * 4);
  return p;
}

namespace {

// R output rows x NV vectors of 8 channels, from column `col`, summed over all K in registers; the last
// vector stores `last` lanes (the channels left before O).
template <int NV, int R>
[[gnu::always_inline]] inline void tile(const Packed& p, const float* x, float* y, int64_t col, int64_t last) {
  using F = F8;
  const int64_t K = p.K, Op = p.Op, O = p.O;
  F acc[R][NV];
  const float* xr[R];
  const float* b = static_cast<const float*>(p.b.data()) + col;
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) {
    F bv;
    load<8>(bv, b + v * 8);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][v] = bv;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) xr[r] = x + r * K;
  const float* w = static_cast<const float*>(p.w.data()) + col;
  for (int64_t k = 0; k < K; ++k, w += Op) {
    F wv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) load<8>(wv[v], w + v * 8);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const F xb = _mm256_broadcast_ss(xr[r] + k);  // (from memory: a load, no shuffle)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] += xb * wv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * O + col;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1 && last < 8) store_n(yr + v * 8, acc[r][v], last);
      else store<8>(yr + v * 8, acc[r][v]);
    }
  }
}

// Rows [m0, m1) of one column block: tiles of R rows, then the rows left one at a time.
template <int NV, int R>
[[gnu::always_inline]] inline void column_block(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1,
                                                int64_t col) {
  const int64_t last = std::min<int64_t>(8, p.O - col - (NV - 1) * 8);
  int64_t m = m0;
  for (; m + R <= m1; m += R) tile<NV, R>(p, x + m * p.K, y + m * p.O, col, last);
  for (; m < m1; ++m) tile<NV, 1>(p, x + m * p.K, y + m * p.O, col, last);
}

// 8-lane vectors on either instruction set (AVX-512 here brings 32 registers, not wider FMAs: a Zen 4 runs a
// 16-lane FMA as two 8-lane ones); register tiles of (vectors, rows) whose accumulators, weight vectors and
// broadcast fit the width's registers (kRegs32: AVX-512's 32; else AVX2's 16, the FMA reading its weight
// from memory).
template <bool kRegs32>
[[gnu::always_inline]] inline void rows_body(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1) {
  int64_t col = 0;
  for (; col + 32 <= p.Op; col += 32) column_block<4, kRegs32 ? 6 : 3>(p, x, y, m0, m1, col);
  const int64_t left = (p.Op - col) / 8;
  if (left == 3) column_block<3, kRegs32 ? 8 : 4>(p, x, y, m0, m1, col);
  else if (left == 2) column_block<2, kRegs32 ? 12 : 6>(p, x, y, m0, m1, col);
  else if (left == 1) column_block<1, kRegs32 ? 12 : 8>(p, x, y, m0, m1, col);
}

AG_WRAPPER_AVX512 void rows_avx512(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1) {
  rows_body<true>(p, x, y, m0, m1);
}
AG_WRAPPER_AVX2 void rows_avx2(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1) {
  rows_body<false>(p, x, y, m0, m1);
}

}  // namespace

void rows(const Packed& p, const float* x, float* y, int64_t m0, int64_t m1, bool avx512) {
  if (avx512) rows_avx512(p, x, y, m0, m1);
  else rows_avx2(p, x, y, m0, m1);
}

}  // namespace ag::pointwise
