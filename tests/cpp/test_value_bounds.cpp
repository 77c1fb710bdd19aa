// Value bounds (ir/value_bounds.h): what the graph proves of its values when the call's float32
// inputs are finite and within kInputBound, the proof a convolution's activation in oneDNN's
// primitive rests on (kernels/conv.cpp). The rules on small graphs: a convolution per output channel
// through its post-ops, the ops that move elements, and every way a bound is lost (a weight that is
// not finite, a bound past kBoundLimit, a division, an op without a rule, an input of another dtype).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ir/epilogue.h"
#include "ir/graph.h"
#include "ir/value_bounds.h"
#include "kernels/fused_elementwise.h"
#include "test_util.h"

namespace ag {
namespace {
using test::attrs;

Value* constant(Graph& g, const Shape& s, const std::vector<float>& v, const std::string& name) {
  auto st = Storage::allocate(v.size() * 4);
  std::memcpy(st->data, v.data(), v.size() * 4);
  return g.add_const(TensorType(DType::f32, s), st, name);
}

// A 1x1 convolution with `post` absorbed as post-ops (codes and their three numbers each), the
// binary ones reading `operands`.
Attrs conv_attrs(const std::vector<int64_t>& post = {}, const std::vector<double>& args = {}, int64_t operands = 0) {
  Attrs a = attrs({{"stride", Shape{1, 1}}, {"padding", Shape{0, 0}}, {"dilation", Shape{1, 1}}, {"groups", int64_t{1}}});
  if (!post.empty()) {
    a.set("post_ops", post);
    a.set("post_args", args);
    a.set("post_inputs", operands);
  }
  return a;
}

// x [1, 2, 4, 4] within kInputBound; w rows |w|_1 = 3, 1, 0 and bias 1, -10, 0: channel bounds
// 3 T + 1, T + 10, 0.
struct Net {
  Graph g;
  Value *x, *w, *b;
  Net() {
    x = g.add_input(TensorType(DType::f32, {1, 2, 4, 4}), "x");
    w = constant(g, {3, 2, 1, 1}, {1, -2, 0.5f, -0.5f, 0, 0}, "w");
    b = constant(g, {3}, {1, -10, 0}, "b");
  }
};

TEST(ValueBounds, ConvolutionPerChannelThroughItsPostOps) {
  const double T = kInputBound;
  Net n;
  Value* y = n.g.add_node("conv", {n.x, n.w, n.b}, conv_attrs(), "y")->out();
  // clamp to [0, 6] as a post-op: 6, whatever the input's bound; the 1x1 convolution after it: 6 * 3 + 1
  Value* c = n.g.add_node("conv", {n.x, n.w, n.b}, conv_attrs({fe::kX_clamp}, {0, 6, 3}), "c")->out();
  Value* c2 = n.g.add_node("conv", {n.g.add_node("reshape", {c}, attrs({{"shape", Shape{1, 3, 4, 4}}}), "v")->out(),
                                    constant(n.g, {1, 3, 1, 1}, {1, 1, 1}, "w2"), constant(n.g, {1}, {1}, "b2")},
                           conv_attrs(), "c2")
                  ->out();
  // a per-channel scale (2, -3, 5) then a residual add of y: channel bounds 2 (3T + 1) + max(y)
  Value* s = constant(n.g, {3, 1, 1}, {2, -3, 5}, "s");
  Value* r = n.g.add_node("conv", {n.x, n.w, n.b, s, y}, conv_attrs({epi::kMul, epi::kAdd}, {0, 0, 0, 0, 0, 0}, 2), "r")
                 ->out();
  // ReLU keeps the bound
  Value* u = n.g.add_node("conv", {n.x, n.w, n.b}, conv_attrs({fe::kX_relu}, {0, 0, 0}), "u")->out();
  const ValueBounds vb(n.g);
  EXPECT_TRUE(vb.any());
  EXPECT_DOUBLE_EQ(vb.of(n.x), T);
  EXPECT_DOUBLE_EQ(vb.of(y), 3 * T + 1);
  EXPECT_DOUBLE_EQ(vb.of(c), 6);
  EXPECT_DOUBLE_EQ(vb.of(c2), 6 * 3 + 1);  // (through the reshape)
  EXPECT_DOUBLE_EQ(vb.of(r), std::max({2 * (3 * T + 1), 3 * (T + 10), 0.0}) + (3 * T + 1));
  EXPECT_DOUBLE_EQ(vb.of(u), 3 * T + 1);
  EXPECT_DOUBLE_EQ(vb.of(n.w), 2);  // (a constant: its largest magnitude)
}

TEST(ValueBounds, LostWhereNothingIsProven) {
  Net n;
  Graph& g = n.g;
  // a weight that is not finite: no bound, and none downstream through a convolution
  Value* wi = constant(g, {3, 2, 1, 1}, {1, 2, 3, 4, 5, std::numeric_limits<float>::infinity()}, "wi");
  Value* a = g.add_node("conv", {n.x, wi, n.b}, conv_attrs(), "a")->out();
  Value* a2 = g.add_node("conv", {a, constant(g, {3, 3, 1, 1}, std::vector<float>(9, 1.0f), "w3")}, conv_attrs(), "a2")
                  ->out();
  Value* wn = constant(g, {3, 2, 1, 1}, {1, 2, 3, 4, 5, std::numeric_limits<float>::quiet_NaN()}, "wn");
  Value* an = g.add_node("conv", {n.x, wn, n.b}, conv_attrs(), "an")->out();
  // weights of 1e25: 3e31 is past kBoundLimit
  Value* wh = constant(g, {1, 2, 1, 1}, {1e25f, 2e25f}, "wh");
  Value* h = g.add_node("conv", {n.x, wh}, conv_attrs(), "h")->out();
  // a division post-op; an op without a rule (exp); an int input reshaped
  Value* d = g.add_node("conv", {n.x, n.w, n.b, constant(g, {3, 1, 1}, {2, 2, 2}, "dv")},
                        conv_attrs({epi::kDiv}, {0, 0, 0}, 1), "d")
                 ->out();
  Value* e = g.add_node("exp", {n.x}, {}, "e")->out();
  Value* i = g.add_input(TensorType(DType::i64, {2, 3}), "i");
  Value* iv = g.add_node("reshape", {i}, attrs({{"shape", Shape{6}}}), "iv")->out();
  const ValueBounds vb(g);
  for (Value* v : {a, a2, an, h, d, e, i, iv}) EXPECT_EQ(vb.of(v), kUnbounded) << v->name;
  EXPECT_EQ(vb.of(wi), kUnbounded);
}

TEST(ValueBounds, NoneWithoutFloat32Inputs) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::bf16, {1, 2, 4, 4}), "x");
  auto st = Storage::allocate(6 * 2);
  Value* w = g.add_const(TensorType(DType::bf16, {3, 2, 1, 1}), st, "w");
  Value* y = g.add_node("conv", {x, w}, conv_attrs({fe::kX_relu}, {0, 0, 0}), "y")->out();
  const ValueBounds vb(g);
  EXPECT_FALSE(vb.any());
  EXPECT_EQ(vb.of(y), kUnbounded);
}

}  // namespace
}  // namespace ag
