// Float vectors of L lanes (GCC vector types) for kernels written once for two widths: a body
// template<int L> that is always inlined into a wrapper compiled for AVX-512 (L = 16, zmm; the
// wrapper carries AG_TARGET_AVX512) and into a plain one (L = 8, the core's AVX2). Helpers that need
// an ISA's intrinsics come as an overload per width (the 16-lane ones compiled for AVX-512). Tails
// of fewer than L elements are masked loads and stores (zeros past the end), never a scalar loop.
// Include only in the kernel files that use it (it brings immintrin.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

#define AG_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
// The two wrappers of a body: every call in them inlined (the body and its helpers), not inlined
// themselves (each is one instruction set's code).
#define AG_WRAPPER_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), flatten, noinline))
#define AG_WRAPPER_AVX2 __attribute__((flatten, noinline))

// (16-lane vectors outside AVX-512 code: always inlined into the AVX-512 wrapper, never passed by
// value there; the warning comes at the end of the including file, so it stays off for it)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ag::simd {

template <int L>
struct V {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef int32_t I __attribute__((vector_size(4 * L)));
};
using F8 = V<8>::F;
using F16 = V<16>::F;
using I8 = V<8>::I;

template <int L>
[[gnu::always_inline]] inline void load(typename V<L>::F& v, const float* p) {
  __builtin_memcpy(&v, p, sizeof v);
}
template <int L>
[[gnu::always_inline]] inline void store(float* p, const typename V<L>::F& v) {
  __builtin_memcpy(p, &v, sizeof v);
}
template <int L>
[[gnu::always_inline]] inline void splat(typename V<L>::F& v, float x) {
  v = typename V<L>::F{} + x;
}

// Lanes [0, n) of p, zeros in the others (0 <= n <= L); only those lanes' bytes are read. (The
// 16-lane helpers are not always_inline -- the body's never-run AVX2-compiled copy could not inline
// them -- the AVX-512 wrappers are `flatten` (AG_WRAPPER_AVX512), which inlines them there.)
[[gnu::always_inline]] inline I8 mask8(int64_t n) {
  const I8 iota{0, 1, 2, 3, 4, 5, 6, 7};
  return iota < static_cast<int32_t>(n);
}
[[gnu::always_inline]] inline void load_n(F8& v, const float* p, int64_t n) {
  v = _mm256_maskload_ps(p, (__m256i)mask8(n));
}
[[gnu::always_inline]] inline void store_n(float* p, const F8& v, int64_t n) {
  _mm256_maskstore_ps(p, (__m256i)mask8(n), v);
}
AG_TARGET_AVX512 inline void load_n(F16& v, const float* p, int64_t n) {
  v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
AG_TARGET_AVX512 inline void store_n(float* p, const F16& v, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}
// Keeps lanes [0, n) of v, zeros the others.
[[gnu::always_inline]] inline F8 keep_n(const F8& v, int64_t n) { return (F8)((I8)v & mask8(n)); }
AG_TARGET_AVX512 inline F16 keep_n(const F16& v, int64_t n) {
  return _mm512_maskz_mov_ps(static_cast<__mmask16>((1u << n) - 1), v);
}

// Lanes [0, n) of v, `x` in the others.
[[gnu::always_inline]] inline F8 fill_n(const F8& v, int64_t n, float x) {
  const F8 f = F8{} + x;
  return mask8(n) ? v : f;
}
AG_TARGET_AVX512 inline F16 fill_n(const F16& v, int64_t n, float x) {
  return _mm512_mask_mov_ps(_mm512_set1_ps(x), static_cast<__mmask16>((1u << n) - 1), v);
}

// The lanes' sum, halving the vector at each step.
template <int L>
[[gnu::always_inline]] inline float hsum(const typename V<L>::F& v) {
  if constexpr (L == 4) {
    return (v[0] + v[2]) + (v[1] + v[3]);
  } else {
    typename V<L / 2>::F lo, hi;
    __builtin_memcpy(&lo, &v, sizeof lo);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hsum<L / 2>(lo + hi);
  }
}
// max(a, b) as std::max(a, b) lane by lane: a NaN in b is passed over, a NaN in a kept.
template <typename F>
[[gnu::always_inline]] inline F vmax(const F& a, const F& b) {
  return a < b ? b : a;
}
template <int L>
[[gnu::always_inline]] inline float hmax(const typename V<L>::F& v) {
  if constexpr (L == 1) {
    return v[0];
  } else {
    typename V<L / 2>::F lo, hi;
    __builtin_memcpy(&lo, &v, sizeof lo);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hmax<L / 2>(vmax(lo, hi));
  }
}

// reduce_util.h's vexp on every lane (the same operations, so the same Cephes polynomial, ~1 ulp):
// NaN propagates, large arguments saturate to inf, very negative ones flush to 0.
template <int L>
[[gnu::always_inline]] inline typename V<L>::F vexp(const typename V<L>::F& x) {
  using F = typename V<L>::F;
  using I = typename V<L>::I;
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  F vhi, vlo, z{};
  splat<L>(vhi, hi), splat<L>(vlo, lo);
  F xc = x < vlo ? vlo : x;
  xc = xc > vhi ? vhi : xc;  // NaN passes through both clamps
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const F fx = (xc * 1.44269504088896341f + magic) - magic;
  F g = xc - fx * 0.693359375f;
  g = g - fx * -2.12194440e-4f;
  F p = z + 1.9875691500e-4f;
  p = p * g + 1.3981999507e-3f;
  p = p * g + 8.3334519073e-3f;
  p = p * g + 4.1665795894e-2f;
  p = p * g + 1.6666665459e-1f;
  p = p * g + 5.0000001201e-1f;
  p = p * g * g + g + 1.0f;
  const I n = __builtin_convertvector(fx, I);
  // 2^n as two factors so that n = 128 (x near hi) does not overflow the exponent
  const I n1 = n >> 1, n2 = n - n1;
  const F s1 = (F)((n1 + 127) << 23), s2 = (F)((n2 + 127) << 23);
  F r = p * s1 * s2;
  F inf;
  splat<L>(inf, __builtin_inff());
  r = x > vhi ? inf : r;
  r = x < vlo ? z : r;
  return r;
}

// q[j] <- exp(p[j] - m) for j in [0, n) (q may be p; kStore false: nothing is stored); returns their sum,
// two accumulators over pairs of vectors, the tail masked. Softmax and attention's softmax pass share it.
template <int L, bool kStore = true>
[[gnu::always_inline]] inline float exp_sum(const float* p, float* q, int64_t n, float m) {
  using F = typename V<L>::F;
  F s0{}, s1{}, v, u;
  int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    load<L>(v, p + j), load<L>(u, p + j + L);
    v = vexp<L>(v - m), u = vexp<L>(u - m);
    if constexpr (kStore) store<L>(q + j, v), store<L>(q + j + L, u);
    s0 += v, s1 += u;
  }
  for (; j + L <= n; j += L) {
    load<L>(v, p + j), v = vexp<L>(v - m);
    if constexpr (kStore) store<L>(q + j, v);
    s0 += v;
  }
  if (j < n) {
    load_n(v, p + j, n - j);
    v = keep_n(vexp<L>(v - m), n - j);
    if constexpr (kStore) store_n(q + j, v, n - j);
    s1 += v;
  }
  return hsum<L>(s0 + s1);
}

}  // namespace ag::simd
