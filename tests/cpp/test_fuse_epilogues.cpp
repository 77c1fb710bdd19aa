// Tests of the fuse_epilogues pass and of the fused GEMM/conv kernels: what
// fuses (activation chains, scalar/row/channel/full operands, batch_norm, a
// separate bias add) and what must not (multi-use results, consumers that
// change the shape, broadcasts the kernels cannot take, the GEMM as the right
// operand of sub/div); fused results are compared with the same graph run with
// the pass disabled and with a naive reference; bad post-op attributes throw.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/epilogue.h"
#include "kernels/fused_elementwise.h"
#include "kernels/gemm_panels.h"
#include "passes/passes.h"
#include "check_op.h"

namespace ag {
namespace {

using test::randn;
using test::attrs;
using test::count;

struct Case {
  std::vector<std::pair<TensorType, std::vector<float>>> inputs;  // graph inputs (f32 data, converted to dtype)
  std::vector<std::pair<TensorType, std::vector<float>>> consts;
  std::function<Value*(Graph&, const std::vector<Value*>& in, const std::vector<Value*>& c)> build;
};

// The case with fuse_epilogues against the same graph with the pass off (at `tol`; with `want`,
// also against those values at `want_tol`); got: the fused run, ref: the unfused one.
test::Checked fused_vs_unfused(const Case& cs, test::Tol tol, const std::vector<float>* want = nullptr,
                               test::Tol want_tol = {}) {
  test::OpCase c;
  for (auto& [t, v] : cs.inputs) c.args.push_back(test::from_floats(t, v));
  for (auto& [t, v] : cs.consts) c.args.push_back(test::Arg(test::from_floats(t, v), true));
  const size_t n_in = cs.inputs.size();
  c.build = [&cs, n_in](Graph& g, const std::vector<Value*>& a) {
    std::vector<Value*> in(a.begin(), a.begin() + n_in), cv(a.begin() + n_in, a.end());
    return std::vector<Value*>{cs.build(g, in, cv)};
  };
  c.ref_passes = PipelineOptions{.disabled = {"fuse_epilogues"}};
  c.ref_tol = tol;
  if (want) {
    c.want = test::want_values(*want);
    c.tol = want_tol;
  }
  return test::check_op(c);
}

float gelu_ref(float x) { return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f))); }

// linear -> gelu -> mul(0-d const) -> add(residual input) -> relu: one node
Case linear_chain(DType t, int64_t M, int64_t K, int64_t N) {
  Case c;
  c.inputs = {{TensorType(t, {M, K}), randn(M * K, 1)}, {TensorType(t, {M, N}), randn(M * N, 2)}};
  c.consts = {{TensorType(t, {N, K}), randn(N * K, 3)}, {TensorType(t, {N}), randn(N, 4)},
              {TensorType(DType::f32, {}), {0.5f}}};
  c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
    Value* y = g.add_node("linear", {in[0], cv[0], cv[1]}, {}, "fc")->out();
    y = g.add_node("gelu", {y}, {}, "act")->out();
    y = g.add_node("mul", {y, cv[2]}, {}, "scale")->out();
    y = g.add_node("add", {in[1], y}, {}, "resid")->out();
    return g.add_node("relu", {y}, {}, "out_relu")->out();
  };
  return c;
}

std::vector<float> linear_chain_ref(const Case& c, int64_t M, int64_t K, int64_t N) {
  const auto &x = c.inputs[0].second, &r = c.inputs[1].second, &w = c.consts[0].second, &b = c.consts[1].second;
  std::vector<float> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = b[n];
      for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
      float v = gelu_ref(static_cast<float>(s)) * 0.5f + r[m * N + n];
      y[m * N + n] = v > 0 ? v : 0;
    }
  return y;
}

TEST(FuseEpilogues, LinearChainFusesIntoOneNode) {
  for (int64_t M : {1, 3, 37}) {  // M = 1 and 3 take the GEMV path
    Case c = linear_chain(DType::f32, M, 40, 24);
    const auto want = linear_chain_ref(c, M, 40, 24);
    auto r = fused_vs_unfused(c, {1e-5, 1e-5}, &want, {1e-4, 1e-4});
    const test::Run &f = r.got, &u = r.ref;
    ASSERT_EQ(f.kernels.size(), 1u) << f.graph;
    EXPECT_EQ(count(f.graph, "= linear("), 1) << f.graph;
    EXPECT_NE(f.graph.find("fused=\"act,scale,resid,out_relu\""), std::string::npos) << f.graph;
    EXPECT_GT(u.kernels.size(), 1u);  // (fuse_elementwise may still merge the unfused ops)
    if (M <= 3) EXPECT_EQ(f.kernels[0].rfind("gemv", 0), 0u) << f.kernels[0];
  }
}

// The same chain on the packed small-row GEMM (kernels/gemm_panels.h, forced on: oneDNN's brgemm
// would take it on AVX-512 CPUs): the epilogue runs on each thread's block of panels, the residual
// read at the block's columns of each row.
TEST(FuseEpilogues, LinearChainOnPanels) {
  panels::force(panels::kOn);
  struct Auto { ~Auto() { panels::force(panels::kAuto); } } back;  // (also when an assertion returns)
  for (int64_t M : {12, 37}) {
    Case c = linear_chain(DType::f32, M, 40, 48);
    const auto want = linear_chain_ref(c, M, 40, 48);
    auto r = fused_vs_unfused(c, {1e-5, 1e-5}, &want, {1e-4, 1e-4});
    ASSERT_EQ(r.got.kernels.size(), 1u) << r.got.graph;
    EXPECT_EQ(r.got.kernels[0].rfind("panels_f32", 0), 0u) << r.got.kernels[0];
  }
}

TEST(FuseEpilogues, LinearChainBf16) {
  for (int64_t M : {1, 9}) {
    Case c = linear_chain(DType::bf16, M, 64, 32);
    // inputs as the bf16 values they become
    for (auto* v : {&c.inputs[0].second, &c.inputs[1].second, &c.consts[0].second, &c.consts[1].second})
      for (auto& x : *v) x = bf16_to_f32(f32_to_bf16(x));
    const auto want = linear_chain_ref(c, M, 64, 32);
    // one rounding instead of four: within a couple of bf16 ulps of the unfused result
    auto r = fused_vs_unfused(c, {3e-2, 2e-2}, &want, {2e-2, 1e-2});
    ASSERT_EQ(r.got.kernels.size(), 1u) << r.got.graph;
  }
}

TEST(FuseEpilogues, MultiUseResultIsNotFused) {
  Case c;
  c.inputs = {{TensorType(DType::f32, {4, 8}), randn(32, 1)}};
  c.consts = {{TensorType(DType::f32, {6, 8}), randn(48, 2)}};
  c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
    Value* y = g.add_node("linear", {in[0], cv[0]}, {}, "fc")->out();
    Value* a = g.add_node("relu", {y}, {}, "r")->out();
    return g.add_node("add", {a, y}, {}, "both")->out();  // y used twice
  };
  auto r = fused_vs_unfused(c, {0, 0});
  const test::Run& f = r.got;
  EXPECT_EQ(f.graph.find("post_ops"), std::string::npos) << f.graph;
}

TEST(FuseEpilogues, ShapeChangingAndUnsupportedBroadcastsAreNotFused) {
  // add with [2, 4, 6] (broadcasts the [4, 6] result up), with [4, 1] (per row:
  // not a post-op the GEMM takes), sub with the GEMM on the right, div with a
  // rounding mode, add with alpha
  std::vector<std::pair<const char*, std::function<Value*(Graph&, Value*, const std::vector<Value*>&)>>> cases = {
      {"grow", [](Graph& g, Value* y, const std::vector<Value*>& in) { return g.add_node("add", {y, in[1]}, {})->out(); }},
      {"row", [](Graph& g, Value* y, const std::vector<Value*>& in) { return g.add_node("add", {y, in[2]}, {})->out(); }},
      {"rsub", [](Graph& g, Value* y, const std::vector<Value*>& in) { return g.add_node("sub", {in[3], y}, {})->out(); }},
      {"floordiv", [](Graph& g, Value* y, const std::vector<Value*>& in) {
         return g.add_node("div", {y, in[3]}, attrs({{"rounding_mode", std::string("floor")}}))->out();
       }},
      {"alpha", [](Graph& g, Value* y, const std::vector<Value*>& in) {
         return g.add_node("add", {y, in[3]}, attrs({{"alpha", 2.0}}))->out();
       }},
  };
  for (auto& [name, f] : cases) {
    Case c;
    c.inputs = {{TensorType(DType::f32, {4, 8}), randn(32, 1)},
                {TensorType(DType::f32, {2, 4, 6}), randn(48, 2)},
                {TensorType(DType::f32, {4, 1}), randn(4, 3)},
                {TensorType(DType::f32, {4, 6}), randn(24, 4)}};
    c.consts = {{TensorType(DType::f32, {6, 8}), randn(48, 5)}, {TensorType(DType::f32, {6}), randn(6, 6)}};
    auto fn = f;
    c.build = [fn](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
      return fn(g, g.add_node("linear", {in[0], cv[0], cv[1]}, {}, "fc")->out(), in);
    };
    auto r = fused_vs_unfused(c, {0, 0});
    const test::Run& fu = r.got;
    EXPECT_EQ(fu.graph.find("post_ops"), std::string::npos) << name << "\n" << fu.graph;
    EXPECT_EQ(fu.kernels.size(), 2u) << name;
  }
}

TEST(FuseEpilogues, SeparateBiasAddBecomesTheBias) {
  Case c;
  c.inputs = {{TensorType(DType::f32, {5, 8}), randn(40, 1)}, {TensorType(DType::f32, {6}), randn(6, 2)}};
  c.consts = {{TensorType(DType::f32, {8, 6}), randn(48, 3)}};
  c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
    Value* y = g.add_node("matmul", {in[0], cv[0]}, {}, "mm")->out();
    y = g.add_node("add", {y, in[1]}, {}, "bias")->out();
    return g.add_node("tanh", {y}, {}, "t")->out();
  };
  auto r = fused_vs_unfused(c, {1e-6, 1e-5});
  const test::Run& f = r.got;
  EXPECT_NE(f.graph.find("= matmul(%x0, %c0, %x1) {"), std::string::npos) << f.graph;
  EXPECT_NE(f.graph.find("post_ops=[" + std::to_string(fe::kX_tanh) + "]"), std::string::npos) << f.graph;
}

// conv -> batch_norm -> add(residual) -> relu (ResNet basic block tail), f32 and bf16
TEST(FuseEpilogues, ConvBatchNormResidualRelu) {
  for (DType t : {DType::f32, DType::bf16}) {
    const int64_t N = 2, C = 16, H = 7, W = 9;
    Case c;
    c.inputs = {{TensorType(t, {N, C, H, W}), randn(N * C * H * W, 1)}};
    std::vector<float> var = randn(C, 5);
    for (auto& v : var) v = std::fabs(v) + 0.5f;
    c.consts = {{TensorType(t, {C, C, 3, 3}), randn(C * C * 9, 2)}, {TensorType(DType::f32, {C}), randn(C, 3)},
                {TensorType(DType::f32, {C}), var}, {TensorType(DType::f32, {C}), randn(C, 6)},
                {TensorType(DType::f32, {C}), randn(C, 7)}};
    if (t == DType::bf16)
      for (auto& x : c.inputs[0].second) x = bf16_to_f32(f32_to_bf16(x));
    c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
      Value* y = g.add_node("conv", {in[0], cv[0]}, attrs({{"padding", Shape{1, 1}}}), "conv1")->out();
      y = g.add_node("batch_norm", {y, cv[1], cv[2], cv[3], cv[4]},
                     attrs({{"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}}), "bn1")
              ->out();
      y = g.add_node("add", {y, in[0]}, {}, "add1")->out();
      return g.add_node("relu", {y}, {}, "relu1")->out();
    };
    auto r = fused_vs_unfused(c, t == DType::f32 ? test::Tol{1e-4, 1e-5} : test::Tol{6e-2, 2e-2});
    const test::Run& f = r.got;
    ASSERT_EQ(f.kernels.size(), 1u) << f.graph;
    EXPECT_NE(f.graph.find("fused=\"bn1,add1,relu1\""), std::string::npos) << f.graph;
  }
}

TEST(FuseEpilogues, ConvChannelScaleClampAndSigmoid) {
  const int64_t N = 1, C = 8, H = 5, W = 5;
  Case c;
  c.inputs = {{TensorType(DType::f32, {N, 3, H, W}), randn(3 * H * W, 1)}, {TensorType(DType::f32, {C, 1, 1}), randn(C, 2)}};
  c.consts = {{TensorType(DType::f32, {C, 3, 3, 3}), randn(C * 27, 3)}, {TensorType(DType::f32, {C}), randn(C, 4)}};
  c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
    Value* y = g.add_node("conv", {in[0], cv[0], cv[1]}, attrs({{"padding", Shape{1, 1}}}), "conv")->out();
    y = g.add_node("mul", {in[1], y}, {}, "chscale")->out();
    y = g.add_node("clamp", {y}, attrs({{"min", -0.5}, {"max", int64_t{1}}}), "clip")->out();
    y = g.add_node("sigmoid", {y}, {}, "sig")->out();
    return g.add_node("silu", {y}, {}, "sl")->out();
  };
  auto r = fused_vs_unfused(c, {1e-5, 1e-5});
  const test::Run& f = r.got;
  ASSERT_EQ(f.kernels.size(), 1u) << f.graph;
}

TEST(FuseEpilogues, SwiGluGateProduct) {
  // silu(x @ w1^T) * (x @ w2^T), the product taken by the first GEMM (moved after the second)
  for (int64_t M : {1, 6}) {
    Case c;
    c.inputs = {{TensorType(DType::f32, {M, 32}), randn(M * 32, 1)}};
    c.consts = {{TensorType(DType::f32, {48, 32}), randn(48 * 32, 2)}, {TensorType(DType::f32, {48, 32}), randn(48 * 32, 3)}};
    c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
      Value* a = g.add_node("linear", {in[0], cv[0]}, {}, "gate")->out();
      a = g.add_node("silu", {a}, {}, "act")->out();
      Value* b = g.add_node("linear", {in[0], cv[1]}, {}, "up")->out();
      return g.add_node("mul", {a, b}, {}, "prod")->out();
    };
    auto r = fused_vs_unfused(c, {1e-5, 1e-5});
    const test::Run& f = r.got;
    EXPECT_EQ(f.kernels.size(), 2u) << f.graph;
    EXPECT_EQ(count(f.graph, "silu("), 0) << f.graph;
    EXPECT_EQ(count(f.graph, "mul("), 0) << f.graph;
  }
}

TEST(FuseEpilogues, ThroughReshapeKeepingLastDim) {
  // linear on [6, 16] viewed as [2, 3, 8] before gelu and a residual add of a [2, 3, 8] input
  Case c;
  c.inputs = {{TensorType(DType::f32, {6, 16}), randn(96, 1)}, {TensorType(DType::f32, {2, 3, 8}), randn(48, 2)}};
  c.consts = {{TensorType(DType::f32, {8, 16}), randn(128, 3)}, {TensorType(DType::f32, {8}), randn(8, 4)}};
  c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
    Value* y = g.add_node("linear", {in[0], cv[0]}, {}, "fc")->out();
    y = g.add_node("reshape", {y}, attrs({{"shape", Shape{2, 3, 8}}}), "view")->out();
    y = g.add_node("gelu", {y}, attrs({{"approximate", std::string("tanh")}}), "act")->out();
    y = g.add_node("add", {y, in[1]}, {}, "res")->out();
    return g.add_node("add", {y, cv[1]}, {}, "shift")->out();  // [8]: a row operand
  };
  auto r = fused_vs_unfused(c, {1e-5, 1e-5});
  const test::Run& f = r.got;
  EXPECT_NE(f.graph.find("fused=\"act,res,shift\""), std::string::npos) << f.graph;
}

TEST(FuseEpilogues, ZeroSizeAndZeroK) {
  // K = 0: the result is bias + epilogue; M = 0: nothing to do
  for (int64_t M : {0, 3}) {
    for (int64_t K : {0, 4}) {
      Case c;
      c.inputs = {{TensorType(DType::f32, {M, K}), randn(M * K, 1)}, {TensorType(DType::f32, {M, 5}), randn(M * 5, 2)}};
      c.consts = {{TensorType(DType::f32, {5, K}), randn(5 * K, 3)}, {TensorType(DType::f32, {5}), randn(5, 4)}};
      c.build = [](Graph& g, const std::vector<Value*>& in, const std::vector<Value*>& cv) {
        Value* y = g.add_node("linear", {in[0], cv[0], cv[1]}, {}, "fc")->out();
        y = g.add_node("sub", {y, in[1]}, {}, "d")->out();
        return g.add_node("relu", {y}, {}, "r")->out();
      };
      auto r = fused_vs_unfused(c, {1e-6, 1e-5});
      const test::Run& f = r.got;
      EXPECT_NE(f.graph.find("post_ops"), std::string::npos);
    }
  }
}

TEST(FuseEpilogues, BadPostOpAttributesThrow) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4, 8}), "x");
  Value* w = g.add_input(TensorType(DType::f32, {6, 8}), "w");
  Value* r = g.add_input(TensorType(DType::f32, {4, 1}), "r");
  Value* h = g.add_input(TensorType(DType::bf16, {4, 6}), "h");
  auto expect_error = [](const std::function<void()>& f, const std::string& msg) {
    EXPECT_TRUE(test::throws_with(f, msg));
  };
  Attrs a = attrs({{"post_ops", std::vector<int64_t>{epi::kAdd}}, {"post_args", std::vector<double>{0, 0, 0}},
                   {"post_inputs", int64_t{1}}});
  expect_error([&] { g.add_node("linear", {x, w, r}, a, "bad_bcast"); }, "does not fit the output");
  expect_error([&] { g.add_node("linear", {x, w, h}, a, "bad_dtype"); }, "must have the output dtype");
  Attrs b = attrs({{"post_ops", std::vector<int64_t>{fe::kX_relu}}, {"post_args", std::vector<double>{0}}});
  expect_error([&] { g.add_node("linear", {x, w}, b, "bad_args"); }, "3 values per post-op");
  Attrs c = attrs({{"post_ops", std::vector<int64_t>{99}}, {"post_args", std::vector<double>{0, 0, 0}}});
  expect_error([&] { g.add_node("linear", {x, w}, c, "bad_code"); }, "unknown post-op code 99");
  Value* full = g.add_input(TensorType(DType::f32, {4, 6}), "full");
  Attrs d = attrs({{"post_ops", std::vector<int64_t>{epi::kAdd, epi::kMul}},
                   {"post_args", std::vector<double>{0, 0, 0, 0, 0, 0}}, {"post_inputs", int64_t{1}}});
  expect_error([&] { g.add_node("linear", {x, w, full}, d, "no_operand"); }, "post-op mul has no operand");
}

}  // namespace
}  // namespace ag
