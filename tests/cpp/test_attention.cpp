// The attention row kernel's split-KV (flash-decoding): when it splits, and that
// a split run gives what the unsplit one gives, to float rounding. The GEMM path's
// key range: a masked chunk reads only the keys its rows keep, against a reference.
// The head split's and merge's permutes folded into sdpa (attention_permutes): every
// path (short, GEMM, rows) reading [B, L, H, E] operands and writing a [B, L, H, Ev]
// output gives the bits of the graph that copies them, and no permute is left.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

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


// GQA attention on the GEMM path (Qwen2-0.5B's 14 query heads on 2 key heads: 7 * L query rows
// per key head, more than the row kernel takes) with a mask that keeps each row's keys
// keep[b, h, i] = [pad, fill) (a static KV cache filled up to `fill` after `pad` slots of left
// padding, a hole inside), broadcast over heads or per head, bool or additive (finite values
// where kept, -inf where dropped), with or without causality (top-left: keys j <= i as well).
// Against a reference in double that reads only kept keys (a row that keeps none: 0); the GEMMs
// read the union of the rows' ranges, so NaN in K and V past every row's last kept key does not
// reach the output, and sdpa_keys_skipped grows by S minus that width for every query row.
struct CacheMask {
  int64_t B = 2, H = 14, Hk = 2, L = 1, S = 300, E = 64;
  bool per_head = false, causal = false, additive = false;
  std::vector<int64_t> pad, fill;  // per batch; per head (per_head), pad + h % 3
  bool no_key_row = false;         // batch 1, query 0 keeps no key
};

void check_cache_mask(const CacheMask& cm) {
  const int64_t B = cm.B, H = cm.H, Hk = cm.Hk, L = cm.L, S = cm.S, E = cm.E, G = H / Hk;
  const int64_t MH = cm.per_head ? H : 1;
  std::vector<float> qd = test::randn(B * H * L * E, 11), kd = test::randn(B * Hk * S * E, 12),
                     vd = test::randn(B * Hk * S * E, 13), noise = test::randn(B * MH * L * S, 14);
  std::vector<uint8_t> keep(B * MH * L * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < MH; ++h)
      for (int64_t i = 0; i < L; ++i) {
        // query i sits at slot hi - 1; key lo + 1 is a hole
        const int64_t lo = cm.pad[b] + (cm.per_head ? h % 3 : 0), hi = cm.fill[b] - L + 1 + i;
        for (int64_t j = lo; j < hi; ++j) keep[((b * MH + h) * L + i) * S + j] = j != lo + 1;
        if (cm.no_key_row && b == 1 && i == 0) std::fill_n(&keep[((b * MH + h) * L + i) * S], S, 0);
      }
  std::vector<float> fmask(keep.size());
  for (size_t x = 0; x < keep.size(); ++x) fmask[x] = keep[x] ? noise[x] : -std::numeric_limits<float>::infinity();
  auto kept = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return keep[((b * MH + (cm.per_head ? h : 0)) * L + i) * S + j] && (!cm.causal || j <= i);
  };
  // the keys any row keeps: the GEMMs read [lo, hi) when that is at most 3/4 of S
  int64_t lo = S, hi = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j)
          if (kept(b, h, i, j)) lo = std::min(lo, j), hi = std::max(hi, j + 1);
  const int64_t width = std::max<int64_t>(0, hi - lo);
  const std::string keys = "keys [" + std::to_string(std::min(lo, hi)) + ", " + std::to_string(hi) + ")";
  const int64_t skip = width <= S * 3 / 4 ? B * H * L * (S - width) : 0;
  if (skip > 0 && hi < S)  // garbage in the slots no row keeps
    for (int64_t x = 0; x < B * Hk; ++x)
      for (int64_t e = 0; e < E; ++e)
        kd[(x * S + hi) * E + e] = vd[(x * S + S - 1) * E + e] = std::numeric_limits<float>::quiet_NaN();
  qd[((0 * H + 5) * L + L - 1) * E] = std::numeric_limits<float>::quiet_NaN();  // a NaN query: its row is NaN
  const double scale = 1.0 / std::sqrt(double(E));
  std::vector<double> want(B * H * L * E, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const float* q = &qd[((b * H + h) * L + i) * E];
        const int64_t kh = b * Hk + h / G;
        std::vector<double> s(S, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (int64_t j = 0; j < S; ++j) {
          if (!kept(b, h, i, j)) continue;
          double d = 0;
          for (int64_t e = 0; e < E; ++e) d += double(q[e]) * kd[(kh * S + j) * E + e];
          s[j] = d * scale + (cm.additive ? fmask[((b * MH + (cm.per_head ? h : 0)) * L + i) * S + j] : 0.0);
          nan |= std::isnan(s[j]);
          mx = std::max(mx, s[j]);
        }
        double* o = &want[((b * H + h) * L + i) * E];
        if (nan) std::fill_n(o, E, std::numeric_limits<double>::quiet_NaN());
        if (nan || mx == -std::numeric_limits<double>::infinity()) continue;
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          if (s[j] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(s[j] - mx);
          sum += p;
          for (int64_t e = 0; e < E; ++e) o[e] += p * vd[(kh * S + j) * E + e];
        }
        for (int64_t e = 0; e < E; ++e) o[e] /= sum;
      }
  test::OpCase c;
  c.op = "sdpa";
  c.args = {{TensorType(DType::f32, {B, H, L, E}), qd.data()},
            {TensorType(DType::f32, {B, Hk, S, E}), kd.data()},
            {TensorType(DType::f32, {B, Hk, S, E}), vd.data()},
            cm.additive ? test::Arg(TensorType(DType::f32, {B, MH, L, S}), fmask.data())
                        : test::Arg(TensorType(DType::b8, {B, MH, L, S}), keep.data())};
  c.attrs = test::attrs({{"is_causal", cm.causal}, {"has_mask", true}});
  c.want = test::want_values(std::vector<std::vector<double>>{want});
  c.tol = {1e-5, 1e-4};
  int64_t before = sdpa_keys_skipped();
  c.after_run = [&](const test::Run& r) {
    ASSERT_EQ(r.kernels.size(), 1u);
    EXPECT_EQ(r.kernels[0], "sdpa_gemm_float32");
    EXPECT_EQ(sdpa_keys_skipped() - before, skip) << r.threads << " threads, " << keys;
    before = sdpa_keys_skipped();
  };
  SCOPED_TRACE(::testing::Message() << "B=" << B << " L=" << L << " per_head=" << cm.per_head << " causal="
                                    << cm.causal << " additive=" << cm.additive << " " << keys);
  test::check_op(c);
}

TEST(Attention, GemmReadsOnlyTheKeysAMaskKeeps) {
  for (int64_t L : {1, 5})
    for (bool per_head : {false, true})
      for (bool additive : {false, true}) {
        CacheMask cm;
        cm.B = 3, cm.L = L, cm.per_head = per_head, cm.additive = additive;
        cm.pad = {0, 40, 7}, cm.fill = {100, 180, 61}, cm.no_key_row = true;
        check_cache_mask(cm);  // keys [0, 180)
        cm.B = 2, cm.pad = {30, 50}, cm.fill = {120, 90};
        check_cache_mask(cm);  // keys [30, 120): the range starts past key 0
        // causality and the mask together (keys j <= i as well): rows keep [pad, i + 1), the
        // first rows none; the causal bound counts from the range's start
        cm.causal = true, cm.pad = {2, 3}, cm.fill = {250, 250}, cm.no_key_row = false;
        check_cache_mask(cm);
      }
}

TEST(Attention, GemmKeyRangeWholeOrEmpty) {
  for (bool additive : {false, true}) {
    CacheMask cm;
    cm.L = 5, cm.additive = additive;
    cm.pad = {0, 3}, cm.fill = {300, 280};  // keys [0, 300): every key read, none skipped
    check_cache_mask(cm);
    cm.pad = {0, 60}, cm.fill = {226, 286};  // keys [0, 286): wider than 3/4 of S, all read
    check_cache_mask(cm);
    cm.causal = true, cm.pad = {10, 20}, cm.fill = {200, 200};  // no row keeps a key: 0, no GEMM
    check_cache_mask(cm);
  }
}


// A transformer's attention as the front lowers it: q, k, v projections' outputs [B, L, H * E]
// reshaped to [B, L, H, E] and permuted to [B, H, L, E], sdpa, the output permuted back and
// reshaped to [B, L, H * Ev]; with attention_permutes against the same graph without it (the
// permutes copied), bit for bit, at 1 and 2 threads.
struct HeadSplit {
  int64_t B = 2, H = 4, Hk = 4, L = 12, S = 12, E = 16, Ev = 16;
  DType t = DType::f32;
  bool causal = false, mask = false;
  bool k_out = false;    // the permuted k is also a graph output (a KV cache returned): its permute stays
  bool o_extra = false;  // sdpa's output has a use besides the permute: the output is not folded
  std::string kernel;    // the sdpa kernel expected
};

void check_head_split(const HeadSplit& hs) {
  const int64_t B = hs.B, H = hs.H, Hk = hs.Hk, L = hs.L, S = hs.S, E = hs.E, Ev = hs.Ev;
  test::OpCase c;
  c.args = {TensorType(hs.t, {B, L, H * E}), TensorType(hs.t, {B, S, Hk * E}), TensorType(hs.t, {B, S, Hk * Ev})};
  std::vector<uint8_t> keep(L * S);
  for (int64_t x = 0; x < L * S; ++x) keep[x] = (x * 7919) % 10 < 7 || x % S == 0;
  if (hs.mask) c.args.push_back(test::Arg(TensorType(DType::b8, {1, 1, L, S}), keep.data()));
  c.build = [hs](Graph& g, const std::vector<Value*>& in) {
    const std::vector<int64_t> swap{0, 2, 1, 3};
    auto heads = [&](Value* x, int64_t len, int64_t h, int64_t e, const std::string& name) {
      Value* r = g.add_node("reshape", {x}, test::attrs({{"shape", std::vector<int64_t>{hs.B, len, h, e}}}),
                            name + "_view")->out();
      return g.add_node("permute", {r}, test::attrs({{"dims", swap}}), name + "_t")->out();
    };
    std::vector<Value*> ops{heads(in[0], hs.L, hs.H, hs.E, "q"), heads(in[1], hs.S, hs.Hk, hs.E, "k"),
                            heads(in[2], hs.S, hs.Hk, hs.Ev, "v")};
    if (hs.mask) ops.push_back(in[3]);
    Value* o = g.add_node("sdpa", ops, test::attrs({{"is_causal", hs.causal}, {"has_mask", hs.mask}}), "attn")->out();
    Value* t = g.add_node("permute", {o}, test::attrs({{"dims", swap}}), "o_t")->out();
    std::vector<Value*> outs{
        g.add_node("reshape", {t}, test::attrs({{"shape", std::vector<int64_t>{hs.B, hs.L, hs.H * hs.Ev}}}), "o")
            ->out()};
    if (hs.k_out) outs.push_back(ops[1]);
    if (hs.o_extra) outs.push_back(g.add_node("neg", {o}, {}, "o_neg")->out());
    return outs;
  };
  c.ref_passes = PipelineOptions{.disabled = {"attention_permutes"}};
  c.ref_tol = test::Tol::exact_bits();
  const int left = (hs.k_out ? 1 : 0) + (hs.o_extra ? 1 : 0);  // permutes that stay
  // (more keys than the short path takes under this ISA, AVX2's limit being lower: the GEMM path)
  std::string kernel = hs.kernel;
  if (kernel.rfind("sdpa_short_", 0) == 0 && hs.S > sdpa_short_max_keys()) kernel = "sdpa_gemm_" + kernel.substr(11);
  c.after_run = [&](const test::Run& r) {
    EXPECT_EQ(r.nodes_of("permute"), left) << r.graph;
    EXPECT_EQ(std::count(r.kernels.begin(), r.kernels.end(), kernel), 1) << r.graph;
  };
  SCOPED_TRACE(::testing::Message() << "B=" << B << " H=" << H << " Hk=" << Hk << " L=" << L << " S=" << S
                                    << " E=" << E << " Ev=" << Ev << " " << dtype_name(hs.t) << " causal="
                                    << hs.causal << " mask=" << hs.mask << " k_out=" << hs.k_out
                                    << " o_extra=" << hs.o_extra);
  auto r = test::check_op(c);
  EXPECT_EQ(r.ref.nodes_of("permute"), 4) << r.ref.graph;
  EXPECT_EQ(test::count(r.got.graph, "q_blhe=true"), 1) << r.got.graph;
  EXPECT_EQ(test::count(r.got.graph, "out_blhe=true"), hs.o_extra ? 0 : 1) << r.got.graph;
}

TEST(Attention, HeadSplitPermutesFoldIntoTheShortPath) {
  HeadSplit hs;
  hs.kernel = "sdpa_short_float32";
  check_head_split(hs);
  hs.causal = true, hs.mask = true, hs.L = 9, hs.S = 21, hs.E = 20, hs.Ev = 36;  // vector tails: 21 keys, 36 lanes
  check_head_split(hs);
  hs.H = 6, hs.Hk = 2, hs.causal = false, hs.k_out = true;  // GQA: three query heads a key head
  check_head_split(hs);
  hs.k_out = false, hs.o_extra = true, hs.B = 1, hs.E = 64, hs.Ev = 64, hs.S = 40, hs.L = 33;  // two row blocks
  check_head_split(hs);
  hs.t = DType::bf16, hs.o_extra = false, hs.kernel = "sdpa_short_bfloat16";
  check_head_split(hs);
}

TEST(Attention, HeadSplitPermutesFoldIntoTheGemmAndRowPaths) {
  HeadSplit hs;
  hs.L = 70, hs.S = 90, hs.mask = true, hs.kernel = "sdpa_gemm_float32";  // staged to [B, H, L, E] and back
  check_head_split(hs);
  hs.t = DType::bf16, hs.kernel = "sdpa_gemm_bfloat16", hs.causal = true;
  check_head_split(hs);
  hs.t = DType::f32, hs.L = 1, hs.S = 300, hs.H = 8, hs.Hk = 2, hs.kernel = "sdpa_rows_float32";  // a decode step
  check_head_split(hs);
  hs.B = 1, hs.H = 2, hs.Hk = 1, hs.S = 1500;  // split-KV over 2 threads: its combine writes [B, L, H, Ev]
  check_head_split(hs);
}

}  // namespace
}  // namespace ag
