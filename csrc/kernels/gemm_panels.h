// f32 linear layers of a few rows (more than the GEMV takes, up to kMaxRows: a short prompt, a
// sentence encoder's tokens, a small batch) on weights packed once into panels of 16 columns,
// where oneDNN's f32 matmul is its plain jit sgemm: on CPUs without AVX-512, oneDNN 3.2 has no
// brgemm matmul, and its sgemm re-reads unpacked weights at half the rate of a packed kernel
// (Zen 3, 2 threads, K 384, N 1536, 12 rows: oneDNN 265-289 us, this kernel 134, ONNX Runtime's
// MLAS 135; 32 rows 298-339 against 361-408; at 64 rows oneDNN is as fast or faster).
//
// Layout: panel j holds columns 16j..16j+15 of the [K, N] product's right-hand side as K rows of
// 16 floats ([N/16][K][16], N a multiple of 16): one 64-byte line per k, read in order.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ag::epi {
struct Epilogue;
}

namespace ag::panels {

inline constexpr int64_t kCols = 16;
inline constexpr int64_t kMaxRows = 48;

enum : int { kAuto = -1, kOff = 0, kOn = 1 };
// AIRGRAPH_LINEAR_PANELS=on|off (read once) forces the choice for every eligible linear; tests force
// it for the builds that follow with force(). kAuto: where oneDNN's implementation is not brgemm.
inline std::atomic<int>& forced() {
  static std::atomic<int> v{kAuto};
  return v;
}
inline int env_choice() {
  static const int c = [] {
    const char* e = std::getenv("AIRGRAPH_LINEAR_PANELS");
    return !e ? kAuto : std::strcmp(e, "on") == 0 ? kOn : std::strcmp(e, "off") == 0 ? kOff : kAuto;
  }();
  return c;
}
inline void force(int which) { forced().store(which, std::memory_order_relaxed); }
// Whether a linear of `rows` rows whose oneDNN f32 implementation is `onednn_impl` runs here.
inline bool wanted(int64_t rows, int64_t N, const std::string& onednn_impl) {
  if (rows > kMaxRows || N % kCols != 0) return false;
  int c = forced().load(std::memory_order_relaxed);
  if (c == kAuto) c = env_choice();
  if (c != kAuto) return c == kOn;
  return onednn_impl.find("gemm:jit") != std::string::npos;  // (not brg: brgemm runs packed already)
}

// y[m, n] = epilogue(sum_k x[m, k] * w[n, k] (+ bias[n])) for m < M, with w packed (the layout
// above). x is [M, K] and y [M, N], both contiguous. `in` is the node's inputs (the epilogue's
// operands).
void run(const float* x, int64_t M, int64_t K, const float* packed, int64_t N, const float* bias, float* y,
         const epi::Epilogue& e, void* const* in);

}  // namespace ag::panels
