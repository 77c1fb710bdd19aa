// kernels/conv_pointwise.h: the 1x1 convolution's own kernel against a double-precision reference, under
// both instruction sets, on channel counts around its 8-lane vectors and register tiles (1 .. 100 outputs:
// every column block and masked tail), row counts around its row tiles, and row ranges that start and end
// anywhere (the blocks a caller hands it). Nothing outside the rows asked for is written.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/conv_pointwise.h"
#include "kernels/isa.h"
#include "test_util.h"

namespace ag {
namespace {

void check(int64_t K, int64_t O, int64_t M, int64_t m0, int64_t m1, bool avx512, bool bias) {
  const std::vector<float> x = test::randn(M * K, 1), w = test::randn(O * K, 2), b = test::randn(O, 3);
  const pointwise::Packed p = pointwise::pack(w.data(), bias ? b.data() : nullptr, O, K);
  const float canary = 12345.0f;
  std::vector<float> y(M * O + 1, canary);
  pointwise::rows(p, x.data(), y.data(), m0, m1, avx512);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t o = 0; o < O; ++o) {
      const float got = y[m * O + o];
      if (m < m0 || m >= m1) {
        ASSERT_EQ(got, canary) << "wrote row " << m << " outside [" << m0 << ", " << m1 << ")";
        continue;
      }
      double want = bias ? b[o] : 0.0, mag = std::fabs(want);
      for (int64_t k = 0; k < K; ++k) {
        want += static_cast<double>(x[m * K + k]) * w[o * K + k];
        mag += std::fabs(static_cast<double>(x[m * K + k]) * w[o * K + k]);
      }
      ASSERT_NEAR(got, want, 1e-6 * mag + 1e-6)
          << "K " << K << " O " << O << " row " << m << " channel " << o << (avx512 ? " avx512" : " avx2");
    }
  ASSERT_EQ(y[M * O], canary) << "wrote past the end";
}

TEST(ConvPointwise, MatchesReferenceEveryIsaChannelsAndRows) {
  std::vector<bool> isas{false};
  if (isa::cpu_has_avx512()) isas.push_back(true);
  for (bool avx512 : isas)
    for (int64_t K : {1, 3, 16, 37})
      for (int64_t O : {1, 5, 8, 13, 16, 24, 31, 32, 40, 96, 100})
        for (int64_t M : {1, 7, 13, 50}) {
          check(K, O, M, 0, M, avx512, true);
          if (M > 7) check(K, O, M, 3, M - 2, avx512, O % 2 == 0);  // (a block inside; no bias on some)
          if (HasFatalFailure()) return;
        }
}

}  // namespace
}  // namespace ag
