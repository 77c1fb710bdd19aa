#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// Unary elementwise ops. Float math happens in float for f32/bf16/f16 (one
// rounding at the store) and in double for f64, with PyTorch's formulas:
//   gelu (exact)  0.5 x (1 + erf(x / sqrt 2))
//   gelu (tanh)   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   silu          x / (1 + exp(-x));  sigmoid 1 / (1 + exp(-x))
//   round         half to even;  sign(nan) = 0;  relu/clamp propagate NaN
// Integer inputs: floor/ceil/round/trunc are the identity (like torch).
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/elementwise_ops.h"
#include "kernels/elementwise_special.h"

namespace ag {
namespace {
using namespace ew;

// ---- functors (C: compute type) ----------------------------------------------
#define AG_SIMPLE_UNARY(Name, expr)                       \
  template <typename C>                                   \
  struct Name {                                           \
    static constexpr bool kMath = false;                  \
    explicit Name(const Attrs&) {}                        \
    C operator()(C x) const { return expr; }              \
  };
#define AG_MATH_UNARY(Name, expr)                         \
  template <typename C>                                   \
  struct Name {                                           \
    static constexpr bool kMath = true;                   \
    explicit Name(const Attrs&) {}                        \
    C operator()(C x) const { return expr; }              \
  };

AG_SIMPLE_UNARY(Neg, C(-x))
AG_SIMPLE_UNARY(Abs, C(x < C(0) ? C(-x) : x))
AG_SIMPLE_UNARY(Relu, C(x < C(0) ? C(0) : x))  // NaN stays NaN
AG_SIMPLE_UNARY(Reciprocal, C(C(1) / x))
AG_SIMPLE_UNARY(Sqrt, std::sqrt(x))
AG_SIMPLE_UNARY(Rsqrt, C(C(1) / std::sqrt(x)))
AG_SIMPLE_UNARY(Sign, C(int(C(0) < x) - int(x < C(0))))
AG_MATH_UNARY(Tanh, math::tanh_(x))
AG_MATH_UNARY(Sigmoid, math::sigmoid_(x))
AG_MATH_UNARY(Silu, math::silu_(x))
AG_MATH_UNARY(Erf, math::erf_(x))
AG_MATH_UNARY(Exp, math::exp_(x))
AG_MATH_UNARY(Log, math::log_(x))
AG_MATH_UNARY(Log1p, std::log1p(x))
AG_MATH_UNARY(Expm1, std::expm1(x))
AG_MATH_UNARY(Sin, std::sin(x))
AG_MATH_UNARY(Cos, std::cos(x))

template <typename C>
struct BitwiseNot {
  static constexpr bool kMath = false;
  explicit BitwiseNot(const Attrs&) {}
  C operator()(C x) const {
    if constexpr (is_bool_v<C>) return !x;
    else return C(~x);
  }
};
template <typename C>
struct Floor {
  static constexpr bool kMath = false;
  explicit Floor(const Attrs&) {}
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) return std::floor(x);
    else return x;
  }
};
template <typename C>
struct Ceil {
  static constexpr bool kMath = false;
  explicit Ceil(const Attrs&) {}
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) return std::ceil(x);
    else return x;
  }
};
template <typename C>
struct Trunc {
  static constexpr bool kMath = false;
  explicit Trunc(const Attrs&) {}
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) return std::trunc(x);
    else return x;
  }
};
template <typename C>
struct Round {
  static constexpr bool kMath = false;
  explicit Round(const Attrs&) {}
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) return std::nearbyint(x);  // half to even
    else return x;
  }
};
template <typename C>
struct LogicalNot {
  static constexpr bool kMath = false;
  explicit LogicalNot(const Attrs&) {}
  bool operator()(C x) const { return x == C(0); }
};
template <typename C>
struct IsNan {
  static constexpr bool kMath = false;
  explicit IsNan(const Attrs&) {}
  bool operator()(C x) const { return x != x; }
};
template <typename C>
struct GeluErf {
  static constexpr bool kMath = true;
  explicit GeluErf(const Attrs&) {}
  C operator()(C x) const { return math::gelu_erf_(x); }
};
template <typename C>
struct GeluTanh {
  static constexpr bool kMath = true;
  explicit GeluTanh(const Attrs&) {}
  C operator()(C x) const { return math::gelu_tanh_(x); }
};
template <typename C>
struct LeakyRelu {
  static constexpr bool kMath = false;
  C slope;
  explicit LeakyRelu(const Attrs& a) : slope(static_cast<C>(a.f("negative_slope", 0.01))) {}
  C operator()(C x) const { return x > C(0) ? x : C(x * slope); }
};
template <typename C>
struct Clamp {
  static constexpr bool kMath = false;
  bool has_lo, has_hi;
  C lo{}, hi{};
  explicit Clamp(const Attrs& a) : has_lo(a.has("min")), has_hi(a.has("max")) {
    if (has_lo) lo = number_attr(a, "min").as<C>();
    if (has_hi) hi = number_attr(a, "max").as<C>();
  }
  C operator()(C x) const {
    // torch: NaN in x or in a bound gives NaN
    C r = x;
    if (has_lo) r = (r < lo || lo != lo) ? lo : r;
    if (has_hi) r = (r > hi || hi != hi) ? hi : r;
    return r;
  }
};
template <typename C>
struct PowScalar {
  static constexpr bool kMath = true;
  int mode = 0;  // 0 pow, 1 x, 2 x*x, 3 x*x*x, 4 sqrt, 5 1/x, 6 1/(x*x), 7 rsqrt, 8 ones, 9 int power
  C e{};
  int64_t ie = 0;
  explicit PowScalar(const Attrs& a) {
    Number n = number_attr(a, "exponent");
    double d = n.f;
    if constexpr (std::is_floating_point_v<C>) {
      e = static_cast<C>(d);
      mode = d == 1 ? 1 : d == 2 ? 2 : d == 3 ? 3 : d == 0.5 ? 4 : d == -1 ? 5 : d == -2 ? 6 : d == -0.5 ? 7
                                                                                           : d == 0 ? 8 : 0;
    } else {
      mode = 9;
      ie = n.is_int ? n.i : static_cast<int64_t>(d);
    }
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
};

// ---- the listed ops (elementwise_ops.h) ------------------------------------------------------
#define AG_X_UNARY(name, kinds, is_math, expr)         \
  template <typename C>                                 \
  struct X_##name {                                     \
    static constexpr bool kMath = is_math;              \
    explicit X_##name(const Attrs&) {}                  \
    C operator()(C x) const { return expr; }            \
  };
#define AG_X_PRED(name, kinds, expr)                    \
  template <typename C>                                 \
  struct X_##name {                                     \
    static constexpr bool kMath = false;                \
    explicit X_##name(const Attrs&) {}                  \
    bool operator()(C x) const { return expr; }         \
  };
// a numeric attribute as C ("" is unused: 0)
template <typename C>
C param(const Attrs& a, const char* name) {
  return name[0] ? number_attr(a, name).as<C>() : C(0);
}
#define AG_X_PARAM(name, kinds, is_math, a0, a1, a2, expr)                                 \
  template <typename C>                                                                     \
  struct X_##name {                                                                         \
    static constexpr bool kMath = is_math;                                                  \
    C p0, p1, p2;                                                                           \
    explicit X_##name(const Attrs& a) : p0(param<C>(a, a0)), p1(param<C>(a, a1)), p2(param<C>(a, a2)) {} \
    C operator()(C x) const { return expr; }                                                \
  };
using namespace math;
AG_EW_UNARY_OPS(AG_X_UNARY)
AG_EW_PREDICATE_OPS(AG_X_PRED)
AG_EW_UNARY_PARAM_OPS(AG_X_PARAM)
#undef AG_X_UNARY
#undef AG_X_PRED
#undef AG_X_PARAM

// ---- inference and kernels ---------------------------------------------------------
template <int K, bool BoolOut>
std::vector<TensorType> infer_unary(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(allowed_rt(K, in[0].dtype), "expects ", kinds_str(K), ", got ", in[0].str());
  TensorType t = in[0];
  if (BoolOut) t.dtype = DType::b8;
  return {t};
}

std::vector<TensorType> infer_gelu(const std::vector<TensorType>& in, const Attrs& a) {
  std::string ap = a.s("approximate", "none");
  AG_CHECK(ap == "none" || ap == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"", ap, "\"");
  return infer_unary<kF, false>(in, a);
}
std::vector<TensorType> infer_clamp(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(a.has("min") || a.has("max"), "clamp: at least one of min and max must be given");
  if (!is_floating(in[0].dtype))
    for (const char* k : {"min", "max"})
      if (a.has(k)) {
        Number n = number_attr(a, k);
        AG_CHECK(n.is_int || n.f == std::floor(n.f), "clamp: non-integer bound ", k, "=", n.f, " for ",
                 in[0].str(), "; the front must promote to a floating dtype");
      }
  return infer_unary<kFI, false>(in, a);
}
std::vector<TensorType> infer_pow_scalar(const std::vector<TensorType>& in, const Attrs& a) {
  Number n = number_attr(a, "exponent");
  if (!is_floating(in[0].dtype))
    AG_CHECK((n.is_int || n.f == std::floor(n.f)) && n.f >= 0, "pow_scalar: integer ", in[0].str(),
             " needs a non-negative integer exponent, got ", n.f);
  return infer_unary<kFI, false>(in, a);
}

// listed ops with attributes: reading them (as the kernel will) checks they are there
template <template <typename> class Op, int K>
std::vector<TensorType> infer_param(const std::vector<TensorType>& in, const Attrs& a) {
  (void)Op<double>(a);
  return infer_unary<K, false>(in, a);
}

template <template <typename> class Op, int K, bool BoolOut>
std::unique_ptr<Kernel> make_unary(const Node& n) {
  DType dt = n.inputs[0]->type.dtype;
  int64_t numel = n.inputs[0]->type.numel();
  std::unique_ptr<Kernel> k;
  std::string name = std::string(n.op->name) + "_" + dtype_name(dt);
  AG_DISPATCH_ALL(dt, n.op->name, [&] {
    if constexpr (allowed<K, scalar_t>()) {
      using C = acc_t<scalar_t>;
      using TO = std::conditional_t<BoolOut, bool, scalar_t>;
      Op<C> f(n.attrs);
      k = unary_kernel<scalar_t, TO, C>(name, numel, f, Op<C>::kMath ? kGrainMath : kGrainCheap);
    } else {
      fail(n.op->name, ": dtype ", dtype_name(dt), " is not supported");
    }
  });
  return k;
}

std::unique_ptr<Kernel> make_gelu(const Node& n) {
  if (n.attrs.s("approximate", "none") == "tanh") return make_unary<GeluTanh, kF, false>(n);
  return make_unary<GeluErf, kF, false>(n);
}

#define AG_UNARY(ident, Op, K, BoolOut)                                                                  \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 1, .max_inputs = 1, .infer = infer_unary<K, BoolOut>, \
                         .make_kernel = make_unary<Op, K, BoolOut>, .props = kElementwise});

}  // namespace

AG_UNARY(neg, Neg, kFI, false)
AG_UNARY(abs, Abs, kFI, false)
AG_UNARY(relu, Relu, kFI, false)
AG_UNARY(silu, Silu, kF, false)
AG_UNARY(tanh, Tanh, kF, false)
AG_UNARY(sigmoid, Sigmoid, kF, false)
AG_UNARY(erf, Erf, kF, false)
AG_UNARY(exp, Exp, kF, false)
AG_UNARY(log, Log, kF, false)
AG_UNARY(log1p, Log1p, kF, false)
AG_UNARY(expm1, Expm1, kF, false)
AG_UNARY(rsqrt, Rsqrt, kF, false)
AG_UNARY(sqrt, Sqrt, kF, false)
AG_UNARY(sin, Sin, kF, false)
AG_UNARY(cos, Cos, kF, false)
AG_UNARY(reciprocal, Reciprocal, kF, false)
AG_UNARY(floor, Floor, kFI, false)
AG_UNARY(ceil, Ceil, kFI, false)
AG_UNARY(round, Round, kFI, false)
AG_UNARY(trunc, Trunc, kFI, false)
AG_UNARY(sign, Sign, kFI, false)
AG_UNARY(logical_not, LogicalNot, kAll, true)
AG_UNARY(bitwise_not, BitwiseNot, kIB, false)
AG_UNARY(isnan, IsNan, kAll, true)
AG_UNARY(leaky_relu, LeakyRelu, kF, false)

#define AG_X_REG(name, kinds, is_math, ...) AG_UNARY(name, X_##name, kinds, false)
#define AG_X_REG_PRED(name, kinds, expr) AG_UNARY(name, X_##name, kinds, true)
AG_EW_UNARY_OPS(AG_X_REG)
#define AG_X_REG_PARAM(ident, kinds, ...)                                                             \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 1, .max_inputs = 1, .infer = infer_param<X_##ident, kinds>, \
                         .make_kernel = make_unary<X_##ident, kinds, false>, .props = kElementwise});
AG_EW_UNARY_PARAM_OPS(AG_X_REG_PARAM)
#undef AG_X_REG_PARAM
AG_EW_PREDICATE_OPS(AG_X_REG_PRED)
#undef AG_X_REG
#undef AG_X_REG_PRED

AG_REGISTER_OP(gelu, {.name = "gelu", .min_inputs = 1, .max_inputs = 1, .infer = infer_gelu,
                      .make_kernel = make_gelu, .props = kElementwise});
AG_REGISTER_OP(clamp, {.name = "clamp", .min_inputs = 1, .max_inputs = 1, .infer = infer_clamp,
                       .make_kernel = make_unary<Clamp, kFI, false>, .props = kElementwise});
AG_REGISTER_OP(pow_scalar, {.name = "pow_scalar", .min_inputs = 1, .max_inputs = 1, .infer = infer_pow_scalar,
                            .make_kernel = make_unary<PowScalar, kFI, false>, .props = kElementwise});

}  // namespace ag
