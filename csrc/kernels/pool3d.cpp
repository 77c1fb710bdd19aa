// 3-D pooling over NCDHW (or CDHW) inputs and adaptive max pooling (2-D and
// 3-D), following PyTorch's CPU kernels (window bounds, ceil_mode, padding,
// NaN rules and flat index order):
//   max_pool3d{kernel, stride, padding, dilation, ceil_mode, indices}
//       -> values (and int64 flat d*H*W+h*W+w indices when `indices` is true)
//   avg_pool3d{kernel, stride, padding, ceil_mode, count_include_pad, divisor_override (0 = none)}
//   adaptive_avg_pool3d{output_size}
//   adaptive_max_pool{output_size (2 or 3 sizes), indices} -> values (+ int64 flat indices)
// 2-D adaptive max pooling is the 3-D kernel with a depth of 1. Computation in
// float (double for f64). Parallel over output rows.
#pragma GCC optimize("no-trapping-math")
#include "kernels/pool_util.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

// Spatial geometry, always 3-D (a 2-D op has D = OD = 1).
struct Geom {
  int64_t planes = 0, in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0}, d[3] = {1, 1, 1};
  int64_t in_plane() const { return in[0] * in[1] * in[2]; }
  int64_t out_plane() const { return out[0] * out[1] * out[2]; }
};

std::vector<int64_t> triple(const Attrs& a, const char* op, const char* key, std::vector<int64_t> dflt) {
  return pool::spatial_attr(a, op, key, std::move(dflt), 3);
}

void check_input(const char* op, const TensorType& x, int64_t sp) {
  AG_CHECK(x.rank() == sp + 1 || x.rank() == sp + 2, op, ": expected a ", sp + 1, "-D or ", sp + 2,
           "-D input, got ", x.str());
  AG_CHECK(is_floating(x.dtype), op, ": input must be floating, got ", x.str());
  for (int64_t i = x.rank() - sp - 1; i < x.rank(); ++i)
    AG_CHECK(x.size(i) > 0, op, ": dims other than the batch must be non-zero, got ", x.str());
}

Geom pool3d_geom(const char* op, const TensorType& x, const Attrs& a, bool has_dilation) {
  check_input(op, x, 3);
  Geom g;
  auto k = triple(a, op, "kernel", {});
  auto st = triple(a, op, "stride", k);
  auto pd = triple(a, op, "padding", {0});
  auto dl = has_dilation ? triple(a, op, "dilation", {1}) : std::vector<int64_t>{1, 1, 1};
  const bool ceil = a.b("ceil_mode", false);
  for (int i = 0; i < 3; ++i) {
    g.k[i] = k[i], g.s[i] = st[i], g.p[i] = pd[i], g.d[i] = dl[i];
    AG_CHECK(k[i] > 0 && st[i] > 0 && dl[i] > 0, op, ": kernel, stride and dilation must be positive, got ",
             shape_str(k), ", ", shape_str(st), ", ", shape_str(dl));
    AG_CHECK(pd[i] >= 0 && pd[i] <= k[i] / 2, op,
             ": padding must be non-negative and at most half the kernel size, got padding ", shape_str(pd),
             " for kernel ", shape_str(k));
    g.in[i] = x.size(x.rank() - 3 + i);
    g.out[i] = pool::out_size(g.in[i], k[i], pd[i], st[i], dl[i], ceil);
    AG_CHECK(g.out[i] >= 1, op, ": output size is too small for input ", x.str());
  }
  g.planes = x.numel() / g.in_plane();
  return g;
}

Shape out_shape(const TensorType& x, const int64_t* out, int64_t sp) {
  Shape s = x.shape();
  for (int64_t i = 0; i < sp; ++i) s[s.size() - sp + i] = out[3 - sp + i];
  return s;
}

// ---- max_pool3d ---------------------------------------------------------------
std::vector<TensorType> infer_max_pool3d(const std::vector<TensorType>& in, const Attrs& a) {
  Geom g = pool3d_geom("max_pool3d", in[0], a, true);
  Shape s = out_shape(in[0], g.out, 3);
  if (a.b("indices", false)) return {TensorType(in[0].dtype, s), TensorType(DType::i64, s)};
  return {TensorType(in[0].dtype, s)};
}

template <typename T, bool kIdx>
void run_max_pool3d(const Geom& g, const T* x, T* y, int64_t* yi) {
  using A = acc_t<T>;
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2], OD = g.out[0], OH = g.out[1], OW = g.out[2];
  parallel_for(g.planes * OD * OH, grain_for(OW * g.k[0] * g.k[1] * g.k[2]), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / (OD * OH), od = (t / OH) % OD, oh = t % OH;
      const T* p = x + pl * g.in_plane();
      int64_t id0 = od * g.s[0] - g.p[0], ih0 = oh * g.s[1] - g.p[1];
      const int64_t id1 = std::min(id0 + (g.k[0] - 1) * g.d[0] + 1, D);
      const int64_t ih1 = std::min(ih0 + (g.k[1] - 1) * g.d[1] + 1, H);
      while (id0 < 0) id0 += g.d[0];
      while (ih0 < 0) ih0 += g.d[1];
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t iw0 = ow * g.s[2] - g.p[2];
        const int64_t iw1 = std::min(iw0 + (g.k[2] - 1) * g.d[2] + 1, W);
        while (iw0 < 0) iw0 += g.d[2];
        int64_t mi = (id0 * H + ih0) * W + iw0;
        A mv = -std::numeric_limits<A>::infinity();
        for (int64_t id = id0; id < id1; id += g.d[0])
          for (int64_t ih = ih0; ih < ih1; ih += g.d[1])
            for (int64_t iw = iw0; iw < iw1; iw += g.d[2]) {
              const int64_t idx = (id * H + ih) * W + iw;
              const A v = load(p[idx]);
              if (v > mv || v != v) mv = v, mi = idx;
            }
        const int64_t o = t * OW + ow;
        store(y[o], mv);
        if constexpr (kIdx) yi[o] = mi;
      }
    }
  });
}

std::unique_ptr<Kernel> make_max_pool3d(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Geom g = pool3d_geom("max_pool3d", x, n.attrs, true);
  const bool idx = n.attrs.b("indices", false);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "max_pool3d", [&] {
    k = make_fn_kernel(idx ? "max_pool3d_indices" : "max_pool3d", [g, idx](void* const* in, void* const* out) {
      if (idx)
        run_max_pool3d<scalar_t, true>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]),
                                       static_cast<int64_t*>(out[1]));
      else
        run_max_pool3d<scalar_t, false>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]),
                                        nullptr);
    });
  });
  return k;
}

// ---- avg_pool3d ---------------------------------------------------------------
std::vector<TensorType> infer_avg_pool3d(const std::vector<TensorType>& in, const Attrs& a) {
  Geom g = pool3d_geom("avg_pool3d", in[0], a, false);
  AG_CHECK(a.i("divisor_override", 0) >= 0, "avg_pool3d: divisor_override must be positive");
  return {TensorType(in[0].dtype, out_shape(in[0], g.out, 3))};
}

template <typename T>
void run_avg_pool3d(const Geom& g, bool include_pad, int64_t divisor, const T* x, T* y) {
  using A = acc_t<T>;
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2], OD = g.out[0], OH = g.out[1], OW = g.out[2];
  parallel_for(g.planes * OD * OH, grain_for(OW * g.k[0] * g.k[1] * g.k[2]), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / (OD * OH), od = (t / OH) % OD, oh = t % OH;
      const T* p = x + pl * g.in_plane();
      int64_t id0 = od * g.s[0] - g.p[0], ih0 = oh * g.s[1] - g.p[1];
      int64_t id1 = std::min(id0 + g.k[0], D + g.p[0]), ih1 = std::min(ih0 + g.k[1], H + g.p[1]);
      const int64_t dh_size = (id1 - id0) * (ih1 - ih0);
      id0 = std::max<int64_t>(id0, 0), ih0 = std::max<int64_t>(ih0, 0);
      id1 = std::min(id1, D), ih1 = std::min(ih1, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t iw0 = ow * g.s[2] - g.p[2];
        int64_t iw1 = std::min(iw0 + g.k[2], W + g.p[2]);
        const int64_t pool_size = dh_size * (iw1 - iw0);
        iw0 = std::max<int64_t>(iw0, 0);
        iw1 = std::min(iw1, W);
        const int64_t o = t * OW + ow;
        if (id0 >= id1 || ih0 >= ih1 || iw0 >= iw1) {
          store(y[o], A(0));
          continue;
        }
        A s = 0;
        for (int64_t id = id0; id < id1; ++id)
          for (int64_t ih = ih0; ih < ih1; ++ih)
            for (int64_t iw = iw0; iw < iw1; ++iw) s += load(p[(id * H + ih) * W + iw]);
        const int64_t div =
            divisor > 0 ? divisor : include_pad ? pool_size : (id1 - id0) * (ih1 - ih0) * (iw1 - iw0);
        store(y[o], s / static_cast<A>(div));
      }
    }
  });
}

std::unique_ptr<Kernel> make_avg_pool3d(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Geom g = pool3d_geom("avg_pool3d", x, n.attrs, false);
  const bool inc = n.attrs.b("count_include_pad", true);
  const int64_t div = n.attrs.i("divisor_override", 0);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "avg_pool3d", [&] {
    k = make_fn_kernel("avg_pool3d", [g, inc, div](void* const* in, void* const* out) {
      run_avg_pool3d<scalar_t>(g, inc, div, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
    });
  });
  return k;
}

// ---- adaptive pooling ---------------------------------------------------------
Geom adaptive_geom(const char* op, const TensorType& x, const Attrs& a, int64_t sp) {
  check_input(op, x, sp);
  auto os = a.ints("output_size");
  AG_CHECK(static_cast<int64_t>(os.size()) == sp, op, ": output_size must have ", sp, " sizes, got ", shape_str(os));
  Geom g;
  for (int64_t i = 0; i < sp; ++i) {
    AG_CHECK(os[i] >= 0, op, ": output_size must be >= 0, got ", shape_str(os));
    g.in[3 - sp + i] = x.size(x.rank() - sp + i);
    g.out[3 - sp + i] = os[i];
  }
  g.planes = x.numel() / g.in_plane();
  return g;
}

int64_t adaptive_sp(const Attrs& a) { return static_cast<int64_t>(a.ints("output_size").size()); }

std::vector<TensorType> infer_adaptive_avg3d(const std::vector<TensorType>& in, const Attrs& a) {
  Geom g = adaptive_geom("adaptive_avg_pool3d", in[0], a, 3);
  return {TensorType(in[0].dtype, out_shape(in[0], g.out, 3))};
}

std::vector<TensorType> infer_adaptive_max(const std::vector<TensorType>& in, const Attrs& a) {
  const int64_t sp = adaptive_sp(a);
  AG_CHECK(sp == 2 || sp == 3, "adaptive_max_pool: output_size must have 2 or 3 sizes");
  Geom g = adaptive_geom("adaptive_max_pool", in[0], a, sp);
  Shape s = out_shape(in[0], g.out, sp);
  if (a.b("indices", false)) return {TensorType(in[0].dtype, s), TensorType(DType::i64, s)};
  return {TensorType(in[0].dtype, s)};
}

inline int64_t a_start(int64_t o, int64_t I, int64_t O) { return (o * I) / O; }
inline int64_t a_end(int64_t o, int64_t I, int64_t O) { return ((o + 1) * I + O - 1) / O; }

// kMax: max with NaN propagation and the first index of the max; else the mean.
template <typename T, bool kMax>
void run_adaptive3d(const Geom& g, const T* x, T* y, int64_t* yi) {
  using A = acc_t<T>;
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2], OD = g.out[0], OH = g.out[1], OW = g.out[2];
  if (g.planes * g.out_plane() == 0) return;
  parallel_for(g.planes * OD * OH, grain_for(g.in_plane() / std::max<int64_t>(OD * OH, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / (OD * OH), od = (t / OH) % OD, oh = t % OH;
      const T* p = x + pl * g.in_plane();
      const int64_t id0 = a_start(od, D, OD), id1 = a_end(od, D, OD);
      const int64_t ih0 = a_start(oh, H, OH), ih1 = a_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw0 = a_start(ow, W, OW), iw1 = a_end(ow, W, OW);
        const int64_t o = t * OW + ow;
        if constexpr (kMax) {
          int64_t mi = (id0 * H + ih0) * W + iw0;
          A mv = -std::numeric_limits<A>::infinity();
          for (int64_t id = id0; id < id1; ++id)
            for (int64_t ih = ih0; ih < ih1; ++ih)
              for (int64_t iw = iw0; iw < iw1; ++iw) {
                const int64_t idx = (id * H + ih) * W + iw;
                const A v = load(p[idx]);
                if (v > mv || v != v) mv = v, mi = idx;
              }
          store(y[o], mv);
          if (yi) yi[o] = mi;
        } else {
          A s = 0;
          for (int64_t id = id0; id < id1; ++id)
            for (int64_t ih = ih0; ih < ih1; ++ih)
              for (int64_t iw = iw0; iw < iw1; ++iw) s += load(p[(id * H + ih) * W + iw]);
          store(y[o], s / static_cast<A>(id1 - id0) / static_cast<A>(ih1 - ih0) / static_cast<A>(iw1 - iw0));
        }
      }
    }
  });
}

std::unique_ptr<Kernel> make_adaptive_avg3d(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Geom g = adaptive_geom("adaptive_avg_pool3d", x, n.attrs, 3);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "adaptive_avg_pool3d", [&] {
    k = make_fn_kernel("adaptive_avg_pool3d", [g](void* const* in, void* const* out) {
      run_adaptive3d<scalar_t, false>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]),
                                      nullptr);
    });
  });
  return k;
}

std::unique_ptr<Kernel> make_adaptive_max(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Geom g = adaptive_geom("adaptive_max_pool", x, n.attrs, adaptive_sp(n.attrs));
  const bool idx = n.attrs.b("indices", false);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "adaptive_max_pool", [&] {
    k = make_fn_kernel(idx ? "adaptive_max_pool_indices" : "adaptive_max_pool",
                       [g, idx](void* const* in, void* const* out) {
                         run_adaptive3d<scalar_t, true>(g, static_cast<const scalar_t*>(in[0]),
                                                        static_cast<scalar_t*>(out[0]),
                                                        idx ? static_cast<int64_t*>(out[1]) : nullptr);
                       });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(max_pool3d, {.name = "max_pool3d", .min_inputs = 1, .max_inputs = 1, .infer = infer_max_pool3d,
                            .make_kernel = make_max_pool3d, .props = kNoProps});
AG_REGISTER_OP(avg_pool3d, {.name = "avg_pool3d", .min_inputs = 1, .max_inputs = 1, .infer = infer_avg_pool3d,
                            .make_kernel = make_avg_pool3d, .props = kNoProps});
AG_REGISTER_OP(adaptive_avg_pool3d, {.name = "adaptive_avg_pool3d", .min_inputs = 1, .max_inputs = 1,
                                     .infer = infer_adaptive_avg3d, .make_kernel = make_adaptive_avg3d,
                                     .props = kNoProps});
AG_REGISTER_OP(adaptive_max_pool, {.name = "adaptive_max_pool", .min_inputs = 1, .max_inputs = 1,
                                   .infer = infer_adaptive_max, .make_kernel = make_adaptive_max, .props = kNoProps});

}  // namespace ag
