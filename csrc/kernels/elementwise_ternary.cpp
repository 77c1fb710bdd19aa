#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// where(cond, a, b) with broadcasting of all three: cond is bool, a and b share
// one dtype (the output's). Pure data movement, so it dispatches on the element
// size only.
#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

std::vector<TensorType> infer_where(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[0].dtype == DType::b8, "where: condition must be bool, got ", in[0].str());
  AG_CHECK(in[1].dtype == in[2].dtype, "where: branches must share one dtype, got ", in[1].str(), " and ",
           in[2].str(), "; the front must cast them");
  return {TensorType(in[1].dtype, broadcast_all(in))};
}

template <typename T>
std::unique_ptr<Kernel> where_kernel(const Node& n, const BuildCtx& ctx) {
  Plan<3> p = make_plan<3>(n.out()->type.shape(),
                           {n.inputs[0]->type.shape(), n.inputs[1]->type.shape(), n.inputs[2]->type.shape()});
  return make_fn_kernel(std::string("where_") + dtype_name(n.out()->type.dtype),
                        [p](void* const* in, void* const* out) {
    const bool* c = static_cast<const bool*>(in[0]);
    const T* a = static_cast<const T*>(in[1]);
    const T* b = static_cast<const T*>(in[2]);
    T* o = static_cast<T*>(out[0]);
    const int64_t sc = p.inner_stride[0], sa = p.inner_stride[1], sb = p.inner_stride[2];
    for_each_row<3>(p, kGrainCheap, [&](const std::array<int64_t, 3>& off, int64_t pos, int64_t len) {
      const bool* cc = c + off[0];
      const T* aa = a + off[1];
      const T* bb = b + off[2];
      T* oo = o + pos;
      if (sc && sa && sb) {  // a branch-free blend (T is an unsigned integer type)
        for (int64_t i = 0; i < len; ++i) {
          T m = T(0) - static_cast<T>(cc[i]);
          oo[i] = static_cast<T>((aa[i] & m) | (bb[i] & static_cast<T>(~m)));
        }
      } else if (sc && !sa && !sb) {  // scalar branches (masked_fill)
        const T av = aa[0], bv = bb[0];
        for (int64_t i = 0; i < len; ++i) {
          T m = T(0) - static_cast<T>(cc[i]);
          oo[i] = static_cast<T>((av & m) | (bv & static_cast<T>(~m)));
        }
      } else if (sc && sa && !sb) {
        const T bv = bb[0];
        for (int64_t i = 0; i < len; ++i) {
          T m = T(0) - static_cast<T>(cc[i]);
          oo[i] = static_cast<T>((aa[i] & m) | (bv & static_cast<T>(~m)));
        }
      } else if (sc && !sa && sb) {
        const T av = aa[0];
        for (int64_t i = 0; i < len; ++i) {
          T m = T(0) - static_cast<T>(cc[i]);
          oo[i] = static_cast<T>((av & m) | (bb[i] & static_cast<T>(~m)));
        }
      } else {
        for (int64_t i = 0; i < len; ++i) oo[i] = cc[i * sc] ? aa[i * sa] : bb[i * sb];
      }
    });
  });
}

std::unique_ptr<Kernel> make_where(const Node& n, const BuildCtx& ctx) {
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_BYTES(dtype_size(n.out()->type.dtype), "where", [&] { k = where_kernel<scalar_t>(n, ctx); });
  return k;
}

// fma(a, b, c) = a * b + c with one rounding, computed in float (float64 for float64) and
// rounded once to the result dtype: eager's addcmul and lerp compute this way (the front lowers
// them onto it, python/airgraph/lowering/elementwise.py). Floating inputs of one dtype, broadcast.
std::vector<TensorType> infer_fma(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(is_floating(in[0].dtype) && in[1].dtype == in[0].dtype && in[2].dtype == in[0].dtype,
           "fma: expects three floating inputs of one dtype, got ", in[0].str(), ", ", in[1].str(), " and ",
           in[2].str(), "; the front must cast them");
  return {TensorType(in[0].dtype, broadcast_all(in))};
}

template <typename T>
std::unique_ptr<Kernel> fma_kernel(const Node& n) {
  using C = acc_t<T>;
  Plan<3> p = make_plan<3>(n.out()->type.shape(),
                           {n.inputs[0]->type.shape(), n.inputs[1]->type.shape(), n.inputs[2]->type.shape()});
  return make_fn_kernel(std::string("fma_") + dtype_name(n.out()->type.dtype), [p](void* const* in, void* const* out) {
    const T* a = static_cast<const T*>(in[0]);
    const T* b = static_cast<const T*>(in[1]);
    const T* c = static_cast<const T*>(in[2]);
    T* o = static_cast<T*>(out[0]);
    const int64_t sa = p.inner_stride[0], sb = p.inner_stride[1], sc = p.inner_stride[2];
    for_each_row<3>(p, kGrainCheap, [&](const std::array<int64_t, 3>& off, int64_t pos, int64_t len) {
      const T *aa = a + off[0], *bb = b + off[1], *cc = c + off[2];
      T* oo = o + pos;
      if (sa && sb && sc) {
        for (int64_t i = 0; i < len; ++i) put(oo[i], math::fmadd(get<C>(aa[i]), get<C>(bb[i]), get<C>(cc[i])));
      } else {
        for (int64_t i = 0; i < len; ++i)
          put(oo[i], math::fmadd(get<C>(aa[i * sa]), get<C>(bb[i * sb]), get<C>(cc[i * sc])));
      }
    });
  });
}

std::unique_ptr<Kernel> make_fma(const Node& n, const BuildCtx&) {
  switch (n.out()->type.dtype) {
    case DType::f32: return fma_kernel<float>(n);
    case DType::f64: return fma_kernel<double>(n);
    case DType::bf16: return fma_kernel<bf16s>(n);
    case DType::f16: return fma_kernel<f16s>(n);
    default: fail("fma: dtype ", dtype_name(n.out()->type.dtype), " is not supported");
  }
}

}  // namespace

AG_REGISTER_OP(fma, {.name = "fma", .min_inputs = 3, .max_inputs = 3, .infer = infer_fma, .make_kernel = make_fma,
                     .props = kElementwise, .fuse = fe::encode});

AG_REGISTER_OP(where, {.name = "where", .min_inputs = 3, .max_inputs = 3, .infer = infer_where,
                       .make_kernel = make_where, .props = kElementwise,
                       .fuse = fe::encode});

}  // namespace ag
