// Element types of the engine. The list is written once (X-macro) so the enum,
// names, sizes and the DLPack codes cannot drift apart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ag {

//      enum   name       bytes  dlpack code (0 int, 1 uint, 2 float, 4 bfloat, 6 bool)
#define AG_DTYPES(X)            \
  X(f32, "float32", 4, 2, 32)   \
  X(f64, "float64", 8, 2, 64)   \
  X(f16, "float16", 2, 2, 16)   \
  X(bf16, "bfloat16", 2, 4, 16) \
  X(i64, "int64", 8, 0, 64)     \
  X(i32, "int32", 4, 0, 32)     \
  X(i16, "int16", 2, 0, 16)     \
  X(i8, "int8", 1, 0, 8)        \
  X(u8, "uint8", 1, 1, 8)       \
  X(b8, "bool", 1, 6, 8)

enum class DType : uint8_t {
#define AG_X(e, n, b, c, bits) e,
  AG_DTYPES(AG_X)
#undef AG_X
};
inline constexpr int kNumDTypes = 0
#define AG_X(e, n, b, c, bits) +1
    AG_DTYPES(AG_X)
#undef AG_X
    ;

inline size_t dtype_size(DType t) {
  switch (t) {
#define AG_X(e, n, b, c, bits) \
  case DType::e:               \
    return b;
    AG_DTYPES(AG_X)
#undef AG_X
  }
  return 0;
}
inline const char* dtype_name(DType t) {
  switch (t) {
#define AG_X(e, n, b, c, bits) \
  case DType::e:               \
    return n;
    AG_DTYPES(AG_X)
#undef AG_X
  }
  return "?";
}
inline bool dtype_from_name(const std::string& s, DType* out) {
#define AG_X(e, n, b, c, bits) \
  if (s == n) {                \
    *out = DType::e;           \
    return true;               \
  }
  AG_DTYPES(AG_X)
#undef AG_X
  return false;
}
inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
inline bool is_integral(DType t) { return !is_floating(t) && t != DType::b8; }

// bfloat16 stored as raw bits; conversions round to nearest even like PyTorch.
struct bf16_t {
  uint16_t bits;
};
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// IEEE half conversions (used only for loads/stores; compute happens in f32).
inline float f16_to_f32(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
inline uint16_t f32_to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

}  // namespace ag
