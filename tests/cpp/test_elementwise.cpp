// Tests of the elementwise ops: small graphs run through the pass pipeline and
// the executor, compared with references computed here; broadcasting layouts,
// in-place execution, dtype conversion, integer division by zero, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/common.h"
#include "check_op.h"

namespace ag {
namespace {

using test::attrs;
using test::check_op;
using test::OpCase;
using test::run_op;
using test::Tensor;

std::vector<float> ramp(int64_t n, float scale = 0.37f, float off = -3.f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = off + scale * static_cast<float>(i % 23) + 0.01f * static_cast<float>(i % 7);
  return v;
}

// Flat index of `out_idx` in an input of shape `in` broadcast to `out`.
int64_t bcast_index(const Shape& in, const Shape& out, int64_t flat) {
  Shape st = broadcast_strides(in, out);
  int64_t off = 0;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    off += (flat % out[d]) * st[d];
    flat /= out[d];
  }
  return off;
}

struct BcastCase {
  Shape a, b, out;
};

class ElementwiseBroadcast : public ::testing::TestWithParam<BcastCase> {};

TEST_P(ElementwiseBroadcast, AddMulMatchReference) {
  auto c = GetParam();
  TensorType ta(DType::f32, c.a), tb(DType::f32, c.b);
  auto a = ramp(ta.numel()), b = ramp(tb.numel(), 0.11f, 1.f);
  const int64_t n = TensorType(DType::f32, c.out).numel();
  auto want = [&](float (*f)(float, float)) {
    return test::each_element(n, [&, f](const std::vector<Tensor>&, int64_t i) {
      return double(f(a[bcast_index(c.a, c.out, i)], b[bcast_index(c.b, c.out, i)]));
    });
  };
  struct Op {
    const char* name;
    Attrs attrs;
    DType out;
    float (*f)(float, float);
  };
  for (const Op& o : {Op{"add", attrs({{"alpha", 2.0}}), DType::f32, [](float x, float y) { return x + 2.f * y; }},
                      Op{"mul", {}, DType::f32, [](float x, float y) { return x * y; }},
                      Op{"gt", {}, DType::b8, [](float x, float y) { return float(x > y); }}}) {
    OpCase k;
    k.op = o.name;
    k.attrs = o.attrs;
    k.args = {{ta, a.data()}, {tb, b.data()}};
    k.want_types = {TensorType(o.out, c.out)};
    k.want = want(o.f);  // exact
    check_op(k);
  }
}

INSTANTIATE_TEST_SUITE_P(ElementwiseShapes, ElementwiseBroadcast,
                         ::testing::Values(BcastCase{{4, 5}, {4, 5}, {4, 5}},            // same shape
                                           BcastCase{{4, 5}, {}, {4, 5}},                // scalar
                                           BcastCase{{3, 4, 5}, {5}, {3, 4, 5}},         // row
                                           BcastCase{{3, 4, 1}, {3, 4, 5}, {3, 4, 5}},   // column
                                           BcastCase{{3, 1, 5}, {1, 4, 1}, {3, 4, 5}},   // outer product
                                           BcastCase{{2, 1, 3, 1}, {4, 1, 6}, {2, 4, 3, 6}},
                                           BcastCase{{1}, {1, 1}, {1, 1}},
                                           BcastCase{{0, 3}, {3}, {0, 3}},               // zero-size
                                           BcastCase{{70000}, {70000}, {70000}},         // parallel split
                                           BcastCase{{300, 257}, {257}, {300, 257}}));

TEST(ElementwiseOps, UnaryFloatMatchesLibm) {
  auto x = ramp(1000, 0.9f, -10.f);
  TensorType t(DType::f32, {1000});
  struct Case {
    const char* op;
    double (*ref)(double);
  };
  std::vector<Case> cases = {
      {"exp", [](double v) { return std::exp(v); }},
      {"log", [](double v) { return std::log(std::fabs(v) + 1e-3); }},
      {"tanh", [](double v) { return std::tanh(v); }},
      {"erf", [](double v) { return std::erf(v); }},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"silu", [](double v) { return v / (1 + std::exp(-v)); }},
      {"gelu", [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }},
      {"neg", [](double v) { return -v; }},
      {"abs", [](double v) { return std::fabs(v); }},
      {"relu", [](double v) { return v > 0 ? v : 0.0; }},
      {"round", [](double v) { return std::nearbyint(v); }},
  };
  for (auto& c : cases) {
    std::vector<float> in = x;
    if (std::string(c.op) == "log")
      for (auto& v : in) v = std::fabs(v) + 1e-3f;
    OpCase k;
    k.op = c.op;
    k.args = {{t, in.data()}};
    k.want = test::each_element(1000, [&](const std::vector<Tensor>&, int64_t i) { return c.ref(x[i]); });
    k.tol = {2e-6, 2e-6};
    check_op(k);
  }
}

TEST(ElementwiseOps, ExpTanhEdgeValues) {
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.f, -0.f, 88.7f, 89.f, -87.f, -200.f, inf, -inf, nan, 20.f, -20.f, 1e-8f, 1e-40f, 3e38f, 0.7071f, 1.f};
  TensorType t(DType::f32, {static_cast<int64_t>(x.size())});
  // NaN must give NaN, an infinite result the same infinity (check_op compares NaN-aware)
  struct Case {
    const char* op;
    float (*ref)(float);
    test::Tol tol;
  };
  for (const Case& c : {Case{"exp", [](float v) { return std::exp(v); }, {1e-37, 3e-7}},
                        Case{"tanh", [](float v) { return std::tanh(v); }, {1e-7, 3e-7}},
                        Case{"erf", [](float v) { return std::erf(v); }, {2e-7, 0}},
                        Case{"log", [](float v) { return std::log(v); }, {1e-7, 3e-7}}}) {
    OpCase k;
    k.op = c.op;
    k.args = {{t, x.data()}};
    k.want = test::each_element(t.numel(), [&](const std::vector<Tensor>&, int64_t i) { return c.ref(x[i]); });
    k.tol = c.tol;
    check_op(k);
  }
}

TEST(ElementwiseOps, IntegerDivisionFloorsLikePython) {
  std::vector<int64_t> a = {7, -7, 7, -7, 0, 5}, b = {2, 2, -2, -2, 3, -1};
  TensorType t(DType::i64, {6});
  auto fl = run_op("div", {{t, a.data()}, {t, b.data()}}, attrs({{"rounding_mode", std::string("floor")}}));
  auto tr = run_op("div", {{t, a.data()}, {t, b.data()}}, attrs({{"rounding_mode", std::string("trunc")}}));
  auto rm = run_op("remainder", {{t, a.data()}, {t, b.data()}});
  EXPECT_EQ(fl.out().vec<int64_t>(), (std::vector<int64_t>{3, -4, -4, 3, 0, -5}));
  EXPECT_EQ(tr.out().vec<int64_t>(), (std::vector<int64_t>{3, -3, -3, 3, 0, -5}));
  EXPECT_EQ(rm.out().vec<int64_t>(), (std::vector<int64_t>{1, 1, -1, -1, 0, 0}));
}

TEST(ElementwiseOps, IntegerDivisionByZeroThrows) {
  std::vector<int32_t> a = {1, 2, 3}, b = {1, 0, 1};
  TensorType t(DType::i32, {3});
  EXPECT_TRUE(test::throws_with([&] { run_op("remainder", {{t, a.data()}, {t, b.data()}}); }, "ZeroDivisionError"));
}

TEST(ElementwiseOps, ConvertFollowsTorchRules) {
  std::vector<float> x = {3.7f, -3.7f, 300.f, -1.f, 0.f, std::numeric_limits<float>::quiet_NaN()};
  TensorType t(DType::f32, {6});
  auto i32 = run_op("convert", {{t, x.data()}}, attrs({{"dtype", DType::i32}})).out().vec<int32_t>();
  auto u8 = run_op("convert", {{t, x.data()}}, attrs({{"dtype", DType::u8}})).out().vec<uint8_t>();
  auto b = run_op("convert", {{t, x.data()}}, attrs({{"dtype", DType::b8}})).out().vec<bool>();
  EXPECT_EQ(i32[0], 3);
  EXPECT_EQ(i32[1], -3);
  EXPECT_EQ(u8[2], 44);   // 300 wraps
  EXPECT_EQ(u8[3], 255);  // -1 wraps
  EXPECT_EQ(b, (std::vector<bool>{true, true, true, true, false, true}));
  auto bf = run_op("convert", {{t, x.data()}}, attrs({{"dtype", DType::bf16}})).out().vec<uint16_t>();
  EXPECT_FLOAT_EQ(bf16_to_f32(bf[2]), 300.f);
  EXPECT_NEAR(bf16_to_f32(bf[0]), 3.7f, 0.02f);
}

TEST(ElementwiseOps, WhereBroadcastsAllThree) {
  bool c[3] = {true, false, true};           // [3, 1]
  std::vector<float> a = {1, 2, 3, 4};       // [4]
  float b = -1.f;                            // []
  auto r = run_op("where", {{TensorType(DType::b8, {3, 1}), c}, {TensorType(DType::f32, {4}), a.data()},
                            {TensorType(DType::f32, {}), &b}});
  ASSERT_EQ(r.out().type.shape(), (Shape{3, 4}));
  auto y = r.out().vec<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[i * 4 + j], c[i] ? a[j] : b);
}

TEST(ElementwiseOps, Bf16WithFloatScalarComputesInFloat) {
  std::vector<uint16_t> x = {f32_to_bf16(1.7f), f32_to_bf16(0.3f)};
  float s = 0.1f;
  auto r = run_op("mul", {{TensorType(DType::bf16, {2}), x.data()}, {TensorType(DType::f32, {}), &s}});
  EXPECT_EQ(r.out().type.dtype, DType::bf16);
  auto y = r.out().vec<uint16_t>();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(y[i], f32_to_bf16(bf16_to_f32(x[i]) * 0.1f));
}

TEST(ElementwiseOps, ChainRunsInPlace) {
  // exp(neg(relu(x))) + y: intermediate buffers are reused in place
  auto xv = ramp(64 * 33), yv = ramp(33, 0.05f, 0.f);
  OpCase k;
  k.args = {{TensorType(DType::f32, {64, 33}), xv.data()}, {TensorType(DType::f32, {33}), yv.data()}};
  k.build = [](Graph& g, const std::vector<Value*>& in) {
    Value* r = g.add_node("relu", {in[0]}, {}, "r")->out();
    Value* ng = g.add_node("neg", {r}, {}, "n")->out();
    Value* e = g.add_node("exp", {ng}, {}, "e")->out();
    Value* s = g.add_node("add", {e, in[1]}, {}, "s")->out();
    return std::vector<Value*>{g.add_node("clamp", {s}, attrs({{"min", 0.5}, {"max", 1.5}}), "c")->out()};
  };
  k.passes.disabled = {"fuse_elementwise"};  // this tests the planner's in-place reuse across separate kernels
  k.want = test::each_element(64 * 33, [&](const std::vector<Tensor>&, int64_t i) {
    float want = std::exp(-std::max(xv[i], 0.f)) + yv[i % 33];
    return std::min(std::max(want, 0.5f), 1.5f);
  });
  k.tol = {1e-6, 0};
  auto r = check_op(k);
  EXPECT_GT(r.got.inplace, 0);
}

TEST(ElementwiseErrors, BadInputsThrowUsefulMessages) {
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {2, 3}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {4}), "b");
  Value* i = g.add_input(TensorType(DType::i64, {2, 3}), "i");
  auto msg = [&](const std::string& op, std::vector<Value*> ins, Attrs at = {}) {
    return test::error_of([&] { g.add_node(op, ins, at, "bad"); });
  };
  EXPECT_NE(msg("add", {a, b}).find("do not broadcast"), std::string::npos);
  EXPECT_NE(msg("mul", {a, i}).find("dtypes differ"), std::string::npos);
  EXPECT_NE(msg("exp", {i}).find("floating"), std::string::npos);
  EXPECT_NE(msg("bitwise_and", {a, a}).find("integer or bool"), std::string::npos);
  EXPECT_NE(msg("where", {a, a, a}).find("condition must be bool"), std::string::npos);
  EXPECT_NE(msg("gelu", {a}, attrs({{"approximate", std::string("fast")}})).find("approximate"), std::string::npos);
  EXPECT_NE(msg("div", {i, i}).find("floating"), std::string::npos);  // true division of ints
  EXPECT_NE(msg("pow_scalar", {i}, attrs({{"exponent", int64_t{-1}}})).find("non-negative"), std::string::npos);
  EXPECT_NE(msg("clamp", {a}).find("at least one"), std::string::npos);
}

}  // namespace
}  // namespace ag
