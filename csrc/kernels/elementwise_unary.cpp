#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// Unary elementwise ops: the kernel and registration of every unary row of
// kernels/elementwise_ops.h (functors in kernels/elementwise_rows.h). Float math happens in
// float for f32/bf16/f16 (one rounding at the store) and in double for f64, with PyTorch's
// formulas (the rows say which).
#include "kernels/elementwise.h"
#include "kernels/elementwise_rows.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

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

// rows with attributes: reading them (as the kernel will) checks they are there
template <template <typename> class R, int K>
std::vector<TensorType> infer_param(const std::vector<TensorType>& in, const Attrs& a) {
  (void)R<double>(a);
  return infer_unary<K, false>(in, a);
}

// A float math row (exp, erf, GELU, ...) alone: the fused interpreter's loop for the row
// (fe::run_unary: the row's own loop, AVX-512 where the CPU has it; 16-bit values through float
// tiles, rounded once as the loop below rounds them), the same functions and bits as the generic
// loop below, which GCC left scalar for some rows (GELU's two forms in one functor: 15x slower than
// eager on 4M elements).
template <template <typename> class R, int64_t Code, typename T>
std::unique_ptr<Kernel> math_row_kernel(const Node& n, std::string name) {
  FusedInstr ins;
  if (!R<double>::encode(n.attrs, ins.p)) return nullptr;
  const int64_t numel = n.inputs[0]->type.numel();
  const std::array<double, 3> p{ins.p[0], ins.p[1], ins.p[2]};
  return make_fn_kernel(std::move(name), [numel, p](void* const* in, void* const* out) {
    const T* a = static_cast<const T*>(in[0]);
    T* o = static_cast<T*>(out[0]);
    parallel_for(numel, kGrainMath, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        fe::run_unary(Code, p.data(), o + b, a + b, e - b);
      } else {
        constexpr int64_t kTile = 1024;
        float tile[kTile];
        for (int64_t s = b; s < e; s += kTile) {
          const int64_t m = std::min(kTile, e - s);
          for (int64_t i = 0; i < m; ++i) tile[i] = get<float>(a[s + i]);
          fe::run_unary(Code, p.data(), tile, tile, m);
          for (int64_t i = 0; i < m; ++i) put(o[s + i], tile[i]);
        }
      }
    });
  });
}

template <template <typename> class R, int64_t Code, int K, bool BoolOut, bool Math>
std::unique_ptr<Kernel> make_unary(const Node& n, const BuildCtx&) {
  DType dt = n.inputs[0]->type.dtype;
  int64_t numel = n.inputs[0]->type.numel();
  std::unique_ptr<Kernel> k;
  std::string name = std::string(n.op->name) + "_" + dtype_name(dt);
  if constexpr (Math && !BoolOut && (K & kF) != 0) {
    std::unique_ptr<Kernel> f = dt == DType::f32    ? math_row_kernel<R, Code, float>(n, name)
                                : dt == DType::bf16 ? math_row_kernel<R, Code, bf16s>(n, name)
                                : dt == DType::f16  ? math_row_kernel<R, Code, f16s>(n, name)
                                                    : nullptr;
    if (f) return f;
  }
  AG_DISPATCH_ALL(dt, n.op->name, [&] {
    if constexpr (allowed<K, scalar_t>()) {
      using C = acc_t<scalar_t>;
      using TO = std::conditional_t<BoolOut, bool, scalar_t>;
      R<C> f(n.attrs);
      k = unary_kernel<scalar_t, TO, C>(name, numel, f, Math ? kGrainMath : kGrainCheap);
    } else {
      fail(n.op->name, ": dtype ", dtype_name(dt), " is not supported");
    }
  });
  return k;
}

// A row's OpDef::fuse: one instruction when the node's values may be fused (float32/bfloat16/
// float16 when the row takes floats, bool when it takes bool; a predicate on any of them) and
// its attributes encode (elementwise_rows.h).
template <template <typename> class R, int64_t Code, int K, bool Pred>
bool fuse_row(const Node& n, FusedInstr* o) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const DType it = n.inputs[0]->type.dtype, ot = n.out()->type.dtype;
  if (!fe::value_dtype_ok(it) || !fe::value_dtype_ok(ot)) return false;
  if (!Pred && (K & (it == DType::b8 ? kB : kF)) == 0) return false;
  *o = FusedInstr{};
  o->code = Code;
  o->nargs = 1;
  return R<double>::encode(n.attrs, o->p);
}

}  // namespace

// Every unary row: its kernel, inference, fused instruction and (kEpi rows) epilogue form.
#define AG_UNARY_ROW(ident, R, K, BoolOut, fl, infer_fn)                                                      \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 1, .max_inputs = 1, .infer = infer_fn,                \
                         .make_kernel = make_unary<R, fe::kX_##ident, K, BoolOut, ((fl) & ew::kMath) != 0>, .props = kElementwise, \
                         .fuse = fuse_row<R, fe::kX_##ident, K, BoolOut>, .fused_code = fe::kX_##ident,      \
                         .epilogue = ((fl) & ew::kEpi) != 0});
#define AG_REG_UNARY(name, kinds, fl, ...) AG_UNARY_ROW(name, ew::R_##name, kinds, false, fl, (infer_unary<kinds, false>))
#define AG_REG_PRED(name, kinds, ...) AG_UNARY_ROW(name, ew::R_##name, kinds, true, 0, (infer_unary<kinds, true>))
#define AG_REG_PARAM(name, kinds, fl, ...) \
  AG_UNARY_ROW(name, ew::R_##name, kinds, false, fl, (infer_param<ew::R_##name, kinds>))
#define AG_REG_FUNCTOR(name, F, kinds, fl) AG_UNARY_ROW(name, ew::R_##name, kinds, false, fl, infer_##name)
AG_EW_UNARY_OPS(AG_REG_UNARY)
AG_EW_PREDICATE_OPS(AG_REG_PRED)
AG_EW_UNARY_PARAM_OPS(AG_REG_PARAM)
AG_EW_UNARY_FUNCTOR_OPS(AG_REG_FUNCTOR)
#undef AG_REG_UNARY
#undef AG_REG_PRED
#undef AG_REG_PARAM
#undef AG_REG_FUNCTOR
#undef AG_UNARY_ROW

}  // namespace ag
