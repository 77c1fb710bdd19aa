// "linear_int4"(x, w, scale_and_zero){group_size, layout[, isa]}: torch's
// _weight_int4pack_mm_for_cpu, the int4 weight-only linear that torchao's
// PrototypeInt4WeightOnlyConfig produces on CPU, reading the weight in torch's own packed
// bytes (one copy of the weight, 4-bit reads; nothing repacked or dequantized kept).
//
//  x              [..., K]      float32, bfloat16 or float16
//  w              [N, K / 2]    uint8, two 4-bit values q in [0, 15] a byte
//  scale_and_zero [K / g, N, 2] x's dtype: (scale, zero) per group of g = group_size rows of K
//  out            [..., N]      x's dtype:  out[m, n] = sum_k x[m, k] * ((q[n, k] - 8) * scale + zero)
//
// torch's packed layout depends on the CPU capability its kernels were dispatched to
// (weight_to_int4pack_kernel): N is cut into blocks of B columns, block i at byte i * B * K / 2,
// each k one row of nb / 2 bytes (nb = the block's columns, B or the last block's fewer):
//   "avx512": B = 64, a full block's byte j holds column j (low nibble) and j + 32 (high);
//   "avx2":   B = 32, a full block's byte j holds column j (low) and j + 16 (high);
//   "pairs":  B = 32, byte j holds columns 2j (low) and 2j + 1 (high) (torch's non-vector format),
// and a partial last block (16, 32 or 48 columns) is always in pairs. The front finds which
// layout this process's torch writes (lowering/quant.py) and says it in `layout`.
//
// Few rows (decode): per group, dot_g = sum_k x_k q_k in f32 registers from the nibbles, then
// out += scale_g * (dot_g - 8 * sum_g(x)) + zero_g * sum_g(x) (the AVX-512 code sums x_k (q_k - 8)
// from a table and adds scale_g * dot_g + zero_g * sum_g(x)); AVX-512 or AVX2 code picked when
// the kernel is built (`isa` "avx2"/"scalar" forces a lesser one: tests). With
// BuildCtx::int8_activations on CPUs with AVX-512 VNNI and VBMI, the "avx512" layout's full blocks
// run on int8 products instead (block_vnni: x quantized per row, the nibbles exact; a partial last
// block reads x as quantized in f32). A row of x holding inf or nan makes the call exact, its own
// outputs summed term by term from the dequantized weights (block_exact_row). Many rows (prefill): a
// panel of columns is dequantized into per-call scratch and multiplied by oneDNN's f32 matmul,
// each thread its own panels (one parallel region a call: on a busy two-core machine every
// fork/join can wait a time slice for a descheduled thread).
// With BuildCtx::int8_activations (CompilerConfig.int8_activations="per_row", the default) and
// AVX-512 VNNI or AMX, a panel is requantized from the nibbles to int8 per column (scale: the
// largest |(q - 8) * scale + zero| of the column's groups / 127, a step about a sixteenth of the int4
// group's) and x per row (kernels/int8_rows.h), and oneDNN's s8 x s8 matmul runs it; rows holding
// inf or nan, and columns whose scales do, are summed exactly from a dequantized f32 panel.
// Accumulation is in f32 as torch's; the sums are grouped differently, so results agree to f32
// rounding, not bit for bit.
// (GCC 12's AVX-512 intrinsics start from a self-initialized "undefined" vector and warn about it)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/common.h"
#include "kernels/int8_rows.h"
#include "kernels/isa.h"
#include "kernels/onednn_util.h"

#define AG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace ag {
namespace {

using namespace dnnl_util;

enum class Layout { Avx512, Avx2, Pairs };
enum class Isa { Avx512, Avx2, Scalar };

bool parse_layout(const std::string& s, Layout* l) {
  if (s == "avx512") *l = Layout::Avx512;
  else if (s == "avx2") *l = Layout::Avx2;
  else if (s == "pairs") *l = Layout::Pairs;
  else return false;
  return true;
}
int block_n(Layout l) { return l == Layout::Avx512 ? 64 : 32; }

std::vector<TensorType> infer_linear_int4(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &x = in[0], &w = in[1], &sz = in[2];
  AG_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16, "linear_int4: input ",
           x.str(), " must be float32, bfloat16 or float16");
  AG_CHECK(x.rank() >= 1, "linear_int4: input must have rank >= 1, got ", x.str());
  AG_CHECK(w.dtype == DType::u8 && w.rank() == 2, "linear_int4: packed weight must be uint8 [N, K / 2], got ",
           w.str());
  const int64_t K = x.size(x.rank() - 1), N = w.size(0);
  AG_CHECK(w.size(1) * 2 == K, "linear_int4: input ", x.str(), " has K = ", K, " features but the packed weight ",
           w.str(), " holds K = ", w.size(1) * 2);
  AG_CHECK(N % 16 == 0, "linear_int4: N = ", N, " (packed weight ", w.str(), ") must be a multiple of 16");
  const int64_t g = a.i("group_size");
  AG_CHECK(g == 32 || g == 64 || g == 128 || g == 256, "linear_int4: group_size ", g,
           " must be 32, 64, 128 or 256 (input ", x.str(), ")");
  AG_CHECK(K % g == 0, "linear_int4: K = ", K, " (input ", x.str(), ") is not a multiple of group_size ", g);
  AG_CHECK(sz.dtype == x.dtype, "linear_int4: scale_and_zero ", sz.str(), " must have the input's dtype (",
           dtype_name(x.dtype), ")");
  AG_CHECK(sz.rank() == 3 && sz.size(0) == K / g && sz.size(1) == N && sz.size(2) == 2,
           "linear_int4: scale_and_zero must be [K / group_size, N, 2] = [", K / g, ", ", N, ", 2], got ", sz.str());
  Layout l;
  AG_CHECK(parse_layout(a.s("layout", ""), &l), "linear_int4: layout '", a.s("layout", ""),
           "' is not one of avx512, avx2, pairs");
  const std::string isa = a.s("isa", "auto");
  AG_CHECK(isa == "auto" || isa == "avx512" || isa == "avx2" || isa == "scalar", "linear_int4: isa '", isa,
           "' is not one of auto, avx512, avx2, scalar");
  Shape o = x.shape();
  o.back() = N;
  return {TensorType(x.dtype, o)};
}

// Everything one call's block functions read.
struct Call {
  int64_t M, K, N, g, KB;  // KB = K / g
  const uint8_t* w;
  const void* sz;          // [KB, N, 2] of `t`
  DType t;
  const float* x;          // [M, K] f32
  const float* xs;         // [M, KB]: sum of x over each group
  float* o;                // [M, N] f32, accumulated into (zeroed by the caller)
  const int8_t* xq = nullptr;  // the int8 panel path: x quantized per row [M, K], and the rows'
  const float* xscale = nullptr;  // scales [M] (int8_rows.h)
  bool xbad = false;              // a row of x holds inf or nan (its scale is NaN)
  const int32_t* xqs = nullptr;   // the VNNI GEMV's: sums of xq over each group [M, KB]
};

// Column of the low (hi = 0) or high nibble of byte j in a block of nb columns.
inline int64_t col_of(bool split, int64_t nb, int64_t j, int hi) {
  return split ? j + hi * (nb / 2) : 2 * j + hi;
}

inline float sz_at(const Call& c, int64_t kb, int64_t n, int which) {
  const int64_t i = (kb * c.N + n) * 2 + which;
  switch (c.t) {
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(c.sz)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(c.sz)[i]);
    default: return static_cast<const float*>(c.sz)[i];
  }
}

// Any layout, rows [r0, r0 + R): block `b` (columns n0 .. n0 + nb).
void block_scalar(const Call& c, Layout l, int64_t b, int64_t r0, int64_t R) {
  const int64_t B = block_n(l), n0 = b * B, nb = std::min(B, c.N - n0);
  const bool split = nb == B && l != Layout::Pairs;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  float q[64], dot[64];
  for (int64_t r = r0; r < r0 + R; ++r) {
    const float* xr = c.x + r * c.K;
    float* orow = c.o + r * c.N + n0;
    for (int64_t kb = 0; kb < c.KB; ++kb) {
      std::fill(dot, dot + nb, 0.f);
      for (int64_t k = kb * c.g; k < (kb + 1) * c.g; ++k) {
        const uint8_t* row = wb + k * nb / 2;
        for (int64_t j = 0; j < nb / 2; ++j) {
          q[col_of(split, nb, j, 0)] = static_cast<float>(row[j] & 15);
          q[col_of(split, nb, j, 1)] = static_cast<float>(row[j] >> 4);
        }
        const float xv = xr[k];
        for (int64_t n = 0; n < nb; ++n) dot[n] += xv * q[n];
      }
      const float s8 = c.xs[r * c.KB + kb];
      for (int64_t n = 0; n < nb; ++n)
        orow[n] += sz_at(c, kb, n0 + n, 0) * (dot[n] - 8.f * s8) + sz_at(c, kb, n0 + n, 1) * s8;
    }
  }
}

// Row r of block b from the dequantized weights, x_k * ((q - 8) * scale + zero) term by term as
// torch's kernel sums it (overwriting the row's columns): for a row of x holding inf or nan, where
// the grouped sums above would make nan of inf * 0 (x_k * (q - 8) at q = 8) or of inf - inf.
void block_exact_row(const Call& c, Layout l, int64_t b, int64_t r) {
  const int64_t B = block_n(l), n0 = b * B, nb = std::min(B, c.N - n0);
  const bool split = nb == B && l != Layout::Pairs;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  const float* xr = c.x + r * c.K;
  float acc[64] = {};
  for (int64_t k = 0; k < c.K; ++k) {
    const uint8_t* row = wb + k * nb / 2;
    for (int64_t j = 0; j < nb / 2; ++j)
      for (int hi = 0; hi < 2; ++hi) {
        const int64_t n = col_of(split, nb, j, hi);
        const float q = static_cast<float>(hi ? row[j] >> 4 : row[j] & 15);
        acc[n] += xr[k] * ((q - 8.f) * sz_at(c, k / c.g, n0 + n, 0) + sz_at(c, k / c.g, n0 + n, 1));
      }
  }
  std::copy(acc, acc + nb, c.o + r * c.N + n0);
}

// ---- AVX2 (the build's baseline: x86-64-v3) ------------------------------------------------

// 8 (scale, zero) pairs at element i, deinterleaved.
inline void load_sz8(const Call& c, int64_t i, __m256& s, __m256& z) {
  __m256 a, b;
  if (c.t == DType::f32) {
    const float* p = static_cast<const float*>(c.sz) + i;
    a = _mm256_loadu_ps(p);
    b = _mm256_loadu_ps(p + 8);
  } else {
    const __m128i* p = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(c.sz) + i);
    const __m128i h0 = _mm_loadu_si128(p), h1 = _mm_loadu_si128(p + 1);
    if (c.t == DType::bf16) {
      a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
      b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
    } else {
      a = _mm256_cvtph_ps(h0);
      b = _mm256_cvtph_ps(h1);
    }
  }
  // a = s0 z0 s1 z1 | s2 z2 s3 z3, b = s4 z4 s5 z5 | s6 z6 s7 z7
  const __m256 sv = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // s0 s1 s4 s5 | s2 s3 s6 s7
  const __m256 zv = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(sv), _MM_SHUFFLE(3, 1, 2, 0)));
  z = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(zv), _MM_SHUFFLE(3, 1, 2, 0)));
}

// out[col .. col + 8] += s * (dot - 8 * xs) + z * xs
inline void fold8(const Call& c, int64_t kb, int64_t col, __m256 dot, float xsum, float* o) {
  __m256 s, z;
  load_sz8(c, (kb * c.N + col) * 2, s, z);
  const __m256 xs = _mm256_set1_ps(xsum);
  const __m256 d = _mm256_fnmadd_ps(_mm256_set1_ps(8.f), xs, dot);
  __m256 acc = _mm256_fmadd_ps(s, d, _mm256_loadu_ps(o + col));
  _mm256_storeu_ps(o + col, _mm256_fmadd_ps(z, xs, acc));
}

// A full block in a split layout (B = 64 or 32), rows [r0, r0 + R), R <= 2: 16 bytes of each
// k row at a time (a tile: low nibbles columns t*16 .. +16, high ones the same + B/2). U sets of
// accumulators take alternate k (one FMA chain per set: with fewer than about 8 chains the loop
// is bound by FMA latency, not by the weight reads).
template <int R, int U>
void block_split_avx2(const Call& c, int64_t B, int64_t b, int64_t r0) {
  const int64_t n0 = b * B, rowb = B / 2;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  const __m256i m15 = _mm256_set1_epi32(15);
  for (int64_t kb = 0; kb < c.KB; ++kb) {
    for (int64_t t = 0; t < B / 32; ++t) {
      __m256 acc[U][R][4];
      for (int u = 0; u < U; ++u)
        for (int r = 0; r < R; ++r)
          for (int i = 0; i < 4; ++i) acc[u][r][i] = _mm256_setzero_ps();
      const uint8_t* p = wb + kb * c.g * rowb + t * 16;
      const float* xk = c.x + r0 * c.K + kb * c.g;
      for (int64_t k = 0; k < c.g; k += U) {  // (g is a multiple of 32)
        if (((k * rowb) & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(p + k * rowb + 2048), _MM_HINT_T0);
        for (int u = 0; u < U; ++u) {
          const uint8_t* q = p + (k + u) * rowb;
          const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
          const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8)));
          const __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, m15));
          const __m256 w1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, m15));
          const __m256 w2 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
          const __m256 w3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
          for (int r = 0; r < R; ++r) {
            const __m256 xb = _mm256_broadcast_ss(xk + r * c.K + k + u);
            acc[u][r][0] = _mm256_fmadd_ps(xb, w0, acc[u][r][0]);
            acc[u][r][1] = _mm256_fmadd_ps(xb, w1, acc[u][r][1]);
            acc[u][r][2] = _mm256_fmadd_ps(xb, w2, acc[u][r][2]);
            acc[u][r][3] = _mm256_fmadd_ps(xb, w3, acc[u][r][3]);
          }
        }
      }
      for (int u = 1; u < U; ++u)
        for (int r = 0; r < R; ++r)
          for (int i = 0; i < 4; ++i) acc[0][r][i] = _mm256_add_ps(acc[0][r][i], acc[u][r][i]);
      const int64_t lo = n0 + t * 16, hi = lo + B / 2;
      for (int r = 0; r < R; ++r) {
        float* orow = c.o + (r0 + r) * c.N;
        const float xsum = c.xs[(r0 + r) * c.KB + kb];
        fold8(c, kb, lo, acc[0][r][0], xsum, orow);
        fold8(c, kb, lo + 8, acc[0][r][1], xsum, orow);
        fold8(c, kb, hi, acc[0][r][2], xsum, orow);
        fold8(c, kb, hi + 8, acc[0][r][3], xsum, orow);
      }
    }
  }
}

// ---- AVX-512 (picked when this CPU has it) --------------------------------------------------

AG_AVX512 inline void load_sz16(const Call& c, int64_t i, __m512& s, __m512& z) {
  __m512 a, b;
  if (c.t == DType::f32) {
    const float* p = static_cast<const float*>(c.sz) + i;
    a = _mm512_loadu_ps(p);
    b = _mm512_loadu_ps(p + 16);
  } else {
    const __m256i* p = reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(c.sz) + i);
    const __m256i h0 = _mm256_loadu_si256(p), h1 = _mm256_loadu_si256(p + 1);
    if (c.t == DType::bf16) {
      a = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
      b = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
    } else {
      a = _mm512_cvtph_ps(h0);
      b = _mm512_cvtph_ps(h1);
    }
  }
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  s = _mm512_permutex2var_ps(a, even, b);
  z = _mm512_permutex2var_ps(a, odd, b);
}

// out[col .. col + 16] += s * dot + z * xs (dot: sum of x * (q - 8))
AG_AVX512 inline void fold16(const Call& c, int64_t kb, int64_t col, __m512 dot, float xsum, float* o) {
  __m512 s, z;
  load_sz16(c, (kb * c.N + col) * 2, s, z);
  const __m512 xs = _mm512_set1_ps(xsum);
  __m512 acc = _mm512_fmadd_ps(s, dot, _mm512_loadu_ps(o + col));
  _mm512_storeu_ps(o + col, _mm512_fmadd_ps(z, xs, acc));
}

// As block_split_avx2, R <= 4, all T = B / 32 tiles of the block at once: a tile's 16 bytes
// widen to 16 lanes, low and high nibbles, each looked up as q - 8 (one permute: vpermps reads
// the low 4 bits of each lane); U accumulator sets on alternate k.
template <int R, int T, int U>
AG_AVX512 void block_split_avx512(const Call& c, int64_t b, int64_t r0) {
  constexpr int64_t B = 32 * T, rowb = B / 2;
  const int64_t n0 = b * B;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  const __m512 lut = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
  for (int64_t kb = 0; kb < c.KB; ++kb) {
    __m512 acc[U][R][2 * T];
    for (int u = 0; u < U; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 2 * T; ++i) acc[u][r][i] = _mm512_setzero_ps();
    const uint8_t* p = wb + kb * c.g * rowb;
    const float* xk = c.x + r0 * c.K + kb * c.g;
    for (int64_t k = 0; k < c.g; k += U) {
      // the bytes 2 KiB ahead (the next group's, at the end of this one): the loop is too busy
      // widening nibbles for the hardware prefetcher alone to keep the memory bus full
      if ((k * rowb) % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(p + k * rowb + 2048), _MM_HINT_T0);
      for (int u = 0; u < U; ++u) {
        __m512 w[2 * T];
        for (int t = 0; t < T; ++t) {
          const __m512i v =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (k + u) * rowb + t * 16)));
          w[2 * t] = _mm512_permutexvar_ps(v, lut);
          w[2 * t + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
        }
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(xk[r * c.K + k + u]);
          for (int i = 0; i < 2 * T; ++i) acc[u][r][i] = _mm512_fmadd_ps(xb, w[i], acc[u][r][i]);
        }
      }
    }
    for (int u = 1; u < U; ++u)
      for (int r = 0; r < R; ++r)
        for (int i = 0; i < 2 * T; ++i) acc[0][r][i] = _mm512_add_ps(acc[0][r][i], acc[u][r][i]);
    for (int r = 0; r < R; ++r) {
      float* orow = c.o + (r0 + r) * c.N;
      const float xsum = c.xs[(r0 + r) * c.KB + kb];
      for (int t = 0; t < T; ++t) {
        fold16(c, kb, n0 + t * 16, acc[0][r][2 * t], xsum, orow);
        fold16(c, kb, n0 + t * 16 + B / 2, acc[0][r][2 * t + 1], xsum, orow);
      }
    }
  }
}

// Rows [r0, r1) of a split block on AVX-512, 4 rows at a time: at least 8 FMA chains a call.
template <int T>
void rows_avx512(const Call& c, int64_t b, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) block_split_avx512<4, T, 1>(c, b, r);
  switch (r1 - r) {
    case 3: block_split_avx512<3, T, 2 / T>(c, b, r); break;
    case 2: block_split_avx512<2, T, 2>(c, b, r); break;
    case 1: block_split_avx512<1, T, 4 / T>(c, b, r); break;
    default: break;
  }
}

// ---- AVX-512 VNNI (int8 products; with int8_activations on CPUs with VNNI and VBMI) -----------

#define AG_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi")))

// The (scale, zero) pairs of group kb for 64 columns from n0, fetched ahead: each group's pairs
// lie a row of [KB, N, 2] apart (N * 4 or 8 bytes), a stride no hardware prefetcher follows, and
// waiting for them at every group's fold costs more than the fold.
inline void prefetch_sz(const Call& c, int64_t kb, int64_t n0) {
  if (n0 >= c.N) return;
  const size_t es = c.t == DType::f32 ? 4 : 2;
  const char* a = static_cast<const char*>(c.sz) + (kb * c.N + n0) * 2 * es;
  const size_t bytes = std::min<int64_t>(64, c.N - n0) * 2 * es;
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(a + o, _MM_HINT_T0);
}

// A full block of the "avx512" layout (B = 64), rows [r0, r0 + R), x quantized per row (c.xq,
// c.xscale; c.xqs: each group's sum of the int8 values). Four k rows (128 bytes) at a time: two
// byte permutes (vpermt2b) regroup them so that each 32-bit lane holds one column's bytes of rows
// k .. k + 3, the nibbles are masked out (q in [0, 15] as the unsigned operand), and vpdpbusd sums
// them against four int8 values of x, exactly in int32; per group, dot = xscale * (sum - 8 * xqs),
// folded as in block_split_avx512 (with c.xs the sums of the quantized x, so that every term is
// the product with x as quantized).
template <int R>
AG_VNNI void block_vnni(const Call& c, int64_t b, int64_t r0) {
  const int64_t n0 = b * 64;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  // lane i of the first permute: bytes i of rows k, k + 1, k + 2, k + 3 (columns i and 32 + i);
  // of the second: bytes 16 + i (columns 16 + i and 48 + i)
  alignas(64) int8_t ix[2][64];
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 4; ++j) ix[h][4 * i + j] = static_cast<int8_t>(16 * h + i + 32 * j);
  const __m512i idx0 = _mm512_load_si512(ix[0]), idx1 = _mm512_load_si512(ix[1]);
  const __m512i m15 = _mm512_set1_epi8(15);
  for (int64_t kb = 0; kb < c.KB; ++kb) {
    __m512i acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_si512();
    const uint8_t* p = wb + kb * c.g * 32;
    const int8_t* xk = c.xq + r0 * c.K + kb * c.g;
    prefetch_sz(c, kb + 1 < c.KB ? kb + 1 : 0, kb + 1 < c.KB ? n0 : n0 + 64);
    for (int64_t k = 0; k < c.g; k += 4) {
      _mm_prefetch(reinterpret_cast<const char*>(p + k * 32 + 2048), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + k * 32 + 2112), _MM_HINT_T0);
      const __m512i a = _mm512_loadu_si512(p + k * 32), bb = _mm512_loadu_si512(p + k * 32 + 64);
      const __m512i t0 = _mm512_permutex2var_epi8(a, idx0, bb), t1 = _mm512_permutex2var_epi8(a, idx1, bb);
      const __m512i w[4] = {_mm512_and_si512(t0, m15), _mm512_and_si512(t1, m15),
                            _mm512_and_si512(_mm512_srli_epi16(t0, 4), m15),
                            _mm512_and_si512(_mm512_srli_epi16(t1, 4), m15)};
      for (int r = 0; r < R; ++r) {
        int32_t x4;
        std::memcpy(&x4, xk + r * c.K + k, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_dpbusd_epi32(acc[r][i], w[i], xb);
      }
    }
    for (int r = 0; r < R; ++r) {
      float* orow = c.o + (r0 + r) * c.N;
      const int64_t ri = (r0 + r) * c.KB + kb;
      const __m512i corr = _mm512_set1_epi32(8 * c.xqs[ri]);
      const __m512 sc = _mm512_set1_ps(c.xscale[r0 + r]);
      for (int i = 0; i < 4; ++i)  // (accumulators: columns 0-15, 16-31, 32-47, 48-63)
        fold16(c, kb, n0 + 16 * i, _mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][i], corr))),
               c.xs[ri], orow);
    }
  }
}

void rows_vnni(const Call& c, int64_t b, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) block_vnni<4>(c, b, r);
  switch (r1 - r) {
    case 3: block_vnni<3>(c, b, r); break;
    case 2: block_vnni<2>(c, b, r); break;
    case 1: block_vnni<1>(c, b, r); break;
    default: break;
  }
}

// Rows [r0, r1) of block b, on the best code for the block's format.
void run_block(const Call& c, Layout l, Isa isa, int64_t b, int64_t r0, int64_t r1) {
  const int64_t B = block_n(l);
  const bool split = l != Layout::Pairs && (b + 1) * B <= c.N;
  if (c.xqs && split && B == 64) {  // (Call::xqs: the VNNI GEMV's, the "avx512" layout only)
    rows_vnni(c, b, r0, r1);
    return;
  }
  if (!split || isa == Isa::Scalar) {
    block_scalar(c, l, b, r0, r1 - r0);
    return;
  }
  if (isa == Isa::Avx512) {
    if (B == 64) rows_avx512<2>(c, b, r0, r1);
    else rows_avx512<1>(c, b, r0, r1);
    return;
  }
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) block_split_avx2<2, 1>(c, B, b, r);
  if (r < r1) block_split_avx2<1, 2>(c, B, b, r);
}

// Dequantizes block b into panel columns [pc, pc + nb) of a [K, ld] f32 panel (prefill).
void dequant_block(const Call& c, Layout l, int64_t b, float* panel, int64_t ld, int64_t pc) {
  const int64_t B = block_n(l), n0 = b * B, nb = std::min(B, c.N - n0);
  const bool split = nb == B && l != Layout::Pairs;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  float s[64], z[64];
  for (int64_t kb = 0; kb < c.KB; ++kb) {
    for (int64_t n = 0; n < nb; ++n) {
      s[n] = sz_at(c, kb, n0 + n, 0);
      z[n] = sz_at(c, kb, n0 + n, 1) - 8.f * s[n];
    }
    for (int64_t k = kb * c.g; k < (kb + 1) * c.g; ++k) {
      const uint8_t* row = wb + k * nb / 2;
      float* dst = panel + k * ld + pc;
      if (split) {
        const int64_t h = nb / 2;
        for (int64_t j = 0; j < h; ++j) dst[j] = static_cast<float>(row[j] & 15) * s[j] + z[j];
        for (int64_t j = 0; j < h; ++j) dst[h + j] = static_cast<float>(row[j] >> 4) * s[h + j] + z[h + j];
      } else {
        for (int64_t j = 0; j < nb / 2; ++j) {
          dst[2 * j] = static_cast<float>(row[j] & 15) * s[2 * j] + z[2 * j];
          dst[2 * j + 1] = static_cast<float>(row[j] >> 4) * s[2 * j + 1] + z[2 * j + 1];
        }
      }
    }
  }
}

// Block `b` of the packed weight straight to int8 in a [K, ld] panel at column pc: value
// ((q - 8) * scale + zero) * inv[column] rounded half to even (inv: 127 / the column's bound,
// 0 for a column without one). Columns n0 .. n0 + nb of the panel's `inv`, from pc.
void requant_block(const Call& c, Layout l, int64_t b, int8_t* panel, int64_t ld, int64_t pc, const float* inv) {
  const int64_t B = block_n(l), n0 = b * B, nb = std::min(B, c.N - n0);
  const bool split = nb == B && l != Layout::Pairs;
  const uint8_t* wb = c.w + n0 * c.K / 2;
  alignas(32) float s[64], z[64];
  const __m256i lo4 = _mm256_set1_epi32(15);
  for (int64_t kb = 0; kb < c.KB; ++kb) {
    for (int64_t n = 0; n < nb; ++n) {  // (scale and zero times the column's 127 / bound)
      const float sc = sz_at(c, kb, n0 + n, 0), iv = inv[pc + n];
      s[n] = sc * iv;
      z[n] = (sz_at(c, kb, n0 + n, 1) - 8.f * sc) * iv;
      if (iv == 0.f) s[n] = z[n] = 0.f;
    }
    for (int64_t k = kb * c.g; k < (kb + 1) * c.g; ++k) {
      const uint8_t* row = wb + k * nb / 2;
      int8_t* dst = panel + k * ld + pc;
      if (split) {  // low nibbles: columns j, high: j + nb / 2, eight at a time
        const int64_t h = nb / 2;
        for (int64_t j = 0; j < h; j += 8) {
          const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + j)));
          for (int hi = 0; hi < 2; ++hi) {
            const __m256i q = hi ? _mm256_srli_epi32(bytes, 4) : _mm256_and_si256(bytes, lo4);
            const int64_t o = j + hi * h;
            const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_load_ps(s + o), _mm256_load_ps(z + o));
            const __m256i i32 = _mm256_cvtps_epi32(v);
            const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
            _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + o), _mm_packs_epi16(i16, i16));
          }
        }
      } else {
        for (int64_t j = 0; j < nb / 2; ++j) {
          dst[2 * j] = static_cast<int8_t>(std::nearbyint(static_cast<float>(row[j] & 15) * s[2 * j] + z[2 * j]));
          dst[2 * j + 1] = static_cast<int8_t>(std::nearbyint(static_cast<float>(row[j] >> 4) * s[2 * j + 1] + z[2 * j + 1]));
        }
      }
    }
  }
}

// The bound of the columns n0 .. n0 + cols of the weight: the largest |(q - 8) * scale + zero| any
// q in [0, 15] gives over the column's groups (into bound[0 .. cols)); NaN where a scale or zero
// is inf or nan.
void column_bounds(const Call& c, int64_t n0, int64_t cols, float* bound) {
  for (int64_t j = 0; j < cols; ++j) bound[j] = 0.f;
  for (int64_t kb = 0; kb < c.KB; ++kb)
    for (int64_t j = 0; j < cols; ++j) {
      const float sc = sz_at(c, kb, n0 + j, 0), z = sz_at(c, kb, n0 + j, 1) - 8.f * sc;
      const float m = std::fmax(std::fabs(z), std::fabs(15.f * sc + z));
      bound[j] = std::isfinite(m) && !std::isnan(bound[j]) ? std::fmax(bound[j], m) : std::nanf("");
    }
}

bool cpu_has_vnni_vbmi() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
}

const char* isa_name(Isa i) { return i == Isa::Avx512 ? "avx512" : i == Isa::Avx2 ? "avx2" : "scalar"; }

class LinearInt4Kernel final : public Kernel {
 public:
  // Rows up to this run the register kernel; more rows dequantize panels for oneDNN's matmul.
  static constexpr int64_t kDirectRows = 8;

  LinearInt4Kernel(const Node& n, const BuildCtx& ctx) {
    const TensorType& x = n.inputs[0]->type;
    t_ = x.dtype;
    K_ = x.size(x.rank() - 1);
    N_ = n.inputs[1]->type.size(0);
    M_ = K_ ? x.numel() / K_ : 0;
    if (K_ == 0) {
      M_ = 1;
      for (int64_t i = 0; i + 1 < static_cast<int64_t>(x.rank()); ++i) M_ *= x.size(i);
    }
    g_ = n.attrs.i("group_size");
    parse_layout(n.attrs.s("layout"), &layout_);
    const std::string isa = n.attrs.s("isa", "auto");
    const bool has512 = isa::cpu_has_avx512();
    isa_ = isa == "scalar" ? Isa::Scalar : (isa == "avx2" || !has512) ? Isa::Avx2 : Isa::Avx512;
    const int64_t KB = g_ ? K_ / g_ : 0;
    if (t_ != DType::f32) {
      xf_ = scratch_.add(M_ * K_ * 4);
      of_ = scratch_.add(M_ * N_ * 4);
    }
    nblocks_ = (N_ + block_n(layout_) - 1) / block_n(layout_);
    if (M_ > kDirectRows && K_ > 0) {
      build_panels(ctx.int8_activations);
      name_ = std::string(int8_ ? "int4_requant_panels_onednn_s8s8_" : "int4_dequant_panels_onednn_") +
              dtype_name(t_) + " (layout " + n.attrs.s("layout") + ", " + std::to_string(panel_n_) +
              " columns a panel" + (int8_ ? ", activations quantized per row)" : ")");
    } else {
      xs_ = scratch_.add(M_ * KB * 4);
      // int8 products where the CPU has them (the "avx512" layout's full blocks; `isa` forces the
      // f32 code: tests)
      vnni_ = ctx.int8_activations && isa == "auto" && has512 && cpu_has_vnni_vbmi() && layout_ == Layout::Avx512;
      if (vnni_) {
        q_ = scratch_.add(M_ * K_);
        rs_ = scratch_.add(M_ * 4);
        xqs_ = scratch_.add(M_ * KB * 4);
        xd_ = scratch_.add(M_ * K_ * 4);
      }
      name_ = std::string("int4_gemv_") + (vnni_ ? "vnni" : isa_name(isa_)) + "_" + dtype_name(t_) + " (layout " +
              n.attrs.s("layout") + (vnni_ ? ", activations quantized per row)" : ")");
    }
  }

  std::string name() const override { return name_; }
  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (!panels_) return nullptr;
    auto st = std::make_unique<State>();
    for (int i = 0; i < slots_; ++i) {
      st->full.push_back(full_.make_args());
      if (tail_n_) st->tail.push_back(tail_.make_args());
    }
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    const int64_t MN = M_ * N_;
    float* o = t_ == DType::f32 ? static_cast<float*>(out[0]) : ScratchLayout::at<float>(ctx, of_);
    if (MN == 0) return;
    if (K_ == 0) {
      std::memset(o, 0, MN * 4);
      finish(o, out[0]);
      return;
    }
    const float* x = static_cast<const float*>(in[0]);
    if (t_ != DType::f32) {
      float* xf = ScratchLayout::at<float>(ctx, xf_);
      to_f32(t_, in[0], xf, M_ * K_);
      x = xf;
    }
    Call c{M_, K_, N_, g_, K_ / g_, static_cast<const uint8_t*>(in[1]), in[2], t_, x, nullptr, o};
    if (int8_) {
      int8_t* q = ScratchLayout::at<int8_t>(ctx, q_);
      float* rs = ScratchLayout::at<float>(ctx, rs_);
      int8_rows::quantize_rows(x, M_, K_, q, rs);
      c.xq = q, c.xscale = rs;
      c.xbad = std::any_of(rs, rs + M_, [](float v) { return std::isnan(v); });
    }
    if (vnni_) quantize_x(c, ctx);
    if (panels_) run_panels(c, ctx);
    else run_direct(c, ctx);
    finish(o, out[0]);
  }

 private:
  struct State : KernelState {
    std::vector<Args> full, tail;  // one a thread slot
  };

  void finish(const float* o, void* out) const {
    if (t_ != DType::f32) from_f32(t_, o, out, M_ * N_);
  }

  // The VNNI GEMV's x: each row quantized (int8_rows.h), the groups' integer sums, and the rows as
  // quantized in f32 (what the partial last block and the folds read, so that every column is the
  // product with x as quantized). A row holding inf or nan leaves c as it is: the f32 code, exact.
  void quantize_x(Call& c, const RunCtx& ctx) const {
    int8_t* q = ScratchLayout::at<int8_t>(ctx, q_);
    float* rs = ScratchLayout::at<float>(ctx, rs_);
    for (int64_t r = 0; r < M_; ++r)
      if (std::isnan(rs[r] = int8_rows::quantize(c.x + r * K_, K_, q + r * K_))) return;
    int32_t* xqs = ScratchLayout::at<int32_t>(ctx, xqs_);
    float* xd = ScratchLayout::at<float>(ctx, xd_);
    for (int64_t r = 0; r < M_; ++r)
      for (int64_t kb = 0; kb < c.KB; ++kb) {
        int32_t t = 0;
        for (int64_t k = kb * g_; k < (kb + 1) * g_; ++k) {
          t += q[r * K_ + k];
          xd[r * K_ + k] = static_cast<float>(q[r * K_ + k]) * rs[r];
        }
        xqs[r * c.KB + kb] = t;
      }
    c.x = xd, c.xq = q, c.xscale = rs, c.xqs = xqs;
  }

  void run_direct(Call& c, const RunCtx& ctx) const {
    float* xs = ScratchLayout::at<float>(ctx, xs_);
    for (int64_t r = 0; r < M_; ++r)
      for (int64_t kb = 0; kb < c.KB; ++kb) {
        const float* p = c.x + r * K_ + kb * g_;
        float s = 0;
        for (int64_t k = 0; k < g_; ++k) s += p[k];
        xs[r * c.KB + kb] = s;
      }
    c.xs = xs;
    // rows holding inf or nan (a group's sum is not finite): summed term by term, block_exact_row
    int64_t bad[kDirectRows], nbad = 0;
    for (int64_t r = 0; r < M_; ++r)
      if (!std::all_of(xs + r * c.KB, xs + (r + 1) * c.KB, [](float v) { return std::isfinite(v); })) bad[nbad++] = r;
    // blocks of columns over the threads; a block's output columns are zeroed by its thread
    parallel_for(nblocks_, 1, [&](int64_t b0, int64_t b1) {
      const int64_t B = block_n(layout_);
      const int64_t n0 = b0 * B, n1 = std::min(N_, b1 * B);
      for (int64_t r = 0; r < M_; ++r) std::memset(c.o + r * N_ + n0, 0, (n1 - n0) * 4);
      for (int64_t b = b0; b < b1; ++b) {
        run_block(c, layout_, isa_, b, 0, M_);
        for (int64_t i = 0; i < nbad; ++i) block_exact_row(c, layout_, b, bad[i]);
      }
    });
  }

  // ---- prefill: panels of panel_n_ columns dequantized (all threads), then oneDNN f32 matmul
  void build_panels(bool int8) {
    const int64_t B = block_n(layout_);
    slots_ = std::max(1, num_threads());
    // panels of at most about 1 MiB of f32 weights and about four a thread (balance), whole blocks
    const int64_t by_size = (int64_t{1} << 18) / std::max<int64_t>(K_, 1) / B * B;
    const int64_t by_count = (N_ / (4 * slots_) + B - 1) / B * B;
    panel_n_ = std::min(std::max<int64_t>(B, std::min(by_size, by_count)), N_);
    tail_n_ = N_ % panel_n_;
    panels_ = true;
    panel_bytes_ = static_cast<size_t>(K_ * panel_n_ * 4 + 63) / 64 * 64;
    if (int8) {
      // After the f32 panel in a slot's buffer: the int8 panel, its column scales, and the integer
      // sums [M, cols] (oneDNN's brgemm matmul writes a contiguous result only: with a row stride
      // of N it falls back to its generic int8 GEMM).
      const std::string impl = init_panel_matmul_s8(full_, M_, K_, panel_n_, panel_n_, /*k_inner=*/false);
      int8_ = !impl.empty() && (!tail_n_ || !init_panel_matmul_s8(tail_, M_, K_, tail_n_, tail_n_, false).empty());
      if (int8_) {
        panel_bytes_ += static_cast<size_t>(K_ * panel_n_ + panel_n_ * 8 + M_ * panel_n_ * 4 + 63) / 64 * 64;
        q_ = scratch_.add(M_ * K_);
        rs_ = scratch_.add(M_ * 4);
      } else {
        full_ = Exec{}, tail_ = Exec{};
      }
    }
    size_t pad = int8_ ? full_.scratch_bytes : make_exec(full_, panel_n_);
    if (tail_n_) pad = std::max(pad, int8_ ? tail_.scratch_bytes : make_exec(tail_, tail_n_));
    pad_bytes_ = (pad + 63) / 64 * 64;
    panel_ = scratch_.add(panel_bytes_ * slots_);
    if (pad) pad_ = scratch_.add(pad_bytes_ * slots_);
  }

  size_t make_exec(Exec& e, int64_t cols) const {  // (a panel is [K, cols] row-major)
    init_panel_matmul(e, M_, K_, cols, N_, /*k_inner=*/false, /*bias=*/false);
    return e.scratch_bytes;
  }


  // Panel p: its blocks dequantized into slot `slot`'s buffer, then x @ panel into its columns
  // of o (oneDNN runs it on the calling thread: inside a parallel region it does not fork).
  void run_panel(const Call& c, State* st, char* panels, char* pads, int slot, int64_t p) const {
    const int64_t B = block_n(layout_), p0 = p * panel_n_, cols = std::min(panel_n_, N_ - p0);
    float* panel = reinterpret_cast<float*>(panels + slot * panel_bytes_);
    const bool tail = cols != panel_n_;
    Args& a = (tail ? st->tail : st->full)[slot];
    int8_t* q8 = reinterpret_cast<int8_t*>(panel + K_ * panel_n_);
    float* cs = reinterpret_cast<float*>(q8 + K_ * panel_n_);
    float* sums = cs + 2 * panel_n_;
    const bool bad_cols = int8_ && requant_panel(c, p0, cols, q8, cs, cs + panel_n_);
    if (!int8_ || bad_cols || c.xbad)  // (int8: the f32 panel only where a row or column is summed exactly)
      for (int64_t i = 0; i * B < cols; ++i) dequant_block(c, layout_, p0 / B + i, panel, cols, i * B);
    a.set(DNNL_ARG_SRC, int8_ ? static_cast<void*>(const_cast<int8_t*>(c.xq)) : const_cast<float*>(c.x));
    a.set(DNNL_ARG_WEIGHTS, int8_ ? static_cast<void*>(q8) : panel);
    a.set(DNNL_ARG_DST, int8_ ? sums : c.o + p0);
    (tail ? tail_ : full_).run(a, pads ? pads + slot * pad_bytes_ : nullptr);
    if (int8_) scale_panel(c, panel, cols, cs, bad_cols, sums, c.o + p0);
  }

  // Columns p0 .. p0 + cols of the weight to int8 in the panel q8 ([K, cols]), each at the scale
  // bound / 127 (cs; column_bounds), straight from the nibbles. A column whose scale or zero is inf or
  // nan gets NaN in cs and 0s in q8 (summed exactly by scale_panel). inv: [cols] of scratch.
  // Returns whether there is such a column.
  bool requant_panel(const Call& c, int64_t p0, int64_t cols, int8_t* q8, float* cs, float* inv) const {
    column_bounds(c, p0, cols, cs);
    bool any_bad = false;
    for (int64_t j = 0; j < cols; ++j) {
      const bool bad = std::isnan(cs[j]);
      any_bad |= bad;
      inv[j] = !bad && cs[j] > 0.f ? 127.f / cs[j] : 0.f;
      cs[j] /= 127.f;
    }
    const int64_t B = block_n(layout_);
    for (int64_t i = 0; i * B < cols; ++i) requant_block(c, layout_, p0 / B + i, q8, cols, i * B, inv);
    return any_bad;
  }

  // The panel's columns of o: the integer sums ([M, cols]) times the row's and the column's scale;
  // a row or column without a scale (inf or nan in it) summed exactly over the f32 panel.
  void scale_panel(const Call& c, const float* panel, int64_t cols, const float* cs, bool bad_cols,
                   const float* sums, float* o) const {
    const float* rs = c.xscale;
    for (int64_t m = 0; m < M_; ++m) {
      float* r = o + m * N_;
      const float* s = sums + m * cols;
      const bool bad_row = std::isnan(rs[m]);
      if (!bad_row && !bad_cols) {
        const __m256 sr = _mm256_set1_ps(rs[m]);
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8)
          _mm256_storeu_ps(r + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), _mm256_mul_ps(sr, _mm256_loadu_ps(cs + j))));
        for (; j < cols; ++j) r[j] = s[j] * (rs[m] * cs[j]);
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) {
        if (!bad_row && !std::isnan(cs[j])) {
          r[j] = s[j] * (rs[m] * cs[j]);
          continue;
        }
        float t = 0.f;
        for (int64_t k = 0; k < K_; ++k) t += c.x[m * K_ + k] * panel[k * cols + j];
        r[j] = t;
      }
    }
  }

  void run_panels(const Call& c, const RunCtx& ctx) const {
    State* st = static_cast<State*>(ctx.state);
    char* panels = ScratchLayout::at<char>(ctx, panel_);
    char* pads = ScratchLayout::at<char>(ctx, pad_);
    const int64_t P = (N_ + panel_n_ - 1) / panel_n_;
    const int nt = static_cast<int>(std::min<int64_t>({num_threads(), slots_, P}));
    if (nt <= 1 || omp_in_parallel()) {
      for (int64_t p = 0; p < P; ++p) run_panel(c, st, panels, pads, 0, p);
      return;
    }
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num();
      for (int64_t p = t; p < P; p += nt) run_panel(c, st, panels, pads, t, p);
    }
  }

  DType t_ = DType::f32;
  int64_t M_ = 0, K_ = 0, N_ = 0, g_ = 0, nblocks_ = 0;
  Layout layout_ = Layout::Avx512;
  Isa isa_ = Isa::Avx2;
  ScratchLayout scratch_;
  static constexpr size_t kNone = ScratchLayout::kNone;
  size_t q_ = kNone, rs_ = kNone;  // the int8 path's x, quantized, and its rows' scales
  size_t xqs_ = kNone, xd_ = kNone;  // the VNNI GEMV's group sums of q_ and x as quantized
  bool int8_ = false, vnni_ = false;
  size_t xf_ = kNone, of_ = kNone, xs_ = kNone, panel_ = kNone, pad_ = kNone, panel_bytes_ = 0, pad_bytes_ = 0;
  int slots_ = 1;  // threads the panel path may use (its scratch holds a panel for each)
  bool panels_ = false;
  int64_t panel_n_ = 0, tail_n_ = 0;
  Exec full_, tail_;
  std::string name_;
};

std::unique_ptr<Kernel> make_linear_int4(const Node& n, const BuildCtx& ctx) {
  return std::make_unique<LinearInt4Kernel>(n, ctx);
}

}  // namespace

AG_REGISTER_OP(linear_int4, {.name = "linear_int4", .min_inputs = 3, .max_inputs = 3, .infer = infer_linear_int4,
                             .make_kernel = make_linear_int4, .props = kCostlyKernel});

}  // namespace ag
