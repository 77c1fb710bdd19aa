#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// convert{dtype}: every pair of engine dtypes, with PyTorch's rules:
//  - to bool: x != 0 (NaN is true);
//  - float to int64: truncation; float to the narrower ints: truncation to
//    int32 first, then wrapping (what torch's static_cast does on x86);
//  - int to narrower int: wrapping; to bf16/f16: through float32 (rounding to
//    nearest even), f64 -> bf16 as well.
#include "kernels/elementwise.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

template <typename TO, typename TI>
inline TO convert_one(const TI& v) {
  if constexpr (std::is_same_v<TO, TI>) {
    return v;
  } else if constexpr (is_bool_v<TO>) {
    return load(v) != acc_t<TI>(0);
  } else if constexpr (is_half_v<TO>) {
    TO o;
    put(o, static_cast<float>(load(v)));
    return o;
  } else if constexpr (is_int_v<TO> && is_float_v<TI>) {
    auto x = load(v);
    if constexpr (sizeof(TO) == 8) return static_cast<TO>(x);
    else return static_cast<TO>(static_cast<int32_t>(x));
  } else {
    return static_cast<TO>(load(v));
  }
}

template <typename TO, typename TI>
std::unique_ptr<Kernel> convert_kernel(const Node& n, const BuildCtx& ctx) {
  int64_t numel = n.out()->type.numel();
  std::string name = std::string("convert_") + dtype_name(n.inputs[0]->type.dtype) + "_" +
                     dtype_name(n.out()->type.dtype);
  return make_fn_kernel(name, [numel](void* const* in, void* const* out) {
    const TI* a = static_cast<const TI*>(in[0]);
    TO* o = static_cast<TO*>(out[0]);
    parallel_for(numel, kGrainCheap, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = convert_one<TO>(a[i]);
    });
  });
}

std::unique_ptr<Kernel> make_convert(const Node& n, const BuildCtx& ctx) {
  std::unique_ptr<Kernel> k;
  DType ti = n.inputs[0]->type.dtype, to = n.out()->type.dtype;
  AG_DISPATCH_ALL(ti, "convert", [&] {
    using TI = scalar_t;
    AG_DISPATCH_ALL(to, "convert", [&] { k = convert_kernel<scalar_t, TI>(n, ctx); });
  });
  return k;
}

std::vector<TensorType> infer_convert(const std::vector<TensorType>& in, const Attrs& a) {
  TensorType t = in[0];
  t.dtype = a.dtype("dtype");
  return {t};
}

}  // namespace

AG_REGISTER_OP(convert, {.name = "convert", .min_inputs = 1, .max_inputs = 1, .infer = infer_convert,
                         .make_kernel = make_convert, .props = kElementwise,
                       .fuse = fe::encode});

}  // namespace ag
