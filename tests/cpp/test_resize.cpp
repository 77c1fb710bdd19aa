// resize2d against a direct reference: each output element computed on its own from torch's
// coordinate formulas (UpSample.h), summing its taps in double with bounded reads. Odd sizes,
// upscale and downscale, align_corners both ways, explicit scales, channels-last, 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>

#include "check_op.h"

namespace ag {
namespace {

using test::attrs;
using test::Tol;

struct Case {
  std::string mode;
  int64_t N, C, H, W, OH, OW;
  bool align = false;
  double sh = 0, sw = 0;
  bool cl = false;
};

float scale_of(int64_t in, int64_t out, bool align, double s) {
  if (align) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  return s > 0 ? static_cast<float>(1.0 / s) : static_cast<float>(in) / static_cast<float>(out);
}

// The source taps of output position o (torch's CPU build computes sc * (o + 0.5) - 0.5 as one fma) along one axis: (index, weight) pairs, indices unclamped
// (the reader clamps them).
std::vector<std::pair<int64_t, double>> taps(const std::string& mode, int64_t in, int64_t out, int64_t o, bool align,
                                             double s) {
  const float sc = scale_of(in, out, align, s);
  if (mode == "nearest") {
    if (out == in) return {{o, 1}};
    if (out == 2 * in) return {{o / 2, 1}};
    return {{std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(o) * sc)), in - 1), 1}};
  }
  if (mode == "nearest_exact")
    return {{std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>((o + 0.5) * sc))), in - 1), 1}};
  if (mode == "bilinear") {
    if (out == in) return {{o, 1}, {o, 0}};
    float r = align ? sc * static_cast<float>(o) : std::fma(sc, static_cast<float>(o) + 0.5f, -0.5f);
    r = std::max(r, 0.0f);
    const int64_t i = std::min<int64_t>(static_cast<int64_t>(std::floor(r)), in - 1);
    const float l = std::clamp(r - static_cast<float>(i), 0.0f, 1.0f);
    return {{i, 1.0f - l}, {std::min(i + 1, in - 1), l}};
  }
  const float r = align ? sc * static_cast<float>(o) : std::fma(sc, static_cast<float>(o) + 0.5f, -0.5f);
  const int64_t i = std::min<int64_t>(static_cast<int64_t>(std::floor(r)), in - 1);
  const double t = std::clamp(r - static_cast<float>(i), 0.0f, 1.0f), A = -0.75;
  auto c1 = [&](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto c2 = [&](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  return {{i - 1, c2(t + 1)}, {i, c1(t)}, {i + 1, c1(1 - t)}, {i + 2, c2(2 - t)}};
}

test::Checked check_resize(const Case& k, DType dt, Tol tol, test::Specials sp = test::Specials::none) {
  test::OpCase c;
  c.op = "resize2d";
  c.attrs = attrs({{"mode", k.mode},
                   {"align_corners", k.align},
                   {"output_size", Shape{k.OH, k.OW}},
                   {"scales", std::vector<double>{k.sh, k.sw}},
                   {"channels_last", k.cl}});
  const Shape in = k.cl ? Shape{k.N, k.H, k.W, k.C} : Shape{k.N, k.C, k.H, k.W};
  c.args = {TensorType(dt, in)};
  c.specials = sp;
  c.want_types = {TensorType(dt, k.cl ? Shape{k.N, k.OH, k.OW, k.C} : Shape{k.N, k.C, k.OH, k.OW})};
  c.want = test::each_element(k.N * k.C * k.OH * k.OW, [k](const std::vector<test::Tensor>& a, int64_t e) {
    int64_t n, ch, oh, ow;
    if (k.cl) ch = e % k.C, ow = e / k.C % k.OW, oh = e / (k.C * k.OW) % k.OH, n = e / (k.C * k.OW * k.OH);
    else ow = e % k.OW, oh = e / k.OW % k.OH, ch = e / (k.OW * k.OH) % k.C, n = e / (k.OW * k.OH * k.C);
    // sums start from their first term, so that a single tap keeps a -0
    double v = 0;
    bool first_y = true;
    for (auto [iy, wy] : taps(k.mode, k.H, k.OH, oh, k.align, k.sh)) {
      iy = std::clamp<int64_t>(iy, 0, k.H - 1);
      double h = 0;
      bool first_x = true;
      for (auto [ix, wx] : taps(k.mode, k.W, k.OW, ow, k.align, k.sw)) {
        ix = std::clamp<int64_t>(ix, 0, k.W - 1);
        const double t = wx * a[0].at(k.cl ? ((n * k.H + iy) * k.W + ix) * k.C + ch : ((n * k.C + ch) * k.H + iy) * k.W + ix);
        h = first_x ? t : h + t;
        first_x = false;
      }
      v = first_y ? wy * h : v + wy * h;
      first_y = false;
    }
    return v;
  });
  c.tol = tol;
  return test::check_op(c);
}

const Tol kF32{2e-5, 2e-5};

TEST(Resize, BilinearUpDownAlignBothWays) {
  for (bool cl : {false, true})
    for (bool align : {false, true}) {
      check_resize({"bilinear", 2, 3, 7, 9, 14, 18, align, 0, 0, cl}, DType::f32, kF32);  // 2x
      check_resize({"bilinear", 1, 5, 13, 11, 5, 4, align, 0, 0, cl}, DType::f32, kF32);  // down, odd
      check_resize({"bilinear", 1, 2, 6, 5, 6, 11, align, 0, 0, cl}, DType::f32, kF32);   // one axis the same
      check_resize({"bilinear", 1, 1, 1, 1, 3, 1, align, 0, 0, cl}, DType::f32, kF32);    // 1x1 input
    }
  // a wide row crosses column tiles; few planes split their rows between tasks
  check_resize({"bilinear", 1, 1, 40, 700, 81, 1401}, DType::f32, kF32);
}

TEST(Resize, ExplicitScalesChangeTheCoordinates) {
  // F.interpolate(scale_factor=1.7) passes the scale: 1/1.7 differs from in/out = 5/8
  auto a = check_resize({"bilinear", 1, 2, 5, 5, 8, 8, false, 1.7, 1.7}, DType::f32, kF32);
  auto b = check_resize({"bilinear", 1, 2, 5, 5, 8, 8, false, 0, 0}, DType::f32, kF32);
  EXPECT_NE(a.out().floats(), b.out().floats());
  check_resize({"nearest", 1, 3, 5, 7, 8, 11, false, 1.7, 1.6}, DType::f32, Tol::exact_bits());
  check_resize({"bicubic", 1, 3, 5, 7, 8, 11, false, 1.7, 1.6}, DType::f32, kF32);
}

TEST(Resize, NearestModesMoveElementsExactly) {
  for (const char* m : {"nearest", "nearest_exact"})
    for (bool cl : {false, true}) {
      check_resize({m, 2, 3, 7, 9, 14, 18, false, 0, 0, cl}, DType::f32, Tol::exact_bits(), test::Specials::some);
      check_resize({m, 1, 3, 13, 11, 5, 4, false, 0, 0, cl}, DType::u8, Tol::exact_bits());
      check_resize({m, 1, 4, 6, 5, 9, 13, false, 0, 0, cl}, DType::bf16, Tol::exact_bits());
      check_resize({m, 1, 2, 3, 3, 7, 3, false, 0, 0, cl}, DType::i64, Tol::exact_bits());
    }
}

TEST(Resize, BicubicUpDownAlignBothWays) {
  for (bool cl : {false, true})
    for (bool align : {false, true}) {
      check_resize({"bicubic", 2, 3, 7, 9, 15, 17, align, 0, 0, cl}, DType::f32, kF32);
      check_resize({"bicubic", 1, 2, 13, 11, 4, 6, align, 0, 0, cl}, DType::f32, kF32);
    }
}

TEST(Resize, Bfloat16ComputesInFloat) {
  for (bool cl : {false, true}) {
    check_resize({"bilinear", 2, 3, 7, 9, 14, 18, false, 0, 0, cl}, DType::bf16, Tol{1e-2, 1e-2});
    check_resize({"bicubic", 1, 3, 7, 9, 5, 12, true, 0, 0, cl}, DType::bf16, Tol{2e-2, 1e-2});
  }
}

TEST(Resize, NanAndInfinityPropagateLikeTheTaps) {
  // every tap is read with its weight, zero or not: an infinity next to an exact position gives NaN
  check_resize({"bilinear", 1, 2, 20, 20, 39, 39, true}, DType::f32, kF32, test::Specials::some);
}

TEST(Resize, BadAttributesAreRefused) {
  TensorType x(DType::f32, {1, 2, 4, 4});
  auto a = [](std::string mode, Shape os) { return attrs({{"mode", mode}, {"output_size", os}}); };
  EXPECT_NE(test::build_error("resize2d", {x}, a("area", {8, 8})).find("mode must be"), std::string::npos);
  EXPECT_NE(test::build_error("resize2d", {x}, a("bilinear", {0, 8})).find("output_size"), std::string::npos);
  EXPECT_NE(test::build_error("resize2d", {TensorType(DType::f32, {2, 4, 4})}, a("bilinear", {8, 8})).find("4-D"),
            std::string::npos);
  EXPECT_NE(test::build_error("resize2d", {TensorType(DType::u8, {1, 2, 4, 4})}, a("bilinear", {8, 8}))
                .find("takes float32"),
            std::string::npos);
  EXPECT_EQ(test::build_error("resize2d", {TensorType(DType::u8, {1, 2, 4, 4})}, a("nearest", {8, 8})), "");
}

}  // namespace
}  // namespace ag
