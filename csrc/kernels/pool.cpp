// 2-D pooling over NCHW (or CHW) inputs, following PyTorch's CPU kernels
// (window bounds, ceil_mode, padding and NaN rules):
//   max_pool2d{kernel, stride, padding, dilation, ceil_mode, indices}
//       -> values (and int64 flat h*W+w indices when `indices` is true)
//   avg_pool2d{kernel, stride, padding, ceil_mode, count_include_pad, divisor_override (0 = none)}
//   adaptive_avg_pool2d{output_size}
// Computation in float (double for f64). Parallel over channel planes.
// FP ops never trap here: lets GCC if-convert and vectorize the NaN-aware selects
// and the vectorized exp (results are unchanged; this is not -ffast-math).
#pragma GCC optimize("no-trapping-math")
#include "kernels/pool_util.h"
#include "ir/value_bounds.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

struct Pool2d {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, sH = 1, sW = 1, pH = 0, pW = 0, dH = 1, dW = 1;
  bool ceil = false;
  // The first and one-past-last input row (col) of output row oh's (column ow's) max-pool window:
  // dilated, clipped to the input, the first tap moved in by whole dilations past the padding.
  std::pair<int64_t, int64_t> rows(int64_t oh) const { return taps(oh * sH - pH, kH, dH, H); }
  std::pair<int64_t, int64_t> cols(int64_t ow) const { return taps(ow * sW - pW, kW, dW, W); }
  static std::pair<int64_t, int64_t> taps(int64_t i0, int64_t k, int64_t d, int64_t n) {
    const int64_t i1 = std::min(i0 + (k - 1) * d + 1, n);
    while (i0 < 0) i0 += d;
    return {i0, i1};
  }
};

std::vector<int64_t> pair_attr(const Attrs& a, const char* op, const char* key, std::vector<int64_t> dflt) {
  return pool::spatial_attr(a, op, key, std::move(dflt), 2);
}

// Parses and validates the attributes like torch's pool2d_shape_check.
Pool2d pool_geom(const char* op, const TensorType& x, const Attrs& a, bool has_dilation) {
  AG_CHECK(x.rank() == 3 || x.rank() == 4, op, ": expected a 3-D (CHW) or 4-D (NCHW) input, got ", x.str());
  AG_CHECK(is_floating(x.dtype), op, ": input must be floating, got ", x.str());
  Shape s = x.shape();
  for (int64_t i = x.rank() - 3; i < x.rank(); ++i)
    AG_CHECK(s[i] > 0, op, ": dims other than the batch must be non-zero, got ", x.str());
  Pool2d g;
  auto k = pair_attr(a, op, "kernel", {});
  auto st = pair_attr(a, op, "stride", k);
  auto pd = pair_attr(a, op, "padding", {0});
  auto dl = has_dilation ? pair_attr(a, op, "dilation", {1}) : std::vector<int64_t>{1, 1};
  g.kH = k[0], g.kW = k[1], g.sH = st[0], g.sW = st[1], g.pH = pd[0], g.pW = pd[1], g.dH = dl[0], g.dW = dl[1];
  g.ceil = a.b("ceil_mode", false);
  AG_CHECK(g.kH > 0 && g.kW > 0, op, ": kernel size must be positive, got ", shape_str(k));
  AG_CHECK(g.sH > 0 && g.sW > 0, op, ": stride must be positive, got ", shape_str(st));
  AG_CHECK(g.dH > 0 && g.dW > 0, op, ": dilation must be positive, got ", shape_str(dl));
  AG_CHECK(g.pH >= 0 && g.pW >= 0 && g.pH <= g.kH / 2 && g.pW <= g.kW / 2, op,
           ": padding must be non-negative and at most half the kernel size, got padding ", shape_str(pd),
           " for kernel ", shape_str(k));
  g.H = s[x.rank() - 2], g.W = s[x.rank() - 1];
  g.planes = x.numel() / (g.H * g.W);
  g.OH = pool::out_size(g.H, g.kH, g.pH, g.sH, g.dH, g.ceil);
  g.OW = pool::out_size(g.W, g.kW, g.pW, g.sW, g.dW, g.ceil);
  AG_CHECK(g.OH >= 1 && g.OW >= 1, op, ": output size ", g.OH, "x", g.OW, " is too small for input ", x.str());
  return g;
}

Shape pooled_shape(const TensorType& x, int64_t oh, int64_t ow) {
  Shape s = x.shape();
  s[s.size() - 2] = oh;
  s[s.size() - 1] = ow;
  return s;
}

// ---- max_pool2d ---------------------------------------------------------------
std::vector<TensorType> infer_max_pool(const std::vector<TensorType>& in, const Attrs& a) {
  Pool2d g = pool_geom("max_pool2d", in[0], a, true);
  Shape s = pooled_shape(in[0], g.OH, g.OW);
  if (a.b("indices", false)) return {TensorType(in[0].dtype, s), TensorType(DType::i64, s)};
  return {TensorType(in[0].dtype, s)};
}

template <typename T, bool kIdx>
void run_max_pool(const Pool2d& g, const T* x, T* y, int64_t* yi) {
  using A = acc_t<T>;
  parallel_for(g.planes * g.OH, grain_for(g.OW * g.kH * g.kW), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / g.OH, oh = t % g.OH;
      const T* p = x + pl * g.H * g.W;
      const auto [ih0, ih1] = g.rows(oh);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const auto [iw0, iw1] = g.cols(ow);
        int64_t mi = ih0 * g.W + iw0;
        A mv = -std::numeric_limits<A>::infinity();
        for (int64_t ih = ih0; ih < ih1; ih += g.dH)
          for (int64_t iw = iw0; iw < iw1; iw += g.dW) {
            const int64_t idx = ih * g.W + iw;
            const A v = load(p[idx]);
            if (v > mv || v != v) mv = v, mi = idx;
          }
        const int64_t o = t * g.OW + ow;
        store(y[o], mv);
        if constexpr (kIdx) yi[o] = mi;
      }
    }
  });
}

// Channels-last input ([N, H, W, C] bytes of the logical [N, C, H, W]: BuildCtx::channels_last):
// the window's rows of C values are maxed a chunk of channels at a time (vectorized over C), into a
// channels-last result or a row-major one. Same values as run_max_pool (NaN wins, as in PyTorch).
constexpr int64_t kChanChunk = 256;

template <typename T>
void run_max_pool_nhwc(const Pool2d& g, int64_t N, int64_t C, const T* x, T* y, bool out_nhwc) {
  using A = acc_t<T>;
  parallel_for(N * g.OH, grain_for(g.OW * g.kH * g.kW * C), [&](int64_t b, int64_t e) {
    A mv[kChanChunk];
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / g.OH, oh = t % g.OH;
      const auto [ih0, ih1] = g.rows(oh);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const auto [iw0, iw1] = g.cols(ow);
        for (int64_t c0 = 0; c0 < C; c0 += kChanChunk) {
          const int64_t nc = std::min(kChanChunk, C - c0);
          for (int64_t c = 0; c < nc; ++c) mv[c] = -std::numeric_limits<A>::infinity();
          for (int64_t ih = ih0; ih < ih1; ih += g.dH)
            for (int64_t iw = iw0; iw < iw1; iw += g.dW) {
              const T* p = x + ((n * g.H + ih) * g.W + iw) * C + c0;
              for (int64_t c = 0; c < nc; ++c) {
                const A v = load(p[c]);
                mv[c] = (v > mv[c] || v != v) ? v : mv[c];
              }
            }
          if (out_nhwc) {
            T* q = y + ((n * g.OH + oh) * g.OW + ow) * C + c0;
            for (int64_t c = 0; c < nc; ++c) store(q[c], mv[c]);
          } else {
            for (int64_t c = 0; c < nc; ++c) store(y[((n * C + c0 + c) * g.OH + oh) * g.OW + ow], mv[c]);
          }
        }
      }
    }
  });
}

std::unique_ptr<Kernel> make_max_pool(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Pool2d g = pool_geom("max_pool2d", x, n.attrs, true);
  const bool idx = n.attrs.b("indices", false);
  std::unique_ptr<Kernel> k;
  const bool in_nhwc = ctx.nhwc(n.inputs[0]->id), out_nhwc = ctx.nhwc(n.outputs[0]->id);
  AG_CHECK((!in_nhwc && !out_nhwc) || (in_nhwc && !idx && x.rank() == 4), "max_pool2d: node ", n.context(),
           ": a channels-last ", in_nhwc ? "input" : "result", " needs a 4-D pool without indices");
  AG_DISPATCH_FLOAT(x.dtype, "max_pool2d", [&] {
    if (in_nhwc)
      k = make_fn_kernel(out_nhwc ? "max_pool2d_nhwc" : "max_pool2d_nhwc_in",
                         [g, N = x.size(0), C = x.size(1), out_nhwc](void* const* in, void* const* out) {
                           run_max_pool_nhwc<scalar_t>(g, N, C, static_cast<const scalar_t*>(in[0]),
                                                       static_cast<scalar_t*>(out[0]), out_nhwc);
                         });
    else if (idx)
      k = make_fn_kernel("max_pool2d_indices", [g](void* const* in, void* const* out) {
        run_max_pool<scalar_t, true>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]),
                                     static_cast<int64_t*>(out[1]));
      });
    else
      k = make_fn_kernel("max_pool2d", [g](void* const* in, void* const* out) {
        run_max_pool<scalar_t, false>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]),
                                      nullptr);
      });
  });
  return k;
}

// ---- avg_pool2d ---------------------------------------------------------------
std::vector<TensorType> infer_avg_pool(const std::vector<TensorType>& in, const Attrs& a) {
  Pool2d g = pool_geom("avg_pool2d", in[0], a, false);
  AG_CHECK(a.i("divisor_override", 0) >= 0, "avg_pool2d: divisor_override must be positive");
  return {TensorType(in[0].dtype, pooled_shape(in[0], g.OH, g.OW))};
}

template <typename T>
void run_avg_pool(const Pool2d& g, bool include_pad, int64_t divisor, const T* x, T* y) {
  using A = acc_t<T>;
  parallel_for(g.planes * g.OH, grain_for(g.OW * g.kH * g.kW), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / g.OH, oh = t % g.OH;
      const T* p = x + pl * g.H * g.W;
      int64_t ih0 = oh * g.sH - g.pH;
      int64_t ih1 = std::min(ih0 + g.kH, g.H + g.pH);
      const int64_t hsize = ih1 - ih0;
      ih0 = std::max<int64_t>(ih0, 0);
      ih1 = std::min(ih1, g.H);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        int64_t iw0 = ow * g.sW - g.pW;
        int64_t iw1 = std::min(iw0 + g.kW, g.W + g.pW);
        const int64_t pool_size = hsize * (iw1 - iw0);
        iw0 = std::max<int64_t>(iw0, 0);
        iw1 = std::min(iw1, g.W);
        const int64_t o = t * g.OW + ow;
        if (ih0 >= ih1 || iw0 >= iw1) {
          store(y[o], A(0));
          continue;
        }
        A s = 0;
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) s += load(p[ih * g.W + iw]);
        const int64_t div = divisor > 0 ? divisor : include_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0);
        store(y[o], s / static_cast<A>(div));
      }
    }
  });
}

std::unique_ptr<Kernel> make_avg_pool(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  Pool2d g = pool_geom("avg_pool2d", x, n.attrs, false);
  const bool inc = n.attrs.b("count_include_pad", true);
  const int64_t div = n.attrs.i("divisor_override", 0);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "avg_pool2d", [&] {
    k = make_fn_kernel("avg_pool2d", [g, inc, div](void* const* in, void* const* out) {
      run_avg_pool<scalar_t>(g, inc, div, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
    });
  });
  return k;
}

// ---- adaptive_avg_pool2d --------------------------------------------------------
std::vector<TensorType> infer_adaptive(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType& x = in[0];
  AG_CHECK(x.rank() == 3 || x.rank() == 4, "adaptive_avg_pool2d: expected a 3-D or 4-D input, got ", x.str());
  AG_CHECK(is_floating(x.dtype), "adaptive_avg_pool2d: input must be floating, got ", x.str());
  for (int64_t i = x.rank() - 3; i < x.rank(); ++i)
    AG_CHECK(x.size(i) > 0, "adaptive_avg_pool2d: dims other than the batch must be non-zero, got ", x.str());
  auto os = a.ints("output_size");
  AG_CHECK(os.size() == 2 && os[0] >= 0 && os[1] >= 0, "adaptive_avg_pool2d: output_size must be 2 sizes >= 0, got ",
           shape_str(os));
  return {TensorType(x.dtype, pooled_shape(x, os[0], os[1]))};
}

template <typename T>
void run_adaptive(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, const T* x, T* y) {
  using A = acc_t<T>;
  parallel_for(planes * OH, grain_for(H * W / std::max<int64_t>(OH, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t pl = t / OH, oh = t % OH;
      const T* p = x + pl * H * W;
      const int64_t ih0 = (oh * H) / OH, ih1 = ((oh + 1) * H + OH - 1) / OH;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw0 = (ow * W) / OW, iw1 = ((ow + 1) * W + OW - 1) / OW;
        A s = 0;
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) s += load(p[ih * W + iw]);
        store(y[t * OW + ow], s / static_cast<A>(ih1 - ih0) / static_cast<A>(iw1 - iw0));
      }
    }
  });
}

// The global average of a channels-last input ([N, H, W, C] bytes): per channel, the same sum in the
// same order as run_adaptive's (rows, then columns), vectorized over C; the [N, C, 1, 1] result is the
// same bytes in either layout.
template <typename T>
void run_global_avg_nhwc(int64_t N, int64_t H, int64_t W, int64_t C, const T* x, T* y) {
  using A = acc_t<T>;
  parallel_for(N * ((C + kChanChunk - 1) / kChanChunk), 1, [&](int64_t b, int64_t e) {
    A s[kChanChunk];
    const int64_t chunks = (C + kChanChunk - 1) / kChanChunk;
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / chunks, c0 = (t % chunks) * kChanChunk, nc = std::min(kChanChunk, C - c0);
      for (int64_t c = 0; c < nc; ++c) s[c] = 0;
      for (int64_t i = 0; i < H * W; ++i) {
        const T* p = x + (n * H * W + i) * C + c0;
        for (int64_t c = 0; c < nc; ++c) s[c] += load(p[c]);
      }
      for (int64_t c = 0; c < nc; ++c) store(y[n * C + c0 + c], s[c] / static_cast<A>(H) / static_cast<A>(W));
    }
  });
}

std::unique_ptr<Kernel> make_adaptive(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  const int64_t H = x.size(x.rank() - 2), W = x.size(x.rank() - 1);
  const int64_t planes = x.numel() / (H * W);
  auto os = n.attrs.ints("output_size");
  const int64_t OH = os[0], OW = os[1];
  std::unique_ptr<Kernel> k;
  if (ctx.nhwc(n.inputs[0]->id)) {
    AG_CHECK(x.rank() == 4 && OH == 1 && OW == 1, "adaptive_avg_pool2d: node ", n.context(),
             ": a channels-last input needs a 4-D input and output_size 1x1");
    AG_DISPATCH_FLOAT(x.dtype, "adaptive_avg_pool2d", [&] {
      k = make_fn_kernel("global_avg_pool2d_nhwc_in", [=, N = x.size(0), C = x.size(1)](void* const* in, void* const* out) {
        run_global_avg_nhwc<scalar_t>(N, H, W, C, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
      });
    });
    return k;
  }
  AG_DISPATCH_FLOAT(x.dtype, "adaptive_avg_pool2d", [&] {
    k = make_fn_kernel("adaptive_avg_pool2d", [=](void* const* in, void* const* out) {
      if (OH * OW == 0) return;
      run_adaptive<scalar_t>(planes, H, W, OH, OW, static_cast<const scalar_t*>(in[0]),
                             static_cast<scalar_t*>(out[0]));
    });
  });
  return k;
}

}  // namespace

// Channels-last (OpDef::channels_last): a 4-D max pool without indices reads NHWC and passes it on
// (run_max_pool_nhwc: a channels-last result only from a channels-last input); the global average
// (adaptive 1x1) reads it (its [N, C, 1, 1] result is the same bytes in either layout, so it never
// writes it).
static bool max_pool_channels_last(const Node& n, int i) {
  const TensorType& x = n.inputs[0]->type;
  return (i == 0 || i == kPassesChannelsLast) && x.rank() == 4 && n.outputs.size() == 1 &&
         !n.attrs.b("indices", false);
}
static bool adaptive_channels_last(const Node& n, int i) {
  return i == 0 && n.inputs[0]->type.rank() == 4 && n.attrs.ints("output_size", {}) == std::vector<int64_t>{1, 1};
}

AG_REGISTER_OP(max_pool2d, {.name = "max_pool2d", .min_inputs = 1, .max_inputs = 1, .infer = infer_max_pool,
                            .make_kernel = make_max_pool, .props = kNoProps, .channels_last = max_pool_channels_last, .bound = bound_moves});
AG_REGISTER_OP(avg_pool2d, {.name = "avg_pool2d", .min_inputs = 1, .max_inputs = 1, .infer = infer_avg_pool,
                            .make_kernel = make_avg_pool, .props = kNoProps});
AG_REGISTER_OP(adaptive_avg_pool2d, {.name = "adaptive_avg_pool2d", .min_inputs = 1, .max_inputs = 1,
                                     .infer = infer_adaptive, .make_kernel = make_adaptive, .props = kNoProps,
                                     .channels_last = adaptive_channels_last});

}  // namespace ag
