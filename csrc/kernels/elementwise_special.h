// Scalar math helpers of the listed elementwise ops (elementwise_ops.h), with
// PyTorch's results at special values (NaN, infinities, zeros, domain edges).
// C is the compute type: float (f32/bf16/f16), double, or an integer type.
// The special functions (erfinv, digamma, erfcx, log_ndtr, ndtri) are computed
// in double and rounded once, so the float results are at least as close to
// the exact value as PyTorch's float kernels:
//   erfinv   Giles' single-precision approximation, then Newton steps on erf
//            (on log erfc above 0.5, where erf cannot resolve the tail)
//   digamma  reflection below 0, recurrence up to x >= 10, then the asymptotic
//            series ln x - 1/2x - sum B_2k / (2k x^2k)
//   erfcx    exp(x^2) erfc(x) below 26 (x^2 split exactly with an fma), the
//            continued fraction of erfc above
//   ndtri    an initial guess (erfinv in the middle, the asymptotic tail
//            formula below 1e-10), then Newton steps on ndtr(x) = erfc(-x/sqrt 2)/2
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/elementwise_math.h"

namespace ag::math {

template <typename C> constexpr C inf() { return std::numeric_limits<C>::infinity(); }
template <typename C> constexpr C nan() { return std::numeric_limits<C>::quiet_NaN(); }

// ---- predicates (any dtype) ---------------------------------------------------------
template <typename C> inline bool isinf_(C x) {
  if constexpr (std::is_floating_point_v<C>) return std::fabs(x) == inf<C>();
  else return false;
}
template <typename C> inline bool isposinf_(C x) {
  if constexpr (std::is_floating_point_v<C>) return x == inf<C>();
  else return false;
}
template <typename C> inline bool isneginf_(C x) {
  if constexpr (std::is_floating_point_v<C>) return x == -inf<C>();
  else return false;
}
template <typename C> inline C bitwise_not_(C x) {  // (integers and bool)
  if constexpr (std::is_same_v<C, bool>) return !x;
  else return C(~x);
}
template <typename C> inline bool signbit_(C x) {
  // (copysign rather than std::signbit: GCC 12 ICEs vectorizing signbit into a bool store)
  if constexpr (std::is_floating_point_v<C>) return std::copysign(C(1), x) < C(0);
  else if constexpr (std::is_signed_v<C>) return x < C(0);
  else return false;
}

// ---- binary ---------------------------------------------------------------------------
template <typename C> inline C fmod_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return std::fmod(a, b);
  else if constexpr (std::is_signed_v<C>) return b == C(-1) ? C(0) : C(a % b);  // (min % -1 overflows)
  else return C(a % b);
}
// -a without signed overflow
template <typename C> inline C wrap_neg(C a) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U(0) - static_cast<U>(a));
}
template <typename C> inline C div_trunc_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::trunc(a / b);
  } else {
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1)) return wrap_neg(a);
    return C(a / b);
  }
}
// floor(a / b): c10::div_floor_floating for floats
template <typename C> inline C div_floor_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (b == C(0)) return a / b;
    C mod = std::fmod(a, b);
    C div = (a - mod) / b;
    if ((mod != C(0)) && ((b < C(0)) != (mod < C(0)))) div -= C(1);
    C fd;
    if (div != C(0)) {
      fd = std::floor(div);
      if (div - fd > C(0.5)) fd += C(1);
    } else {
      fd = std::copysign(C(0), a / b);
    }
    return fd;
  } else if constexpr (std::is_signed_v<C>) {
    if (b == C(-1)) return wrap_neg(a);
    C q = C(a / b), r = C(a % b);
    if (r != C(0) && ((r < C(0)) != (b < C(0)))) q = C(q - 1);
    return q;
  } else {
    return C(a / b);
  }
}
// the remainder with the sign of the divisor (Python's %)
template <typename C> inline C remainder_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    C mod = std::fmod(a, b);
    if ((mod != C(0)) && ((b < C(0)) != (mod < C(0)))) mod += b;
    return mod;
  } else if constexpr (std::is_signed_v<C>) {
    if (b == C(-1)) return C(0);
    C r = C(a % b);
    if (r != C(0) && ((r < C(0)) != (b < C(0)))) r = C(r + b);
    return r;
  } else {
    return C(a % b);
  }
}
// integers: exact, wrapping; a negative exponent gives 0 unless the base is 1 or -1
template <typename C> inline C pow_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::pow(a, b);
  } else {
    if constexpr (std::is_signed_v<C>) {
      if (b < C(0)) {
        if (a == C(1)) return C(1);
        if (a == C(-1)) return C((b % 2 == 0) ? 1 : -1);
        return C(0);
      }
    }
    return math::ipow<C>(a, static_cast<int64_t>(b));
  }
}
// NaN-propagating max/min (the first NaN operand)
template <typename C> inline C maximum_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? a : (b != b ? b : (a > b ? a : b));
  else return a > b ? a : b;
}
template <typename C> inline C minimum_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? a : (b != b ? b : (a < b ? a : b));
  else return a < b ? a : b;
}
// fmax/fmin ignore a NaN operand; on equal operands (0 and -0) they give a, as eager's float32
// kernel does (std::fmax leaves that choice open: its vector and scalar forms differed)
template <typename C> inline C fmax_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? b : (b > a ? b : a);
  else return a > b ? a : b;
}
template <typename C> inline C fmin_(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return a != a ? b : (b < a ? b : a);
  else return a < b ? a : b;
}
template <typename C> inline C logaddexp_(C a, C b) {
  if (std::isinf(a) && a == b) return a;
  const C m = a < b ? b : a;  // std::max
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}
template <typename C> inline C logaddexp2_(C a, C b) {
  if (std::isinf(a) && a == b) return a;
  const C m = a < b ? b : a;
  return m + std::log1p(std::exp2(-std::fabs(a - b))) * C(1.4426950408889634074);  // 1 / ln 2
}
template <typename C> inline C heaviside_(C a, C b) { return a == C(0) ? b : C(a > C(0)); }
template <typename C> inline C xlogy_(C x, C y) {
  if (y != y) return nan<C>();
  if (x == C(0)) return C(0);
  return x * std::log(y);
}
template <typename C> inline C xlog1py_(C x, C y) {
  if (y != y) return nan<C>();
  if (x == C(0)) return C(0);
  return x * std::log1p(y);
}
// Shifts like PyTorch: a left shift by a negative amount or by the bit width or
// more gives 0; such a right shift gives a >> (width - 1) for signed types (the
// sign), 0 for unsigned ones.
template <typename C> inline C shl_(C a, C b) {
  using U = std::make_unsigned_t<C>;
  constexpr int kBits = sizeof(C) * 8;
  if (static_cast<std::make_signed_t<C>>(b) < 0 || static_cast<int64_t>(b) >= kBits) return C(0);
  return static_cast<C>(static_cast<U>(static_cast<U>(a) << b));
}
template <typename C> inline C shr_(C a, C b) {
  constexpr int kMax = sizeof(C) * 8 - (std::is_signed_v<C> ? 1 : 0);
  if (static_cast<std::make_signed_t<C>>(b) < 0 || static_cast<int64_t>(b) >= kMax) return static_cast<C>(a >> kMax);
  return static_cast<C>(a >> b);
}
// |a| wrapping like C's abs on two's complement (abs(min) == min)
template <typename C> inline C wrap_abs(C a) {
  if constexpr (std::is_signed_v<C>) {
    using U = std::make_unsigned_t<C>;
    return a < C(0) ? static_cast<C>(U(0) - static_cast<U>(a)) : a;
  } else {
    return a;
  }
}
template <typename C> inline C gcd_(C a, C b) {
  a = wrap_abs(a);
  b = wrap_abs(b);
  while (a != C(0)) {
    C c = a;
    a = static_cast<C>(b % a);
    b = c;
  }
  return b;
}
// like PyTorch's abs(a / g * b): in int for 8/16-bit types (C's promotion),
// else in the type itself, wrapping
template <typename C> inline C lcm_(C a, C b) {
  const C g = gcd_(a, b);
  if (g == C(0)) return C(0);
  using W = std::conditional_t<(sizeof(C) < 4), int32_t, C>;
  using U = std::make_unsigned_t<W>;
  const W p = static_cast<W>(static_cast<U>(static_cast<W>(a / g)) * static_cast<U>(static_cast<W>(b)));
  return static_cast<C>(wrap_abs(p));
}

// ---- unary, floating -------------------------------------------------------------------
template <typename C> inline C lgamma_(C x) {
  int sign;
  if constexpr (std::is_same_v<C, float>) return ::lgammaf_r(x, &sign);  // (std::lgamma writes signgam)
  else return ::lgamma_r(x, &sign);
}
template <typename C> inline C sinc_(C x) {
  if (x == C(0)) return C(1);
  const C p = C(3.14159265358979323846) * x;
  return std::sin(p) / p;
}
template <typename C> inline C entr_(C x) {
  if (x != x) return x;
  if (x > C(0)) return -x * std::log(x);
  if (x == C(0)) return C(0);
  return -inf<C>();
}
template <typename C> inline C log_sigmoid_(C x) {
  const C m = x < C(0) ? x : C(0);
  return m - std::log1p(std::exp(-std::fabs(x)));
}
// logit with clamping to [lo, hi] (eps and 1 - eps in the tensor's dtype, as
// PyTorch rounds them); lo < 0: no clamping
template <typename C> inline C logit_(C x, C lo, C hi) {
  if (lo < C(0)) return x == C(1) ? inf<C>() : std::log(x / (C(1) - x));
  const C z = x < lo ? lo : (x > hi ? hi : x);
  return z == C(0) ? -inf<C>() : std::log(z / (C(1) - z));
}

inline double erfinv_d(double y) {
  if (!(std::fabs(y) <= 1.0)) return nan<double>();  // |y| > 1 or NaN
  const double ay = std::fabs(y);
  if (ay == 1.0) return std::copysign(inf<double>(), y);
  // Giles (2010), single precision; p * y approximates erfinv(y)
  double w = -std::log((1.0 - ay) * (1.0 + ay)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * ay;
  const double k = 1.1283791670955125739;  // 2 / sqrt(pi)
  for (int i = 0; i < 4; ++i) {
    const double d = k * std::exp(-x * x);
    if (d == 0.0) break;
    double step;
    if (ay <= 0.5) {
      step = (std::erf(x) - ay) / d;
    } else {  // Newton on log erfc(x) = log(1 - |y|): nearly linear in the tail, where erfc is convex
      const double ec = std::erfc(x);
      if (ec == 0.0) break;
      step = -(std::log(ec) - std::log(1.0 - ay)) * ec / d;
    }
    x -= step;
    if (std::fabs(step) <= 1e-17 * std::fabs(x)) break;
  }
  return std::copysign(x, y);
}

inline double digamma_d(double x) {
  constexpr double kPi = 3.14159265358979323846;
  if (x == 0.0) return std::copysign(inf<double>(), -x);
  if (x < 0.0) {
    if (x == std::trunc(x)) return nan<double>();  // poles (and -inf)
    double q;
    const double r = std::modf(x, &q);
    return digamma_d(1.0 - x) - kPi / std::tan(kPi * r);
  }
  double res = 0.0;
  while (x < 10.0) {
    res -= 1.0 / x;
    x += 1.0;
  }
  if (x == 10.0) return res + 2.25175258906672110764;  // digamma(10)
  const double z = 1.0 / (x * x);
  const double s =
      z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
  return res + std::log(x) - 0.5 / x - s;
}

inline double erfcx_d(double x) {
  if (x < 26.0) {
    const double hi = x * x, lo = std::fma(x, x, -hi);  // x^2 = hi + lo exactly
    if (hi > 710.0) return inf<double>();                 // x < -26.6 (and -inf)
    return std::exp(hi) * (1.0 + lo) * std::erfc(x);
  }
  // erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + (2/2)/(x + (3/2)/(x + ...))))
  double t = x;
  for (int k = 40; k >= 1; --k) t = x + 0.5 * k / t;
  return 0.56418958354775628695 / t;  // 1/sqrt(pi)
}

inline double log_ndtr_d(double x) {
  const double t = x * 0.70710678118654752440;
  if (x < -1.0) return std::log(erfcx_d(-t) / 2.0) - t * t;
  return std::log1p(-std::erfc(t) / 2.0);
}

inline double ndtri_lower(double q) {  // q in (0, 0.5]
  if (q == 0.5) return 0.0;
  double x;
  if (q > 1e-10) {
    x = 1.41421356237309504880 * erfinv_d(2.0 * q - 1.0);
  } else {
    const double t2 = -2.0 * std::log(q);
    x = -std::sqrt(t2 - std::log(t2) - 1.83787706640934548356);  // log(2 pi)
  }
  for (int i = 0; i < 8; ++i) {
    const double phi = 0.39894228040143267794 * std::exp(-0.5 * x * x);  // 1/sqrt(2 pi)
    if (phi == 0.0) break;
    const double step = (0.5 * std::erfc(-x * 0.70710678118654752440) - q) / phi;
    x -= step;
    if (std::fabs(step) <= 1e-16 * std::fabs(x)) break;
  }
  return x;
}
inline double ndtri_d(double p) {
  if (!(p >= 0.0 && p <= 1.0)) return nan<double>();
  if (p == 0.0) return -inf<double>();
  if (p == 1.0) return inf<double>();
  if (p > 0.5) return -ndtri_lower(1.0 - p);  // exact for p in (0.5, 1)
  return ndtri_lower(p);
}

// Modified Bessel functions of the first kind, orders 0 and 1, optionally
// scaled by exp(-|x|): the power series (positive terms, no cancellation) up to
// |x| = 50, the asymptotic series e^x / sqrt(2 pi x) sum_k a_k(nu) / x^k above
// (its terms fall below 1e-17 long before they start to grow there).
inline double bessel_i_d(int nu, double x, bool scaled) {
  if (x != x) return x;
  const double ax = std::fabs(x);
  double r;
  if (ax <= 50.0) {
    const double q = 0.25 * ax * ax;
    double term = nu == 0 ? 1.0 : 0.5 * ax, sum = term;
    for (int k = 1; k < 200; ++k) {
      term *= q / (static_cast<double>(k) * (k + nu));
      sum += term;
      if (term <= 1e-17 * sum) break;
    }
    r = scaled ? sum * std::exp(-ax) : sum;
  } else {
    const double mu = 4.0 * nu * nu;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 60; ++k) {
      const double odd = 2.0 * k - 1.0;
      term *= -(mu - odd * odd) / (k * 8.0 * ax);
      sum += term;
      if (std::fabs(term) <= 1e-17 * std::fabs(sum)) break;
    }
    const double pre = 0.39894228040143267794 / std::sqrt(ax);  // 1/sqrt(2 pi x)
    if (scaled) {
      r = pre * sum;
    } else {  // e^x split in two so that it overflows only when the result does
      const double h = std::exp(0.5 * ax);
      r = (pre * sum * h) * h;
    }
  }
  return (nu == 1 && x < 0.0) ? -r : r;
}

// Hurwitz zeta(x, q) = sum_k (q + k)^-x: the first terms directly, the rest by
// Euler-Maclaurin with the Bernoulli numbers (kA[j] = (2j+2)! / B_(2j+2)); PyTorch's
// results at the edges: x == 1 -> inf, x < 1 -> NaN, q a non-positive integer -> inf,
// q < 0 with a non-integer x -> NaN.
inline double zeta_d(double x, double q) {
  static constexpr double kA[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1892437580.3183792,
                                  74724249600.0, -2950130727918.164, 116467828143500.67, -4597978722407473.0,
                                  1.8152105401943546e+17, -7.166165256175667e+18};
  constexpr double kEps = 1.11022302462515654042e-16;
  if (x == 1.0) return inf<double>();
  if (x < 1.0) return nan<double>();
  if (q <= 0.0) {
    if (q == std::floor(q)) return inf<double>();
    if (x != std::floor(x)) return nan<double>();
  }
  double s = std::pow(q, -x), a = q, b = 0.0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1;
    a += 1.0;
    b = std::pow(a, -x);
    s += b;
    if (-kEps * s < b && b < kEps * s) return s;
  }
  const double w = a;
  s += b * w / (x - 1.0);
  s -= 0.5 * b;
  double f = 1.0, k = 0.0;
  for (int j = 0; j < 12; ++j) {
    f *= x + k;
    b /= w;
    const double t = f * b / kA[j];
    s += t;
    if (std::fabs(t / s) < kEps) return s;
    k += 1.0;
    f *= x + k;
    b /= w;
    k += 1.0;
  }
  return s;
}
// polygamma(n, x): digamma, PyTorch's trigamma formula (in C, like PyTorch), or
// (-1)^(n+1) n! zeta(n + 1, x)
template <typename C> inline C trigamma_(C x) {
  const C kPi = C(3.14159265358979323846);
  C sign = C(1), result = C(0);
  if (x < C(0.5)) {
    sign = C(-1);
    const C s = std::sin(kPi * x);
    result -= (kPi * kPi) / (s * s);
    x = C(1) - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += C(1) / (x * x);
    x += C(1);
  }
  const C ixx = C(1) / (x * x);
  result += (C(1) + C(1) / (C(2) * x) + ixx * (C(1) / C(6) - ixx * (C(1) / C(30) - ixx * (C(1) / C(42))))) / x;
  return sign * result;
}
inline double digamma_d(double x);
template <typename C> inline C polygamma_(C x, C n) {
  if (n == C(0)) return static_cast<C>(digamma_d(x));
  if (n == C(1)) return trigamma_(x);
  const double nd = static_cast<double>(n);
  const double sign = (static_cast<int64_t>(nd) % 2) ? 1.0 : -1.0;
  return static_cast<C>(sign * std::exp(std::lgamma(nd + 1.0)) * zeta_d(nd + 1.0, x));
}
template <typename C> inline C zeta_(C x, C q) { return static_cast<C>(zeta_d(x, q)); }

template <typename C> inline C erfinv_(C x) { return static_cast<C>(erfinv_d(x)); }
template <typename C> inline C digamma_(C x) { return static_cast<C>(digamma_d(x)); }
template <typename C> inline C erfcx_(C x) { return static_cast<C>(erfcx_d(x)); }
template <typename C> inline C log_ndtr_(C x) { return static_cast<C>(log_ndtr_d(x)); }
template <typename C> inline C ndtri_(C x) { return static_cast<C>(ndtri_d(x)); }
template <typename C> inline C i0_(C x) { return static_cast<C>(bessel_i_d(0, x, false)); }
template <typename C> inline C i0e_(C x) { return static_cast<C>(bessel_i_d(0, x, true)); }
template <typename C> inline C i1_(C x) { return static_cast<C>(bessel_i_d(1, x, false)); }
template <typename C> inline C i1e_(C x) { return static_cast<C>(bessel_i_d(1, x, true)); }

}  // namespace ag::math
