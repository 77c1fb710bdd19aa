// Math functions for the elementwise kernels. The float versions are branch
// free (selects only) so that GCC vectorizes the loops calling them (libm's
// scalar expf/tanhf/erff would not be): exp is Cephes' expf (about 1 ulp),
// tanh is Cephes' polynomial for |x| < 0.625 and 1 - 2/(e^2x + 1) above,
// erf is a Taylor series below 0.5 and Abramowitz-Stegun 7.1.26 above (the
// formula PyTorch's vectorized erf uses, abs. error < 1.5e-7). Overflow,
// underflow, infinities and NaN give what libm gives (denormal results of exp
// flush to 0). double uses libm.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ag::math {

inline float bits_to_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// a * b + c. For floating types one rounding (std::fma: an FMA instruction on x86-64-v3), the
// one place an FMA happens in the op rows: their sources build with -ffp-contract=off, so the
// compiler never forms one from `a * b + c` on its own there, and the functions below write
// theirs out, so they give the same bits wherever they are inlined. Integers: wrapping a*b+c.
template <typename C> inline C fmadd(C a, C b, C c) {
  if constexpr (std::is_floating_point_v<C>) return std::fma(a, b, c);
  else return static_cast<C>(a * b + c);
}
// c - a * b, one rounding for floating types (eager's sub with alpha: add with -alpha).
template <typename C> inline C fnmadd(C a, C b, C c) {
  if constexpr (std::is_floating_point_v<C>) return std::fma(-a, b, c);
  else return static_cast<C>(c - a * b);
}

// x = n ln 2 + r with |r| <= ln 2 / 2 (xc already clamped): returns e^r - 1 (Cephes' expf
// polynomial, without its final + 1) and sets n, and 2^n as two factors t1 t2 (so that n in
// [-126, 128] stays representable)
inline float exp_reduced_(float xc, float* n, float* t1, float* t2) {
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (std::floor does not vectorize
  // without -fno-trapping-math)
  *n = fmadd(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
  float r = fnmadd(*n, 0.693359375f, xc);
  r = fmadd(*n, 2.12194440e-4f, r);
  float z = r * r;
  float y = 1.9875691500e-4f;
  y = fmadd(y, r, 1.3981999507e-3f);
  y = fmadd(y, r, 8.3334519073e-3f);
  y = fmadd(y, r, 4.1665795894e-2f);
  y = fmadd(y, r, 1.6666665459e-1f);
  y = fmadd(y, r, 5.0000001201e-1f);
  int32_t ni = static_cast<int32_t>(*n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  *t1 = bits_to_float((n1 + 127) << 23);
  *t2 = bits_to_float((n2 + 127) << 23);
  return fmadd(y, z, r);
}

inline float exp_(float x) {
  const float hi = 88.72283935546875f, lo = -87.3365478515625f;
  float xc = x < lo ? lo : x;  // (NaN handled at the end)
  xc = xc > hi ? hi : xc;
  float n, t1, t2;
  float y = exp_reduced_(xc, &n, &t1, &t2) + 1.0f;
  float p = y * t1 * t2;
  p = x > hi ? std::numeric_limits<float>::infinity() : p;
  p = x < lo ? 0.0f : p;
  return x != x ? x : p;
}
inline double exp_(double x) { return std::exp(x); }

inline float tanh_(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float s = -5.70498872745e-3f;
  s = fmadd(s, z, 2.06390887954e-2f);
  s = fmadd(s, z, -5.37397155531e-2f);
  s = fmadd(s, z, 1.33314422036e-1f);
  s = fmadd(s, z, -3.33332819422e-1f);
  s = fmadd(s * z, x, x);
  float l = 1.0f - 2.0f / (exp_(2.0f * ax) + 1.0f);
  l = std::copysign(l, x);
  return ax < 0.625f ? s : l;
}
inline double tanh_(double x) { return std::tanh(x); }

inline float erf_(float x) {
  float ax = std::fabs(x);
  // small |x|: 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320)
  float z = x * x;
  float s = -1.0f / 1320.0f;
  s = fmadd(s, z, 1.0f / 216.0f);
  s = fmadd(s, z, -1.0f / 42.0f);
  s = fmadd(s, z, 1.0f / 10.0f);
  s = fmadd(s, z, -1.0f / 3.0f);
  s = fmadd(s, z, 1.0f) * x * 1.12837916709551257f;
  // large |x|: 1 - t (a1 + t (a2 + ...)) e^(-x^2), t = 1 / (1 + p|x|)
  float t = 1.0f / fmadd(0.3275911f, ax, 1.0f);
  float q = 1.061405429f;
  q = fmadd(q, t, -1.453152027f);
  q = fmadd(q, t, 1.421413741f);
  q = fmadd(q, t, -0.284496736f);
  q = fmadd(q, t, 0.254829592f);
  float l = fnmadd(q * t, exp_(-z), 1.0f);
  l = std::copysign(l, x);
  float r = ax < 0.5f ? s : l;
  return x != x ? x : r;
}
inline double erf_(double x) { return std::erf(x); }

// Cephes' logf (about 1 ulp): x = m 2^e with m in [sqrt(1/2), sqrt 2).
inline float log_(float x) {
  // denormals: scale into the normal range first
  bool tiny = x < 1.17549435e-38f;
  float xs = tiny ? x * 8388608.0f : x;
  int32_t i;
  std::memcpy(&i, &xs, 4);
  float e = static_cast<float>(((i >> 23) & 0xff) - 126) - (tiny ? 23.0f : 0.0f);
  float m = bits_to_float((i & 0x807fffff) | 0x3f000000);  // [0.5, 1)
  bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1.0f : e;
  float t = lo ? m + m - 1.0f : m - 1.0f;
  float z = t * t;
  float y = 7.0376836292e-2f;
  y = fmadd(y, t, -1.1514610310e-1f);
  y = fmadd(y, t, 1.1676998740e-1f);
  y = fmadd(y, t, -1.2420140846e-1f);
  y = fmadd(y, t, 1.4249322787e-1f);
  y = fmadd(y, t, -1.6668057665e-1f);
  y = fmadd(y, t, 2.0000714765e-1f);
  y = fmadd(y, t, -2.4999993993e-1f);
  y = fmadd(y, t, 3.3333331174e-1f);
  y = y * t * z;
  y = fmadd(-2.12194440e-4f, e, y);
  y = fmadd(-0.5f, z, y);
  float r = fmadd(0.693359375f, e, t + y);
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  r = (x < 0.0f || x != x) ? std::numeric_limits<float>::quiet_NaN() : r;
  return r;
}
inline double log_(double x) { return std::log(x); }

// e^x - 1 without the cancellation near 0: exp_'s reduction x = n ln2 + r and its polynomial
// without the final + 1 (p = e^r - 1, exact to about 1 ulp where r is small), then
// 2^n p + (2^n - 1), where 2^n - 1 is exact for the n that matter (|x| < 17: above, e^x or -1 dominate).
inline float expm1_(float x) {
  const float hi = 88.72283935546875f, lo = -17.0f;  // (e^-17 < 2^-24: the result is -1 in float)
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  float n, t1, t2;
  float p = exp_reduced_(xc, &n, &t1, &t2);  // e^r - 1
  float two_n = t1 * t2;
  float e = fmadd(p * t1, t2, two_n - 1.0f);
  e = x == 0.0f ? x : e;  // (-0 stays -0)
  e = x > hi ? std::numeric_limits<float>::infinity() : e;
  e = x < lo ? -1.0f : e;
  return x != x ? x : e;
}
inline double expm1_(double x) { return std::expm1(x); }

// log(1 + x) without the cancellation near 0: u = 1 + x rounded, then log(u) x / (u - 1), which
// the rounding of u does not spoil (Goldberg); x itself where u is 1 (|x| below half an ulp of 1,
// -0 and denormals included).
inline float log1p_(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  float r = log_(u) * (x / (d == 0.0f ? 1.0f : d));
  r = d == 0.0f ? x : r;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  return x != x ? x : r;
}
inline double log1p_(double x) { return std::log1p(x); }

template <typename C> inline C gelu_erf_(C x) {
  return C(0.5) * x * (C(1) + erf_(x * C(0.70710678118654752440)));
}
template <typename C> inline C gelu_tanh_(C x) {
  const C kBeta = C(0.79788456080286535588);  // sqrt(2) * (2/sqrt(pi)) * 0.5
  const C kKappa = C(0.044715);
  C inner = kBeta * fmadd(kKappa * x * x, x, x);  // x + kKappa x^3
  return C(0.5) * x * (C(1) + tanh_(inner));
}

// Rounding that is the identity on integers (as torch's floor/ceil/round/trunc of an integer
// tensor); round is half to even.
template <typename C, typename F> inline C on_floats(C x, F f) {
  if constexpr (std::is_floating_point_v<C>) return f(x);
  else return x;
}
template <typename C> inline C floor_(C x) { return on_floats(x, [](C v) { return std::floor(v); }); }
template <typename C> inline C ceil_(C x) { return on_floats(x, [](C v) { return std::ceil(v); }); }
template <typename C> inline C round_(C x) { return on_floats(x, [](C v) { return std::nearbyint(v); }); }
template <typename C> inline C trunc_(C x) { return on_floats(x, [](C v) { return std::trunc(v); }); }

// Integer power, e >= 0, wrapping like torch.
template <typename C> inline C ipow(C base, int64_t e) {
  using U = std::conditional_t<(sizeof(C) > 4), uint64_t, uint32_t>;
  U r = 1, b = static_cast<U>(base);
  while (e > 0) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<C>(r);
}

}  // namespace ag::math
