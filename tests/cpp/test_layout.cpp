// The channels-last plan (runtime/layout.h) on graphs shaped like the zoo's: which values it keeps
// NHWC, the kernels around them (named in the program: "nhwc_in"/"nhwc_out" convolutions, a
// transparent node's "[channels-last]" view, "[input i nhwc->nchw]" / "[result nchw->nhwc]"
// conversions at a region's edges), and the results against the same graph compiled all row-major.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "check_op.h"

namespace ag {
namespace {
using test::attrs;

Attrs conv_attrs(int64_t stride, int64_t pad) {
  return attrs({{"stride", Shape{stride, stride}}, {"padding", Shape{pad, pad}}, {"dilation", Shape{1, 1}},
                {"groups", int64_t{1}}});
}

std::string kernel_of(const test::Run& r, const std::string& part) {
  for (const auto& k : r.kernels)
    if (k.find(part) != std::string::npos) return k;
  return "";
}

// An FPN-style head: conv a -> strided conv b -> bilinear upsample of b -> per-channel scale + a
// (elementwise) -> cat with a -> 1x1 conv (output 0); the sum's spatial sum (a reduction that reads
// row-major: converted at the edge; output 1) and spatial mean (the global average pool: reads the
// NHWC bytes as they are; output 3); softmax over the channels of the input (written row-major,
// converted once) read by two convolutions (their sum: output 2). f32 and bf16.
class LayoutPlan : public ::testing::TestWithParam<DType> {};
TEST_P(LayoutPlan, FpnHeadKeepsChannelsLastBetweenItsEdges) {
  const DType t = GetParam();
  const int64_t N = 2, C = 4, H = 8, W = 6, O = 8, O2 = 5;
  test::OpCase c;
  c.args = {{TensorType(t, {N, C, H, W})},
            {TensorType(t, {O, C, 3, 3}), nullptr, true},
            {TensorType(t, {O, O, 3, 3}), nullptr, true},
            {TensorType(t, {O, 1, 1}), nullptr, true},
            {TensorType(t, {O2, 2 * O, 1, 1}), nullptr, true},
            {TensorType(t, {O, C, 1, 1}), nullptr, true},
            {TensorType(t, {O, C, 3, 3}), nullptr, true}};
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv_attrs(1, 1), "a")->out();
    Value* b = g.add_node("conv", {a, in[2]}, conv_attrs(2, 1), "b")->out();
    Value* u = g.add_node("resize2d", {b}, attrs({{"mode", std::string("bilinear")}, {"output_size", Shape{H, W}}}),
                          "up")->out();
    Value* s = g.add_node("mul", {u, in[3]}, {}, "scale")->out();
    s = g.add_node("add", {s, a}, {}, "sum")->out();
    Value* k = g.add_node("cat", {s, a}, attrs({{"dim", int64_t{1}}}), "cat")->out();
    Value* y = g.add_node("conv", {k, in[4]}, conv_attrs(1, 0), "y")->out();
    Value* r = g.add_node("sum", {s}, attrs({{"dims", Shape{2, 3}}, {"keepdim", true}}), "summed")->out();
    Value* gap = g.add_node("mean", {s}, attrs({{"dims", Shape{-1, -2}}, {"keepdim", false}}), "pooled")->out();
    Value* m = g.add_node("softmax", {in[0]}, attrs({{"dim", int64_t{1}}}), "sm")->out();
    Value* p = g.add_node("conv", {m, in[5]}, conv_attrs(1, 0), "p")->out();
    Value* q = g.add_node("conv", {m, in[6]}, conv_attrs(1, 1), "q")->out();
    return std::vector<Value*>{y, r, g.add_node("add", {p, q}, {}, "pq")->out(), gap};
  };
  c.ref_row_major = true;
  c.ref_tol = t == DType::bf16 ? test::Tol{2e-2, 2e-2} : test::Tol{1e-4, 1e-4};  // (oneDNN sums in another order per layout)
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  EXPECT_NE(kernel_of(r.got, "resize2d_bilinear_nhwc").find("[channels-last]"), std::string::npos) << all;
  EXPECT_NE(kernel_of(r.got, "cat").find("[channels-last]"), std::string::npos) << all;
  EXPECT_EQ(test::count(all, "[channels-last]"), 3) << all;  // resize, the fused scale + sum, cat
  EXPECT_NE(kernel_of(r.got, "sum").find("[input 0 nhwc->nchw]"), std::string::npos) << all;
  EXPECT_EQ(kernel_of(r.got, "mean"), "mean_nhwc_in") << all;
  EXPECT_NE(kernel_of(r.got, "softmax").find("[result nchw->nhwc]"), std::string::npos) << all;
  EXPECT_EQ(test::count(all, "nhwc->nchw"), 1) << all;
  EXPECT_EQ(test::count(all, "nchw->nhwc"), 1) << all;
  // every convolution but the one on the graph's input reads its input channels-last (q its post-op
  // operand p too); all but the graph outputs' write so
  EXPECT_EQ(test::count(all, "nhwc_in"), 5) << all;  // (and the mean)
  EXPECT_EQ(test::count(all, "nhwc_out"), 3) << all;  // a, b, p (q's sum with p is output 2)
  // and the row-major compile of the same graph has none of it
  EXPECT_EQ(test::count([&] { std::string s; for (const auto& k : r.ref.kernels) s += k; return s; }(), "nhwc"), 0);
}
INSTANTIATE_TEST_SUITE_P(Layout, LayoutPlan, ::testing::Values(DType::f32, DType::bf16));

// A diffusion-style block: conv -> group norm (weight, bias) -> SiLU -> conv, all channels-last; and a
// second group norm of the conv's result (2 groups, no affine) that only a reduction reads (written
// NCHW directly).
// Against the all-row-major compile, f32 and bf16 (statistics summed in another order).
TEST_P(LayoutPlan, GroupNormReadsAndPassesChannelsLast) {
  const DType t = GetParam();
  const int64_t N = 2, C = 3, H = 9, W = 7, O = 16, G = 4;
  test::OpCase c;
  c.args = {{TensorType(t, {N, C, H, W})},
            {TensorType(t, {O, C, 3, 3}), nullptr, true},
            {TensorType(t, {O}), nullptr, true},
            {TensorType(t, {O}), nullptr, true},
            {TensorType(t, {O, O, 3, 3}), nullptr, true}};
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv_attrs(1, 1), "a")->out();
    auto gn = attrs({{"groups", G}, {"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}});
    Value* n1 = g.add_node("group_norm", {a, in[2], in[3]}, gn, "gn1")->out();
    Value* y = g.add_node("conv", {g.add_node("silu", {n1}, {}, "act")->out(), in[4]}, conv_attrs(1, 1), "b")->out();
    auto gn_plain = attrs({{"groups", int64_t{2}}, {"eps", 1e-5}, {"has_weight", false}, {"has_bias", false}});
    Value* n2 = g.add_node("group_norm", {a}, gn_plain, "gn2")->out();
    return std::vector<Value*>{y, g.add_node("mean", {n2}, attrs({{"dims", Shape{1}}, {"keepdim", false}}), "m")->out()};
  };
  c.ref_row_major = true;
  c.ref_tol = t == DType::bf16 ? test::Tol{3e-2, 3e-2} : test::Tol{1e-4, 1e-4};
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  EXPECT_EQ(test::count(all, "group_norm_nhwc\n"), 1) << all;  // gn1: channels-last in and out
  EXPECT_EQ(test::count(all, "group_norm_nhwc_in\n"), 1) << all;  // gn2: NCHW out for the mean
  EXPECT_NE(kernel_of(r.got, "silu").find("[channels-last]"), std::string::npos) << all;
  EXPECT_EQ(test::count(all, "->"), 0) << all;  // no conversion anywhere
}

// A UNet decoder's upsampling by transposed convolutions between convolutions: one keeping its
// border (2x2 stride 2) reads and writes channels-last (f32; a bf16 one writes NCHW), one whose
// output_padding exceeds its padding (the border is filled by hand) reads channels-last and
// writes NCHW. Against the all-row-major compile.
TEST_P(LayoutPlan, TransposedConvolutionsBetweenConvolutions) {
  const DType t = GetParam();
  const int64_t N = 2, C = 3, H = 5, W = 4, O = 8;
  test::OpCase c;
  c.args = {{TensorType(t, {N, C, H, W})},
            {TensorType(t, {O, C, 3, 3}), nullptr, true},
            {TensorType(t, {O, O, 2, 2}), nullptr, true},
            {TensorType(t, {O}), nullptr, true},
            {TensorType(t, {O, O, 3, 3}), nullptr, true},
            {TensorType(t, {O, O, 3, 3}), nullptr, true}};
  auto deconv = [](int64_t pad, int64_t out_pad) {
    return attrs({{"stride", Shape{2, 2}}, {"padding", Shape{pad, pad}}, {"output_padding", Shape{out_pad, out_pad}},
                  {"dilation", Shape{1, 1}}, {"groups", int64_t{1}}});
  };
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv_attrs(1, 1), "a")->out();
    Value* u = g.add_node("conv_transpose", {a, in[2], in[3]}, deconv(0, 0), "up")->out();
    u = g.add_node("relu", {u}, {}, "act")->out();
    Value* y = g.add_node("conv", {u, in[4]}, conv_attrs(1, 1), "y")->out();
    Value* v = g.add_node("conv_transpose", {a, in[5]}, deconv(0, 1), "up_cropped")->out();
    Value* z = g.add_node("conv", {v, in[4]}, conv_attrs(1, 1), "z")->out();
    return std::vector<Value*>{y, z};
  };
  c.ref_row_major = true;
  c.ref_tol = t == DType::bf16 ? test::Tol{3e-2, 3e-2} : test::Tol{1e-4, 1e-4};
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  EXPECT_EQ(test::count(all, "onednn_conv_transpose"), 2) << all;
  EXPECT_EQ(test::count(all, "bias border nhwc_in\n"), 1) << all;  // the cropped one: NHWC in, NCHW out
  if (t == DType::f32) EXPECT_EQ(test::count(all, ") nhwc_in nhwc_out\n"), 1) << all;
  // (bf16: the upsampled group stays NCHW: converting the transposed convolution's result would cost
  // what the next convolution's reorder costs)
  EXPECT_EQ(test::count(all, "->"), 0) << all;
}

// A convolution whose fused chain runs partly by hand (an activation, then a per-channel scale and
// three full-size adds: BN-ReLU followed by an FPN's upsampled sum) on a channels-last result: the
// scale indexes channels along a pixel's row, the upsampled operand (channels-last) is read as it is,
// the graph input operand (row-major) is reordered into the result's layout per call, the constant
// one once. Against the all-row-
// major compile, f32 and bf16.
TEST_P(LayoutPlan, ConvPostOpsByHandOnAChannelsLastResult) {
  const DType t = GetParam();
  const int64_t N = 2, C = 3, H = 6, W = 10, O = 8;
  test::OpCase c;
  c.args = {{TensorType(t, {N, C, H, W})},
            {TensorType(t, {N, O, H, W})},
            {TensorType(t, {O, C, 3, 3}), nullptr, true},
            {TensorType(t, {O, 1, 1}), nullptr, true},
            {TensorType(t, {O, C, 3, 3}), nullptr, true},
            {TensorType(t, {O, O, 3, 3}), nullptr, true},
            {TensorType(t, {N, O, H, W}), nullptr, true}};
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* b = g.add_node("conv", {in[0], in[4]}, conv_attrs(2, 1), "b")->out();
    Value* u = g.add_node("resize2d", {b}, attrs({{"mode", std::string("bilinear")}, {"output_size", Shape{H, W}}}),
                          "up")->out();
    Value* a = g.add_node("conv", {in[0], in[2]}, conv_attrs(1, 1), "a")->out();
    a = g.add_node("relu", {a}, {}, "act")->out();
    a = g.add_node("mul", {a, in[3]}, {}, "scale")->out();
    a = g.add_node("add", {a, u}, {}, "lateral")->out();
    a = g.add_node("add", {a, in[1]}, {}, "skip")->out();
    a = g.add_node("add", {a, in[6]}, {}, "bias_map")->out();
    return std::vector<Value*>{g.add_node("conv", {a, in[5]}, conv_attrs(1, 1), "y")->out()};
  };
  c.ref_row_major = true;
  c.ref_tol = t == DType::bf16 ? test::Tol{3e-2, 3e-2} : test::Tol{1e-4, 1e-4};
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  const std::string fused = kernel_of(r.got, "mul add add add");  // (the relu runs in the primitive on checked inputs)
  EXPECT_NE(fused.find("nhwc_out"), std::string::npos) << all;
  EXPECT_NE(kernel_of(r.got, "resize2d").find("[channels-last]"), std::string::npos) << all;
  EXPECT_NE(kernel_of(r.got, "conv").find("nhwc_out"), std::string::npos) << all;  // b
  EXPECT_EQ(test::count(all, "->"), 0) << all;
}

// A group that is cheaper row-major stays so: a convolution's result read by two row-major-only
// ops (a softmax and a reduction) and nothing else costs two conversions channels-last against one
// reorder row-major.
TEST(Layout, RowMajorWhereConversionsWouldCostMore) {
  const int64_t N = 1, C = 3, H = 5, W = 7, O = 6;
  test::OpCase c;
  c.args = {{TensorType(DType::f32, {N, C, H, W})}, {TensorType(DType::f32, {O, C, 3, 3}), nullptr, true}};
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv_attrs(1, 1), "a")->out();
    Value* sm = g.add_node("softmax", {a}, attrs({{"dim", int64_t{1}}}), "sm")->out();
    Value* r = g.add_node("mean", {a}, attrs({{"dims", Shape{1}}, {"keepdim", false}}), "r")->out();
    return std::vector<Value*>{sm, r};
  };
  c.ref_row_major = true;
  c.ref_tol = test::Tol::exact_bits();
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  EXPECT_EQ(test::count(all, "nhwc"), 0) << all;
}

}  // namespace
}  // namespace ag
