// Tests of elementwise fusion: what the pass groups (and what it must not),
// multi-output groups, broadcasting inputs, node order, and the fused kernel
// against the unfused single-op kernels (bit-exact: the fused program rounds
// every bf16/f16 result where the unfused graph stores it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <functional>
#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/fused_elementwise.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "check_op.h"

namespace ag {
namespace {

using test::attrs;

using Build = test::BuildFn;

// The graph against the same graph with fuse_elementwise off, byte for byte (the fused program
// rounds every bf16/f16 result where the unfused graph stores it), on data with NaN, +-inf and
// +-0; returns the fused run. want_fused >= 0: that many fused_elementwise nodes.
test::Run expect_same(const std::vector<TensorType>& in_types, const Build& build, int want_fused = -1) {
  test::OpCase c;
  for (auto& t : in_types) c.args.push_back(t);
  c.build = build;
  c.specials = test::Specials::some;
  c.ref_passes = PipelineOptions{.disabled = {"fuse_elementwise"}};
  c.ref_tol = test::Tol::exact_bits();
  auto r = test::check_op(c);
  EXPECT_EQ(r.ref.nodes_of("fused_elementwise"), 0);
  if (want_fused >= 0) EXPECT_EQ(r.got.nodes_of("fused_elementwise"), want_fused) << r.got.graph;
  return r.got;
}

Value* op(Graph& g, const std::string& name, std::vector<Value*> in, Attrs a = {}, const std::string& fx = "") {
  return g.add_node(name, in, std::move(a), fx, fx.empty() ? "" : "model.py:1 in forward: " + fx)->out();
}

const Node* find_node(const Graph& g, const std::string& opname) {
  for (auto& n : g.nodes())
    if (std::string(n->op->name) == opname) return n.get();
  return nullptr;
}

TEST(FuseElementwisePass, ChainBecomesOneNodeNamedAfterLast) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4, 8}), "x");
  Value* y = g.add_input(TensorType(DType::f32, {8}), "y");
  Value* a = op(g, "exp", {x}, {}, "exp");
  Value* b = op(g, "mul", {a, y}, {}, "mul");
  Value* c = op(g, "gelu", {b}, attrs({{"approximate", std::string("tanh")}}), "gelu");
  g.set_outputs({c});
  PipelineOptions opt;
  run_pipeline(g, opt);
  ASSERT_EQ(g.nodes().size(), 1u) << g.str();
  const Node& f = *g.nodes()[0];
  EXPECT_EQ(std::string(f.op->name), "fused_elementwise");
  EXPECT_EQ(f.name, "gelu");
  EXPECT_EQ(f.source, "model.py:1 in forward: gelu");
  EXPECT_EQ(f.attrs.s("fused"), "exp,mul,gelu");
  EXPECT_EQ(f.inputs.size(), 2u);
  EXPECT_EQ(f.attrs.ints("ops"), (std::vector<int64_t>{fe::kX_exp, fe::kX_mul, fe::kX_gelu}));
  EXPECT_TRUE(f.out()->type == TensorType(DType::f32, {4, 8}));
}

TEST(FuseElementwisePass, SingleNodesAndIntegerMathStayUnfused) {
  // one float op alone: nothing to fuse
  test::OpCase one;
  one.args = {TensorType(DType::f32, {5})};
  one.build = [](Graph& g, const std::vector<Value*>& in) { return std::vector<Value*>{op(g, "exp", {in[0]})}; };
  EXPECT_EQ(test::check_op(one).got.nodes_of("fused_elementwise"), 0);
  // integer chain: unfused
  Graph g;
  Value* x = g.add_input(TensorType(DType::i64, {5}), "x");
  Value* a = op(g, "neg", {x});
  Value* b = op(g, "abs", {a});
  g.set_outputs({b});
  run_pipeline(g, PipelineOptions{});
  EXPECT_EQ(find_node(g, "fused_elementwise"), nullptr) << g.str();
  // float64 chain: unfused
  Graph g2;
  Value* d = g2.add_input(TensorType(DType::f64, {5}), "x");
  g2.set_outputs({op(g2, "exp", {op(g2, "neg", {d})})});
  run_pipeline(g2, PipelineOptions{});
  EXPECT_EQ(find_node(g2, "fused_elementwise"), nullptr) << g2.str();
}

TEST(FuseElementwisePass, ShapeChangeSplitsGroups) {
  // exp on [4,1] then add with [1,5] -> [4,5]: different shapes, not one group; the
  // [4,5] part (add, tanh) fuses.
  auto f = expect_same({TensorType(DType::f32, {4, 1}), TensorType(DType::f32, {1, 5})},
                       [](Graph& g, const std::vector<Value*>& in) {
                         Value* a = op(g, "exp", {in[0]});
                         Value* b = op(g, "add", {a, in[1]});
                         return std::vector<Value*>{op(g, "tanh", {b})};
                       }, 1);
  EXPECT_NE(f.graph.find("= exp("), std::string::npos) << f.graph;
}

TEST(FuseElementwisePass, MultiOutputGroup) {
  auto f = expect_same({TensorType(DType::f32, {3, 7})}, [](Graph& g, const std::vector<Value*>& in) {
    Value* a = op(g, "exp", {in[0]}, {}, "a");
    Value* b = op(g, "mul", {a, a}, {}, "b");
    Value* c = op(g, "sin", {b}, {}, "c");
    return std::vector<Value*>{a, c};
  }, 1);
  EXPECT_NE(f.graph.find("fused_elementwise"), std::string::npos);
  // the fused node has two outputs: a and c
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {3, 7}), "x");
  Value* a = op(g, "exp", {x}, {}, "a");
  Value* c = op(g, "sin", {op(g, "mul", {a, a}, {}, "b")}, {}, "c");
  g.set_outputs({a, c});
  run_pipeline(g, PipelineOptions{});
  const Node* fn = find_node(g, "fused_elementwise");
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn->outputs.size(), 2u);
  EXPECT_EQ(fn->attrs.s("fused"), "a,b,c");
}

TEST(FuseElementwisePass, ValueReadOutsideClosesGroupAndOrderStaysValid) {
  // a = exp(x); r = sum(a) (outside reader); s = sin(a) must not join a's group after r
  auto f = expect_same({TensorType(DType::f32, {6, 4})}, [](Graph& g, const std::vector<Value*>& in) {
    Value* a = op(g, "exp", {in[0]}, {}, "a");
    Value* a2 = op(g, "mul", {a, in[0]}, {}, "a2");
    Value* r = op(g, "reshape", {a2}, attrs({{"shape", std::vector<int64_t>{4, 6}}}), "r");
    Value* s = op(g, "sin", {a2}, {}, "s");
    Value* t = op(g, "cos", {s}, {}, "t");
    return std::vector<Value*>{r, t};
  }, 2);
  // exp+mul fused, then sin+cos fused after the reshape
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {6, 4}), "x");
  Value* a2 = op(g, "mul", {op(g, "exp", {x}, {}, "a"), x}, {}, "a2");
  Value* r = op(g, "reshape", {a2}, attrs({{"shape", std::vector<int64_t>{4, 6}}}), "r");
  Value* t = op(g, "cos", {op(g, "sin", {a2}, {}, "s")}, {}, "t");
  g.set_outputs({r, t});
  run_pipeline(g, PipelineOptions{});
  std::vector<std::string> order;
  for (auto& n : g.nodes()) order.push_back(n->name);
  EXPECT_EQ(order, (std::vector<std::string>{"a2", "r", "t"})) << g.str();
}

TEST(FuseElementwisePass, TwoGroupsMergeAtAJoin) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {10}), "x");
  Value* y = g.add_input(TensorType(DType::f32, {10}), "y");
  Value* a = op(g, "exp", {x}, {}, "a");
  Value* b = op(g, "sin", {y}, {}, "b");
  Value* c = op(g, "add", {a, b}, {}, "c");
  g.set_outputs({c});
  run_pipeline(g, PipelineOptions{});
  ASSERT_EQ(g.nodes().size(), 1u) << g.str();
  EXPECT_EQ(g.nodes()[0]->attrs.s("fused"), "a,b,c");
}

TEST(FuseElementwisePass, BroadcastingInputs) {
  expect_same({TensorType(DType::f32, {4, 1, 8}), TensorType(DType::f32, {8}), TensorType(DType::f32, {}),
               TensorType(DType::f32, {4, 5, 8}), TensorType(DType::f32, {5, 1})},
              [](Graph& g, const std::vector<Value*>& in) {
                Value* a = op(g, "add", {in[3], in[0]});
                Value* b = op(g, "mul", {a, in[1]});
                Value* c = op(g, "sub", {b, in[2]}, attrs({{"alpha", 2.5}}));
                Value* d = op(g, "maximum", {c, op(g, "neg", {in[4]})});
                return std::vector<Value*>{op(g, "div", {d, in[1]})};
              }, 1);
}

// A long program over all supported instruction kinds, f32/bf16/f16, several
// sizes (one element, partial tile, many tiles so that threads split them).
class FusedKernelVsUnfused : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(FusedKernelVsUnfused, BitExact) {
  auto [dt, n] = GetParam();
  Build build = [dt](Graph& g, const std::vector<Value*>& in) {
    Value* x = in[0];
    Value* y = in[1];
    Value* row = in[2];
    Value* v = x;
    for (const char* u : {"neg", "abs", "relu", "silu", "tanh", "sigmoid", "erf", "exp", "log", "log1p", "expm1",
                          "rsqrt", "sqrt", "sin", "cos", "reciprocal", "floor", "ceil", "round", "trunc", "sign"})
      v = op(g, "add", {op(g, u, {v}), y});
    v = op(g, "leaky_relu", {v}, attrs({{"negative_slope", 0.2}}));
    v = op(g, "gelu", {v});
    v = op(g, "gelu", {v}, attrs({{"approximate", std::string("tanh")}}));
    v = op(g, "clamp", {v}, attrs({{"min", -1.5}, {"max", int64_t{3}}}));
    v = op(g, "mul", {v, row});
    for (double e : {2.0, 3.0, 0.5, -1.0, -0.5, 1.7}) v = op(g, "add", {op(g, "pow_scalar", {v}, attrs({{"exponent", e}})), x});
    v = op(g, "pow", {op(g, "abs", {v}), y});
    v = op(g, "atan2", {v, x});
    v = op(g, "div", {v, y}, attrs({{"rounding_mode", std::string("trunc")}}));
    v = op(g, "div", {v, y});
    v = op(g, "minimum", {v, x});
    v = op(g, "add", {v, op(g, "mul", {x, y})}, attrs({{"alpha", 0.3}}));
    Value* m = op(g, "gt", {v, y});
    Value* m2 = op(g, "logical_or", {op(g, "isnan", {v}), op(g, "le", {x, row})});
    Value* m3 = op(g, "logical_xor", {m, op(g, "logical_not", {m2})});
    v = op(g, "where", {m3, v, op(g, "mul", {x, row})});
    Value* f32v = op(g, "convert", {v}, attrs({{"dtype", DType::f32}}));
    Value* hv = op(g, "convert", {op(g, "exp", {f32v})}, attrs({{"dtype", dt}}));
    Value* bv = op(g, "convert", {hv}, attrs({{"dtype", DType::b8}}));
    Value* back = op(g, "convert", {bv}, attrs({{"dtype", dt}}));
    return std::vector<Value*>{op(g, "add", {hv, back}), m3};
  };
  test::Run r = expect_same({TensorType(dt, {n}), TensorType(dt, {n}), TensorType(dt, {1})}, build);
  EXPECT_EQ(r.nodes_of("fused_elementwise"), 1) << r.graph;
  EXPECT_EQ(r.ops.size(), 1u) << r.graph;  // everything, multi-output included, is one node
}

INSTANTIATE_TEST_SUITE_P(Sizes, FusedKernelVsUnfused,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Values(int64_t{1}, int64_t{300}, int64_t{20001})));

TEST(FusedKernel, OpmathScalarWithBf16) {
  // bf16 tensor times a 0-d float32 scalar (PyTorch's Python scalar): computed in f32, one rounding
  expect_same({TensorType(DType::bf16, {1000}), TensorType(DType::f32, {})},
              [](Graph& g, const std::vector<Value*>& in) {
                Value* a = op(g, "mul", {in[0], in[1]});
                Value* b = op(g, "add", {a, in[1]}, attrs({{"alpha", 3}}));
                return std::vector<Value*>{op(g, "sigmoid", {b})};
              }, 1);
}

TEST(FusedKernel, ScalarOperandsOnEitherSide) {
  // one-element inputs are read as values; alpha products must round like the single-op kernels
  for (DType dt : {DType::f32, DType::bf16}) {
    expect_same({TensorType(dt, {3000}), TensorType(dt, {}), TensorType(dt, {1, 1}), TensorType(DType::b8, {3000})},
                [](Graph& g, const std::vector<Value*>& in) {
                  Value* v = op(g, "add", {in[0], in[1]}, attrs({{"alpha", 0.37}}));
                  v = op(g, "sub", {in[2], v}, attrs({{"alpha", 1.3}}));
                  v = op(g, "add", {v, in[0]}, attrs({{"alpha", -0.71}}));
                  v = op(g, "sub", {v, in[2]}, attrs({{"alpha", 2.9}}));
                  v = op(g, "div", {in[1], op(g, "mul", {in[2], v})});
                  v = op(g, "maximum", {in[1], v});
                  v = op(g, "where", {in[3], v, in[2]});
                  v = op(g, "where", {in[3], in[1], v});
                  return std::vector<Value*>{op(g, "lt", {v, in[2]}), op(g, "pow", {in[1], v})};
                }, 1);
  }
}

TEST(FusedKernel, NonContiguousBroadcastsAndZeroSize) {
  expect_same({TensorType(DType::bf16, {3, 1, 5, 1}), TensorType(DType::bf16, {1, 4, 1, 6}),
               TensorType(DType::b8, {3, 4, 1, 6})},
              [](Graph& g, const std::vector<Value*>& in) {
                Value* a = op(g, "mul", {in[0], in[1]});
                Value* b = op(g, "where", {in[2], a, op(g, "neg", {a})});
                return std::vector<Value*>{op(g, "tanh", {b})};
              }, 1);
  expect_same({TensorType(DType::f32, {0, 5}), TensorType(DType::f32, {5})},
              [](Graph& g, const std::vector<Value*>& in) {
                return std::vector<Value*>{op(g, "exp", {op(g, "add", {in[0], in[1]})})};
              }, 1);
}

TEST(FusedKernel, InPlaceOverAnInputThatDies) {
  // permute(x) is an intermediate buffer that dies at the fused node: the planner writes over it
  Build build = [](Graph& g, const std::vector<Value*>& in) {
    Value* p = op(g, "permute", {in[0]}, attrs({{"dims", std::vector<int64_t>{1, 0}}}));
    Value* f = op(g, "sin", {op(g, "mul", {p, in[1]})});
    return std::vector<Value*>{op(g, "permute", {f}, attrs({{"dims", std::vector<int64_t>{1, 0}}}))};
  };
  std::vector<TensorType> types = {TensorType(DType::f32, {50, 100}), TensorType(DType::f32, {100, 50})};
  expect_same(types, build, 1);
  Graph g;
  std::vector<Value*> ins = {g.add_input(types[0], "x"), g.add_input(types[1], "y")};
  g.set_outputs(build(g, ins));
  run_pipeline(g, PipelineOptions{});
  auto prog = compile_program(g);
  EXPECT_GE(prog->stats.inplace, 1) << g.str();
}

TEST(FusedKernel, MalformedProgramsThrowWithContext) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  Attrs a = attrs({{"ops", std::vector<int64_t>{fe::kX_exp}},
                   {"args", std::vector<int64_t>{5, -1, -1}},
                   {"params", std::vector<double>{0, 0, 0}},
                   {"outputs", std::vector<int64_t>{1}}});
  EXPECT_TRUE(test::throws_with([&] { g.add_node("fused_elementwise", {x}, a, "bad"); }, {"reads slot 5", "'bad'"}));
  Value* i = g.add_input(TensorType(DType::i64, {4}), "i");
  a.set("args", std::vector<int64_t>{0, -1, -1});
  EXPECT_THROW(g.add_node("fused_elementwise", {i}, a, "int"), Error);
  Value* b = g.add_input(TensorType(DType::f32, {3}), "b");
  EXPECT_TRUE(test::throws_with([&] { g.add_node("fused_elementwise", {x, b}, a, "shapes"); }, "do not broadcast"));
}

}  // namespace
}  // namespace ag
