// Activations quantized to int8 per row at run time, for the int8 products of linears with
// quantized weights (kernels/linear_widened.cpp: int8 weights; kernels/linear_int4.cpp: int4
// weights requantized per panel). CompilerConfig.int8_activations ("per_row").
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/gemv.h"

namespace ag::int8_rows {

// One row of x (K f32 or bf16 values) to int8 with the scale amax / 127, rounded half to even as
// torch.round and oneDNN's quantization do. Returns the scale: 0 for a row of zeros, NaN when the
// row holds inf or nan (the caller computes that row exactly).
template <typename T>
float quantize(const T* x, int64_t K, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 v = gemv::load8(x + k);
    mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ));
  }
  alignas(32) float m8[8];
  _mm256_store_ps(m8, mx);
  float amax = 0.f;
  for (float v : m8) amax = std::fmax(amax, v);
  bool nonfinite = _mm256_movemask_ps(bad) != 0;
  for (int64_t j = k; j < K; ++j) {
    const float v = gemv::load1(x + j);
    nonfinite |= !std::isfinite(v);
    amax = std::fmax(amax, std::fabs(v));
  }
  if (nonfinite) return std::nanf("");
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  const __m256 iv = _mm256_set1_ps(inv);
  for (k = 0; k + 8 <= K; k += 8) {
    const __m256i i32 = _mm256_cvtps_epi32(_mm256_mul_ps(gemv::load8(x + k), iv));
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packs_epi16(i16, i16));
  }
  for (int64_t j = k; j < K; ++j) q[j] = static_cast<int8_t>(std::nearbyint(gemv::load1(x + j) * inv));
  return amax / 127.f;
}

// Rows [0, M) of x ([M, K]) into q ([M, K]) and their scales into s ([M]), over the threads.
template <typename T>
void quantize_rows(const T* x, int64_t M, int64_t K, int8_t* q, float* s) {
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) s[m] = quantize(x + m * K, K, q + m * K);
  });
}

}  // namespace ag::int8_rows
