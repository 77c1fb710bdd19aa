// kernels/conv_winograd.h: the 3x3 convolution by F(2x2, 3x3) against a double-precision direct convolution,
// under both instruction sets, on channel counts around the 8- and 16-lane vectors (masked tails), odd and
// even output sizes (tiles past the edge), paddings 0-2 on either side, and block sizes that split rows of
// tiles (the thread count the plan is made for). The post-op runs it reports cover every output pixel once.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/conv_winograd.h"
#include "kernels/isa.h"
#include "test_util.h"

namespace ag {
namespace {

struct Case {
  int64_t N, H, W, C, K, pt, pl, pb, pr;
  int threads;
  bool bias;
};

void check(const Case& c, bool avx512) {
  const int64_t Ho = c.H + c.pt + c.pb - 2, Wo = c.W + c.pl + c.pr - 2;
  const std::vector<float> x = test::randn(c.N * c.H * c.W * c.C, 1), w = test::randn(c.K * c.C * 9, 2),
                           b = test::randn(c.K, 3);
  isa::force(avx512 ? isa::kAvx512 : isa::kAvx2);
  winograd::Plan p = winograd::make(w.data(), c.bias ? b.data() : nullptr, w.data(), nullptr, c.N, c.H, c.W, c.C,
                                    c.K, c.pt, c.pl, Ho, Wo, c.threads);
  const float canary = 12345.0f;
  std::vector<float> y(c.N * Ho * Wo * c.K + 1, canary), slot(p.slot_floats());
  std::vector<char> pad(p.pad_bytes + 1);
  std::vector<int> seen(c.N * Ho * Wo, 0);
  dnnl_util::Args args = p.gemm.make_args();
  // the blocks in two calls, as two threads take them
  const int64_t half = p.blocks() / 2;
  for (auto [b0, b1] : {std::pair<int64_t, int64_t>{0, half}, {half, p.blocks()}})
    winograd::run_blocks(p, x.data(), y.data(), b0, b1, slot.data(), args, pad.data(), [&](int64_t p0, int64_t p1) {
      for (int64_t q = p0; q < p1; ++q) ++seen[q];
    });
  isa::force(isa::kAuto);
  for (int64_t q = 0; q < c.N * Ho * Wo; ++q) ASSERT_EQ(seen[q], 1) << "pixel " << q << " reported " << seen[q] << " times";
  ASSERT_EQ(y.back(), canary) << "wrote past the end";
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j)
        for (int64_t k = 0; k < c.K; ++k) {
          double want = c.bias ? b[k] : 0.0, mag = std::fabs(want);
          for (int64_t r = 0; r < 3; ++r)
            for (int64_t s = 0; s < 3; ++s) {
              const int64_t yy = i + r - c.pt, xx = j + s - c.pl;
              if (yy < 0 || yy >= c.H || xx < 0 || xx >= c.W) continue;
              for (int64_t ch = 0; ch < c.C; ++ch) {
                const double v = double(x[((n * c.H + yy) * c.W + xx) * c.C + ch]) * w[((k * c.C + ch) * 3 + r) * 3 + s];
                want += v;
                mag += std::fabs(v);
              }
            }
          const float got = y[((n * Ho + i) * Wo + j) * c.K + k];
          ASSERT_NEAR(got, want, 2e-6 * mag + 1e-6)
              << "N " << c.N << " H " << c.H << " W " << c.W << " C " << c.C << " K " << c.K << " pad " << c.pt << c.pl
              << c.pb << c.pr << " at " << n << "," << i << "," << j << "," << k << (avx512 ? " avx512" : " avx2");
        }
}

TEST(ConvWinograd, MatchesDirectEveryIsaShapeAndPadding) {
  std::vector<bool> isas{false};
  if (isa::cpu_has_avx512()) isas.push_back(true);
  const Case cases[] = {
      {1, 8, 8, 16, 16, 1, 1, 1, 1, 1, true},    {1, 9, 7, 5, 3, 1, 1, 1, 1, 2, false},
      {2, 11, 13, 24, 40, 0, 0, 0, 0, 2, true},  {1, 6, 10, 37, 17, 2, 2, 2, 2, 3, true},
      {3, 5, 5, 8, 8, 1, 0, 0, 1, 1, false},     {1, 30, 30, 64, 64, 1, 1, 1, 1, 2, true},
      {2, 7, 7, 128, 96, 1, 1, 1, 1, 2, true},   {1, 3, 3, 33, 65, 1, 1, 1, 1, 1, true},
  };
  for (bool avx512 : isas)
    for (const Case& c : cases) {
      check(c, avx512);
      if (HasFatalFailure()) return;
    }
}

// An inf or NaN input: the transforms' differences would make inf - inf = NaN where the direct sum gives +-inf;
// the blocks that hold one are summed directly, so every output is inf, -inf or NaN exactly where the direct
// convolution's is (and equal to it elsewhere), under both instruction sets and with a folded scale.
TEST(ConvWinograd, InfAndNaNInputsGiveTheDirectConvolutionsResult) {
  const int64_t N = 1, H = 10, W = 9, C = 20, K = 24;
  std::vector<float> x = test::randn(N * H * W * C, 5), w = test::randn(K * C * 9, 6), b = test::randn(K, 7),
                     scale = test::randn(K, 8), scaled = w;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < C * 9; ++i) scaled[k * C * 9 + i] *= scale[k];
  x[(3 * W + 4) * C + 5] = std::numeric_limits<float>::infinity();
  x[(7 * W + 1) * C + 2] = -std::numeric_limits<float>::infinity();
  x[(8 * W + 8) * C + 0] = std::nanf("");
  std::vector<bool> isas{false};
  if (isa::cpu_has_avx512()) isas.push_back(true);
  for (bool avx512 : isas) {
    isa::force(avx512 ? isa::kAvx512 : isa::kAvx2);
    winograd::Plan p = winograd::make(scaled.data(), b.data(), w.data(), scale.data(), N, H, W, C, K, 1, 1, H, W, 2);
    std::vector<float> y(N * H * W * K), slot(p.slot_floats());
    std::vector<char> pad(p.pad_bytes + 1);
    dnnl_util::Args args = p.gemm.make_args();
    winograd::run_blocks(p, x.data(), y.data(), 0, p.blocks(), slot.data(), args, pad.data(), [](int64_t, int64_t) {});
    isa::force(isa::kAuto);
    int64_t infs = 0;
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j)
        for (int64_t k = 0; k < K; ++k) {
          double want = b[k];
          for (int64_t r = 0; r < 3; ++r)
            for (int64_t s = 0; s < 3; ++s) {
              const int64_t yy = i + r - 1, xx = j + s - 1;
              if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
              for (int64_t c = 0; c < C; ++c)
                want += double(x[(yy * W + xx) * C + c]) * double(scaled[((k * C + c) * 3 + r) * 3 + s]);
            }
          const float got = y[(i * W + j) * K + k];
          infs += std::isinf(want);
          ASSERT_EQ(std::isnan(got), std::isnan(want)) << i << "," << j << "," << k << (avx512 ? " avx512" : " avx2");
          if (std::isinf(want)) ASSERT_EQ(got, want) << i << "," << j << "," << k;
          else if (!std::isnan(want)) ASSERT_NEAR(got, want, 1e-3 * (1 + std::fabs(want)));
        }
    ASSERT_GT(infs, 0) << "no output was infinite: the test plants nothing";
  }
}

// Plans made from the same weights share one transformed copy (the programs of a graph's sizes); weights that
// differ, or that changed in place, get their own; a copy lives while a plan holds it.
TEST(ConvWinograd, PlansShareTransformedWeightsByContent) {
  std::vector<float> w = test::randn(32 * 48 * 9, 4);
  const int64_t before = dnnl_util::packed_weight_bytes();
  auto plan = [&](int64_t n) {
    return winograd::make(w.data(), nullptr, w.data(), nullptr, n, 12, 12, 48, 32, 1, 1, 12, 12, 2);
  };
  {
    winograd::Plan a = plan(1), b = plan(4);
    ASSERT_EQ(a.u.data(), b.u.data()) << "the same weights transformed twice";
    const int64_t one = dnnl_util::packed_weight_bytes() - before;
    ASSERT_GE(one, 16 * 48 * 32 * 4);
    w[5] += 1.0f;  // changed in place: the same address, other values
    winograd::Plan c = plan(1);
    ASSERT_NE(c.u.data(), a.u.data()) << "a changed weight served its old transform";
    ASSERT_EQ(dnnl_util::packed_weight_bytes() - before, 2 * one);
  }
  ASSERT_EQ(dnnl_util::packed_weight_bytes(), before) << "transformed weights outlived their plans";
}

}  // namespace
}  // namespace ag
