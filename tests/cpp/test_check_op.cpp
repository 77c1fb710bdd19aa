// Tests of the test harness itself (check_op.h): the NaN-aware comparison and what it reports,
// deterministic data with specials, the thread counts a case runs at, the second-graph
// reference, and the error helpers.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "check_op.h"

namespace ag {
namespace {

using test::all_close;
using test::Tensor;

const double kNan = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();

Tensor f32s(Shape s, std::vector<float> v) { return test::from_floats(TensorType(DType::f32, s), v); }

TEST(CheckOpHarness, ComparisonIsNanAwareAndNamesTheFirstMismatch) {
  Tensor t = f32s({2, 3}, {1.f, NAN, INFINITY, -INFINITY, 0.f, 5.f});
  EXPECT_TRUE(all_close(t, {1, kNan, kInf, -kInf, 0, 5}, {}));
  EXPECT_TRUE(all_close(t, {1.001, kNan, kInf, -kInf, 0, 5.5}, {0.01, 0.1}));
  EXPECT_FALSE(all_close(t, {1, 2, kInf, -kInf, 0, 5}, {1e9, 0}));      // NaN only meets NaN
  EXPECT_FALSE(all_close(t, {1, kNan, 1e38, -kInf, 0, 5}, {1e9, 1}));   // inf only meets itself
  EXPECT_FALSE(all_close(t, {1, kNan, kInf, kInf, 0, 5}, {}));
  EXPECT_FALSE(all_close(t, {1, kNan, kInf, -kInf, 0}, {}));            // count
  auto r = all_close(t, {1, kNan, kInf, -kInf, 0.5, 4}, {0.1, 0}, "out");
  ASSERT_FALSE(r);
  const std::string m = r.message();
  EXPECT_NE(m.find("2 of 6 elements differ"), std::string::npos) << m;
  EXPECT_NE(m.find("flat index 4 [1, 1]: got 0, want 0.5"), std::string::npos) << m;
  EXPECT_NE(m.find("float32[2, 3]"), std::string::npos) << m;
  // byte for byte tells -0 from 0
  EXPECT_TRUE(test::same(f32s({1}, {0.f}), f32s({1}, {-0.f}), {}));
  EXPECT_FALSE(test::same(f32s({1}, {0.f}), f32s({1}, {-0.f}), test::Tol::exact_bits()));
  // ... and a NaN matches any NaN (sign and payload are not specified), but never a number
  EXPECT_TRUE(test::same(f32s({2}, {NAN, 1.f}), f32s({2}, {-NAN, 1.f}), test::Tol::exact_bits()));
  EXPECT_FALSE(test::same(f32s({1}, {NAN}), f32s({1}, {INFINITY}), test::Tol::exact_bits()));
  EXPECT_FALSE(test::same(f32s({1}, {0.f}), f32s({1, 1}, {0.f}), {}));  // types differ
}

TEST(CheckOpHarness, RandomDataIsDeterministicWithSpecialsWhereAsked) {
  TensorType t(DType::f32, {200});
  Tensor a = test::random_tensor(t, 3), b = test::random_tensor(t, 3), c = test::random_tensor(t, 4);
  EXPECT_TRUE(test::same(a, b, test::Tol::exact_bits()));
  EXPECT_FALSE(test::same(a, c, {}));
  for (int64_t i = 0; i < 200; ++i) ASSERT_TRUE(std::isfinite(a.at(i)) && std::fabs(a.at(i)) <= 4) << i;
  Tensor s = test::random_tensor(t, 3, test::Specials::some);
  EXPECT_TRUE(std::isnan(s.at(5)));
  EXPECT_EQ(s.at(7), kInf);
  EXPECT_EQ(s.at(11), -kInf);
  EXPECT_TRUE(s.at(3) == 0 && std::signbit(s.at(3)));
  Tensor small = test::random_tensor(TensorType(DType::f32, {8}), 3, test::Specials::some);  // a row: finite
  for (int64_t i = 0; i < 8; ++i) EXPECT_TRUE(std::isfinite(small.at(i)));
  Tensor h = test::random_tensor(TensorType(DType::bf16, {200}), 3);  // the same values, rounded
  EXPECT_EQ(h.at(11), bf16_to_f32(f32_to_bf16(static_cast<float>(a.at(11)))));
}

TEST(CheckOpHarness, RunsAtEachThreadCountAndReportsWhichFailed) {
  std::vector<int> seen;
  test::OpCase c;
  c.op = "neg";
  c.args = {TensorType(DType::f32, {3000})};
  c.threads = {1, 2, 3};
  c.want = [](const std::vector<Tensor>& args) {
    std::vector<double> w(args[0].numel());
    for (int64_t i = 0; i < args[0].numel(); ++i) w[i] = -args[0].at(i);
    return std::vector<std::vector<double>>{w};
  };
  c.after_run = [&](const test::Run& r) { seen.push_back(r.threads); };
  auto r = test::check_op(c);
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(r.got.threads, 1);
  EXPECT_EQ(r.got.nodes_of("neg"), 1);
  // a wrong reference fails, naming the thread count
  c.want = test::want_values(std::vector<float>(3000, 0.f));
  c.after_run = nullptr;
  c.threads = {2};
  EXPECT_NONFATAL_FAILURE(test::check_op(c), "output 0 (neg, 2 threads) float32[3000]: 3000 of 3000 elements differ");
}

TEST(CheckOpHarness, SecondGraphAndConstantArgs) {
  // x * w (w a constant) against w * x built the other way round, byte for byte
  test::OpCase c;
  c.args = {TensorType(DType::f32, {4, 8}), test::Arg(TensorType(DType::f32, {8}), nullptr, true)};
  c.build = [](Graph& g, const std::vector<Value*>& in) {
    return std::vector<Value*>{g.add_node("mul", {in[0], in[1]}, {}, "m")->out()};
  };
  c.ref_build = [](Graph& g, const std::vector<Value*>& in) {
    return std::vector<Value*>{g.add_node("mul", {in[1], in[0]}, {}, "m")->out()};
  };
  c.ref_tol = test::Tol::exact_bits();
  auto r = test::check_op(c);
  EXPECT_NE(r.got.graph.find("%c0: float32[8]"), std::string::npos) << r.got.graph;
  EXPECT_NE(r.ref.graph.find("mul(%c0, %x0)"), std::string::npos) << r.ref.graph;
  ASSERT_EQ(r.args.size(), 2u);
  EXPECT_EQ(r.out().at(9), static_cast<float>(r.args[0].at(9) * r.args[1].at(1)));
  // a second graph that computes something else fails, with both graphs in the message
  c.ref_build = [](Graph& g, const std::vector<Value*>& in) {
    return std::vector<Value*>{g.add_node("add", {in[1], in[0]}, {}, "m")->out()};
  };
  c.threads = {1};
  EXPECT_NONFATAL_FAILURE(test::check_op(c), "reference graph:");
}

TEST(CheckOpHarness, ErrorHelpers) {
  EXPECT_EQ(test::error_of([] {}), "");
  EXPECT_NE(test::build_error("add", {TensorType(DType::f32, {2}), TensorType(DType::f32, {3})})
                .find("bad_node"),
            std::string::npos);
  EXPECT_TRUE(test::throws_with([] { test::run_op("exp", {TensorType(DType::i64, {2})}); }, "floating"));
  EXPECT_FALSE(test::throws_with([] {}, "anything"));
  EXPECT_FALSE(test::throws_with([] { test::run_op("exp", {TensorType(DType::i64, {2})}); }, "no such words"));
  EXPECT_TRUE(test::throws_with([] { test::run_op("exp", {TensorType(DType::i64, {2})}); }, {"floating", "exp"}));
  auto partly = test::throws_with([] { test::run_op("exp", {TensorType(DType::i64, {2})}); }, {"floating", "zzz"});
  EXPECT_FALSE(partly);
  EXPECT_NE(std::string(partly.message()).find("does not say 'zzz'"), std::string::npos) << partly.message();
  EXPECT_EQ(test::count("a.b.c", "."), 2);
  EXPECT_EQ(test::count("aaa", "aa"), 2);
}

}  // namespace
}  // namespace ag
