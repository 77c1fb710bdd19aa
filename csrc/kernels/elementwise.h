// Shared machinery of the elementwise kernels (unary, binary, ternary, convert):
//  - element access through a compute type (bf16/f16 go through float),
//  - a generic N-ary broadcast iterator over a contiguous output. At kernel
//    build time the output's dims are coalesced (size-1 dims dropped, adjacent
//    dims merged when every input walks them as one), so that the innermost
//    loop is a run where each input has stride 1 (contiguous) or 0 (broadcast
//    scalar / row). Same-shape contiguous inputs become one flat loop; a
//    broadcast row or scalar becomes an inner loop with a hoisted value.
// Outputs may alias an input of the same size (the planner runs elementwise ops
// in place): every loop reads element i of such an input before writing
// element i of the output, and nothing is declared __restrict__.
#pragma once
#include <array>
#include <type_traits>

#include "kernels/common.h"

namespace ag::ew {

constexpr int kMaxDims = 16;
constexpr int64_t kGrainCheap = 1 << 15;  // elements per task, cheap ops
constexpr int64_t kGrainMath = 1 << 12;   // elements per task, transcendental ops

template <typename T> inline constexpr bool is_half_v = std::is_same_v<T, bf16s> || std::is_same_v<T, f16s>;
template <typename T> inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_half_v<T>;
template <typename T> inline constexpr bool is_bool_v = std::is_same_v<T, bool>;
template <typename T> inline constexpr bool is_int_v = std::is_integral_v<T> && !is_bool_v<T>;

// Read an element as compute type C; write a compute value to a storage type.
template <typename C, typename T> inline C get(const T& v) { return static_cast<C>(load(v)); }
template <typename T, typename V> inline void put(T& dst, V v) {
  if constexpr (std::is_same_v<T, bf16s>) dst.b = f32_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, f16s>) dst.b = f32_to_f16(static_cast<float>(v));
  else dst = static_cast<T>(v);
}

// Which dtype kinds an op accepts.
// kNoHalf: floating means float32/float64 only.
enum Kinds : int { kF = 1, kI = 2, kB = 4, kNoHalf = 8, kFI = kF | kI, kAll = kF | kI | kB, kIB = kI | kB };
template <int K, typename T>
constexpr bool allowed() {
  if constexpr (is_half_v<T>) return (K & kF) != 0 && (K & kNoHalf) == 0;
  else if constexpr (is_float_v<T>) return (K & kF) != 0;
  else if constexpr (is_bool_v<T>) return (K & kB) != 0;
  else return (K & kI) != 0;
}
inline bool allowed_rt(int k, DType t) {
  if (t == DType::bf16 || t == DType::f16) return (k & kF) != 0 && (k & kNoHalf) == 0;
  if (is_floating(t)) return (k & kF) != 0;
  if (t == DType::b8) return (k & kB) != 0;
  return (k & kI) != 0;
}
inline const char* kinds_str(int k) {
  switch (k) {
    case kF: return "floating dtypes";
    case kF | kNoHalf: return "float32 or float64";
    case kI: return "integer dtypes";
    case kFI: return "floating or integer dtypes";
    case kIB: return "integer or bool dtypes";
    default: return "any dtype";
  }
}

inline bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// How N inputs broadcast to a contiguous output of `numel` elements.
template <int N>
struct Plan {
  int64_t numel = 0;
  int64_t inner = 1;                                      // innermost run length
  int nd = 0;                                             // outer dims (outermost first)
  std::array<int64_t, kMaxDims> size{};
  std::array<std::array<int64_t, kMaxDims>, N> stride{};  // [input][outer dim], elements
  std::array<int64_t, N> inner_stride{};                  // 0 or 1
};

template <int N>
Plan<N> make_plan(const Shape& out, const std::array<Shape, N>& ins) {
  Plan<N> p;
  p.numel = 1;
  for (int64_t s : out) p.numel *= s;
  // dims innermost first, size-1 dims dropped
  std::vector<int64_t> sz;
  std::vector<std::array<int64_t, N>> st;
  std::array<Shape, N> bs;
  for (int k = 0; k < N; ++k) bs[k] = broadcast_strides(ins[k], out);
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = bs[k][d];
    if (!sz.empty()) {
      bool merge = true;
      for (int k = 0; k < N; ++k) merge = merge && s[k] == st.back()[k] * sz.back();
      if (merge) {
        sz.back() *= out[d];
        continue;
      }
    }
    sz.push_back(out[d]);
    st.push_back(s);
  }
  if (sz.empty()) {  // a single element
    p.inner = 1;
    return p;
  }
  p.inner = sz[0];
  for (int k = 0; k < N; ++k) p.inner_stride[k] = st[0][k];
  p.nd = static_cast<int>(sz.size()) - 1;
  AG_CHECK(p.nd <= kMaxDims, "elementwise: too many non-mergeable dimensions (", p.nd + 1, ") in output ",
           shape_str(out));
  for (int i = 0; i < p.nd; ++i) {  // outermost first
    int src = static_cast<int>(sz.size()) - 1 - i;
    p.size[i] = sz[src];
    for (int k = 0; k < N; ++k) p.stride[k][i] = st[src][k];
  }
  return p;
}

// Calls row(off, pos, len) for runs of the output: `pos` is the output's
// element offset, off[k] input k's element offset, `len` the run length (each
// input advancing by inner_stride[k]). Splits work over threads by elements.
template <int N, typename Row>
void for_each_row(const Plan<N>& p, int64_t grain, const Row& row) {
  parallel_for(p.numel, grain, [&](int64_t b, int64_t e) {
    const int64_t inner = p.inner;
    int64_t idx[kMaxDims];
    std::array<int64_t, N> off{};
    int64_t rem = b / inner, j = b % inner;
    for (int d = p.nd - 1; d >= 0; --d) {
      idx[d] = rem % p.size[d];
      rem /= p.size[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * p.stride[k][d];
    }
    int64_t pos = b;
    while (pos < e) {
      int64_t len = std::min(inner - j, e - pos);
      std::array<int64_t, N> o = off;
      for (int k = 0; k < N; ++k) o[k] += j * p.inner_stride[k];
      row(o, pos, len);
      pos += len;
      j = 0;
      for (int d = p.nd - 1; d >= 0; --d) {
        ++idx[d];
        for (int k = 0; k < N; ++k) off[k] += p.stride[k][d];
        if (idx[d] < p.size[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= p.stride[k][d] * p.size[d];
        idx[d] = 0;
      }
    }
  });
}

// ---- unary ------------------------------------------------------------------
// o[i] = f(a[i]) computed in C, over a contiguous buffer.
template <typename TI, typename TO, typename C, typename F>
std::unique_ptr<Kernel> unary_kernel(std::string name, int64_t n, F f, int64_t grain) {
  return make_fn_kernel(std::move(name), [n, f, grain](void* const* in, void* const* out) {
    const TI* a = static_cast<const TI*>(in[0]);
    TO* o = static_cast<TO*>(out[0]);
    parallel_for(n, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) put(o[i], f(get<C>(a[i])));
    });
  });
}

// ---- binary -----------------------------------------------------------------
template <typename TA, typename TB, typename TO, typename C, typename F>
inline void binary_row(const TA* a, int64_t sa, const TB* b, int64_t sb, TO* o, int64_t n, const F& f) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) put(o[i], f(get<C>(a[i]), get<C>(b[i])));
  } else if (sa) {
    const C bv = get<C>(b[0]);
    for (int64_t i = 0; i < n; ++i) put(o[i], f(get<C>(a[i]), bv));
  } else if (sb) {
    const C av = get<C>(a[0]);
    for (int64_t i = 0; i < n; ++i) put(o[i], f(av, get<C>(b[i])));
  } else {
    const auto v = f(get<C>(a[0]), get<C>(b[0]));
    for (int64_t i = 0; i < n; ++i) put(o[i], v);
  }
}

// o = f(a, b) with broadcasting. `check` (may be null) runs on the raw inputs
// before the loop (integer division by zero).
using BinaryCheck = void (*)(const void* b, int64_t nb);
template <typename TA, typename TB, typename TO, typename C, typename F>
std::unique_ptr<Kernel> binary_kernel(const Node& n, std::string name, F f, int64_t grain,
                                      BinaryCheck check = nullptr) {
  Plan<2> p = make_plan<2>(n.out()->type.shape(), {n.inputs[0]->type.shape(), n.inputs[1]->type.shape()});
  int64_t nb = n.inputs[1]->type.numel();
  return make_fn_kernel(std::move(name), [p, f, grain, check, nb](void* const* in, void* const* out) {
    if (check) check(in[1], nb);
    const TA* a = static_cast<const TA*>(in[0]);
    const TB* b = static_cast<const TB*>(in[1]);
    TO* o = static_cast<TO*>(out[0]);
    for_each_row<2>(p, grain, [&](const std::array<int64_t, 2>& off, int64_t pos, int64_t len) {
      binary_row<TA, TB, TO, C>(a + off[0], p.inner_stride[0], b + off[1], p.inner_stride[1], o + pos, len, f);
    });
  });
}

// Zero check of an integer divisor (PyTorch raises ZeroDivisionError).
template <typename T>
void check_nonzero(const void* b, int64_t n) {
  const T* p = static_cast<const T*>(b);
  bool zero = false;
  for (int64_t i = 0; i < n; ++i) zero |= p[i] == T(0);
  AG_CHECK(!zero, "ZeroDivisionError: integer division or remainder by zero");
}

// Output dtype of a binary op over inputs `a` and `b`: equal dtypes, or (when
// `opmath_scalar`) a bf16/f16 tensor with a 0-d float32 scalar, which is then
// used in float32 like PyTorch does with a Python scalar.
inline DType binary_dtype(const TensorType& a, const TensorType& b, bool opmath_scalar) {
  if (a.dtype == b.dtype) return a.dtype;
  if (opmath_scalar) {
    if (is_half(a.dtype) && b.dtype == DType::f32 && b.rank() == 0) return a.dtype;
    if (is_half(b.dtype) && a.dtype == DType::f32 && a.rank() == 0) return b.dtype;
  }
  fail("input dtypes differ (", a.str(), " and ", b.str(), "); the front must cast them to one dtype");
}

// ---- inference helpers -----------------------------------------------------------
inline Shape broadcast_all(const std::vector<TensorType>& in) {
  Shape s = in.at(0).shape();
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_shapes(s, in[i].shape());
  return s;
}

// A numeric attribute that may be an int (kept exact) or a float.
struct Number {
  bool is_int = false;
  int64_t i = 0;
  double f = 0;
  template <typename C> C as() const { return is_int ? static_cast<C>(i) : static_cast<C>(f); }
};
inline Number number_attr(const Attrs& a, const std::string& k) {
  const AttrValue* v = a.find(k);
  AG_CHECK(v != nullptr, "missing attribute '", k, "'");
  if (std::holds_alternative<int64_t>(*v)) return Number{true, std::get<int64_t>(*v), double(std::get<int64_t>(*v))};
  if (std::holds_alternative<bool>(*v)) return Number{true, std::get<bool>(*v), double(std::get<bool>(*v))};
  AG_CHECK(std::holds_alternative<double>(*v), "attribute '", k, "' must be a number");
  return Number{false, 0, std::get<double>(*v)};
}

}  // namespace ag::ew
