#include "kernels/conv_winograd.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "ir/serialize.h"
#include "kernels/isa.h"
#include "kernels/simd.h"

namespace ag::winograd {

using namespace simd;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

namespace {

// U[xi][c][k] = (G g G^T)[xi] for g = w[k][c], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] (in double)
std::vector<float> transform_weights(const float* w, int64_t C, int64_t K) {
  std::vector<float> u(static_cast<size_t>(16 * C * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (k * C + c) * 9;
      double gg[4][3], r[4][4];
      for (int s = 0; s < 3; ++s) {
        gg[0][s] = g[s];
        gg[1][s] = 0.5 * (double(g[s]) + g[3 + s] + g[6 + s]);
        gg[2][s] = 0.5 * (double(g[s]) - g[3 + s] + g[6 + s]);
        gg[3][s] = g[6 + s];
      }
      for (int a = 0; a < 4; ++a) {
        r[a][0] = gg[a][0];
        r[a][1] = 0.5 * (gg[a][0] + gg[a][1] + gg[a][2]);
        r[a][2] = 0.5 * (gg[a][0] - gg[a][1] + gg[a][2]);
        r[a][3] = gg[a][2];
      }
      for (int xi = 0; xi < 16; ++xi) u[(xi * C + c) * K + k] = static_cast<float>(r[xi / 4][xi % 4]);
    }
  return u;
}

// Transformed, packed weights shared by every kernel made from the same weights (by their checksum, after a
// folded scale) into the same layout, while one of them lives: the programs of a graph's sizes, a static graph
// and its symbolic twin (as prepack's copies are).
struct Kept {
  uint64_t sum;
  int64_t C, K;
  dnnl::memory::desc md;
  std::weak_ptr<void> u;
  size_t bytes;
};
std::mutex g_kept_mu;
std::vector<Kept>& kept() {
  static auto* v = new std::vector<Kept>();  // (never destroyed: kernels may outlive static destruction)
  return *v;
}
dnnl_util::Buffer shared_weights(uint64_t sum, int64_t C, int64_t K, const dnnl::memory::desc& md) {
  std::lock_guard<std::mutex> lock(g_kept_mu);
  for (const Kept& e : kept())
    if (e.sum == sum && e.C == C && e.K == K && e.md == md)
      if (auto u = e.u.lock()) return dnnl_util::Buffer{u, e.bytes};
  return {};
}
void keep_weights(uint64_t sum, int64_t C, int64_t K, const dnnl::memory::desc& md, const dnnl_util::Buffer& u) {
  std::lock_guard<std::mutex> lock(g_kept_mu);
  auto& v = kept();
  v.erase(std::remove_if(v.begin(), v.end(), [](const Kept& e) { return e.u.expired(); }), v.end());
  v.push_back({sum, C, K, md, u.p, u.bytes});
}

}  // namespace

Plan make(const float* w, const float* bias, const float* w_direct, const float* scale, int64_t N, int64_t H,
          int64_t W, int64_t C, int64_t K, int64_t pt, int64_t pl, int64_t Ho, int64_t Wo, int threads) {
  Plan p;
  p.wd = w_direct;
  if (scale) {
    p.scale = dnnl_util::alloc_buffer(static_cast<size_t>(K) * 4);
    std::memcpy(p.scale.data(), scale, static_cast<size_t>(K) * 4);
  }
  p.N = N, p.H = H, p.W = W, p.C = C, p.K = K, p.pt = pt, p.pl = pl, p.Ho = Ho, p.Wo = Wo;
  p.th = (Ho + 1) / 2, p.tw = (Wo + 1) / 2, p.T = N * p.th * p.tw;
  // a block's V and M within about a core's L2 (1 MiB on a Zen 4), 16-96 tiles, and no more than a
  // thread's share of them
  const int64_t fit = std::clamp<int64_t>(16384 / (C + K) / 8 * 8, 16, 96);
  const int64_t share = (p.T + std::max(threads, 1) - 1) / std::max(threads, 1);
  // (whole rows of tiles where they fit: a block's output pixels are then whole rows, its post-ops one run)
  p.Tb = std::max<int64_t>(1, std::min(fit >= p.tw ? fit / p.tw * p.tw : fit, share));
  dnnl::memory::desc src({16, p.Tb, C}, dt::f32, tag::abc), dst({16, p.Tb, K}, dt::f32, tag::abc),
      wany({16, C, K}, dt::f32, tag::any), wplain({16, C, K}, dt::f32, tag::abc);
  dnnl::matmul::primitive_desc pd;
  AG_CHECK(dnnl_util::try_make_pd(pd, [&] {
             return dnnl::matmul::primitive_desc(dnnl_util::engine(), src, wany, dst, dnnl_util::default_attr());
           }),
           "oneDNN has no matmul for the Winograd GEMM [16, ", p.Tb, ", ", C, "] x [16, ", C, ", ", K, "]");
  p.gemm.init(dnnl::matmul(pd), pd.scratchpad_desc());
  p.gemm.bind(DNNL_ARG_SRC, pd.src_desc());
  p.gemm.bind(DNNL_ARG_DST, pd.dst_desc());
  p.gemm.bind(DNNL_ARG_WEIGHTS, pd.weights_desc());
  p.pad_bytes = (p.gemm.scratch_bytes + 63) / 64 * 64;
  const uint64_t sum = checksum64(w, static_cast<size_t>(K * C * 9) * 4);
  p.u = shared_weights(sum, C, K, pd.weights_desc());
  if (!p.u.data()) {
    p.u = dnnl_util::counted_buffer(pd.weights_desc().get_size());  // (packed_weight_bytes counts it)
    const std::vector<float> u = transform_weights(w, C, K);
    dnnl_util::Reorder ro;
    ro.init(wplain, pd.weights_desc());
    if (ro.needed) ro.run_once(const_cast<float*>(u.data()), p.u.data());
    else std::memcpy(p.u.data(), u.data(), u.size() * 4);
    keep_weights(sum, C, K, pd.weights_desc(), p.u);
  }
  p.gemm.set(DNNL_ARG_WEIGHTS, p.u.data());
  p.bias = dnnl_util::alloc_buffer(static_cast<size_t>(K) * 4);
  if (bias) std::memcpy(p.bias.data(), bias, static_cast<size_t>(K) * 4);
  else std::memset(p.bias.data(), 0, static_cast<size_t>(K) * 4);
  p.zeros = dnnl_util::alloc_buffer(static_cast<size_t>(C) * 4);
  std::memset(p.zeros.data(), 0, static_cast<size_t>(C) * 4);
  return p;
}

namespace {

// n of L lanes (n <= L): a whole vector, or the masked tail (zeros past n)
template <int L>
[[gnu::always_inline]] inline void load_upto(typename V<L>::F& v, const float* p, int64_t n) {
  if (n == L) load<L>(v, p);
  else load_n(v, p, n);
}
template <int L>
[[gnu::always_inline]] inline void store_upto(float* p, const typename V<L>::F& v, int64_t n) {
  if (n == L) store<L>(p, v);
  else store_n(p, v, n);
}

// V[xi] = (B^T d B)[xi] for the 4x4 pixels d (C channels each), B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1];
// v[xi * sv + c]
template <int L>
[[gnu::always_inline]] inline void input_tile(const float* const* d, float* v, int64_t sv, int64_t C) {
  using F = typename V<L>::F;
  auto one = [&](int64_t c, int64_t n) {
    F x[16], s[16];
    for (int i = 0; i < 16; ++i) load_upto<L>(x[i], d[i] + c, n);
    for (int j = 0; j < 4; ++j) {  // columns: B^T d
      s[0 * 4 + j] = x[0 * 4 + j] - x[2 * 4 + j];
      s[1 * 4 + j] = x[1 * 4 + j] + x[2 * 4 + j];
      s[2 * 4 + j] = x[2 * 4 + j] - x[1 * 4 + j];
      s[3 * 4 + j] = x[1 * 4 + j] - x[3 * 4 + j];
    }
    for (int i = 0; i < 4; ++i) {  // rows: (B^T d) B
      const F r[4] = {s[i * 4 + 0] - s[i * 4 + 2], s[i * 4 + 1] + s[i * 4 + 2], s[i * 4 + 2] - s[i * 4 + 1],
                      s[i * 4 + 1] - s[i * 4 + 3]};
      for (int j = 0; j < 4; ++j) store_upto<L>(v + (i * 4 + j) * sv + c, r[j], n);
    }
  };
  int64_t c = 0;
  for (; c + L <= C; c += L) one(c, L);
  if (c < C) one(c, C - c);
}

// y = (A^T m A) + bias for one tile's 16 planes m[xi * sm + k], A^T = [1 1 1 0; 0 1 -1 -1]: out[a * 2 + b]
// (nullptr where the pixel is past the edge)
template <int L>
[[gnu::always_inline]] inline void output_tile(const float* m, int64_t sm, const float* bias, float* const* out,
                                               int64_t K, typename V<L>::F& check) {
  using F = typename V<L>::F;
  auto one = [&](int64_t k, int64_t n) {
    F x[16], r[8], b;
    for (int i = 0; i < 16; ++i) load_upto<L>(x[i], m + i * sm + k, n);
    for (int j = 0; j < 4; ++j) {  // A^T m
      r[0 * 4 + j] = x[0 * 4 + j] + x[1 * 4 + j] + x[2 * 4 + j];
      r[1 * 4 + j] = x[1 * 4 + j] - x[2 * 4 + j] - x[3 * 4 + j];
    }
    load_upto<L>(b, bias + k, n);
    for (int a = 0; a < 2; ++a) {  // (A^T m) A
      const F y[2] = {r[a * 4 + 0] + r[a * 4 + 1] + r[a * 4 + 2] + b, r[a * 4 + 1] - r[a * 4 + 2] - r[a * 4 + 3] + b};
      for (int e = 0; e < 2; ++e) {
        float* o = out[a * 2 + e];
        if (!o) continue;
        check += y[e] * 0.0f;  // (NaN from an inf or NaN result, else 0)
        store_upto<L>(o + k, y[e], n);
      }
    }
  };
  int64_t k = 0;
  for (; k + L <= K; k += L) one(k, L);
  if (k < K) one(k, K - k);
}

// The input transform of tiles [t0, t1) into V (planes of Tb rows), and the output transform of M into y.
template <int L>
[[gnu::always_inline]] inline void transform_in(const Plan& p, const float* x, int64_t t0, int64_t t1, float* V) {
  const float* zeros = static_cast<const float*>(p.zeros.data());
  for (int64_t t = t0; t < t1; ++t) {
    const auto [n, i, j] = p.tile(t);
    const float* d[16];
    for (int r = 0; r < 4; ++r) {
      const int64_t yy = 2 * i - p.pt + r;
      for (int s = 0; s < 4; ++s) {
        const int64_t xx = 2 * j - p.pl + s;
        d[r * 4 + s] = yy >= 0 && yy < p.H && xx >= 0 && xx < p.W ? x + ((n * p.H + yy) * p.W + xx) * p.C : zeros;
      }
    }
    input_tile<L>(d, V + (t - t0) * p.C, p.Tb * p.C, p.C);
  }
}
// (true where a result was inf or NaN)
template <int L>
[[gnu::always_inline]] inline bool transform_out(const Plan& p, const float* M, int64_t t0, int64_t t1, float* y) {
  const float* bias = static_cast<const float*>(p.bias.data());
  typename V<L>::F check{};
  for (int64_t t = t0; t < t1; ++t) {
    const auto [n, i, j] = p.tile(t);
    float* out[4];
    for (int a = 0; a < 2; ++a)
      for (int e = 0; e < 2; ++e) {
        const int64_t yy = 2 * i + a, xx = 2 * j + e;
        out[a * 2 + e] = yy < p.Ho && xx < p.Wo ? y + ((n * p.Ho + yy) * p.Wo + xx) * p.K : nullptr;
      }
    output_tile<L>(M + (t - t0) * p.K, p.Tb * p.K, bias, out, p.K, check);
  }
  float lanes[L];
  store<L>(lanes, check);
  for (int i = 0; i < L; ++i)
    if (lanes[i] != 0.0f) return true;
  return false;
}
AG_WRAPPER_AVX512 void transform_in_avx512(const Plan& p, const float* x, int64_t t0, int64_t t1, float* V) {
  transform_in<16>(p, x, t0, t1, V);
}
AG_WRAPPER_AVX2 void transform_in_avx2(const Plan& p, const float* x, int64_t t0, int64_t t1, float* V) {
  transform_in<8>(p, x, t0, t1, V);
}
AG_WRAPPER_AVX512 bool transform_out_avx512(const Plan& p, const float* M, int64_t t0, int64_t t1, float* y) {
  return transform_out<16>(p, M, t0, t1, y);
}
AG_WRAPPER_AVX2 bool transform_out_avx2(const Plan& p, const float* M, int64_t t0, int64_t t1, float* y) {
  return transform_out<8>(p, M, t0, t1, y);
}

// The direct convolution's sums for the output pixels of tiles [t0, t1): bias + sum of x w (times the folded
// scale), for a block whose Winograd result holds an inf or NaN. The transforms subtract inputs from one another,
// so one inf input makes inf - inf = NaN where the direct sum gives +-inf; this gives eager's infs and NaNs.
void direct(const Plan& p, const float* x, float* y, int64_t t0, int64_t t1) {
  const float* bias = static_cast<const float*>(p.bias.data());
  const float* scale = static_cast<const float*>(p.scale.data());
  for (int64_t t = t0; t < t1; ++t) {
    const auto [n, i, j] = p.tile(t);
    for (int64_t oy = 2 * i; oy < std::min(2 * i + 2, p.Ho); ++oy)
      for (int64_t ox = 2 * j; ox < std::min(2 * j + 2, p.Wo); ++ox) {
        float* o = y + ((n * p.Ho + oy) * p.Wo + ox) * p.K;
        for (int64_t k = 0; k < p.K; ++k) {
          const float s = scale ? scale[k] : 1.0f;
          float acc = bias[k];
          for (int64_t r = 0; r < 3; ++r) {
            const int64_t iy = oy + r - p.pt;
            if (iy < 0 || iy >= p.H) continue;
            for (int64_t q = 0; q < 3; ++q) {
              const int64_t ix = ox + q - p.pl;
              if (ix < 0 || ix >= p.W) continue;
              const float* xp = x + ((n * p.H + iy) * p.W + ix) * p.C;
              const float* wp = p.wd + k * p.C * 9 + r * 3 + q;
              for (int64_t c = 0; c < p.C; ++c) acc += xp[c] * (wp[c * 9] * s);
            }
          }
          o[k] = acc;
        }
      }
  }
}

}  // namespace

void block(const Plan& p, const float* x, float* y, int64_t t0, int64_t t1, float* slot, dnnl_util::Args& args,
           void* pad) {
  const int64_t C = p.C, Tb = p.Tb, nt = t1 - t0;
  float* V = slot;
  float* M = slot + 16 * Tb * C;
  const bool avx512 = isa::use_avx512();
  if (avx512) transform_in_avx512(p, x, t0, t1, V);
  else transform_in_avx2(p, x, t0, t1, V);
  if (nt < Tb)  // (the last block's unused rows: zeros, not whatever the scratch held)
    for (int xi = 0; xi < 16; ++xi) std::memset(V + (xi * Tb + nt) * C, 0, static_cast<size_t>((Tb - nt) * C) * 4);
  args.set(DNNL_ARG_SRC, V);
  args.set(DNNL_ARG_DST, M);
  p.gemm.run(args, pad);
  if (avx512 ? transform_out_avx512(p, M, t0, t1, y) : transform_out_avx2(p, M, t0, t1, y)) direct(p, x, y, t0, t1);
}

}  // namespace ag::winograd
