// Tests of the reduce family (reductions, argmax/argmin, softmax, cumsum, norms,
// pooling): each builds a one-node graph, compiles and runs it, and compares with
// a naive reference computed here; plus checks that bad inputs throw ag::Error
// with a message that names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "check_op.h"

namespace ag {
namespace {

using test::randn;
using test::attrs;
using test::build_error;
using test::run_op;

// Naive reduction reference: out index of every input element under `mask`.
std::vector<double> ref_reduce(const Shape& s, const std::vector<bool>& mask, const std::vector<float>& x,
                               double init, const std::function<double(double, double)>& f) {
  Shape os;
  for (size_t i = 0; i < s.size(); ++i)
    if (!mask[i]) os.push_back(s[i]);
  int64_t on = 1;
  for (auto v : os) on *= v;
  std::vector<double> out(on, init);
  int64_t n = static_cast<int64_t>(x.size());
  for (int64_t li = 0; li < n; ++li) {
    int64_t rem = li, oi = 0, mul = 1;
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      int64_t c = rem % s[d];
      rem /= s[d];
      if (!mask[d]) oi += c * mul, mul *= s[d];
    }
    out[oi] = f(out[oi], x[li]);
  }
  return out;
}

struct DimsCase {
  std::vector<int64_t> dims;
  std::vector<bool> mask;
};

TEST(ReduceOps, SumMeanAmaxOverEveryPath) {
  const Shape s{3, 4, 5, 6};
  auto x = randn(360);
  std::vector<DimsCase> cases = {
      {{}, {true, true, true, true}},        // all
      {{-1}, {false, false, false, true}},   // inner
      {{2, 3}, {false, false, true, true}},  // inner (merged)
      {{1}, {false, true, false, false}},    // outer
      {{0}, {true, false, false, false}},    // outer, O = 1
      {{0, 2}, {true, false, true, false}},  // general
      {{1, 3}, {false, true, false, true}},  // general
  };
  for (auto& c : cases) {
    auto sum = ref_reduce(s, c.mask, x, 0, [](double a, double b) { return a + b; });
    auto mx = ref_reduce(s, c.mask, x, -INFINITY, [](double a, double b) { return std::max(a, b); });
    int64_t cnt = 1;
    for (size_t i = 0; i < s.size(); ++i)
      if (c.mask[i]) cnt *= s[i];
    std::vector<double> mean(sum.size()), amax(mx.size());
    for (size_t i = 0; i < sum.size(); ++i) mean[i] = sum[i] / cnt, amax[i] = static_cast<float>(mx[i]);
    struct Op {
      const char* name;
      const std::vector<double>& want;
      test::Tol tol;
    };
    for (const Op& o : {Op{"sum", sum, {1e-4, 0}}, Op{"mean", mean, {1e-5, 0}}, Op{"amax", amax, {}}}) {
      test::OpCase k;
      k.op = o.name;
      k.args = {{TensorType(DType::f32, s), x.data()}};
      k.attrs = attrs({{"dims", c.dims}});
      k.want = test::want_values(std::vector<std::vector<double>>{o.want});
      k.tol = o.tol;
      test::check_op(k);
    }
  }
}

TEST(ReduceOps, KeepdimShapesAndIntSumToInt64) {
  std::vector<int32_t> x(24);
  for (int i = 0; i < 24; ++i) x[i] = i - 10;
  auto y = run_op("sum", {{TensorType(DType::i32, {2, 3, 4}), x.data()}},
                  attrs({{"dims", std::vector<int64_t>{1}}, {"keepdim", true}})).got.outs;
  ASSERT_EQ(y[0].type, TensorType(DType::i64, {2, 1, 4}));
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 4; ++c) {
      int64_t want = 0;
      for (int b = 0; b < 3; ++b) want += x[(a * 3 + b) * 4 + c];
      EXPECT_EQ(y[0].as<int64_t>()[a * 4 + c], want);
    }
  auto p = run_op("prod", {{TensorType(DType::i32, {2, 3, 4}), x.data()}},
                  attrs({{"dims", std::vector<int64_t>{2}}})).got.outs;
  ASSERT_EQ(p[0].type, TensorType(DType::i64, {2, 3}));
  EXPECT_EQ(p[0].as<int64_t>()[0], int64_t{-10} * -9 * -8 * -7);
}

TEST(ReduceOps, Bf16SumAccumulatesInFloat) {
  std::vector<uint16_t> x(1000, f32_to_bf16(1.0f));
  auto y = run_op("sum", {{TensorType(DType::bf16, {1000}), x.data()}}, attrs({})).got.outs;
  // a bf16 accumulator would stop at 256
  EXPECT_EQ(bf16_to_f32(y[0].as<uint16_t>()[0]), 1000.0f);
}

TEST(ReduceOps, NanPropagatesAndArgFindsFirst) {
  std::vector<float> x = {1, 5, 5, 2, /**/ 3, NAN, 7, NAN, /**/ -1, -1, -4, -4};
  TensorType t(DType::f32, {3, 4});
  auto mx = run_op("amax", {{t, x.data()}}, attrs({{"dims", std::vector<int64_t>{1}}})).got.outs;
  EXPECT_EQ(mx[0].at(0), 5.f);
  EXPECT_TRUE(std::isnan(mx[0].at(1)));
  EXPECT_EQ(mx[0].at(2), -1.f);
  auto am = run_op("argmax", {{t, x.data()}}, attrs({{"dim", int64_t{1}}})).got.outs;
  auto an = run_op("argmin", {{t, x.data()}}, attrs({{"dim", int64_t{1}}})).got.outs;
  EXPECT_EQ(am[0].as<int64_t>()[0], 1);  // first of the tie
  EXPECT_EQ(am[0].as<int64_t>()[1], 1);  // NaN is the max
  EXPECT_EQ(am[0].as<int64_t>()[2], 0);
  EXPECT_EQ(an[0].as<int64_t>()[0], 0);
  EXPECT_EQ(an[0].as<int64_t>()[1], 1);  // NaN is the min too
  EXPECT_EQ(an[0].as<int64_t>()[2], 2);
  auto a0 = run_op("argmax", {{t, x.data()}}, attrs({{"dim", int64_t{0}}, {"keepdim", true}})).got.outs;
  ASSERT_EQ(a0[0].type.shape(), (Shape{1, 4}));
  EXPECT_EQ(a0[0].as<int64_t>()[1], 1);
  EXPECT_EQ(a0[0].as<int64_t>()[2], 1);
  auto af = run_op("argmax", {{t, x.data()}}, attrs({})).got.outs;
  EXPECT_EQ(af[0].type.rank(), 0);
  EXPECT_EQ(af[0].as<int64_t>()[0], 5);
}

TEST(ReduceOps, VarCorrectionAndAnyAll) {
  std::vector<float> x = {1, 2, 3, 4, 2, 2, 2, 2};
  auto v = run_op("var", {{TensorType(DType::f32, {2, 4}), x.data()}},
                  attrs({{"dims", std::vector<int64_t>{1}}, {"correction", 1.0}})).got.outs;
  EXPECT_NEAR(v[0].at(0), 5.0 / 3.0, 1e-6);
  EXPECT_EQ(v[0].at(1), 0.f);
  auto v0 = run_op("var", {{TensorType(DType::f32, {2, 4}), x.data()}},
                   attrs({{"dims", std::vector<int64_t>{1}}, {"correction", 0.0}})).got.outs;
  EXPECT_NEAR(v0[0].at(0), 1.25, 1e-6);
  std::vector<uint8_t> b = {0, 0, 1, 1, 1, 1};
  auto an = run_op("any", {{TensorType(DType::b8, {3, 2}), b.data()}},
                   attrs({{"dims", std::vector<int64_t>{1}}})).got.outs;
  auto al = run_op("all", {{TensorType(DType::b8, {3, 2}), b.data()}},
                   attrs({{"dims", std::vector<int64_t>{1}}})).got.outs;
  EXPECT_EQ(an[0].type.dtype, DType::b8);
  EXPECT_EQ((std::vector<bool>{an[0].as<bool>()[0], an[0].as<bool>()[1], an[0].as<bool>()[2]}),
            (std::vector<bool>{false, true, true}));
  EXPECT_EQ((std::vector<bool>{al[0].as<bool>()[0], al[0].as<bool>()[1], al[0].as<bool>()[2]}),
            (std::vector<bool>{false, true, true}));
}

TEST(ReduceOps, SoftmaxAndLogSoftmaxBothLayouts) {
  const Shape s{3, 5, 7};
  auto x = randn(105, 3);
  for (int64_t dim : {1, 2}) {
    auto y = run_op("softmax", {{TensorType(DType::f32, s), x.data()}}, attrs({{"dim", dim}})).got.outs;
    auto l = run_op("log_softmax", {{TensorType(DType::f32, s), x.data()}}, attrs({{"dim", dim}})).got.outs;
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < (dim == 1 ? 7 : 5); ++b) {
        auto idx = [&](int r) { return dim == 1 ? (a * 5 + r) * 7 + b : (a * 5 + b) * 7 + r; };
        int R = s[dim];
        double m = -INFINITY, sum = 0;
        for (int r = 0; r < R; ++r) m = std::max<double>(m, x[idx(r)]);
        for (int r = 0; r < R; ++r) sum += std::exp(x[idx(r)] - m);
        for (int r = 0; r < R; ++r) {
          EXPECT_NEAR(y[0].at(idx(r)), std::exp(x[idx(r)] - m) / sum, 1e-6);
          EXPECT_NEAR(l[0].at(idx(r)), x[idx(r)] - m - std::log(sum), 1e-5);
        }
      }
  }
}

TEST(ReduceOps, CumsumAlongEachDim) {
  std::vector<float> x = randn(24, 5);
  for (int64_t dim : {0, 1, 2}) {
    auto y = run_op("cumsum", {{TensorType(DType::f32, {2, 3, 4}), x.data()}}, attrs({{"dim", dim}})).got.outs;
    Shape st{12, 4, 1};
    for (int i = 0; i < 24; ++i) {
      int c = (i / st[dim]) % (dim == 0 ? 2 : dim == 1 ? 3 : 4);
      double want = 0;
      for (int k = 0; k <= c; ++k) want += x[i - (c - k) * st[dim]];
      EXPECT_NEAR(y[0].at(i), want, 1e-5);
    }
  }
}

TEST(NormOps, LayerNormRmsNormBatchNorm) {
  const int M = 5, N = 33;
  auto x = randn(M * N, 7), w = randn(N, 8), b = randn(N, 9);
  auto ln = run_op("layer_norm", {{TensorType(DType::f32, {M, N}), x.data()}, {TensorType(DType::f32, {N}), w.data()},
                    {TensorType(DType::f32, {N}), b.data()}},
                   attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}}))
               .got.outs;
  auto rms = run_op("rms_norm", {{TensorType(DType::f32, {M, N}), x.data()}, {TensorType(DType::f32, {N}), w.data()}},
                    attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-6}, {"has_weight", true}})).got.outs;
  for (int m = 0; m < M; ++m) {
    double mean = 0, var = 0, ms = 0;
    for (int i = 0; i < N; ++i) mean += x[m * N + i], ms += x[m * N + i] * x[m * N + i];
    mean /= N, ms /= N;
    for (int i = 0; i < N; ++i) var += (x[m * N + i] - mean) * (x[m * N + i] - mean);
    var /= N;
    for (int i = 0; i < N; ++i) {
      EXPECT_NEAR(ln[0].at(m * N + i), (x[m * N + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i], 1e-4);
      EXPECT_NEAR(rms[0].at(m * N + i), x[m * N + i] / std::sqrt(ms + 1e-6) * w[i], 1e-4);
    }
  }
  // batch norm over channel dim 1 of [2, 3, 4]
  auto xb = randn(24, 10);
  std::vector<float> mean = {0.5f, -1.f, 2.f}, var = {1.f, 0.25f, 4.f}, g = {1.f, 2.f, -1.f}, be = {0.f, 1.f, 3.f};
  TensorType c3(DType::f32, {3});
  auto bn = run_op("batch_norm", {{TensorType(DType::f32, {2, 3, 4}), xb.data()}, {c3, mean.data()}, {c3, var.data()},
                    {c3, g.data()}, {c3, be.data()}},
                   attrs({{"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}})).got.outs;
  for (int i = 0; i < 24; ++i) {
    int c = (i / 4) % 3;
    EXPECT_NEAR(bn[0].at(i), (xb[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * g[c] + be[c], 1e-5);
  }
}

TEST(PoolOps, MaxPoolWithIndicesAvgPoolAdaptive) {
  // one 5x6 plane; kernel 3, stride 2, padding 1, ceil_mode: output 3x4 (PyTorch's formula)
  const int H = 5, W = 6;
  auto x = randn(H * W, 11);
  x[7] = NAN;  // (1, 1)
  TensorType t(DType::f32, {1, 1, H, W});
  auto mp = run_op("max_pool2d", {{t, x.data()}},
                   attrs({{"kernel", std::vector<int64_t>{3}}, {"stride", std::vector<int64_t>{2}},
                          {"padding", std::vector<int64_t>{1}}, {"ceil_mode", true}, {"indices", true}})).got.outs;
  ASSERT_EQ(mp.size(), 2u);
  ASSERT_EQ(mp[0].type.shape(), (Shape{1, 1, 3, 4}));
  ASSERT_EQ(mp[1].type.dtype, DType::i64);
  auto ap = run_op("avg_pool2d", {{t, x.data()}},
                   attrs({{"kernel", std::vector<int64_t>{3}}, {"stride", std::vector<int64_t>{2}},
                          {"padding", std::vector<int64_t>{1}}, {"ceil_mode", true},
                          {"count_include_pad", false}})).got.outs;
  ASSERT_EQ(ap[0].type.shape(), (Shape{1, 1, 3, 4}));
  for (int oh = 0; oh < 3; ++oh)
    for (int ow = 0; ow < 4; ++ow) {
      float best = -INFINITY;
      int64_t bi = -1;
      double sum = 0;
      int cnt = 0;
      for (int ih = oh * 2 - 1; ih < oh * 2 + 2; ++ih)
        for (int iw = ow * 2 - 1; iw < ow * 2 + 2; ++iw) {
          if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
          float v = x[ih * W + iw];
          if (bi < 0 || v > best || std::isnan(v)) best = v, bi = ih * W + iw;
          sum += v, ++cnt;
        }
      const int o = oh * 4 + ow;
      if (std::isnan(best)) EXPECT_TRUE(std::isnan(mp[0].at(o)));
      else EXPECT_EQ(mp[0].at(o), best);
      EXPECT_EQ(mp[1].as<int64_t>()[o], bi) << oh << "," << ow;
      if (!std::isnan(sum)) EXPECT_NEAR(ap[0].at(o), sum / cnt, 1e-6);
    }
  // adaptive 5x6 -> 3x4: window [floor(o*I/O), ceil((o+1)*I/O))
  auto ad = run_op("adaptive_avg_pool2d", {{t, x.data()}},
                   attrs({{"output_size", std::vector<int64_t>{3, 4}}})).got.outs;
  ASSERT_EQ(ad[0].type.shape(), (Shape{1, 1, 3, 4}));
  for (int oh = 0; oh < 3; ++oh)
    for (int ow = 0; ow < 4; ++ow) {
      int h0 = oh * H / 3, h1 = ((oh + 1) * H + 2) / 3, w0 = ow * W / 4, w1 = ((ow + 1) * W + 3) / 4;
      double sum = 0;
      for (int ih = h0; ih < h1; ++ih)
        for (int iw = w0; iw < w1; ++iw) sum += x[ih * W + iw];
      float got = ad[0].at(oh * 4 + ow);
      if (std::isnan(sum)) EXPECT_TRUE(std::isnan(got));
      else EXPECT_NEAR(got, sum / ((h1 - h0) * (w1 - w0)), 1e-6);
    }
}

TEST(ReduceErrors, BadInputsThrowUsefulMessages) {
  TensorType f(DType::f32, {2, 3});
  TensorType i(DType::i64, {2, 3});
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string m = build_error("sum", {f}, attrs({{"dims", std::vector<int64_t>{2}}}));
  EXPECT_TRUE(has(m, "dim 2 is out of range")) << m;
  EXPECT_TRUE(has(m, "bad_node")) << m;
  m = build_error("sum", {f}, attrs({{"dims", std::vector<int64_t>{1, -1}}}));
  EXPECT_TRUE(has(m, "more than once")) << m;
  m = build_error("mean", {i}, attrs({}));
  EXPECT_TRUE(has(m, "must be floating")) << m;
  m = build_error("var", {i}, attrs({}));
  EXPECT_TRUE(has(m, "var: input must be floating")) << m;
  m = build_error("amax", {TensorType(DType::f32, {0, 3})}, attrs({{"dims", std::vector<int64_t>{0}}}));
  EXPECT_TRUE(has(m, "zero-size dim 0")) << m;
  m = build_error("sum", {f}, attrs({{"dtype", DType::i32}}));
  EXPECT_TRUE(has(m, "output dtype int32")) << m;
  m = build_error("argmax", {f}, attrs({{"dim", int64_t{3}}}));
  EXPECT_FALSE(m.empty());
  m = build_error("layer_norm", {f, TensorType(DType::f32, {2})},
                  attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", true}}));
  EXPECT_TRUE(has(m, "weight has shape [2], expected [3]")) << m;
  m = build_error("layer_norm", {f, TensorType(DType::f64, {3})},
                  attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", true}}));
  EXPECT_TRUE(has(m, "float64")) << m;
  TensorType c3(DType::f32, {3});
  m = build_error("batch_norm", {TensorType(DType::f32, {2, 4, 5}), c3, c3}, attrs({{"eps", 1e-5}}));
  EXPECT_TRUE(has(m, "running_mean has shape [3], expected [4]")) << m;
  m = build_error("max_pool2d", {TensorType(DType::f32, {1, 1, 4, 4})},
                  attrs({{"kernel", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{2}}}));
  EXPECT_TRUE(has(m, "at most half the kernel")) << m;
  m = build_error("avg_pool2d", {TensorType(DType::f32, {4, 4})}, attrs({{"kernel", std::vector<int64_t>{2}}}));
  EXPECT_TRUE(has(m, "3-D (CHW) or 4-D")) << m;
  m = build_error("softmax", {i}, attrs({{"dim", int64_t{0}}}));
  EXPECT_TRUE(has(m, "softmax: input must be floating")) << m;
}

}  // namespace
}  // namespace ag
