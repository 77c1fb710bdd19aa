// Indexing ops: embedding(weight, indices), index_select(x, idx){dim},
// gather(x, idx){dim} and index(x, idx...){dims} (aten.index.Tensor with integer
// index tensors, broadcast together). Indices are int64 or int32. Every index is
// checked before anything is read: an out-of-range index throws ag::Error from
// run() (checked serially, so nothing throws inside a parallel region).
#include "kernels/common.h"
#include "kernels/strided_copy.h"

namespace ag {
namespace {

bool is_index_dtype(DType t) { return t == DType::i64 || t == DType::i32; }

void check_index_dtype(const char* op, const TensorType& t) {
  AG_CHECK(is_index_dtype(t.dtype), op, ": indices must be int64 or int32, got ", t.str());
}

inline int64_t load_index(const void* p, bool i32, int64_t k) {
  return i32 ? static_cast<const int32_t*>(p)[k] : static_cast<const int64_t*>(p)[k];
}

// Copies `bytes` (a small row: typed loop; a big one: memcpy).
inline void copy_row(char* d, const char* s, size_t bytes) { std::memcpy(d, s, bytes); }

// ---- embedding --------------------------------------------------------------------
std::vector<TensorType> infer_embedding(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[0].rank() == 2, "embedding: weight must be 2-D, got ", in[0].str());
  check_index_dtype("embedding", in[1]);
  Shape s = in[1].shape();
  s.push_back(in[0].size(1));
  return {TensorType(in[0].dtype, s)};
}

std::unique_ptr<Kernel> make_embedding(const Node& n, const BuildCtx& ctx) {
  const auto& w = n.inputs[0]->type;
  const int64_t V = w.size(0), count = n.inputs[1]->type.numel();
  const size_t row = static_cast<size_t>(w.size(1)) * dtype_size(w.dtype);
  const bool i32 = n.inputs[1]->type.dtype == DType::i32;
  return make_fn_kernel("embedding", [=](void* const* in, void* const* out) {
    const void* idx = in[1];
    for (int64_t k = 0; k < count; ++k) {
      int64_t v = load_index(idx, i32, k);
      if (v < 0 || v >= V) fail("embedding: index ", v, " out of range for ", V, " rows");
    }
    const char* src = static_cast<const char*>(in[0]);
    char* dst = static_cast<char*>(out[0]);
    parallel_for(count, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row)), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) copy_row(dst + k * row, src + load_index(idx, i32, k) * row, row);
    });
  });
}

// ---- index_select -------------------------------------------------------------------
std::vector<TensorType> infer_index_select(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(in[0].rank() >= 1, "index_select: input must have at least one dimension, got ", in[0].str());
  check_index_dtype("index_select", in[1]);
  AG_CHECK(in[1].rank() <= 1, "index_select: index must be 0-d or 1-d, got ", in[1].str());
  int64_t dim = normalize_dim(a.i("dim"), in[0].rank());
  TensorType t = in[0];
  t.dims[dim] = Dim{in[1].numel(), -1};
  return {t};
}

std::unique_ptr<Kernel> make_index_select(const Node& n, const BuildCtx& ctx) {
  const auto& x = n.inputs[0]->type;
  const int64_t dim = normalize_dim(n.attrs.i("dim"), x.rank());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= x.size(d);
  const int64_t size = x.size(dim), count = n.inputs[1]->type.numel();
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype);
  const bool i32 = n.inputs[1]->type.dtype == DType::i32;
  return make_fn_kernel("index_select", [=](void* const* in, void* const* out) {
    const void* idx = in[1];
    for (int64_t k = 0; k < count; ++k) {
      int64_t v = load_index(idx, i32, k);
      if (v < 0 || v >= size)
        fail("index_select: index ", v, " out of range for dimension ", dim, " with size ", size);
    }
    const char* src = static_cast<const char*>(in[0]);
    char* dst = static_cast<char*>(out[0]);
    if (row == 0) return;
    parallel_for(outer * count, std::max<int64_t>(1, 32768 / static_cast<int64_t>(row)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t o = r / count, k = r % count;
        copy_row(dst + r * row, src + (o * size + load_index(idx, i32, k)) * row, row);
      }
    });
  });
}

// ---- gather -----------------------------------------------------------------------
std::vector<TensorType> infer_gather(const std::vector<TensorType>& in, const Attrs& a) {
  check_index_dtype("gather", in[1]);
  AG_CHECK(in[0].rank() == in[1].rank(), "gather: index ", in[1].str(), " must have the rank of the input ",
           in[0].str());
  int64_t dim = normalize_dim(a.i("dim"), in[0].rank());
  for (int64_t d = 0; d < in[0].rank(); ++d)
    AG_CHECK(d == dim || in[1].size(d) <= in[0].size(d), "gather: index ", in[1].str(), " is larger than input ",
             in[0].str(), " at dim ", d);
  return {TensorType(in[0].dtype, in[1].shape())};
}

std::unique_ptr<Kernel> make_gather(const Node& n, const BuildCtx& ctx) {
  const auto& x = n.inputs[0]->type;
  const auto& it = n.inputs[1]->type;
  const int64_t r = std::max<int64_t>(1, x.rank());
  const int64_t dim = normalize_dim(n.attrs.i("dim"), x.rank());
  Shape xs = contiguous_strides(x.shape()), is = it.shape();
  if (x.rank() == 0) {
    xs = {1};
    is = {1};
  }
  const int64_t L = is[r - 1], count = it.numel(), rows = L ? count / L : 0;
  const int64_t size = x.rank() ? x.size(dim) : 1;
  const bool i32 = it.dtype == DType::i32;
  const size_t es = dtype_size(x.dtype);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_BYTES(es, "gather", [&] {
    k = make_fn_kernel("gather", [=](void* const* in, void* const* out) {
      const void* idx = in[1];
      for (int64_t q = 0; q < count; ++q) {
        int64_t v = load_index(idx, i32, q);
        if (v < 0 || v >= size) fail("gather: index ", v, " out of range for dimension ", dim, " with size ", size);
      }
      const scalar_t* src = static_cast<const scalar_t*>(in[0]);
      scalar_t* dst = static_cast<scalar_t*>(out[0]);
      const int64_t sd = xs[dim], sl = xs[r - 1];
      parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, L)), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          int64_t base = 0, rr = row;
          for (int64_t d = r - 2; d >= 0; --d) {
            int64_t i = rr % is[d];
            rr /= is[d];
            if (d != dim) base += i * xs[d];
          }
          const int64_t q0 = row * L;
          if (dim == r - 1) {
            for (int64_t j = 0; j < L; ++j) dst[q0 + j] = src[base + load_index(idx, i32, q0 + j) * sd];
          } else {
            for (int64_t j = 0; j < L; ++j) dst[q0 + j] = src[base + j * sl + load_index(idx, i32, q0 + j) * sd];
          }
        }
      });
    });
  });
  return k;
}

// ---- index (advanced indexing with integer tensors) ----------------------------------------
struct IndexPlan {
  Shape dims;       // indexed dims of x, increasing
  Shape bshape;     // broadcast shape of the index tensors
  bool adjacent;    // indexed dims consecutive: result is pre + B + post, else B + rest
  Shape out_shape;
};

// `first` is the position of the first index tensor (1 for index, 2 for index_put).
IndexPlan index_plan(const std::vector<TensorType>& all, const Attrs& a, int first = 1) {
  std::vector<TensorType> in = {all[0]};
  in.insert(in.end(), all.begin() + first, all.end());
  const auto& x = in[0];
  IndexPlan p;
  p.dims = a.ints("dims");
  const int64_t k = static_cast<int64_t>(in.size()) - 1;
  AG_CHECK(static_cast<int64_t>(p.dims.size()) == k, "index: ", k, " index tensors but dims ", shape_str(p.dims));
  AG_CHECK(k >= 1 && k <= 16, "index: needs 1 to 16 index tensors, got ", k);
  for (int64_t j = 0; j < k; ++j) {
    check_index_dtype("index", in[j + 1]);
    AG_CHECK(p.dims[j] >= 0 && p.dims[j] < x.rank(), "index: dim ", p.dims[j], " out of range for ", x.str());
    AG_CHECK(j == 0 || p.dims[j] > p.dims[j - 1], "index: dims ", shape_str(p.dims), " must be increasing");
  }
  p.bshape = in[1].shape();
  for (int64_t j = 1; j < k; ++j) p.bshape = broadcast_shapes(p.bshape, in[j + 1].shape());
  p.adjacent = p.dims.back() - p.dims.front() == k - 1;
  if (p.adjacent) {
    for (int64_t d = 0; d < p.dims.front(); ++d) p.out_shape.push_back(x.size(d));
    for (int64_t s : p.bshape) p.out_shape.push_back(s);
    for (int64_t d = p.dims.back() + 1; d < x.rank(); ++d) p.out_shape.push_back(x.size(d));
  } else {
    p.out_shape = p.bshape;
    for (int64_t d = 0; d < x.rank(); ++d)
      if (std::find(p.dims.begin(), p.dims.end(), d) == p.dims.end()) p.out_shape.push_back(x.size(d));
  }
  return p;
}

std::vector<TensorType> infer_index(const std::vector<TensorType>& in, const Attrs& a) {
  return {TensorType(in[0].dtype, index_plan(in, a).out_shape)};
}

// index_put(x, values, idx...){dims}: out = x with out[idx...] = values, where
// values already has the shape x[idx...] has (the front expands it).
std::vector<TensorType> infer_index_put(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(in.size() >= 3, "index_put: needs x, values and at least one index tensor");
  IndexPlan p = index_plan(in, a, 2);
  AG_CHECK(in[1].dtype == in[0].dtype, "index_put: values ", in[1].str(), " must have the dtype of ", in[0].str());
  AG_CHECK(in[1].shape() == p.out_shape, "index_put: values ", in[1].str(), " must have the indexed shape ",
           shape_str(p.out_shape));
  return {in[0]};
}

class IndexKernel final : public Kernel {
 public:
  IndexKernel(const Node& n, bool put) : put_(put), first_(put ? 2 : 1) {
    std::vector<TensorType> all;
    for (auto* v : n.inputs) all.push_back(v->type);
    IndexPlan p = index_plan(all, n.attrs, first_);
    std::vector<TensorType> in = {all[0]};
    in.insert(in.end(), all.begin() + first_, all.end());
    const auto& x = in[0];
    Shape xs = contiguous_strides(x.shape());
    k_ = static_cast<int>(p.dims.size());
    bshape_ = p.bshape;
    nb_ = 1;
    for (auto s : bshape_) nb_ *= s;
    for (int j = 0; j < k_; ++j) {
      idx_i32_.push_back(in[j + 1].dtype == DType::i32);
      idx_numel_.push_back(in[j + 1].numel());
      idx_bstr_.push_back(broadcast_strides(in[j + 1].shape(), bshape_));
      dim_size_.push_back(x.size(p.dims[j]));
      dim_stride_.push_back(xs[p.dims[j]]);
      dims_.push_back(p.dims[j]);
    }
    es_ = static_cast<int64_t>(dtype_size(x.dtype));
    Shape rest_sizes, rest_strides;
    if (p.adjacent) {
      pre_ = 1;
      for (int64_t d = 0; d < p.dims.front(); ++d) pre_ *= x.size(d);
      pre_stride_ = p.dims.front() > 0 ? xs[p.dims.front() - 1] : 0;
      for (int64_t d = p.dims.back() + 1; d < x.rank(); ++d) {
        rest_sizes.push_back(x.size(d));
        rest_strides.push_back(xs[d]);
      }
    } else {
      pre_ = 1;
      pre_stride_ = 0;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (std::find(p.dims.begin(), p.dims.end(), d) == p.dims.end()) {
          rest_sizes.push_back(x.size(d));
          rest_strides.push_back(xs[d]);
        }
    }
    rest_ = 1;
    for (auto s : rest_sizes) rest_ *= s;
    if (put_)
      rest_plan_.init(rest_sizes, contiguous_strides(rest_sizes), rest_strides, 0, 0, es_);
    else
      rest_plan_.init(rest_sizes, rest_strides, contiguous_strides(rest_sizes), 0, 0, es_);
    out_numel_ = n.out()->type.numel();
    x_bytes_ = all[0].nbytes();
    plan_separable(p);
  }

  size_t scratch_bytes() const override { return scratch_.bytes; }

  void run(void* const* in_all, void* const* out, const RunCtx& ctx) const override {
    // in[0] is x, in[1 + j] index tensor j
    const void* in[17];
    in[0] = in_all[0];
    for (int j = 0; j < k_; ++j) in[j + 1] = in_all[first_ + j];
    for (int j = 0; j < k_; ++j) {
      const int64_t size = dim_size_[j];
      for (int64_t q = 0; q < idx_numel_[j]; ++q) {
        int64_t v = load_index(in[j + 1], idx_i32_[j], q);
        if (v < -size || v >= size)
          fail(put_ ? "index_put" : "index", ": index ", v, " is out of bounds for dimension ", dims_[j],
               " with size ", size);
      }
    }
    const int64_t rows = pre_ * nb_;
    const int64_t rb = rest_ * es_;
    if (put_) {
      // serial, in order: with repeated indices the last write wins, like PyTorch on CPU
      if (in_all[0] != out[0] && x_bytes_) std::memcpy(out[0], in_all[0], x_bytes_);
      if (out_numel_ == 0 || rb == 0) return;
      const char* vals = static_cast<const char*>(in_all[1]);
      char* dst = static_cast<char*>(out[0]);
      for (int64_t row = 0; row < rows; ++row) rest_plan_.run(vals + row * rb, dst + offset_of(in, row) * es_);
      return;
    }
    if (out_numel_ == 0) return;
    const char* src = static_cast<const char*>(in[0]);
    char* dst = static_cast<char*>(out[0]);
    if (sep_) {
      AG_DISPATCH_BYTES(es_, "index", [&] {
        gather_separable<scalar_t>(in, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]), ctx);
      });
      return;
    }
    if (rest_ == 1 && bshape_.size() <= 16) {  // element gathers (interpolation): walk the rows with counters, no div/mod per row
      AG_DISPATCH_BYTES(es_, "index", [&] {
        gather_elements<scalar_t>(in, static_cast<const scalar_t*>(in[0]), static_cast<scalar_t*>(out[0]), rows);
      });
      return;
    }
    parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, rb)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) rest_plan_.run(src + offset_of(in, row) * es_, dst + row * rb);
    });
  }
  std::string name() const override { return put_ ? "index_put" : "index"; }

 private:
  // out[row] = x[offset_of(row)] for rows of one element. Each chunk decomposes its first row
  // once, then advances a counter over (pre, bshape) and each index tensor's position.
  template <typename T>
  void gather_elements(const void* const* in, const T* x, T* y, int64_t rows) const {
    const int nbd = static_cast<int>(bshape_.size());
    parallel_for(rows, 4096, [&](int64_t b, int64_t e) {
      int64_t ctr[16] = {0}, q[16] = {0};
      int64_t pidx = b / nb_, rr = b % nb_;
      for (int d = nbd - 1; d >= 0; --d) {
        ctr[d] = rr % bshape_[d];
        rr /= bshape_[d];
      }
      for (int j = 0; j < k_; ++j)
        for (int d = 0; d < nbd; ++d) q[j] += ctr[d] * idx_bstr_[j][d];
      for (int64_t row = b; row < e; ++row) {
        int64_t off = pidx * pre_stride_;
        for (int j = 0; j < k_; ++j) {
          int64_t v = load_index(in[j + 1], idx_i32_[j], q[j]);
          if (v < 0) v += dim_size_[j];
          off += v * dim_stride_[j];
        }
        y[row] = x[off];
        // advance the counter (the last dim fastest), carrying into pidx
        int d = nbd - 1;
        for (; d >= 0; --d) {
          for (int j = 0; j < k_; ++j) q[j] += idx_bstr_[j][d];
          if (++ctr[d] < bshape_[d]) break;
          for (int j = 0; j < k_; ++j) q[j] -= idx_bstr_[j][d] * bshape_[d];
          ctr[d] = 0;
        }
        if (d < 0) ++pidx;
      }
    });
  }

  // Separable gathers: every index tensor varies along at most one dim of the broadcast index
  // shape (x[:, :, ih[:, None], iw], as interpolation and padding make), the indexed dims are
  // adjacent, and the rest dims are x's trailing (contiguous) ones. Then the source offset of
  // out[p, b0, .., bn, r] is p * pre_stride + base + sum_d tab_d[b_d] + r: per-dim tables, filled
  // once per run, and rows along the last index dim gathered with a contiguous loop.
  void plan_separable(const IndexPlan& p) {
    sep_ = !put_ && p.adjacent && !bshape_.empty() && bshape_.size() <= 16 && rest_ > 0;
    if (!sep_) return;
    const int nbd = static_cast<int>(bshape_.size());
    for (int j = 0; j < k_; ++j) {
      int vd = -1;
      for (int d = 0; d < nbd; ++d)
        if (idx_bstr_[j][d] != 0 && bshape_[d] > 1) {
          if (vd >= 0) sep_ = false;
          vd = d;
        }
      vary_dim_.push_back(vd);
    }
    if (!sep_) return;
    int64_t total = 0;
    for (int d = 0; d < nbd; ++d) {
      tab_start_.push_back(total);
      total += bshape_[d];
    }
    tabs_ = scratch_.add(static_cast<size_t>(total) * sizeof(int64_t));
  }

  template <typename T>
  void gather_separable(const void* const* in, const T* x, T* y, const RunCtx& ctx) const {
    const int nbd = static_cast<int>(bshape_.size());
    int64_t* tab = ScratchLayout::at<int64_t>(ctx, tabs_);
    const int64_t total = tab_start_.back() + bshape_.back();
    for (int64_t i = 0; i < total; ++i) tab[i] = 0;
    int64_t base = 0;
    for (int j = 0; j < k_; ++j) {
      auto val = [&](int64_t q) {
        int64_t v = load_index(in[j + 1], idx_i32_[j], q);
        return (v < 0 ? v + dim_size_[j] : v) * dim_stride_[j];
      };
      const int d = vary_dim_[j];
      if (d < 0) {
        base += val(0);
        continue;
      }
      int64_t* t = tab + tab_start_[d];
      for (int64_t i = 0; i < bshape_[d]; ++i) t[i] += val(i * idx_bstr_[j][d]);
    }
    const int64_t L = bshape_.back(), R = rest_, row = L * R;  // elements per output row
    const int64_t rows = out_numel_ / row;
    const int64_t* tl = tab + tab_start_[nbd - 1];
    parallel_for(rows, std::max<int64_t>(1, 16384 / row), [&](int64_t b, int64_t e) {
      int64_t ctr[16] = {0};
      int64_t rr = b;
      for (int d = nbd - 2; d >= 0; --d) {
        ctr[d] = rr % bshape_[d];
        rr /= bshape_[d];
      }
      int64_t pidx = rr, prev = -1;
      for (int64_t r = b; r < e; ++r) {
        int64_t off = base + pidx * pre_stride_;
        for (int d = 0; d < nbd - 1; ++d) off += tab[tab_start_[d] + ctr[d]];
        T* o = y + r * row;
        if (off == prev) {  // same source row as the previous output row (upsampling repeats rows)
          std::memcpy(o, o - row, static_cast<size_t>(row) * sizeof(T));
        } else if (R == 1) {
          const T* s = x + off;
          for (int64_t i = 0; i < L; ++i) o[i] = s[tl[i]];
        } else {
          for (int64_t i = 0; i < L; ++i)
            std::memcpy(o + i * R, x + off + tl[i], static_cast<size_t>(R) * sizeof(T));
        }
        prev = off;
        int d = nbd - 2;
        for (; d >= 0; --d) {
          if (++ctr[d] < bshape_[d]) break;
          ctr[d] = 0;
        }
        if (d < 0) ++pidx;
      }
    });
  }

  // element offset in x of row (p, b): p over the dims before the indexed ones, b over the index shape
  int64_t offset_of(const void* const* in, int64_t row) const {
    const int nbd = static_cast<int>(bshape_.size());
    int64_t pidx = row / nb_, bi = row % nb_;
    int64_t off = pidx * pre_stride_;
    for (int j = 0; j < k_; ++j) {
      int64_t q = 0, rr = bi;
      for (int d = nbd - 1; d >= 0; --d) {
        q += (rr % bshape_[d]) * idx_bstr_[j][d];
        rr /= bshape_[d];
      }
      int64_t v = load_index(in[j + 1], idx_i32_[j], q);
      if (v < 0) v += dim_size_[j];
      off += v * dim_stride_[j];
    }
    return off;
  }

  bool put_ = false;
  int first_ = 1;
  size_t x_bytes_ = 0;
  int k_ = 0;
  Shape bshape_, idx_numel_, dim_size_, dim_stride_, dims_;
  std::vector<Shape> idx_bstr_;
  std::vector<bool> idx_i32_;
  int64_t nb_ = 1, pre_ = 1, pre_stride_ = 0, rest_ = 1, es_ = 1, out_numel_ = 0;
  StridedCopy rest_plan_;
  bool sep_ = false;
  std::vector<int> vary_dim_;
  Shape tab_start_;
  size_t tabs_ = ScratchLayout::kNone;
  ScratchLayout scratch_;
};

std::unique_ptr<Kernel> make_index(const Node& n, const BuildCtx& ctx) { return std::make_unique<IndexKernel>(n, false); }
std::unique_ptr<Kernel> make_index_put(const Node& n, const BuildCtx& ctx) { return std::make_unique<IndexKernel>(n, true); }

}  // namespace

AG_REGISTER_OP(embedding, {.name = "embedding", .min_inputs = 2, .max_inputs = 2, .infer = infer_embedding,
                           .make_kernel = make_embedding});
AG_REGISTER_OP(index_select, {.name = "index_select", .min_inputs = 2, .max_inputs = 2,
                              .infer = infer_index_select, .make_kernel = make_index_select});
AG_REGISTER_OP(gather, {.name = "gather", .min_inputs = 2, .max_inputs = 2, .infer = infer_gather,
                        .make_kernel = make_gather});
AG_REGISTER_OP(index_put, {.name = "index_put", .min_inputs = 3, .max_inputs = -1, .infer = infer_index_put,
                           .make_kernel = make_index_put, .props = kUpdatesInput0});
AG_REGISTER_OP(index, {.name = "index", .min_inputs = 2, .max_inputs = -1, .infer = infer_index,
                       .make_kernel = make_index});

}  // namespace ag
