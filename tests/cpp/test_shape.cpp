// Tests of the shape, view, index and creation ops: each builds a small graph,
// runs it through the pass pipeline and the executor, and compares with a
// reference computed here; plus checks that bad inputs throw useful errors.
#include <gtest/gtest.h>

#include <numeric>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "check_op.h"

namespace ag {
namespace {

using test::attrs;
using test::run_op;

TensorType f32(Shape s) { return TensorType(DType::f32, s); }

std::vector<float> iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.f);
  return v;
}

TEST(ShapeOps, PermuteMatchesReference) {
  auto x = iota(24);
  TensorType t;
  auto y = run_op("permute", {{f32({2, 3, 4}), x.data()}}, attrs({{"dims", Shape{2, 0, 1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{4, 2, 3}));
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(y[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 4 + k]);
}

TEST(ShapeOps, LargeTransposeIsTiledCorrectly) {
  const int B = 3, M = 70, N = 45;
  auto x = iota(B * M * N);
  TensorType t;
  auto y = run_op("permute", {{f32({B, M, N}), x.data()}}, attrs({{"dims", Shape{0, 2, 1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{B, N, M}));
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < N; ++j)
      for (int i = 0; i < M; ++i) ASSERT_EQ(y[(b * N + j) * M + i], x[(b * M + i) * N + j]);
}

TEST(ShapeOps, ExpandWithNewLeadingDimAndMinusOne) {
  auto x = iota(3);
  TensorType t;
  auto y = run_op("expand", {{f32({3, 1}), x.data()}}, attrs({{"shape", Shape{2, -1, 4}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) EXPECT_EQ(y[(b * 3 + i) * 4 + j], x[i]);
}

TEST(ShapeOps, SliceNormalizesLikeTorch) {
  auto x = iota(20);
  TensorType t;
  // x[:, -4:100:2] on [4, 5] -> columns 1, 3
  auto y = run_op("slice", {{f32({4, 5}), x.data()}},
                  attrs({{"dim", int64_t{1}}, {"start", int64_t{-4}}, {"end", int64_t{100}}, {"step", int64_t{2}}}))
               .values(&t);
  ASSERT_EQ(t.shape(), (Shape{4, 2}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(y[i * 2], x[i * 5 + 1]);
    EXPECT_EQ(y[i * 2 + 1], x[i * 5 + 3]);
  }
  // an empty slice is fine
  run_op("slice", {{f32({4, 5}), x.data()}},
         attrs({{"dim", int64_t{0}}, {"start", int64_t{3}}, {"end", int64_t{1}}})).values(&t);
  EXPECT_EQ(t.shape(), (Shape{0, 5}));
}

TEST(ShapeOps, SelectAndSliceViews) {
  auto x = iota(24);
  TensorType t;
  auto y = run_op("select", {{f32({2, 3, 4}), x.data()}},
                  attrs({{"dim", int64_t{1}}, {"index", int64_t{-1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{2, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[i * 4 + j], x[(i * 3 + 2) * 4 + j]);
  // zero-copy: select_view on dim 0 is contiguous
  auto v = run_op("select_view", {{f32({2, 3, 4}), x.data()}},
                  attrs({{"dim", int64_t{0}}, {"index", int64_t{1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{3, 4}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(v[i], x[12 + i]);
  auto s = run_op("slice_view", {{f32({1, 6, 2}), x.data()}},
                  attrs({{"dim", int64_t{1}}, {"start", int64_t{2}}, {"end", int64_t{5}}, {"step", int64_t{1}}}))
               .values(&t);
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
  auto y = run_op("cat", {{f32({2, 3}), a.data()}, {f32({0}), &dummy}, {f32({2, 2}), b.data()}},
                  attrs({{"dim", int64_t{-1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{2, 5}));
  std::vector<float> want = {0, 1, 2, 0, 1, 3, 4, 5, 2, 3};
  EXPECT_EQ(y, want);
  // pad [2, 3] by (1, -1) on the last dim and (0, 1) on dim 0, value 9
  auto p = run_op("pad", {{f32({2, 3}), a.data()}}, attrs({{"pads", Shape{1, -1, 0, 1}}, {"value", 9.0}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{3, 3}));
  std::vector<float> pw = {9, 0, 1, 9, 3, 4, 9, 9, 9};
  EXPECT_EQ(p, pw);
}

TEST(ShapeOps, FlipRepeatRollTril) {
  auto x = iota(6);
  TensorType t;
  auto f = run_op("flip", {{f32({2, 3}), x.data()}}, attrs({{"dims", Shape{0, 1}}})).values(&t);
  EXPECT_EQ(f, (std::vector<float>{5, 4, 3, 2, 1, 0}));
  auto r = run_op("repeat", {{f32({2}), x.data()}}, attrs({{"repeats", Shape{2, 2}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{2, 4}));
  EXPECT_EQ(r, (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1}));
  auto ro = run_op("roll", {{f32({2, 3}), x.data()}},
                   attrs({{"shifts", Shape{1, -1}}, {"dims", Shape{1, 0}}})).values(&t);
  EXPECT_EQ(ro, (std::vector<float>{5, 3, 4, 2, 0, 1}));
  auto tl = run_op("tril", {{f32({2, 3}), x.data()}}, attrs({{"diagonal", int64_t{0}}})).values(&t);
  EXPECT_EQ(tl, (std::vector<float>{0, 0, 0, 3, 4, 0}));
  auto tu = run_op("triu", {{f32({2, 3}), x.data()}}, attrs({{"diagonal", int64_t{1}}})).values(&t);
  EXPECT_EQ(tu, (std::vector<float>{0, 1, 2, 0, 0, 5}));
}

TEST(ShapeOps, SliceScatter) {
  auto x = iota(6);
  std::vector<float> src = {-1, -2};
  auto y = run_op("slice_scatter", {{f32({2, 3}), x.data()}, {f32({2, 1}), src.data()}},
                  attrs({{"dim", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{2}}, {"step", int64_t{1}}}))
               .values();
  EXPECT_EQ(y, (std::vector<float>{0, -1, 2, 3, -2, 5}));
}

TEST(IndexOps, EmbeddingAndRangeError) {
  auto w = iota(10);  // [5, 2]
  std::vector<int64_t> idx = {4, 0, 2};
  TensorType t;
  auto y = run_op("embedding", {{f32({5, 2}), w.data()}, {TensorType(DType::i64, {3}), idx.data()}}).values(&t);
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(y, (std::vector<float>{8, 9, 0, 1, 4, 5}));
  std::vector<int64_t> bad = {1, 7, 0};
  EXPECT_TRUE(test::throws_with(
      [&] { run_op("embedding", {{f32({5, 2}), w.data()}, {TensorType(DType::i64, {3}), bad.data()}}); },
      "index 7 out of range for 5 rows"));
}

TEST(IndexOps, IndexSelectGatherIndex) {
  auto x = iota(12);  // [3, 4]
  std::vector<int32_t> i32 = {3, 0};
  TensorType t;
  auto s = run_op("index_select", {{f32({3, 4}), x.data()}, {TensorType(DType::i32, {2}), i32.data()}},
                  attrs({{"dim", int64_t{1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(s, (std::vector<float>{3, 0, 7, 4, 11, 8}));
  std::vector<int64_t> gi = {1, 0, 2, 2};  // [2, 2], dim 0
  auto g = run_op("gather", {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {2, 2}), gi.data()}},
                  attrs({{"dim", int64_t{0}}})).values(&t);
  EXPECT_EQ(g, (std::vector<float>{4, 1, 8, 9}));
  // x[[-1, 0], [1, 2]] (two adjacent index tensors)
  std::vector<int64_t> a = {-1, 0}, b = {1, 2};
  auto ix = run_op("index", {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {2}), a.data()},
                             {TensorType(DType::i64, {2}), b.data()}},
                   attrs({{"dims", Shape{0, 1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{2}));
  EXPECT_EQ(ix, (std::vector<float>{9, 2}));
  // x[:, [2, 0]]
  std::vector<int64_t> c = {2, 0};
  auto ic = run_op("index", {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {2}), c.data()}},
                   attrs({{"dims", Shape{1}}})).values(&t);
  EXPECT_EQ(ic, (std::vector<float>{2, 0, 6, 4, 10, 8}));
  std::vector<int64_t> oob = {4};
  EXPECT_THROW(run_op("index", {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {1}), oob.data()}},
                      attrs({{"dims", Shape{1}}})),
               Error);
}

TEST(IndexOps, ScatterAndAsStrided) {
  auto x = iota(12);  // [3, 4]
  TensorType t;
  // scatter_add along dim 0 with a repeated index: out[i[r][c]][c] += src[r][c]
  std::vector<int64_t> idx = {2, 0, 2, 2, 2, 1};  // [2, 3]
  std::vector<float> src = {1, 2, 3, 4, 5, 6};
  auto y = run_op("scatter",
                  {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {2, 3}), idx.data()}, {f32({2, 3}), src.data()}},
                  attrs({{"dim", int64_t{0}}, {"reduce", std::string("sum")}})).values(&t);
  std::vector<float> want = x;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) want[idx[r * 3 + c] * 4 + c] += src[r * 3 + c];
  EXPECT_EQ(y, want);
  std::vector<int64_t> bad = {0, 3, 0, 0, 0, 0};
  EXPECT_THROW(run_op("scatter",
                      {{f32({3, 4}), x.data()}, {TensorType(DType::i64, {2, 3}), bad.data()}, {f32({2, 3}), src.data()}},
                      attrs({{"dim", int64_t{0}}})),
               Error);
  // overlapping sliding windows of width 3, step 2, starting at element 1
  auto w = run_op("as_strided", {{f32({3, 4}), x.data()}},
                  attrs({{"size", Shape{4, 3}}, {"stride", Shape{2, 1}}, {"storage_offset", int64_t{1}}})).values(&t);
  ASSERT_EQ(t.shape(), (Shape{4, 3}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(w[i * 3 + j], x[1 + 2 * i + j]);
  EXPECT_THROW(run_op("as_strided", {{f32({3, 4}), x.data()}}, attrs({{"size", Shape{4, 3}}, {"stride", Shape{4, 1}}})),
               Error);
}

TEST(CreationOps, ArangeAndFull) {
  test::OpCase c;  // no inputs, two outputs
  c.build = [](Graph& g, const std::vector<Value*>&) {
    Node* a =
        g.add_node("arange", {}, attrs({{"start", 1.0}, {"end", 2.0}, {"step", 0.25}, {"dtype", DType::f32}}), "a");
    Node* f =
        g.add_node("full", {}, attrs({{"shape", Shape{2, 2}}, {"value", int64_t{7}}, {"dtype", DType::i64}}), "f");
    return std::vector<Value*>{a->out(), f->out()};
  };
  c.want_types = {f32({4}), TensorType(DType::i64, {2, 2})};
  c.want = [](const std::vector<test::Tensor>&) {
    return std::vector<std::vector<double>>{{1, 1.25, 1.5, 1.75}, {7, 7, 7, 7}};
  };
  test::check_op(c);
}

TEST(ShapeErrors, BadInputsThrowUsefulMessages) {
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  Value* y = g.add_input(f32({2, 4}), "y");
  Value* fi = g.add_input(f32({2}), "fi");
  auto msg = test::error_of;
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
