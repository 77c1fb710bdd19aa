// GEMV for few rows against constant [N, K] weights (PyTorch's linear layout), read once, straight
// from where they are stored: a decode step is bound by the bytes of weights it reads, so the
// weights are never copied, widened or packed for it. W is float (f32 weights), uint16_t (bf16
// weights) or int8_t (weight-only int8: the integer value; a per-channel scale is a post-op of the
// node). The row x is f32 (a bf16 input is widened by the caller); products are summed in f32.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "base/parallel.h"
#include "ir/dtype.h"
#include "kernels/epilogue.h"

namespace ag::gemv {

inline __m256 load8(const uint16_t* p) {  // 8 bf16 -> f32
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const int8_t* p) {  // 8 int8 -> f32 (exact)
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float load1(const uint16_t* p) { return bf16_to_f32(*p); }
inline float load1(const float* p) { return *p; }
inline float load1(const int8_t* p) { return static_cast<float>(*p); }
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // (GCC 12's avx512fintrin.h, inlined here)
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) inline __m512 wide16(const int8_t* p) {  // 16 int8 -> f32 (exact)
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f"))) inline __m512 wide16(const uint16_t* p) {  // 16 bf16 -> f32 (exact)
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Dot products of four int8 or bf16 weight rows with x over k < K - K % 32 on AVX-512 (16 lanes,
// two accumulators a row: the loop is bound by widening the weights, not by the FMAs' latency); the
// sums go to s[0..3] and the rest of K is the caller's. Chosen at run time (has_avx512()).
template <typename W>
__attribute__((target("avx512f"))) inline int64_t dot4_avx512(const float* xr, const W* w0, int64_t K, float* s) {
  const W *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  int64_t k = 0;
  const int64_t ahead = 4 * K;  // the next four rows (the caller's next block), fetched while these are summed
  for (; k + 32 <= K; k += 32) {
    for (const W* r : {w0, w1, w2, w3}) _mm_prefetch(reinterpret_cast<const char*>(r + ahead + k), _MM_HINT_T0);
    const __m512 x0 = _mm512_loadu_ps(xr + k), x1 = _mm512_loadu_ps(xr + k + 16);
    a[0] = _mm512_fmadd_ps(wide16(w0 + k), x0, a[0]);
    a[1] = _mm512_fmadd_ps(wide16(w1 + k), x0, a[1]);
    a[2] = _mm512_fmadd_ps(wide16(w2 + k), x0, a[2]);
    a[3] = _mm512_fmadd_ps(wide16(w3 + k), x0, a[3]);
    a[4] = _mm512_fmadd_ps(wide16(w0 + k + 16), x1, a[4]);
    a[5] = _mm512_fmadd_ps(wide16(w1 + k + 16), x1, a[5]);
    a[6] = _mm512_fmadd_ps(wide16(w2 + k + 16), x1, a[6]);
    a[7] = _mm512_fmadd_ps(wide16(w3 + k + 16), x1, a[7]);
  }
  for (int i = 0; i < 4; ++i) s[i] = _mm512_reduce_add_ps(_mm512_add_ps(a[i], a[i + 4]));
  return k;
}

// Dot products of int8 rows of x, stored as u8 (the value + 128), with four int8 weight rows on
// AVX-512 VNNI: vpdpbusd sums 64 u8 x s8 products an instruction into int32 lanes, a quarter of the
// instructions of widening each weight to f32, so the loop streams the weights at memory speed. The
// bytes past K are loaded as zeros (masked). The sums are exact in int32 for K <= kVnniMaxK; the
// caller subtracts 128 * the row's weight sum. s[i] = sum_k x[k] * w_i[k].
inline constexpr int64_t kVnniMaxK = 65536;  // (255 * 128 * 65536 < 2^31)

__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void dot4_u8s8(const uint8_t* x, const int8_t* w0,
                                                                             int64_t K, int32_t* s) {
  const int8_t* r[4] = {w0, w0 + K, w0 + 2 * K, w0 + 3 * K};
  __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  const int64_t ahead = 4 * K;  // (the caller's next four rows, fetched while these are summed)
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    const __m512i xv = _mm512_loadu_si512(x + k);
    for (int i = 0; i < 4; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(r[i] + ahead + k), _MM_HINT_T0);
      a[i] = _mm512_dpbusd_epi32(a[i], xv, _mm512_loadu_si512(r[i] + k));
    }
  }
  if (k < K) {
    const __mmask64 m = ~uint64_t{0} >> (64 - (K - k));
    const __m512i xv = _mm512_maskz_loadu_epi8(m, x + k);
    for (int i = 0; i < 4; ++i) a[i] = _mm512_dpbusd_epi32(a[i], xv, _mm512_maskz_loadu_epi8(m, r[i] + k));
  }
  for (int i = 0; i < 4; ++i) s[i] = _mm512_reduce_add_epi32(a[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline int32_t dot1_u8s8(const uint8_t* x, const int8_t* w,
                                                                                int64_t K) {
  __m512i a = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) a = _mm512_dpbusd_epi32(a, _mm512_loadu_si512(x + k), _mm512_loadu_si512(w + k));
  if (k < K) {
    const __mmask64 m = ~uint64_t{0} >> (64 - (K - k));
    a = _mm512_dpbusd_epi32(a, _mm512_maskz_loadu_epi8(m, x + k), _mm512_maskz_loadu_epi8(m, w + k));
  }
  return _mm512_reduce_add_epi32(a);
}

#pragma GCC diagnostic pop

inline bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
inline bool has_avx512_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return yes;
}

// Rows of x at once, against four weight rows: the weights' chunk [4, kc] (f32 rows read in place,
// 16-bit and int8 rows widened once into `tile`) stays in L1 while every row of x is summed against
// it, two rows of x at a time (eight accumulators share each weight load), so the weights stream
// from memory once for all M rows. acc holds [M][4] partial sums (8 lanes each) across chunks.
inline constexpr int64_t kChunk = 512;  // (a tile of 4 x 512 floats: 8 KB)

template <typename W>
inline void dot4_rows(const float* xf, const W* w0, int64_t M, int64_t K, float* tile, __m256* acc, float* s) {
  for (int64_t i = 0; i < M * 4; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t i = 0; i < M * 4; ++i) s[i] = 0.f;
  for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
    const int64_t kc = std::min(kChunk, K - k0), k8 = kc & ~int64_t(7);
    const float* t[4];
    for (int i = 0; i < 4; ++i) {
      const W* r = w0 + i * K + k0;
      if constexpr (std::is_same_v<W, float>) {
        t[i] = r;
      } else {
        float* d = tile + i * kChunk;
        for (int64_t k = 0; k < k8; k += 8) {
          if ((((k0 + k) * sizeof(W)) & 63) == 0)  // (the next block's row: see dot4_avx512)
            _mm_prefetch(reinterpret_cast<const char*>(r + 4 * K + k), _MM_HINT_T0);
          _mm256_storeu_ps(d + k, load8(r + k));
        }
        for (int64_t k = k8; k < kc; ++k) d[k] = load1(r + k);
        t[i] = d;
      }
    }
    int64_t m = 0;
    for (; m + 2 <= M; m += 2) {
      const float *x0 = xf + m * K + k0, *x1 = x0 + K;
      __m256* a = acc + m * 4;
      __m256 a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], b0 = a[4], b1 = a[5], b2 = a[6], b3 = a[7];
      for (int64_t k = 0; k < k8; k += 8) {
        const __m256 u = _mm256_loadu_ps(x0 + k), v = _mm256_loadu_ps(x1 + k);
        const __m256 w0v = _mm256_loadu_ps(t[0] + k), w1v = _mm256_loadu_ps(t[1] + k);
        const __m256 w2v = _mm256_loadu_ps(t[2] + k), w3v = _mm256_loadu_ps(t[3] + k);
        a0 = _mm256_fmadd_ps(w0v, u, a0), b0 = _mm256_fmadd_ps(w0v, v, b0);
        a1 = _mm256_fmadd_ps(w1v, u, a1), b1 = _mm256_fmadd_ps(w1v, v, b1);
        a2 = _mm256_fmadd_ps(w2v, u, a2), b2 = _mm256_fmadd_ps(w2v, v, b2);
        a3 = _mm256_fmadd_ps(w3v, u, a3), b3 = _mm256_fmadd_ps(w3v, v, b3);
      }
      a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = b0, a[5] = b1, a[6] = b2, a[7] = b3;
    }
    for (; m < M; ++m) {
      const float* x0 = xf + m * K + k0;
      __m256* a = acc + m * 4;
      for (int64_t k = 0; k < k8; k += 8) {
        const __m256 u = _mm256_loadu_ps(x0 + k);
        for (int i = 0; i < 4; ++i) a[i] = _mm256_fmadd_ps(_mm256_loadu_ps(t[i] + k), u, a[i]);
      }
    }
    if (k8 < kc)
      for (int64_t mm = 0; mm < M; ++mm)
        for (int i = 0; i < 4; ++i)
          for (int64_t k = k8; k < kc; ++k) s[mm * 4 + i] += t[i][k] * xf[mm * K + k0 + k];
  }
  for (int64_t i = 0; i < M * 4; ++i) s[i] += hsum(acc[i]);
}

inline constexpr int64_t kMaxRows = 16;  // run's rows at most
// Linears of up to this many rows run as a GEMV on the weights as stored (decode steps of a batch up
// to 8: each weight is read once for all rows, at about a packed GEMM's speed, with no packed copy)
inline constexpr int64_t kGemvMaxRows = 8;

// y[m, n] = epilogue(dot(x[m, :], W[n, :]) (+ bias[n])) for m < M <= kMaxRows. Results go to the f32
// `of` ([M, N]), then, when `ob` is given, are rounded to bf16 into it, one thread's column block at
// a time while it is in cache. `in` is the node's inputs (the epilogue's operands).
template <typename W>
void run(const float* xf, const W* w, int64_t M, int64_t N, int64_t K, const float* bf, float* of, uint16_t* ob,
         const epi::Epilogue& e, void* const* in) {
  // Four weight rows at a time: four independent accumulators share each load of x (the loop is
  // bound by reading W, which this keeps streaming). More rows of x: dot4_rows, which reads each
  // weight once for all of them.
  const bool avx512 = has_avx512();
  parallel_for(N, std::max<int64_t>(4, 65536 / std::max<int64_t>(K, 1)), [&](int64_t nb, int64_t ne) {
    if (M > 1) {
      alignas(64) float tile[4 * kChunk];
      alignas(32) __m256 acc[kMaxRows * 4];
      float s[kMaxRows * 4];
      int64_t n = nb;
      for (; n + 4 <= ne; n += 4) {
        dot4_rows(xf, w + n * K, M, K, tile, acc, s);
        for (int64_t m = 0; m < M; ++m)
          for (int i = 0; i < 4; ++i) of[m * N + n + i] = bf ? s[m * 4 + i] + bf[n + i] : s[m * 4 + i];
      }
      for (; n < ne; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const W* wr = w + n * K;
          const float* xr = xf + m * K;
          float t = 0.f;
          for (int64_t k = 0; k < K; ++k) t += load1(wr + k) * xr[k];
          of[m * N + n] = bf ? t + bf[n] : t;
        }
    } else {
      const float* xr = xf;
      int64_t n = nb;
      for (; n + 4 <= ne; n += 4) {
        const W* w0 = w + n * K;
        const W *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        int64_t k = 0;
        float s[4] = {0, 0, 0, 0};
        if constexpr (!std::is_same_v<W, float>) {  // (f32 rows: bound by memory, not by widening)
          if (avx512) k = dot4_avx512(xr, w0, K, s);
        }
        for (; k + 8 <= K; k += 8) {
          if constexpr (!std::is_same_v<W, float>) {  // (the next four rows: see dot4_avx512)
            if (((k * sizeof(W)) & 63) == 0)
              for (const W* r : {w0, w1, w2, w3}) _mm_prefetch(reinterpret_cast<const char*>(r + 4 * K + k), _MM_HINT_T0);
          }
          const __m256 xv = _mm256_loadu_ps(xr + k);
          a0 = _mm256_fmadd_ps(load8(w0 + k), xv, a0);
          a1 = _mm256_fmadd_ps(load8(w1 + k), xv, a1);
          a2 = _mm256_fmadd_ps(load8(w2 + k), xv, a2);
          a3 = _mm256_fmadd_ps(load8(w3 + k), xv, a3);
        }
        s[0] += hsum(a0), s[1] += hsum(a1), s[2] += hsum(a2), s[3] += hsum(a3);
        const W* rows[4] = {w0, w1, w2, w3};
        for (int i = 0; i < 4; ++i) {
          for (int64_t kk = k; kk < K; ++kk) s[i] += load1(rows[i] + kk) * xr[kk];
          of[n + i] = bf ? s[i] + bf[n + i] : s[i];
        }
      }
      for (; n < ne; ++n) {
        const W* wr = w + n * K;
        __m256 acc = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 8 <= K; k += 8) acc = _mm256_fmadd_ps(load8(wr + k), _mm256_loadu_ps(xr + k), acc);
        float t = hsum(acc);
        for (; k < K; ++k) t += load1(wr + k) * xr[k];
        of[n] = bf ? t + bf[n] : t;
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      float* seg = of + m * N + nb;
      if (!e.empty()) e.apply(seg, m, nb, ne - nb, in, 0);
      if (ob)
        for (int64_t n = 0; n < ne - nb; ++n) ob[m * N + nb + n] = f32_to_bf16(seg[n]);
    }
  });
}

}  // namespace ag::gemv

namespace ag {
struct Node;
struct BuildCtx;
class Kernel;
// linear(x, w[, bias]) with constant int8 weights, or bf16 ones where oneDNN has no native bf16 matmul,
// read in place and widened by the kernel (kernels/linear_widened.cpp); x viewed as [M, K].
std::unique_ptr<Kernel> make_linear_widened(const Node& n, const BuildCtx& ctx, int64_t M, int64_t K, int64_t N);
}  // namespace ag
