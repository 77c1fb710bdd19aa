// Tests of the fuse_norms pass: the decomposed RMSNorm chain
//   pow_scalar(x, 2) -> mean(-1, keepdim) -> add(const eps) -> rsqrt -> mul(x, .) [-> mul(weight, .)]
// becomes one rms_norm node, with and without the weight multiply and with
// the operands in either order, and gives the unfused graph's result; an
// intermediate with another use, a mean over a non-last dim, or a weight that
// is not [N] leaves the chain alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "passes/passes.h"
#include "check_op.h"

namespace ag {
namespace {

using test::randn;
using test::attrs;
using test::count;

struct Opts {
  Shape shape{3, 5, 32};
  bool weight = true;
  bool swap = false;           // operands of add and the muls swapped
  int64_t mean_dim = -1;
  bool extra_use = false;      // rsqrt's result is also a graph output
  Shape weight_shape{};        // default: {N}
  float eps = 1e-5f;
};

// The chain on x (randn, seed 1) with fuse_norms against the same graph without it, to
// 1e-5 + 1e-4 |want|; got: the fused run, ref: the unfused one.
test::Checked fused_vs_unfused(const Opts& o) {
  test::OpCase c;
  TensorType xt(DType::f32, o.shape);
  c.args = {test::from_floats(xt, randn(xt.numel(), 1))};
  c.build = [o](Graph& g, const std::vector<Value*>& in) {
    Value* x = in[0];
    const int64_t N = o.shape.back();
    Value* eps = g.add_const(TensorType(DType::f32, {}), test::bytes_of({o.eps}), "eps");
    Shape ws = o.weight_shape.empty() ? Shape{N} : o.weight_shape;
    int64_t wn = 1;
    for (int64_t d : ws) wn *= d;
    Value* w = g.add_const(TensorType(DType::f32, ws), test::bytes_of(randn(wn, 7)), "w");
    auto bin = [&](const char* op, Value* a, Value* b, const char* name) {
      return o.swap ? g.add_node(op, {b, a}, {}, name)->out() : g.add_node(op, {a, b}, {}, name)->out();
    };
    Value* p = g.add_node("pow_scalar", {x}, attrs({{"exponent", 2.0}}), "pow")->out();
    Value* m = g.add_node("mean", {p}, attrs({{"dims", std::vector<int64_t>{o.mean_dim}}, {"keepdim", true}}), "mean")
                   ->out();
    Value* a = bin("add", m, eps, "add_eps");
    Value* r = g.add_node("rsqrt", {a}, {}, "rsqrt")->out();
    Value* y = bin("mul", x, r, "mul_x");
    if (o.weight) y = bin("mul", y, w, "mul_w");
    std::vector<Value*> outs{y};
    if (o.extra_use) outs.push_back(r);
    return outs;
  };
  c.ref_passes = PipelineOptions{.disabled = {"fuse_norms"}};
  c.ref_tol = {1e-5, 1e-4};
  return test::check_op(c);
}

void expect_fused(const Opts& o) {
  auto r = fused_vs_unfused(o);
  const std::string &f = r.got.graph, &u = r.ref.graph;
  EXPECT_EQ(count(f, "= rms_norm("), 1) << f;
  EXPECT_EQ(count(f, "= pow_scalar("), 0) << f;
  EXPECT_EQ(count(f, "= rsqrt("), 0) << f;
  EXPECT_EQ(count(f, "= mean("), 0) << f;
  EXPECT_EQ(count(f, o.weight ? "has_weight=true" : "has_weight=false"), 1) << f;
  EXPECT_EQ(count(u, "= rms_norm("), 0) << u;
}

void expect_not_fused(const Opts& o) {
  const std::string f = fused_vs_unfused(o).got.graph;
  EXPECT_EQ(count(f, "= rms_norm("), 0) << f;
}

TEST(FuseNorms, WithWeight) { expect_fused(Opts{}); }

TEST(FuseNorms, WithoutWeight) {
  Opts o;
  o.weight = false;
  expect_fused(o);
}

TEST(FuseNorms, SwappedOperandsAndPositiveDim) {
  Opts o;
  o.swap = true;
  o.mean_dim = 2;
  expect_fused(o);
}

TEST(FuseNorms, TwoDimInput) {
  Opts o;
  o.shape = {17, 48};
  o.eps = 1e-6f;
  expect_fused(o);
}

TEST(FuseNorms, KeepsAttribution) {
  const std::string f = fused_vs_unfused(Opts{}).got.graph;
  EXPECT_NE(f.find("fused=\"pow,mean,add_eps,rsqrt,mul_x,mul_w\""), std::string::npos) << f;
  EXPECT_NE(f.find("%mul_w: float32[3, 5, 32] = rms_norm("), std::string::npos) << f;
}

TEST(FuseNorms, IntermediateWithAnotherUseNotFused) {
  Opts o;
  o.extra_use = true;
  expect_not_fused(o);
}

TEST(FuseNorms, MeanOverNonLastDimNotFused) {
  Opts o;
  o.shape = {4, 32, 32};  // square, so x * rsqrt still broadcasts
  o.mean_dim = 1;
  o.weight = false;
  expect_not_fused(o);
}

TEST(FuseNorms, WeightNotRowNotFusedAsWeight) {
  Opts o;
  o.weight_shape = {5, 32};  // broadcasts, but is not [N]: only the part before it fuses
  const std::string f = fused_vs_unfused(o).got.graph;
  EXPECT_EQ(count(f, "has_weight=false"), 1) << f;
}

TEST(FuseNorms, PassListed) {
  auto names = pass_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "fuse_norms"), names.end());
}

}  // namespace
}  // namespace ag
