// The attention row kernel's split-KV (flash-decoding): when it splits, and that
// a split run gives what the unsplit one gives, to float rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/graph.h"
#include "kernels/attention.h"
#include "check_op.h"

namespace ag {
namespace {

TEST(Attention, KvSplitDecision) {
  EXPECT_EQ(sdpa_kv_splits(1, 1, 100000), 1);  // one thread: nothing to gain
  EXPECT_EQ(sdpa_kv_splits(8, 4, 100000), 1);  // rows fill the threads already (2 per thread)
  EXPECT_EQ(sdpa_kv_splits(1, 2, 4096), 4);    // about 2 items per thread
  EXPECT_EQ(sdpa_kv_splits(3, 2, 4096), 2);
  EXPECT_EQ(sdpa_kv_splits(2, 16, 4096), 16);  // batch 1, 2 key heads, 16 threads
  EXPECT_EQ(sdpa_kv_splits(8, 16, 4096), 4);   // batch 1, 8 heads (GQA decode), 16 threads
  EXPECT_EQ(sdpa_kv_splits(1, 16, 1000), 3);   // at least kSdpaMinSplit keys per range
  EXPECT_EQ(sdpa_kv_splits(1, 16, 2 * kSdpaMinSplit - 1), 1);
  EXPECT_EQ(sdpa_kv_splits(1, 16, 0), 1);
  for (int64_t rows : {1, 2, 3, 7, 8, 31})  // more threads never split less (the scratch bound relies on it)
    for (int nt = 1; nt < 40; ++nt) EXPECT_LE(sdpa_kv_splits(rows, nt, 5000), sdpa_kv_splits(rows, nt + 1, 5000));
}

// q [1, 3, 1, 64] (GQA: 3 query heads read one key head) against 1500 keys
// with a bool mask [1, 3, 1, 1500]: head 0 sees no key, head 2 only the last
// 100 (its first ranges are wholly masked).
TEST(Attention, SplitKvMatchesUnsplit) {
  const int64_t H = 3, Hk = 1, S = 1500, E = 64;
  auto qd = test::randn(H * E, 1), kd = test::randn(Hk * S * E, 2), vd = test::randn(Hk * S * E, 3);
  std::vector<uint8_t> md(H * S);
  for (int64_t i = 0; i < H * S; ++i) md[i] = i / S == 0 ? 0 : i / S == 2 ? i % S >= S - 100 : (i * 7919) % 10 < 7;
  for (int threads : {2, 4})  // 3 rows: 2 ranges of 750 keys, then 3 of 500
    ASSERT_EQ(sdpa_kv_splits(H, threads, S), threads == 2 ? 2 : 3);
  test::OpCase c;
  c.op = "sdpa";
  c.args = {{TensorType(DType::f32, {1, H, 1, E}), qd.data()},
            {TensorType(DType::f32, {1, Hk, S, E}), kd.data()},
            {TensorType(DType::f32, {1, Hk, S, E}), vd.data()},
            {TensorType(DType::b8, {1, H, 1, S}), md.data()}};
  c.attrs = test::attrs({{"is_causal", false}, {"has_mask", true}});
  c.threads = {1, 2, 4};  // the split runs (2 and 4 threads) give the unsplit one's result, to float rounding
  c.tol = {1e-6, 1e-6};
  const int64_t runs = sdpa_kv_split_runs();
  c.after_run = [&](const test::Run& r) {
    EXPECT_EQ(sdpa_kv_split_runs(), runs + r.threads / 2) << r.threads << " threads";
    for (int64_t i = 0; i < E; ++i) EXPECT_EQ(r.outs[0].as<float>()[i], 0.f);  // head 0: every key masked
  };
  test::check_op(c);
}

}  // namespace
}  // namespace ag
