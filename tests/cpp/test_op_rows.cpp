// Every unary row of kernels/elementwise_ops.h, enumerated from the registry (so a new row is
// tested without touching this file, unless it needs attributes: row_attrs), gives bit for bit
// the same result as
//   - its single-op kernel,
//   - its instruction in a fused_elementwise node (float32, bfloat16, float16),
//   - its GEMM epilogue (linear + op) and convolution epilogue (conv + op), rows marked kEpi,
// on values that include NaN, both infinities, signed zeros, tiny and huge numbers. The GEMMs
// compute their outputs exactly (zero weights: the result is the bias), so whatever differs
// is the op's implementation. Every binary and compare row (and each form its attributes select)
// gives bit for bit its single-op kernel's result in a fused_elementwise node, on every pair of
// those values (float32, bfloat16, float16, bool where the op takes it), with a one-element
// operand on either side, and for the kOpmath rows a bfloat16/float16 tensor with a float32 scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/elementwise_ops.h"
#include "passes/passes.h"
#include "check_op.h"
#include "op_rows.h"

namespace ag {
namespace {

using test::attrs;

using test::row_graphs;
using test::rows_of;
std::vector<Attrs> settings(const std::string& op) { return test::row_settings(op); }
std::vector<float> values() { return test::row_values(); }

bool same_bits(float a, float b) {
  if (a != a && b != b) return true;  // any NaN (its payload is not part of the contract)
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Runs a graph (verified only, or through `passes`) through the harness; output 0 as floats.
std::vector<float> run(Graph& g, const std::vector<const void*>& in, const PipelineOptions* passes = nullptr,
                       std::string* text = nullptr) {
  test::Run r = test::compile_and_run(g, in, passes);
  if (text) *text = r.graph;
  return r.outs.at(0).floats();
}

std::vector<const OpDef*> unary_rows() { return rows_of(1); }

// `inputs(i)` says what element i was computed from.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                 const std::function<std::string(size_t)>& inputs) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (!same_bits(got[i], want[i])) {
      ADD_FAILURE() << what << ": element " << i << " (" << inputs(i) << ") is " << got[i]
                    << ", the single-op kernel gives " << want[i];
      return;
    }
}
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  const std::vector<float> v = values();
  expect_same(got, want, what, [&v](size_t i) { return "value " + std::to_string(v[i % v.size()]); });
}

// The registry's rows of one arity are the table's `count` and all fuse; how many are epilogues.
int registered_rows(int arity, int count) {
  auto rows = rows_of(arity);
  EXPECT_EQ(rows.size(), static_cast<size_t>(count)) << "rows of arity " << arity;
  int epi = 0;
  for (const OpDef* d : rows) {
    EXPECT_TRUE(d->fuse != nullptr) << d->name;
    EXPECT_TRUE(d->has(kElementwise)) << d->name;
    epi += d->epilogue;
  }
  return epi;
}

TEST(OpRows, EveryRowIsRegisteredFromTheTable) {
  // unary, predicate, param and functor rows; binary and compare rows
  EXPECT_GE(registered_rows(1, ew::kUnaryRows), 7) << "relu, leaky_relu, gelu, silu, tanh, sigmoid, clamp";
  EXPECT_EQ(registered_rows(2, ew::kBinaryRows), 4) << "add, sub, mul, div";
}

// One node of row d over inputs of `types` holding `vals` (a one-element input holds one value),
// against the same node's instruction alone in a fused_elementwise node. False (the error in
// *err) when the op does not take these dtypes.
bool check_row(const OpDef* d, const Attrs& a, const std::vector<TensorType>& types,
               const std::vector<std::vector<float>>& vals, const std::string& what, std::string* err = nullptr) {
  const size_t k = types.size();
  std::vector<test::Tensor> data;
  std::vector<const void*> ptrs;
  for (size_t j = 0; j < k; ++j) data.push_back(test::from_floats(types[j], vals[j])), ptrs.push_back(data[j].data());
  Graph g1, g2;
  std::string why;
  if (!row_graphs(d, a, types, &g1, &g2, &why)) {
    EXPECT_NE(why, "") << what << ": a row that takes these dtypes fuses";
    if (err) *err = why;
    return false;
  }
  const std::vector<float> want = run(g1, ptrs);  // the single-op kernel
  // its fused instruction, alone in a fused_elementwise node
  expect_same(run(g2, ptrs), want, what + " fused", [&](size_t i) {
    std::string s;
    for (size_t j = 0; j < k; ++j)
      s += (j ? ", x" : "x") + std::to_string(j) + " " + std::to_string(vals[j][vals[j].size() == 1 ? 0 : i]);
    return s;
  });
  return true;
}

// A row that took none of the fused dtypes must be an integer row (nothing to fuse): it builds on
// int32; else `err` (the float32 error) is reported.
void expect_integer_row(const OpDef* d, const Attrs& a, const std::string& err) {
  std::vector<TensorType> types(d->min_inputs, TensorType(DType::i32, {2}));
  EXPECT_EQ(test::build_error(d->name, types, a), "")
      << d->name << " {" << a.str() << "} takes no float or bool values: " << err
      << " (give the row test attributes in row_attrs)";
}

// check(d, a, t, what, err) for every row of `arity`, each of its settings and each dtype that
// fused values have (f32, bf16, f16, bool): false where the op does not take t (the float32 error
// in *err). A row that takes none of them must be an integer row. Returns how many checks ran.
using RowCheck = std::function<bool(const OpDef*, const Attrs&, DType, const std::string&, std::string*)>;
int for_each_row_dtype(int arity, const RowCheck& check) {
  int checked = 0;
  for (const OpDef* d : rows_of(arity)) {
    for (const Attrs& a : settings(d->name)) {
      int dtypes = 0;
      std::string err;
      for (DType t : {DType::f32, DType::bf16, DType::f16, DType::b8}) {
        const std::string what = std::string(d->name) + " {" + a.str() + "} " + dtype_name(t);
        dtypes += check(d, a, t, what, t == DType::f32 ? &err : nullptr);
      }
      if (dtypes == 0) expect_integer_row(d, a, err);
      checked += dtypes;
    }
  }
  return checked;
}

TEST(OpRows, FusedInstructionIsBitIdenticalToTheSingleOpKernel) {
  const std::vector<float> v = values();
  const int64_t n = static_cast<int64_t>(v.size());
  for_each_row_dtype(1, [&](const OpDef* d, const Attrs& a, DType t, const std::string& what, std::string* err) {
    return check_row(d, a, {TensorType(t, {n})}, {v}, what, err);
  });
}

// linear(x, 0, bias) or conv(x, 0, bias) computes bias exactly; the row runs as its epilogue.
TEST(OpRows, GemmAndConvEpiloguesAreBitIdenticalToTheSingleOpKernel) {
  const std::vector<float> v = values();
  const int64_t n = static_cast<int64_t>(v.size());
  int checked = 0;
  for (const OpDef* d : unary_rows()) {
    if (!d->epilogue) continue;
    for (const Attrs& a : settings(d->name)) {
      const std::string what = std::string(d->name) + " {" + a.str() + "}";
      for (bool conv : {false, true}) {
        std::vector<float> got, want;
        for (bool fuse : {true, false}) {  // fused, then the single-op kernel on the same GEMM result
          Graph g;
          const int64_t K = 4;
          std::vector<float> x(2 * K, 0.75f);
          Value *xin, *gemm;
          if (!conv) {  // [2, K] @ [n, K]^T + bias[n]: both rows are the bias
            xin = g.add_input(TensorType(DType::f32, {2, K}), "x");
            Value* w = g.add_const(TensorType(DType::f32, {n, K}), test::bytes_of(std::vector<float>(n * K, 0.0f)), "w");
            Value* b = g.add_const(TensorType(DType::f32, {n}), test::bytes_of(v), "b");
            gemm = g.add_node("linear", {xin, w, b}, {}, "linear")->out();
          } else {  // 1x1 conv, n output channels, zero weights: channel c is bias[c] everywhere
            xin = g.add_input(TensorType(DType::f32, {1, K, 1, 2}), "x");
            Value* w =
                g.add_const(TensorType(DType::f32, {n, K, 1, 1}), test::bytes_of(std::vector<float>(n * K, 0.0f)), "w");
            Value* b = g.add_const(TensorType(DType::f32, {n}), test::bytes_of(v), "b");
            Attrs ca = attrs({{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{0, 0}},
                              {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t{1}}});
            gemm = g.add_node("conv", {xin, w, b}, ca, "conv")->out();
          }
          g.set_outputs({g.add_node(d->name, {gemm}, a, "act")->out()});
          PipelineOptions opt;
          opt.disabled = {"fold_constants"};  // (the zero weights must stay a GEMM)
          if (!fuse) opt.disabled.insert("fuse_epilogues");
          std::string text;
          (fuse ? got : want) = run(g, {x.data()}, &opt, &text);
          ASSERT_EQ(text.find("post_ops") != std::string::npos, fuse)
              << what << (conv ? " conv" : " linear") << ":\n" << text;
        }
        expect_same(got, want, what + (conv ? " conv epilogue" : " linear epilogue"));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 14);
}

TEST(OpRows, BinaryFusedInstructionIsBitIdenticalToTheSingleOpKernel) {
  const std::vector<float> v = values();
  const int64_t m = static_cast<int64_t>(v.size()), n = m * m;
  std::vector<float> xs(n), ys(n);  // every pair of values
  for (int64_t i = 0; i < n; ++i) xs[i] = v[i / m], ys[i] = v[i % m];
  const std::vector<float> scalars = {v[0], v[5], v[11], v[24]};  // NaN, -0, -2.5, 3e38
  const int checked = for_each_row_dtype(2, [&](const OpDef* d, const Attrs& a, DType t, const std::string& what,
                                                std::string* err) {
    const TensorType tt(t, {n}), ts(t, {});
    if (!check_row(d, a, {tt, tt}, {xs, ys}, what, err)) return false;
    for (float s : scalars) {  // a one-element operand on either side
      check_row(d, a, {tt, ts}, {xs, {s}}, what + " with scalar y " + std::to_string(s));
      check_row(d, a, {ts, tt}, {{s}, ys}, what + " with scalar x " + std::to_string(s));
      if (t == DType::bf16 || t == DType::f16)  // a float32 scalar with a 16-bit tensor (kOpmath rows)
        check_row(d, a, {tt, TensorType(DType::f32, {})}, {xs, {s}}, what + " with float32 scalar y");
    }
    return true;
  });
  EXPECT_GE(checked, 70);
}

// The reported case: a convolution followed by ReLU on an input holding one NaN keeps the NaN
// in every output it reaches, as eager does (oneDNN's fused ReLU turned them into 0).
TEST(OpRows, ConvReluKeepsNaN) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {1, 3, 8, 8}), "x");
  std::vector<float> w = test::randn(8 * 3 * 3 * 3, 5), b = test::randn(8, 6);
  Value* wc = g.add_const(TensorType(DType::f32, {8, 3, 3, 3}), test::bytes_of(w), "w");
  Value* bc = g.add_const(TensorType(DType::f32, {8}), test::bytes_of(b), "b");
  Attrs ca = attrs({{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{0, 0}},
                    {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t{1}}});
  Value* y = g.add_node("conv", {x, wc, bc}, ca, "conv")->out();
  g.set_outputs({g.add_node("relu", {y}, {}, "relu")->out()});
  std::vector<float> xv = test::randn(3 * 8 * 8, 7);
  xv[3 * 8 + 4] = std::numeric_limits<float>::quiet_NaN();  // channel 0, row 3, col 4
  PipelineOptions opt;
  std::string text;
  std::vector<float> out = run(g, {xv.data()}, &opt, &text);
  ASSERT_NE(text.find("post_ops"), std::string::npos) << text;
  int nans = 0;
  for (float o : out) nans += o != o;
  EXPECT_EQ(nans, 8 * 3 * 3) << "every output window over the NaN, in all 8 channels";
}

}  // namespace
}  // namespace ag
