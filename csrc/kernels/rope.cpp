// "rope"(x, cos, sin): rotary position embedding in the rotate-half form that
// LLaMA, Qwen2, Mistral, GPT-NeoX and most transformers decoders write,
//   y = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[..., h:], x[..., :h])
// with h = D / 2, D = x's last dim (even). cos and sin have x's dtype and
// broadcast to x's shape (typically [B, 1, L, D] against x [B, H, L, D]).
// One pass over x: per row of D elements, the pair (x[i], x[i + h]) gives
//   y[i]     = x[i] * cos[i]         - x[i + h] * sin[i]
//   y[i + h] = x[i + h] * cos[i + h] + x[i] * sin[i + h]
// computed in float (16-bit inputs widened, the result rounded once). Produced
// by the fuse_rope pass from the decomposed ops (slice, slice, neg, cat, mul,
// mul, add: five kernels and two temporaries per tensor before).
#include "kernels/common.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

std::vector<TensorType> infer_rope(const std::vector<TensorType>& in, const Attrs&) {
  const TensorType &x = in[0], &c = in[1], &s = in[2];
  AG_CHECK(is_floating(x.dtype) && x.dtype != DType::f64, "rope: x must be float32, bfloat16 or float16, got ",
           x.str());
  AG_CHECK(x.rank() >= 1 && x.dims.back().is_static() && x.dims.back().value % 2 == 0,
           "rope: x's last dim must be a known even size, got ", x.str());
  for (const TensorType* t : {&c, &s}) {
    AG_CHECK(t->dtype == x.dtype, "rope: cos and sin must have x's dtype, got ", x.str(), " and ", t->str());
    AG_CHECK(t->rank() <= x.rank() && broadcast_shapes(t->shape(), x.shape()) == x.shape(), "rope: ", t->str(),
             " does not broadcast to x ", x.str());
  }
  return {x};
}

// Offsets (elements) of cos and sin for each row of x: strides over x's leading dims.
struct RowOffsets {
  Shape sizes, cs, ss;  // x's leading sizes; cos and sin strides for them
  void at(int64_t row, int64_t* co, int64_t* so) const {
    int64_t c = 0, s = 0;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      const int64_t i = row % sizes[d];
      row /= sizes[d];
      c += i * cs[d];
      s += i * ss[d];
    }
    *co = c;
    *so = s;
  }
};

template <typename T>
void run_rope(int64_t rows, int64_t h, const RowOffsets& ro, int64_t cl, int64_t sl, const T* x, const T* c,
              const T* s, T* y) {
  parallel_for(rows, grain_for(4 * h), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t co, so;
      ro.at(r, &co, &so);
      const T* xr = x + r * 2 * h;
      const T *cr = c + co, *sr = s + so;
      T* yr = y + r * 2 * h;
#pragma omp simd
      for (int64_t i = 0; i < h; ++i) {
        const float a = load(xr[i]), bb = load(xr[i + h]);
        store(yr[i], a * float(load(cr[i * cl])) - bb * float(load(sr[i * sl])));
        store(yr[i + h], bb * float(load(cr[(i + h) * cl])) + a * float(load(sr[(i + h) * sl])));
      }
    }
  });
}

std::unique_ptr<Kernel> make_rope(const Node& n, const BuildCtx& ctx) {
  const TensorType& xt = n.inputs[0]->type;
  const Shape xs = xt.shape();
  const int64_t D = xs.back(), h = D / 2, rows = D == 0 ? 0 : xt.numel() / D;
  const Shape cs = broadcast_strides(n.inputs[1]->type.shape(), xs);
  const Shape ss = broadcast_strides(n.inputs[2]->type.shape(), xs);
  RowOffsets ro{Shape(xs.begin(), xs.end() - 1), Shape(cs.begin(), cs.end() - 1), Shape(ss.begin(), ss.end() - 1)};
  const int64_t cl = cs.back(), sl = ss.back();
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(xt.dtype, "rope", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>)
      k = make_fn_kernel("rope", [=](void* const* in, void* const* out) {
        run_rope<scalar_t>(rows, h, ro, cl, sl, static_cast<const scalar_t*>(in[0]),
                           static_cast<const scalar_t*>(in[1]), static_cast<const scalar_t*>(in[2]),
                           static_cast<scalar_t*>(out[0]));
      });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(rope, {.name = "rope", .min_inputs = 3, .max_inputs = 3, .infer = infer_rope,
                      .make_kernel = make_rope, .props = kNoProps});

}  // namespace ag
