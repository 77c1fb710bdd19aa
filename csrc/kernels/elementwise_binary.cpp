#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// Binary elementwise ops with broadcasting: the kernel, inference, fused instruction and
// registration of every binary, form and compare row of kernels/elementwise_ops.h (functors in
// kernels/elementwise_rows.h). Inputs share one dtype, except that kOpmath rows (add, sub, mul,
// div and their forms) take a 0-d float32 scalar with a bf16/f16 tensor (computed in float32,
// like PyTorch's Python scalars). Integer division/remainder by zero throws (kIntDiv rows).
#include <string_view>

#include "kernels/elementwise.h"
#include "kernels/elementwise_rows.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

// The single-op kernel of row R (R<C>(attrs) over the compute type C).
template <template <typename> class R, int K, bool BoolOut>
std::unique_ptr<Kernel> make_row(const Node& n, const BuildCtx&) {
  constexpr int fl = R<float>::flags;
  DType da = n.inputs[0]->type.dtype, db = n.inputs[1]->type.dtype;
  std::string name = std::string(n.op->name) + "_" + dtype_name(da);
  const Attrs at = row_attrs(n);
  if constexpr ((fl & kOpmath) != 0) {
    if (da != db) {
      const R<float> f(at);
      if (da == DType::bf16 && db == DType::f32) return binary_kernel<bf16s, float, bf16s, float>(n, name, f, kGrainCheap);
      if (da == DType::f16 && db == DType::f32) return binary_kernel<f16s, float, f16s, float>(n, name, f, kGrainCheap);
      if (da == DType::f32 && db == DType::bf16) return binary_kernel<float, bf16s, bf16s, float>(n, name, f, kGrainCheap);
      if (da == DType::f32 && db == DType::f16) return binary_kernel<float, f16s, f16s, float>(n, name, f, kGrainCheap);
    }
  }
  AG_CHECK(da == db, n.op->name, ": input dtypes differ");
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(da, n.op->name, [&] {
    if constexpr (allowed<K, scalar_t>()) {
      using C = acc_t<scalar_t>;
      using TO = std::conditional_t<BoolOut, bool, scalar_t>;
      BinaryCheck check = nullptr;
      if constexpr ((fl & kIntDiv) != 0 && !std::is_floating_point_v<C>) check = &check_nonzero<scalar_t>;
      k = binary_kernel<scalar_t, scalar_t, TO, C>(n, name, R<C>(at), (fl & kMath) ? kGrainMath : kGrainCheap,
                                                   check);
    } else {
      fail(n.op->name, ": dtype ", dtype_name(da), " is not supported");
    }
  });
  return k;
}

// Row R as one instruction of a fused group: float32/bfloat16/float16 values when the row takes
// floats, bool values when it takes bool (computed as bool), and its attributes encode.
template <template <typename> class R, int64_t Code, int K>
bool fuse_row(const Node& n, FusedInstr* o) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return false;
  const DType a = n.inputs[0]->type.dtype, b = n.inputs[1]->type.dtype;
  if (!fe::value_dtype_ok(a) || !fe::value_dtype_ok(b) || !fe::value_dtype_ok(n.out()->type.dtype)) return false;
  if ((a == DType::b8) != (b == DType::b8)) return false;
  if ((K & (a == DType::b8 ? kB : kF)) == 0) return false;
  *o = FusedInstr{};
  o->code = Code;
  o->nargs = 2;
  return R<double>::encode(row_attrs(n), o->p);
}

// The forms (AG_EW_BINARY_FORMS): the one a node of `op` runs, or null (the op's own row).
struct Form {
  std::string_view op;
  bool (*when)(const Attrs&, DType);
  int kinds;
  MakeKernelFn make;
  FuseFn fuse;
};
#define AG_FORM_ENTRY(form, op, kinds, ...) \
  {#op, ew::R_##form<double>::when, (kinds), make_row<ew::R_##form, (kinds), false>, fuse_row<ew::R_##form, fe::kX_##form, (kinds)>},
const Form kForms[] = {AG_EW_BINARY_FORMS(AG_FORM_ENTRY)};
#undef AG_FORM_ENTRY
// A form is chosen after inference has typed the inputs by its op's rule: they share it.
#define AG_FORM_CHECK(form, op, ...)                                                             \
  static_assert((ew::R_##form<float>::flags & kOpmath) == (ew::R_##op<float>::flags & kOpmath), \
                #form ": a form takes a float32 scalar with a 16-bit tensor exactly when its op does");
AG_EW_BINARY_FORMS(AG_FORM_CHECK)
#undef AG_FORM_CHECK
const Form* form_of(std::string_view op, const Attrs& a, DType dt) {
  for (const Form& f : kForms)
    if (f.op == op && f.when(a, dt)) return &f;
  return nullptr;
}

// The op of a binary or compare row: its form's (when one is selected) or its row's.
template <template <typename> class R, int K, bool BoolOut>
const Form* op_form(const Attrs& a, DType dt) {
  if constexpr (BoolOut) return nullptr;
  else return form_of(R<float>::op, a, dt);
}
template <template <typename> class R, int K, bool BoolOut>
std::vector<TensorType> infer_op(const std::vector<TensorType>& in, const Attrs& a) {
  const DType dt = binary_dtype(in[0], in[1], (R<float>::flags & kOpmath) != 0);
  const Form* f = op_form<R, K, BoolOut>(a, dt);
  const int k = f ? f->kinds : K;
  AG_CHECK(allowed_rt(k, dt), "expects ", kinds_str(k), ", got ", in[0].str(), " and ", in[1].str());
  return {TensorType(BoolOut ? DType::b8 : dt, broadcast_shapes(in[0].shape(), in[1].shape()))};
}
template <template <typename> class R, int K, bool BoolOut>
std::unique_ptr<Kernel> make_op(const Node& n, const BuildCtx& ctx) {
  const Form* f = op_form<R, K, BoolOut>(n.attrs, n.out()->type.dtype);
  return f ? f->make(n, ctx) : make_row<R, K, BoolOut>(n, ctx);
}
template <template <typename> class R, int64_t Code, int K, bool BoolOut>
bool fuse_op(const Node& n, FusedInstr* o) {
  const Form* f = op_form<R, K, BoolOut>(n.attrs, n.out()->type.dtype);
  return f ? f->fuse(n, o) : fuse_row<R, Code, K>(n, o);
}

}  // namespace

// Every binary and compare row: its kernel, inference, fused instruction and (kEpi rows) binary
// post-op form; a row's forms through the op's.
#define AG_BINARY_ROW(ident, K, BoolOut, fl)                                                                  \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 2, .max_inputs = 2,                                   \
                         .infer = infer_op<ew::R_##ident, K, BoolOut>,                                       \
                         .make_kernel = make_op<ew::R_##ident, K, BoolOut>, .props = kElementwise,           \
                         .fuse = fuse_op<ew::R_##ident, fe::kX_##ident, K, BoolOut>, .fused_code = fe::kX_##ident, \
                         .epilogue = ((fl) & ew::kEpi) != 0});
#define AG_REG_BINARY(name, kinds, fl, ...) AG_BINARY_ROW(name, kinds, false, fl)
#define AG_REG_COMPARE(name, kinds, ...) AG_BINARY_ROW(name, kinds, true, 0)
AG_EW_BINARY_OPS(AG_REG_BINARY)
AG_EW_COMPARE_OPS(AG_REG_COMPARE)
#undef AG_REG_BINARY
#undef AG_REG_COMPARE
#undef AG_BINARY_ROW

}  // namespace ag
