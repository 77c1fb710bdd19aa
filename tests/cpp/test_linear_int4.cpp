// Tests of linear_int4 (torch's _weight_int4pack_mm_for_cpu on its packed bytes). The packed
// weights are made here by a packer written from the format (kernels/linear_int4.cpp's header:
// torch's weight_to_int4pack_kernel for each CPU capability), and every output is compared with
// dequantize-then-matmul computed in double: both layouts torch writes on x86 (and its scalar
// "pairs" one), partial last blocks, every group size, 1-8 rows (the register kernel) and more
// (dequantized panels through oneDNN), each code path (AVX-512 where this CPU has it, AVX2,
// scalar), one and two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "check_op.h"
#include "ir/op_registry.h"

namespace ag {
namespace {

using test::Arg;
using test::attrs;

int block_of(const std::string& layout) { return layout == "avx512" ? 64 : 32; }

// q [N][K] in [0, 15] -> torch's packed bytes [N, K / 2] for `layout`.
std::vector<uint8_t> pack(const std::vector<int>& q, int64_t N, int64_t K, const std::string& layout) {
  std::vector<uint8_t> out(N * K / 2);
  const int64_t B = block_of(layout);
  for (int64_t n0 = 0; n0 < N; n0 += B) {
    const int64_t nb = std::min(B, N - n0);
    const bool split = nb == B && layout != "pairs";
    uint8_t* dst = out.data() + n0 * K / 2;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < nb / 2; ++j) {
        const int64_t lo = split ? j : 2 * j, hi = split ? j + nb / 2 : 2 * j + 1;
        dst[k * nb / 2 + j] = static_cast<uint8_t>(q[(n0 + lo) * K + k] | (q[(n0 + hi) * K + k] << 4));
      }
  }
  return out;
}

struct Case {
  std::string layout, isa;
  DType t;
  int64_t M, K, N, g;
};

std::string case_name(const Case& c) {
  return c.layout + "_" + c.isa + "_" + dtype_name(c.t) + "_M" + std::to_string(c.M) + "_K" + std::to_string(c.K) +
         "_N" + std::to_string(c.N) + "_g" + std::to_string(c.g);
}

// Values of dtype t, as the test keeps them (rounded to t) and as bytes.
test::Tensor as_tensor(DType t, const Shape& s, std::vector<float>& v) {
  test::Tensor r = test::from_floats(TensorType(t, s), v);
  v = r.floats();  // the reference uses exactly what the kernel reads
  return r;
}


// Whether 1-8 rows with int8_activations take the VNNI GEMV (x quantized per row, weights exact).
bool vnni_gemv(const Case& c) { return c.M <= 8 && test::vnni_vbmi_cpu() && c.layout == "avx512" && c.isa == "auto"; }

// int8_activations: the reference is the per-row path's: for more than 8 rows (on CPUs with VNNI or
// AMX) x per row and the dequantized weights per column rounded to int8, for fewer x per row where the VNNI GEMV runs
// (vnni_gemv) and the exact product elsewhere; without it the exact product.
test::Checked run_case(const Case& c, bool const_weights = true, bool int8_activations = false) {
  const int64_t KB = c.K / c.g;
  std::mt19937 rng(static_cast<uint32_t>(c.M * 131 + c.K * 7 + c.N * 3 + c.g));
  std::uniform_int_distribution<int> qd(0, 15);
  std::uniform_real_distribution<float> xd(-2.f, 2.f), sd(0.005f, 0.05f), zd(-0.05f, 0.05f);
  std::vector<int> q(c.N * c.K);
  for (int& v : q) v = qd(rng);
  std::vector<float> x(c.M * c.K), sz(KB * c.N * 2);
  for (float& v : x) v = xd(rng);
  for (int64_t i = 0; i < KB * c.N; ++i) {
    sz[2 * i] = sd(rng);
    sz[2 * i + 1] = zd(rng);
  }
  std::vector<uint8_t> packed = pack(q, c.N, c.K, c.layout);
  test::Tensor xt = as_tensor(c.t, {c.M, c.K}, x), st = as_tensor(c.t, {KB, c.N, 2}, sz);
  test::Tensor wt = test::from_bytes(TensorType(DType::u8, {c.N, c.K / 2}), packed.data());
  // the dequantized weights [N, K], per column requantized to int8 at the scale bound / 127, where
  // the bound is the largest magnitude any q gives over the column's groups
  std::vector<float> w(c.N * c.K);
  for (int64_t n = 0; n < c.N; ++n) {
    float bound = 0.f;
    for (int64_t k = 0; k < c.K; ++k) {
      const int64_t i = ((k / c.g) * c.N + n) * 2;
      const float z = sz[i + 1] - 8.f * sz[i];
      w[n * c.K + k] = static_cast<float>(q[n * c.K + k]) * sz[i] + z;
      bound = std::max({bound, std::fabs(z), std::fabs(15.f * sz[i] + z)});
    }
    if (int8_activations && c.M > 8 && test::int8_dot_cpu())
      for (int64_t k = 0; k < c.K; ++k) w[n * c.K + k] = std::nearbyint(w[n * c.K + k] * (127.f / bound)) * (bound / 127.f);
  }
  // (more than 8 rows without VNNI or AMX: the exact f32 panels, as without int8_activations)
  const bool quant_x = int8_activations && (c.M > 8 ? test::int8_dot_cpu() : vnni_gemv(c));
  const std::vector<float> xr = quant_x ? test::per_row_int8(x, c.M, c.K) : x;
  std::vector<double> want(c.M * c.N);
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < c.K; ++k) acc += static_cast<double>(xr[m * c.K + k]) * w[n * c.K + k];
      want[m * c.N + n] = acc;
    }
  test::OpCase oc;
  oc.int8_activations = int8_activations;
  oc.op = "linear_int4";
  oc.attrs = attrs({{"group_size", c.g}, {"layout", c.layout}, {"isa", c.isa}});
  oc.args = {Arg(xt), Arg(wt, const_weights), Arg(st, const_weights)};
  oc.want_types = {TensorType(c.t, {c.M, c.N})};
  oc.want = test::want_values(std::vector<std::vector<double>>{want});
  // f32: accumulation order; 16-bit: the output's rounding (want is the exact value)
  oc.tol = c.t == DType::f32 ? test::Tol{2e-4, 1e-5} : c.t == DType::bf16 ? test::Tol{2e-2, 8e-3} : test::Tol{2e-3, 1e-3};
  // (per-row path: an f32 rounding of a weight that flips its int8 rounding moves a sum by a step)
  if (int8_activations) oc.tol.atol = std::max(oc.tol.atol, 2e-3), oc.tol.rtol = std::max(oc.tol.rtol, 1e-3);
  return test::check_op(oc);
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

class Int4Linear : public ::testing::TestWithParam<Case> {};

TEST_P(Int4Linear, MatchesDequantizedReference) {
  const Case& c = GetParam();
  test::Checked r = run_case(c);
  ASSERT_EQ(r.got.kernels.size(), 1u);
  const std::string& k = r.got.kernels[0];
  if (c.M > 8) {
    EXPECT_NE(k.find("int4_dequant_panels_onednn"), std::string::npos) << k;
    // the same case on the per-row int8 path (CPUs with AVX-512 VNNI or AMX; elsewhere the f32 panels)
    test::Checked q = run_case(c, true, /*int8_activations=*/true);
    EXPECT_NE(q.got.kernels[0].find(test::int8_dot_cpu() ? "int4_requant_panels_onednn_s8s8" : "int4_dequant_panels_onednn"),
              std::string::npos) << q.got.kernels[0];
    return;
  }
  if (c.isa == "auto")
    EXPECT_TRUE(k.find("int4_gemv_avx512") != std::string::npos || k.find("int4_gemv_avx2") != std::string::npos) << k;
  else
    EXPECT_NE(k.find("int4_gemv_" + c.isa), std::string::npos) << k;
  // the same case with activations quantized per row: the VNNI GEMV where this CPU has VNNI and
  // VBMI and the layout is "avx512" (partial blocks on the f32 code, from x as quantized), else as above
  test::Checked q = run_case(c, true, /*int8_activations=*/true);
  EXPECT_EQ(q.got.kernels[0].find("int4_gemv_vnni") != std::string::npos, vnni_gemv(c)) << q.got.kernels[0];
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // N: whole blocks only (192), a partial last block of 48 (avx512) / 16 (avx2, pairs) (176),
  // one partial block alone (16 and 48)
  for (const char* layout : {"avx512", "avx2", "pairs"})
    for (const char* isa : {"auto", "avx2", "scalar"})
      for (int64_t M : {1, 3, 4, 5, 8}) v.push_back({layout, isa, DType::f32, M, 256, 176, 64});
  for (const char* layout : {"avx512", "avx2"}) {
    for (int64_t g : {32, 64, 128, 256}) v.push_back({layout, "auto", DType::f32, 2, 512, 192, g});
    for (int64_t N : {16, 48, 64, 80}) v.push_back({layout, "auto", DType::f32, 1, 64, N, 32});
    for (DType t : {DType::bf16, DType::f16}) {
      v.push_back({layout, "auto", t, 1, 128, 176, 32});
      v.push_back({layout, "avx2", t, 2, 128, 176, 64});
      v.push_back({layout, "auto", t, 7, 256, 64, 128});
      v.push_back({layout, "auto", t, 20, 256, 176, 128});
    }
    // many rows: panels through oneDNN, with a tail panel (2^18 / 512 = 512 columns a panel)
    v.push_back({layout, "auto", DType::f32, 37, 512, 1216, 128});
    v.push_back({layout, "auto", DType::f32, 9, 64, 176, 32});
  }
  v.push_back({"pairs", "auto", DType::f32, 33, 128, 112, 32});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Int4, Int4Linear, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

TEST(Int4LinearOps, RuntimeWeightsAndLeadingDims) {
  run_case({"avx512", "auto", DType::f32, 3, 128, 128, 32}, /*const_weights=*/false);
  // x [2, 3, K] -> [2, 3, N]
  const int64_t K = 64, N = 32;
  std::vector<uint8_t> w(N * K / 2, 0x88);  // every q = 8: out = sum_k x * zero
  std::vector<float> x(6 * K, 1.f), sz(2 * N * 2);
  for (int64_t i = 0; i < 2 * N; ++i) {
    sz[2 * i] = 3.f;
    sz[2 * i + 1] = i < N ? 0.5f : -0.25f;
  }
  std::vector<float> want(6 * N, 32 * 0.5f - 32 * 0.25f);
  auto r = test::check_values("linear_int4",
                              {Arg(test::from_floats(TensorType(DType::f32, {2, 3, K}), x)),
                               Arg(test::from_bytes(TensorType(DType::u8, {N, K / 2}), w.data()), true),
                               Arg(test::from_floats(TensorType(DType::f32, {2, N, 2}), sz), true)},
                              attrs({{"group_size", int64_t{32}}, {"layout", std::string("avx2")}}), want, {1e-6, 0});
  EXPECT_EQ(r.out().type.shape(), (Shape{2, 3, N}));
}

// A row holding inf on the VNNI GEMV's CPUs: the call is summed exactly in f32 (the row's inf
// reaches its outputs as in eager; the other row keeps its exact value), not quantized.
TEST(Int4LinearOps, InfRowIsSummedExactly) {
  const int64_t K = 64, N = 64;
  std::vector<uint8_t> w(N * K / 2, 0x88);  // every q = 8: out = sum_k x * zero
  std::vector<float> x(2 * K, 0.1f), sz(2 * N * 2);
  x[5] = INFINITY;
  x[K + 7] = 0.3f;
  for (int64_t i = 0; i < 2 * N; ++i) sz[2 * i] = 3.f, sz[2 * i + 1] = 0.5f;
  std::vector<float> want(2 * N, INFINITY);
  for (int64_t n = 0; n < N; ++n) want[N + n] = (0.1f * 63 + 0.3f) * 0.5f;
  auto r = test::check_values("linear_int4",
                              {Arg(test::from_floats(TensorType(DType::f32, {2, K}), x)),
                               Arg(test::from_bytes(TensorType(DType::u8, {N, K / 2}), w.data()), true),
                               Arg(test::from_floats(TensorType(DType::f32, {2, N, 2}), sz), true)},
                              attrs({{"group_size", int64_t{32}}, {"layout", std::string("avx512")}}), want, {1e-5, 1e-6});
  if (test::vnni_vbmi_cpu()) EXPECT_NE(r.got.kernels[0].find("int4_gemv_vnni"), std::string::npos) << r.got.kernels[0];
}

TEST(Int4LinearOps, BadInputsThrowUsefulErrors) {
  auto a = attrs({{"group_size", int64_t{32}}, {"layout", std::string("avx512")}});
  const TensorType x(DType::f32, {1, 64}), w(DType::u8, {32, 32}), sz(DType::f32, {2, 32, 2});
  EXPECT_EQ(test::build_error("linear_int4", {x, w, sz}, a), "");
  EXPECT_NE(test::build_error("linear_int4", {TensorType(DType::f32, {1, 66}), w, sz}, a).find("K = 66"),
            std::string::npos);
  EXPECT_NE(test::build_error("linear_int4", {x, TensorType(DType::u8, {24, 32}), TensorType(DType::f32, {2, 24, 2})}, a)
                .find("multiple of 16"),
            std::string::npos);
  EXPECT_NE(test::build_error("linear_int4", {x, w, TensorType(DType::bf16, {2, 32, 2})}, a).find("dtype"),
            std::string::npos);
  EXPECT_NE(test::build_error("linear_int4", {x, w, TensorType(DType::f32, {1, 32, 2})}, a).find("[2, 32, 2]"),
            std::string::npos);
  EXPECT_NE(test::build_error("linear_int4", {x, w, sz}, attrs({{"group_size", int64_t{16}}, {"layout", std::string("avx512")}}))
                .find("group_size 16"),
            std::string::npos);
  EXPECT_NE(test::build_error("linear_int4", {x, w, sz}, attrs({{"group_size", int64_t{32}}, {"layout", std::string("neon")}}))
                .find("layout 'neon'"),
            std::string::npos);
}

}  // namespace
}  // namespace ag
