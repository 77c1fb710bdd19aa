// Sorting and selection along one dim, each lane (one position of the other
// dims) sorted as (value, index) pairs in scratch:
//   sort{dim, descending, stable}       -> values, int64 indices
//   topk{k, dim, largest, sorted}       -> values, indices
//   kthvalue{k, dim, keepdim}           -> values, indices
//   median{dim, keepdim, ignore_nan}    -> values, indices (nanmedian: ignore_nan)
//   mode{dim, keepdim}                  -> values, indices
// NaN orders above every number, like PyTorch. Where PyTorch's CPU result for
// tied values depends on its algorithm, the same algorithm is used so that
// indices match eager: topk (partial_sort / nth_element + sort), kthvalue
// (median-of-three quickselect), median (nth_element with index tie-break),
// sort with stable=False for the 16-bit and 8-bit types (std::sort). For
// stable=False on f32/f64/i32/i64 PyTorch uses a SIMD sort whose tie order is
// unspecified; we sort stably (a valid unstable order too).
#include <algorithm>
#include <numeric>

#include "kernels/common.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

template <typename A> inline bool isnan_v(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// Lanes split into a fixed number of chunks (decided at build time) so each
// chunk owns one slot of scratch whatever the thread count at run time.
struct Lanes {
  int64_t O = 1, R = 1, I = 1, chunks = 1, per = 1;
  size_t slot_bytes = 0;
  void init(const Shape& s, int64_t dim, size_t elem_bytes) {
    split_at_dim(s, dim, O, R, I);
    const int64_t lanes = O * I;
    slot_bytes = (static_cast<size_t>(std::max<int64_t>(R, 1)) * elem_bytes + 63) / 64 * 64;
    const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 20) / slot_bytes));
    chunks = std::max<int64_t>(1, std::min<int64_t>({lanes, 64, cap}));
    per = lanes ? (lanes + chunks - 1) / chunks : 1;
  }
  size_t scratch() const { return slot_bytes * chunks; }
  // f(lane, o, i, slot) for every lane, in parallel over chunks
  template <typename F>
  void each(void* scratch, F&& f) const {
    const int64_t lanes = O * I;
    if (lanes == 0 || R == 0) return;
    parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        void* slot = static_cast<char*>(scratch) + c * slot_bytes;
        for (int64_t l = c * per; l < std::min(lanes, (c + 1) * per); ++l) f(l / I, l % I, slot);
      }
    });
  }
};

int64_t dim_of(const TensorType& t, const Attrs& a) {
  return t.rank() ? normalize_dim(a.i("dim"), t.rank()) : (normalize_dim(a.i("dim"), 1), 0);
}
Shape shape1(const TensorType& t) { return t.rank() ? t.shape() : Shape{1}; }

// reduced shape along dim (keepdim: size 1)
TensorType reduced(const TensorType& t, int64_t dim, bool keepdim, DType dt) {
  TensorType r(dt, t.shape());
  if (t.rank() == 0) return r;
  if (keepdim) r.dims[dim] = Dim{1, -1};
  else r.dims.erase(r.dims.begin() + dim);
  return r;
}

void check_sortable(const char* op, DType dt, bool allow_bool) {
  AG_CHECK(dt != DType::b8 || allow_bool, op, ": bool is not supported");
}

// ---- sort ---------------------------------------------------------------------------
std::vector<TensorType> infer_sort(const std::vector<TensorType>& in, const Attrs& a) {
  dim_of(in[0], a);
  check_sortable("sort", in[0].dtype, true);
  return {in[0], TensorType(DType::i64, in[0].shape())};
}

template <typename T, typename Fn>
std::unique_ptr<Kernel> lane_kernel(const char* name, const Lanes& L, Fn fn) {
  return make_fn_kernel(name, L.scratch(), [L, fn](void* const* in, void* const* out, void* scratch) {
    const T* x = static_cast<const T*>(in[0]);
    L.each(scratch, [&](int64_t o, int64_t i, void* slot) {
      using P = std::pair<acc_t<T>, int64_t>;
      P* q = static_cast<P*>(slot);
      const T* xp = x + o * L.R * L.I + i;
      for (int64_t r = 0; r < L.R; ++r) q[r] = P(load(xp[r * L.I]), r);
      fn(q, o, i, out);
    });
  });
}

struct Asc {
  template <typename P> bool operator()(const P& a, const P& b) const {
    return (!isnan_v(a.first) && isnan_v(b.first)) || a.first < b.first;
  }
};
struct Desc {
  template <typename P> bool operator()(const P& a, const P& b) const {
    return (isnan_v(a.first) && !isnan_v(b.first)) || a.first > b.first;
  }
};

std::unique_ptr<Kernel> make_sort(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  const bool desc = n.attrs.b("descending", false);
  const DType dt = t.dtype;
  const bool stable = n.attrs.b("stable", false) || dt == DType::f32 || dt == DType::f64 || dt == DType::i32 ||
                      dt == DType::i64;
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(dt, "sort", [&] {
    Lanes L;
    L.init(shape1(t), dim_of(t, n.attrs), sizeof(std::pair<acc_t<scalar_t>, int64_t>));
    const int64_t R = L.R, I = L.I;
    k = lane_kernel<scalar_t>("sort", L, [=](auto* q, int64_t o, int64_t i, void* const* out) {
      if (stable) {
        if (desc) std::stable_sort(q, q + R, Desc());
        else std::stable_sort(q, q + R, Asc());
      } else {
        if (desc) std::sort(q, q + R, Desc());
        else std::sort(q, q + R, Asc());
      }
      scalar_t* v = static_cast<scalar_t*>(out[0]) + o * R * I + i;
      int64_t* ix = static_cast<int64_t*>(out[1]) + o * R * I + i;
      for (int64_t r = 0; r < R; ++r) {
        store(v[r * I], q[r].first);
        ix[r * I] = q[r].second;
      }
    });
  });
  return k;
}

// ---- topk ---------------------------------------------------------------------------
std::vector<TensorType> infer_topk(const std::vector<TensorType>& in, const Attrs& a) {
  int64_t dim = dim_of(in[0], a), k = a.i("k");
  check_sortable("topk", in[0].dtype, false);
  const int64_t size = in[0].rank() ? in[0].size(dim) : 1;
  AG_CHECK(k >= 0 && k <= size, "topk: k ", k, " out of range for dimension ", dim, " with size ", size);
  TensorType v = in[0];
  if (v.rank()) v.dims[dim] = Dim{k, -1};
  return {v, TensorType(DType::i64, v.shape())};
}

std::unique_ptr<Kernel> make_topk(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  const int64_t K = n.attrs.i("k");
  const bool largest = n.attrs.b("largest", true), sorted = n.attrs.b("sorted", true);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, "topk", [&] {
    Lanes L;
    L.init(shape1(t), dim_of(t, n.attrs), sizeof(std::pair<acc_t<scalar_t>, int64_t>));
    const int64_t R = L.R, I = L.I;
    if (K == 0) L.O = 0;
    k = lane_kernel<scalar_t>("topk", L, [=](auto* q, int64_t o, int64_t i, void* const* out) {
      auto go = [&](auto cmp) {
        if (K * 64 <= R) {
          std::partial_sort(q, q + K, q + R, cmp);
        } else {
          std::nth_element(q, q + K - 1, q + R, cmp);
          if (sorted) std::sort(q, q + K - 1, cmp);
        }
      };
      if (largest) go(Desc());
      else go(Asc());
      scalar_t* v = static_cast<scalar_t*>(out[0]) + o * K * I + i;
      int64_t* ix = static_cast<int64_t*>(out[1]) + o * K * I + i;
      for (int64_t r = 0; r < K; ++r) {
        store(v[r * I], q[r].first);
        ix[r * I] = q[r].second;
      }
    });
  });
  return k;
}

// ---- kthvalue: the median-of-three quickselect PyTorch's CPU kernel uses ---------------
template <typename P>
void quickselect(P* a, int64_t n, int64_t k) {
  auto gt = [](const auto& x, const auto& y) { return (isnan_v(x.first) && !isnan_v(y.first)) || x.first > y.first; };
  int64_t lo = 0, hi = n - 1;
  while (true) {
    if (hi <= lo) return;
    if (hi == lo + 1) {
      if (gt(a[lo], a[hi])) std::swap(a[lo], a[hi]);
      return;
    }
    std::swap(a[(lo + hi) >> 1], a[lo + 1]);
    if (gt(a[lo + 1], a[hi])) std::swap(a[lo + 1], a[hi]);
    if (gt(a[lo], a[hi])) std::swap(a[lo], a[hi]);
    if (gt(a[lo + 1], a[lo])) std::swap(a[lo + 1], a[lo]);
    int64_t i = lo + 1, j = hi;
    const P piv = a[lo];
    while (true) {
      do ++i; while (gt(piv, a[i]));
      do --j; while (gt(a[j], piv));
      if (j < i) break;
      std::swap(a[i], a[j]);
    }
    std::swap(a[lo], a[j]);
    if (j <= k) lo = i;
    if (j >= k) hi = j - 1;
  }
}

std::vector<TensorType> infer_kthvalue(const std::vector<TensorType>& in, const Attrs& a) {
  int64_t dim = dim_of(in[0], a), k = a.i("k");
  check_sortable("kthvalue", in[0].dtype, false);
  AG_CHECK(in[0].numel() > 0, "kthvalue: input ", in[0].str(), " has no elements");
  const int64_t size = in[0].rank() ? in[0].size(dim) : 1;
  AG_CHECK(k >= 1 && k <= size, "kthvalue: k ", k, " out of range for dimension ", dim, " with size ", size);
  const bool kd = a.b("keepdim", false);
  return {reduced(in[0], dim, kd, in[0].dtype), reduced(in[0], dim, kd, DType::i64)};
}

std::unique_ptr<Kernel> make_kthvalue(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  const int64_t K = n.attrs.i("k");
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, "kthvalue", [&] {
    Lanes L;
    L.init(shape1(t), dim_of(t, n.attrs), sizeof(std::pair<acc_t<scalar_t>, int64_t>));
    const int64_t R = L.R, I = L.I;
    k = lane_kernel<scalar_t>("kthvalue", L, [=](auto* q, int64_t o, int64_t i, void* const* out) {
      quickselect(q, R, K - 1);
      store(static_cast<scalar_t*>(out[0])[o * I + i], q[K - 1].first);
      static_cast<int64_t*>(out[1])[o * I + i] = q[K - 1].second;
    });
  });
  return k;
}

// ---- median / nanmedian: the lower median; median returns the first NaN if any --------
std::vector<TensorType> infer_median(const std::vector<TensorType>& in, const Attrs& a) {
  int64_t dim = dim_of(in[0], a);  // (median and mode: bool is gated by the front)
  const int64_t size = in[0].rank() ? in[0].size(dim) : 1;
  AG_CHECK(size > 0, "median: cannot compute the median of a dimension of size 0 (", in[0].str(), ")");
  const bool kd = a.b("keepdim", false);
  return {reduced(in[0], dim, kd, in[0].dtype), reduced(in[0], dim, kd, DType::i64)};
}

std::unique_ptr<Kernel> make_median(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  const bool ignore_nan = n.attrs.b("ignore_nan", false);
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, "median", [&] {
    Lanes L;
    L.init(shape1(t), dim_of(t, n.attrs), sizeof(std::pair<acc_t<scalar_t>, int64_t>));
    const int64_t R = L.R, I = L.I;
    k = lane_kernel<scalar_t>("median", L, [=](auto* q, int64_t o, int64_t i, void* const* out) {
      scalar_t* v = static_cast<scalar_t*>(out[0]) + o * I + i;
      int64_t* ix = static_cast<int64_t*>(out[1]) + o * I + i;
      int64_t nnan = 0;
      for (int64_t r = 0; r < R; ++r)
        if (isnan_v(q[r].first)) {
          if (!ignore_nan) {
            store(*v, q[r].first);
            *ix = r;
            return;
          }
          ++nnan;
        }
      // (value, index) is a total order on the numbers: the result is unique
      using P = std::remove_reference_t<decltype(*q)>;
      auto lt = [](const P& a, const P& b) {
        return a.first < b.first || (a.first == b.first && a.second < b.second) ||
               (isnan_v(b.first) && !isnan_v(a.first));
      };
      const int64_t m = (R - nnan - 1) / 2;
      std::nth_element(q, q + m, q + R, lt);  // all NaN: m = 0, the same call as PyTorch's
      store(*v, q[m].first);
      *ix = q[m].second;
    });
  });
  return k;
}

// ---- mode: std::sort by value (as PyTorch's CPU kernel), first longest run wins,
// its last element's index -------------------------------------------------------------
std::unique_ptr<Kernel> make_mode(const Node& n, const BuildCtx& ctx) {
  const auto& t = n.inputs[0]->type;
  std::unique_ptr<Kernel> k;
  AG_DISPATCH_ALL(t.dtype, "mode", [&] {
    Lanes L;
    L.init(shape1(t), dim_of(t, n.attrs), sizeof(std::pair<acc_t<scalar_t>, int64_t>));
    const int64_t R = L.R, I = L.I;
    k = lane_kernel<scalar_t>("mode", L, [=](auto* q, int64_t o, int64_t i, void* const* out) {
      std::sort(q, q + R, [](const auto& a, const auto& b) { return a.first < b.first; });
      auto best = q[0];
      int64_t run = 0, most = 0;
      for (int64_t r = 0; r < R; ++r) {
        ++run;
        if (r == R - 1 || q[r].first != q[r + 1].first) {
          if (run > most) {
            best = q[r];
            most = run;
          }
          run = 0;
        }
      }
      store(static_cast<scalar_t*>(out[0])[o * I + i], best.first);
      static_cast<int64_t*>(out[1])[o * I + i] = best.second;
    });
  });
  return k;
}

}  // namespace

AG_REGISTER_OP(sort, {.name = "sort", .min_inputs = 1, .max_inputs = 1, .infer = infer_sort, .make_kernel = make_sort});
AG_REGISTER_OP(topk, {.name = "topk", .min_inputs = 1, .max_inputs = 1, .infer = infer_topk, .make_kernel = make_topk});
AG_REGISTER_OP(kthvalue, {.name = "kthvalue", .min_inputs = 1, .max_inputs = 1, .infer = infer_kthvalue,
                          .make_kernel = make_kthvalue});
AG_REGISTER_OP(mode, {.name = "mode", .min_inputs = 1, .max_inputs = 1, .infer = infer_median, .make_kernel = make_mode});
AG_REGISTER_OP(median, {.name = "median", .min_inputs = 1, .max_inputs = 1, .infer = infer_median,
                        .make_kernel = make_median});

}  // namespace ag
