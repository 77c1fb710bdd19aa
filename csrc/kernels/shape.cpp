// Shape ops that assemble an output from pieces: cat{dim} (variadic), pad{pads,
// value} (constant_pad_nd, negative pads crop), roll{shifts,dims},
// tril/triu{diagonal}, slice_scatter{dim,start,end,step}(x, src). All are
// strided copies (kernels/strided_copy.h) planned when the kernel is built.
#include "kernels/common.h"
#include "ir/value_bounds.h"
#include "kernels/strided_copy.h"

namespace ag {
namespace {

// ---- cat ------------------------------------------------------------------------
// Like torch, 1-D empty inputs (shape [0]) are skipped whatever the others' rank.
bool cat_skipped(const TensorType& t) { return t.rank() == 1 && t.size(0) == 0; }

std::vector<TensorType> infer_cat(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(!in.empty(), "cat: needs at least one input");
  const TensorType* ref = nullptr;
  for (auto& t : in)
    if (!cat_skipped(t)) {
      ref = &t;
      break;
    }
  for (auto& t : in) AG_CHECK(t.dtype == in[0].dtype, "cat: inputs have different dtypes ", in[0].str(), " and ", t.str());
  if (!ref) return {in[0]};
  AG_CHECK(ref->rank() >= 1, "cat: zero-dimensional tensor ", ref->str(), " cannot be concatenated");
  int64_t dim = normalize_dim(a.i("dim", 0), ref->rank());
  TensorType out = *ref;
  int64_t total = 0;
  for (auto& t : in) {
    if (cat_skipped(t)) continue;
    AG_CHECK(t.rank() == ref->rank(), "cat: inputs of different rank: ", ref->str(), " and ", t.str());
    for (int64_t d = 0; d < t.rank(); ++d)
      AG_CHECK(d == dim || t.size(d) == ref->size(d), "cat: sizes must match except in dim ", dim, ", got ",
               ref->str(), " and ", t.str());
    total += t.size(dim);
  }
  out.dims[dim] = Dim{total, -1};
  return {out};
}

std::unique_ptr<Kernel> make_cat(const Node& n, const BuildCtx& ctx) {
  const auto& ot = n.out()->type;
  std::vector<std::pair<int, StridedCopy>> parts;
  const TensorType* ref = nullptr;
  for (auto* v : n.inputs)
    if (!cat_skipped(v->type)) {
      ref = &v->type;
      break;
    }
  if (ref) {
    int64_t dim = normalize_dim(n.attrs.i("dim", 0), ref->rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= ot.size(d);
    for (int64_t d = dim + 1; d < ot.rank(); ++d) inner *= ot.size(d);
    int64_t out_row = ot.size(dim) * inner, off = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const auto& t = n.inputs[i]->type;
      if (cat_skipped(t)) continue;
      int64_t row = t.size(dim) * inner;
      if (row > 0 && outer > 0)
        parts.emplace_back(static_cast<int>(i), StridedCopy({outer, row}, {row, 1}, {out_row, 1}, 0, off,
                                                            dtype_size(ot.dtype)));
      off += row;
    }
  }
  return make_fn_kernel("cat", [parts = std::move(parts)](void* const* in, void* const* out) {
    for (auto& [i, p] : parts) p.run(in[i], out[0]);
  });
}

// ---- pad (constant_pad_nd) ------------------------------------------------------------
std::vector<TensorType> infer_pad(const std::vector<TensorType>& in, const Attrs& a) {
  Shape p = a.ints("pads");
  const int64_t r = in[0].rank();
  AG_CHECK(p.size() % 2 == 0, "pad: pads must have an even length, got ", shape_str(p));
  AG_CHECK(static_cast<int64_t>(p.size()) / 2 <= r, "pad: ", p.size(), " pads given for ", in[0].str());
  TensorType out = in[0];
  for (size_t k = 0; k < p.size() / 2; ++k) {
    int64_t d = r - 1 - static_cast<int64_t>(k);
    int64_t s = in[0].size(d) + p[2 * k] + p[2 * k + 1];
    AG_CHECK(s >= 0, "pad: padding ", shape_str(p), " makes dim ", d, " of ", in[0].str(), " negative");
    out.dims[d] = Dim{s, -1};
  }
  return {out};
}

std::unique_ptr<Kernel> make_pad(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  const auto& ot = n.out()->type;
  Shape p = n.attrs.ints("pads");
  const int64_t r = it.rank();
  Shape is = contiguous_strides(it.shape()), os = contiguous_strides(ot.shape());
  Shape sizes(r);
  int64_t soff = 0, doff = 0;
  bool needs_fill = false;
  for (int64_t d = 0; d < r; ++d) {
    int64_t k = r - 1 - d;
    int64_t lo = 0, hi = 0;
    if (2 * k + 1 < static_cast<int64_t>(p.size())) {
      lo = p[2 * k];
      hi = p[2 * k + 1];
    }
    if (lo > 0 || hi > 0) needs_fill = true;
    int64_t dst0 = std::max<int64_t>(0, lo);
    int64_t dst1 = std::min<int64_t>(ot.size(d), it.size(d) + lo);
    sizes[d] = std::max<int64_t>(0, dst1 - dst0);
    soff += (dst0 - lo) * is[d];
    doff += dst0 * os[d];
  }
  int64_t count = 1;
  for (auto s : sizes) count *= s;
  if (count == 0) needs_fill = ot.numel() > 0;
  const AttrValue* v = n.attrs.find("value");
  uint64_t bits = (v && std::holds_alternative<int64_t>(*v)) ? scalar_bits(ot.dtype, std::get<int64_t>(*v))
                  : (v && std::holds_alternative<bool>(*v))  ? scalar_bits(ot.dtype, int64_t{std::get<bool>(*v)})
                                                             : scalar_bits(ot.dtype, n.attrs.f("value", 0.0));
  StridedCopy plan(sizes, is, os, soff, doff, dtype_size(ot.dtype));
  int64_t total = ot.numel();
  size_t es = dtype_size(ot.dtype);
  return make_fn_kernel("pad", [=](void* const* in, void* const* out) {
    if (needs_fill) fill_bits(out[0], total, bits, es);
    plan.run(in[0], out[0]);
  });
}

// ---- roll -------------------------------------------------------------------------
std::vector<TensorType> infer_roll(const std::vector<TensorType>& in, const Attrs& a) {
  Shape s = a.ints("shifts"), d = a.ints("dims");
  AG_CHECK(s.size() == d.size() && !d.empty(), "roll: shifts ", shape_str(s), " and dims ", shape_str(d),
           " must have the same nonzero length");
  for (auto x : d) normalize_dim(x, in[0].rank());
  AG_CHECK(in[0].rank() >= 1, "roll: cannot roll a 0-d tensor");
  return {in[0]};
}

std::unique_ptr<Kernel> make_roll(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  Shape sh = t.shape(), cs = contiguous_strides(sh);
  const int64_t r = t.rank();
  Shape shift(r, 0);
  Shape s = n.attrs.ints("shifts"), dims = n.attrs.ints("dims");
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], r);
    shift[d] += s[i];
  }
  for (int64_t d = 0; d < r; ++d) shift[d] = sh[d] ? ((shift[d] % sh[d]) + sh[d]) % sh[d] : 0;
  // out[o] = in[(o - shift) mod n] per dim: two pieces per rolled dim
  std::vector<StridedCopy> pieces;
  std::vector<int64_t> rolled;
  for (int64_t d = 0; d < r; ++d)
    if (shift[d]) rolled.push_back(d);
  for (int64_t mask = 0; mask < (int64_t{1} << rolled.size()); ++mask) {
    Shape sizes = sh;
    int64_t soff = 0, doff = 0;
    for (size_t k = 0; k < rolled.size(); ++k) {
      int64_t d = rolled[k], sd = shift[d];
      if (mask >> k & 1) {  // o in [0, sd): src starts at n - sd
        sizes[d] = sd;
        soff += (sh[d] - sd) * cs[d];
      } else {  // o in [sd, n): src starts at 0
        sizes[d] = sh[d] - sd;
        doff += sd * cs[d];
      }
    }
    pieces.emplace_back(sizes, cs, cs, soff, doff, dtype_size(t.dtype));
  }
  return make_fn_kernel("roll", [pieces = std::move(pieces)](void* const* in, void* const* out) {
    for (auto& p : pieces) p.run(in[0], out[0]);
  });
}

// ---- tril / triu ------------------------------------------------------------------
std::vector<TensorType> infer_tri(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[0].rank() >= 2, "tril/triu: input must have at least 2 dimensions, got ", in[0].str());
  return {in[0]};
}

template <bool Lower>
std::unique_ptr<Kernel> make_tri(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  const int64_t r = t.rank(), M = t.size(r - 2), N = t.size(r - 1);
  const int64_t rows = t.numel() / std::max<int64_t>(1, N) * (N ? 1 : 0);
  const int64_t k = n.attrs.i("diagonal", 0);
  const size_t es = dtype_size(t.dtype);
  return make_fn_kernel(Lower ? "tril" : "triu", [=](void* const* in, void* const* out) {
    const char* s = static_cast<const char*>(in[0]);
    char* d = static_cast<char*>(out[0]);
    parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N * static_cast<int64_t>(es))),
                 [&](int64_t b, int64_t e) {
                   for (int64_t row = b; row < e; ++row) {
                     int64_t i = row % M;
                     const char* sr = s + row * N * es;
                     char* dr = d + row * N * es;
                     if (Lower) {  // keep j <= i + k
                       int64_t keep = std::clamp<int64_t>(i + k + 1, 0, N);
                       if (sr != dr) std::memcpy(dr, sr, keep * es);
                       std::memset(dr + keep * es, 0, (N - keep) * es);
                     } else {  // keep j >= i + k
                       int64_t zero = std::clamp<int64_t>(i + k, 0, N);
                       std::memset(dr, 0, zero * es);
                       if (sr != dr) std::memcpy(dr + zero * es, sr + zero * es, (N - zero) * es);
                     }
                   }
                 });
  });
}

// ---- slice_scatter: out = x with out[slice] = src ----------------------------------------
std::vector<TensorType> infer_slice_scatter(const std::vector<TensorType>& in, const Attrs& a) {
  SliceSpec s = slice_spec(in[0], a, "slice_scatter");
  TensorType want = in[0];
  want.dims[s.dim] = Dim{s.len, -1};
  AG_CHECK(in[1].dtype == in[0].dtype, "slice_scatter: src ", in[1].str(), " must have the dtype of ", in[0].str());
  AG_CHECK(in[1].shape() == want.shape(), "slice_scatter: src ", in[1].str(), " must have the slice's shape ",
           want.str());
  return {in[0]};
}

std::unique_ptr<Kernel> make_slice_scatter(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  SliceSpec s = slice_spec(t, n.attrs, "slice_scatter");
  Shape cs = contiguous_strides(t.shape());
  Shape src_shape = n.inputs[1]->type.shape();
  int64_t doff = s.start * cs[s.dim];
  Shape ds = cs;
  ds[s.dim] *= s.step;
  StridedCopy plan(src_shape, contiguous_strides(src_shape), ds, 0, doff, dtype_size(t.dtype));
  size_t bytes = t.nbytes();
  return make_fn_kernel("slice_scatter", [=](void* const* in, void* const* out) {
    if (in[0] != out[0] && bytes) std::memcpy(out[0], in[0], bytes);
    plan.run(in[1], out[0]);
  });
}

}  // namespace

// Layout-transparent (OpDef::nhwc_view): channels-last 4-D inputs concatenate along the dim's NHWC position.
static bool cat_nhwc_view(const Node& n, Attrs* a) {
  for (const Value* v : n.inputs)
    if (v->type.rank() != 4) return false;
  constexpr int64_t kNhwcPos[4] = {0, 3, 1, 2};
  a->set("dim", kNhwcPos[normalize_dim(n.attrs.i("dim", 0), 4)]);
  return true;
}

AG_REGISTER_OP(cat, {.name = "cat", .min_inputs = 1, .max_inputs = -1, .infer = infer_cat, .make_kernel = make_cat,
                     .nhwc_view = cat_nhwc_view, .bound = bound_moves});
AG_REGISTER_OP(pad, {.name = "pad", .min_inputs = 1, .max_inputs = 1, .infer = infer_pad, .make_kernel = make_pad});
AG_REGISTER_OP(roll, {.name = "roll", .min_inputs = 1, .max_inputs = 1, .infer = infer_roll, .make_kernel = make_roll});
AG_REGISTER_OP(tril, {.name = "tril", .min_inputs = 1, .max_inputs = 1, .infer = infer_tri,
                      .make_kernel = make_tri<true>});
AG_REGISTER_OP(triu, {.name = "triu", .min_inputs = 1, .max_inputs = 1, .infer = infer_tri,
                      .make_kernel = make_tri<false>});
AG_REGISTER_OP(slice_scatter, {.name = "slice_scatter", .min_inputs = 2, .max_inputs = 2,
                               .infer = infer_slice_scatter, .make_kernel = make_slice_scatter, .props = kUpdatesInput0});

}  // namespace ag
