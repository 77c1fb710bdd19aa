#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// where(cond, a, b) with broadcasting of all three: cond is bool, a and b share
// one dtype (the output's). Pure data movement, so it dispatches on the element
// size only.
#include "kernels/elementwise.h"
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

}  // namespace

AG_REGISTER_OP(where, {.name = "where", .min_inputs = 3, .max_inputs = 3, .infer = infer_where,
                       .make_kernel = make_where, .props = kElementwise,
                       .fuse = fe::encode});

}  // namespace ag
