// The elementwise ops, as lists (X-macros): one row per op, old and new. A row gives an op
//  - its single-op kernel and registration (elementwise_unary.cpp / elementwise_binary.cpp),
//  - its fused_elementwise instruction code, encoding and interpreter case
//    (fused_elementwise.{h,cpp}),
//  - for rows marked kEpi, its GEMM/convolution epilogue form (ops the fuse_epilogues pass may
//    absorb into linear/matmul/conv; run by the same interpreter case, kernels/epilogue.cpp),
// and the front adds one lowering row (python/airgraph/lowering). The expression is written
// once, in the compute type C (float for f32/bf16/f16, double for f64, the integer type for
// ints, bool for bool), and it is the one implementation that the single-op kernel, the fused
// interpreter and the epilogue all evaluate: the three give bit-identical results, NaN and
// infinities included, by construction (tests/cpp/test_op_rows.cpp checks every row).
//
// Rounding (the README's "Numerics"): an expression rounds exactly as written, once per
// operation in the compute type C. A multiply and an add become one fused multiply-add only
// where the row says math::fmadd / math::fnmadd, as eager's kernel for that op does (add and sub
// with alpha); the row sources build with -ffp-contract=off (CMakeLists.txt), so no compiler,
// optimization level, sanitizer or ISA variant forms one elsewhere. A bfloat16/float16 result rounds once, at its
// store. NaN: a result is NaN in every form exactly where it is in the others (and in eager);
// which NaN (sign and payload) is not specified, as in IEEE 754 and eager PyTorch (on x86,
// inf - inf gives a negative NaN, a NaN operand passes its own on, and a compiler may order a
// commutative op's operands either way): the tests compare a NaN with any NaN. The same build
// compiled at -O1 (tests/cpp/test_cross_build.cpp) must give the release build's bits.
//
// Kinds: ew::kF floating, kFI floating or integer, kI integer, kIB integer or bool, kAll any
// dtype, | kNoHalf: not bfloat16/float16 (ops whose half-precision result is not
// "compute in float, round once", like nextafter). Ops are fused only on
// float32/bfloat16/float16 values (computed in float), predicates also on bool, and binary and
// compare rows that take bool also on bool values (computed as bool, C = bool).
// Flags: ew::kMath (a transcendental: larger parallel grain, weighs more in a fused group),
// ew::kEpi (may run as an epilogue), or 0.
//
// The expressions follow PyTorch's formulas: the exact GELU 0.5 x (1 + erf(x / sqrt 2)), its tanh
// form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x / (1 + exp(-x)) for SiLU; round is half
// to even, sign(NaN) = 0, and ReLU and clamp propagate NaN. On integers floor/ceil/round/trunc are
// the identity, like torch.
//
// Adding an activation: one row here (AG_EW_UNARY_OPS, or AG_EW_UNARY_PARAM_OPS when it takes
// numeric attributes) and one row in the front's lowering table. Nothing else. A binary op: a row
// of AG_EW_BINARY_OPS (AG_EW_COMPARE_OPS for a bool result), and one of AG_EW_BINARY_FORMS for
// each attribute setting that changes its formula.
#pragma once

namespace ag::ew {
enum RowFlags : int { kMathRow = 1, kEpi = 2, kOpmath = 4, kIntDiv = 8 };  // (kMathRow: kMath in the lists below)
constexpr int kMath = kMathRow;
}  // namespace ag::ew
// Unary, result of the input's dtype.  X(name, kinds, flags, expr of x)
#define AG_EW_UNARY_OPS(X)                                       \
  X(neg, kFI, 0, C(-x))                                          \
  X(abs, kFI, 0, C(x < C(0) ? C(-x) : x))                        \
  X(relu, kFI, kEpi, C(x < C(0) ? C(0) : x))                     \
  X(reciprocal, kF, 0, C(C(1) / x))                              \
  X(sqrt, kF, 0, std::sqrt(x))                                   \
  X(rsqrt, kF, 0, C(C(1) / std::sqrt(x)))                        \
  X(sign, kFI, 0, C(int(C(0) < x) - int(x < C(0))))              \
  X(floor, kFI, 0, math::floor_(x))                              \
  X(ceil, kFI, 0, math::ceil_(x))                                \
  X(round, kFI, 0, math::round_(x))                              \
  X(trunc, kFI, 0, math::trunc_(x))                              \
  X(tanh, kF, kMath | kEpi, math::tanh_(x))                      \
  X(sigmoid, kF, kMath | kEpi, C(C(1) / (C(1) + math::exp_(-x))))  \
  X(silu, kF, kMath | kEpi, C(x / (C(1) + math::exp_(-x))))        \
  X(erf, kF, kMath, math::erf_(x))                               \
  X(exp, kF, kMath, math::exp_(x))                               \
  X(log, kF, kMath, math::log_(x))                               \
  X(log1p, kF, kMath, math::log1p_(x))                             \
  X(expm1, kF, kMath, math::expm1_(x))                             \
  X(sin, kF, kMath, std::sin(x))                                 \
  X(cos, kF, kMath, std::cos(x))                                 \
  X(acos, kF, kMath, std::acos(x))                                \
  X(asin, kF, kMath, std::asin(x))                                \
  X(atan, kF, kMath, std::atan(x))                                \
  X(acosh, kF, kMath, std::acosh(x))                              \
  X(asinh, kF, kMath, std::asinh(x))                              \
  X(atanh, kF, kMath, std::atanh(x))                              \
  X(sinh, kF, kMath, std::sinh(x))                                \
  X(cosh, kF, kMath, std::cosh(x))                                \
  X(tan, kF, kMath, std::tan(x))                                  \
  X(log2, kF, kMath, std::log2(x))                                \
  X(log10, kF, kMath, std::log10(x))                              \
  X(exp2, kF, kMath, std::exp2(x))                                \
  X(erfc, kF, kMath, std::erfc(x))                                \
  X(erfinv, kF, kMath, math::erfinv_(x))                          \
  X(lgamma, kF, kMath, math::lgamma_(x))                          \
  X(digamma, kF, kMath, math::digamma_(x))                        \
  X(sinc, kF, kMath, math::sinc_(x))                              \
  X(frac, kF, 0, C(x - std::trunc(x)))                       \
  X(entr, kF, kMath, math::entr_(x))                              \
  X(erfcx, kF, kMath, math::erfcx_(x))                            \
  X(log_ndtr, kF, kMath, math::log_ndtr_(x))                      \
  X(ndtri, kF, kMath, math::ndtri_(x))                            \
  X(i0, kF, kMath, math::i0_(x))                                  \
  X(i0e, kF, kMath, math::i0e_(x))                                \
  X(i1, kF, kMath, math::i1_(x))                                  \
  X(i1e, kF, kMath, math::i1e_(x))                                \
  X(log_sigmoid, kF, kMath, math::log_sigmoid_(x))                \
  X(bitwise_not, kIB, 0, math::bitwise_not_(x))

// Unary, bool result.  X(name, kinds, expr of x)
#define AG_EW_PREDICATE_OPS(X)            \
  X(isnan, kAll, x != x)                  \
  X(logical_not, kAll, x == C(0))         \
  X(isinf, kAll, math::isinf_(x))         \
  X(isposinf, kAll, math::isposinf_(x))   \
  X(isneginf, kAll, math::isneginf_(x))   \
  X(signbit, kAll, math::signbit_(x))

// Unary with up to three numeric attributes, read as p0, p1, p2 (type C): "name", or
// "name=default" when the attribute may be absent; "" names an unused one.
//   X(name, kinds, flags, attr0, attr1, attr2, expr)
#define AG_EW_UNARY_PARAM_OPS(X)                                                                    \
  X(leaky_relu, kF, kEpi, "negative_slope=0.01", "", "", C(x > C(0) ? x : C(x * p0)))               \
  X(logit, kF, kMath, "lo", "hi", "", math::logit_(x, p0, p1))                                            \
  X(nan_to_num, kF, 0, "nan", "posinf", "neginf",                                               \
    C(x != x ? p0 : (x == math::inf<C>() ? p1 : (x == -math::inf<C>() ? p2 : x))))                  \
  X(elu, kF, kMath, "alpha", "scale", "input_scale",                                                 \
    C(x <= C(0) ? C(math::expm1_(x * p2) * C(p0 * p1)) : C(x * p1)))                                  \
  X(threshold, kFI, 0, "threshold", "value", "", C(x <= p0 ? p1 : x))                           \
  X(polygamma, kF, kMath, "n", "", "", math::polygamma_(x, p0))                                          \
  X(hardshrink, kF, kEpi, "lambd=0.5", "", "", C((x >= -p0 && x <= p0) ? C(0) : x))

// Unary ops whose attributes need code (their functors are in kernels/elementwise_rows.h, with
// the same two constructors and one operator() as the generated ones).  X(name, Functor, kinds, flags)
#define AG_EW_UNARY_FUNCTOR_OPS(X)       \
  X(gelu, Gelu, kF, kMath | kEpi)        \
  X(clamp, Clamp, kFI, kEpi)             \
  X(pow_scalar, PowScalar, kFI, kMath)

// Binary, result of the (common) input dtype.  X(name, kinds, flags, expr of a, b)
// More flags: ew::kOpmath (also takes a 0-d float32 scalar with a bfloat16/float16 tensor, computed
// in float32 like PyTorch's Python scalars), ew::kIntDiv (integer divisors are checked for zero:
// PyTorch raises). kEpi on a binary row: a GEMM/conv binary post-op, out = out op operand
// (run by kernels/epilogue.cpp through the row, or as oneDNN's binary post-op: one IEEE operation).
// maximum/minimum propagate NaN; floor_divide and remainder take the sign of the divisor (Python's
// rule, c10's div_floor_floating); integer pow wraps (negative exponents: 0 unless the base is +-1).
#define AG_EW_BINARY_OPS(X)                                              \
  X(add, kAll, kEpi | kOpmath, C(a + b))                                 \
  X(sub, kFI, kEpi | kOpmath, C(a - b))                                  \
  X(mul, kAll, kEpi | kOpmath, C(a * b))                                 \
  X(div, kF, kEpi | kOpmath, C(a / b))                                   \
  X(floor_divide, kFI, kIntDiv, math::div_floor_(a, b))                  \
  X(remainder, kFI, kIntDiv, math::remainder_(a, b))                     \
  X(pow, kFI, kMath, math::pow_(a, b))                                   \
  X(maximum, kAll, 0, math::maximum_(a, b))                              \
  X(minimum, kAll, 0, math::minimum_(a, b))                              \
  X(atan2, kF, kMath, std::atan2(a, b))                                  \
  X(bitwise_and, kIB, 0, C(a & b))                                       \
  X(bitwise_or, kIB, 0, C(a | b))                                        \
  X(bitwise_xor, kIB, 0, C(a ^ b))                                       \
  X(hypot, kF, kMath, std::hypot(a, b))                                  \
  X(copysign, kF, 0, std::copysign(a, b))                                \
  X(fmod, kFI, kIntDiv, math::fmod_(a, b))                               \
  X(fmax, kFI, 0, math::fmax_(a, b))                                     \
  X(fmin, kFI, 0, math::fmin_(a, b))                                     \
  X(logaddexp, kF, kMath, math::logaddexp_(a, b))                        \
  X(logaddexp2, kF, kMath, math::logaddexp2_(a, b))                      \
  X(heaviside, kAll, 0, math::heaviside_(a, b))                          \
  X(nextafter, kF | kNoHalf, 0, std::nextafter(a, b))                    \
  X(xlogy, kF, kMath, math::xlogy_(a, b))                                \
  X(xlog1py, kF, kMath, math::xlog1py_(a, b))                            \
  X(zeta, kF, kMath, math::zeta_(a, b))                                  \
  X(prelu, kF, 0, C(a > C(0) ? a : C(b * a)))                            \
  X(bitwise_left_shift, kI, 0, math::shl_(a, b))                         \
  X(bitwise_right_shift, kI, 0, math::shr_(a, b))                        \
  X(gcd, kI, 0, math::gcd_(a, b))                                        \
  X(lcm, kI, 0, math::lcm_(a, b))

// Forms of the binary ops above that a node's attributes select, each with its own kernel and
// instruction; the op's own row runs when no form's condition (of the attributes `at` and the
// result dtype `dt`) holds. p0 is the attribute `attr` ("" none), as in the param rows.
// add/sub with alpha round as eager's kernel (aten/src/ATen/native/ufunc/add.h): alpha is a value
// of the result dtype (a 16-bit result rounds it first, ew::row_attrs), and a +- alpha * b is one
// fused multiply-add in the compute type (its vectorized path; for 16-bit dtypes eager's scalar
// tail rounds alpha * b to the dtype first and can differ from its own vector body there).
//   X(form, op, kinds, flags, condition, attr, expr of a, b)
#define AG_EW_BINARY_FORMS(X)                                                                      \
  X(add_alpha, add, kAll, kOpmath, alpha_form(at, dt), "alpha", math::fmadd(p0, b, a))             \
  X(sub_alpha, sub, kFI, kOpmath, alpha_form(at, dt), "alpha", math::fnmadd(p0, b, a))             \
  X(div_trunc, div, kFI, kOpmath | kIntDiv, rounding_mode(at) == "trunc", "", math::div_trunc_(a, b)) \
  X(div_floor, div, kFI, kOpmath | kIntDiv, rounding_mode(at) == "floor", "", math::div_floor_(a, b))

// Binary, bool result (comparisons; logic on nonzero tests).  X(name, kinds, expr of a, b)
#define AG_EW_COMPARE_OPS(X)                          \
  X(eq, kAll, a == b)                                 \
  X(ne, kAll, a != b)                                 \
  X(lt, kAll, a < b)                                  \
  X(le, kAll, a <= b)                                 \
  X(gt, kAll, a > b)                                  \
  X(ge, kAll, a >= b)                                 \
  X(logical_and, kAll, (a != C(0)) && (b != C(0)))    \
  X(logical_or, kAll, (a != C(0)) || (b != C(0)))     \
  X(logical_xor, kAll, (a != C(0)) != (b != C(0)))

// How many rows the lists have (fused_elementwise.h checks its code ranges against them,
// tests/cpp/test_op_rows.cpp the registry).
#define AG_EW_COUNT(...) +1
namespace ag::ew {
constexpr int kUnaryRows = 0 AG_EW_UNARY_OPS(AG_EW_COUNT) AG_EW_PREDICATE_OPS(AG_EW_COUNT)
    AG_EW_UNARY_PARAM_OPS(AG_EW_COUNT) AG_EW_UNARY_FUNCTOR_OPS(AG_EW_COUNT);
constexpr int kBinaryRows = 0 AG_EW_BINARY_OPS(AG_EW_COUNT) AG_EW_COMPARE_OPS(AG_EW_COUNT);
constexpr int kBinaryForms = 0 AG_EW_BINARY_FORMS(AG_EW_COUNT);
}  // namespace ag::ew
#undef AG_EW_COUNT
