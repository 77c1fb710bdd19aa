// Scatters: out = copy of self, then for every position p of an iteration
// space S, out[p with p[dim] := idx(p)] (op)= src[p].
//   scatter(self, index, src){dim, reduce, include_self, index_1d, wrap, alpha}
// reduce: "none" (assign), "sum", "prod", "mean", "amax", "amin". Two index
// forms: scatter/scatter_add/scatter_reduce (index has self's rank and S is
// its shape) and, with index_1d, index_add/index_copy/index_fill/index_reduce
// (index is 1-D, S is self's shape with S[dim] = len(index), idx(p) =
// index[p[dim]]). src is a tensor of S's extent or a 0-d value (index_fill,
// scatter.value). wrap: negative indices count from the end (put).
// include_self=false first resets every targeted element to the reduction's
// identity; mean divides by the number of contributions (+1 with self), floor
// division for integers, like PyTorch.
// Order: contributions to one element all come from one lane of S (the other
// coordinates fixed), processed in increasing p[dim], so with repeated indices
// the last assignment wins and sums accumulate in eager's order. Lanes run in
// parallel; every index is range-checked (serially) before anything is written.
#include <limits>

#include "kernels/common.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

enum class Red { none, sum, prod, mean, amax, amin };

Red red_of(const std::string& s) {
  if (s == "none") return Red::none;
  if (s == "sum") return Red::sum;
  if (s == "prod") return Red::prod;
  if (s == "mean") return Red::mean;
  if (s == "amax") return Red::amax;
  if (s == "amin") return Red::amin;
  fail("scatter: unknown reduce '", s, "'");
}

Shape iter_shape(const std::vector<TensorType>& in, const Attrs& a, int64_t& dim) {
  const auto& x = in[0];
  const auto& idx = in[1];
  const auto& src = in[2];
  AG_CHECK(idx.dtype == DType::i64 || idx.dtype == DType::i32, "scatter: index must be int64 or int32, got ",
           idx.str());
  const int64_t r = std::max<int64_t>(x.rank(), 1);
  dim = normalize_dim(a.i("dim"), r);
  Shape xs = x.rank() ? x.shape() : Shape{1};
  Shape S;
  if (a.b("index_1d", false)) {
    AG_CHECK(idx.rank() <= 1, "scatter: a 1-D index is needed, got ", idx.str());
    S = xs;
    S[dim] = idx.numel();
  } else {
    S = idx.rank() ? idx.shape() : Shape{1};
    AG_CHECK(static_cast<int64_t>(S.size()) == r, "scatter: index ", idx.str(), " must have the rank of self ",
             x.str());
    for (int64_t d = 0; d < r; ++d)
      AG_CHECK(d == dim || S[d] <= xs[d], "scatter: index ", idx.str(), " is larger than self ", x.str(), " at dim ",
               d);
  }
  if (src.rank() > 0 || src.numel() != 1 || x.rank() == 0) {
    Shape ss = src.rank() ? src.shape() : Shape{1};
    AG_CHECK(static_cast<int64_t>(ss.size()) == r, "scatter: src ", src.str(), " must have the rank of self ",
             x.str());
    for (int64_t d = 0; d < r; ++d)
      AG_CHECK(S[d] <= ss[d], "scatter: index ", idx.str(), " is larger than src ", src.str(), " at dim ", d);
  }
  return S;
}

std::vector<TensorType> infer_scatter(const std::vector<TensorType>& in, const Attrs& a) {
  int64_t dim;
  iter_shape(in, a, dim);
  red_of(a.s("reduce", "none"));
  AG_CHECK(in[2].dtype == in[0].dtype, "scatter: src ", in[2].str(), " must have the dtype of self ", in[0].str());
  return {in[0]};
}

template <typename T>
class ScatterKernel final : public Kernel {
  using A = acc_t<T>;

 public:
  explicit ScatterKernel(const Node& n) {
    std::vector<TensorType> in;
    for (auto* v : n.inputs) in.push_back(v->type);
    Shape S = iter_shape(in, n.attrs, dim_);
    red_ = red_of(n.attrs.s("reduce", "none"));
    self_ = n.attrs.b("include_self", true);
    wrap_ = n.attrs.b("wrap", false);
    one_d_ = n.attrs.b("index_1d", false);
    alpha_ = static_cast<A>(n.attrs.f("alpha", 1.0));
    i32_ = in[1].dtype == DType::i32;
    nidx_ = in[1].numel();
    numel_ = in[0].numel();
    const int64_t r = static_cast<int64_t>(S.size());
    Shape xs = contiguous_strides(in[0].rank() ? in[0].shape() : Shape{1});
    size_ = in[0].rank() ? in[0].size(dim_) : 1;
    const bool scalar_src = in[2].rank() == 0 && in[0].rank() > 0;
    Shape ss = scalar_src ? Shape(r, 0) : contiguous_strides(in[2].rank() ? in[2].shape() : Shape{1});
    Shape is = one_d_ ? Shape(r, 0) : contiguous_strides(S);
    if (one_d_) is[dim_] = 1;
    O_ = 1;
    for (int64_t d = 0; d < dim_; ++d) {
      osz_.push_back(S[d]);
      ostr_.push_back({xs[d], ss[d], is[d]});
      O_ *= S[d];
    }
    R_ = S[dim_];
    rstr_ = {xs[dim_], ss[dim_], is[dim_]};
    I_ = 1;
    for (int64_t d = dim_ + 1; d < r; ++d) {
      isz_.push_back(S[d]);
      istr_.push_back({xs[d], ss[d], is[d]});
      I_ *= S[d];
    }
    nblk_ = (I_ + kBlock - 1) / kBlock;
    if (red_ == Red::mean) cnt_off_ = layout_.add(static_cast<size_t>(numel_) * sizeof(int64_t));
  }

  size_t scratch_bytes() const override { return layout_.bytes; }
  std::string name() const override { return "scatter"; }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    const void* idx = in[1];
    for (int64_t q = 0; q < nidx_; ++q) {
      int64_t v = i32_ ? static_cast<const int32_t*>(idx)[q] : static_cast<const int64_t*>(idx)[q];
      if (v < (wrap_ ? -size_ : 0) || v >= size_)
        fail("scatter: index ", v, " out of range for dimension ", dim_, " with size ", size_);
    }
    T* dst = static_cast<T*>(out[0]);
    if (in[0] != out[0] && numel_) std::memcpy(out[0], in[0], static_cast<size_t>(numel_) * sizeof(T));
    if (O_ * R_ * I_ == 0) return;
    const T* src = static_cast<const T*>(in[2]);
    int64_t* cnt = ScratchLayout::at<int64_t>(ctx, cnt_off_);
    if (cnt) {
      const int64_t init = self_ ? 1 : 0;
      for (int64_t k = 0; k < numel_; ++k) cnt[k] = init;
    }
    parallel_for(O_ * nblk_, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, R_ * kBlock)), [&](int64_t b,
                                                                                                  int64_t e) {
      for (int64_t u = b; u < e; ++u) unit(u, idx, src, dst, cnt);
    });
    if (cnt) {
      parallel_for(numel_, 32768, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t c = cnt[k] == 0 ? 1 : cnt[k];
          if constexpr (std::is_floating_point_v<A>) {
            store(dst[k], load(dst[k]) / static_cast<A>(c));
          } else if constexpr (!std::is_same_v<A, bool>) {
            A v = dst[k], q = static_cast<A>(v / c);
            if (v % c != 0 && v < 0) --q;
            dst[k] = q;
          }
        }
      });
    }
  }

 private:
  static constexpr int64_t kBlock = 256;
  struct Str {
    int64_t x, s, i;
  };

  A identity() const {
    switch (red_) {
      case Red::prod: return A(1);
      case Red::amax:
        return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                    : std::numeric_limits<A>::lowest();
      case Red::amin:
        return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                    : std::numeric_limits<A>::max();
      default: return A(0);
    }
  }

  static bool isnan_v(A v) {
    if constexpr (std::is_floating_point_v<A>) return v != v;
    else return false;
  }

  void unit(int64_t u, const void* idx, const T* src, T* dst, int64_t* cnt) const {
    const int64_t o = u / nblk_, i0 = (u % nblk_) * kBlock, i1 = std::min(I_, i0 + kBlock);
    int64_t ox = 0, os = 0, oi = 0, rr = o;
    for (int64_t d = static_cast<int64_t>(osz_.size()) - 1; d >= 0; --d) {
      int64_t c = rr % osz_[d];
      rr /= osz_[d];
      ox += c * ostr_[d].x;
      os += c * ostr_[d].s;
      oi += c * ostr_[d].i;
    }
    const int nin = static_cast<int>(isz_.size());
    const int passes = (!self_ && red_ != Red::none) ? 2 : 1;
    const A ident = identity();
    for (int pass = 0; pass < passes; ++pass) {
      const bool reset = passes == 2 && pass == 0;
      for (int64_t r = 0; r < R_; ++r) {
        // inner coordinates of i0, then carry-increment
        int64_t coord[16];
        int64_t ix = 0, is = 0, ii = 0, t = i0;
        for (int d = nin - 1; d >= 0; --d) {
          coord[d] = t % isz_[d];
          t /= isz_[d];
          ix += coord[d] * istr_[d].x;
          is += coord[d] * istr_[d].s;
          ii += coord[d] * istr_[d].i;
        }
        const int64_t bx = ox, bs = os + r * rstr_.s, bi = oi + r * rstr_.i;
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t q = bi + ii;
          int64_t j = i32_ ? static_cast<const int32_t*>(idx)[q] : static_cast<const int64_t*>(idx)[q];
          if (j < 0) j += size_;
          const int64_t at = bx + ix + j * rstr_.x;
          if (reset) {
            store(dst[at], ident);
          } else {
            apply(dst[at], src[bs + is], cnt ? cnt + at : nullptr);
          }
          for (int d = nin - 1; d >= 0; --d) {
            ix += istr_[d].x;
            is += istr_[d].s;
            ii += istr_[d].i;
            if (++coord[d] < isz_[d]) break;
            ix -= istr_[d].x * isz_[d];
            is -= istr_[d].s * isz_[d];
            ii -= istr_[d].i * isz_[d];
            coord[d] = 0;
          }
        }
      }
    }
  }

  void apply(T& d, const T& s, int64_t* cnt) const {
    switch (red_) {
      case Red::none: d = s; break;
      case Red::sum:
        if (alpha_ == A(1)) store(d, static_cast<A>(load(d) + load(s)));
        else store(d, static_cast<A>(load(d) + alpha_ * load(s)));
        break;
      case Red::mean:
        store(d, static_cast<A>(load(d) + load(s)));
        ++*cnt;
        break;
      case Red::prod: store(d, static_cast<A>(load(d) * load(s))); break;
      case Red::amax: {
        const A a = load(d), b = load(s);
        store(d, isnan_v(b) ? b : std::max(a, b));
        break;
      }
      case Red::amin: {
        const A a = load(d), b = load(s);
        store(d, isnan_v(b) ? b : std::min(a, b));
        break;
      }
    }
  }

  int64_t dim_ = 0, size_ = 1, nidx_ = 0, numel_ = 0, O_ = 1, R_ = 1, I_ = 1, nblk_ = 1;
  Red red_ = Red::none;
  bool self_ = true, wrap_ = false, one_d_ = false, i32_ = false;
  A alpha_ = A(1);
  Shape osz_, isz_;
  std::vector<Str> ostr_, istr_;
  Str rstr_{};
  ScratchLayout layout_;
  size_t cnt_off_ = ScratchLayout::kNone;
};

std::unique_ptr<Kernel> make_scatter(const Node& n, const BuildCtx& ctx) {
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(n.inputs[0]->type.dtype, "scatter", [&] { k = std::make_unique<ScatterKernel<scalar_t>>(n); });
  return k;
}

// ---- masked_scatter(self, mask, source): self and mask have the output's shape (the
// front expands them); true positions take source's elements in order ------------------
std::vector<TensorType> infer_masked_scatter(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[1].dtype == DType::b8 && in[1].shape() == in[0].shape(), "masked_scatter: mask ", in[1].str(),
           " must be bool with the shape of ", in[0].str());
  AG_CHECK(in[2].dtype == in[0].dtype, "masked_scatter: source ", in[2].str(), " must have the dtype of ",
           in[0].str());
  return {in[0]};
}

std::unique_ptr<Kernel> make_masked_scatter(const Node& n, const BuildCtx& ctx) {
  const int64_t numel = n.inputs[0]->type.numel(), avail = n.inputs[2]->type.numel();
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_BYTES(dtype_size(n.inputs[0]->type.dtype), "masked_scatter", [&] {
    k = make_fn_kernel("masked_scatter", [=](void* const* in, void* const* out) {
      const bool* m = static_cast<const bool*>(in[1]);
      int64_t need = 0;
      for (int64_t p = 0; p < numel; ++p) need += m[p];
      if (need > avail)
        fail("masked_scatter: the mask selects ", need, " elements but source has only ", avail);
      const scalar_t* x = static_cast<const scalar_t*>(in[0]);
      const scalar_t* src = static_cast<const scalar_t*>(in[2]);
      scalar_t* y = static_cast<scalar_t*>(out[0]);
      for (int64_t p = 0, q = 0; p < numel; ++p) y[p] = m[p] ? src[q++] : x[p];
    });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(scatter, {.name = "scatter", .min_inputs = 3, .max_inputs = 3, .infer = infer_scatter,
                         .make_kernel = make_scatter, .props = kUpdatesInput0});
AG_REGISTER_OP(masked_scatter, {.name = "masked_scatter", .min_inputs = 3, .max_inputs = 3,
                                .infer = infer_masked_scatter, .make_kernel = make_masked_scatter});

}  // namespace ag
