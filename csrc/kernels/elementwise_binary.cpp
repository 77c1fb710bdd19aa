#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// Binary arithmetic with broadcasting: add/sub (optional `alpha`: a + alpha*b),
// mul, div{rounding_mode: "" | "trunc" | "floor"}, floor_divide, remainder
// (sign of the divisor, like Python/torch), pow, maximum/minimum (NaN
// propagating), atan2. Inputs share one dtype, except that add/sub/mul/div take
// a 0-d float32 scalar with a bf16/f16 tensor (computed in float32, like
// PyTorch's Python scalars). Integer division/remainder by zero throws.
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/elementwise_ops.h"
#include "kernels/elementwise_special.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

template <typename C> constexpr bool fp = std::is_floating_point_v<C>;

// -a without signed overflow
template <typename C> inline C wrap_neg(C a) {
  using U = std::make_unsigned_t<C>;
  return static_cast<C>(U(0) - static_cast<U>(a));
}

#define AG_BINARY_FUNCTOR(Name, math, checkzero, ...) \
  template <typename C>                               \
  struct Name {                                       \
    static constexpr bool kMath = math;               \
    static constexpr bool kCheckZero = checkzero;     \
    explicit Name(const Attrs&) {}                    \
    C operator()(C a, C b) const { __VA_ARGS__ }      \
  };

AG_BINARY_FUNCTOR(Add, false, false, return C(a + b);)
AG_BINARY_FUNCTOR(Sub, false, false, return C(a - b);)
AG_BINARY_FUNCTOR(Mul, false, false, return C(a * b);)
AG_BINARY_FUNCTOR(Div, false, false, return a / b;)
AG_BINARY_FUNCTOR(Atan2, true, false, return std::atan2(a, b);)
AG_BINARY_FUNCTOR(Maximum, false, false, if constexpr (fp<C>) return a != a ? a : (b != b ? b : (a > b ? a : b));
                  else return a > b ? a : b;)
AG_BINARY_FUNCTOR(Minimum, false, false, if constexpr (fp<C>) return a != a ? a : (b != b ? b : (a < b ? a : b));
                  else return a < b ? a : b;)
AG_BINARY_FUNCTOR(DivTrunc, false, true, if constexpr (fp<C>) return std::trunc(a / b); else {
  if constexpr (std::is_signed_v<C>)
    if (b == C(-1)) return wrap_neg(a);
  return C(a / b);
})
AG_BINARY_FUNCTOR(DivFloor, false, true, if constexpr (fp<C>) {
  // c10::div_floor_floating
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
} else {
  if constexpr (std::is_signed_v<C>) {
    if (b == C(-1)) return wrap_neg(a);
    C q = C(a / b), r = C(a % b);
    if (r != C(0) && ((r < C(0)) != (b < C(0)))) q = C(q - 1);
    return q;
  } else {
    return C(a / b);
  }
})
AG_BINARY_FUNCTOR(Remainder, false, true, if constexpr (fp<C>) {
  C mod = std::fmod(a, b);
  if ((mod != C(0)) && ((b < C(0)) != (mod < C(0)))) mod += b;
  return mod;
} else {
  if constexpr (std::is_signed_v<C>) {
    if (b == C(-1)) return C(0);
    C r = C(a % b);
    if (r != C(0) && ((r < C(0)) != (b < C(0)))) r = C(r + b);
    return r;
  } else {
    return C(a % b);
  }
})
AG_BINARY_FUNCTOR(Pow, true, false, if constexpr (fp<C>) return std::pow(a, b); else {
  if constexpr (std::is_signed_v<C>) {
    if (b < C(0)) {
      if (a == C(1)) return C(1);
      if (a == C(-1)) return C((b % 2 == 0) ? 1 : -1);
      return C(0);
    }
  }
  return math::ipow<C>(a, static_cast<int64_t>(b));
})

template <typename C>
struct AddAlpha {
  static constexpr bool kMath = false, kCheckZero = false;
  C alpha;
  explicit AddAlpha(const Attrs& a) : alpha(number_attr(a, "alpha").as<C>()) {}
  C operator()(C a, C b) const { return C(a + alpha * b); }
};
template <typename C>
struct SubAlpha {
  static constexpr bool kMath = false, kCheckZero = false;
  C alpha;
  explicit SubAlpha(const Attrs& a) : alpha(number_attr(a, "alpha").as<C>()) {}
  C operator()(C a, C b) const { return C(a - alpha * b); }
};

// the listed ops (elementwise_ops.h)
#define AG_X_BINARY(name, kinds, fl, check_zero, expr)      \
  constexpr int kFlags_##name = (fl);                        \
  template <typename C>                                      \
  struct X_##name {                                          \
    static constexpr bool kMath = (kFlags_##name & kMathRow) != 0; \
    static constexpr bool kCheckZero = check_zero;           \
    explicit X_##name(const Attrs&) {}                       \
    C operator()(C a, C b) const {                           \
      using namespace math;                                  \
      return expr;                                           \
    }                                                        \
  };
AG_EW_BINARY_OPS(AG_X_BINARY)
#undef AG_X_BINARY

// ---- inference ----------------------------------------------------------------------
template <int K>
std::vector<TensorType> infer_alpha(const std::vector<TensorType>& in, const Attrs& a) {
  auto out = infer_binary<K, false, true>(in, a);
  if (a.has("alpha")) {
    Number al = number_attr(a, "alpha");
    if (!is_floating(out[0].dtype))
      AG_CHECK(al.is_int || al.f == std::floor(al.f), "alpha=", al.f, " must be an integer for ", out[0].str());
    if (out[0].dtype == DType::b8) AG_CHECK(al.f == 1, "alpha must be 1 for bool inputs");
  }
  return out;
}

std::string rounding_mode(const Attrs& a) {
  std::string m = a.s("rounding_mode", "");
  AG_CHECK(m.empty() || m == "trunc" || m == "floor", "div: rounding_mode must be \"\", \"trunc\" or \"floor\", got \"",
           m, "\"");
  return m;
}
std::vector<TensorType> infer_div(const std::vector<TensorType>& in, const Attrs& a) {
  if (rounding_mode(a).empty()) return infer_binary<kF, false, true>(in, a);
  return infer_binary<kFI, false, true>(in, a);
}

// ---- kernels --------------------------------------------------------------------------
bool has_alpha(const Node& n) { return n.attrs.has("alpha") && number_attr(n.attrs, "alpha").f != 1; }
std::unique_ptr<Kernel> make_add(const Node& n, const BuildCtx& ctx) {
  return has_alpha(n) ? make_binary<AddAlpha, kAll, false, true>(n, ctx) : make_binary<Add, kAll, false, true>(n, ctx);
}
std::unique_ptr<Kernel> make_sub(const Node& n, const BuildCtx& ctx) {
  return has_alpha(n) ? make_binary<SubAlpha, kFI, false, true>(n, ctx) : make_binary<Sub, kFI, false, true>(n, ctx);
}
std::unique_ptr<Kernel> make_div(const Node& n, const BuildCtx& ctx) {
  std::string m = rounding_mode(n.attrs);
  if (m == "trunc") return make_binary<DivTrunc, kFI, false, true>(n, ctx);
  if (m == "floor") return make_binary<DivFloor, kFI, false, true>(n, ctx);
  return make_binary<Div, kF, false, true>(n, ctx);
}

}  // namespace

// fused through fe::encode; add, sub, mul and div may also be GEMM/conv epilogues (binary post-ops)
#define AG_BINARY_EPI(ident, infer_fn, make_fn, epi)                                               \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 2, .max_inputs = 2, .infer = infer_fn, \
                         .make_kernel = make_fn, .props = kElementwise, .fuse = fe::encode, .epilogue = epi});
#define AG_BINARY(ident, infer_fn, make_fn) AG_BINARY_EPI(ident, infer_fn, make_fn, false)

AG_BINARY_EPI(add, infer_alpha<kAll>, make_add, true)
AG_BINARY_EPI(sub, infer_alpha<kFI>, make_sub, true)
AG_BINARY_EPI(mul, (infer_binary<kAll, false, true>), (make_binary<Mul, kAll, false, true>), true)
AG_BINARY_EPI(div, infer_div, make_div, true)
AG_BINARY(floor_divide, (infer_binary<kFI, false, false>), (make_binary<DivFloor, kFI, false, false>))
AG_BINARY(remainder, (infer_binary<kFI, false, false>), (make_binary<Remainder, kFI, false, false>))
AG_BINARY(pow, (infer_binary<kFI, false, false>), (make_binary<Pow, kFI, false, false>))
AG_BINARY(maximum, (infer_binary<kAll, false, false>), (make_binary<Maximum, kAll, false, false>))
AG_BINARY(minimum, (infer_binary<kAll, false, false>), (make_binary<Minimum, kAll, false, false>))
AG_BINARY(atan2, (infer_binary<kF, false, false>), (make_binary<Atan2, kF, false, false>))
#define AG_X_REG(name, kinds, ...) AG_BINARY(name, (infer_binary<kinds, false, false>), (make_binary<X_##name, kinds, false, false>))
AG_EW_BINARY_OPS(AG_X_REG)
#undef AG_X_REG

}  // namespace ag
