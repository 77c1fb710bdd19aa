// Scans along one dim (cumsum lives in reduce.cpp):
//   cumprod{dim}            same dtype; floats accumulate in double, ints in int64
//   cummax / cummin{dim}    -> values, int64 indices
//   logcumsumexp{dim}       floating; accumulates in double
// Semantics follow PyTorch's CPU kernels: cummax/cummin take a NaN as soon as
// it appears (and the latest NaN's index), ties take the latest index;
// logcumsumexp combines with log1p(exp(min - max)) + max and keeps -inf/inf
// runs exact. Work is tiled as (outer, 64 inner lanes), scanned along dim.
#include <limits>

#include "kernels/common.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

constexpr int64_t kLanes = 64;

struct ScanGeom {
  int64_t O = 1, R = 1, I = 1;
  explicit ScanGeom(const Node& n) {
    const auto& t = n.inputs[0]->type;
    if (t.rank() > 0) split_at_dim(t.shape(), normalize_dim(n.attrs.i("dim"), t.rank()), O, R, I);
  }
  // f(offset of lane 0 at r = 0, number of lanes w): every (o, block of lanes)
  template <typename F>
  void each(F&& f) const {
    if (O * R * I == 0) return;
    const int64_t nb = (I + kLanes - 1) / kLanes;
    parallel_for(O * nb, grain_for(R * std::min(I, kLanes)), [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t o = u / nb, i0 = (u % nb) * kLanes;
        f(o * R * I + i0, std::min(kLanes, I - i0));
      }
    });
  }
};

std::vector<TensorType> infer_scan(const std::vector<TensorType>& in, const Attrs& a) {
  normalize_dim(a.i("dim"), std::max<int64_t>(in[0].rank(), 1));
  return {in[0]};
}
std::vector<TensorType> infer_scan_idx(const std::vector<TensorType>& in, const Attrs& a) {
  normalize_dim(a.i("dim"), std::max<int64_t>(in[0].rank(), 1));
  AG_CHECK(in[0].dtype != DType::b8, "cummax/cummin: bool is not supported");
  return {in[0], TensorType(DType::i64, in[0].shape())};
}
std::vector<TensorType> infer_logcumsumexp(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(is_floating(in[0].dtype), "logcumsumexp: floating input needed, got ", in[0].str());
  return infer_scan(in, a);
}

// ---- cumprod ---------------------------------------------------------------------------
std::unique_ptr<Kernel> make_cumprod(const Node& n, const BuildCtx& ctx) {
  ScanGeom g(n);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(n.inputs[0]->type.dtype, "cumprod", [&] {
    using Acc = std::conditional_t<std::is_floating_point_v<acc_t<scalar_t>>, double, int64_t>;
    k = make_fn_kernel("cumprod", [g](void* const* in, void* const* out) {
      const scalar_t* x = static_cast<const scalar_t*>(in[0]);
      scalar_t* y = static_cast<scalar_t*>(out[0]);
      g.each([&](int64_t base, int64_t w) {
        Acc a[kLanes];
        for (int64_t j = 0; j < w; ++j) a[j] = 1;
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t off = base + r * g.I;
          for (int64_t j = 0; j < w; ++j) {
            a[j] *= static_cast<Acc>(load(x[off + j]));
            store_cast(y[off + j], a[j]);
          }
        }
      });
    });
  });
  return k;
}

// ---- cummax / cummin ---------------------------------------------------------------------
template <bool kMax>
std::unique_ptr<Kernel> make_cumext(const Node& n, const BuildCtx& ctx) {
  ScanGeom g(n);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(n.inputs[0]->type.dtype, kMax ? "cummax" : "cummin", [&] {
    using A = acc_t<scalar_t>;
    k = make_fn_kernel(kMax ? "cummax" : "cummin", [g](void* const* in, void* const* out) {
      const scalar_t* x = static_cast<const scalar_t*>(in[0]);
      scalar_t* y = static_cast<scalar_t*>(out[0]);
      int64_t* yi = static_cast<int64_t*>(out[1]);
      g.each([&](int64_t base, int64_t w) {
        A best[kLanes];
        int64_t at[kLanes];
        for (int64_t j = 0; j < w; ++j) {
          best[j] = load(x[base + j]);
          at[j] = 0;
        }
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t off = base + r * g.I;
          for (int64_t j = 0; j < w; ++j) {
            const A v = load(x[off + j]);
            bool take;
            if constexpr (std::is_floating_point_v<A>) {
              take = v != v || (best[j] == best[j] && (kMax ? v >= best[j] : v <= best[j]));
            } else {
              take = kMax ? v >= best[j] : v <= best[j];
            }
            if (take) {
              best[j] = v;
              at[j] = r;
            }
            store(y[off + j], best[j]);
            yi[off + j] = at[j];
          }
        }
      });
    });
  });
  return k;
}

// ---- logcumsumexp ---------------------------------------------------------------------------
inline double log_add_exp(double x, double y) {
  const double lo = std::isnan(y) ? y : std::min(x, y), hi = std::isnan(y) ? y : std::max(x, y);
  if (lo != hi || std::isfinite(lo)) return std::log1p(std::exp(lo - hi)) + hi;
  return x;  // both the same infinity
}

std::unique_ptr<Kernel> make_logcumsumexp(const Node& n, const BuildCtx& ctx) {
  ScanGeom g(n);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(n.inputs[0]->type.dtype, "logcumsumexp", [&] {
    k = make_fn_kernel("logcumsumexp", [g](void* const* in, void* const* out) {
      const scalar_t* x = static_cast<const scalar_t*>(in[0]);
      scalar_t* y = static_cast<scalar_t*>(out[0]);
      g.each([&](int64_t base, int64_t w) {
        double a[kLanes];
        for (int64_t j = 0; j < w; ++j) a[j] = -std::numeric_limits<double>::infinity();
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t off = base + r * g.I;
          for (int64_t j = 0; j < w; ++j) {
            a[j] = log_add_exp(static_cast<double>(load(x[off + j])), a[j]);
            store_cast(y[off + j], a[j]);
          }
        }
      });
    });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(cumprod, {.name = "cumprod", .min_inputs = 1, .max_inputs = 1, .infer = infer_scan,
                         .make_kernel = make_cumprod});
AG_REGISTER_OP(cummax, {.name = "cummax", .min_inputs = 1, .max_inputs = 1, .infer = infer_scan_idx,
                        .make_kernel = make_cumext<true>});
AG_REGISTER_OP(cummin, {.name = "cummin", .min_inputs = 1, .max_inputs = 1, .infer = infer_scan_idx,
                        .make_kernel = make_cumext<false>});
AG_REGISTER_OP(logcumsumexp, {.name = "logcumsumexp", .min_inputs = 1, .max_inputs = 1,
                              .infer = infer_logcumsumexp, .make_kernel = make_logcumsumexp});

}  // namespace ag
