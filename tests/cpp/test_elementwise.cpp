// Tests of the elementwise ops: small graphs run through the pass pipeline and
// the executor, compared with references computed here; broadcasting layouts,
// in-place execution, dtype conversion, integer division by zero, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/common.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace ag {
namespace {

using test::attrs;

std::vector<float> ramp(int64_t n, float scale = 0.37f, float off = -3.f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = off + scale * static_cast<float>(i % 23) + 0.01f * static_cast<float>(i % 7);
  return v;
}

// Runs a one-node graph and returns output 0 as T.
template <typename T>
std::vector<T> run1(const std::string& op, const std::vector<TensorType>& types, std::vector<void*> data,
                    Attrs a = {}, TensorType* out_type = nullptr) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t i = 0; i < types.size(); ++i) ins.push_back(g.add_input(types[i], "x" + std::to_string(i)));
  Node* n = g.add_node(op, ins, a, "n");
  g.set_outputs({n->out()});
  run_pipeline(g, PipelineOptions{});
  Executor ex(compile_program(g));
  auto outs = ex.run(data);
  if (out_type) *out_type = outs[0].type;
  const T* p = static_cast<const T*>(outs[0].data);
  return std::vector<T>(p, p + outs[0].type.numel());
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
  int64_t na = TensorType(DType::f32, c.a).numel(), nb = TensorType(DType::f32, c.b).numel();
  auto a = ramp(na), b = ramp(nb, 0.11f, 1.f);
  TensorType t;
  auto add = run1<float>("add", {TensorType(DType::f32, c.a), TensorType(DType::f32, c.b)}, {a.data(), b.data()},
                         attrs({{"alpha", 2.0}}), &t);
  ASSERT_EQ(t.shape(), c.out);
  auto mul = run1<float>("mul", {TensorType(DType::f32, c.a), TensorType(DType::f32, c.b)}, {a.data(), b.data()});
  auto gt = run1<bool>("gt", {TensorType(DType::f32, c.a), TensorType(DType::f32, c.b)}, {a.data(), b.data()});
  for (int64_t i = 0; i < t.numel(); ++i) {
    float x = a[bcast_index(c.a, c.out, i)], y = b[bcast_index(c.b, c.out, i)];
    ASSERT_FLOAT_EQ(add[i], x + 2.f * y) << "at " << i;
    ASSERT_FLOAT_EQ(mul[i], x * y) << "at " << i;
    ASSERT_EQ(gt[i], x > y) << "at " << i;
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
    auto y = run1<float>(c.op, {t}, {in.data()});
    for (size_t i = 0; i < x.size(); ++i) {
      double want = c.ref(x[i]);
      ASSERT_NEAR(y[i], want, 2e-6 + 2e-6 * std::fabs(want)) << c.op << "(" << x[i] << ")";
    }
  }
}

TEST(ElementwiseOps, ExpTanhEdgeValues) {
  float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.f, -0.f, 88.7f, 89.f, -87.f, -200.f, inf, -inf, nan, 20.f, -20.f, 1e-8f, 1e-40f, 3e38f, 0.7071f, 1.f};
  TensorType t(DType::f32, {static_cast<int64_t>(x.size())});
  auto e = run1<float>("exp", {t}, {x.data()});
  auto th = run1<float>("tanh", {t}, {x.data()});
  auto er = run1<float>("erf", {t}, {x.data()});
  auto lg = run1<float>("log", {t}, {x.data()});
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(e[i]) && std::isnan(th[i]) && std::isnan(er[i]));
      continue;
    }
    float we = std::exp(x[i]);
    if (std::isinf(we)) EXPECT_EQ(e[i], we) << x[i];
    else EXPECT_NEAR(e[i], we, 1e-37f + 3e-7f * we) << x[i];
    EXPECT_NEAR(th[i], std::tanh(x[i]), 1e-7f + 3e-7f * std::fabs(std::tanh(x[i]))) << x[i];
    EXPECT_NEAR(er[i], std::erf(x[i]), 2e-7f) << x[i];
    float wl = std::log(x[i]);
    if (std::isnan(wl) || std::isinf(wl)) EXPECT_TRUE(std::isnan(wl) ? std::isnan(lg[i]) : lg[i] == wl) << x[i];
    else EXPECT_NEAR(lg[i], wl, 3e-7f * std::fabs(wl) + 1e-7f) << x[i];
  }
}

TEST(ElementwiseOps, IntegerDivisionFloorsLikePython) {
  std::vector<int64_t> a = {7, -7, 7, -7, 0, 5}, b = {2, 2, -2, -2, 3, -1};
  TensorType t(DType::i64, {6});
  auto fl = run1<int64_t>("div", {t, t}, {a.data(), b.data()}, attrs({{"rounding_mode", std::string("floor")}}));
  auto tr = run1<int64_t>("div", {t, t}, {a.data(), b.data()}, attrs({{"rounding_mode", std::string("trunc")}}));
  auto rm = run1<int64_t>("remainder", {t, t}, {a.data(), b.data()});
  EXPECT_EQ(fl, (std::vector<int64_t>{3, -4, -4, 3, 0, -5}));
  EXPECT_EQ(tr, (std::vector<int64_t>{3, -3, -3, 3, 0, -5}));
  EXPECT_EQ(rm, (std::vector<int64_t>{1, 1, -1, -1, 0, 0}));
}

TEST(ElementwiseOps, IntegerDivisionByZeroThrows) {
  std::vector<int32_t> a = {1, 2, 3}, b = {1, 0, 1};
  TensorType t(DType::i32, {3});
  try {
    run1<int32_t>("remainder", {t, t}, {a.data(), b.data()});
    FAIL() << "expected ag::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeroDivisionError"), std::string::npos) << e.what();
  }
}

TEST(ElementwiseOps, ConvertFollowsTorchRules) {
  std::vector<float> x = {3.7f, -3.7f, 300.f, -1.f, 0.f, std::numeric_limits<float>::quiet_NaN()};
  TensorType t(DType::f32, {6});
  auto i32 = run1<int32_t>("convert", {t}, {x.data()}, attrs({{"dtype", DType::i32}}));
  auto u8 = run1<uint8_t>("convert", {t}, {x.data()}, attrs({{"dtype", DType::u8}}));
  auto b = run1<bool>("convert", {t}, {x.data()}, attrs({{"dtype", DType::b8}}));
  EXPECT_EQ(i32[0], 3);
  EXPECT_EQ(i32[1], -3);
  EXPECT_EQ(u8[2], 44);   // 300 wraps
  EXPECT_EQ(u8[3], 255);  // -1 wraps
  EXPECT_EQ(b, (std::vector<bool>{true, true, true, true, false, true}));
  auto bf = run1<uint16_t>("convert", {t}, {x.data()}, attrs({{"dtype", DType::bf16}}));
  EXPECT_FLOAT_EQ(bf16_to_f32(bf[2]), 300.f);
  EXPECT_NEAR(bf16_to_f32(bf[0]), 3.7f, 0.02f);
}

TEST(ElementwiseOps, WhereBroadcastsAllThree) {
  bool c[3] = {true, false, true};           // [3, 1]
  std::vector<float> a = {1, 2, 3, 4};       // [4]
  float b = -1.f;                            // []
  TensorType t;
  auto y = run1<float>("where", {TensorType(DType::b8, {3, 1}), TensorType(DType::f32, {4}), TensorType(DType::f32, {})},
                       {c, a.data(), &b}, {}, &t);
  ASSERT_EQ(t.shape(), (Shape{3, 4}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[i * 4 + j], c[i] ? a[j] : b);
}

TEST(ElementwiseOps, Bf16WithFloatScalarComputesInFloat) {
  std::vector<uint16_t> x = {f32_to_bf16(1.7f), f32_to_bf16(0.3f)};
  float s = 0.1f;
  TensorType t;
  auto y = run1<uint16_t>("mul", {TensorType(DType::bf16, {2}), TensorType(DType::f32, {})}, {x.data(), &s}, {}, &t);
  EXPECT_EQ(t.dtype, DType::bf16);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(y[i], f32_to_bf16(bf16_to_f32(x[i]) * 0.1f));
}

TEST(ElementwiseOps, ChainRunsInPlace) {
  // exp(neg(relu(x))) + y: intermediate buffers are reused in place
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {64, 33}), "x");
  Value* y = g.add_input(TensorType(DType::f32, {33}), "y");
  Value* r = g.add_node("relu", {x}, {}, "r")->out();
  Value* ng = g.add_node("neg", {r}, {}, "n")->out();
  Value* e = g.add_node("exp", {ng}, {}, "e")->out();
  Value* s = g.add_node("add", {e, y}, {}, "s")->out();
  Value* c = g.add_node("clamp", {s}, attrs({{"min", 0.5}, {"max", 1.5}}), "c")->out();
  g.set_outputs({c});
  PipelineOptions opt;
  opt.disabled = {"fuse_elementwise"};  // this tests the planner's in-place reuse across separate kernels
  run_pipeline(g, opt);
  auto prog = compile_program(g);
  EXPECT_GT(prog->stats.inplace, 0);
  Executor ex(prog);
  auto xv = ramp(64 * 33), yv = ramp(33, 0.05f, 0.f);
  auto outs = ex.run({xv.data(), yv.data()});
  const float* o = static_cast<const float*>(outs[0].data);
  for (int i = 0; i < 64 * 33; ++i) {
    float want = std::exp(-std::max(xv[i], 0.f)) + yv[i % 33];
    want = std::min(std::max(want, 0.5f), 1.5f);
    ASSERT_NEAR(o[i], want, 1e-6f) << i;
  }
}

TEST(ElementwiseErrors, BadInputsThrowUsefulMessages) {
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {2, 3}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {4}), "b");
  Value* i = g.add_input(TensorType(DType::i64, {2, 3}), "i");
  auto msg = [&](const std::string& op, std::vector<Value*> ins, Attrs at = {}) {
    try {
      g.add_node(op, ins, at, "bad");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
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
