// Helpers shared by kernel files: dtype dispatch, element loads/stores through
// float for the 16-bit types, broadcasting, and small inference helpers.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/attrs.h"
#include "base/error.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/types.h"
#include "base/parallel.h"

namespace ag {

// Storage types: bf16/f16 are stored as these wrappers; `acc_t<T>` is the type
// arithmetic happens in (float for 16-bit floats).
struct bf16s { uint16_t b; };
struct f16s { uint16_t b; };
template <typename T> struct acc { using type = T; };
template <> struct acc<bf16s> { using type = float; };
template <> struct acc<f16s> { using type = float; };
template <typename T> using acc_t = typename acc<T>::type;

template <typename T> inline acc_t<T> load(const T& v) { return v; }
inline float load(const bf16s& v) { return bf16_to_f32(v.b); }
inline float load(const f16s& v) { return f16_to_f32(v.b); }
template <typename T> inline void store(T& dst, acc_t<T> v) { dst = v; }
inline void store(bf16s& dst, float v) { dst.b = f32_to_bf16(v); }
inline void store(f16s& dst, float v) { dst.b = f32_to_f16(v); }
// Converting store from any arithmetic value (used by casts).
template <typename T, typename V> inline void store_cast(T& dst, V v) {
  if constexpr (std::is_same_v<T, bf16s>) dst.b = f32_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, f16s>) dst.b = f32_to_f16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>) dst = (v != V(0));
  else dst = static_cast<T>(v);
}

// Dispatch: calls body with a type alias `scalar_t` for the runtime dtype.
#define AG_CASE(dt, T, ...) \
  case ::ag::DType::dt: {   \
    using scalar_t = T;     \
    __VA_ARGS__();          \
    break;                  \
  }
#define AG_DISPATCH_FLOAT(dtype, what, ...)                                     \
  switch (dtype) {                                                              \
    AG_CASE(f32, float, __VA_ARGS__)                                            \
    AG_CASE(f64, double, __VA_ARGS__)                                           \
    AG_CASE(bf16, ::ag::bf16s, __VA_ARGS__)                                     \
    AG_CASE(f16, ::ag::f16s, __VA_ARGS__)                                       \
    default:                                                                    \
      ::ag::fail(what, ": dtype ", ::ag::dtype_name(dtype), " is not supported"); \
  }
#define AG_DISPATCH_ALL(dtype, what, ...)                                       \
  switch (dtype) {                                                              \
    AG_CASE(f32, float, __VA_ARGS__)                                            \
    AG_CASE(f64, double, __VA_ARGS__)                                           \
    AG_CASE(bf16, ::ag::bf16s, __VA_ARGS__)                                     \
    AG_CASE(f16, ::ag::f16s, __VA_ARGS__)                                       \
    AG_CASE(i64, int64_t, __VA_ARGS__)                                          \
    AG_CASE(i32, int32_t, __VA_ARGS__)                                          \
    AG_CASE(i16, int16_t, __VA_ARGS__)                                          \
    AG_CASE(i8, int8_t, __VA_ARGS__)                                            \
    AG_CASE(u8, uint8_t, __VA_ARGS__)                                           \
    AG_CASE(b8, bool, __VA_ARGS__)                                              \
  }
// Same-size dispatch for data movement (copies, gathers): element size only.
#define AG_DISPATCH_BYTES(nbytes, what, ...)                                    \
  switch (nbytes) {                                                             \
    case 1: { using scalar_t = uint8_t; __VA_ARGS__(); break; }                 \
    case 2: { using scalar_t = uint16_t; __VA_ARGS__(); break; }                \
    case 4: { using scalar_t = uint32_t; __VA_ARGS__(); break; }                \
    case 8: { using scalar_t = uint64_t; __VA_ARGS__(); break; }                \
    default: ::ag::fail(what, ": element size ", nbytes, " is not supported");  \
  }

// Inference helpers.
std::vector<TensorType> infer_same(const std::vector<TensorType>& in, const Attrs&);  // output = input 0

// Per-run scratch of one kernel, laid out at build time: add() reserves a
// 64-byte aligned sub-buffer and returns its offset; at run time at(ctx, off)
// is its address in the executor's scratch (ctx.scratch). kNone: not reserved.
struct ScratchLayout {
  static constexpr size_t kNone = ~size_t{0};
  size_t bytes = 0;
  size_t add(size_t n) {
    size_t off = bytes;
    bytes += (n + 63) / 64 * 64;
    return off;
  }
  template <typename T = void>
  static T* at(const RunCtx& c, size_t off) {
    return off == kNone ? nullptr : reinterpret_cast<T*>(static_cast<char*>(c.scratch) + off);
  }
};

// A kernel from a lambda: make_fn_kernel("name", [state](void* const* in, void* const* out){...}).
// The lambda is called const (captured state is read-only at run time); one that
// needs temporary memory takes a third argument, `scratch_bytes` bytes of it:
// make_fn_kernel("name", bytes, [](void* const* in, void* const* out, void* scratch){...}).
template <typename F>
class FnKernel final : public Kernel {
 public:
  FnKernel(std::string n, F f, size_t scratch = 0) : name_(std::move(n)), f_(std::move(f)), scratch_(scratch) {}
  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if constexpr (std::is_invocable_v<const F&, void* const*, void* const*, void*>) f_(in, out, ctx.scratch);
    else f_(in, out);
  }
  size_t scratch_bytes() const override { return scratch_; }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  F f_;
  size_t scratch_;
};
template <typename F>
std::unique_ptr<Kernel> make_fn_kernel(std::string name, F f) {
  return std::make_unique<FnKernel<F>>(std::move(name), std::move(f));
}
template <typename F>
std::unique_ptr<Kernel> make_fn_kernel(std::string name, size_t scratch_bytes, F f) {
  return std::make_unique<FnKernel<F>>(std::move(name), std::move(f), scratch_bytes);
}

}  // namespace ag
