// The packed small-row f32 GEMM (gemm_panels.h). Four rows of x against one 16-column panel at a
// time: eight accumulators, each weight load shared by four rows, each broadcast of x by two FMAs;
// the panel streams from memory once and stays in L1 for the next four rows. (Six rows, twelve
// accumulators, spilled them to the stack in GCC 12: half the speed.)
#include "kernels/gemm_panels.h"

#include <immintrin.h>

#include <algorithm>

#include "base/parallel.h"
#include "kernels/epilogue.h"

namespace ag::panels {
namespace {

constexpr int64_t kAhead = 128;  // k rows of the panel fetched ahead (8 KB): DRAM's latency covered

template <int MR>
[[gnu::always_inline]] inline void tile(const float* x, int64_t K, const float* p, const float* bias, float* y,
                                        int64_t N) {
  __m256 c0[MR], c1[MR];
  for (int i = 0; i < MR; ++i) c0[i] = _mm256_setzero_ps(), c1[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 w0 = _mm256_loadu_ps(p + k * kCols), w1 = _mm256_loadu_ps(p + k * kCols + 8);
    asm("" : "+x"(w0), "+x"(w1));  // (in registers: GCC otherwise folds the loads into each row's FMA, 4x the loads)
    _mm_prefetch(reinterpret_cast<const char*>(p + (k + kAhead) * kCols), _MM_HINT_T0);  // (no fault past the end)
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(x + i * K + k);
      c0[i] = _mm256_fmadd_ps(a, w0, c0[i]);
      c1[i] = _mm256_fmadd_ps(a, w1, c1[i]);
    }
  }
  if (bias) {
    const __m256 b0 = _mm256_loadu_ps(bias), b1 = _mm256_loadu_ps(bias + 8);
    for (int i = 0; i < MR; ++i) c0[i] = _mm256_add_ps(c0[i], b0), c1[i] = _mm256_add_ps(c1[i], b1);
  }
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(y + i * N, c0[i]);
    _mm256_storeu_ps(y + i * N + 8, c1[i]);
  }
}

}  // namespace

void run(const float* x, int64_t M, int64_t K, const float* packed, int64_t N, const float* bias, float* y,
         const epi::Epilogue& e, void* const* in) {
  const int64_t J = N / kCols;
  // (a few panels a task: one panel of 12 rows and K 384 is ~2 us of work)
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(M * K, 1));
  parallel_for(J, grain, [&](int64_t jb, int64_t je) {
    for (int64_t j = jb; j < je; ++j) {
      const float* p = packed + j * K * kCols;
      const float* b = bias ? bias + j * kCols : nullptr;
      float* o = y + j * kCols;
      int64_t m = 0;
      for (; m + 4 <= M; m += 4) tile<4>(x + m * K, K, p, b, o + m * N, N);
      switch (M - m) {
        case 3: tile<3>(x + m * K, K, p, b, o + m * N, N); break;
        case 2: tile<2>(x + m * K, K, p, b, o + m * N, N); break;
        case 1: tile<1>(x + m * K, K, p, b, o + m * N, N); break;
        default: break;
      }
    }
    if (!e.empty())
      for (int64_t m = 0; m < M; ++m) e.apply(y + m * N + jb * kCols, m, jb * kCols, (je - jb) * kCols, in, 0);
  });
}

}  // namespace ag::panels
