// Creation ops (no inputs; usually constant-folded): arange{start,end,step,dtype}
// and full{shape,value,dtype}. Also the scalar-to-bytes helpers of
// strided_copy.h used by fills and pads.
#include "kernels/common.h"
#include "kernels/strided_copy.h"

namespace ag {

namespace {
template <typename V>
uint64_t bits_of(DType dtype, V value) {
  uint64_t bits = 0;
  AG_DISPATCH_ALL(dtype, "fill", [&] {
    scalar_t v;
    store_cast(v, value);
    std::memcpy(&bits, &v, sizeof(v));
  });
  return bits;
}
}  // namespace

uint64_t scalar_bits(DType dtype, double value) { return bits_of(dtype, value); }
uint64_t scalar_bits(DType dtype, int64_t value) { return bits_of(dtype, value); }

namespace {

bool is_int_dtype(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8;
}

// ---- full ---------------------------------------------------------------------
uint64_t full_bits(const Attrs& a, DType dt) {
  const AttrValue* v = a.find("value");
  AG_CHECK(v != nullptr, "full: missing attribute 'value'");
  if (std::holds_alternative<int64_t>(*v)) return scalar_bits(dt, std::get<int64_t>(*v));
  if (std::holds_alternative<bool>(*v)) return scalar_bits(dt, static_cast<int64_t>(std::get<bool>(*v)));
  return scalar_bits(dt, a.f("value"));
}

std::vector<TensorType> infer_full(const std::vector<TensorType>&, const Attrs& a) {
  Shape s = a.ints("shape");
  for (int64_t d : s) AG_CHECK(d >= 0, "full: invalid size in ", shape_str(s));
  DType dt = a.dtype("dtype", DType::f32);
  full_bits(a, dt);
  return {TensorType(dt, s)};
}

std::unique_ptr<Kernel> make_full(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.out()->type;
  uint64_t bits = full_bits(n.attrs, t.dtype);
  int64_t count = t.numel();
  size_t es = dtype_size(t.dtype);
  return make_fn_kernel("full", [=](void* const*, void* const* out) { fill_bits(out[0], count, bits, es); });
}

// ---- arange ---------------------------------------------------------------------
struct Range {
  double start, end, step;
  int64_t istart, istep;  // exact values for integer dtypes
  int64_t n;
};

Range range_of(const Attrs& a, DType dt) {
  Range r{};
  r.start = a.f("start", 0.0);
  r.end = a.f("end");
  r.step = a.f("step", 1.0);
  AG_CHECK(r.step != 0, "arange: step must be nonzero");
  AG_CHECK(std::isfinite(r.start) && std::isfinite(r.end), "arange: unsupported range from ", r.start, " to ", r.end);
  AG_CHECK((r.step > 0 && r.end >= r.start) || (r.step < 0 && r.end <= r.start),
           "arange: upper bound and larger bound inconsistent with step sign (start ", r.start, ", end ", r.end,
           ", step ", r.step, ")");
  if (is_int_dtype(dt)) {
    r.istart = static_cast<int64_t>(a.f("start", 0.0));
    r.istep = static_cast<int64_t>(r.step);
    if (a.has("start") && std::holds_alternative<int64_t>(*a.find("start"))) r.istart = a.i("start");
    if (a.has("step") && std::holds_alternative<int64_t>(*a.find("step"))) r.istep = a.i("step");
  }
  r.n = static_cast<int64_t>(std::ceil((r.end - r.start) / r.step));
  return r;
}

std::vector<TensorType> infer_arange(const std::vector<TensorType>&, const Attrs& a) {
  DType dt = a.dtype("dtype", DType::i64);
  AG_CHECK(dt != DType::b8, "arange: dtype bool is not supported");
  Range r = range_of(a, dt);
  return {TensorType(dt, {r.n})};
}

std::unique_ptr<Kernel> make_arange(const Node& n, const BuildCtx& ctx) {
  DType dt = n.out()->type.dtype;
  Range r = range_of(n.attrs, dt);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(dt, "arange", [&] {
    k = make_fn_kernel("arange", [r](void* const*, void* const* out) {
      scalar_t* o = static_cast<scalar_t*>(out[0]);
      if constexpr (std::is_integral_v<scalar_t>) {
        for (int64_t i = 0; i < r.n; ++i) o[i] = static_cast<scalar_t>(r.istart + i * r.istep);
      } else if constexpr (std::is_same_v<acc_t<scalar_t>, float> && !std::is_same_v<scalar_t, float>) {
        // 16-bit floats: torch computes in float
        const float s = static_cast<float>(r.start), st = static_cast<float>(r.step);
        for (int64_t i = 0; i < r.n; ++i) store(o[i], s + st * static_cast<float>(i));
      } else {
        for (int64_t i = 0; i < r.n; ++i) o[i] = static_cast<scalar_t>(r.start + r.step * static_cast<double>(i));
      }
    });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(full, {.name = "full", .min_inputs = 0, .max_inputs = 0, .infer = infer_full, .make_kernel = make_full});
AG_REGISTER_OP(arange, {.name = "arange", .min_inputs = 0, .max_inputs = 0, .infer = infer_arange,
                        .make_kernel = make_arange});

}  // namespace ag
