// Tests of the matmul family: matmul, linear, conv, conv_transpose and sdpa. Each builds a small
// graph (constant weights where the real models have them, to cover
// prepacking), runs it through the pass pipeline and the executor and compares
// with a naive reference computed here; plus bad inputs that must throw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/gemm_panels.h"
#include "kernels/gemv.h"
#include "check_op.h"

namespace ag {
namespace {

using test::randn;
using test::attrs;
using test::check_values;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}
std::vector<float> round_bf16(const std::vector<float>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return o;
}

// ----------------------------------------------------------------------------- matmul

TEST(MatmulOps, BatchBroadcastWithBias) {
  // a [2, 1, 3, 5] @ b [4, 5, 6] + bias [4, 1, 6] -> [2, 4, 3, 6]
  auto a = randn(2 * 3 * 5, 1), b = randn(4 * 5 * 6, 2), bias = randn(4 * 6, 3);
  std::vector<float> ref(2 * 4 * 3 * 6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int m = 0; m < 3; ++m)
        for (int n = 0; n < 6; ++n) {
          float s = bias[j * 6 + n];
          for (int k = 0; k < 5; ++k) s += a[(i * 3 + m) * 5 + k] * b[(j * 5 + k) * 6 + n];
          ref[((i * 4 + j) * 3 + m) * 6 + n] = s;
        }
  auto r = check_values("matmul",
                        {{TensorType(DType::f32, {2, 1, 3, 5}), a.data()},
                         {TensorType(DType::f32, {4, 5, 6}), b.data()},
                         {TensorType(DType::f32, {4, 1, 6}), bias.data()}},
                        {}, ref, {1e-5, 1e-5});
  ASSERT_EQ(r.out().type.shape(), (Shape{2, 4, 3, 6}));
}

TEST(MatmulOps, ConstantRightHandSideBf16) {
  auto a = round_bf16(randn(7 * 16, 4)), b = round_bf16(randn(16 * 9, 5));
  auto ab = to_bf16(a), bb = to_bf16(b);
  std::vector<float> ref(7 * 9);
  for (int m = 0; m < 7; ++m)
    for (int n = 0; n < 9; ++n) {
      float s = 0;
      for (int k = 0; k < 16; ++k) s += a[m * 16 + k] * b[k * 9 + n];
      ref[m * 9 + n] = s;
    }
  check_values("matmul",
               {{TensorType(DType::bf16, {7, 16}), ab.data()}, {TensorType(DType::bf16, {16, 9}), bb.data(), true}}, {},
               ref, {2e-2, 1e-2});
}

TEST(MatmulOps, ZeroInnerDimGivesBias) {
  std::vector<float> a, b, bias{1.f, 2.f, 3.f};
  check_values("matmul",
               {{TensorType(DType::f32, {2, 0}), a.data()},
                {TensorType(DType::f32, {0, 3}), b.data()},
                {TensorType(DType::f32, {3}), bias.data()}},
               {}, {1, 2, 3, 1, 2, 3}, {0, 0});
}

// ----------------------------------------------------------------------------- linear

std::vector<float> linear_ref(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t M,
                              int64_t K, int64_t N) {
  std::vector<float> r(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += double(x[m * K + k]) * w[n * K + k];
      r[m * N + n] = float(s);
    }
  return r;
}

TEST(MatmulOps, LinearPrepackedWeightsF32) {
  const int64_t K = 37, N = 19;  // (3 x 4 = 12 rows: more than a GEMV takes)
  auto x = randn(3 * 4 * K, 6), w = randn(N * K, 7), b = randn(N, 8);
  auto r = check_values("linear",
                        {{TensorType(DType::f32, {3, 4, K}), x.data()},
                         {TensorType(DType::f32, {N, K}), w.data(), true},
                         {TensorType(DType::f32, {N}), b.data(), true}},
                        {}, linear_ref(x, w, b.data(), 12, K, N), {1e-4, 1e-4});
  ASSERT_EQ(r.out().type.shape(), (Shape{3, 4, N}));
  ASSERT_FALSE(r.got.kernels.empty());
  EXPECT_NE(r.got.kernels[0].find("onednn"), std::string::npos) << r.got.kernels[0];
}

// The packed small-row GEMM (kernels/gemm_panels.h), forced on whatever oneDNN runs on this CPU:
// rows in fours and the 1-3 left over, K of 1 and K past a vector, one panel and several, a 3-d
// input, with and without bias; linears it does not take (N not a multiple of 16, more rows than
// kMaxRows) stay on oneDNN, and off keeps them all there.
struct PanelScope {
  explicit PanelScope(int which) { panels::force(which); }
  ~PanelScope() { panels::force(panels::kAuto); }
};
TEST(MatmulOps, LinearPanelsRowsTailsAndBias) {
  struct P { Shape x; int64_t N; bool bias; };
  for (int mode : {panels::kOn, panels::kOff}) {
    PanelScope scope(mode);
    for (const P& p : {P{{9, 1}, 16, true}, P{{10, 37}, 48, false}, P{{3, 4, 130}, 32, true}, P{{16, 384}, 64, true},
                       P{{47, 65}, 16, false}, P{{48, 200}, 80, true}, P{{49, 40}, 16, true}, P{{12, 40}, 24, true}}) {
      const int64_t K = p.x.back(), N = p.N, M = TensorType(DType::f32, p.x).numel() / K;
      auto x = randn(M * K, 51), w = randn(N * K, 52), b = randn(N, 53);
      std::vector<test::Arg> args = {{TensorType(DType::f32, p.x), x.data()},
                                     {TensorType(DType::f32, {N, K}), w.data(), true}};
      if (p.bias) args.push_back({TensorType(DType::f32, {N}), b.data(), true});
      auto r = check_values("linear", args, {}, linear_ref(x, w, p.bias ? b.data() : nullptr, M, K, N),
                            {2e-6 * static_cast<double>(K) + 1e-5, 1e-5});
      ASSERT_FALSE(r.got.kernels.empty());
      const bool taken = mode == panels::kOn && M <= panels::kMaxRows && N % panels::kCols == 0;
      EXPECT_EQ(r.got.kernels[0].rfind(taken ? "panels_f32" : "onednn", 0), 0u)
          << r.got.kernels[0] << " M " << M << " K " << K << " N " << N;
    }
  }
}

// A constant [K, N] right-hand side (GPT-2's Conv1D: addmm(bias, x, W)) on the packed GEMM: a 3-d
// input's rows flattened, with a bias row; a full [M, N] bias stays on oneDNN.
TEST(MatmulOps, ConstantKNOperandOnPanels) {
  PanelScope scope(panels::kOn);
  const int64_t K = 70, N = 32;
  auto a = randn(2 * 6 * K, 61), b = randn(K * N, 62), row = randn(N, 63), full = randn(12 * N, 64);
  for (bool full_bias : {false, true}) {
    std::vector<float> ref(12 * N);
    for (int64_t m = 0; m < 12; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = full_bias ? full[m * N + n] : row[n];
        for (int64_t k = 0; k < K; ++k) acc += double(a[m * K + k]) * b[k * N + n];
        ref[m * N + n] = static_cast<float>(acc);
      }
    auto r = check_values("matmul",
                          {{TensorType(DType::f32, {2, 6, K}), a.data()}, {TensorType(DType::f32, {K, N}), b.data(), true},
                           full_bias ? test::Arg{TensorType(DType::f32, {2, 6, N}), full.data(), true}
                                     : test::Arg{TensorType(DType::f32, {N}), row.data(), true}},
                          {}, ref, {2e-6 * K + 1e-5, 1e-5});
    EXPECT_EQ(r.got.kernels[0].rfind(full_bias ? "onednn" : "panels_f32", 0), 0u) << r.got.kernels[0];
  }
}

TEST(MatmulOps, LinearRuntimeWeightsNoBias) {
  const int64_t K = 8, N = 5;
  auto x = randn(4 * K, 9), w = randn(N * K, 10);
  check_values("linear", {{TensorType(DType::f32, {4, K}), x.data()}, {TensorType(DType::f32, {N, K}), w.data()}}, {},
               linear_ref(x, w, nullptr, 4, K, N), {1e-5, 1e-5});
}

// The GEMV for few rows against constant [N, K] weights, f32 and bf16: 2-8 rows go through
// gemv::dot4_rows (weights in chunks of 512 columns, rows of x two at a time), with the tails of
// every loop: an odd row of x, N % 4 weight rows, K % 8 inside the last chunk, K > one chunk.
struct GemvCase {
  int64_t M, K, N;
  DType t;
};
class LinearGemvRows : public ::testing::TestWithParam<GemvCase> {};
TEST_P(LinearGemvRows, MatchesReference) {
  const auto [M, K, N, t] = GetParam();
  const bool bf = t == DType::bf16;
  auto x = randn(M * K, 31), w = randn(N * K, 32), b = randn(N, 33);
  if (bf) x = round_bf16(x), w = round_bf16(w), b = round_bf16(b);
  auto xb = to_bf16(x), wb = to_bf16(w), bb = to_bf16(b);
  auto r = check_values("linear",
                        {{TensorType(t, {M, K}), bf ? static_cast<const void*>(xb.data()) : x.data()},
                         {TensorType(t, {N, K}), bf ? static_cast<const void*>(wb.data()) : w.data(), true},
                         {TensorType(t, {N}), bf ? static_cast<const void*>(bb.data()) : b.data(), true}},
                        {}, linear_ref(x, w, b.data(), M, K, N),
                        bf ? test::Tol{5e-2, 1e-2} : test::Tol{2e-6 * static_cast<double>(K), 1e-5});
  ASSERT_FALSE(r.got.kernels.empty());
  // (bf16: oneDNN where it runs bf16 natively and this build packs weights for few rows, as here)
  if (!bf || r.got.kernels[0].find("onednn") == std::string::npos)
    EXPECT_EQ(r.got.kernels[0].rfind("gemv", 0), 0u) << r.got.kernels[0];
}
INSTANTIATE_TEST_SUITE_P(MatmulOps, LinearGemvRows,
                         ::testing::Values(GemvCase{2, 13, 7, DType::f32}, GemvCase{3, 600, 33, DType::f32},
                                           GemvCase{4, 1030, 18, DType::f32}, GemvCase{2, 1024, 9, DType::f32},
                                           GemvCase{3, 517, 11, DType::bf16}, GemvCase{4, 64, 40, DType::bf16},
                                           GemvCase{5, 530, 13, DType::f32}, GemvCase{8, 96, 21, DType::f32},
                                           GemvCase{7, 1100, 6, DType::bf16}));

// The one-row GEMV's rows (gemv::rows_avx2 and, where the CPU has it, rows_avx512: one source, the
// vector width a parameter) against a double-precision dot product, for f32, bf16 and int8 weights:
// eight rows at a time and the rows left over, K tails below either width, rows whose prefetch runs
// past the end of the weights.
template <typename W>
void check_gemv_rows(int64_t N, int64_t K, const std::vector<float>& wf, const std::vector<W>& w) {
  auto x = randn(K, 41);
  for (int isa = 0; isa < 2; ++isa) {
    if (isa == 1 && !isa::cpu_has_avx512()) continue;  // (the AVX2 rows only)
    std::vector<float> y(static_cast<size_t>(N) + 2, -7.f);
    const int64_t nb = N > 3 ? 1 : 0;  // (a range that does not start at row 0)
    if (isa == 0) gemv::rows_avx2(x.data(), w.data(), K, nb, N, y.data());
    else gemv::rows_avx512(x.data(), w.data(), K, nb, N, y.data());
    for (int64_t n = 0; n < N + 2; ++n) {
      if (n < nb || n >= N) {
        EXPECT_EQ(y[n], -7.f) << "row " << n << " is outside [" << nb << ", " << N << ")";
        continue;
      }
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) want += double(wf[n * K + k]) * x[k], mag += std::fabs(double(wf[n * K + k]) * x[k]);
      EXPECT_NEAR(y[n], want, 1e-6 * mag + 1e-6) << (isa ? "avx512" : "avx2") << " N " << N << " K " << K << " row " << n;
    }
  }
}
TEST(MatmulOps, GemvRowsEveryIsaAndWeightType) {
  for (auto [N, K] : {std::pair<int64_t, int64_t>{1, 3}, {7, 8}, {9, 17}, {24, 64}, {19, 100}, {40, 896}, {3, 1031}}) {
    auto wf = randn(N * K, 42);
    check_gemv_rows<float>(N, K, wf, wf);
    auto wr = round_bf16(wf);
    check_gemv_rows<uint16_t>(N, K, wr, to_bf16(wr));
    std::vector<int8_t> q(wf.size());
    std::vector<float> qf(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) q[i] = static_cast<int8_t>(std::lround(std::clamp(wf[i] * 40.f, -128.f, 127.f))), qf[i] = q[i];
    check_gemv_rows<int8_t>(N, K, qf, q);
  }
}

class LinearBf16 : public ::testing::TestWithParam<int64_t> {};
TEST_P(LinearBf16, MatchesF32Reference) {  // M = 1 (GEMV path on CPUs without bf16) and larger M
  const int64_t M = GetParam(), K = 70, N = 33;
  auto x = round_bf16(randn(M * K, 11)), w = round_bf16(randn(N * K, 12)), b = round_bf16(randn(N, 13));
  auto xb = to_bf16(x), wb = to_bf16(w), bb = to_bf16(b);
  check_values("linear",
               {{TensorType(DType::bf16, {M, K}), xb.data()},
                {TensorType(DType::bf16, {N, K}), wb.data(), true},
                {TensorType(DType::bf16, {N}), bb.data(), true}},
               {}, linear_ref(x, w, b.data(), M, K, N), {5e-2, 1e-2});
}
INSTANTIATE_TEST_SUITE_P(MatmulOps, LinearBf16, ::testing::Values(1, 3, 17));

TEST(MatmulOps, MatmulOfPermutedWeightBecomesLinearWithBias) {
  if (!find_op("permute")) GTEST_SKIP() << "permute op not registered";
  const int64_t K = 6, N = 4;
  auto x = randn(3 * K, 14), w = randn(N * K, 15), b = randn(N, 16);
  test::OpCase c;
  c.args = {{TensorType(DType::f32, {3, K}), x.data()},
            {TensorType(DType::f32, {N, K}), w.data(), true},
            {TensorType(DType::f32, {N}), b.data(), true}};
  c.build = [](Graph& g, const std::vector<Value*>& in) {
    Node* t = g.add_node("permute", {in[1]}, attrs({{"dims", Shape{1, 0}}}), "t");
    return std::vector<Value*>{g.add_node("matmul", {in[0], t->out(), in[2]}, {}, "mm")->out()};
  };
  c.want = test::want_values(linear_ref(x, w, b.data(), 3, K, N));
  c.tol = {1e-5, 1e-5};
  auto r = test::check_op(c);
  EXPECT_EQ(r.got.nodes_of("linear"), 1) << r.got.graph;
  EXPECT_EQ(r.got.ops.size(), 1u) << r.got.graph;
}

// ----------------------------------------------------------------------------- weight-only int8

std::vector<int8_t> rand_int8(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& e : v) e = static_cast<int8_t>(d(gen));
  return v;
}

// x [M, K] (f32 or bf16) @ w_int8 [N, K]^T * scale[N] + bias[N], built as torchao's
// Int8WeightOnlyConfig traces it (matmul of the transposed weight converted to x's dtype, then
// mul and add): canonicalize and fuse_epilogues leave one linear node reading the int8 bytes.
// Exact path (int8_activations off): the GEMV for up to eight rows and the per-block widening
// beyond (K tails, row tails, column blocks with a tail at K 4096), against a reference over the
// widened weights. Per-row path (on; more than eight rows on a CPU with VNNI or AMX, the GEMV on a
// CPU with AVX-512 VNNI): against the same reference over x's rows rounded to int8 (scale amax / 127,
// half to even).
struct Int8Case {
  int64_t M, K, N;
  DType t;
  bool bias;
};
class LinearInt8 : public ::testing::TestWithParam<Int8Case> {
 protected:
  void check(bool int8_activations);
};
TEST_P(LinearInt8, TorchaoFormMatchesWidenedReference) { check(false); }
TEST_P(LinearInt8, PerRowInt8ActivationsMatchQuantizedReference) { check(true); }
void LinearInt8::check(bool int8_activations) {
  const auto [M, K, N, t, with_bias] = GetParam();
  const bool bf = t == DType::bf16;
  auto x = randn(M * K, 21), scale = randn(N, 22), b = randn(N, 23);
  if (bf) x = round_bf16(x), scale = round_bf16(scale), b = round_bf16(b);
  auto w8 = rand_int8(N * K, 24);
  std::vector<float> wf(w8.begin(), w8.end());
  auto xb = to_bf16(x), sb = to_bf16(scale), bb = to_bf16(b);
  test::OpCase c;
  c.int8_activations = int8_activations;
  c.args = {{TensorType(t, {M, K}), bf ? static_cast<const void*>(xb.data()) : x.data()},
            {TensorType(DType::i8, {N, K}), w8.data(), true},
            {TensorType(t, {N}), bf ? static_cast<const void*>(sb.data()) : scale.data(), true},
            {TensorType(t, {N}), bf ? static_cast<const void*>(bb.data()) : b.data(), true}};
  c.build = [t, with_bias](Graph& g, const std::vector<Value*>& in) {
    Node* tr = g.add_node("permute", {in[1]}, attrs({{"dims", Shape{1, 0}}}), "t");
    Node* cv = g.add_node("convert", {tr->out()}, attrs({{"dtype", t}}), "to_float");
    Node* mm = g.add_node("matmul", {in[0], cv->out()}, {}, "mm");
    Value* y = g.add_node("mul", {mm->out(), in[2]}, {}, "scale")->out();
    if (with_bias) y = g.add_node("add", {y, in[3]}, {}, "bias")->out();
    return std::vector<Value*>{y};
  };
  constexpr int64_t kGemvMaxRows = 8;  // (kernels/gemv.h: linears of up to 8 rows run the GEMV)
  const bool quantized = int8_activations && (M > kGemvMaxRows ? test::int8_dot_cpu() : test::vnni_cpu());
  auto ref = linear_ref(quantized ? test::per_row_int8(x, M, K) : x, wf, nullptr, M, K, N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) ref[m * N + n] = ref[m * N + n] * scale[n] + (with_bias ? b[n] : 0.f);
  c.want = test::want_values(ref);
  // (int8 products reach 127 |x|: over K = 4096 the f32 sums' rounding reaches about 1e-2)
  c.tol = bf ? test::Tol{2e-2, 1e-2} : test::Tol{5e-6 * static_cast<double>(K), 1e-4};
  auto r = test::check_op(c);
  EXPECT_EQ(r.got.ops, std::vector<std::string>{"linear"}) << r.got.graph;
  ASSERT_EQ(r.got.kernels.size(), 1u);
  const char* kernel = M <= kGemvMaxRows ? "gemv_int8_weights" : quantized ? "s8s8_int8_weights" : "f32_int8_weights";
  EXPECT_NE(r.got.kernels[0].find(kernel), std::string::npos) << r.got.kernels[0];
  EXPECT_EQ(r.got.kernels[0].find("VNNI") != std::string::npos, quantized && M <= kGemvMaxRows) << r.got.kernels[0];
}
INSTANTIATE_TEST_SUITE_P(MatmulOps, LinearInt8,
                         ::testing::Values(Int8Case{1, 37, 19, DType::f32, true}, Int8Case{2, 256, 130, DType::f32, false},
                                           Int8Case{3, 5, 7, DType::bf16, true}, Int8Case{4, 100, 33, DType::f32, true},
                                           Int8Case{5, 37, 19, DType::f32, true}, Int8Case{8, 64, 33, DType::bf16, false},
                                           Int8Case{33, 4096, 300, DType::f32, true},
                                           Int8Case{17, 4096, 140, DType::bf16, true}, Int8Case{9, 37, 19, DType::f32, false},
                                           Int8Case{64, 100, 65, DType::bf16, true}, Int8Case{1, 896, 67, DType::f32, true},
                                           Int8Case{1, 4864, 36, DType::bf16, false}, Int8Case{3, 129, 18, DType::f32, true}));

TEST(MatmulOps, LinearInt8WeightsMustBeConstant) {
  auto x = randn(2 * 8, 25);
  auto w8 = rand_int8(4 * 8, 26);
  EXPECT_TRUE(test::throws_with(
      [&] {
        test::run_op("linear", {{TensorType(DType::f32, {2, 8}), x.data()}, {TensorType(DType::i8, {4, 8}), w8.data()}});
      },
      {"int8 weights must be a constant", "linear"}));
  EXPECT_NE(test::build_error("linear", {TensorType(DType::f16, {2, 8}), TensorType(DType::i8, {4, 8})}), "");
}

// ----------------------------------------------------------------------------- conv

// Naive 2-D cross-correlation (1-D when H == kh == 1).
std::vector<float> conv2d_ref(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int64_t N,
                              int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw, int64_t s,
                              int64_t p, int64_t d, int64_t groups, int64_t ph, int64_t OH, int64_t OW) {
  std::vector<float> y(N * O * OH * OW);
  int64_t cg = C / groups, og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? bias[o] : 0.0;
          int64_t gi = o / og;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t ih = oh * s - ph + i * d, iw = ow * s - p + j * d;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(x[((n * C + gi * cg + c) * H + ih) * W + iw]) * w[((o * cg + c) * kh + i) * kw + j];
              }
          y[((n * O + o) * OH + oh) * OW + ow] = float(acc);
        }
  return y;
}

TEST(MatmulOps, Conv2dStridePaddingDilationGroupsConstWeights) {
  const int64_t N = 2, C = 4, H = 9, W = 8, O = 6, k = 3, s = 2, p = 2, d = 2, g = 2;
  const int64_t OH = (H + 2 * p - d * (k - 1) - 1) / s + 1, OW = (W + 2 * p - d * (k - 1) - 1) / s + 1;
  auto x = randn(N * C * H * W, 20), w = randn(O * (C / g) * k * k, 21), b = randn(O, 22);
  auto r = check_values(
      "conv",
      {{TensorType(DType::f32, {N, C, H, W}), x.data()},
       {TensorType(DType::f32, {O, C / g, k, k}), w.data(), true},
       {TensorType(DType::f32, {O}), b.data(), true}},
      attrs({{"stride", Shape{s, s}}, {"padding", Shape{p, p}}, {"dilation", Shape{d, d}}, {"groups", g}}),
      conv2d_ref(x, w, b.data(), N, C, H, W, O, k, k, s, p, d, g, p, OH, OW), {1e-4, 1e-4});
  ASSERT_EQ(r.out().type.shape(), (Shape{N, O, OH, OW}));
}

// A chain of convolutions hands its results over in channels-last order (runtime's
// plan_channels_last): conv -> relu -> grouped conv + residual (a full-size post-op operand that is
// itself a channels-last result) -> relu -> 1x1 conv, whose result (the graph's output) is row-major.
// Against the naive reference at 1 and 2 threads, f32 and bf16.
class ConvChainChannelsLast : public ::testing::TestWithParam<DType> {};
TEST_P(ConvChainChannelsLast, MatchesReference) {
  const DType t = GetParam();
  const bool bf = t == DType::bf16;
  const int64_t N = 2, C = 8, H = 9, W = 7, O = 16, O3 = 8;
  auto x = randn(N * C * H * W, 40), w1 = randn(O * C * 9, 41), w2 = randn(O * (O / 2) * 9, 42),
       w3 = randn(O3 * O, 43), b1 = randn(O, 44);
  for (auto* v : {&w1, &w2, &w3}) for (float& f : *v) f *= 0.2f;
  if (bf) x = round_bf16(x), w1 = round_bf16(w1), w2 = round_bf16(w2), w3 = round_bf16(w3), b1 = round_bf16(b1);
  auto xb = to_bf16(x), w1b = to_bf16(w1), w2b = to_bf16(w2), w3b = to_bf16(w3), b1b = to_bf16(b1);
  auto pick = [&](const std::vector<float>& f, const std::vector<uint16_t>& h) {
    return bf ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
  };
  test::OpCase c;
  c.args = {{TensorType(t, {N, C, H, W}), pick(x, xb)},
            {TensorType(t, {O, C, 3, 3}), pick(w1, w1b), true},
            {TensorType(t, {O}), pick(b1, b1b), true},
            {TensorType(t, {O, O / 2, 3, 3}), pick(w2, w2b), true},
            {TensorType(t, {O3, O, 1, 1}), pick(w3, w3b), true}};
  auto conv = [](int64_t pad, int64_t groups) {
    return attrs({{"stride", Shape{1, 1}}, {"padding", Shape{pad, pad}}, {"dilation", Shape{1, 1}}, {"groups", groups}});
  };
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1], in[2]}, conv(1, 1), "c1")->out();
    a = g.add_node("relu", {a}, {}, "r1")->out();
    Value* b = g.add_node("conv", {a, in[3]}, conv(1, 2), "c2")->out();
    b = g.add_node("add", {b, a}, {}, "res")->out();
    b = g.add_node("relu", {b}, {}, "r2")->out();
    return std::vector<Value*>{g.add_node("conv", {b, in[4]}, conv(0, 1), "c3")->out()};
  };
  auto relu = [](std::vector<float> v) {
    for (float& f : v) f = std::max(f, 0.f);
    return v;
  };
  auto a = relu(conv2d_ref(x, w1, b1.data(), N, C, H, W, O, 3, 3, 1, 1, 1, 1, 1, H, W));
  if (bf) a = round_bf16(a);
  auto b = conv2d_ref(a, w2, nullptr, N, O, H, W, O, 3, 3, 1, 1, 1, 2, 1, H, W);
  for (size_t i = 0; i < b.size(); ++i) b[i] += a[i];
  b = relu(b);
  if (bf) b = round_bf16(b);
  c.want = test::want_values(conv2d_ref(b, w3, nullptr, N, O, H, W, O3, 1, 1, 1, 0, 1, 1, 0, H, W));
  c.tol = bf ? test::Tol{6e-2, 2e-2} : test::Tol{1e-4, 1e-4};
  auto r = test::check_op(c);
  ASSERT_EQ(r.got.kernels.size(), 3u) << r.got.graph;
  EXPECT_NE(r.got.kernels[0].find("nhwc_out"), std::string::npos) << r.got.kernels[0];
  EXPECT_NE(r.got.kernels[1].find("nhwc_in nhwc_out"), std::string::npos) << r.got.kernels[1];
  EXPECT_NE(r.got.kernels[2].find("nhwc_in"), std::string::npos) << r.got.kernels[2];
  EXPECT_EQ(r.got.kernels[2].find("nhwc_out"), std::string::npos) << r.got.kernels[2];  // (the graph's output)
}
INSTANTIATE_TEST_SUITE_P(MatmulOps, ConvChainChannelsLast, ::testing::Values(DType::f32, DType::bf16));

// ConvNeXt's block in a channels-last plan: depthwise conv 3x3 -> permute to [N, H, W, C] (reads the
// conv's NHWC result: a plain copy) -> a per-channel scale (row-major, C last) -> permute back to
// [N, C, H, W] (written channels-last: a plain copy) -> 1x1 conv reading it NHWC. Against the naive
// reference; the layouts show in the kernel names.
TEST(MatmulOps, PermutesAroundARowWiseBlockStayChannelsLast) {
  const int64_t N = 2, C = 8, H = 5, W = 6, O = 4;
  auto x = randn(N * C * H * W, 60), wd = randn(C * 9, 61), s = randn(C, 62), w2 = randn(O * C, 63);
  test::OpCase c;
  c.args = {{TensorType(DType::f32, {N, C, H, W}), x.data()},
            {TensorType(DType::f32, {C, 1, 3, 3}), wd.data(), true},
            {TensorType(DType::f32, {C}), s.data(), true},
            {TensorType(DType::f32, {O, C, 1, 1}), w2.data(), true}};
  auto conv = [](int64_t pad, int64_t groups) {
    return attrs({{"stride", Shape{1, 1}}, {"padding", Shape{pad, pad}}, {"dilation", Shape{1, 1}}, {"groups", groups}});
  };
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv(1, C), "dw")->out();
    a = g.add_node("permute", {a}, attrs({{"dims", Shape{0, 2, 3, 1}}}), "to_nhwc")->out();
    a = g.add_node("mul", {a, in[2]}, {}, "scale")->out();
    a = g.add_node("permute", {a}, attrs({{"dims", Shape{0, 3, 1, 2}}}), "to_nchw")->out();
    return std::vector<Value*>{g.add_node("conv", {a, in[3]}, conv(0, 1), "pw")->out()};
  };
  auto a = conv2d_ref(x, wd, nullptr, N, C, H, W, C, 3, 3, 1, 1, 1, C, 1, H, W);
  for (int64_t i = 0; i < N * C * H * W; ++i) a[i] *= s[i / (H * W) % C];
  c.want = test::want_values(conv2d_ref(a, w2, nullptr, N, C, H, W, O, 1, 1, 1, 0, 1, 1, 0, H, W));
  c.tol = test::Tol{1e-4, 1e-4};
  auto r = test::check_op(c);
  std::string all;
  for (const auto& k : r.got.kernels) all += k + "\n";
  EXPECT_NE(all.find("permute_nhwc_in_copy"), std::string::npos) << all;
  EXPECT_NE(all.find("permute_nhwc_out_copy"), std::string::npos) << all;
  EXPECT_NE(r.got.kernels.front().find("nhwc_out"), std::string::npos) << all;
  EXPECT_NE(r.got.kernels.back().find("nhwc_in"), std::string::npos) << all;
}

// Pools in a channels-last chain: conv -> max_pool2d 3x3/2 pad 1 (channels-last in and out) ->
// conv -> global average pool (channels-last in, [N, C, 1, 1] out), with a NaN in the input that
// must come out of the max pool as it does in PyTorch. Against the naive reference, 1 and 2 threads.
TEST(MatmulOps, PoolsInAChannelsLastChain) {
  const int64_t N = 2, C = 3, H = 10, W = 9, O = 24, P = 5, PH = 5, PW = 5;  // (10x9 -> 5x5)
  auto x = randn(N * C * H * W, 50), w1 = randn(O * C * 9, 51), w2 = randn(P * O * 9, 52);
  x[1 * C * H * W + 2 * H * W + 4 * W + 4] = std::numeric_limits<float>::quiet_NaN();
  test::OpCase c;
  c.args = {{TensorType(DType::f32, {N, C, H, W}), x.data()},
            {TensorType(DType::f32, {O, C, 3, 3}), w1.data(), true},
            {TensorType(DType::f32, {P, O, 3, 3}), w2.data(), true}};
  auto conv = attrs({{"stride", Shape{1, 1}}, {"padding", Shape{1, 1}}, {"dilation", Shape{1, 1}}, {"groups", int64_t{1}}});
  c.build = [&](Graph& g, const std::vector<Value*>& in) {
    Value* a = g.add_node("conv", {in[0], in[1]}, conv, "c1")->out();
    a = g.add_node("max_pool2d", {a}, attrs({{"kernel", Shape{3, 3}}, {"stride", Shape{2, 2}}, {"padding", Shape{1, 1}}}),
                   "pool")->out();
    a = g.add_node("conv", {a, in[2]}, conv, "c2")->out();
    return std::vector<Value*>{g.add_node("adaptive_avg_pool2d", {a}, attrs({{"output_size", Shape{1, 1}}}), "gap")->out()};
  };
  auto a = conv2d_ref(x, w1, nullptr, N, C, H, W, O, 3, 3, 1, 1, 1, 1, 1, H, W);
  std::vector<float> pooled(N * O * PH * PW);
  for (int64_t p = 0; p < N * O; ++p)
    for (int64_t oh = 0; oh < PH; ++oh)
      for (int64_t ow = 0; ow < PW; ++ow) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t ih = oh * 2 - 1; ih <= oh * 2 + 1; ++ih)
          for (int64_t iw = ow * 2 - 1; iw <= ow * 2 + 1; ++iw)
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
              const float v = a[(p * H + ih) * W + iw];
              if (v > m || std::isnan(v)) m = v;
            }
        pooled[(p * PH + oh) * PW + ow] = m;
      }
  auto b = conv2d_ref(pooled, w2, nullptr, N, O, PH, PW, P, 3, 3, 1, 1, 1, 1, 1, PH, PW);
  std::vector<float> want(N * P, 0.f);
  for (int64_t p = 0; p < N * P; ++p) {
    for (int64_t i = 0; i < PH * PW; ++i) want[p] += b[p * PH * PW + i];
    want[p] /= PH * PW;
  }
  ASSERT_TRUE(std::isnan(want[P]) && !std::isnan(want[0]));  // (the NaN reached sample 1 only)
  c.want = test::want_values(want);
  c.tol = test::Tol{1e-3, 1e-4};
  auto r = test::check_op(c);
  ASSERT_EQ(r.got.kernels.size(), 4u) << r.got.graph;
  EXPECT_NE(r.got.kernels[0].find("nhwc_out"), std::string::npos) << r.got.kernels[0];
  EXPECT_EQ(r.got.kernels[1], "max_pool2d_nhwc");
  EXPECT_NE(r.got.kernels[2].find("nhwc_in nhwc_out"), std::string::npos) << r.got.kernels[2];
  EXPECT_EQ(r.got.kernels[3], "global_avg_pool2d_nhwc_in");
}

// TensorFlow-style "same" padding: conv(pad(x, [0, 1, 0, 1]), stride 2) runs as one conv with
// asymmetric padding (canonicalize folds a +0.0 pad of the spatial dims in); a pad by 1.0 stays a pad.
TEST(MatmulOps, ZeroPadFoldsIntoTheConvolution) {
  const int64_t N = 2, C = 3, H = 7, W = 8, O = 4;
  auto x = randn(N * C * H * W, 60), w = randn(O * C * 9, 61);
  for (double value : {0.0, 1.0}) {
    const int64_t PH = H + 1, PW = W + 1;  // (pads: left 0, right 1, top 0, bottom 1)
    std::vector<float> padded(N * C * PH * PW, static_cast<float>(value));
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t v = 0; v < W; ++v) padded[(p * PH + h) * PW + v] = x[(p * H + h) * W + v];
    const int64_t OH = (PH - 3) / 2 + 1, OW = (PW - 3) / 2 + 1;
    test::OpCase c;
    c.args = {{TensorType(DType::f32, {N, C, H, W}), x.data()}, {TensorType(DType::f32, {O, C, 3, 3}), w.data(), true}};
    c.build = [&](Graph& g, const std::vector<Value*>& in) {
      Value* p = g.add_node("pad", {in[0]}, attrs({{"pads", Shape{0, 1, 0, 1}}, {"value", value}}), "pad")->out();
      return std::vector<Value*>{
          g.add_node("conv", {p, in[1]},
                     attrs({{"stride", Shape{2, 2}}, {"padding", Shape{0, 0}}, {"dilation", Shape{1, 1}}, {"groups", int64_t{1}}}),
                     "conv")->out()};
    };
    c.want = test::want_values(conv2d_ref(padded, w, nullptr, N, C, PH, PW, O, 3, 3, 2, 0, 1, 1, 0, OH, OW));
    c.tol = test::Tol{1e-4, 1e-4};
    auto r = test::check_op(c);
    const std::vector<std::string> want_ops = value == 0.0 ? std::vector<std::string>{"conv"}
                                                           : std::vector<std::string>{"pad", "conv"};
    EXPECT_EQ(r.got.ops, want_ops) << r.got.graph;
  }
}

TEST(MatmulOps, Conv1dBf16RuntimeWeights) {
  const int64_t N = 1, C = 3, W = 11, O = 5, k = 3;
  auto x = round_bf16(randn(N * C * W, 23)), w = round_bf16(randn(O * C * k, 24));
  auto xb = to_bf16(x), wb = to_bf16(w);
  auto r = check_values(
      "conv", {{TensorType(DType::bf16, {N, C, W}), xb.data()}, {TensorType(DType::bf16, {O, C, k}), wb.data()}},
      attrs({{"stride", Shape{1}}, {"padding", Shape{1}}, {"dilation", Shape{1}}, {"groups", int64_t{1}}}),
      conv2d_ref(x, w, nullptr, N, C, 1, W, O, 1, k, 1, 1, 1, 1, 0, 1, W), {5e-2, 1e-2});
  ASSERT_EQ(r.out().type.shape(), (Shape{N, O, W}));
}

// Naive 2-D transposed convolution (scatter form); w is PyTorch's [C, O/groups, kh, kw].
std::vector<float> conv_transpose2d_ref(const std::vector<float>& x, const std::vector<float>& w, const float* bias,
                                        int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t k, int64_t s,
                                        int64_t p, int64_t d, int64_t groups, int64_t OH, int64_t OW) {
  std::vector<double> acc(N * O * OH * OW, 0.0);
  const int64_t cg = C / groups, og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t oo = 0; oo < og; ++oo)
            for (int64_t i = 0; i < k; ++i)
              for (int64_t j = 0; j < k; ++j) {
                const int64_t oh = ih * s - p + i * d, ow = iw * s - p + j * d, o = (c / cg) * og + oo;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                acc[((n * O + o) * OH + oh) * OW + ow] +=
                    double(x[((n * C + c) * H + ih) * W + iw]) * w[((c * og + oo) * k + i) * k + j];
              }
  std::vector<float> y(acc.size());
  for (size_t e = 0; e < y.size(); ++e) y[e] = float(acc[e] + (bias ? bias[(e / (OH * OW)) % O] : 0.0f));
  return y;
}

TEST(MatmulOps, ConvTranspose2dGroupsOutputPaddingConstWeights) {
  // output_padding (1) > padding (0): the last row and column are reached by no input (bias only)
  const int64_t N = 2, C = 4, H = 5, W = 6, O = 6, k = 3, s = 2, p = 0, d = 1, g = 2, op = 1;
  const int64_t OH = (H - 1) * s - 2 * p + d * (k - 1) + op + 1, OW = (W - 1) * s - 2 * p + d * (k - 1) + op + 1;
  auto x = randn(N * C * H * W, 25), w = randn(C * (O / g) * k * k, 26), b = randn(O, 27);
  auto r = check_values("conv_transpose",
                        {{TensorType(DType::f32, {N, C, H, W}), x.data()},
                         {TensorType(DType::f32, {C, O / g, k, k}), w.data(), true},
                         {TensorType(DType::f32, {O}), b.data(), true}},
                        attrs({{"stride", Shape{s, s}}, {"padding", Shape{p, p}}, {"output_padding", Shape{op, op}},
                               {"dilation", Shape{d, d}}, {"groups", g}}),
                        conv_transpose2d_ref(x, w, b.data(), N, C, H, W, O, k, s, p, d, g, OH, OW), {1e-4, 1e-4});
  ASSERT_EQ(r.out().type.shape(), (Shape{N, O, OH, OW}));
}

TEST(MatmulOps, ConvTranspose2dPaddingDilationRuntimeWeights) {
  const int64_t N = 1, C = 3, H = 4, W = 7, O = 2, k = 3, s = 3, p = 2, d = 2;
  const int64_t OH = (H - 1) * s - 2 * p + d * (k - 1) + 1, OW = (W - 1) * s - 2 * p + d * (k - 1) + 1;
  auto x = randn(N * C * H * W, 28), w = randn(C * O * k * k, 29);
  auto r = check_values(
      "conv_transpose",
      {{TensorType(DType::f32, {N, C, H, W}), x.data()}, {TensorType(DType::f32, {C, O, k, k}), w.data()}},
      attrs({{"stride", Shape{s}}, {"padding", Shape{p}}, {"dilation", Shape{d}}, {"groups", int64_t{1}}}),
      conv_transpose2d_ref(x, w, nullptr, N, C, H, W, O, k, s, p, d, 1, OH, OW), {1e-4, 1e-4});
  ASSERT_EQ(r.out().type.shape(), (Shape{N, O, OH, OW}));
}

// ----------------------------------------------------------------------------- sdpa

std::vector<float> sdpa_ref(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                            int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S, int64_t E, float scale,
                            bool causal, const std::vector<uint8_t>* mask /* [L, S] */) {
  std::vector<float> o(B * H * L * E, 0.f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t hk = h / (H / Hk);
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> sc(S);
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          bool keep = (!causal || j <= i) && (!mask || (*mask)[i * S + j]);
          if (!keep) {
            sc[j] = -INFINITY;
            continue;
          }
          double s = 0;
          for (int64_t e = 0; e < E; ++e) s += double(q[((b * H + h) * L + i) * E + e]) * k[((b * Hk + hk) * S + j) * E + e];
          sc[j] = s * scale;
          mx = std::max(mx, sc[j]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (auto& s : sc) sum += (s = std::exp(s - mx));
        for (int64_t e = 0; e < E; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += sc[j] * v[((b * Hk + hk) * S + j) * E + e];
          o[((b * H + h) * L + i) * E + e] = float(acc / sum);
        }
      }
    }
  return o;
}

TEST(MatmulOps, SdpaGqaCausalBoolMaskWithFullyMaskedRow) {
  const int64_t B = 2, H = 4, Hk = 2, L = 5, S = 7, E = 8;
  auto q = randn(B * H * L * E, 30), k = randn(B * Hk * S * E, 31), v = randn(B * Hk * S * E, 32);
  std::vector<uint8_t> mask(L * S);
  std::mt19937 gen(33);
  for (auto& m : mask) m = gen() % 3 != 0;
  for (int64_t j = 0; j < S; ++j) mask[3 * S + j] = 0;  // row 3: every key masked -> 0
  float scale = 0.3f;
  auto r = check_values("sdpa",
                        {{TensorType(DType::f32, {B, H, L, E}), q.data()},
                         {TensorType(DType::f32, {B, Hk, S, E}), k.data()},
                         {TensorType(DType::f32, {B, Hk, S, E}), v.data()},
                         {TensorType(DType::b8, {L, S}), mask.data()}},
                        attrs({{"scale", double(scale)}, {"is_causal", true}, {"has_mask", true}}),
                        sdpa_ref(q, k, v, B, H, Hk, L, S, E, scale, true, &mask), {1e-5, 1e-4});
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(r.out().as<float>()[3 * E + e], 0.f);
}

TEST(MatmulOps, SdpaAdditiveMaskEqualsBoolMask) {
  const int64_t B = 1, H = 2, L = 3, S = 4, E = 4;
  auto q = randn(B * H * L * E, 40), k = randn(B * H * S * E, 41), v = randn(B * H * S * E, 42);
  std::vector<uint8_t> mask{1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1};
  std::vector<float> fmask(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) fmask[i] = mask[i] ? 0.f : -INFINITY;
  check_values("sdpa",
               {{TensorType(DType::f32, {B, H, L, E}), q.data()},
                {TensorType(DType::f32, {B, H, S, E}), k.data()},
                {TensorType(DType::f32, {B, H, S, E}), v.data()},
                {TensorType(DType::f32, {1, 1, L, S}), fmask.data()}},
               attrs({{"scale", 0.5}, {"is_causal", false}, {"has_mask", true}}),
               sdpa_ref(q, k, v, B, H, H, L, S, E, 0.5f, false, &mask), {1e-5, 1e-4});
}

// ----------------------------------------------------------------------------- errors

TEST(MatmulOps, BadInputsThrowUsefulErrors) {
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3, 4}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {5, 6}), "b");
  Value* hb = g.add_input(TensorType(DType::bf16, {6, 4}), "hb");
  Value* i64 = g.add_input(TensorType(DType::i64, {4, 6}), "i");
  std::string m = test::error_of([&] { g.add_node("matmul", {a, b}, {}, "mm"); });
  EXPECT_NE(m.find("inner dimensions differ"), std::string::npos) << m;
  EXPECT_NE(m.find("float32[3, 4]"), std::string::npos) << m;
  m = test::error_of([&] { g.add_node("linear", {a, hb}, {}, "lin"); });
  EXPECT_NE(m.find("dtypes differ"), std::string::npos) << m;
  m = test::error_of([&] { g.add_node("matmul", {i64, i64}, {}, "mm2"); });
  EXPECT_NE(m.find("int64"), std::string::npos) << m;

  Value* x = g.add_input(TensorType(DType::f32, {1, 4, 8, 8}), "x");
  Value* w = g.add_input(TensorType(DType::f32, {6, 3, 3, 3}), "w");
  m = test::error_of([&] { g.add_node("conv", {x, w}, {}, "conv"); });
  EXPECT_NE(m.find("channels"), std::string::npos) << m;

  Value* q = g.add_input(TensorType(DType::f32, {1, 3, 4, 8}), "q");
  Value* k = g.add_input(TensorType(DType::f32, {1, 2, 4, 8}), "k");
  m = test::error_of([&] { g.add_node("sdpa", {q, k, k}, attrs({{"scale", 1.0}}), "attn"); });
  EXPECT_NE(m.find("multiple of key heads"), std::string::npos) << m;
}

}  // namespace
}  // namespace ag
