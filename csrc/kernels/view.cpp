// Views and data movement. Engine values are always contiguous, so reshape is a
// zero-copy alias (the same bytes); slice_view/select_view are aliases at a byte
// offset for regions that are contiguous in memory. Everything else (permute,
// expand, slice, select, flip, repeat) is one generic strided copy
// (kernels/strided_copy.h) whose plan is built when the kernel is made.
#include <algorithm>
#include <cstring>

#include "kernels/common.h"
#include "ir/value_bounds.h"
#include "kernels/strided_copy.h"

namespace ag {
namespace {

std::vector<TensorType> infer_reshape(const std::vector<TensorType>& in, const Attrs& a) {
  Shape shape = a.ints("shape");
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      AG_CHECK(infer_at < 0, "reshape: only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      AG_CHECK(shape[i] >= 0 && !__builtin_mul_overflow(known, shape[i], &known), "reshape: invalid size in ",
               shape_str(shape));
    }
  }
  int64_t n = in[0].numel();
  if (infer_at >= 0) {
    AG_CHECK(known != 0 && n % known == 0, "reshape: cannot view ", in[0].str(), " as ", shape_str(shape));
    shape[infer_at] = n / known;
  }
  AG_CHECK(TensorType(in[0].dtype, shape).numel() == n, "reshape: cannot view ", in[0].str(), " (", n,
           " elements) as ", shape_str(shape));
  return {TensorType(in[0].dtype, shape)};
}

std::unique_ptr<Kernel> make_alias(const Node&, const BuildCtx&) {
  // Never runs on the hot path's data: the planner points the output at the input.
  return make_fn_kernel("view", [](void* const*, void* const*) {});
}

std::unique_ptr<Kernel> make_clone(const Node& n, const BuildCtx& ctx) {
  size_t bytes = n.inputs[0]->type.nbytes();
  return make_fn_kernel("copy", [bytes](void* const* in, void* const* out) {
    if (in[0] != out[0] && bytes) std::memcpy(out[0], in[0], bytes);
  });
}

std::unique_ptr<Kernel> strided_kernel(const char* name, StridedCopy plan) {
  return make_fn_kernel(name, [plan = std::move(plan)](void* const* in, void* const* out) { plan.run(in[0], out[0]); });
}

// ---- permute ------------------------------------------------------------------
Shape perm_of(const Attrs& a, int64_t rank, const char* op) {
  Shape p = a.ints("dims");
  AG_CHECK(static_cast<int64_t>(p.size()) == rank, op, ": dims ", shape_str(p), " do not match rank ", rank);
  std::vector<char> seen(rank, 0);
  for (auto& d : p) {
    AG_CHECK(d >= -rank && d < rank, op, ": dim ", d, " out of range for rank ", rank);
    if (d < 0) d += rank;
    AG_CHECK(!seen[d], op, ": dims ", shape_str(a.ints("dims")), " repeat dim ", d);
    seen[d] = 1;
  }
  return p;
}

std::vector<TensorType> infer_permute(const std::vector<TensorType>& in, const Attrs& a) {
  Shape p = perm_of(a, in[0].rank(), "permute");
  TensorType t = in[0];
  for (size_t i = 0; i < p.size(); ++i) t.dims[i] = in[0].dims[p[i]];
  return {t};
}

// Channels-last (OpDef::channels_last): NCHW -> NHWC of a channels-last input, and NHWC -> NCHW
// written channels-last, are the input's bytes as they are (ConvNeXt's permutes around its
// row-wise LayerNorm and MLP): the plan keeps a depthwise convolution's result NHWC for the first,
// and the copy is a plain one.
const Shape kToNhwc{0, 2, 3, 1}, kToNchw{0, 3, 1, 2};

bool permute_channels_last(const Node& n, int i) {
  if (n.inputs[0]->type.rank() != 4) return false;
  const Shape p = perm_of(n.attrs, 4, "permute");
  return (i == 0 && p == kToNhwc) || (i == kWritesChannelsLast && p == kToNchw) ||
         (i == kPrefersChannelsLast && (p == kToNhwc || p == kToNchw));
}

std::unique_ptr<Kernel> make_permute(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  Shape p = perm_of(n.attrs, it.rank(), "permute");
  const bool in_nhwc = ctx.nhwc(n.inputs[0]->id), out_nhwc = ctx.nhwc(n.out()->id);
  if (in_nhwc || out_nhwc) {
    AG_CHECK(it.rank() == 4 && p == (in_nhwc ? kToNhwc : kToNchw) && !(in_nhwc && out_nhwc), "permute: node ",
             n.context(), ": a channels-last input or result needs dims ", shape_str(in_nhwc ? kToNhwc : kToNchw));
    const size_t bytes = static_cast<size_t>(it.numel()) * dtype_size(it.dtype);
    return make_fn_kernel(in_nhwc ? "permute_nhwc_in_copy" : "permute_nhwc_out_copy",
                          [bytes](void* const* in, void* const* out) {
                            constexpr size_t kChunk = size_t{1} << 18;
                            const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
                            parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
                              const size_t lo = static_cast<size_t>(b) * kChunk;
                              const size_t hi = std::min(bytes, static_cast<size_t>(e) * kChunk);
                              std::memcpy(static_cast<char*>(out[0]) + lo, static_cast<const char*>(in[0]) + lo, hi - lo);
                            });
                          });
  }
  Shape is = contiguous_strides(it.shape()), out = n.out()->type.shape();
  Shape ss(p.size());
  for (size_t i = 0; i < p.size(); ++i) ss[i] = is[p[i]];
  return strided_kernel("permute_copy", StridedCopy(out, ss, contiguous_strides(out), 0, 0, dtype_size(it.dtype)));
}

// ---- expand (torch semantics: -1 keeps a size, new leading dims allowed) ----------
std::vector<TensorType> infer_expand(const std::vector<TensorType>& in, const Attrs& a) {
  Shape want = a.ints("shape");
  Shape have = in[0].shape();
  const int64_t nr = static_cast<int64_t>(want.size()), r = in[0].rank();
  AG_CHECK(nr >= r, "expand: cannot expand ", in[0].str(), " to fewer dimensions ", shape_str(want));
  Shape out(nr);
  for (int64_t i = 0; i < nr; ++i) {
    int64_t j = i - (nr - r);
    if (j < 0) {
      AG_CHECK(want[i] >= 0, "expand: -1 is not allowed in a new leading dimension, got ", shape_str(want));
      out[i] = want[i];
    } else if (want[i] == -1) {
      out[i] = have[j];
    } else {
      AG_CHECK(want[i] >= 0, "expand: invalid size in ", shape_str(want));
      AG_CHECK(have[j] == want[i] || have[j] == 1, "expand: cannot expand ", in[0].str(), " to ", shape_str(want),
               " (dim ", i, ": ", have[j], " vs ", want[i], ")");
      out[i] = want[i];
    }
  }
  return {TensorType(in[0].dtype, out)};
}

std::unique_ptr<Kernel> make_expand(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  Shape out = n.out()->type.shape();
  Shape bs = broadcast_strides(it.shape(), out);
  return strided_kernel("expand_copy", StridedCopy(out, bs, contiguous_strides(out), 0, 0, dtype_size(it.dtype)));
}

// ---- slice / select -------------------------------------------------------------
std::vector<TensorType> infer_slice(const std::vector<TensorType>& in, const Attrs& a) {
  SliceSpec s = slice_spec(in[0], a, "slice");
  TensorType t = in[0];
  t.dims[s.dim] = Dim{s.len, -1};
  return {t};
}

std::unique_ptr<Kernel> make_slice(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  SliceSpec s = slice_spec(it, n.attrs, "slice");
  Shape is = contiguous_strides(it.shape()), out = n.out()->type.shape();
  int64_t off = s.start * is[s.dim];
  is[s.dim] *= s.step;
  return strided_kernel("slice_copy", StridedCopy(out, is, contiguous_strides(out), off, 0, dtype_size(it.dtype)));
}

std::pair<int64_t, int64_t> select_spec(const TensorType& t, const Attrs& a) {
  AG_CHECK(t.rank() >= 1, "select: cannot select from a 0-d tensor");
  int64_t dim = normalize_dim(a.i("dim"), t.rank());
  int64_t size = t.size(dim), index = a.i("index");
  AG_CHECK(index >= -size && index < size, "select: index ", index, " out of range for dimension ", dim,
           " with size ", size);
  if (index < 0) index += size;
  return {dim, index};
}

std::vector<TensorType> infer_select(const std::vector<TensorType>& in, const Attrs& a) {
  auto [dim, index] = select_spec(in[0], a);
  TensorType t = in[0];
  t.dims.erase(t.dims.begin() + dim);
  return {t};
}

std::unique_ptr<Kernel> make_select(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  auto [dim, index] = select_spec(it, n.attrs);
  Shape is = contiguous_strides(it.shape()), out = n.out()->type.shape();
  int64_t off = index * is[dim];
  is.erase(is.begin() + dim);
  return strided_kernel("select_copy", StridedCopy(out, is, contiguous_strides(out), off, 0, dtype_size(it.dtype)));
}

// Zero-copy variants: only for regions that are contiguous in memory.
bool outer_is_one(const TensorType& t, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i)
    if (t.size(i) != 1) return false;
  return true;
}

std::vector<TensorType> infer_slice_view(const std::vector<TensorType>& in, const Attrs& a) {
  SliceSpec s = slice_spec(in[0], a, "slice");
  AG_CHECK(outer_is_one(in[0], s.dim) && (s.step == 1 || s.len <= 1), "slice_view: slicing ", in[0].str(),
           " at dim ", s.dim, " with step ", s.step, " is not contiguous in memory (use slice)");
  return infer_slice(in, a);
}
int64_t slice_view_offset(const Node& n) {
  const auto& it = n.inputs[0]->type;
  if (n.out()->type.numel() == 0) return 0;
  SliceSpec s = slice_spec(it, n.attrs, "slice");
  return s.start * contiguous_strides(it.shape())[s.dim] * static_cast<int64_t>(dtype_size(it.dtype));
}

std::vector<TensorType> infer_select_view(const std::vector<TensorType>& in, const Attrs& a) {
  auto [dim, index] = select_spec(in[0], a);
  AG_CHECK(outer_is_one(in[0], dim), "select_view: selecting from ", in[0].str(), " at dim ", dim,
           " is not contiguous in memory (use select)");
  return infer_select(in, a);
}
int64_t select_view_offset(const Node& n) {
  const auto& it = n.inputs[0]->type;
  if (n.out()->type.numel() == 0) return 0;
  auto [dim, index] = select_spec(it, n.attrs);
  return index * contiguous_strides(it.shape())[dim] * static_cast<int64_t>(dtype_size(it.dtype));
}

// ---- flip -----------------------------------------------------------------------
std::vector<char> flip_dims(const TensorType& t, const Attrs& a) {
  std::vector<char> f(t.rank(), 0);
  for (int64_t d : a.ints("dims")) {
    d = normalize_dim(d, t.rank());
    if (t.rank() == 0) continue;
    AG_CHECK(!f[d], "flip: dim ", d, " appears more than once in ", shape_str(a.ints("dims")));
    f[d] = 1;
  }
  return f;
}

std::vector<TensorType> infer_flip(const std::vector<TensorType>& in, const Attrs& a) {
  flip_dims(in[0], a);
  return {in[0]};
}

std::unique_ptr<Kernel> make_flip(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  auto f = flip_dims(it, n.attrs);
  Shape sh = it.shape(), is = contiguous_strides(sh);
  int64_t off = 0;
  for (size_t d = 0; d < sh.size(); ++d)
    if (f[d] && sh[d] > 0) {
      off += (sh[d] - 1) * is[d];
      is[d] = -is[d];
    }
  return strided_kernel("flip_copy", StridedCopy(sh, is, contiguous_strides(sh), off, 0, dtype_size(it.dtype)));
}

// ---- repeat: expand on an interleaved shape [r0, s0, r1, s1, ...] -------------------
std::vector<TensorType> infer_repeat(const std::vector<TensorType>& in, const Attrs& a) {
  Shape r = a.ints("repeats");
  const int64_t nr = static_cast<int64_t>(r.size()), rank = in[0].rank();
  AG_CHECK(nr >= rank, "repeat: ", nr, " repeats given for ", in[0].str(), "; need at least ", rank);
  Shape out(nr);
  for (int64_t i = 0; i < nr; ++i) {
    AG_CHECK(r[i] >= 0, "repeat: negative repeat ", r[i]);
    int64_t j = i - (nr - rank);
    out[i] = r[i] * (j >= 0 ? in[0].size(j) : 1);
  }
  return {TensorType(in[0].dtype, out)};
}

std::unique_ptr<Kernel> make_repeat(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  Shape r = n.attrs.ints("repeats");
  const int64_t nr = static_cast<int64_t>(r.size()), rank = it.rank();
  Shape is = contiguous_strides(it.shape());
  Shape sizes, ss;
  for (int64_t i = 0; i < nr; ++i) {
    int64_t j = i - (nr - rank);
    sizes.push_back(r[i]);
    ss.push_back(0);
    sizes.push_back(j >= 0 ? it.size(j) : 1);
    ss.push_back(j >= 0 ? is[j] : 0);
  }
  return strided_kernel("repeat_copy",
                        StridedCopy(sizes, ss, contiguous_strides(sizes), 0, 0, dtype_size(it.dtype)));
}

// ---- as_strided{size, stride, storage_offset} over the contiguous input ----------
// Every element the view reaches must lie inside the input (the front checks
// the input is its own contiguous storage). as_strided_view: the alias when the
// result is itself contiguous. as_strided_scatter(self, src): out = self with
// the strided window overwritten by src (the front ensures no overlap).
struct StridedSpec {
  Shape size, stride;
  int64_t offset;
};
StridedSpec strided_spec(const TensorType& t, const Attrs& a, const char* what) {
  StridedSpec s{a.ints("size"), a.ints("stride"), a.i("storage_offset", 0)};
  AG_CHECK(s.size.size() == s.stride.size(), what, ": size ", shape_str(s.size), " and stride ",
           shape_str(s.stride), " differ in length");
  AG_CHECK(s.offset >= 0, what, ": negative storage_offset ", s.offset);
  int64_t last = s.offset, n = 1;
  for (size_t i = 0; i < s.size.size(); ++i) {
    AG_CHECK(s.size[i] >= 0 && s.stride[i] >= 0, what, ": negative size or stride in ", shape_str(s.size), " / ",
             shape_str(s.stride));
    n *= s.size[i];
    if (s.size[i] > 0) last += (s.size[i] - 1) * s.stride[i];
  }
  AG_CHECK(n == 0 || last < t.numel(), what, ": size ", shape_str(s.size), ", stride ", shape_str(s.stride),
           ", offset ", s.offset, " reach element ", last, " outside ", t.str());
  return s;
}

std::vector<TensorType> infer_as_strided(const std::vector<TensorType>& in, const Attrs& a) {
  return {TensorType(in[0].dtype, strided_spec(in[0], a, "as_strided").size)};
}

std::unique_ptr<Kernel> make_as_strided(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  StridedSpec s = strided_spec(it, n.attrs, "as_strided");
  return strided_kernel("as_strided_copy", StridedCopy(s.size, s.stride, contiguous_strides(s.size), s.offset, 0,
                                                       dtype_size(it.dtype)));
}

std::vector<TensorType> infer_as_strided_view(const std::vector<TensorType>& in, const Attrs& a) {
  StridedSpec s = strided_spec(in[0], a, "as_strided_view");
  Shape cs = contiguous_strides(s.size);
  for (size_t i = 0; i < s.size.size(); ++i)
    AG_CHECK(s.size[i] <= 1 || s.stride[i] == cs[i], "as_strided_view: stride ", shape_str(s.stride),
             " is not contiguous for size ", shape_str(s.size), " (use as_strided)");
  return {TensorType(in[0].dtype, s.size)};
}
int64_t as_strided_view_offset(const Node& n) {
  if (n.out()->type.numel() == 0) return 0;
  return n.attrs.i("storage_offset", 0) * static_cast<int64_t>(dtype_size(n.inputs[0]->type.dtype));
}

std::vector<TensorType> infer_as_strided_scatter(const std::vector<TensorType>& in, const Attrs& a) {
  StridedSpec s = strided_spec(in[0], a, "as_strided_scatter");
  AG_CHECK(in[1].dtype == in[0].dtype && in[1].shape() == s.size, "as_strided_scatter: src ", in[1].str(),
           " must be ", TensorType(in[0].dtype, s.size).str());
  return {in[0]};
}

std::unique_ptr<Kernel> make_as_strided_scatter(const Node& n, const BuildCtx& ctx) {
  const auto& it = n.inputs[0]->type;
  StridedSpec s = strided_spec(it, n.attrs, "as_strided_scatter");
  StridedCopy plan(s.size, contiguous_strides(s.size), s.stride, 0, s.offset, dtype_size(it.dtype));
  const size_t bytes = it.nbytes();
  return make_fn_kernel("as_strided_scatter", [plan = std::move(plan), bytes](void* const* in, void* const* out) {
    if (in[0] != out[0] && bytes) std::memcpy(out[0], in[0], bytes);
    plan.run(in[1], out[0]);
  });
}

}  // namespace

AG_REGISTER_OP(reshape, {.name = "reshape", .min_inputs = 1, .max_inputs = 1, .infer = infer_reshape,
                         .make_kernel = make_alias, .props = kAlias, .bound = bound_moves});
AG_REGISTER_OP(clone, {.name = "clone", .min_inputs = 1, .max_inputs = 1, .infer = infer_same,
                       .make_kernel = make_clone, .props = kNoProps, .bound = bound_moves});
AG_REGISTER_OP(permute, {.name = "permute", .min_inputs = 1, .max_inputs = 1, .infer = infer_permute,
                         .make_kernel = make_permute, .channels_last = permute_channels_last, .bound = bound_moves});
AG_REGISTER_OP(expand, {.name = "expand", .min_inputs = 1, .max_inputs = 1, .infer = infer_expand,
                        .make_kernel = make_expand, .bound = bound_moves});
AG_REGISTER_OP(slice, {.name = "slice", .min_inputs = 1, .max_inputs = 1, .infer = infer_slice,
                       .make_kernel = make_slice, .bound = bound_moves});
AG_REGISTER_OP(select, {.name = "select", .min_inputs = 1, .max_inputs = 1, .infer = infer_select,
                        .make_kernel = make_select, .bound = bound_moves});
AG_REGISTER_OP(slice_view, {.name = "slice_view", .min_inputs = 1, .max_inputs = 1, .infer = infer_slice_view,
                            .make_kernel = make_alias, .props = kAlias, .alias_offset = slice_view_offset, .bound = bound_moves});
AG_REGISTER_OP(select_view, {.name = "select_view", .min_inputs = 1, .max_inputs = 1, .infer = infer_select_view,
                             .make_kernel = make_alias, .props = kAlias, .alias_offset = select_view_offset, .bound = bound_moves});
AG_REGISTER_OP(flip, {.name = "flip", .min_inputs = 1, .max_inputs = 1, .infer = infer_flip, .make_kernel = make_flip, .bound = bound_moves});
AG_REGISTER_OP(as_strided, {.name = "as_strided", .min_inputs = 1, .max_inputs = 1, .infer = infer_as_strided,
                            .make_kernel = make_as_strided});
AG_REGISTER_OP(as_strided_view, {.name = "as_strided_view", .min_inputs = 1, .max_inputs = 1,
                                 .infer = infer_as_strided_view, .make_kernel = make_alias, .props = kAlias,
                                 .alias_offset = as_strided_view_offset});
AG_REGISTER_OP(as_strided_scatter, {.name = "as_strided_scatter", .min_inputs = 2, .max_inputs = 2,
                                    .infer = infer_as_strided_scatter, .make_kernel = make_as_strided_scatter, .props = kUpdatesInput0});
AG_REGISTER_OP(repeat, {.name = "repeat", .min_inputs = 1, .max_inputs = 1, .infer = infer_repeat,
                        .make_kernel = make_repeat, .bound = bound_moves});

}  // namespace ag
