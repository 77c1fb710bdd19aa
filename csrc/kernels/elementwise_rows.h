// The functor of every unary row of kernels/elementwise_ops.h: R_<name><C>, with
//   R(const Attrs&)      the single-op kernel's constructor (attributes read exactly, as C),
//   R(const double* p)   the fused interpreter's and the epilogue's (p[0..2], see encode),
//   static bool encode(const Attrs&, double* p)  the node's attributes as the three numbers a
//                        fused instruction or an epilogue carries (false: not expressible),
//   C operator()(C x)    the op itself, the one implementation all three evaluate,
//   static constexpr int flags  (ew::kMath, ew::kEpi).
// Predicates return bool. The generated functors come from the rows' expressions; the three
// below (gelu, clamp, pow_scalar) are written by hand because their attributes need code.
// Binary, form and compare rows have the same members with C operator()(C a, C b) (compare rows
// return bool); binary and compare rows also have
//   static constexpr const char* op  the op's name,
// and a form has
//   static bool when(const Attrs& at, DType dt)  whether a node of its op with these attributes
//                        and result dtype runs it (alpha_form and rounding_mode below).
#pragma once
#include <cmath>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/elementwise_ops.h"
#include "kernels/elementwise_special.h"

namespace ag::ew {

// A row's attribute spec "name" or "name=default" ("" is unused): its value, exactly as C.
template <typename C>
C row_attr(const Attrs& a, const char* spec) {
  if (!spec[0]) return C(0);
  const std::string s(spec);
  const size_t eq = s.find('=');
  const std::string name = s.substr(0, eq);
  if (eq != std::string::npos && !a.has(name)) return static_cast<C>(std::stod(s.substr(eq + 1)));
  return number_attr(a, name).as<C>();
}

#define AG_ROW_UNARY(name, kinds, fl, expr)                         \
  template <typename C>                                             \
  struct R_##name {                                                 \
    static constexpr int flags = (fl);                              \
    explicit R_##name(const Attrs&) {}                              \
    explicit R_##name(const double*) {}                             \
    static bool encode(const Attrs&, double*) { return true; }      \
    C operator()(C x) const { return expr; }                        \
  };
#define AG_ROW_PRED(name, kinds, expr)                              \
  template <typename C>                                             \
  struct R_##name {                                                 \
    static constexpr int flags = 0;                                 \
    explicit R_##name(const Attrs&) {}                              \
    explicit R_##name(const double*) {}                             \
    static bool encode(const Attrs&, double*) { return true; }      \
    bool operator()(C x) const { return expr; }                     \
  };
#define AG_ROW_PARAM(name, kinds, fl, a0, a1, a2, expr)                                           \
  template <typename C>                                                                            \
  struct R_##name {                                                                                \
    static constexpr int flags = (fl);                                                             \
    C p0, p1, p2;                                                                                  \
    explicit R_##name(const Attrs& a) : p0(row_attr<C>(a, a0)), p1(row_attr<C>(a, a1)), p2(row_attr<C>(a, a2)) {} \
    explicit R_##name(const double* p) : p0(C(p[0])), p1(C(p[1])), p2(C(p[2])) {}                 \
    static bool encode(const Attrs& a, double* p) {                                                \
      p[0] = row_attr<double>(a, a0), p[1] = row_attr<double>(a, a1), p[2] = row_attr<double>(a, a2); \
      return true;                                                                                 \
    }                                                                                              \
    C operator()(C x) const { return expr; }                                                       \
  };
#define AG_ROW_BIN(name, fl, Ret, expr)                             \
  template <typename C>                                             \
  struct R_##name {                                                 \
    static constexpr int flags = (fl);                              \
    static constexpr const char* op = #name;                        \
    explicit R_##name(const Attrs&) {}                              \
    explicit R_##name(const double*) {}                             \
    static bool encode(const Attrs&, double*) { return true; }      \
    Ret operator()(C a, C b) const { return expr; }                 \
  };
#define AG_ROW_BINARY(name, kinds, fl, expr) AG_ROW_BIN(name, fl, C, expr)
#define AG_ROW_COMPARE(name, kinds, expr) AG_ROW_BIN(name, 0, bool, expr)
#define AG_ROW_FORM(name, op, kinds, fl, cond, a0, expr)                                           \
  template <typename C>                                                                            \
  struct R_##name {                                                                                \
    static constexpr int flags = (fl);                                                             \
    C p0;                                                                                          \
    explicit R_##name(const Attrs& at) : p0(row_attr<C>(at, a0)) {}                                \
    explicit R_##name(const double* p) : p0(C(p[0])) {}                                            \
    static bool encode(const Attrs& at, double* p) {                                               \
      p[0] = row_attr<double>(at, a0);                                                             \
      return true;                                                                                 \
    }                                                                                              \
    static bool when(const Attrs& at, [[maybe_unused]] DType dt) { return cond; }                  \
    C operator()(C a, C b) const { return expr; }                                                  \
  };

// The forms' conditions. add/sub{alpha}: a given alpha other than 1 (an integer for integer
// dtypes, 1 for bool). div{rounding_mode: "" | "trunc" | "floor"}.
inline bool alpha_form(const Attrs& at, DType dt) {
  if (!at.has("alpha")) return false;
  const Number al = number_attr(at, "alpha");
  if (!is_floating(dt))
    AG_CHECK(al.is_int || al.f == std::floor(al.f), "alpha=", al.f, " must be an integer for ", dtype_name(dt));
  if (dt == DType::b8) AG_CHECK(al.f == 1, "alpha must be 1 for bool inputs");
  return al.f != 1;
}
// The attributes a binary row of node n computes with: n's, with alpha a value of the result
// dtype, as eager reads it (alpha.to<scalar_t>(), then computed in float): a bfloat16 or float16
// result rounds it to that dtype. The single-op kernel and the fused instruction both read these.
inline Attrs row_attrs(const Node& n) {
  Attrs at = n.attrs;
  const DType dt = n.out()->type.dtype;
  if ((dt == DType::bf16 || dt == DType::f16) && at.has("alpha")) {
    const float al = static_cast<float>(number_attr(at, "alpha").f);
    at.set("alpha", static_cast<double>(dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(al)) : f16_to_f32(f32_to_f16(al))));
  }
  return at;
}
inline std::string rounding_mode(const Attrs& at) {
  std::string m = at.s("rounding_mode", "");
  AG_CHECK(m.empty() || m == "trunc" || m == "floor",
           "div: rounding_mode must be \"\", \"trunc\" or \"floor\", got \"", m, "\"");
  return m;
}

AG_EW_UNARY_OPS(AG_ROW_UNARY)
AG_EW_PREDICATE_OPS(AG_ROW_PRED)
AG_EW_UNARY_PARAM_OPS(AG_ROW_PARAM)
AG_EW_BINARY_OPS(AG_ROW_BINARY)
AG_EW_BINARY_FORMS(AG_ROW_FORM)
AG_EW_COMPARE_OPS(AG_ROW_COMPARE)
#undef AG_ROW_UNARY
#undef AG_ROW_PRED
#undef AG_ROW_PARAM
#undef AG_ROW_BIN
#undef AG_ROW_BINARY
#undef AG_ROW_COMPARE
#undef AG_ROW_FORM

// gelu{approximate: "none" | "tanh"}: p[0] = 1 for tanh.
template <typename C>
struct Gelu {
  static constexpr int flags = kMath | kEpi;
  bool tanh_form;
  explicit Gelu(const Attrs& a) : tanh_form(a.s("approximate", "none") == "tanh") {}
  explicit Gelu(const double* p) : tanh_form(p[0] != 0) {}
  static bool encode(const Attrs& a, double* p) {
    const std::string ap = a.s("approximate", "none");
    p[0] = ap == "tanh";
    return ap == "none" || ap == "tanh";
  }
  C operator()(C x) const { return tanh_form ? math::gelu_tanh_(x) : math::gelu_erf_(x); }
};

// clamp{min?, max?}: torch's NaN rule (NaN in x or in a bound gives NaN); max wins when
// min > max. p = lo, hi, presence flags (1 lo, 2 hi).
template <typename C>
struct Clamp {
  static constexpr int flags = kEpi;
  bool has_lo, has_hi;
  C lo{}, hi{};
  explicit Clamp(const Attrs& a) : has_lo(a.has("min")), has_hi(a.has("max")) {
    if (has_lo) lo = number_attr(a, "min").as<C>();
    if (has_hi) hi = number_attr(a, "max").as<C>();
  }
  explicit Clamp(const double* p)
      : has_lo(static_cast<int>(p[2]) & 1), has_hi(static_cast<int>(p[2]) & 2), lo(C(p[0])), hi(C(p[1])) {}
  static bool encode(const Attrs& a, double* p) {
    int f = 0;
    if (a.has("min")) p[0] = number_attr(a, "min").f, f |= 1;
    if (a.has("max")) p[1] = number_attr(a, "max").f, f |= 2;
    p[2] = f;
    return f != 0;
  }
  C operator()(C x) const {
    C r = x;
    if (has_lo) r = (r < lo || lo != lo) ? lo : r;
    if (has_hi) r = (r > hi || hi != hi) ? hi : r;
    return r;
  }
};

// pow_scalar{exponent}: exact shortcuts for the common exponents (as torch's pow kernel);
// integers: exact integer powers (wrapping like torch). p[0] = the exponent.
template <typename C>
struct PowScalar {
  static constexpr int flags = kMath;
  int mode = 0;  // 0 pow, 1 x, 2 x*x, 3 x*x*x, 4 sqrt, 5 1/x, 6 1/(x*x), 7 rsqrt, 8 ones, 9 int power
  C e{};
  int64_t ie = 0;
  explicit PowScalar(const Attrs& a) { set(number_attr(a, "exponent")); }
  explicit PowScalar(const double* p) { set(Number{false, static_cast<int64_t>(p[0]), p[0]}); }
  static bool encode(const Attrs& a, double* p) {
    p[0] = number_attr(a, "exponent").f;
    return true;
  }
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      switch (mode) {
        case 1: return x;
        case 2: return x * x;
        case 3: return x * x * x;
        case 4: return std::sqrt(x);
        case 5: return C(1) / x;
        case 6: return C(1) / (x * x);
        case 7: return C(1) / std::sqrt(x);
        case 8: return C(1);
        default: return std::pow(x, e);
      }
    } else {
      return math::ipow<C>(x, ie);
    }
  }

 private:
  void set(const Number& n) {
    const double d = n.f;
    if constexpr (std::is_floating_point_v<C>) {
      e = static_cast<C>(d);
      mode = d == 1 ? 1 : d == 2 ? 2 : d == 3 ? 3 : d == 0.5 ? 4 : d == -1 ? 5 : d == -2 ? 6 : d == -0.5 ? 7
                                                                                           : d == 0 ? 8 : 0;
    } else {
      mode = 9;
      ie = n.is_int ? n.i : static_cast<int64_t>(d);
    }
  }
};

#define AG_ROW_FUNCTOR_ALIAS(name, F, kinds, fl) \
  template <typename C>                          \
  using R_##name = F<C>;
AG_EW_UNARY_FUNCTOR_OPS(AG_ROW_FUNCTOR_ALIAS)
#undef AG_ROW_FUNCTOR_ALIAS

}  // namespace ag::ew
