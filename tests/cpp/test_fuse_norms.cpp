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
#include "runtime/executor.h"
#include "test_util.h"

namespace ag {
namespace {

using test::randn;
using test::attrs;

std::shared_ptr<Storage> bytes_of(const std::vector<float>& v) {
  auto s = Storage::allocate(v.size() * 4);
  if (!v.empty()) std::memcpy(s->data, v.data(), v.size() * 4);
  return s;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

struct Opts {
  Shape shape{3, 5, 32};
  bool weight = true;
  bool swap = false;           // operands of add and the muls swapped
  int64_t mean_dim = -1;
  bool extra_use = false;      // rsqrt's result is also a graph output
  Shape weight_shape{};        // default: {N}
  float eps = 1e-5f;
};

struct Result {
  std::vector<float> out;
  std::string text;
};

Result run(const Opts& o, bool fuse) {
  Graph g;
  TensorType xt(DType::f32, o.shape);
  const int64_t N = o.shape.back();
  Value* x = g.add_input(xt, "x");
  Value* eps = g.add_const(TensorType(DType::f32, {}), bytes_of({o.eps}), "eps");
  Shape ws = o.weight_shape.empty() ? Shape{N} : o.weight_shape;
  int64_t wn = 1;
  for (int64_t d : ws) wn *= d;
  Value* w = g.add_const(TensorType(DType::f32, ws), bytes_of(randn(wn, 7)), "w");
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
  g.set_outputs(outs);
  PipelineOptions opt;
  if (!fuse) opt.disabled.insert("fuse_norms");
  run_pipeline(g, opt);
  Result res;
  res.text = g.str();
  auto data = randn(xt.numel(), 1);
  Executor ex(compile_program(g));
  auto got = ex.run({data.data()});
  res.out.resize(got[0].type.numel());
  if (!res.out.empty()) std::memcpy(res.out.data(), got[0].data, res.out.size() * 4);
  return res;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f + 1e-4f * std::fabs(want[i])) << "at flat index " << i;
}

void expect_fused(const Opts& o) {
  Result f = run(o, true), u = run(o, false);
  EXPECT_EQ(count(f.text, "= rms_norm("), 1) << f.text;
  EXPECT_EQ(count(f.text, "= pow_scalar("), 0) << f.text;
  EXPECT_EQ(count(f.text, "= rsqrt("), 0) << f.text;
  EXPECT_EQ(count(f.text, "= mean("), 0) << f.text;
  EXPECT_EQ(count(f.text, o.weight ? "has_weight=true" : "has_weight=false"), 1) << f.text;
  EXPECT_EQ(count(u.text, "= rms_norm("), 0) << u.text;
  expect_near(f.out, u.out);
}

void expect_not_fused(const Opts& o) {
  Result f = run(o, true), u = run(o, false);
  EXPECT_EQ(count(f.text, "= rms_norm("), 0) << f.text;
  expect_near(f.out, u.out);
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
  Result f = run(Opts{}, true);
  EXPECT_NE(f.text.find("fused=\"pow,mean,add_eps,rsqrt,mul_x,mul_w\""), std::string::npos) << f.text;
  EXPECT_NE(f.text.find("%mul_w: float32[3, 5, 32] = rms_norm("), std::string::npos) << f.text;
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
  Result f = run(o, true), u = run(o, false);
  EXPECT_EQ(count(f.text, "has_weight=false"), 1) << f.text;
  expect_near(f.out, u.out);
}

TEST(FuseNorms, PassListed) {
  auto names = pass_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "fuse_norms"), names.end());
}

}  // namespace
}  // namespace ag
