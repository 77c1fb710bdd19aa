// Reductions: sum, mean, prod, amax, amin, any, all (over a list of dims,
// empty = all, with keepdim), var{correction}, argmax/argmin (one dim or the
// flattened tensor) and cumsum along one dim.
//
// Every reduction runs on the (outer, reduce, inner) geometry of reduce_util.h:
// reducing the innermost contiguous block is a row reduction with several
// independent accumulators; reducing an outer dim accumulates whole rows into a
// tile of accumulators (vectorized over the kept inner dim). Floating sums
// accumulate in double, integer ones in int64 (bf16/f16 load through float).
// FP ops never trap here: lets GCC if-convert and vectorize the NaN-aware selects
// and the vectorized exp (results are unchanged; this is not -ffast-math).
#pragma GCC optimize("no-trapping-math")
#include "kernels/reduce_util.h"

namespace ag {
namespace {

constexpr int kLanes = 32;  // independent accumulators of a row reduction
constexpr int kTile = 64;   // kept inner elements accumulated together (Outer path)

// ---- reduction policies ---------------------------------------------------
// Acc: accumulator type; init(): identity; conv(x): element -> Acc;
// comb(a, b): combine; kDiv: divide by the reduced count at the end (mean).
template <typename Tin, typename A>
struct SumOp {
  using Acc = A;
  static constexpr bool kDiv = false;
  static Acc init() { return Acc(0); }
  static Acc conv(const Tin& v) { return static_cast<Acc>(load(v)); }
  static Acc comb(Acc a, Acc b) { return a + b; }
};
template <typename Tin, typename A>
struct MeanOp : SumOp<Tin, A> {
  static constexpr bool kDiv = true;
};
template <typename Tin, typename A>
struct ProdOp {
  using Acc = A;
  static constexpr bool kDiv = false;
  static Acc init() { return Acc(1); }
  static Acc conv(const Tin& v) { return static_cast<Acc>(load(v)); }
  static Acc comb(Acc a, Acc b) { return a * b; }
};
template <typename Tin, bool kMax>
struct ExtremeOp {  // amax / amin; NaN propagates like torch
  using Acc = acc_t<Tin>;
  static constexpr bool kDiv = false;
  static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>)
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  static Acc conv(const Tin& v) { return load(v); }
  static Acc comb(Acc a, Acc b) {
    if constexpr (std::is_floating_point_v<Acc>) {
      bool take = (kMax ? b > a : b < a) || b != b;
      return take ? b : a;
    } else {
      return (kMax ? b > a : b < a) ? b : a;
    }
  }
};
template <typename Tin, bool kAny>
struct AnyAllOp {
  using Acc = uint8_t;
  static constexpr bool kDiv = false;
  static Acc init() { return kAny ? 0 : 1; }
  static Acc conv(const Tin& v) { return load(v) != acc_t<Tin>(0); }
  static Acc comb(Acc a, Acc b) { return kAny ? (a | b) : (a & b); }
};

// kLanes independent accumulators; the tail goes into the first lanes, then the lanes are
// combined as a tree (halves at a time: vector operations, not kLanes dependent steps). (AVX2 only: an
// AVX-512 variant of the f32 rows ran sums 0-4% faster and amax 35-40% slower on a Zen 4.)
template <class Op, typename Tin>
inline typename Op::Acc reduce_row(const Tin* p, int64_t n) {
  using Acc = typename Op::Acc;
  Acc a[kLanes];
  for (int j = 0; j < kLanes; ++j) a[j] = Op::init();
  int64_t i = 0;
  // `omp simd` lets GCC vectorize the NaN-aware selects (-ftrapping-math blocks it otherwise)
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) a[j] = Op::comb(a[j], Op::conv(p[i + j]));
  const int rest = static_cast<int>(n - i);
#pragma omp simd
  for (int j = 0; j < rest; ++j) a[j] = Op::comb(a[j], Op::conv(p[i + j]));
  for (int w = kLanes / 2; w >= 1; w /= 2)
#pragma omp simd
    for (int j = 0; j < w; ++j) a[j] = Op::comb(a[j], a[j + w]);
  return a[0];
}

template <class Op, typename Tout>
inline void finish(Tout& dst, typename Op::Acc a, int64_t count) {
  if constexpr (Op::kDiv) store_cast(dst, static_cast<double>(a) / static_cast<double>(count));
  else store_cast(dst, a);
}

template <class Op, typename Tin, typename Tout>
void run_reduce(const ReduceGeom& g, const Tin* x, Tout* y) {
  using Acc = typename Op::Acc;
  const int64_t O = g.O, R = g.R, I = g.I, cnt = g.red_numel;
  if (g.out_numel == 0) return;
  const int nt = num_threads();
  if (g.path == ReduceGeom::Inner) {
    if (O < nt && R >= 65536 && nt > 1) {  // few long rows: split each row across threads
      const int64_t nb = std::min<int64_t>(64, R / 16384);
      const int64_t per = (R + nb - 1) / nb;
      for (int64_t o = 0; o < O; ++o) {
        Acc part[64];
        const Tin* row = x + o * R;
        parallel_for(nb, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            int64_t s = k * per, t = std::min(R, s + per);
            part[k] = reduce_row<Op>(row + s, std::max<int64_t>(t - s, 0));
          }
        });
        Acc r = Op::init();
        for (int64_t k = 0; k < nb; ++k) r = Op::comb(r, part[k]);
        finish<Op>(y[o], r, cnt);
      }
      return;
    }
    parallel_for(O, grain_for(R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) finish<Op>(y[o], reduce_row<Op>(x + o * R, R), cnt);
    });
  } else if (g.path == ReduceGeom::Outer) {
    const int64_t ntile = (I + kTile - 1) / kTile;
    auto tile = [&](int64_t o, int64_t i0, int64_t r0, int64_t r1, Acc* a) {
      const int64_t w = std::min<int64_t>(kTile, I - i0);
      for (int64_t j = 0; j < w; ++j) a[j] = Op::init();
      for (int64_t r = r0; r < r1; ++r) {
        const Tin* p = x + (o * R + r) * I + i0;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) a[j] = Op::comb(a[j], Op::conv(p[j]));
      }
    };
    if (O * ntile < nt && R >= 4096 && nt > 1) {  // few columns, many rows: split the rows too
      const int64_t nb = std::min<int64_t>(16, R / 1024);
      const int64_t per = (R + nb - 1) / nb;
      for (int64_t t = 0; t < O * ntile; ++t) {
        const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
        Acc part[16][kTile];
        parallel_for(nb, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) tile(o, i0, k * per, std::min(R, (k + 1) * per), part[k]);
        });
        for (int64_t k = 1; k < nb; ++k)
          for (int64_t j = 0; j < w; ++j) part[0][j] = Op::comb(part[0][j], part[k][j]);
        for (int64_t j = 0; j < w; ++j) finish<Op>(y[o * I + i0 + j], part[0][j], cnt);
      }
      return;
    }
    parallel_for(O * ntile, grain_for(R * kTile), [&](int64_t b, int64_t e) {
      Acc a[kTile];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
        tile(o, i0, 0, R, a);
        for (int64_t j = 0; j < w; ++j) finish<Op>(y[o * I + i0 + j], a[j], cnt);
      }
    });
  } else {
    const int64_t K = static_cast<int64_t>(g.kept_off.size()), RR = static_cast<int64_t>(g.red_off.size());
    const int64_t* ko = g.kept_off.data();
    const int64_t* ro = g.red_off.data();
    parallel_for(K, grain_for(RR), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const Tin* p = x + ko[k];
        Acc a = Op::init();
        for (int64_t r = 0; r < RR; ++r) a = Op::comb(a, Op::conv(p[ro[r]]));
        finish<Op>(y[k], a, cnt);
      }
    });
  }
}

// ---- inference ------------------------------------------------------------
struct ReduceSpec {
  std::vector<bool> mask;
  Shape out_shape;
};
ReduceSpec reduce_spec(const char* op, const TensorType& t, const Attrs& a, bool empty_is_all = true) {
  ReduceSpec s;
  s.mask = reduce_mask(op, t.rank(), a.ints("dims", {}), empty_is_all);
  s.out_shape = reduced_shape(t.shape(), s.mask, a.b("keepdim", false));
  return s;
}

// sum / prod: output dtype attr, default: floating -> same, ints/bool -> int64.
DType sum_like_dtype(const char* op, DType in, const Attrs& a) {
  DType def = is_floating(in) ? in : DType::i64;
  if (!a.has("dtype")) return def;
  DType d = a.dtype("dtype");
  AG_CHECK(d == def || (d == in && in != DType::b8), op, ": output dtype ", dtype_name(d), " for a ",
           dtype_name(in), " input is not supported (convert the input first)");
  return d;
}

std::vector<TensorType> infer_sum(const std::vector<TensorType>& in, const Attrs& a) {
  auto s = reduce_spec("sum", in[0], a);
  return {TensorType(sum_like_dtype("sum", in[0].dtype, a), s.out_shape)};
}
std::vector<TensorType> infer_prod(const std::vector<TensorType>& in, const Attrs& a) {
  auto s = reduce_spec("prod", in[0], a);
  return {TensorType(sum_like_dtype("prod", in[0].dtype, a), s.out_shape)};
}
std::vector<TensorType> infer_mean(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(is_floating(in[0].dtype), "mean: input must be floating, got ", in[0].str(),
           " (convert it to the output dtype first)");
  if (a.has("dtype"))
    AG_CHECK(a.dtype("dtype") == in[0].dtype, "mean: output dtype ", dtype_name(a.dtype("dtype")),
             " differs from the input ", in[0].str(), " (convert the input first)");
  auto s = reduce_spec("mean", in[0], a);
  return {TensorType(in[0].dtype, s.out_shape)};
}
template <bool kMax>
std::vector<TensorType> infer_extreme(const std::vector<TensorType>& in, const Attrs& a) {
  const char* op = kMax ? "amax" : "amin";
  auto s = reduce_spec(op, in[0], a);
  Shape sh = in[0].shape();
  for (size_t i = 0; i < sh.size(); ++i)
    AG_CHECK(!(s.mask[i] && sh[i] == 0), op, ": cannot reduce the zero-size dim ", i, " of ", in[0].str(),
             " (no identity)");
  return {TensorType(in[0].dtype, s.out_shape)};
}
std::vector<TensorType> infer_anyall(const std::vector<TensorType>& in, const Attrs& a) {
  // like torch's any.dims / all.dims: an empty dim list reduces nothing unless "all" is set
  auto s = reduce_spec("any/all", in[0], a, a.b("empty_is_all", true));
  return {TensorType(DType::b8, s.out_shape)};
}
std::vector<TensorType> infer_var(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(is_floating(in[0].dtype), "var: input must be floating, got ", in[0].str());
  auto s = reduce_spec("var", in[0], a);
  return {TensorType(in[0].dtype, s.out_shape)};
}

// ---- kernels --------------------------------------------------------------
template <template <typename, typename> class OpT>
std::unique_ptr<Kernel> make_sum_like(const Node& n, const char* name) {
  const TensorType& it = n.inputs[0]->type;
  DType od = n.out()->type.dtype;
  auto mask = reduce_mask(name, it.rank(), n.attrs.ints("dims", {}),
                          n.attrs.b("empty_is_all", true));
  ReduceGeom g = make_reduce_geom(it.shape(), mask);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(it.dtype, name, [&] {
    if constexpr (std::is_floating_point_v<acc_t<scalar_t>>) {
      using Op = OpT<scalar_t, double>;
      k = make_fn_kernel(std::string(name), [g](void* const* in, void* const* out) {
        run_reduce<Op>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
      });
    } else {
      using Op = OpT<scalar_t, int64_t>;
      if (od == DType::i64) {
        k = make_fn_kernel(std::string(name), [g](void* const* in, void* const* out) {
          run_reduce<Op>(g, static_cast<const scalar_t*>(in[0]), static_cast<int64_t*>(out[0]));
        });
      } else {
        k = make_fn_kernel(std::string(name), [g](void* const* in, void* const* out) {
          run_reduce<Op>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
        });
      }
    }
  });
  return k;
}
std::unique_ptr<Kernel> make_sum(const Node& n, const BuildCtx& ctx) { return make_sum_like<SumOp>(n, "sum"); }
std::unique_ptr<Kernel> make_prod(const Node& n, const BuildCtx& ctx) { return make_sum_like<ProdOp>(n, "prod"); }
// A mean over H and W of a 4-D value: the global average pool (ATen's adaptive_avg_pool2d to 1x1
// traces as this mean, static sizes or symbolic; a squeeze-excitation block's pool; a ConvNeXt
// head). It reads channels-last bytes as [N, H, W, C] reduced over the middle dims (the Outer path,
// vectorized over C); its result, [N, C, 1, 1] or [N, C], is the same bytes in either layout.
bool spatial_mean(const Node& n) {
  const TensorType& x = n.inputs[0]->type;
  return x.rank() == 4 && reduce_mask("mean", 4, n.attrs.ints("dims", {})) == std::vector<bool>{false, false, true, true};
}
bool mean_channels_last(const Node& n, int i) { return i == 0 && spatial_mean(n); }

std::unique_ptr<Kernel> make_mean(const Node& n, const BuildCtx& ctx) {
  const TensorType& it = n.inputs[0]->type;
  const bool nhwc = ctx.nhwc(n.inputs[0]->id);
  AG_CHECK(!nhwc || spatial_mean(n), "mean: node ", n.context(), ": a channels-last input needs a mean over H and W");
  ReduceGeom g = nhwc ? make_reduce_geom({it.size(0), it.size(2), it.size(3), it.size(1)}, {false, true, true, false})
                      : make_reduce_geom(it.shape(), reduce_mask("mean", it.rank(), n.attrs.ints("dims", {})));
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(it.dtype, "mean", [&] {
    using Op = MeanOp<scalar_t, double>;
    k = make_fn_kernel(nhwc ? "mean_nhwc_in" : "mean", [g](void* const* in, void* const* out) {
      run_reduce<Op>(g, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
    });
  });
  return k;
}
template <class OpFor>
std::unique_ptr<Kernel> make_same_type(const Node& n, const char* name) {
  const TensorType& it = n.inputs[0]->type;
  auto mask = reduce_mask(name, it.rank(), n.attrs.ints("dims", {}), n.attrs.b("empty_is_all", true));
  ReduceGeom g = make_reduce_geom(it.shape(), mask);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(it.dtype, name, [&] {
    using Op = typename OpFor::template op<scalar_t>;
    using Tout = typename OpFor::template out<scalar_t>;
    k = make_fn_kernel(std::string(name), [g](void* const* in, void* const* out) {
      run_reduce<Op>(g, static_cast<const scalar_t*>(in[0]), static_cast<Tout*>(out[0]));
    });
  });
  return k;
}
template <bool kMax>
struct ExtremeFor {
  template <typename T> using op = ExtremeOp<T, kMax>;
  template <typename T> using out = T;
};
template <bool kAny>
struct AnyAllFor {
  template <typename T> using op = AnyAllOp<T, kAny>;
  template <typename T> using out = bool;
};
std::unique_ptr<Kernel> make_amax(const Node& n, const BuildCtx& ctx) { return make_same_type<ExtremeFor<true>>(n, "amax"); }
std::unique_ptr<Kernel> make_amin(const Node& n, const BuildCtx& ctx) { return make_same_type<ExtremeFor<false>>(n, "amin"); }
std::unique_ptr<Kernel> make_any(const Node& n, const BuildCtx& ctx) { return make_same_type<AnyAllFor<true>>(n, "any"); }
std::unique_ptr<Kernel> make_all(const Node& n, const BuildCtx& ctx) { return make_same_type<AnyAllFor<false>>(n, "all"); }

// ---- var: two passes (mean, then squared deviations) in double ------------
template <typename T>
void run_var(const ReduceGeom& g, double corr, const T* x, T* y) {
  if (g.out_numel == 0) return;
  const int64_t O = g.O, R = g.R, I = g.I, N = g.red_numel;
  const double denom = std::max(0.0, static_cast<double>(N) - corr);
  auto fin = [&](T& dst, double ss) { store_cast(dst, ss / denom); };
  if (g.path == ReduceGeom::Inner) {
    parallel_for(O, grain_for(2 * R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = x + o * R;
        const double mean = reduce_row<SumOp<T, double>>(p, R) / static_cast<double>(N);
        double a[kLanes] = {};
        int64_t i = 0;
        for (; i + kLanes <= R; i += kLanes)
#pragma omp simd
          for (int j = 0; j < kLanes; ++j) {
            double d = static_cast<double>(load(p[i + j])) - mean;
            a[j] += d * d;
          }
        double ss = 0;
        for (int j = 0; j < kLanes; ++j) ss += a[j];
        for (; i < R; ++i) {
          double d = static_cast<double>(load(p[i])) - mean;
          ss += d * d;
        }
        fin(y[o], ss);
      }
    });
  } else if (g.path == ReduceGeom::Outer) {
    const int64_t ntile = (I + kTile - 1) / kTile;
    parallel_for(O * ntile, grain_for(2 * R * kTile), [&](int64_t b, int64_t e) {
      double m[kTile], s[kTile];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
        for (int64_t j = 0; j < w; ++j) m[j] = 0, s[j] = 0;
        for (int64_t r = 0; r < R; ++r) {
          const T* p = x + (o * R + r) * I + i0;
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) m[j] += static_cast<double>(load(p[j]));
        }
        for (int64_t j = 0; j < w; ++j) m[j] /= static_cast<double>(N);
        for (int64_t r = 0; r < R; ++r) {
          const T* p = x + (o * R + r) * I + i0;
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) {
            double d = static_cast<double>(load(p[j])) - m[j];
            s[j] += d * d;
          }
        }
        for (int64_t j = 0; j < w; ++j) fin(y[o * I + i0 + j], s[j]);
      }
    });
  } else {
    const int64_t K = static_cast<int64_t>(g.kept_off.size()), RR = static_cast<int64_t>(g.red_off.size());
    parallel_for(K, grain_for(2 * RR), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const T* p = x + g.kept_off[k];
        double m = 0, s = 0;
        for (int64_t r = 0; r < RR; ++r) m += static_cast<double>(load(p[g.red_off[r]]));
        m /= static_cast<double>(N);
        for (int64_t r = 0; r < RR; ++r) {
          double d = static_cast<double>(load(p[g.red_off[r]])) - m;
          s += d * d;
        }
        fin(y[k], s);
      }
    });
  }
}
std::unique_ptr<Kernel> make_var(const Node& n, const BuildCtx& ctx) {
  const TensorType& it = n.inputs[0]->type;
  ReduceGeom g = make_reduce_geom(it.shape(), reduce_mask("var", it.rank(), n.attrs.ints("dims", {})));
  double corr = n.attrs.f("correction", 1.0);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(it.dtype, "var", [&] {
    k = make_fn_kernel("var", [g, corr](void* const* in, void* const* out) {
      run_var(g, corr, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
    });
  });
  return k;
}

// ---- argmax / argmin: first index of the extreme; NaN counts as the extreme --
// attrs: dim (absent: the flattened tensor), keepdim.
std::vector<TensorType> infer_arg(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType& t = in[0];
  bool keep = a.b("keepdim", false);
  if (!a.has("dim")) {
    AG_CHECK(t.numel() > 0, "argmax/argmin: cannot reduce the empty tensor ", t.str());
    return {TensorType(DType::i64, keep ? Shape(t.rank(), 1) : Shape{})};
  }
  int64_t d = normalize_dim(a.i("dim"), std::max<int64_t>(t.rank(), 1));
  if (t.rank() == 0) return {TensorType(DType::i64, {})};
  std::vector<bool> mask(t.rank(), false);
  mask[d] = true;
  Shape out = reduced_shape(t.shape(), mask, keep);
  AG_CHECK(t.size(d) > 0 || TensorType(DType::i64, out).numel() == 0, "argmax/argmin: cannot reduce the zero-size dim ",
           d, " of ", t.str());
  return {TensorType(DType::i64, out)};
}

template <typename T, bool kMax>
void run_arg(int64_t O, int64_t R, int64_t I, const T* x, int64_t* y) {
  using A = acc_t<T>;
  auto better = [](A v, A best) {
    if constexpr (std::is_floating_point_v<A>) return (kMax ? v > best : v < best) || (v != v && best == best);
    else return kMax ? v > best : v < best;
  };
  if (O * I == 0 || R == 0) return;
  if (I == 1) {
    parallel_for(O, grain_for(R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = x + o * R;
        A best = load(p[0]);
        int64_t idx = 0;
        if constexpr (std::is_floating_point_v<A>) {
          if (best != best) {
            y[o] = 0;
            continue;
          }
        }
        for (int64_t i = 1; i < R; ++i) {
          A v = load(p[i]);
          if constexpr (std::is_floating_point_v<A>) {
            if (v != v) {
              idx = i;
              break;
            }
          }
          if (kMax ? v > best : v < best) best = v, idx = i;
        }
        y[o] = idx;
      }
    });
    return;
  }
  const int64_t ntile = (I + kTile - 1) / kTile;
  parallel_for(O * ntile, grain_for(R * kTile), [&](int64_t b, int64_t e) {
    A best[kTile];
    int64_t idx[kTile];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
      const T* p0 = x + o * R * I + i0;
      for (int64_t j = 0; j < w; ++j) best[j] = load(p0[j]), idx[j] = 0;
      for (int64_t r = 1; r < R; ++r) {
        const T* p = p0 + r * I;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) {
          A v = load(p[j]);
          bool take = better(v, best[j]);
          best[j] = take ? v : best[j];
          idx[j] = take ? r : idx[j];
        }
      }
      for (int64_t j = 0; j < w; ++j) y[o * I + i0 + j] = idx[j];
    }
  });
}
template <bool kMax>
std::unique_ptr<Kernel> make_arg(const Node& n, const BuildCtx& ctx) {
  const TensorType& t = n.inputs[0]->type;
  int64_t O = 1, R = t.numel(), I = 1;
  if (n.attrs.has("dim") && t.rank() > 0) split_at_dim(t.shape(), normalize_dim(n.attrs.i("dim"), t.rank()), O, R, I);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, kMax ? "argmax" : "argmin", [&] {
    k = make_fn_kernel(kMax ? "argmax" : "argmin", [O, R, I](void* const* in, void* const* out) {
      run_arg<scalar_t, kMax>(O, R, I, static_cast<const scalar_t*>(in[0]), static_cast<int64_t*>(out[0]));
    });
  });
  return k;
}

// ---- cumsum{dim, dtype?}: floating accumulates in double, ints in int64 -----
std::vector<TensorType> infer_cumsum(const std::vector<TensorType>& in, const Attrs& a) {
  normalize_dim(a.i("dim"), std::max<int64_t>(in[0].rank(), 1));
  return {TensorType(sum_like_dtype("cumsum", in[0].dtype, a), in[0].shape())};
}
template <typename T, typename Acc, typename Tout>
void run_cumsum(int64_t O, int64_t R, int64_t I, const T* x, Tout* y) {
  if (O * R * I == 0) return;
  if (I == 1) {
    parallel_for(O, grain_for(R), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        Acc a = 0;
        for (int64_t r = 0; r < R; ++r) {
          a += static_cast<Acc>(load(x[o * R + r]));
          store_cast(y[o * R + r], a);
        }
      }
    });
    return;
  }
  const int64_t ntile = (I + kTile - 1) / kTile;
  parallel_for(O * ntile, grain_for(R * kTile), [&](int64_t b, int64_t e) {
    Acc a[kTile];
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / ntile, i0 = (t % ntile) * kTile, w = std::min<int64_t>(kTile, I - i0);
      for (int64_t j = 0; j < w; ++j) a[j] = 0;
      for (int64_t r = 0; r < R; ++r) {
        const int64_t off = (o * R + r) * I + i0;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) {
          a[j] += static_cast<Acc>(load(x[off + j]));
          store_cast(y[off + j], a[j]);
        }
      }
    }
  });
}
std::unique_ptr<Kernel> make_cumsum(const Node& n, const BuildCtx& ctx) {
  const TensorType& t = n.inputs[0]->type;
  int64_t O = 1, R = 1, I = 1;
  if (t.rank() > 0) split_at_dim(t.shape(), normalize_dim(n.attrs.i("dim"), t.rank()), O, R, I);
  DType od = n.out()->type.dtype;
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, "cumsum", [&] {
    if constexpr (std::is_floating_point_v<acc_t<scalar_t>>) {
      k = make_fn_kernel("cumsum", [O, R, I](void* const* in, void* const* out) {
        run_cumsum<scalar_t, double, scalar_t>(O, R, I, static_cast<const scalar_t*>(in[0]),
                                               static_cast<scalar_t*>(out[0]));
      });
    } else if (od == DType::i64) {
      k = make_fn_kernel("cumsum", [O, R, I](void* const* in, void* const* out) {
        run_cumsum<scalar_t, int64_t, int64_t>(O, R, I, static_cast<const scalar_t*>(in[0]),
                                               static_cast<int64_t*>(out[0]));
      });
    } else {
      k = make_fn_kernel("cumsum", [O, R, I](void* const* in, void* const* out) {
        run_cumsum<scalar_t, int64_t, scalar_t>(O, R, I, static_cast<const scalar_t*>(in[0]),
                                                static_cast<scalar_t*>(out[0]));
      });
    }
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(sum, {.name = "sum", .min_inputs = 1, .max_inputs = 1, .infer = infer_sum, .make_kernel = make_sum,
                     .props = kReduction});
AG_REGISTER_OP(mean, {.name = "mean", .min_inputs = 1, .max_inputs = 1, .infer = infer_mean,
                      .make_kernel = make_mean, .props = kReduction, .channels_last = mean_channels_last});
AG_REGISTER_OP(prod, {.name = "prod", .min_inputs = 1, .max_inputs = 1, .infer = infer_prod,
                      .make_kernel = make_prod, .props = kReduction});
AG_REGISTER_OP(amax, {.name = "amax", .min_inputs = 1, .max_inputs = 1, .infer = infer_extreme<true>,
                      .make_kernel = make_amax, .props = kReduction});
AG_REGISTER_OP(amin, {.name = "amin", .min_inputs = 1, .max_inputs = 1, .infer = infer_extreme<false>,
                      .make_kernel = make_amin, .props = kReduction});
AG_REGISTER_OP(any, {.name = "any", .min_inputs = 1, .max_inputs = 1, .infer = infer_anyall, .make_kernel = make_any,
                     .props = kReduction});
AG_REGISTER_OP(all, {.name = "all", .min_inputs = 1, .max_inputs = 1, .infer = infer_anyall, .make_kernel = make_all,
                     .props = kReduction});
AG_REGISTER_OP(var, {.name = "var", .min_inputs = 1, .max_inputs = 1, .infer = infer_var, .make_kernel = make_var,
                     .props = kReduction});
AG_REGISTER_OP(argmax, {.name = "argmax", .min_inputs = 1, .max_inputs = 1, .infer = infer_arg,
                        .make_kernel = make_arg<true>, .props = kReduction});
AG_REGISTER_OP(argmin, {.name = "argmin", .min_inputs = 1, .max_inputs = 1, .infer = infer_arg,
                        .make_kernel = make_arg<false>, .props = kReduction});
AG_REGISTER_OP(cumsum, {.name = "cumsum", .min_inputs = 1, .max_inputs = 1, .infer = infer_cumsum,
                        .make_kernel = make_cumsum, .props = kNoProps});

}  // namespace ag
