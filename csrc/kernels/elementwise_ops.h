// Elementwise math ops as lists (X-macros). One line here gives an op its
// single-op kernel and registration (elementwise_unary.cpp /
// elementwise_binary.cpp), its fused_elementwise instruction code, encoding,
// dtype rule and interpreter case (fused_elementwise.{h,cpp}); the front adds
// one lowering row. The expression is written once, in the compute type C
// (float for f32/bf16/f16, double for f64, the integer type for ints), and is
// what both the single-op kernel and the fused interpreter evaluate, so a
// fused group stays bit-identical to the unfused kernels.
//
// Kinds: ew::kF floating, kFI floating or integer, kI integer, kAll any dtype,
// | kNoHalf: not bfloat16/float16 (ops whose half-precision result is not
// "compute in float, round once", like nextafter). Ops are fused only on
// float32/bfloat16/float16 values (predicates also on bool).
#pragma once

// Unary, result of the input's dtype.  X(name, kinds, is_math, expr of x)
#define AG_EW_UNARY_OPS(X)                                       \
  X(acos, kF, true, std::acos(x))                                \
  X(asin, kF, true, std::asin(x))                                \
  X(atan, kF, true, std::atan(x))                                \
  X(acosh, kF, true, std::acosh(x))                              \
  X(asinh, kF, true, std::asinh(x))                              \
  X(atanh, kF, true, std::atanh(x))                              \
  X(sinh, kF, true, std::sinh(x))                                \
  X(cosh, kF, true, std::cosh(x))                                \
  X(tan, kF, true, std::tan(x))                                  \
  X(log2, kF, true, std::log2(x))                                \
  X(log10, kF, true, std::log10(x))                              \
  X(exp2, kF, true, std::exp2(x))                                \
  X(erfc, kF, true, std::erfc(x))                                \
  X(erfinv, kF, true, math::erfinv_(x))                          \
  X(lgamma, kF, true, math::lgamma_(x))                          \
  X(digamma, kF, true, math::digamma_(x))                        \
  X(sinc, kF, true, math::sinc_(x))                              \
  X(frac, kF, false, C(x - std::trunc(x)))                       \
  X(entr, kF, true, math::entr_(x))                              \
  X(erfcx, kF, true, math::erfcx_(x))                            \
  X(log_ndtr, kF, true, math::log_ndtr_(x))                      \
  X(ndtri, kF, true, math::ndtri_(x))                            \
  X(i0, kF, true, math::i0_(x))                                  \
  X(i0e, kF, true, math::i0e_(x))                                \
  X(i1, kF, true, math::i1_(x))                                  \
  X(i1e, kF, true, math::i1e_(x))                                \
  X(log_sigmoid, kF, true, math::log_sigmoid_(x))

// Unary, bool result.  X(name, kinds, expr of x)
#define AG_EW_PREDICATE_OPS(X)            \
  X(isinf, kAll, math::isinf_(x))         \
  X(isposinf, kAll, math::isposinf_(x))   \
  X(isneginf, kAll, math::isneginf_(x))   \
  X(signbit, kAll, math::signbit_(x))

// Unary with up to three numeric attributes, read as p0, p1, p2 (type C);
// "" names an unused one.  X(name, kinds, is_math, attr0, attr1, attr2, expr)
#define AG_EW_UNARY_PARAM_OPS(X)                                                                    \
  X(logit, kF, true, "lo", "hi", "", math::logit_(x, p0, p1))                                            \
  X(nan_to_num, kF, false, "nan", "posinf", "neginf",                                               \
    C(x != x ? p0 : (x == math::inf<C>() ? p1 : (x == -math::inf<C>() ? p2 : x))))                  \
  X(elu, kF, true, "alpha", "scale", "input_scale",                                                 \
    C(x <= C(0) ? C(std::expm1(x * p2) * C(p0 * p1)) : C(x * p1)))                                  \
  X(threshold, kFI, false, "threshold", "value", "", C(x <= p0 ? p1 : x))                           \
  X(polygamma, kF, true, "n", "", "", math::polygamma_(x, p0))

// Binary, result of the (common) input dtype.  X(name, kinds, is_math, check_zero, expr of a, b)
// check_zero: integer divisors are checked for zero (PyTorch raises).
#define AG_EW_BINARY_OPS(X)                                                  \
  X(hypot, kF, true, false, std::hypot(a, b))                                \
  X(copysign, kF, false, false, std::copysign(a, b))                         \
  X(fmod, kFI, false, true, math::fmod_(a, b))                               \
  X(fmax, kFI, false, false, math::fmax_(a, b))                              \
  X(fmin, kFI, false, false, math::fmin_(a, b))                              \
  X(logaddexp, kF, true, false, math::logaddexp_(a, b))                      \
  X(logaddexp2, kF, true, false, math::logaddexp2_(a, b))                    \
  X(heaviside, kAll, false, false, math::heaviside_(a, b))                   \
  X(nextafter, kF | kNoHalf, false, false, std::nextafter(a, b))             \
  X(xlogy, kF, true, false, math::xlogy_(a, b))                              \
  X(xlog1py, kF, true, false, math::xlog1py_(a, b))                          \
  X(zeta, kF, true, false, math::zeta_(a, b))                                \
  X(prelu, kF, false, false, C(a > C(0) ? a : C(b * a)))                     \
  X(bitwise_left_shift, kI, false, false, math::shl_(a, b))                  \
  X(bitwise_right_shift, kI, false, false, math::shr_(a, b))                 \
  X(gcd, kI, false, false, math::gcd_(a, b))                                 \
  X(lcm, kI, false, false, math::lcm_(a, b))
