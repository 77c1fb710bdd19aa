// Our own kernels' AVX2 and AVX-512 variants (kernels/isa.h: one source each, the vector width a
// parameter, chosen at run time): every variant run under both ISAs (isa::force) on row lengths
// around both widths (1, 7, 15, 16, 17, 33, 383, 1000). Elementwise work -- the fused interpreter's
// tiles -- must give the same bits under both; reductions (norms, softmax) may sum in another order
// and are checked against a double-precision reference at a tolerance, with NaN, infinities and -0
// where the ops meet them.
//
// KernelIsa.Bench times each kernel under both ISAs, interleaved in one process, on the zoo's
// transformer shapes at batch 1; it runs only with AIRGRAPH_ISA_BENCH=1 (then
// AIRGRAPH_ISA_BENCH_THREADS, default 1, sets the thread count; AIRGRAPH_ISA_BENCH_ONLY=text times
// the kernels whose names contain it).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <tuple>

#include "base/parallel.h"
#include "kernels/attention.h"
#include "ir/graph.h"
#include "kernels/isa.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "check_op.h"
#include "op_rows.h"

namespace ag {
namespace {

using test::attrs;

constexpr int64_t kLens[] = {1, 7, 15, 16, 17, 33, 383, 1000};

struct IsaScope {  // forces an ISA for the scope, back to the CPU's choice after
  explicit IsaScope(int which) { isa::force(which); }
  ~IsaScope() { isa::force(isa::kAuto); }
};
const char* isa_name(int which) { return which == isa::kAvx512 ? "avx512" : "avx2"; }
// The ISAs this CPU can run (AVX2 always: the core's baseline).
std::vector<int> isas() {
  std::vector<int> v{isa::kAvx2};
  if (isa::cpu_has_avx512()) v.push_back(isa::kAvx512);
  return v;
}

test::Tensor with_values(const TensorType& t, uint32_t seed, const std::function<void(std::vector<float>&)>& edit) {
  std::vector<float> v = test::random_tensor(t, seed).floats();
  if (edit) edit(v);
  return test::from_floats(t, v);
}

// ---- layer_norm / rms_norm ----------------------------------------------------------------------
std::vector<double> norm_ref(bool rms, const std::vector<float>& x, const std::vector<float>* w,
                             const std::vector<float>* b, int64_t M, int64_t N, double eps) {
  std::vector<double> y(x.size());
  for (int64_t m = 0; m < M; ++m) {
    const float* p = x.data() + m * N;
    double mean = 0, ss = 0;
    if (!rms) {
      for (int64_t i = 0; i < N; ++i) mean += p[i];
      mean /= static_cast<double>(N);
    }
    for (int64_t i = 0; i < N; ++i) ss += (p[i] - mean) * (p[i] - mean);
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(N) + eps);
    for (int64_t i = 0; i < N; ++i) {
      double v = (p[i] - mean) * rstd;
      if (w) v *= (*w)[i];
      if (b) v += (*b)[i];
      y[m * N + i] = v;
    }
  }
  return y;
}

void check_norm(bool rms, int64_t M, int64_t N, bool hw, bool hb, const std::function<void(std::vector<float>&)>& edit,
                const char* what) {
  const TensorType xt(DType::f32, {M, N}), pt(DType::f32, {N});
  const test::Tensor x = with_values(xt, 3, edit), w = test::random_tensor(pt, 5), b = test::random_tensor(pt, 7);
  std::vector<test::Arg> args{x};
  if (hw) args.emplace_back(w, true);
  if (hb) args.emplace_back(b, true);
  Attrs a = rms ? attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-6}, {"has_weight", hw}})
                : attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", hw}, {"has_bias", hb}});
  const auto xf = x.floats(), wf = w.floats(), bf = b.floats();
  const auto want = norm_ref(rms, xf, hw ? &wf : nullptr, hb ? &bf : nullptr, M, N, rms ? 1e-6 : 1e-5);
  for (int which : isas()) {
    IsaScope s(which);
    auto r = test::run_op(rms ? "rms_norm" : "layer_norm", args, a);
    EXPECT_TRUE(test::all_close(r.out(), want, {2e-5, 2e-5}))
        << (rms ? "rms_norm" : "layer_norm") << " " << isa_name(which) << " M " << M << " N " << N << " w " << hw
        << " b " << hb << " (" << what << ")";
  }
}

TEST(KernelIsa, LayerAndRmsNormEveryIsaAndTail) {
  for (int64_t N : kLens)
    for (bool rms : {false, true})
      for (int wb = 0; wb < 4; ++wb) {
        if (rms && (wb & 2)) continue;
        check_norm(rms, 3, N, wb & 1, wb & 2, nullptr, "random");
      }
  check_norm(false, 128, 768, true, true, nullptr, "bert");
  check_norm(true, 17, 1024, true, false, nullptr, "llama-like");
}

TEST(KernelIsa, NormsSpecialValues) {
  for (int64_t N : {7, 17, 33, 383}) {
    for (bool rms : {false, true}) {
      // row 0 a NaN, row 1 +inf, row 2 -0.0 everywhere (var 0: y = 0 * rstd), row 3 large values (squares near 1e31: float sums)
      auto edit = [N](std::vector<float>& v) {
        v[N / 2] = std::numeric_limits<float>::quiet_NaN();
        v[N + N - 1] = std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < N; ++i) v[2 * N + i] = -0.0f, v[3 * N + i] *= 1e15f;
      };
      check_norm(rms, 4, N, true, !rms, edit, "specials");
    }
  }
}

// ---- softmax / log_softmax -----------------------------------------------------------------------
std::vector<double> softmax_ref(bool log, const std::vector<float>& x, int64_t M, int64_t N) {
  std::vector<double> y(x.size());
  for (int64_t m = 0; m < M; ++m) {
    const float* p = x.data() + m * N;
    double mx = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t i = 0; i < N; ++i) nan |= std::isnan(p[i]), mx = std::max<double>(mx, p[i]);
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += std::exp(p[i] - mx);
    for (int64_t i = 0; i < N; ++i)
      y[m * N + i] = nan ? NAN : log ? p[i] - mx - std::log(s) : std::exp(p[i] - mx) / s;
  }
  return y;
}

void check_softmax(bool log, int64_t M, int64_t N, const std::function<void(std::vector<float>&)>& edit,
                   const char* what) {
  const TensorType xt(DType::f32, {M, N});
  const test::Tensor x = with_values(xt, 11, edit);
  const auto want = softmax_ref(log, x.floats(), M, N);
  for (int which : isas()) {
    IsaScope s(which);
    auto r = test::run_op(log ? "log_softmax" : "softmax", {x}, attrs({{"dim", int64_t{-1}}}));
    EXPECT_TRUE(test::all_close(r.out(), want, {1e-6, 2e-6}))
        << (log ? "log_softmax" : "softmax") << " " << isa_name(which) << " M " << M << " N " << N << " (" << what << ")";
  }
}

TEST(KernelIsa, SoftmaxEveryIsaAndTail) {
  for (int64_t N : kLens)
    for (bool log : {false, true}) check_softmax(log, 3, N, nullptr, "random");
  for (bool log : {false, true}) check_softmax(log, 12 * 4, 197, nullptr, "vit");
  // large magnitudes: exp saturates / flushes within a row
  check_softmax(false, 2, 383, [](std::vector<float>& v) { for (auto& f : v) f *= 40.f; }, "wide range");
}

TEST(KernelIsa, SoftmaxSpecialValues) {
  for (int64_t N : {7, 16, 17, 33, 383}) {
    for (bool log : {false, true}) {
      // row 0 masked by -inf (a causal mask: all but the first), row 1 a NaN, row 2 +inf, row 3 all -inf
      auto edit = [N](std::vector<float>& v) {
        for (int64_t i = 1; i < N; ++i) v[i] = -std::numeric_limits<float>::infinity();
        v[N + N - 1] = std::numeric_limits<float>::quiet_NaN();
        v[2 * N] = std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < N; ++i) v[3 * N + i] = -std::numeric_limits<float>::infinity();
        v[4 * N + N / 2] = -0.0f;
      };
      const TensorType xt(DType::f32, {5, N});
      const test::Tensor x = with_values(xt, 13, edit);
      std::vector<test::Tensor> outs;
      for (int which : isas()) {
        IsaScope s(which);
        outs.push_back(test::run_op(log ? "log_softmax" : "softmax", {x}, attrs({{"dim", int64_t{-1}}})).out());
      }
      const auto y = outs[0].floats();
      // the masked row: exp(0) / 1 at 0 (log: 0), 0 (log: -inf) elsewhere
      EXPECT_EQ(y[0], log ? 0.f : 1.f);
      for (int64_t i = 1; i < N; ++i) EXPECT_EQ(y[i], log ? -INFINITY : 0.f) << i;
      for (int64_t i = N; i < 4 * N; ++i) EXPECT_TRUE(std::isnan(y[i])) << "N " << N << " i " << i;  // NaN, +inf, all -inf rows
      if (outs.size() == 2) EXPECT_TRUE(test::same(outs[1], outs[0], {1e-6, 2e-6})) << "N " << N;
    }
  }
}

// ---- attention's short path, and the softmax pass of the tiles and the GEMM path --------------------
// q [1, 2, L, 16] against S keys (L = S), no mask / causal / a bool mask / an additive float mask
// with -inf, against a double-precision reference, under both ISAs: the short path (its score vectors'
// and softmax row's tails) up to 33 keys with AVX-512 and 16 with AVX2; above, the GEMMs, and the
// tiles at 1100 keys (four tiles of 232 query rows and a last one of 172) and 2100 keys (120 rows a
// tile), causal ones reading fewer keys.
TEST(KernelIsa, SdpaSoftmaxPassEveryIsaAndTail) {
  const int64_t H = 2, E = 16;
  for (int64_t S : {7, 15, 16, 17, 33, 197, 1100, 2100})
    for (int kind = 0; kind < 4; ++kind) {  // 0 none, 1 causal, 2 bool mask, 3 float mask
      const int64_t L = S;
      auto q = test::randn(H * L * E, 61), k = test::randn(H * S * E, 62), v = test::randn(H * S * E, 63);
      std::vector<uint8_t> mb(L * S);
      std::vector<float> mf(L * S);
      for (int64_t i = 0; i < L * S; ++i) {
        mb[i] = (i * 7919) % 10 < 7 || i % S == 0;  // (every row keeps key 0)
        mf[i] = mb[i] ? 0.1f * static_cast<float>(i % 5) : -INFINITY;
      }
      std::vector<double> want(H * L * E);
      const double scale = 1.0 / std::sqrt(static_cast<double>(E));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          std::vector<double> sc(S, -INFINITY);
          double mx = -INFINITY;
          for (int64_t j = 0; j < S; ++j) {
            if (kind == 1 && j > i) continue;
            if (kind >= 2 && !mb[i * S + j]) continue;
            double d = 0;
            for (int64_t e = 0; e < E; ++e) d += double(q[(h * L + i) * E + e]) * k[(h * S + j) * E + e];
            sc[j] = d * scale + (kind == 3 ? mf[i * S + j] : 0.0);
            mx = std::max(mx, sc[j]);
          }
          double sum = 0;
          for (int64_t j = 0; j < S; ++j) sum += sc[j] == -INFINITY ? 0.0 : std::exp(sc[j] - mx);
          for (int64_t e = 0; e < E; ++e) {
            double o = 0;
            for (int64_t j = 0; j < S; ++j)
              if (sc[j] != -INFINITY) o += std::exp(sc[j] - mx) / sum * v[(h * S + j) * E + e];
            want[(h * L + i) * E + e] = o;
          }
        }
      std::vector<test::Arg> args{{TensorType(DType::f32, {1, H, L, E}), q.data()},
                                  {TensorType(DType::f32, {1, H, S, E}), k.data()},
                                  {TensorType(DType::f32, {1, H, S, E}), v.data()}};
      if (kind == 2) args.push_back({TensorType(DType::b8, {1, 1, L, S}), mb.data()});
      if (kind == 3) args.push_back({TensorType(DType::f32, {1, 1, L, S}), mf.data()});
      for (int which : isas()) {
        IsaScope sc(which);
        auto r = test::run_op("sdpa", args, attrs({{"is_causal", kind == 1}, {"has_mask", kind >= 2}}));
        const bool short_path = S <= std::min<int64_t>(33, sdpa_short_max_keys());
        const char* path = short_path ? "sdpa_short" : S > 1000 ? "sdpa_tiles" : "sdpa_gemm";
        ASSERT_EQ(r.got.kernels.at(0).rfind(path, 0), 0u) << r.got.kernels[0];
        EXPECT_TRUE(test::all_close(r.out(), want, {2e-5, 2e-5})) << isa_name(which) << " S " << S << " kind " << kind;
      }
    }
}

// ---- row reductions (AVX2 only: no AVX-512 variant paid; the rows' tails and lane tree) -----------
TEST(KernelIsa, ReductionRowsEveryTail) {
  for (int64_t N : kLens)
    for (const char* op : {"sum", "mean", "amax", "amin"})
      for (int special = 0; special < 3; ++special) {
        const TensorType xt(DType::f32, {3, N});
        const test::Tensor x = with_values(xt, 17, [&](std::vector<float>& v) {
          if (special == 1) v[N + N / 2] = NAN;       // row 1: NaN
          if (special == 2) v[2 * N + N - 1] = -INFINITY;  // row 2: -inf at the tail's end
        });
        const auto xf = x.floats();
        std::vector<double> want(3);
        const std::string o(op);
        for (int64_t m = 0; m < 3; ++m) {
          double s = 0, mx = -INFINITY, mn = INFINITY;
          bool nan = false;
          for (int64_t i = 0; i < N; ++i) {
            const double v = xf[m * N + i];
            s += v, nan |= std::isnan(v), mx = std::max(mx, v), mn = std::min(mn, v);
          }
          want[m] = o == "sum" ? s : o == "mean" ? s / N : nan ? NAN : o == "amax" ? mx : mn;
        }
        auto r = test::run_op(op, {x}, attrs({{"dims", std::vector<int64_t>{-1}}}));
        EXPECT_TRUE(test::all_close(r.out(), want, {1e-5, 1e-6})) << op << " N " << N << " special " << special;
      }
}

// ---- fused elementwise: the same bits under both ISAs ----------------------------------------
Value* node(Graph& g, const std::string& name, std::vector<Value*> in, Attrs a = {}) {
  return g.add_node(name, in, std::move(a))->out();
}
// Chains the zoo's models fuse: GELU (erf, tanh) after a bias add, a residual add-mul chain, exp /
// tanh / sigmoid / div / where, and a bf16 chain (rounded per instruction).
struct Chain {
  const char* name;
  std::function<Value*(Graph&, Value* x, Value* y)> f;
};
const Chain kChains[] = {
    {"add_gelu_erf", [](Graph& g, Value* x, Value* y) { return node(g, "gelu", {node(g, "add", {x, y})}); }},
    {"add_gelu_tanh",
     [](Graph& g, Value* x, Value* y) {
       return node(g, "gelu", {node(g, "add", {x, y})}, attrs({{"approximate", std::string("tanh")}}));
     }},
    {"mul_add_mul",
     [](Graph& g, Value* x, Value* y) { return node(g, "mul", {node(g, "add", {node(g, "mul", {x, y}), x}), y}); }},
    {"exp_tanh_sigmoid",
     [](Graph& g, Value* x, Value* y) {
       return node(g, "add", {node(g, "exp", {x}), node(g, "mul", {node(g, "tanh", {y}), node(g, "sigmoid", {x})})});
     }},
    {"silu_div_where",
     [](Graph& g, Value* x, Value* y) {
       Value* d = node(g, "div", {node(g, "silu", {x}), y});
       return node(g, "where", {node(g, "gt", {x, y}), d, node(g, "erf", {y})});
     }},
    {"rsqrt_log_sub_neg",
     [](Graph& g, Value* x, Value* y) {
       return node(g, "neg", {node(g, "sub", {node(g, "rsqrt", {node(g, "abs", {x})}), node(g, "log1p", {node(g, "abs", {y})})})});
     }},
};

void check_chain(const Chain& c, const Shape& xs, const Shape& ys, DType dt) {
  test::OpCase oc;
  oc.args = {TensorType(dt, xs), TensorType(dt, ys)};
  oc.build = [&c](Graph& g, const std::vector<Value*>& a) { return std::vector<Value*>{c.f(g, a[0], a[1])}; };
  oc.specials = test::Specials::some;
  oc.threads = {1};
  std::vector<test::Checked> runs;
  for (int which : isas()) {
    IsaScope s(which);
    runs.push_back(test::check_op(oc));
    EXPECT_GE(runs.back().got.nodes_of("fused_elementwise"), 1) << c.name << "\n" << runs.back().got.graph;
  }
  if (runs.size() == 2)
    EXPECT_TRUE(test::same(runs[1].out(), runs[0].out(), test::Tol::exact_bits()))
        << c.name << " " << dtype_name(dt) << " x " << shape_str(xs) << " y " << shape_str(ys) << ": avx512 vs avx2";
}

TEST(KernelIsa, FusedElementwiseSameBitsEveryIsa) {
  for (const Chain& c : kChains) {
    for (int64_t n : kLens) check_chain(c, {n}, {n}, DType::f32);
    check_chain(c, {3, 1000}, {1000}, DType::f32);   // a broadcast row (gathered)
    check_chain(c, {2, 517}, {1}, DType::f32);       // a one-element operand (a value)
    check_chain(c, {128, 3072}, {3072}, DType::f32);  // BERT's FFN GELU tile
    check_chain(c, {1000}, {1000}, DType::bf16);
    check_chain(c, {383}, {383}, DType::f16);
  }
}

// Every row of kernels/elementwise_ops.h (each attribute setting) as its instruction alone in a
// fused_elementwise node, on the rows' special and ordinary values and a spread of random ones, 1000
// elements (and a one-element operand on either side of a binary row), f32 and bf16: the same bits
// under both ISAs. (The op-row tests compare the fused instruction with the single-op kernel, which
// is AVX2, at the CPU's choice.)
TEST(KernelIsa, EveryFusedRowSameBitsEveryIsa) {
  if (!isa::cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 1000;
  std::vector<float> xs = test::random_tensor(TensorType(DType::f32, {n}), 51).floats(), ys = xs;
  const std::vector<float> v = test::row_values();
  const int64_t m = static_cast<int64_t>(v.size());
  for (int64_t i = 0; i < m * m && i < n; ++i) xs[i] = v[i / m], ys[i] = v[i % m];  // every pair of specials
  for (int64_t i = 0; i < n; i += 3) ys[i] *= 0.01f;  // (values near 0 for the series branches)
  int checked = 0;
  for (int arity : {1, 2})
    for (const OpDef* d : test::rows_of(arity))
      for (const Attrs& a : test::row_settings(d->name))
        for (DType t : {DType::f32, DType::bf16}) {
          std::vector<std::vector<TensorType>> shapes{{TensorType(t, {n}), TensorType(t, {n})}};
          if (arity == 2) shapes.push_back({TensorType(t, {n}), TensorType(t, {})}), shapes.push_back({TensorType(t, {}), TensorType(t, {n})});
          for (auto types : shapes) {
            types.resize(arity);
            Graph g1, g2;
            if (!test::row_graphs(d, a, types, &g1, &g2)) continue;
            std::vector<test::Tensor> data;
            std::vector<const void*> ptrs;
            for (int j = 0; j < arity; ++j) {
              const std::vector<float>& src = j ? ys : xs;
              data.push_back(test::from_floats(types[j], types[j].numel() == 1 ? std::vector<float>{src[7]} : src));
              ptrs.push_back(data.back().data());
            }
            std::vector<test::Tensor> outs;
            for (int which : {isa::kAvx2, isa::kAvx512}) {
              IsaScope s(which);
              Graph g;  // (a fresh copy: compile_and_run runs the verifier on the graph it is given)
              test::row_graphs(d, a, types, &g1, &g);
              outs.push_back(test::compile_and_run(g, ptrs, nullptr).outs.at(0));
            }
            EXPECT_TRUE(test::same(outs[1], outs[0], test::Tol::exact_bits()))
                << d->name << " {" << a.str() << "} " << dtype_name(t) << " " << shape_str(types[0].shape())
                << (arity == 2 ? " " + shape_str(types[1].shape()) : "") << ": avx512 vs avx2";
            ++checked;
          }
        }
  EXPECT_GE(checked, 100);
}

// ---- timings ---------------------------------------------------------------------------------
struct Timed {
  std::shared_ptr<Program> prog;
  std::vector<test::Tensor> ins;
  std::vector<std::vector<float>> outs;  // (the external roots)
};
Timed prepare(const std::vector<TensorType>& in, const std::function<Value*(Graph&, const std::vector<Value*>&)>& f) {
  Graph g;
  std::vector<Value*> v;
  Timed t;
  for (size_t i = 0; i < in.size(); ++i) {
    v.push_back(g.add_input(in[i], "x" + std::to_string(i)));
    t.ins.push_back(test::random_tensor(in[i], 31 + static_cast<uint32_t>(i)));
  }
  g.set_outputs({f(g, v)});
  run_pipeline(g, PipelineOptions{});
  t.prog = compile_program(g, CompileOptions{});
  for (size_t b : t.prog->external_bytes) t.outs.emplace_back(b / sizeof(float) + 16);
  return t;
}
double median_us(Executor& ex, const Timed& t, int iters) {
  std::vector<const void*> in;
  for (auto& x : t.ins) in.push_back(x.data());
  std::vector<void*> out;
  for (auto& o : t.outs) out.push_back(const_cast<float*>(o.data()));
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ex.run_into(in.data(), out.data());
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + iters / 2, us.end());
  return us[iters / 2];
}

TEST(KernelIsa, Bench) {
  const char* on = std::getenv("AIRGRAPH_ISA_BENCH");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "AIRGRAPH_ISA_BENCH=1 runs it";
  if (!isa::cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const char* th = std::getenv("AIRGRAPH_ISA_BENCH_THREADS");
  ThreadCountScope threads(th ? std::atoi(th) : 1);
  auto f32 = [](Shape s) { return TensorType(DType::f32, std::move(s)); };
  struct Case {
    std::string name;
    std::vector<TensorType> in;
    std::function<Value*(Graph&, const std::vector<Value*>&)> f;
  };
  std::vector<Case> cases;
  for (int64_t N : {384, 768, 1024}) {
    cases.push_back({"layer_norm 128x" + std::to_string(N), {f32({128, N}), f32({N}), f32({N})},
                     [](Graph& g, const std::vector<Value*>& v) {
                       return node(g, "layer_norm", v, attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}}));
                     }});
    cases.push_back({"rms_norm 128x" + std::to_string(N), {f32({128, N}), f32({N})},
                     [](Graph& g, const std::vector<Value*>& v) {
                       return node(g, "rms_norm", v, attrs({{"normalized_ndim", int64_t{1}}, {"eps", 1e-6}, {"has_weight", true}}));
                     }});
  }
  for (auto [H, S] : {std::pair<int64_t, int64_t>{12, 128}, {12, 197}})
    cases.push_back({"softmax 12x" + std::to_string(S) + "x" + std::to_string(S), {f32({H, S, S})},
                     [](Graph& g, const std::vector<Value*>& v) { return node(g, "softmax", v, attrs({{"dim", int64_t{-1}}})); }});
  for (auto [L, S, causal] : {std::tuple<int64_t, int64_t, bool>{1, 128, false}, {1, 512, false}, {128, 128, false}, {197, 197, false}, {128, 128, true}})
    cases.push_back({"sdpa 12x" + std::to_string(L) + "x64 S " + std::to_string(S) + (causal ? " causal" : ""),
                     {f32({1, 12, L, 64}), f32({1, 12, S, 64}), f32({1, 12, S, 64})},
                     [causal](Graph& g, const std::vector<Value*>& v) {
                       return node(g, "sdpa", v, attrs({{"is_causal", causal}, {"has_mask", false}}));
                     }});
  for (const char* r : {"sum", "mean", "amax"})
    for (int64_t N : {768, 3072})
      cases.push_back({std::string(r) + " 128x" + std::to_string(N) + " dim -1", {f32({128, N})},
                       [r](Graph& g, const std::vector<Value*>& v) {
                         return node(g, r, v, attrs({{"dims", std::vector<int64_t>{-1}}, {"keepdim", true}}));
                       }});
  for (const Chain& c : kChains)
    cases.push_back({std::string("fused ") + c.name + " 128x3072", {f32({128, 3072}), f32({3072})},
                     [&c](Graph& g, const std::vector<Value*>& v) { return c.f(g, v[0], v[1]); }});
  for (int i : {2, 3})  // (the cheap chains in L2: 16 rows)
    cases.push_back({std::string("fused ") + kChains[i].name + " 16x3072", {f32({16, 3072}), f32({3072})},
                     [i](Graph& g, const std::vector<Value*>& v) { return kChains[i].f(g, v[0], v[1]); }});
  std::printf("%-36s %10s %10s %8s   (us per call, median, %d thread(s))\n", "kernel", "avx2", "avx512", "ratio",
              num_threads());
  const char* only = std::getenv("AIRGRAPH_ISA_BENCH_ONLY");  // (a part of the kernels' names)
  for (auto& c : cases) {
    if (only && c.name.find(only) == std::string::npos) continue;
    Timed t = prepare(c.in, c.f);
    Executor ex(t.prog);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 7; ++rep)
      for (int which : {isa::kAvx2, isa::kAvx512}) {
        IsaScope s(which);
        median_us(ex, t, 20);  // (warm)
        best[which] = std::min(best[which], median_us(ex, t, 60));
      }
    std::printf("%-36s %10.2f %10.2f %8.3f\n", c.name.c_str(), best[0], best[1], best[1] / best[0]);
  }
}

}  // namespace
}  // namespace ag
