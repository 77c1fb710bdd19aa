// Tests of the shape, view, index and creation ops: each builds a small graph,
// runs it through the pass pipeline and the executor, and compares with a
// reference computed here; plus checks that bad inputs throw useful errors.
#include <gtest/gtest.h>

#include <numeric>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/common.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace ag {
namespace {

using test::attrs;

TensorType f32(Shape s) { return TensorType(DType::f32, s); }

std::vector<float> iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

// Runs a one-node graph with the given inputs (f32 data) and returns output 0.
template <typename T = float>
std::vector<T> run1(const std::string& op, const std::vector<TensorType>& types, std::vector<void*> data, Attrs a,
                    TensorType* out_type = nullptr) {
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

TEST(ShapeOps, PermuteMatchesReference) {
  auto x = iota(24);
  TensorType t;
  auto y = run1("permute", {f32({2, 3, 4})}, {x.data()}, attrs({{"dims", Shape{2, 0, 1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{4, 2, 3}));
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
}

TEST(ShapeOps, LargeTransposeIsTiledCorrectly) {
  const int B = 3, M = 70, N = 45;
  auto x = iota(B * M * N);
  TensorType t;
  auto y = run1("permute", {f32({B, M, N})}, {x.data()}, attrs({{"dims", Shape{0, 2, 1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{B, N, M}));
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < N; ++j)
      for (int i = 0; i < M; ++i) ASSERT_EQ(y[(b * N + j) * M + i], x[(b * M + i) * N + j]);
}

TEST(ShapeOps, ExpandWithNewLeadingDimAndMinusOne) {
  auto x = iota(3);
  TensorType t;
  auto y = run1("expand", {f32({3, 1})}, {x.data()}, attrs({{"shape", Shape{2, -1, 4}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_EQ(y[(b * 3 + i) * 4 + j], x[i]);
}

TEST(ShapeOps, SliceNormalizesLikeTorch) {
  auto x = iota(20);
  TensorType t;
  // x[:, -4:100:2] on [4, 5] -> columns 1, 3
  auto y = run1("slice", {f32({4, 5})}, {x.data()},
                attrs({{"dim", int64_t{1}}, {"start", int64_t{-4}}, {"end", int64_t{100}}, {"step", int64_t{2}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{4, 2}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(y[i * 2], x[i * 5 + 1]);
    EXPECT_EQ(y[i * 2 + 1], x[i * 5 + 3]);
  }
  // an empty slice is fine
  run1("slice", {f32({4, 5})}, {x.data()}, attrs({{"dim", int64_t{0}}, {"start", int64_t{3}}, {"end", int64_t{1}}}), &t);
  EXPECT_EQ(t.shape(), (Shape{0, 5}));
}

TEST(ShapeOps, SelectAndSliceViews) {
  auto x = iota(24);
  TensorType t;
  auto y = run1("select", {f32({2, 3, 4})}, {x.data()}, attrs({{"dim", int64_t{1}}, {"index", int64_t{-1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{2, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[i * 4 + j], x[(i * 3 + 2) * 4 + j]);
  // zero-copy: select_view on dim 0 is contiguous
  auto v = run1("select_view", {f32({2, 3, 4})}, {x.data()}, attrs({{"dim", int64_t{0}}, {"index", int64_t{1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(v[i], x[12 + i]);
  auto s = run1("slice_view", {f32({1, 6, 2})}, {x.data()},
                attrs({{"dim", int64_t{1}}, {"start", int64_t{2}}, {"end", int64_t{5}}, {"step", int64_t{1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{1, 3, 2}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s[i], x[4 + i]);
  // not contiguous -> rejected
  Graph g;
  Value* in = g.add_input(f32({2, 3}), "x");
  EXPECT_THROW(g.add_node("slice_view", {in}, attrs({{"dim", int64_t{1}}, {"start", int64_t{1}}}), "n"), Error);
}

TEST(ShapeOps, CatSkipsLegacyEmptyAndPads) {
  auto a = iota(6), b = iota(4);
  float dummy = 0;
  TensorType t;
  auto y = run1("cat", {f32({2, 3}), f32({0}), f32({2, 2})}, {a.data(), &dummy, b.data()},
                attrs({{"dim", int64_t{-1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{2, 5}));
  std::vector<float> want = {0, 1, 2, 0, 1, 3, 4, 5, 2, 3};
  EXPECT_EQ(y, want);
  // pad [2, 3] by (1, -1) on the last dim and (0, 1) on dim 0, value 9
  auto p = run1("pad", {f32({2, 3})}, {a.data()}, attrs({{"pads", Shape{1, -1, 0, 1}}, {"value", 9.0}}), &t);
  ASSERT_EQ(t.shape(), (Shape{3, 3}));
  std::vector<float> pw = {9, 0, 1, 9, 3, 4, 9, 9, 9};
  EXPECT_EQ(p, pw);
}

TEST(ShapeOps, FlipRepeatRollTril) {
  auto x = iota(6);
  TensorType t;
  auto f = run1("flip", {f32({2, 3})}, {x.data()}, attrs({{"dims", Shape{0, 1}}}), &t);
  EXPECT_EQ(f, (std::vector<float>{5, 4, 3, 2, 1, 0}));
  auto r = run1("repeat", {f32({2})}, {x.data()}, attrs({{"repeats", Shape{2, 2}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{2, 4}));
  EXPECT_EQ(r, (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1}));
  auto ro = run1("roll", {f32({2, 3})}, {x.data()}, attrs({{"shifts", Shape{1, -1}}, {"dims", Shape{1, 0}}}), &t);
  EXPECT_EQ(ro, (std::vector<float>{5, 3, 4, 2, 0, 1}));
  auto tl = run1("tril", {f32({2, 3})}, {x.data()}, attrs({{"diagonal", int64_t{0}}}), &t);
  EXPECT_EQ(tl, (std::vector<float>{0, 0, 0, 3, 4, 0}));
  auto tu = run1("triu", {f32({2, 3})}, {x.data()}, attrs({{"diagonal", int64_t{1}}}), &t);
  EXPECT_EQ(tu, (std::vector<float>{0, 1, 2, 0, 0, 5}));
}

TEST(ShapeOps, SliceScatter) {
  auto x = iota(6);
  std::vector<float> src = {-1, -2};
  auto y = run1("slice_scatter", {f32({2, 3}), f32({2, 1})}, {x.data(), src.data()},
                attrs({{"dim", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{2}}, {"step", int64_t{1}}}));
  EXPECT_EQ(y, (std::vector<float>{0, -1, 2, 3, -2, 5}));
}

TEST(IndexOps, EmbeddingAndRangeError) {
  auto w = iota(10);  // [5, 2]
  std::vector<int64_t> idx = {4, 0, 2};
  TensorType t;
  auto y = run1("embedding", {f32({5, 2}), TensorType(DType::i64, {3})}, {w.data(), idx.data()}, Attrs{}, &t);
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(y, (std::vector<float>{8, 9, 0, 1, 4, 5}));
  std::vector<int64_t> bad = {1, 7, 0};
  try {
    run1("embedding", {f32({5, 2}), TensorType(DType::i64, {3})}, {w.data(), bad.data()}, Attrs{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 7 out of range for 5 rows"), std::string::npos) << e.what();
  }
}

TEST(IndexOps, IndexSelectGatherIndex) {
  auto x = iota(12);  // [3, 4]
  std::vector<int32_t> i32 = {3, 0};
  TensorType t;
  auto s = run1("index_select", {f32({3, 4}), TensorType(DType::i32, {2})}, {x.data(), i32.data()},
                attrs({{"dim", int64_t{1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(s, (std::vector<float>{3, 0, 7, 4, 11, 8}));
  std::vector<int64_t> gi = {1, 0, 2, 2};  // [2, 2], dim 0
  auto g = run1("gather", {f32({3, 4}), TensorType(DType::i64, {2, 2})}, {x.data(), gi.data()},
                attrs({{"dim", int64_t{0}}}), &t);
  EXPECT_EQ(g, (std::vector<float>{4, 1, 8, 9}));
  // x[[-1, 0], [1, 2]] (two adjacent index tensors)
  std::vector<int64_t> a = {-1, 0}, b = {1, 2};
  auto ix = run1("index", {f32({3, 4}), TensorType(DType::i64, {2}), TensorType(DType::i64, {2})},
                 {x.data(), a.data(), b.data()}, attrs({{"dims", Shape{0, 1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(ix, (std::vector<float>{9, 2}));
  // x[:, [2, 0]]
  std::vector<int64_t> c = {2, 0};
  auto ic = run1("index", {f32({3, 4}), TensorType(DType::i64, {2})}, {x.data(), c.data()},
                 attrs({{"dims", Shape{1}}}), &t);
  EXPECT_EQ(ic, (std::vector<float>{2, 0, 6, 4, 10, 8}));
  std::vector<int64_t> oob = {4};
  EXPECT_THROW(run1("index", {f32({3, 4}), TensorType(DType::i64, {1})}, {x.data(), oob.data()},
                    attrs({{"dims", Shape{1}}})),
               Error);
}

TEST(IndexOps, ScatterAndAsStrided) {
  auto x = iota(12);  // [3, 4]
  TensorType t;
  // scatter_add along dim 0 with a repeated index: out[i[r][c]][c] += src[r][c]
  std::vector<int64_t> idx = {2, 0, 2, 2, 2, 1};  // [2, 3]
  std::vector<float> src = {1, 2, 3, 4, 5, 6};
  auto y = run1("scatter", {f32({3, 4}), TensorType(DType::i64, {2, 3}), f32({2, 3})}, {x.data(), idx.data(), src.data()},
                attrs({{"dim", int64_t{0}}, {"reduce", std::string("sum")}}), &t);
  std::vector<float> want = x;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) want[idx[r * 3 + c] * 4 + c] += src[r * 3 + c];
  EXPECT_EQ(y, want);
  std::vector<int64_t> bad = {0, 3, 0, 0, 0, 0};
  EXPECT_THROW(run1("scatter", {f32({3, 4}), TensorType(DType::i64, {2, 3}), f32({2, 3})},
                    {x.data(), bad.data(), src.data()}, attrs({{"dim", int64_t{0}}})),
               Error);
  // overlapping sliding windows of width 3, step 2, starting at element 1
  auto w = run1("as_strided", {f32({3, 4})}, {x.data()},
                attrs({{"size", Shape{4, 3}}, {"stride", Shape{2, 1}}, {"storage_offset", int64_t{1}}}), &t);
  ASSERT_EQ(t.shape(), (Shape{4, 3}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(w[i * 3 + j], x[1 + 2 * i + j]);
  EXPECT_THROW(run1("as_strided", {f32({3, 4})}, {x.data()}, attrs({{"size", Shape{4, 3}}, {"stride", Shape{4, 1}}})),
               Error);
}

TEST(CreationOps, ArangeAndFull) {
  Graph g;
  Node* a = g.add_node("arange", {}, attrs({{"start", 1.0}, {"end", 2.0}, {"step", 0.25}, {"dtype", DType::f32}}), "a");
  Node* f = g.add_node("full", {}, attrs({{"shape", Shape{2, 2}}, {"value", int64_t{7}}, {"dtype", DType::i64}}), "f");
  g.set_outputs({a->out(), f->out()});
  run_pipeline(g, PipelineOptions{});
  Executor ex(compile_program(g));
  auto outs = ex.run({});
  ASSERT_EQ(outs[0].type.shape(), (Shape{4}));
  const float* p = static_cast<const float*>(outs[0].data);
  EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  const int64_t* q = static_cast<const int64_t*>(outs[1].data);
  EXPECT_EQ(std::vector<int64_t>(q, q + 4), (std::vector<int64_t>{7, 7, 7, 7}));
}

TEST(ShapeErrors, BadInputsThrowUsefulMessages) {
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  Value* y = g.add_input(f32({2, 4}), "y");
  Value* fi = g.add_input(f32({2}), "fi");
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] { g.add_node("cat", {x, y}, attrs({{"dim", int64_t{0}}}), "c"); }).find("sizes must match"),
            std::string::npos);
  EXPECT_NE(msg([&] { g.add_node("expand", {x}, attrs({{"shape", Shape{4, 3}}}), "e"); }).find("cannot expand"),
            std::string::npos);
  EXPECT_NE(msg([&] { g.add_node("permute", {x}, attrs({{"dims", Shape{0, 0}}}), "p"); }).find("repeat"),
            std::string::npos);
  EXPECT_NE(msg([&] { g.add_node("embedding", {x, fi}, Attrs{}, "m"); }).find("int64 or int32"), std::string::npos);
  EXPECT_NE(msg([&] { g.add_node("select", {x}, attrs({{"dim", int64_t{1}}, {"index", int64_t{3}}}), "s"); })
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(msg([&] { g.add_node("pad", {x}, attrs({{"pads", Shape{-2, -2}}, {"value", 0.0}}), "p"); })
                .find("negative"),
            std::string::npos);
}

}  // namespace
}  // namespace ag
