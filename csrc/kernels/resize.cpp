// 2-D resize (F.interpolate's nearest / nearest-exact / bilinear / bicubic modes), following
// PyTorch's CPU kernels (aten/src/ATen/native/UpSample.h) for every source index and weight:
//   resize2d{mode: "nearest" | "nearest_exact" | "bilinear" | "bicubic", align_corners,
//            output_size: [OH, OW], scales: [sh, sw] (the op's scales_h/scales_w; <= 0: none),
//            channels_last: the input is [N, H, W, C] (else [N, C, H, W])}
// Separable: per output row and per output column, the source indices and weights are tables made
// once at build time (shapes are static per program), in float32 with torch's formulas (its CPU
// build contracts scale * (o + 0.5) - 0.5 into one fused multiply-add: so do we, explicitly); a value is
// sum_y wy * (sum_x wx * x[iy, ix]) in that order, as torch's interpolate() nests them, with
// no zero weight skipped (an inf beside a tap gives NaN as in eager).
// NCHW: each task (a plane and a block of output rows) keeps the horizontal passes of the input rows
// it needs (a column tile at a time) and combines them per output row: a gather along W, then a
// vectorized blend along OW. Channels-last: every output pixel blends whole C vectors.
// Nearest moves elements (any dtype, by element size); the other modes take float32, bfloat16 and
// float16 and compute in float32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "kernels/common.h"

namespace ag {
namespace {

enum class Mode { nearest, nearest_exact, bilinear, bicubic };

Mode parse_mode(const std::string& m) {
  if (m == "nearest") return Mode::nearest;
  if (m == "nearest_exact") return Mode::nearest_exact;
  if (m == "bilinear") return Mode::bilinear;
  if (m == "bicubic") return Mode::bicubic;
  fail("resize2d: mode must be nearest, nearest_exact, bilinear or bicubic, got '", m, "'");
}

int taps_of(Mode m) { return m == Mode::bicubic ? 4 : m == Mode::bilinear ? 2 : 1; }

// torch's compute_scales_value / area_pixel_compute_scale, in float.
float compute_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.0f;
  return scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
}

// One axis: for output position o, taps source indices idx[k * n + o] with weights w[k * n + o].
struct Axis {
  int64_t n = 0;
  int taps = 1;
  std::vector<int32_t> idx;
  std::vector<float> w;
};

Axis make_axis(Mode mode, int64_t in, int64_t out, bool align_corners, double scale) {
  Axis a;
  a.n = out;
  a.taps = taps_of(mode);
  a.idx.assign(static_cast<size_t>(a.taps * out), 0);
  a.w.assign(static_cast<size_t>(a.taps * out), 0.0f);
  auto set = [&](int k, int64_t o, int64_t i, float w) {
    a.idx[k * out + o] = static_cast<int32_t>(i);
    a.w[k * out + o] = w;
  };
  for (int64_t o = 0; o < out; ++o) {
    if (mode == Mode::nearest) {  // nearest_idx
      int64_t i;
      if (out == in) i = o;
      else if (out == 2 * in) i = o >> 1;
      else i = std::min(static_cast<int64_t>(floorf(o * compute_scale(in, out, false, scale))), in - 1);
      set(0, o, i, 1.0f);
    } else if (mode == Mode::nearest_exact) {  // nearest_exact_idx: (o + 0.5) is a double, as in torch
      const float s = compute_scale(in, out, false, scale);
      set(0, o, std::min(static_cast<int64_t>(floorf((o + 0.5) * s)), in - 1), 1.0f);
    } else if (mode == Mode::bilinear) {  // compute_source_index_and_lambda
      if (out == in) {
        set(0, o, o, 1.0f), set(1, o, o, 0.0f);
        continue;
      }
      const float s = compute_scale(in, out, align_corners, scale);
      float r = align_corners ? s * static_cast<float>(o) : std::fma(s, static_cast<float>(o) + 0.5f, -0.5f);
      if (r < 0) r = 0;
      const int64_t i0 = std::min(static_cast<int64_t>(r), in - 1);
      const float l1 = std::min(std::max(r - static_cast<float>(i0), 0.0f), 1.0f);
      set(0, o, i0, 1.0f - l1), set(1, o, i0 + (i0 < in - 1 ? 1 : 0), l1);
    } else {  // bicubic: guard_index_and_lambda, get_cubic_upsample_coefficients, bounded access
      const float s = compute_scale(in, out, align_corners, scale);
      const float r = align_corners ? s * static_cast<float>(o) : std::fma(s, static_cast<float>(o) + 0.5f, -0.5f);
      const int64_t i0 = std::min(static_cast<int64_t>(floorf(r)), in - 1);
      const float t = std::min(std::max(r - static_cast<float>(i0), 0.0f), 1.0f);
      const float A = -0.75f;
      auto c1 = [A](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
      auto c2 = [A](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
      const float w[4] = {c2(t + 1.0f), c1(t), c1(1.0f - t), c2((1.0f - t) + 1.0f)};
      for (int k = 0; k < 4; ++k) set(k, o, std::max<int64_t>(std::min<int64_t>(i0 - 1 + k, in - 1), 0), w[k]);
    }
  }
  return a;
}

struct Geom {
  Mode mode = Mode::nearest;
  bool align_corners = false, channels_last = false;
  int64_t N = 0, C = 0, H = 0, W = 0, OH = 0, OW = 0;
  double sh = 0, sw = 0;
};

Geom geom_of(const TensorType& x, const Attrs& a) {
  Geom g;
  g.mode = parse_mode(a.s("mode"));
  g.align_corners = a.b("align_corners", false);
  g.channels_last = a.b("channels_last", false);
  AG_CHECK(x.rank() == 4, "resize2d: expected a 4-D input, got ", x.str());
  AG_CHECK(g.mode == Mode::nearest || g.mode == Mode::nearest_exact || x.dtype == DType::f32 ||
               x.dtype == DType::bf16 || x.dtype == DType::f16,
           "resize2d: ", a.s("mode"), " takes float32, bfloat16 or float16, got ", x.str());
  AG_CHECK(!g.align_corners || g.mode == Mode::bilinear || g.mode == Mode::bicubic,
           "resize2d: align_corners is only for bilinear and bicubic");
  Shape s = x.shape();
  g.N = s[0];
  if (g.channels_last) g.H = s[1], g.W = s[2], g.C = s[3];
  else g.C = s[1], g.H = s[2], g.W = s[3];
  const auto os = a.ints("output_size");
  AG_CHECK(os.size() == 2 && os[0] > 0 && os[1] > 0, "resize2d: output_size must be 2 sizes > 0, got ",
           shape_str(os));
  g.OH = os[0], g.OW = os[1];
  AG_CHECK(g.H > 0 && g.W > 0 && g.H < INT32_MAX && g.W < INT32_MAX, "resize2d: input ", x.str(),
           " must have non-empty spatial dims");
  if (a.has("scales")) {
    const auto& sc = a.floats("scales");
    AG_CHECK(sc.size() == 2, "resize2d: scales must have 2 values, got ", sc.size());
    g.sh = sc[0], g.sw = sc[1];
  }
  return g;
}

std::vector<TensorType> infer_resize(const std::vector<TensorType>& in, const Attrs& a) {
  Geom g = geom_of(in[0], a);
  Shape s = g.channels_last ? Shape{g.N, g.OH, g.OW, g.C} : Shape{g.N, g.C, g.OH, g.OW};
  return {TensorType(in[0].dtype, s)};
}

// ---- nearest: element moves ------------------------------------------------------------------
template <typename E>
void run_nearest(const Geom& g, const Axis& ay, const Axis& ax, const E* x, E* y) {
  if (g.channels_last) {
    const int64_t C = g.C;
    parallel_for(g.N * g.OH, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.OW * C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t n = t / g.OH, oh = t % g.OH;
        const E* row = x + (n * g.H + ay.idx[oh]) * g.W * C;
        E* out = y + t * g.OW * C;
        for (int64_t ow = 0; ow < g.OW; ++ow) std::memcpy(out + ow * C, row + ax.idx[ow] * C, C * sizeof(E));
      }
    });
    return;
  }
  const int64_t planes = g.N * g.C;
  parallel_for(planes * g.OH, std::max<int64_t>(1, 16384 / g.OW), [&](int64_t b, int64_t e) {
    const int32_t* ix = ax.idx.data();
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = t / g.OH, oh = t % g.OH;
      E* out = y + t * g.OW;
      if (t > b && oh > 0 && ay.idx[oh] == ay.idx[oh - 1]) {  // the same source row as the row above
        std::memcpy(out, out - g.OW, g.OW * sizeof(E));
        continue;
      }
      const E* row = x + (p * g.H + ay.idx[oh]) * g.W;
      for (int64_t ow = 0; ow < g.OW; ++ow) out[ow] = row[ix[ow]];
    }
  });
}

// ---- bilinear / bicubic over NCHW ------------------------------------------------------------
constexpr int64_t kTile = 512;  // output columns per horizontal buffer

// h[j] = sum_k wx_k[j] * row[ix_k[j]] for the output columns [c0, c0 + n): the first product, then
// one fused multiply-add per further tap (what the compiler makes of the scalar loop, and of eager's).
template <int T, typename S>
inline void horizontal(const S* row, const Axis& ax, int64_t c0, int64_t n, float* h) {
  const int32_t* ix[T];
  const float* wx[T];
  for (int k = 0; k < T; ++k) ix[k] = ax.idx.data() + k * ax.n + c0, wx[k] = ax.w.data() + k * ax.n + c0;
  int64_t j = 0;
  if constexpr (std::is_same_v<S, float>) {  // eight columns at a time: a gather per tap
    for (; j + 8 <= n; j += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(wx[0] + j),
                               _mm256_i32gather_ps(row, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ix[0] + j)), 4));
      for (int k = 1; k < T; ++k)
        v = _mm256_fmadd_ps(_mm256_loadu_ps(wx[k] + j),
                            _mm256_i32gather_ps(row, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ix[k] + j)), 4),
                            v);
      _mm256_storeu_ps(h + j, v);
    }
  }
  for (; j < n; ++j) {
    float v = wx[0][j] * load(row[ix[0][j]]);
    for (int k = 1; k < T; ++k) v = std::fma(wx[k][j], load(row[ix[k][j]]), v);
    h[j] = v;
  }
}

template <int T, typename S>
void run_interp_nchw(const Geom& g, const Axis& ay, const Axis& ax, const S* x, S* y) {
  const int64_t planes = g.N * g.C;
  const int64_t rb = planes >= 16 ? g.OH : std::min<int64_t>(g.OH, 16);  // output rows per task
  const int64_t nrb = (g.OH + rb - 1) / rb;
  parallel_for(planes * nrb, 1, [&](int64_t b, int64_t e) {
    constexpr int kSlots = 2 * T;  // horizontal passes kept: rows of the last two output rows
    alignas(64) float buf[kSlots][kTile];
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = t / nrb, oh0 = (t % nrb) * rb, oh1 = std::min(g.OH, oh0 + rb);
      const S* plane = x + p * g.H * g.W;
      S* oplane = y + p * g.OH * g.OW;
      for (int64_t c0 = 0; c0 < g.OW; c0 += kTile) {
        const int64_t n = std::min(kTile, g.OW - c0);
        int64_t held[kSlots];
        int64_t age[kSlots];
        for (int s = 0; s < kSlots; ++s) held[s] = -1, age[s] = -1;
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const float* hrow[T];
          for (int k = 0; k < T; ++k) {
            const int64_t r = ay.idx[k * ay.n + oh];
            int slot = -1;
            for (int s = 0; s < kSlots; ++s)
              if (held[s] == r) slot = s;
            if (slot < 0) {  // the slot used longest ago (never one of this row's taps: they are newer)
              slot = 0;
              for (int s = 1; s < kSlots; ++s)
                if (age[s] < age[slot]) slot = s;
              horizontal<T>(plane + r * g.W, ax, c0, n, buf[slot]);
              held[slot] = r;
            }
            age[slot] = oh;
            hrow[k] = buf[slot];
          }
          float wy[T];
          for (int k = 0; k < T; ++k) wy[k] = ay.w[k * ay.n + oh];
          S* out = oplane + oh * g.OW + c0;
          for (int64_t j = 0; j < n; ++j) {
            float v = wy[0] * hrow[0][j];
            for (int k = 1; k < T; ++k) v = std::fma(wy[k], hrow[k][j], v);
            store(out[j], v);
          }
        }
      }
    }
  });
}

// ---- bilinear / bicubic over channels-last: blend C vectors ----------------------------------
template <int T, typename S>
void run_interp_nhwc(const Geom& g, const Axis& ay, const Axis& ax, const S* x, S* y) {
  const int64_t C = g.C;
  parallel_for(g.N * g.OH, std::max<int64_t>(1, 8192 / std::max<int64_t>(g.OW * C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / g.OH, oh = t % g.OH;
      const S* rows[T];
      float wy[T];
      for (int k = 0; k < T; ++k)
        rows[k] = x + (n * g.H + ay.idx[k * ay.n + oh]) * g.W * C, wy[k] = ay.w[k * ay.n + oh];
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const S* px[T][T];
        float wx[T];
        for (int kx = 0; kx < T; ++kx) {
          wx[kx] = ax.w[kx * ax.n + ow];
          for (int ky = 0; ky < T; ++ky) px[ky][kx] = rows[ky] + ax.idx[kx * ax.n + ow] * C;
        }
        S* out = y + (t * g.OW + ow) * C;
        for (int64_t c = 0; c < C; ++c) {
          float v = 0;
          for (int ky = 0; ky < T; ++ky) {
            float h = wx[0] * load(px[ky][0][c]);
            for (int kx = 1; kx < T; ++kx) h += wx[kx] * load(px[ky][kx][c]);
            v = ky == 0 ? wy[0] * h : v + wy[ky] * h;
          }
          store(out[c], v);
        }
      }
    }
  });
}

template <int T, typename S>
void run_interp(const Geom& g, const Axis& ay, const Axis& ax, const S* x, S* y) {
  if (g.channels_last) run_interp_nhwc<T>(g, ay, ax, x, y);
  else run_interp_nchw<T>(g, ay, ax, x, y);
}

std::unique_ptr<Kernel> make_resize(const Node& n, const BuildCtx&) {
  const TensorType& xt = n.inputs[0]->type;
  const Geom g = geom_of(xt, n.attrs);
  const Axis ay = make_axis(g.mode, g.H, g.OH, g.align_corners, g.sh);
  const Axis ax = make_axis(g.mode, g.W, g.OW, g.align_corners, g.sw);
  const std::string name = std::string("resize2d_") + n.attrs.s("mode") + (g.channels_last ? "_nhwc_" : "_nchw_") +
                           dtype_name(xt.dtype);
  std::unique_ptr<Kernel> k;
  if (g.mode == Mode::nearest || g.mode == Mode::nearest_exact) {
    AG_DISPATCH_BYTES(dtype_size(xt.dtype), "resize2d", [&] {
      k = make_fn_kernel(name, [g, ay, ax](void* const* in, void* const* out) {
        if (g.N * g.C == 0) return;
        run_nearest(g, ay, ax, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]));
      });
    });
    return k;
  }
  auto body = [&]<int T>() {
    switch (xt.dtype) {
#define AG_RESIZE_CASE(dt, S)                                                                     \
  case DType::dt:                                                                                 \
    k = make_fn_kernel(name, [g, ay, ax](void* const* in, void* const* out) {                     \
      if (g.N * g.C == 0) return;                                                                 \
      run_interp<T>(g, ay, ax, static_cast<const S*>(in[0]), static_cast<S*>(out[0]));            \
    });                                                                                           \
    break;
      AG_RESIZE_CASE(f32, float)
      AG_RESIZE_CASE(bf16, bf16s)
      AG_RESIZE_CASE(f16, f16s)
#undef AG_RESIZE_CASE
      default:
        fail("resize2d: dtype ", dtype_name(xt.dtype), " is not supported");
    }
  };
  if (g.mode == Mode::bilinear) body.template operator()<2>();
  else body.template operator()<4>();
  return k;
}

}  // namespace

// Layout-transparent (OpDef::nhwc_view): an NCHW resize of channels-last bytes is the NHWC one.
static bool resize_nhwc_view(const Node& n, Attrs* a) {
  if (n.attrs.b("channels_last", false)) return false;
  a->set("channels_last", true);
  return true;
}

AG_REGISTER_OP(resize2d, {.name = "resize2d", .min_inputs = 1, .max_inputs = 1, .infer = infer_resize,
                          .make_kernel = make_resize, .props = kNoProps, .nhwc_view = resize_nhwc_view});

}  // namespace ag
