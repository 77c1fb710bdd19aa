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
#include "kernels/isa.h"

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
// Decode GEMVs sum eight weight rows at once (eight streams in flight) and fetch the rows
// kAheadRows further into L2 while they sum: the hardware prefetchers alone left a 0.5B model's f32
// GEMVs at 33-37 GB/s on a 2-core Zen 4 whose plain read runs at 43-47 (8 rows and the L2 fetch: 43-51).
inline constexpr int64_t kAheadRows = 16;

// Dot products of int8 rows of x, stored as u8 (the value + 128), with eight int8 weight rows on
// AVX-512 VNNI: vpdpbusd sums 64 u8 x s8 products an instruction into int32 lanes, a quarter of the
// instructions of widening each weight to f32, so the loop streams the weights at memory speed. The
// bytes past K are loaded as zeros (masked). The sums are exact in int32 for K <= kVnniMaxK; the
// caller subtracts 128 * the row's weight sum. s[i] = sum_k x[k] * w_i[k].
inline constexpr int64_t kVnniMaxK = 65536;  // (255 * 128 * 65536 < 2^31)

__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void dot8_u8s8(const uint8_t* x, const int8_t* w0,
                                                                             int64_t K, int32_t* s) {
  __m512i a[8];
  for (auto& v : a) v = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    const __m512i xv = _mm512_loadu_si512(x + k);
    for (int i = 0; i < 8; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + (kAheadRows + i) * K + k), _MM_HINT_T1);
      a[i] = _mm512_dpbusd_epi32(a[i], xv, _mm512_loadu_si512(w0 + i * K + k));
    }
  }
  if (k < K) {
    const __mmask64 m = ~uint64_t{0} >> (64 - (K - k));
    const __m512i xv = _mm512_maskz_loadu_epi8(m, x + k);
    for (int i = 0; i < 8; ++i) a[i] = _mm512_dpbusd_epi32(a[i], xv, _mm512_maskz_loadu_epi8(m, w0 + i * K + k));
  }
  for (int i = 0; i < 8; ++i) s[i] = _mm512_reduce_add_epi32(a[i]);
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

inline bool has_avx512_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return yes;
}

// The decode GEMV's rows, written once for any vector width: Vec<L> are GCC vector types of L lanes.
// rows_dot is always inlined into rows_avx512 (compiled for AVX-512: L = 16 in zmm registers) or
// rows_avx2 (L = 8 in ymm registers), so the ISA is the width parameter, not a second copy.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // (16-lane vector types outside AVX-512 code: always inlined, never passed)
template <int L>
struct Vec {
  typedef float F __attribute__((vector_size(4 * L)));
  typedef int8_t I8 __attribute__((vector_size(L)));
  typedef uint16_t U16 __attribute__((vector_size(2 * L)));
};
// (results through a reference: a 16-lane vector passed by value outside AVX-512 code is an ABI warning)
template <typename T>
[[gnu::always_inline]] inline void vload(T& v, const void* p) {
  __builtin_memcpy(&v, p, sizeof v);
}
// Widening loads, exact. GCC 12 scalarizes __builtin_convertvector from 8-bit lanes, so int8 goes
// through AVX2's sign extension (8 lanes at a time; the core is built for AVX2), and bf16 is a
// shuffle of zeros under each value (one vpermt2w at 16 lanes).
template <int L>
[[gnu::always_inline]] inline void vload(typename Vec<L>::F& v, const int8_t* p) {
  if constexpr (L == 8) {
    v = load8(p);
  } else {
    static_assert(L == 16);
    const typename Vec<8>::F lo = load8(p), hi = load8(p + 8);
    v = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
}
template <int L>
[[gnu::always_inline]] inline void vload(typename Vec<L>::F& v, const uint16_t* p) {
  typename Vec<L>::U16 b, z{};
  vload(b, p);
  typedef uint16_t U16x2 __attribute__((vector_size(4 * L)));
  U16x2 r;
  if constexpr (L == 8) {
    r = __builtin_shufflevector(z, b, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  } else {
    static_assert(L == 16);
    r = __builtin_shufflevector(z, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11,
                                27, 12, 28, 13, 29, 14, 30, 15, 31);
  }
  vload(v, &r);
}

// The lanes' sum, halving the vector at each step (a lane at a time would be L dependent adds a row).
template <int L>
[[gnu::always_inline]] inline float vsum(const typename Vec<L>::F& v) {
  if constexpr (L == 4) {
    return (v[0] + v[2]) + (v[1] + v[3]);
  } else {
    typename Vec<L / 2>::F lo, hi;
    __builtin_memcpy(&lo, &v, sizeof lo);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return vsum<L / 2>(lo + hi);
  }
}

// s[i] = dot(x, w0[i * K .. i * K + K)) for R rows; while they are summed, the rows kAheadRows
// further on are fetched into L2 (one prefetch per row per cache line).
template <int L, int R, typename W>
[[gnu::always_inline]] inline void rows_dot(const float* x, const W* w0, int64_t K, float* s) {
  using V = typename Vec<L>::F;
  V a[R];
  for (auto& v : a) v = V{};
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V xv, wv;
    vload(xv, x + k);
    for (int i = 0; i < R; ++i) {
      if (((k * static_cast<int64_t>(sizeof(W))) & 63) == 0) __builtin_prefetch(w0 + (kAheadRows + i) * K + k, 0, 2);
      if constexpr (std::is_same_v<W, float>) vload(wv, w0 + i * K + k);
      else vload<L>(wv, w0 + i * K + k);
      a[i] += wv * xv;
    }
  }
  for (int i = 0; i < R; ++i) {
    float t = vsum<L>(a[i]);
    for (int64_t kk = k; kk < K; ++kk) t += load1(w0 + i * K + kk) * x[kk];
    s[i] = t;
  }
}

// Rows [nb, ne) of one x row: eight at a time, then one at a time.
template <int L, typename W>
[[gnu::always_inline]] inline void rows_range(const float* x, const W* w, int64_t K, int64_t nb, int64_t ne, float* y) {
  int64_t n = nb;
  for (; n + 8 <= ne; n += 8) rows_dot<L, 8>(x, w + n * K, K, y + n);
  for (; n < ne; ++n) rows_dot<L, 1>(x, w + n * K, K, y + n);
}
template <typename W>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), noinline)) void rows_avx512(const float* x, const W* w, int64_t K,
                                                                                      int64_t nb, int64_t ne, float* y) {
  rows_range<16>(x, w, K, nb, ne, y);
}
template <typename W>
[[gnu::noinline]] void rows_avx2(const float* x, const W* w, int64_t K, int64_t nb, int64_t ne, float* y) {
  rows_range<8>(x, w, K, nb, ne, y);
}
#pragma GCC diagnostic pop

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
          if ((((k0 + k) * sizeof(W)) & 63) == 0)  // (the next block's row, fetched while these are summed)
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
  // One row of x: eight weight rows at a time (rows_dot: eight accumulators share each load of x,
  // the loop is bound by reading W, which this keeps streaming). More rows of x: dot4_rows, which
  // reads each weight once for all of them.
  const bool avx512 = isa::use_avx512();  // (the CPU's, unless AIRGRAPH_KERNEL_ISA=avx2 or a test forces one)
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
      if (avx512) rows_avx512(xf, w, K, nb, ne, of);
      else rows_avx2(xf, w, K, nb, ne, of);
      if (bf)
        for (int64_t n = nb; n < ne; ++n) of[n] += bf[n];
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
