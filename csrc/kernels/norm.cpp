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
#include "kernels/isa.h"
#include "kernels/reduce_util.h"
#include "kernels/simd.h"

namespace ag {
namespace {

constexpr int kLanes = 8;
constexpr int64_t kMaxGroupsOnStack = 512;  // group_norm's channels-last kernel keeps two stats per group on the stack

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

// f32 rows [m0, m1), written once for L lanes (kernels/simd.h): four accumulators for the sums, the
// tail a masked load (and a masked store of the result).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <int L, bool kRms>
[[gnu::always_inline]] inline void rowwise_f32(int64_t m0, int64_t m1, int64_t N, float eps, const float* x,
                                               const float* w, const float* bias, float* y) {
  using F = typename simd::V<L>::F;
  const int64_t nv = N / L * L, rem = N - nv;
  for (int64_t m = m0; m < m1; ++m) {
    const float* p = x + m * N;
    float* q = y + m * N;
    float mean = 0;
    F v, a0{}, a1{}, a2{}, a3{};
    int64_t i = 0;
    if constexpr (!kRms) {
      for (; i + 4 * L <= N; i += 4 * L) {
        F b0, b1, b2, b3;
        simd::load<L>(b0, p + i), simd::load<L>(b1, p + i + L), simd::load<L>(b2, p + i + 2 * L),
            simd::load<L>(b3, p + i + 3 * L);
        a0 += b0, a1 += b1, a2 += b2, a3 += b3;
      }
      for (; i < nv; i += L) simd::load<L>(v, p + i), a0 += v;
      if (rem) simd::load_n(v, p + nv, rem), a1 += v;
      mean = simd::hsum<L>((a0 + a1) + (a2 + a3)) / static_cast<float>(N);
      a0 = a1 = a2 = a3 = F{};
      i = 0;
    }
    for (; i + 4 * L <= N; i += 4 * L) {
      F b0, b1, b2, b3;
      simd::load<L>(b0, p + i), simd::load<L>(b1, p + i + L), simd::load<L>(b2, p + i + 2 * L),
          simd::load<L>(b3, p + i + 3 * L);
      b0 -= mean, b1 -= mean, b2 -= mean, b3 -= mean;
      a0 += b0 * b0, a1 += b1 * b1, a2 += b2 * b2, a3 += b3 * b3;
    }
    for (; i < nv; i += L) simd::load<L>(v, p + i), v -= mean, a0 += v * v;
    if (rem) simd::load_n(v, p + nv, rem), v = simd::keep_n(v - mean, rem), a1 += v * v;
    const float var = simd::hsum<L>((a0 + a1) + (a2 + a3)) / static_cast<float>(N);
    const float rstd = 1.f / std::sqrt(var + eps);
    // (x - mean) * rstd [* w] [+ b] over full vectors, then the tail under a mask
    F wv{}, bv{};
    for (i = 0; i <= N; i += L) {
      const int64_t n = std::min<int64_t>(L, N - i);
      if (n == 0) break;
      if (n == L) {
        simd::load<L>(v, p + i);
        if (w) simd::load<L>(wv, w + i);
        if (bias) simd::load<L>(bv, bias + i);
      } else {
        simd::load_n(v, p + i, n);
        if (w) simd::load_n(wv, w + i, n);
        if (bias) simd::load_n(bv, bias + i, n);
      }
      v = (v - mean) * rstd;
      if (w) v = v * wv;
      if (bias) v = v + bv;
      if (n == L) simd::store<L>(q + i, v);
      else simd::store_n(q + i, v, n);
    }
  }
}
template <bool kRms>
AG_WRAPPER_AVX512 void rowwise_f32_avx512(int64_t m0, int64_t m1, int64_t N, float eps, const float* x,
                                                           const float* w, const float* bias, float* y) {
  rowwise_f32<16, kRms>(m0, m1, N, eps, x, w, bias, y);
}
template <bool kRms>
AG_WRAPPER_AVX2 void rowwise_f32_avx2(int64_t m0, int64_t m1, int64_t N, float eps, const float* x, const float* w,
                                        const float* bias, float* y) {
  rowwise_f32<8, kRms>(m0, m1, N, eps, x, w, bias, y);
}
#pragma GCC diagnostic pop

template <typename T, typename W, bool kRms>
void run_rowwise(int64_t M, int64_t N, double eps_d, const T* x, const W* w, const W* bias, T* y) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(eps_d);
  if constexpr (std::is_same_v<T, float> && std::is_same_v<W, float>) {
    const bool avx512 = isa::use_avx512();
    parallel_for(M, grain_for(3 * N), [&](int64_t b, int64_t e) {
      if (avx512) rowwise_f32_avx512<kRms>(b, e, N, eps, x, w, bias, y);
      else rowwise_f32_avx2<kRms>(b, e, N, eps, x, w, bias, y);
    });
    return;
  }
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

// Channels-last input ([N, H, W, C] bytes of a 4-D x: BuildCtx::channels_last): per sample, each of
// `chunks` pixel ranges sums every channel (vectorized along C) into its own row of `part`
// ([chunks, C]); a group's sums are folded from those rows. Two passes as above (the mean, then the
// squared deviations from it), then the result written NHWC, or NCHW when `out_nhwc` is false.
// Scratch: part, then per-channel mean, scale and shift (C each).
template <typename T, typename W>
void run_group_norm_nhwc(int64_t N, int64_t C, int64_t HW, int64_t G, double eps_d, const T* x, const W* w,
                         const W* bias, T* y, bool out_nhwc, int64_t chunks, void* scratch) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(eps_d);
  const int64_t D = C / G;
  A* part = static_cast<A*>(scratch);
  A *mc = part + chunks * C, *sc = mc + C, *sh = sc + C;
  auto range = [&](int64_t k) { return std::pair<int64_t, int64_t>{k * HW / chunks, (k + 1) * HW / chunks}; };
  // per chunk and channel: sum of f(x) over the chunk's pixels; then per group over chunks and its channels
  auto group_sums = [&](const T* xs, bool centered, A* out) {
    parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        A* acc = part + k * C;
        std::fill(acc, acc + C, A(0));
        const auto [p0, p1] = range(k);
        for (int64_t p = p0; p < p1; ++p) {
          const T* row = xs + p * C;
          if (centered) {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const A d = load(row[c]) - mc[c];
              acc[c] += d * d;
            }
          } else {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) acc[c] += load(row[c]);
          }
        }
      }
    });
    for (int64_t g = 0; g < G; ++g) {
      A s = 0;
      for (int64_t k = 0; k < chunks; ++k)
        for (int64_t d = 0; d < D; ++d) s += part[k * C + g * D + d];
      out[g] = s;
    }
  };
  for (int64_t n = 0; n < N; ++n) {
    const T* xs = x + n * HW * C;
    T* ys = y + n * HW * C;
    A stat[2 * kMaxGroupsOnStack];
    A *mean = stat, *rstd = stat + G;
    group_sums(xs, false, mean);
    for (int64_t g = 0; g < G; ++g) {
      mean[g] /= static_cast<A>(D * HW);
      std::fill(mc + g * D, mc + (g + 1) * D, mean[g]);
    }
    group_sums(xs, true, rstd);
    for (int64_t g = 0; g < G; ++g) rstd[g] = A(1) / std::sqrt(rstd[g] / static_cast<A>(D * HW) + eps);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / D;
      sc[c] = w ? rstd[g] * static_cast<A>(load(w[c])) : rstd[g];
      sh[c] = (bias ? static_cast<A>(load(bias[c])) : A(0)) - mean[g] * sc[c];
    }
    parallel_for(HW, grain_for(2 * C), [&](int64_t b, int64_t e) {
      if (out_nhwc) {
        for (int64_t p = b; p < e; ++p) {
          const T* row = xs + p * C;
          T* o = ys + p * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) store(o[c], static_cast<A>(load(row[c]) * sc[c] + sh[c]));
        }
        return;
      }
      for (int64_t p0 = b; p0 < e; p0 += 16) {  // (16 pixels at a time: each channel's run of 16 in NCHW)
        const int64_t p1 = std::min(e, p0 + 16);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = p0; p < p1; ++p) store(ys[c * HW + p], static_cast<A>(load(xs[p * C + c]) * sc[c] + sh[c]));
      }
    });
  }
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
  const bool in_nhwc = ctx.nhwc(n.inputs[0]->id), out_nhwc = ctx.nhwc(n.out()->id);
  AG_CHECK(!out_nhwc || in_nhwc, "group_norm: node ", n.context(), ": a channels-last result needs a channels-last input");
  AG_CHECK(!in_nhwc || (x.rank() == 4 && G <= kMaxGroupsOnStack), "group_norm: node ", n.context(),
           ": a channels-last input needs a 4-D x and at most ", kMaxGroupsOnStack, " groups");
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(HW, 4 * std::max(num_threads(), 1)));
  const char* name = !in_nhwc ? "group_norm" : out_nhwc ? "group_norm_nhwc" : "group_norm_nhwc_in";
  AG_DISPATCH_FLOAT(x.dtype, "group_norm", [&] {
    const size_t bytes = in_nhwc ? static_cast<size_t>((chunks + 3) * C) * sizeof(acc_t<scalar_t>) : 0;
    auto mk = [&]<typename W>() {
      k = make_fn_kernel(name, bytes, [=](void* const* in, void* const* out, void* scratch) {
        if (numel == 0) return;
        const auto* xp = static_cast<const scalar_t*>(in[0]);
        const W* w = wi >= 0 ? static_cast<const W*>(in[wi]) : nullptr;
        const W* b = bi >= 0 ? static_cast<const W*>(in[bi]) : nullptr;
        auto* y = static_cast<scalar_t*>(out[0]);
        if (in_nhwc) run_group_norm_nhwc<scalar_t, W>(N, C, HW, G, eps, xp, w, b, y, out_nhwc, chunks, scratch);
        else run_group_norm<scalar_t, W>(N, C, HW, G, eps, xp, w, b, y);
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
// Channels-last (OpDef::channels_last): a 4-D group norm reads NHWC and passes it on (a channels-last
// result only from a channels-last input).
static bool group_norm_channels_last(const Node& n, int i) {
  const TensorType& x = n.inputs[0]->type;
  return (i == 0 || i == kPassesChannelsLast) && x.rank() == 4 && n.attrs.i("groups") <= kMaxGroupsOnStack;
}

AG_REGISTER_OP(group_norm, {.name = "group_norm", .min_inputs = 1, .max_inputs = 3, .infer = infer_group_norm,
                            .make_kernel = make_group_norm, .props = kNoProps, .channels_last = group_norm_channels_last});

}  // namespace ag
