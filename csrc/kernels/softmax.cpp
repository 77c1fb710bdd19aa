// softmax / log_softmax {dim}: numerically stable (subtract the max), computed
// in float for bf16/f16 (double for f64), with a vectorized exp. The last dim is
// a row loop; another dim works on tiles of the kept inner dim.
// FP ops never trap here: lets GCC if-convert and vectorize the NaN-aware selects
// and the vectorized exp (results are unchanged; this is not -ffast-math).
#pragma GCC optimize("no-trapping-math")
#include "kernels/isa.h"
#include "kernels/reduce_util.h"
#include "kernels/simd.h"

namespace ag {
namespace {

constexpr int kLanes = 32;
constexpr int kTile = 64;
constexpr int64_t kBuf = 4096;  // row buffer (floats) of the 16-bit softmax

std::vector<TensorType> infer_softmax(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(is_floating(in[0].dtype), "softmax: input must be floating, got ", in[0].str());
  normalize_dim(a.i("dim"), std::max<int64_t>(in[0].rank(), 1));
  return {in[0]};
}

// f32 rows [o0, o1), written once for L lanes (kernels/simd.h): the max over four vectors, then
// the exponentials (stored, softmax) and their sum, then the scaling; the tail is masked (-inf past
// the end for the max, 0 for the sum). The max is std::max's (a NaN is passed over; the exp of it
// makes the row NaN), the exp reduce_util.h's vexp on every lane.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <int L, bool kLog>
[[gnu::always_inline]] inline void softmax_f32(int64_t o0, int64_t o1, int64_t R, const float* x, float* y) {
  using F = typename simd::V<L>::F;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t nv = R / L * L, rem = R - nv;
  for (int64_t o = o0; o < o1; ++o) {
    const float* p = x + o * R;
    float* q = y + o * R;
    F v, m0, m1, m2, m3;
    simd::splat<L>(m0, kNegInf), m1 = m2 = m3 = m0;
    int64_t i = 0;
    for (; i + 4 * L <= R; i += 4 * L) {
      F b0, b1, b2, b3;
      simd::load<L>(b0, p + i), simd::load<L>(b1, p + i + L), simd::load<L>(b2, p + i + 2 * L),
          simd::load<L>(b3, p + i + 3 * L);
      m0 = simd::vmax(m0, b0), m1 = simd::vmax(m1, b1), m2 = simd::vmax(m2, b2), m3 = simd::vmax(m3, b3);
    }
    for (; i < nv; i += L) simd::load<L>(v, p + i), m0 = simd::vmax(m0, v);
    if (rem) simd::load_n(v, p + nv, rem), m1 = simd::vmax(m1, simd::fill_n(v, rem, kNegInf));
    const float m = simd::hmax<L>(simd::vmax(simd::vmax(m0, m1), simd::vmax(m2, m3)));
    const float s = simd::exp_sum<L, !kLog>(p, q, R, m);
    if constexpr (kLog) {
      const float ls = std::log(s);
      for (i = 0; i < nv; i += L) simd::load<L>(v, p + i), simd::store<L>(q + i, v - m - ls);
      if (rem) simd::load_n(v, p + nv, rem), simd::store_n(q + nv, v - m - ls, rem);
    } else {
      const float inv = 1.f / s;
      for (i = 0; i < nv; i += L) simd::load<L>(v, q + i), simd::store<L>(q + i, v * inv);
      if (rem) simd::load_n(v, q + nv, rem), simd::store_n(q + nv, v * inv, rem);
    }
  }
}
template <bool kLog>
AG_WRAPPER_AVX512 void softmax_f32_avx512(int64_t o0, int64_t o1, int64_t R, const float* x, float* y) {
  softmax_f32<16, kLog>(o0, o1, R, x, y);
}
template <bool kLog>
AG_WRAPPER_AVX2 void softmax_f32_avx2(int64_t o0, int64_t o1, int64_t R, const float* x, float* y) {
  softmax_f32<8, kLog>(o0, o1, R, x, y);
}
#pragma GCC diagnostic pop

template <typename T, bool kLog>
void softmax_rows(int64_t O, int64_t R, const T* x, T* y) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    const bool avx512 = isa::use_avx512();
    parallel_for(O, grain_for(3 * R), [&](int64_t b, int64_t e) {
      if (avx512) softmax_f32_avx512<kLog>(b, e, R, x, y);
      else softmax_f32_avx2<kLog>(b, e, R, x, y);
    });
    return;
  }
  parallel_for(O, grain_for(3 * R), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* p = x + o * R;
      T* q = y + o * R;
      A ml[kLanes];
      for (int j = 0; j < kLanes; ++j) ml[j] = -std::numeric_limits<A>::infinity();
      int64_t i = 0;
      for (; i + kLanes <= R; i += kLanes)
#pragma omp simd
        for (int j = 0; j < kLanes; ++j) ml[j] = std::max(ml[j], load(p[i + j]));
      A m = -std::numeric_limits<A>::infinity();
      for (int j = 0; j < kLanes; ++j) m = std::max(m, ml[j]);
      for (; i < R; ++i) m = std::max(m, load(p[i]));
      A s = 0;
      if constexpr (!kLog && !std::is_same_v<T, A>) {
        if (R <= kBuf) {  // bf16/f16: keep the float exponentials in a row buffer
          A buf[kBuf];
#pragma omp simd reduction(+ : s)
          for (int64_t k = 0; k < R; ++k) {
            buf[k] = vexp(load(p[k]) - m);
            s += buf[k];
          }
          const A inv = A(1) / s;
#pragma omp simd
          for (int64_t k = 0; k < R; ++k) store(q[k], buf[k] * inv);
          continue;
        }
      }
      if constexpr (!kLog && std::is_same_v<T, A>) {
        // f32/f64: store the exponentials, then scale them
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < R; ++k) {
          A ev = vexp(p[k] - m);
          q[k] = ev;
          s += ev;
        }
        const A inv = A(1) / s;
#pragma omp simd
        for (int64_t k = 0; k < R; ++k) q[k] *= inv;
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < R; ++k) s += vexp(load(p[k]) - m);
        if constexpr (kLog) {
          const A ls = std::log(s);
#pragma omp simd
          for (int64_t k = 0; k < R; ++k) store(q[k], load(p[k]) - m - ls);
        } else {  // 16-bit rows longer than the buffer: exp again
          const A inv = A(1) / s;
#pragma omp simd
          for (int64_t k = 0; k < R; ++k) store(q[k], vexp(load(p[k]) - m) * inv);
        }
      }
    }
  });
}

template <typename T, bool kLog>
void softmax_outer(int64_t O, int64_t R, int64_t I, const T* x, T* y) {
  using A = acc_t<T>;
  const int64_t ntile = (I + kTile - 1) / kTile;
  parallel_for(O * ntile, grain_for(3 * R * kTile), [&](int64_t b, int64_t e) {
    A m[kTile], s[kTile];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
      const int64_t base = o * R * I + i0;
      #pragma omp simd
      for (int64_t j = 0; j < w; ++j) m[j] = -std::numeric_limits<A>::infinity(), s[j] = 0;
      for (int64_t r = 0; r < R; ++r)
        #pragma omp simd
        for (int64_t j = 0; j < w; ++j) m[j] = std::max(m[j], load(x[base + r * I + j]));
      for (int64_t r = 0; r < R; ++r)
        #pragma omp simd
        for (int64_t j = 0; j < w; ++j) s[j] += vexp(load(x[base + r * I + j]) - m[j]);
      if constexpr (kLog) {
        #pragma omp simd
        for (int64_t j = 0; j < w; ++j) s[j] = m[j] + std::log(s[j]);
        for (int64_t r = 0; r < R; ++r)
          #pragma omp simd
          for (int64_t j = 0; j < w; ++j) store(y[base + r * I + j], load(x[base + r * I + j]) - s[j]);
      } else {
        #pragma omp simd
        for (int64_t j = 0; j < w; ++j) s[j] = A(1) / s[j];
        for (int64_t r = 0; r < R; ++r)
          #pragma omp simd
          for (int64_t j = 0; j < w; ++j)
            store(y[base + r * I + j], vexp(load(x[base + r * I + j]) - m[j]) * s[j]);
      }
    }
  });
}

template <bool kLog>
std::unique_ptr<Kernel> make_softmax(const Node& n, const BuildCtx& ctx) {
  const TensorType& t = n.inputs[0]->type;
  int64_t O = 1, R = 1, I = 1;
  if (t.rank() > 0) split_at_dim(t.shape(), normalize_dim(n.attrs.i("dim"), t.rank()), O, R, I);
  const char* name = kLog ? "log_softmax" : "softmax";
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(t.dtype, name, [&] {
    k = make_fn_kernel(name, [O, R, I](void* const* in, void* const* out) {
      auto x = static_cast<const scalar_t*>(in[0]);
      auto y = static_cast<scalar_t*>(out[0]);
      if (O * R * I == 0) return;
      if (I == 1) softmax_rows<scalar_t, kLog>(O, R, x, y);
      else softmax_outer<scalar_t, kLog>(O, R, I, x, y);
    });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(softmax, {.name = "softmax", .min_inputs = 1, .max_inputs = 1, .infer = infer_softmax,
                         .make_kernel = make_softmax<false>, .props = kNoProps});
AG_REGISTER_OP(log_softmax, {.name = "log_softmax", .min_inputs = 1, .max_inputs = 1, .infer = infer_softmax,
                             .make_kernel = make_softmax<true>, .props = kNoProps});

}  // namespace ag
