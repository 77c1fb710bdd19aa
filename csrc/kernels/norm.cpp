// Normalizations, all computed in float (double for f64):
//   layer_norm(x, weight?, bias?){normalized_ndim, eps, has_weight, has_bias}
//   rms_norm(x, weight?){normalized_ndim, eps, has_weight}
//   batch_norm(x, mean, var, weight?, bias?){eps, has_weight, has_bias}  (inference,
//     channel dim 1, rank 2..5)
//   group_norm(x, weight?, bias?){groups, eps, has_weight, has_bias}  x [N, C, *],
//     statistics over each group of C / groups channels and all spatial positions
// Parameters have the input's dtype or float32 (a bf16 model with f32 norm weights).
// FP ops never trap here: lets GCC if-convert and vectorize the NaN-aware selects
// and the vectorized exp (results are unchanged; this is not -ffast-math).
#pragma GCC optimize("no-trapping-math")
#include "kernels/reduce_util.h"

namespace ag {
namespace {

constexpr int kLanes = 8;

void check_param(const char* op, const char* what, const TensorType& p, const Shape& want, DType xdt) {
  AG_CHECK(p.shape() == want, op, ": ", what, " has shape ", shape_str(p.shape()), ", expected ", shape_str(want));
  AG_CHECK(p.dtype == xdt || p.dtype == DType::f32, op, ": ", what, " dtype ", dtype_name(p.dtype),
           " must be the input's (", dtype_name(xdt), ") or float32");
}

// ---- layer_norm / rms_norm --------------------------------------------------
template <bool kRms>
std::vector<TensorType> infer_rowwise(const std::vector<TensorType>& in, const Attrs& a) {
  const char* op = kRms ? "rms_norm" : "layer_norm";
  const TensorType& x = in[0];
  AG_CHECK(is_floating(x.dtype), op, ": input must be floating, got ", x.str());
  int64_t nd = a.i("normalized_ndim");
  AG_CHECK(nd >= 0 && nd <= x.rank(), op, ": normalized_ndim ", nd, " does not fit input ", x.str());
  bool hw = a.b("has_weight", false), hb = !kRms && a.b("has_bias", false);
  AG_CHECK(static_cast<int64_t>(in.size()) == 1 + hw + hb, op, ": expected ", 1 + hw + hb, " inputs, got ",
           in.size());
  const Shape xs = x.shape();
  Shape ns(xs.end() - nd, xs.end());
  if (hw) check_param(op, "weight", in[1], ns, x.dtype);
  if (hb) {
    check_param(op, "bias", in[1 + hw], ns, x.dtype);
    if (hw) AG_CHECK(in[1].dtype == in[2].dtype, op, ": weight and bias dtypes differ");
  }
  return {x};
}

template <typename T, typename W, bool kRms>
void run_rowwise(int64_t M, int64_t N, double eps_d, const T* x, const W* w, const W* bias, T* y) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(eps_d);
  parallel_for(M, grain_for(3 * N), [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) {
      const T* p = x + m * N;
      T* q = y + m * N;
      A mean = 0;
      if constexpr (!kRms) {
        A s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < N; ++i) s += load(p[i]);
        mean = s / static_cast<A>(N);
      }
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < N; ++i) {
        A d = load(p[i]) - mean;
        ss += d * d;
      }
      const A var = ss / static_cast<A>(N);
      const A rstd = A(1) / std::sqrt(var + eps);
      if (w && bias) {
#pragma omp simd
        for (int64_t i = 0; i < N; ++i)
          store(q[i], static_cast<A>((load(p[i]) - mean) * rstd * static_cast<A>(load(w[i])) +
                                     static_cast<A>(load(bias[i]))));
      } else if (w) {
#pragma omp simd
        for (int64_t i = 0; i < N; ++i)
          store(q[i], static_cast<A>((load(p[i]) - mean) * rstd * static_cast<A>(load(w[i]))));
      } else if (bias) {
#pragma omp simd
        for (int64_t i = 0; i < N; ++i)
          store(q[i], static_cast<A>((load(p[i]) - mean) * rstd + static_cast<A>(load(bias[i]))));
      } else {
#pragma omp simd
        for (int64_t i = 0; i < N; ++i) store(q[i], (load(p[i]) - mean) * rstd);
      }
    }
  });
}

template <bool kRms>
std::unique_ptr<Kernel> make_rowwise(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  const int64_t nd = n.attrs.i("normalized_ndim");
  int64_t N = 1;
  for (int64_t i = x.rank() - nd; i < x.rank(); ++i) N *= x.size(i);
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  const double eps = n.attrs.f("eps");
  const bool hw = n.attrs.b("has_weight", false), hb = !kRms && n.attrs.b("has_bias", false);
  const int wi = hw ? 1 : -1, bi = hb ? 1 + hw : -1;
  const bool wf32 = (hw || hb) && n.inputs[1]->type.dtype == DType::f32 && x.dtype != DType::f32;
  const char* name = kRms ? "rms_norm" : "layer_norm";
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, name, [&] {
    auto mk = [&]<typename W>() {
      k = make_fn_kernel(name, [=](void* const* in, void* const* out) {
        if (M == 0) return;
        run_rowwise<scalar_t, W, kRms>(M, N, eps, static_cast<const scalar_t*>(in[0]),
                                       wi >= 0 ? static_cast<const W*>(in[wi]) : nullptr,
                                       bi >= 0 ? static_cast<const W*>(in[bi]) : nullptr,
                                       static_cast<scalar_t*>(out[0]));
      });
    };
    if (wf32) mk.template operator()<float>();
    else mk.template operator()<scalar_t>();
  });
  return k;
}

// ---- batch_norm (inference) -------------------------------------------------
std::vector<TensorType> infer_batch_norm(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType& x = in[0];
  AG_CHECK(is_floating(x.dtype), "batch_norm: input must be floating, got ", x.str());
  AG_CHECK(x.rank() >= 2 && x.rank() <= 5, "batch_norm: input must have rank 2..5, got ", x.str());
  bool hw = a.b("has_weight", false), hb = a.b("has_bias", false);
  AG_CHECK(static_cast<int64_t>(in.size()) == 3 + hw + hb, "batch_norm: expected ", 3 + hw + hb, " inputs, got ",
           in.size());
  Shape c{x.size(1)};
  const char* names[] = {"running_mean", "running_var", "weight", "bias"};
  for (size_t i = 1; i < in.size(); ++i) {
    check_param("batch_norm", names[i == 3 && !hw ? 3 : i - 1], in[i], c, x.dtype);
    AG_CHECK(in[i].dtype == in[1].dtype, "batch_norm: parameter dtypes differ (", in[1].str(), " vs ", in[i].str(),
             ")");
  }
  return {x};
}

template <typename T, typename P>
void run_batch_norm(int64_t N, int64_t C, int64_t HW, double eps, const T* x, const P* mean, const P* var,
                    const P* w, const P* bias, float* ab, T* y) {
  using A = acc_t<T>;
  for (int64_t c = 0; c < C; ++c) {
    A invstd = A(1) / std::sqrt(static_cast<A>(load(var[c])) + static_cast<A>(eps));
    A alpha = w ? invstd * static_cast<A>(load(w[c])) : invstd;
    A beta = (bias ? static_cast<A>(load(bias[c])) : A(0)) - static_cast<A>(load(mean[c])) * alpha;
    ab[c] = static_cast<float>(alpha), ab[C + c] = static_cast<float>(beta);
  }
  if constexpr (std::is_same_v<A, double>) {
    // f64: recompute the terms in double inside the loop (ab holds float copies only)
    parallel_for(N * C, grain_for(HW), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t c = t % C;
        double invstd = 1.0 / std::sqrt(static_cast<double>(load(var[c])) + eps);
        double alpha = w ? invstd * load(w[c]) : invstd;
        double beta = (bias ? static_cast<double>(load(bias[c])) : 0.0) - load(mean[c]) * alpha;
        for (int64_t i = 0; i < HW; ++i) y[t * HW + i] = x[t * HW + i] * alpha + beta;
      }
    });
  } else if (HW == 1) {
    const float* al = ab;
    const float* be = ab + C;
    parallel_for(N, grain_for(C), [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n)
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) store(y[n * C + c], load(x[n * C + c]) * al[c] + be[c]);
    });
  } else {
    parallel_for(N * C, grain_for(HW), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t c = t % C;
        const float al = ab[c], be = ab[C + c];
        const T* p = x + t * HW;
        T* q = y + t * HW;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) store(q[i], load(p[i]) * al + be);
      }
    });
  }
}

std::unique_ptr<Kernel> make_batch_norm(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t HW = C == 0 || N == 0 ? 0 : x.numel() / (N * C);
  // eps is added in the math type (float for f32/bf16/f16), like torch
  const double eps = n.attrs.f("eps");
  const bool hw = n.attrs.b("has_weight", false), hb = n.attrs.b("has_bias", false);
  const int wi = hw ? 3 : -1, bi = hb ? 3 + hw : -1;
  const bool pf32 = n.inputs[1]->type.dtype == DType::f32 && x.dtype != DType::f32;
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "batch_norm", [&] {
    auto mk = [&]<typename P>() {
      k = make_fn_kernel("batch_norm", 2 * C * sizeof(float), [=](void* const* in, void* const* out, void* ab) {
        if (N * C * HW == 0) return;
        run_batch_norm<scalar_t, P>(N, C, HW, eps, static_cast<const scalar_t*>(in[0]),
                                    static_cast<const P*>(in[1]), static_cast<const P*>(in[2]),
                                    wi >= 0 ? static_cast<const P*>(in[wi]) : nullptr,
                                    bi >= 0 ? static_cast<const P*>(in[bi]) : nullptr, static_cast<float*>(ab),
                                    static_cast<scalar_t*>(out[0]));
      });
    };
    if (pf32) mk.template operator()<float>();
    else mk.template operator()<scalar_t>();
  });
  return k;
}

// ---- group_norm ---------------------------------------------------------------
std::vector<TensorType> infer_group_norm(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType& x = in[0];
  AG_CHECK(is_floating(x.dtype), "group_norm: input must be floating, got ", x.str());
  AG_CHECK(x.rank() >= 2, "group_norm: input must be [N, C, *], got ", x.str());
  const int64_t G = a.i("groups");
  AG_CHECK(G >= 1 && x.size(1) % G == 0, "group_norm: ", x.size(1), " channels are not divisible by groups=", G);
  bool hw = a.b("has_weight", false), hb = a.b("has_bias", false);
  AG_CHECK(static_cast<int64_t>(in.size()) == 1 + hw + hb, "group_norm: expected ", 1 + hw + hb, " inputs, got ",
           in.size());
  Shape c{x.size(1)};
  if (hw) check_param("group_norm", "weight", in[1], c, x.dtype);
  if (hb) check_param("group_norm", "bias", in[1 + hw], c, x.dtype);
  if (hw && hb) AG_CHECK(in[1].dtype == in[2].dtype, "group_norm: weight and bias dtypes differ");
  return {x};
}

template <typename T, typename W>
void run_group_norm(int64_t N, int64_t C, int64_t HW, int64_t G, double eps_d, const T* x, const W* w,
                    const W* bias, T* y) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(eps_d);
  const int64_t D = C / G, L = D * HW;
  parallel_for(N * G, grain_for(3 * L), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const T* p = x + t * L;
      T* q = y + t * L;
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < L; ++i) s += load(p[i]);
      const A mean = s / static_cast<A>(L);
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < L; ++i) {
        A d = load(p[i]) - mean;
        ss += d * d;
      }
      const A rstd = A(1) / std::sqrt(ss / static_cast<A>(L) + eps);
      const int64_t c0 = (t % G) * D;
      for (int64_t d = 0; d < D; ++d) {
        const A sc = w ? rstd * static_cast<A>(load(w[c0 + d])) : rstd;
        const A sh = (bias ? static_cast<A>(load(bias[c0 + d])) : A(0)) - mean * sc;
        const T* pc = p + d * HW;
        T* qc = q + d * HW;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) store(qc[i], static_cast<A>(load(pc[i]) * sc + sh));
      }
    }
  });
}

std::unique_ptr<Kernel> make_group_norm(const Node& n, const BuildCtx& ctx) {
  const TensorType& x = n.inputs[0]->type;
  const int64_t N = x.size(0), C = x.size(1), G = n.attrs.i("groups");
  const int64_t HW = N * C == 0 ? 0 : x.numel() / (N * C), numel = x.numel();
  const double eps = n.attrs.f("eps");
  const bool hw = n.attrs.b("has_weight", false), hb = n.attrs.b("has_bias", false);
  const int wi = hw ? 1 : -1, bi = hb ? 1 + hw : -1;
  const bool wf32 = (hw || hb) && n.inputs[1]->type.dtype == DType::f32 && x.dtype != DType::f32;
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_FLOAT(x.dtype, "group_norm", [&] {
    auto mk = [&]<typename W>() {
      k = make_fn_kernel("group_norm", [=](void* const* in, void* const* out) {
        if (numel == 0) return;
        run_group_norm<scalar_t, W>(N, C, HW, G, eps, static_cast<const scalar_t*>(in[0]),
                                    wi >= 0 ? static_cast<const W*>(in[wi]) : nullptr,
                                    bi >= 0 ? static_cast<const W*>(in[bi]) : nullptr,
                                    static_cast<scalar_t*>(out[0]));
      });
    };
    if (wf32) mk.template operator()<float>();
    else mk.template operator()<scalar_t>();
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(layer_norm, {.name = "layer_norm", .min_inputs = 1, .max_inputs = 3, .infer = infer_rowwise<false>,
                            .make_kernel = make_rowwise<false>, .props = kNoProps});
AG_REGISTER_OP(rms_norm, {.name = "rms_norm", .min_inputs = 1, .max_inputs = 2, .infer = infer_rowwise<true>,
                          .make_kernel = make_rowwise<true>, .props = kNoProps});
AG_REGISTER_OP(batch_norm, {.name = "batch_norm", .min_inputs = 3, .max_inputs = 5, .infer = infer_batch_norm,
                            .make_kernel = make_batch_norm, .props = kNoProps});
AG_REGISTER_OP(group_norm, {.name = "group_norm", .min_inputs = 1, .max_inputs = 3, .infer = infer_group_norm,
                            .make_kernel = make_group_norm, .props = kNoProps});

}  // namespace ag
