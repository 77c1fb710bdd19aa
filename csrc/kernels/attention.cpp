// "sdpa"(q, k, v[, mask]){scale, is_causal, has_mask}: scaled dot-product
// attention, softmax(q k^T * scale + mask) v, for q [B, H, L, E],
// k [B, Hk, S, E], v [B, Hk, S, Ev] with H % Hk == 0 (query head h reads key
// head h / (H / Hk), like enable_gqa). mask: bool (True = keep) or an additive
// float mask, broadcastable to [B, H, L, S]. is_causal keeps keys j <= i
// (top-left aligned, as torch). Rows where every key is masked give 0, like
// PyTorch's CPU attention kernels.
//
// Computed as two batched GEMMs on oneDNN's matmul with a softmax pass between
// them, in f32 (16-bit inputs are widened once per call, the output rounded
// once). Query heads that share a key head are stacked into one GEMM: q viewed
// as [B*Hk, G*L, E] (G = H/Hk) against k^T [B*Hk, E, S] gives the scores
// [B*Hk, G*L, S]; the softmax pass applies scale, mask and causality row by row
// (parallel, vectorized exp); probabilities @ v [B*Hk, S, Ev] is exactly the
// output [B, H, L, Ev]. The score buffer lives in the run's scratch (the
// executor's); (b, key head) pairs are processed in chunks that keep
// it under kScoreBudget floats. A head whose own scores would exceed the budget
// (very long sequences) runs the tiles (below). A decode step (at most kFewRows
// query rows per key head: G * L small), and a long head of fewer than 16 query
// rows, run a row kernel instead: per query row, dot products,
// the exponentials against the row's max and the weighted sum of value rows,
// divided by the exponentials' sum at the end. For a decode step it is as fast
// as the GEMMs and builds no oneDNN primitive, so a new KV length costs nothing.
// When the query rows are too few to keep the threads busy (fewer than 2 per
// thread) and the keys are many, the row kernel splits each row's key range
// (split-KV, "flash-decoding"; sdpa_kv_splits decides per call from the rows,
// the thread count and S): each (row, range) item leaves its max, its sum of
// exponentials and its unnormalized weighted sum in the run's scratch, and a
// combine pass rescales them to the row's overall max (log-sum-exp) and divides.
//
// A mask that drops keys at either end of the rows (a static KV cache filled up
// to the current position, left padding) shortens the keys read: the row kernel
// reads a row's keys from its first kept to its last, the GEMM path a chunk's
// union of those ranges (kept_keys; sdpa_keys_skipped counts the keys not read).
//
// Tiles (longer sequences: from 16 query rows a head, on heads of kTileHeadScores scores once a
// call's pass kTileFromScores, or a head's the GEMM path's budget; use_tiles): the work is cut into
// (batch, query head, tile of query rows) tasks, run in parallel; a thread runs a tile's two GEMMs
// itself (q rows x k^T, then probabilities x v, oneDNN on the calling thread) with the softmax rows
// between, on at most kTileFloats scores of its own, so the scores stay in its cache and no thread
// waits for another between the GEMMs. A head's scores never exist whole. A tile reads only the
// keys its rows keep (causality, a mask's kept ranges: tile_keys).
//
// Layouts: q, k and v may each come as [B, L, H, E] (attrs q_blhe, k_blhe, v_blhe: a projection's
// output split into heads, before the transpose(1, 2) a model writes), and the output may go out
// as [B, L, H, Ev] (out_blhe: the bytes that the transpose back and the reshape to [B, L, H * Ev]
// want). The pass attention_permutes (passes/attention_permutes.cpp) folds those transposes in, so
// the head split and merge copy nothing. The short and row paths address q, k, v and the output
// through their (batch, head, row) strides, and so do the tiles' GEMMs; the GEMM path stages a
// [B, L, H, E] operand into [B, H, L, E] first (what the transpose did); 16-bit operands are
// widened once, as before.
//
// Short sequences (a sentence encoder at small batch: see kShortKeys and kShortWork) run in one
// kernel, no GEMM primitive: per (batch, query head) and block of query rows, the key head's rows
// are transposed once into the thread's scratch ([E, S], padded to a vector); per group of query
// rows, the scores are vectors of keys (q[e] broadcast times row e of k^T), each softmax row is the
// GEMM path's, and the output rows are sums of value rows weighted by the probabilities, in
// registers.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <tuple>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/common.h"
#include "kernels/isa.h"
#include "kernels/onednn_util.h"
#include "kernels/reduce_util.h"
#include "kernels/simd.h"

namespace ag {
namespace {

// The flags of the operands given (or the output wanted) as [B, L, H, E]: q, k, v, out.
constexpr const char* kBlhe[4] = {"q_blhe", "k_blhe", "v_blhe", "out_blhe"};

// t with dims 1 and 2 swapped when `blhe` ([B, L, H, E] <-> [B, H, L, E]); rank checked by the caller.
TensorType heads_first(const TensorType& t, bool blhe) {
  if (!blhe || t.rank() != 4) return t;
  Shape s = t.shape();
  std::swap(s[1], s[2]);
  return TensorType(t.dtype, s);
}

std::vector<TensorType> infer_sdpa(const std::vector<TensorType>& in, const Attrs& a) {
  AG_CHECK(in[0].rank() == 4 && in[1].rank() == 4 && in[2].rank() == 4, "sdpa: q, k, v must be [B, H, L, E], got ",
           in[0].str(), ", ", in[1].str(), ", ", in[2].str());
  const TensorType q = heads_first(in[0], a.b(kBlhe[0], false)), k = heads_first(in[1], a.b(kBlhe[1], false)),
                   v = heads_first(in[2], a.b(kBlhe[2], false));
  AG_CHECK(q.dtype == k.dtype && q.dtype == v.dtype, "sdpa: dtypes differ: ", q.str(), ", ", k.str(), ", ", v.str());
  AG_CHECK(q.dtype == DType::f32 || q.dtype == DType::bf16 || q.dtype == DType::f16, "sdpa: dtype ",
           dtype_name(q.dtype), " is not supported (float32, bfloat16, float16)");
  AG_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0), "sdpa: batch sizes differ: ", q.str(), ", ", k.str(),
           ", ", v.str());
  AG_CHECK(k.size(1) == v.size(1), "sdpa: key and value head counts differ: ", k.str(), ", ", v.str());
  AG_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "sdpa: query heads (", q.size(1),
           ") must be a multiple of key heads (", k.size(1), ")");
  AG_CHECK(k.size(2) == v.size(2), "sdpa: key and value lengths differ: ", k.str(), ", ", v.str());
  AG_CHECK(k.size(3) == q.size(3), "sdpa: query and key head dims differ: ", q.str(), ", ", k.str());
  bool has_mask = a.b("has_mask", false);
  AG_CHECK(has_mask == (in.size() == 4), "sdpa: has_mask=", has_mask, " but ", in.size(), " inputs");
  if (has_mask) {
    const TensorType& m = in[3];
    AG_CHECK(m.dtype == DType::b8 || is_floating(m.dtype), "sdpa: mask must be bool or float, got ", m.str());
    Shape full{q.size(0), q.size(1), q.size(2), k.size(2)};
    AG_CHECK(m.rank() <= 4 && broadcast_shapes(m.shape(), full) == full, "sdpa: mask ", m.str(),
             " does not broadcast to [B, H, L, S] = ", shape_str(full));
  }
  return {heads_first(TensorType(q.dtype, {q.size(0), q.size(1), q.size(2), v.size(3)}), a.b(kBlhe[3], false))};
}

constexpr int64_t kScoreBudget = int64_t(1) << 22;  // floats (16 MiB) of scores per chunk
constexpr int64_t kFewRows = 4;  // query rows per key head up to which the row kernel runs
// The short path: at most kShortKeys keys and kShortWork multiply-adds (B H L S (E + Ev)), where it
// measured faster than the GEMM path (Zen 4, AVX-512, 2 threads; exported graphs of sdpa alone,
// median of 15 blocks of 200 calls, microseconds per call, short vs GEMM): 12 heads, E 32: B 1,
// S 12 18.0 vs 28.4, S 32 37.0 vs 48.8, S 48 53.6 vs 49.1; B 8, S 12 68.3 vs 96.8, S 20 134 vs
// 119; E 64, B 1, S 32 57.1 vs 54.2. (Its softmax rows are the GEMM path's; what it saves is the
// two primitives' calls and their parallel regions, fixed costs that small heads do not pay back.)
// Without AVX-512 (8 lanes, 2 query rows a group; the same machine with AIRGRAPH_KERNEL_ISA=avx2 and
// ONEDNN_MAX_CPU_ISA=AVX2, E 32, B 1): S 16 18.0 vs 23.2, S 20 37.9 vs 36.7, S 32 60.7 vs 41.2; B 8, S 12
// 80.0 vs 148: at most kShortKeysAvx2 keys.
constexpr int64_t kShortKeys = 64;
constexpr int64_t kShortKeysAvx2 = 16;
constexpr int64_t kShortWork = int64_t(1) << 20;
constexpr int64_t kShortBlock = 32;
constexpr int64_t kTileFloats = int64_t(1) << 18;  // tiled path: at most this many scores (1 MiB) per tile
constexpr int64_t kTileFromScores = int64_t(1) << 19;  // and where a call's scores pass this (use_tiles)
constexpr int64_t kTileHeadScores = int64_t(1) << 14;  // and a head's (128 x 128)
// Element strides of an operand's batch, head and row (its last dim is contiguous).
struct Str {
  int64_t b, h, l;
};
// [B, H, L, E] (blhe false) or [B, L, H, E] (true), for H heads of L rows of E.
constexpr Str strides_of(int64_t H, int64_t L, int64_t E, bool blhe) {
  return blhe ? Str{L * H * E, E, H * E} : Str{H * L * E, L * E, E};
}

// dst <- src, B * H * L rows of E elements from one layout (strides) into another, converting the
// element type (float <-> the 16-bit storage types; load/store round as the other kernels do).
template <typename S, typename D>
void restride(const S* src, Str ss, D* dst, Str ds, int64_t B, int64_t H, int64_t L, int64_t E) {
  parallel_for(B * H * L, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, E)), [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const int64_t b = r / (H * L), h = r / L % H, l = r % L;
      const S* sp = src + b * ss.b + h * ss.h + l * ss.l;
      D* dp = dst + b * ds.b + h * ds.h + l * ds.l;
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(dp, sp, E * sizeof(S));
      } else if constexpr (std::is_same_v<D, float>) {
        for (int64_t e = 0; e < E; ++e) dp[e] = static_cast<float>(load(sp[e]));
      } else {
        for (int64_t e = 0; e < E; ++e) store(dp[e], static_cast<acc_t<D>>(sp[e]));
      }
    }
  });
}

// v held in a register from here: a vector the inner loops multiply by several broadcasts is
// loaded once (GCC would fold the load into each FMA, one load per FMA, and the loads then bound
// the loop)
template <typename F>
[[gnu::always_inline]] inline void in_register(F& v) {
  asm("" : "+v"(v));
}
// a * b + c in one rounding, 8 or 16 lanes
[[gnu::always_inline]] inline simd::F8 fmadd(const simd::F8& a, const simd::F8& b, const simd::F8& c) {
  return _mm256_fmadd_ps(a, b, c);
}
AG_TARGET_AVX512 inline simd::F16 fmadd(const simd::F16& a, const simd::F16& b, const simd::F16& c) {
  return _mm512_fmadd_ps(a, b, c);
}
// GEMM path: the most keys of S a chunk's GEMMs read as a range; a chunk whose rows keep a wider
// range reads all S keys (a range nearly as wide saves little, and the ranged GEMMs cost a little
// more per run: their memory objects are made per run)
constexpr int64_t max_trim_width(int64_t S) { return S * 3 / 4; }
std::atomic<int64_t> g_split_runs{0};  // sdpa_kv_split_runs()
std::atomic<int64_t> g_keys_skipped{0};  // sdpa_keys_skipped()

using dnnl_util::Exec;

class SdpaKernel final : public Kernel {
 public:
  explicit SdpaKernel(const Node& n) {
    for (int i = 0; i < 4; ++i) blhe_[i] = n.attrs.b(kBlhe[i], false);
    auto q = heads_first(n.inputs[0]->type, blhe_[0]).shape(), k = heads_first(n.inputs[1]->type, blhe_[1]).shape(),
         v = heads_first(n.inputs[2]->type, blhe_[2]).shape();
    t_ = n.inputs[0]->type.dtype;
    B_ = q[0], H_ = q[1], L_ = q[2], E_ = q[3], Hk_ = k[1], S_ = k[2], Ev_ = v[3];
    G_ = H_ / Hk_;
    str_[0] = strides_of(H_, L_, E_, blhe_[0]);
    str_[1] = strides_of(Hk_, S_, E_, blhe_[1]);
    str_[2] = strides_of(Hk_, S_, Ev_, blhe_[2]);
    str_[3] = strides_of(H_, L_, Ev_, blhe_[3]);
    // no scale: PyTorch's default 1/sqrt(E), computed as Python does (in double)
    scale_ = static_cast<float>(n.attrs.has("scale") ? n.attrs.f("scale") : 1.0 / std::sqrt(static_cast<double>(E_)));
    causal_ = n.attrs.b("is_causal", false);
    has_mask_ = n.inputs.size() > 3;
    if (has_mask_) {
      mask_t_ = n.inputs[3]->type.dtype;
      Shape ms = n.inputs[3]->type.shape();
      while (ms.size() < 4) ms.insert(ms.begin(), 1);
      mstr_ = broadcast_strides(ms, {B_, H_, L_, S_});
    }
    const int64_t per_head = G_ * L_ * S_;
    const bool many_rows = B_ * H_ * L_ * Ev_ > 0 && S_ > 0 && E_ > 0 && G_ * L_ > kFewRows;
    short_ = many_rows && S_ <= sdpa_short_max_keys() && B_ * H_ * L_ * S_ * (E_ + Ev_) <= kShortWork;
    tiles_ = many_rows && !short_ && use_tiles();
    gemm_ = many_rows && !short_ && !tiles_ && per_head <= kScoreBudget;
    if (gemm_) {
      chunk_ = std::max<int64_t>(1, std::min(B_ * Hk_, kScoreBudget / per_head));
      const int64_t rest = (B_ * Hk_) % chunk_;
      for (int trim = 0; trim < (has_mask_ ? 2 : 1); ++trim) {
        make_gemms(chunk_, trim, gemms_[0][trim]);
        if (rest) make_gemms(rest, trim, gemms_[1][trim]);
      }
    }
    slots_ = std::max({omp_get_max_threads(), omp_get_num_procs(), num_threads(), 1});
    if (tiles_) make_tiles();
    // row kernel: a score row per thread slot, then the split partials for up
    // to slots_ threads (more threads split no less: sdpa_kv_splits grows with them)
    const int64_t rows = B_ * H_ * L_;
    max_splits_ = gemm_ || short_ || tiles_ ? 1 : sdpa_kv_splits(rows, slots_, S_);
    // short path: per thread slot the key head's k^T [E, Sp] and up to four score rows (short_slot_floats)
    n_scores_ = static_cast<size_t>(gemm_    ? chunk_ * G_ * L_ * S_
                                    : short_ ? slots_ * short_slot_floats()
                                    : tiles_ ? slots_ * tile_rows_ * S_
                                             : slots_ * S_ + (max_splits_ > 1 ? rows * max_splits_ * (Ev_ + 2) : 0));
    // staged operands ([B, H, L, E] f32 copies): 16-bit ones (widened), and [B, L, H, E] ones on the GEMM path
    const int64_t sizes[4] = {B_ * H_ * L_ * E_, B_ * Hk_ * S_ * E_, B_ * Hk_ * S_ * Ev_, B_ * H_ * L_ * Ev_};
    size_t floats = n_scores_;
    for (int i = 0; i < 4; ++i) {
      staged_[i] = t_ != DType::f32 || (gemm_ && blhe_[i]);
      stage_off_[i] = floats;
      if (staged_[i]) floats += static_cast<size_t>(sizes[i]);
    }
    floats_off_ = scratch_.add(floats * sizeof(float));
    size_t pad = 0;
    for (const auto& gs : gemms_)
      for (const Gemms& g : gs) pad = std::max({pad, g.qk.scratch_bytes, g.pv.scratch_bytes});
    for (const auto& gs : tile_gemms_)
      for (const Gemms& g : gs) tile_pad_ = std::max({tile_pad_, g.qk.scratch_bytes, g.pv.scratch_bytes});
    tile_pad_ = (tile_pad_ + 63) / 64 * 64;
    pad_off_ = scratch_.add(std::max(pad, tile_pad_ * slots_));
  }

  // scores (and the f32 copies of 16-bit inputs), then the GEMMs' scratchpad
  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (!gemm_ && !tiles_) return nullptr;
    auto st = std::make_unique<State>();
    if (tiles_) {
      st->tiles.resize(slots_);
      for (auto& a : st->tiles) a = tile_args();
      return st;
    }
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 2; ++t)
        if (gemms_[r][t].qk.prim) st->args[r][t] = {gemms_[r][t].qk.make_args(), gemms_[r][t].pv.make_args()};
    return st;
  }

  std::string name() const override {
    return std::string(gemm_ ? "sdpa_gemm_" : short_ ? "sdpa_short_" : tiles_ ? "sdpa_tiles_" : "sdpa_rows_") +
           dtype_name(t_);
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (B_ * H_ * L_ * Ev_ == 0) return;
    float* scratch = ScratchLayout::at<float>(ctx, floats_off_);
    // each operand as f32 and its strides: the input itself, or its staged [B, H, L, E] copy (16-bit
    // inputs widened once, computed in f32, the output rounded once)
    const int64_t heads[4] = {H_, Hk_, Hk_, H_}, lens[4] = {L_, S_, S_, L_}, dims[4] = {E_, E_, Ev_, Ev_};
    const float* ops[3];
    Str st[4];
    for (int i = 0; i < 4; ++i) {
      st[i] = staged_[i] ? strides_of(heads[i], lens[i], dims[i], false) : str_[i];
      if (i == 3 || !staged_[i]) continue;
      float* w = scratch + stage_off_[i];
      AG_DISPATCH_FLOAT(t_, "sdpa", [&] {
        restride(static_cast<const scalar_t*>(in[i]), str_[i], w, st[i], B_, heads[i], lens[i], dims[i]);
      });
    }
    for (int i = 0; i < 3; ++i) ops[i] = staged_[i] ? scratch + stage_off_[i] : static_cast<const float*>(in[i]);
    float* O = staged_[3] ? scratch + stage_off_[3] : static_cast<float*>(out[0]);
    const float *Q = ops[0], *K = ops[1], *V = ops[2];
    auto body = [&](const auto* mask) {
      using M = std::remove_cv_t<std::remove_pointer_t<decltype(mask)>>;
      if (gemm_)
        run_gemm<M>(Q, K, V, mask, O, scratch, *static_cast<State*>(ctx.state),
                    ScratchLayout::at(ctx, pad_off_));
      else if (short_)
        run_short<M>(Q, K, V, mask, O, st, scratch);
      else if (tiles_)
        run_tiles<M>(Q, K, V, mask, O, st, scratch, *static_cast<State*>(ctx.state),
                     ScratchLayout::at<char>(ctx, pad_off_));
      else
        run_rows<M>(Q, K, V, mask, O, st, scratch);
    };
    if (!has_mask_) {
      body(static_cast<const bool*>(nullptr));
    } else if (mask_t_ == DType::b8) {
      body(static_cast<const bool*>(in[3]));
    } else {
      AG_DISPATCH_FLOAT(mask_t_, "sdpa mask", [&] { body(static_cast<const scalar_t*>(in[3])); });
    }
    if (staged_[3])
      AG_DISPATCH_FLOAT(t_, "sdpa", [&] {
        restride(O, st[3], static_cast<scalar_t*>(out[0]), str_[3], B_, H_, L_, Ev_);
      });
  }

 private:
  struct Gemms {
    Exec qk, pv;
  };
  struct GemmArgs {
    dnnl_util::Args qk, pv;
  };
  using TileArgs = std::array<dnnl_util::Args, 8>;  // tile_gemms_' qk, pv: [ranged][last], as 4 r + 2 t
  struct State : KernelState {
    GemmArgs args[2][2];  // as gemms_
    std::vector<TileArgs> tiles;  // per thread slot
  };

  // The two GEMMs for `nb` (batch, key head) pairs: scores = q k^T, out = p v; over all S keys, or
  // (trim) over a key count given per run (a range [lo, hi) of the keys: k, scores and v keep the
  // strides of all S keys, their pointers move to key lo). The ranged pair uses oneDNN's runtime
  // dimensions: one primitive for every range, built with the kernel, no lock, no cache. The
  // alternatives: primitives per width (rounded up to 64) would be built while running, under a
  // lock (run() is const and shared by threads), for a range that grows by a key every decode
  // step; a hand-written kernel for few rows would be one more GEMM to keep fast. The cost is the
  // memory objects of k, scores and v, made per run (under 2 us); oneDNN runs gemm:jit for it,
  // what it picks at a fixed decode-sized width too. Qwen2-0.5B's decode step (7 query rows per
  // key head, 100 of 4096 cache slots filled) took 13 us instead of 150 us reading all the slots
  // (2 threads); the row kernel, 14 query rows against 100 keys each, takes about as long (12 us),
  // and 3 times as long against 1000.
  void make_gemms(int64_t nb, bool trim, Gemms& g) {
    using dims = dnnl::memory::dims;
    const auto f = dnnl::memory::data_type::f32;
    const int64_t M = G_ * L_, n = trim ? DNNL_RUNTIME_DIM_VAL : S_;
    dnnl::memory::desc q_md(dims{nb, M, E_}, f, dims{M * E_, E_, 1});
    dnnl::memory::desc kt_md(dims{nb, E_, n}, f, dims{S_ * E_, 1, E_});  // k^T without a copy
    dnnl::memory::desc s_md(dims{nb, M, n}, f, dims{M * S_, S_, 1});
    dnnl::memory::desc v_md(dims{nb, n, Ev_}, f, dims{S_ * Ev_, Ev_, 1});
    dnnl::memory::desc o_md(dims{nb, M, Ev_}, f, dims{M * Ev_, Ev_, 1});
    auto attr = dnnl_util::default_attr();
    dnnl::matmul::primitive_desc qk(dnnl_util::engine(), q_md, kt_md, s_md, attr);
    dnnl::matmul::primitive_desc pv(dnnl_util::engine(), s_md, v_md, o_md, attr);
    g.qk.init(dnnl::matmul(qk), qk.scratchpad_desc());
    g.pv.init(dnnl::matmul(pv), pv.scratchpad_desc());
    g.qk.bind(DNNL_ARG_SRC, q_md), g.pv.bind(DNNL_ARG_DST, o_md);
    if (trim) return;  // the rest are made per run (ranged_args)
    g.qk.bind(DNNL_ARG_WEIGHTS, kt_md), g.qk.bind(DNNL_ARG_DST, s_md);
    g.pv.bind(DNNL_ARG_SRC, s_md), g.pv.bind(DNNL_ARG_WEIGHTS, v_md);
  }

  // The ranged pair's per-run arguments for `nb` pairs and keys [lo, lo + w): k from Kc + lo * E,
  // the scores' w columns, v from Vc + lo * Ev (Kc, Vc: the chunk's first key head).
  void ranged_args(GemmArgs& a, int64_t nb, int64_t lo, int64_t w, const float* Kc, const float* Vc,
                   float* scores) const {
    using dims = dnnl::memory::dims;
    const auto f = dnnl::memory::data_type::f32;
    const int64_t M = G_ * L_;
    auto mem = [&](dims d, dims st, const float* p) {
      return dnnl::memory(dnnl::memory::desc(d, f, st), dnnl_util::engine(), const_cast<float*>(p));
    };
    dnnl::memory s = mem({nb, M, w}, {M * S_, S_, 1}, scores);
    a.qk.m.insert_or_assign(DNNL_ARG_WEIGHTS, mem({nb, E_, w}, {S_ * E_, 1, E_}, Kc + lo * E_));
    a.qk.m.insert_or_assign(DNNL_ARG_DST, s);
    a.pv.m.insert_or_assign(DNNL_ARG_SRC, s);
    a.pv.m.insert_or_assign(DNNL_ARG_WEIGHTS, mem({nb, w, Ev_}, {S_ * Ev_, Ev_, 1}, Vc + lo * Ev_));
  }

  // Whether the 32 keys from p are all dropped, for a contiguous bool or float32 mask row.
  template <typename M>
  static bool dropped32(const M* p) {
    if constexpr (std::is_same_v<M, bool>) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return _mm256_testz_si256(v, v);
    } else {
      const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      __m256 all = _mm256_cmp_ps(_mm256_loadu_ps(p), ninf, _CMP_EQ_OQ);
      for (int k = 8; k < 32; k += 8) all = _mm256_and_ps(all, _mm256_cmp_ps(_mm256_loadu_ps(p + k), ninf, _CMP_EQ_OQ));
      return _mm256_movemask_ps(all) == 0xff;
    }
  }

  // A masked row's keys among [0, lim) from its first kept key to its last, [lo, hi) (dropped: false
  // in a bool mask, -inf in an additive one, as torch makes a bool mask; m0: the row's mask at key
  // 0); lo == hi when it keeps none. Given `known` = [klo, khi) (nonempty: the union of other rows'
  // ranges), the scans stop at it: the result is exact only where it reaches past `known`, all
  // that widening the union needs.
  template <typename M>
  std::pair<int64_t, int64_t> kept_keys(const M* m0, int64_t lim, int64_t klo = 0, int64_t khi = 0) const {
    const int64_t ms = mstr_[3];
    auto dropped = [&](int64_t j) {
      if constexpr (std::is_same_v<M, bool>) return !m0[j * ms];
      else return static_cast<float>(load(m0[j * ms])) == -std::numeric_limits<float>::infinity();
    };
    constexpr bool vec = std::is_same_v<M, bool> || std::is_same_v<M, float>;  // 32 keys a test
    int64_t hi = lim;
    if constexpr (vec)
      if (ms == 1)
        while (hi - 32 >= khi && dropped32(m0 + hi - 32)) hi -= 32;
    while (hi > khi && dropped(hi - 1)) --hi;
    const int64_t stop = klo < khi ? std::min(hi, klo) : hi;
    int64_t lo = 0;
    if constexpr (vec)
      if (ms == 1)
        while (lo + 32 <= stop && dropped32(m0 + lo)) lo += 32;
    while (lo < stop && dropped(lo)) ++lo;
    return {lo, hi};
  }

  // The keys [lo, hi) that the rows of (batch, key head) pairs [c0, c0 + nb) keep: the union of
  // their kept_keys (lo == hi: every row keeps none), or [0, S) as soon as it is wider than
  // max_trim_width (not worth a narrower GEMM). Rows sharing a mask row are scanned once: heads
  // (and batches) the mask broadcasts over, and a row broadcast over queries is scanned for the
  // last query, whose causal bound is the widest.
  template <typename M>
  std::pair<int64_t, int64_t> chunk_keys(const M* mask, int64_t c0, int64_t nb) const {
    int64_t lo = 0, hi = 0;
    const int64_t ng = mstr_[1] == 0 ? 1 : G_, ni = mstr_[2] == 0 ? 1 : L_;
    for (int64_t p = c0; p < c0 + nb; ++p) {
      const int64_t b = p / Hk_;
      if (p > c0 && mstr_[1] == 0 && (mstr_[0] == 0 || (p - 1) / Hk_ == b)) continue;  // pair p - 1's rows
      for (int64_t g = 0; g < ng; ++g)
        for (int64_t ii = 0; ii < ni; ++ii) {
          const int64_t i = ni == 1 ? L_ - 1 : ii, h = p % Hk_ * G_ + g;
          const auto [l, r] = kept_keys(mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2],
                                        causal_ ? std::min(S_, i + 1) : S_, lo, hi);
          if (l >= r) continue;
          if (lo == hi) lo = l, hi = r;
          else lo = std::min(lo, l), hi = std::max(hi, r);
          if (hi - lo > max_trim_width(S_)) return {0, S_};
        }
    }
    return {lo, hi};
  }

  // GEMM path, per chunk of (batch, key head) pairs. With a mask, the GEMMs read only the keys
  // [lo, hi) the chunk's rows keep (chunk_keys), when that is at most max_trim_width of them: a decode
  // step over a static KV cache reads the filled slots, not the whole cache. Keys outside the range
  // are dropped for every row of the chunk, so each row's softmax is the same over the range (the
  // mask read from key lo, the causal bound moved by lo); a row that keeps none gives 0 either
  // way, and a chunk whose rows keep none runs no GEMM.
  template <typename M>
  void run_gemm(const float* Q, const float* K, const float* V, const M* mask, float* O, float* scores, State& st,
                void* pad) const {
    const int64_t total = B_ * Hk_, rows = G_ * L_;
    for (int64_t c0 = 0; c0 < total; c0 += chunk_) {
      const int64_t nb = std::min(chunk_, total - c0);
      const int rest = nb == chunk_ ? 0 : 1;
      int64_t lo = 0, hi = S_;
      if (mask) std::tie(lo, hi) = chunk_keys(mask, c0, nb);
      const int64_t w = hi - lo;
      const bool trim = w < S_;  // (chunk_keys gives all S keys, or at most max_trim_width)
      if (trim) g_keys_skipped.fetch_add(nb * rows * (S_ - w), std::memory_order_relaxed);
      float* Oc = O + c0 * rows * Ev_;
      if (w == 0) {  // every row fully masked: 0
        std::fill(Oc, Oc + nb * rows * Ev_, 0.f);
        continue;
      }
      const Gemms& g = gemms_[rest][trim];
      GemmArgs& a = st.args[rest][trim];
      const float *Kc = K + c0 * S_ * E_, *Vc = V + c0 * S_ * Ev_;
      if (trim) {
        ranged_args(a, nb, lo, w, Kc, Vc, scores);
      } else {
        a.qk.set(DNNL_ARG_WEIGHTS, const_cast<float*>(Kc));
        a.qk.set(DNNL_ARG_DST, scores);
        a.pv.set(DNNL_ARG_SRC, scores);
        a.pv.set(DNNL_ARG_WEIGHTS, const_cast<float*>(Vc));
      }
      a.qk.set(DNNL_ARG_SRC, const_cast<float*>(Q + c0 * rows * E_));
      g.qk.run(a.qk, pad);
      // softmax over each score row's w columns (keys lo..hi), in place: scale, mask, causality
      const bool avx512 = isa::use_avx512();
      parallel_for(nb * rows, std::max<int64_t>(1, 8192 / w), [&](int64_t rb, int64_t re) {
        if (avx512) softmax_rows_avx512(rb, re, c0, mask, lo, w, scores);
        else softmax_rows_avx2(rb, re, c0, mask, lo, w, scores);
      });
      a.pv.set(DNNL_ARG_DST, Oc);
      g.pv.run(a.pv, pad);
    }
  }

  // Tiled path: tasks of (batch, query head, tile of tile_rows_ query rows), in parallel; each thread
  // runs a tile's two GEMMs itself (oneDNN, called inside the parallel region, does not fork), so
  // that the tile's scores [rows, S] stay in its cache between the GEMMs and the softmax, and no
  // (batch, head) pair waits for another's: scores = q k^T, softmax_row on each row, out = p v. q,
  // k, v and the output are read and written through their strides ([B, L, H, E] ones included);
  // only 16-bit operands are staged (widened). Chosen by use_tiles.
  // Where the tiles run: from 16 query rows a head (fewer, a decode step's stacked heads say, stay on
  // the GEMMs over stacked heads or the row kernel), on heads of at least kTileHeadScores scores
  // once the call's pass kTileFromScores (below either the GEMM path's scores stay in cache, or a
  // tile's two GEMM calls cost more than they save), and wherever the GEMM path could not hold a
  // head's scores. A tile reads only the keys its rows keep (causality,
  // a mask: tile_keys). Measured against the GEMM path (Zen 4, AVX-512, 2 threads; sdpa alone,
  // exported, E 64, ms, GEMM vs tiles, blocks interleaved): B 8, 12 heads, 197 keys 10.1 vs 7.9; B 8,
  // 12 heads, 128 keys 3.6 vs 3.3; B 1, 14 heads, 512 keys 7.8 vs 6.7, causal 7.1 vs 4.3; B 1, 6
  // heads, 1500 keys 1.06-1.13x faster; B 1, 4 heads, 4096 keys (the row kernel before) 454 vs 125,
  // causal 67. Ties at B 1, 12 heads, 128 to 256 keys, and B 8, 12 heads, 96 keys; the tiles ran
  // 10-11% slower on small heads (B 512, 3 heads of 49 keys and E 32: Swin's windows at batch 8; B
  // 8, 8 heads, 64 keys), and about 5% slower causal at 64 to 128 keys (B 1, 14 heads on 2).
  bool use_tiles() const {
    return L_ >= 16 &&
           ((L_ * S_ >= kTileHeadScores && B_ * H_ * L_ * S_ > kTileFromScores) || G_ * L_ * S_ > kScoreBudget);
  }
  // The operand strides the tiles address: the input's own, or its staged copy's (16-bit inputs).
  Str tile_strides(int i) const {
    const int64_t heads[4] = {H_, Hk_, Hk_, H_}, lens[4] = {L_, S_, S_, L_}, dims[4] = {E_, E_, Ev_, Ev_};
    return t_ != DType::f32 ? strides_of(heads[i], lens[i], dims[i], false) : str_[i];
  }
  void make_tiles() {
    tile_rows_ = std::min(L_, std::clamp<int64_t>(kTileFloats / S_ / 8 * 8, 8, 256));
    using dims = dnnl::memory::dims;
    const auto f = dnnl::memory::data_type::f32;
    const Str qs = tile_strides(0), ks = tile_strides(1), vs = tile_strides(2), os = tile_strides(3);
    const int64_t last = L_ % tile_rows_;
    // (ranged: a tile whose rows keep fewer than S keys, causal or masked, reads only those, a key
    // range given per run through oneDNN's runtime dimensions, as the GEMM path's trimmed pair)
    for (int r = 0; r < (causal_ || has_mask_ ? 2 : 1); ++r)
      for (int t = 0; t < (last ? 2 : 1); ++t) {
        const int64_t m = t == 0 ? tile_rows_ : last, n = r ? DNNL_RUNTIME_DIM_VAL : S_;
        dnnl::memory::desc q_md(dims{m, E_}, f, dims{qs.l, 1});
        dnnl::memory::desc kt_md(dims{E_, n}, f, dims{1, ks.l});  // k^T without a copy
        dnnl::memory::desc s_md(dims{m, n}, f, dims{S_, 1});
        dnnl::memory::desc v_md(dims{n, Ev_}, f, dims{vs.l, 1});
        dnnl::memory::desc o_md(dims{m, Ev_}, f, dims{os.l, 1});
        auto attr = dnnl_util::default_attr();
        dnnl::matmul::primitive_desc qk(dnnl_util::engine(), q_md, kt_md, s_md, attr);
        dnnl::matmul::primitive_desc pv(dnnl_util::engine(), s_md, v_md, o_md, attr);
        Gemms& g = tile_gemms_[r][t];
        g.qk.init(dnnl::matmul(qk), qk.scratchpad_desc());
        g.pv.init(dnnl::matmul(pv), pv.scratchpad_desc());
        g.qk.bind(DNNL_ARG_SRC, q_md), g.pv.bind(DNNL_ARG_DST, o_md);
        if (r) continue;  // (the rest are made per run)
        g.qk.bind(DNNL_ARG_WEIGHTS, kt_md), g.qk.bind(DNNL_ARG_DST, s_md);
        g.pv.bind(DNNL_ARG_SRC, s_md), g.pv.bind(DNNL_ARG_WEIGHTS, v_md);
      }
  }
  TileArgs tile_args() const {
    TileArgs a;
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 2; ++t)
        if (const Gemms& g = tile_gemms_[r][t]; g.qk.prim)
          a[4 * r + 2 * t] = g.qk.make_args(), a[4 * r + 2 * t + 1] = g.pv.make_args();
    return a;
  }
  template <typename M>
  void run_tiles(const float* Q, const float* K, const float* V, const M* mask, float* O, const Str* st,
                 float* scratch, State& s, char* pads) const {
    const Str qs = st[0], ks = st[1], vs = st[2], os = st[3];
    const int64_t per_head = (L_ + tile_rows_ - 1) / tile_rows_, tasks = B_ * H_ * per_head;
    const bool avx512 = isa::use_avx512();
    parallel_for(tasks, 1, [&](int64_t tb, int64_t te) {
      const int tid = omp_get_thread_num();
      std::vector<float> local;
      float* sc = thread_slot(scratch, tile_rows_ * S_, local);
      TileArgs own;  // (a thread past the slots: its own arguments and scratchpad)
      std::vector<char> own_pad;
      TileArgs* a = &own;
      char* pad = nullptr;
      if (tid < slots_) {
        a = &s.tiles[tid], pad = pads + tid * tile_pad_;
      } else {
        own = tile_args(), own_pad.resize(tile_pad_), pad = own_pad.data();
      }
      for (int64_t t = tb; t < te; ++t) {
        // (causal: a head's tiles taken first, last, second, second to last ...: a later tile reads more
        // keys, and a thread's contiguous range of tasks then holds as many late tiles as early ones)
        const int64_t bh = t / per_head, k = t % per_head, tile = !causal_ ? k : k % 2 ? per_head - 1 - k / 2 : k / 2;
        const int64_t b = bh / H_, h = bh % H_, kh = h / G_, i0 = tile * tile_rows_;
        const int64_t m = std::min(tile_rows_, L_ - i0);
        const int last = m == tile_rows_ ? 0 : 1;
        float* Ot = O + b * os.b + h * os.h + i0 * os.l;
        // the keys [lo, hi) the tile's rows keep: all S; (causal) those up to its last row; (a mask)
        // the union of its rows' kept ranges, a static KV cache's filled slots say
        int64_t lo = 0, hi = causal_ ? std::min(S_, i0 + m) : S_;
        if (mask) std::tie(lo, hi) = tile_keys(mask, b, h, i0, m);
        const int64_t w = hi - lo;
        if (w < S_) g_keys_skipped.fetch_add(m * (S_ - w), std::memory_order_relaxed);
        if (w == 0) {  // no row keeps a key: 0
          for (int64_t i = 0; i < m; ++i) std::fill(Ot + i * os.l, Ot + i * os.l + Ev_, 0.f);
          continue;
        }
        const int r = w < S_ ? 1 : 0;
        dnnl_util::Args &qk = (*a)[4 * r + 2 * last], &pv = (*a)[4 * r + 2 * last + 1];
        const Gemms& g = tile_gemms_[r][last];
        const float *Kh = K + b * ks.b + kh * ks.h + lo * ks.l, *Vh = V + b * vs.b + kh * vs.h + lo * vs.l;
        if (r) {
          using dims = dnnl::memory::dims;
          auto mem = [&](dims d, dims st, const float* p) {
            return dnnl::memory(dnnl::memory::desc(d, dnnl::memory::data_type::f32, st), dnnl_util::engine(),
                                const_cast<float*>(p));
          };
          dnnl::memory s_mem = mem({m, w}, {S_, 1}, sc);
          qk.m.insert_or_assign(DNNL_ARG_WEIGHTS, mem({E_, w}, {1, ks.l}, Kh));
          qk.m.insert_or_assign(DNNL_ARG_DST, s_mem);
          pv.m.insert_or_assign(DNNL_ARG_SRC, s_mem);
          pv.m.insert_or_assign(DNNL_ARG_WEIGHTS, mem({w, Ev_}, {vs.l, 1}, Vh));
        } else {
          qk.set(DNNL_ARG_WEIGHTS, const_cast<float*>(Kh));
          qk.set(DNNL_ARG_DST, sc);
          pv.set(DNNL_ARG_SRC, sc);
          pv.set(DNNL_ARG_WEIGHTS, const_cast<float*>(Vh));
        }
        qk.set(DNNL_ARG_SRC, const_cast<float*>(Q + b * qs.b + h * qs.h + i0 * qs.l));
        g.qk.run(qk, pad);
        if (avx512) tile_softmax_avx512(sc, m, b, h, i0, lo, w, mask);
        else tile_softmax_avx2(sc, m, b, h, i0, lo, w, mask);
        pv.set(DNNL_ARG_DST, Ot);
        g.pv.run(pv, pad);
      }
    });
  }
  // The keys [lo, hi) that a tile's rows (query rows i0 .. i0 + m of head h in batch b) keep: the
  // union of their kept_keys (lo == hi: none), a row broadcast over queries scanned once, for the
  // tile's last row (its causal bound the widest).
  template <typename M>
  std::pair<int64_t, int64_t> tile_keys(const M* mask, int64_t b, int64_t h, int64_t i0, int64_t m) const {
    int64_t lo = 0, hi = 0;
    for (int64_t i = mstr_[2] == 0 ? i0 + m - 1 : i0; i < i0 + m; ++i) {
      const auto [l, r] = kept_keys(mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2],
                                    causal_ ? std::min(S_, i + 1) : S_, lo, hi);
      if (l >= r) continue;
      if (lo == hi) lo = l, hi = r;
      else lo = std::min(lo, l), hi = std::max(hi, r);
    }
    return {lo, hi};
  }
  // softmax_row on a tile's m score rows over the keys [lo, lo + w) (query rows i0.. of head h in batch b)
  template <int L, typename M>
  [[gnu::always_inline]] inline void tile_softmax(float* sc, int64_t m, int64_t b, int64_t h, int64_t i0, int64_t lo,
                                                  int64_t w, const M* mask) const {
    for (int64_t r = 0; r < m; ++r) {
      const int64_t i = i0 + r;
      const M* mrow = mask ? mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2] + lo * mstr_[3] : nullptr;
      softmax_row<L>(sc + r * S_, mrow, causal_ ? std::clamp<int64_t>(i + 1 - lo, 0, w) : w, w);
    }
  }
  template <typename M>
  AG_WRAPPER_AVX512 void tile_softmax_avx512(float* sc, int64_t m, int64_t b, int64_t h, int64_t i0, int64_t lo,
                                             int64_t w, const M* mask) const {
    tile_softmax<16>(sc, m, b, h, i0, lo, w, mask);
  }
  template <typename M>
  AG_WRAPPER_AVX2 void tile_softmax_avx2(float* sc, int64_t m, int64_t b, int64_t h, int64_t i0, int64_t lo,
                                         int64_t w, const M* mask) const {
    tile_softmax<8>(sc, m, b, h, i0, lo, w, mask);
  }

  // Score rows [rb, re) of a chunk starting at pair c0 (keys lo..lo + w): softmax_row each, written
  // once for L lanes and compiled for AVX-512 (L = 16) and AVX2 (L = 8) (kernels/simd.h's wrappers:
  // the exp, its sum and the scaling run 16 lanes wide on AVX-512, tails masked; the sums in
  // another order). The mask and max pass (scale_mask_max) is AVX2 under both.
  template <int L, typename M>
  [[gnu::always_inline]] inline void softmax_rows(int64_t rb, int64_t re, int64_t c0, const M* mask, int64_t lo,
                                                  int64_t w, float* scores) const {
    const int64_t rows = G_ * L_;
    for (int64_t r = rb; r < re; ++r) {
      const int64_t bhk = c0 + r / rows, gi = r % rows, b = bhk / Hk_, h = (bhk % Hk_) * G_ + gi / L_, i = gi % L_;
      const M* mrow = nullptr;
      if (mask) mrow = mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2] + lo * mstr_[3];
      const int64_t lim = causal_ ? std::clamp<int64_t>(i + 1 - lo, 0, w) : w;
      softmax_row<L>(scores + r * S_, mrow, lim, w);
    }
  }
  template <typename M>
  AG_WRAPPER_AVX512 void softmax_rows_avx512(int64_t rb, int64_t re, int64_t c0, const M* mask, int64_t lo, int64_t w,
                                             float* scores) const {
    softmax_rows<16>(rb, re, c0, mask, lo, w, scores);
  }
  template <typename M>
  AG_WRAPPER_AVX2 void softmax_rows_avx2(int64_t rb, int64_t re, int64_t c0, const M* mask, int64_t lo, int64_t w,
                                         float* scores) const {
    softmax_rows<8>(rb, re, c0, mask, lo, w, scores);
  }

  // p[j] <- p[j] * scale + mask[j] (one fused multiply-add; -inf where a bool mask drops key j)
  // for j in [0, n); returns the max (-inf when every key is masked), or NaN when a score is NaN, so
  // that the row comes out NaN instead of looking fully masked (0). Eight lanes at a time where the
  // mask is absent or a contiguous bool/float32 row (a scalar max chain would wait on each max's
  // latency: 1.4 ns a score).
  template <typename M>
  float scale_mask_max(float* p, const M* mrow, int64_t n) const {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    const float sc = scale_;  // (a local: p could alias the kernel's members for all the compiler knows)
    const int64_t ms = mrow != nullptr ? mstr_[3] : 0;  // (no strides without a mask)
    int64_t j = 0;
    __m256 vmx = _mm256_set1_ps(ninf), vnan = _mm256_setzero_ps();
    const __m256 vsc = _mm256_set1_ps(sc);
    auto put = [&](int64_t at, __m256 v) {  // p[at..at+8) <- v; the max and the NaN flag take it in
      _mm256_storeu_ps(p + at, v);
      vmx = _mm256_max_ps(v, vmx);  // (max_ps gives its second operand when either is NaN)
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    };
    if (mrow == nullptr) {
      for (; j + 8 <= n; j += 8) put(j, _mm256_mul_ps(_mm256_loadu_ps(p + j), vsc));
    } else if constexpr (std::is_same_v<M, bool>) {
      if (ms == 1) {
        const __m256 vninf = _mm256_set1_ps(ninf);
        for (; j + 8 <= n; j += 8) {
          int64_t bytes;
          std::memcpy(&bytes, mrow + j, 8);
          const __m256i keep = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));  // 0: key dropped
          const __m256 drop = _mm256_castsi256_ps(_mm256_cmpeq_epi32(keep, _mm256_setzero_si256()));
          put(j, _mm256_blendv_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), vsc), vninf, drop));
        }
      }
    } else if constexpr (std::is_same_v<M, float>) {
      if (ms == 1)
        for (; j + 8 <= n; j += 8) put(j, _mm256_fmadd_ps(_mm256_loadu_ps(p + j), vsc, _mm256_loadu_ps(mrow + j)));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmx);
    float mx = ninf;
    for (float l : lanes) mx = std::max(mx, l);
    bool nan = _mm256_movemask_ps(vnan) != 0;
    for (; j < n; ++j) {
      float s;
      if (mrow == nullptr) {
        s = p[j] * sc;
      } else if constexpr (std::is_same_v<M, bool>) {
        s = mrow[j * ms] ? p[j] * sc : ninf;
      } else {
        s = std::fma(p[j], sc, static_cast<float>(load(mrow[j * ms])));
      }
      p[j] = s;
      mx = std::max(mx, s);
      nan |= s != s;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : mx;
  }

  // p[j] <- exp(p[j] - mx) for j in [0, n) (mx finite); returns their sum.
  static float exp_sum(float* p, int64_t n, float mx) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      float e = vexp(p[j] - mx);
      p[j] = e;
      sum += e;
    }
    return sum;
  }

  // p[0..w) <- softmax(p * scale + mask) over keys [0, lim), 0 beyond (causal);
  // a row whose keys are all masked becomes 0 (so its output row is 0).
  // (L lanes: simd::exp_sum and the scaling; see softmax_rows)
  template <int L, typename M>
  [[gnu::always_inline]] inline void softmax_row(float* p, const M* mrow, int64_t lim, int64_t w) const {
    using F = typename simd::V<L>::F;
    const float mx = scale_mask_max(p, mrow, lim);
    std::fill(p + lim, p + w, 0.f);
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(p, p + lim, 0.f);
      return;
    }
    const float inv = 1.f / simd::exp_sum<L>(p, p, lim, mx);
    F v;
    int64_t j = 0;
    for (; j + L <= lim; j += L) simd::load<L>(v, p + j), simd::store<L>(p + j, v * inv);
    if (j < lim) simd::load_n(v, p + j, lim - j), simd::store_n(p + j, v * inv, lim - j);
  }

  // One query row qf against keys [j0, j1) of its key head (Kh, Vh, their rows kl and vl apart; mrow: the
  // row's mask at key j0, or null), with sc for j1 - j0 scores: acc[0, Ev) <-
  // sum_j exp(s_j - m) v_j; returns {m, l}: the range's max score and
  // sum_j exp(s_j - m). m = -inf, l = 0 and acc = 0 when every key is masked.
  template <typename M>
  std::pair<float, float> row_range(const float* qf, const float* Kh, int64_t kl, const float* Vh, int64_t vl,
                                    const M* mrow, int64_t j0, int64_t j1, float* sc, float* acc) const {
    const int64_t n = j1 - j0;
    for (int64_t j = 0; j < n; ++j) {
      const float* kr = Kh + (j0 + j) * kl;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t e = 0; e < E_; ++e) s += qf[e] * kr[e];
      sc[j] = s;
    }
    const float mx = scale_mask_max(sc, mrow, n);
    std::fill(acc, acc + Ev_, 0.f);
    if (mx == -std::numeric_limits<float>::infinity()) return {mx, 0.f};
    const float l = exp_sum(sc, n, mx);
    for (int64_t j = 0; j < n; ++j) {
      const float p = sc[j];
      if (p == 0.f) continue;
      const float* vr = Vh + (j0 + j) * vl;
#pragma omp simd
      for (int64_t e = 0; e < Ev_; ++e) acc[e] += p * vr[e];
    }
    return {mx, l};
  }

  // The calling thread's `floats` of workspace: its slot in the scratch, or (a thread past the
  // slots: more threads than the machine's processors) `local` on the heap.
  float* thread_slot(float* scratch, int64_t floats, std::vector<float>& local) const {
    const int tid = omp_get_thread_num();
    if (tid < slots_) return scratch + static_cast<size_t>(tid) * floats;
    local.resize(floats);
    return local.data();
  }

  // Short path: the keys rounded up to 16 lanes (Sp), so that either width's vectors stay inside a
  // row of k^T or of scores; the floats of one thread slot's workspace, k^T [E, Sp] and up to four
  // score rows [Sp].
  int64_t short_keys_padded() const { return (S_ + 15) / 16 * 16; }
  int64_t short_slot_floats() const { return (E_ + 4) * short_keys_padded(); }

  // Tasks [tb, te) of (batch, query head, block of kShortBlock query rows), in that order (a key
  // head's query heads are neighbours, so its k^T is made once per run of them); ws: the thread's
  // workspace. Per group of R query rows (4 with 16 lanes, 2 with 8): their scores as vectors of keys
  // (short_scores), softmax_row on each (scale, mask, causality, NaN and fully masked rows as the
  // GEMM path's), then their output rows in blocks of up to four vectors (short_out).
  template <int L, typename M>
  [[gnu::always_inline]] inline void short_tasks(int64_t tb, int64_t te, const float* Q, const float* K,
                                                 const float* V, const M* mask, float* O, const Str* st,
                                                 float* ws) const {
    const Str qs = st[0], ks = st[1], vs = st[2], os = st[3];
    const int64_t Sp = short_keys_padded(), nblk = (L_ + kShortBlock - 1) / kShortBlock;
    float *kt = ws, *sc = ws + E_ * Sp;
    int64_t made = -1;  // the (batch, key head) whose k^T kt holds
    for (int64_t t = tb; t < te; ++t) {
      const int64_t bh = t / nblk, b = bh / H_, h = bh % H_, kh = h / G_;
      const int64_t i0 = t % nblk * kShortBlock, i1 = std::min(L_, i0 + kShortBlock);
      if (b * Hk_ + kh != made) {
        const float* Kh = K + b * ks.b + kh * ks.h;
        for (int64_t j = 0; j < S_; ++j)
          for (int64_t e = 0; e < E_; ++e) kt[e * Sp + j] = Kh[j * ks.l + e];
        for (int64_t e = 0; e < E_; ++e) std::fill(kt + e * Sp + S_, kt + (e + 1) * Sp, 0.f);
        made = b * Hk_ + kh;
      }
      const float* Vh = V + b * vs.b + kh * vs.h;
      // R query rows at a time: each k^T row and value row loaded once for all of them
      constexpr int R = L == 16 ? 4 : 2;
      for (int64_t i = i0; i < i1; i += R) {
        const int nr = static_cast<int>(std::min<int64_t>(R, i1 - i));
        const float* q[R];
        float* o[R];
        for (int r = 0; r < R; ++r) {  // (rows past nr repeat row i: computed, not stored)
          const int64_t ir = i + (r < nr ? r : 0);
          q[r] = Q + b * qs.b + h * qs.h + ir * qs.l;
          o[r] = O + b * os.b + h * os.h + ir * os.l;
        }
        for (int64_t j0 = 0; j0 < Sp; j0 += 4 * L) {
          switch (std::min<int64_t>(4, (Sp - j0) / L)) {
            case 1: short_scores<L, 1, R>(q, kt + j0, Sp, sc + j0); break;
            case 2: short_scores<L, 2, R>(q, kt + j0, Sp, sc + j0); break;
            case 3: short_scores<L, 3, R>(q, kt + j0, Sp, sc + j0); break;
            default: short_scores<L, 4, R>(q, kt + j0, Sp, sc + j0); break;
          }
        }
        int64_t lim = 0;  // the rows' widest causal bound: a row's probabilities are 0 past its own
        for (int r = 0; r < nr; ++r) {
          const M* mrow = mask ? mask + b * mstr_[0] + h * mstr_[1] + (i + r) * mstr_[2] : nullptr;
          const int64_t lr = causal_ ? std::min(S_, i + r + 1) : S_;
          softmax_row<L>(sc + r * Sp, mrow, lr, S_);
          lim = std::max(lim, lr);
        }
        for (int64_t e0 = 0; e0 < Ev_; e0 += 4 * L) {
          const int64_t n = std::min<int64_t>(4 * L, Ev_ - e0);  // (lanes of this block)
          switch ((n + L - 1) / L) {
            case 1: short_out<L, 1, R>(sc, Sp, lim, Vh + e0, vs.l, n, o, nr, e0); break;
            case 2: short_out<L, 2, R>(sc, Sp, lim, Vh + e0, vs.l, n, o, nr, e0); break;
            case 3: short_out<L, 3, R>(sc, Sp, lim, Vh + e0, vs.l, n, o, nr, e0); break;
            default: short_out<L, 4, R>(sc, Sp, lim, Vh + e0, vs.l, n, o, nr, e0); break;
          }
        }
      }
    }
  }
  // Score rows r < R (sc + r Sp) for the keys of NV vectors: q_r . k_j as row e of k^T (kt, rows Sp
  // apart) times q_r[e] broadcast, summed over e in order (R * NV independent accumulators).
  template <int L, int NV, int R>
  [[gnu::always_inline]] inline void short_scores(const float* const* q, const float* kt, int64_t Sp,
                                                  float* sc) const {
    using F = typename simd::V<L>::F;
    F a[R][NV] = {}, k[NV], x;
    for (int64_t e = 0; e < E_; ++e) {
      for (int v = 0; v < NV; ++v) simd::load<L>(k[v], kt + e * Sp + v * L);
      for (int v = 0; v < NV; ++v) in_register(k[v]);
      for (int r = 0; r < R; ++r) {
        simd::splat<L>(x, q[r][e]);
        for (int v = 0; v < NV; ++v) a[r][v] = fmadd(x, k[v], a[r][v]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) simd::store<L>(sc + r * Sp + v * L, a[r][v]);
  }
  // Output rows r < nr, lanes [e0, e0 + n) (NV vectors, the last one's tail masked): sum over keys
  // j < lim, in order, of p_r[j] (score rows Sp apart) times value row j (rows vl apart).
  template <int L, int NV, int R>
  [[gnu::always_inline]] inline void short_out(const float* p, int64_t Sp, int64_t lim, const float* Vh, int64_t vl,
                                               int64_t n, float* const* o, int nr, int64_t e0) const {
    using F = typename simd::V<L>::F;
    F a[R][NV] = {}, v[NV], x;
    const int64_t tail = n - (NV - 1) * L;
    // (the loop twice, for a whole and a masked last vector: a test inside it, and a store loop
    // with a run-time bound below, made GCC keep the accumulators in memory, 16 stores a key)
    auto sum = [&](auto whole) {
      for (int64_t j = 0; j < lim; ++j) {
        const float* vr = Vh + j * vl;
        for (int u = 0; u < NV - 1; ++u) simd::load<L>(v[u], vr + u * L);
        if constexpr (decltype(whole)::value) simd::load<L>(v[NV - 1], vr + (NV - 1) * L);
        else simd::load_n(v[NV - 1], vr + (NV - 1) * L, tail);
        for (int u = 0; u < NV; ++u) in_register(v[u]);
        for (int r = 0; r < R; ++r) {
          simd::splat<L>(x, p[r * Sp + j]);
          for (int u = 0; u < NV; ++u) a[r][u] = fmadd(x, v[u], a[r][u]);
        }
      }
    };
    if (tail == L) sum(std::true_type{});
    else sum(std::false_type{});
    for (int r = 0; r < R; ++r) {
      if (r >= nr) break;
      float* out = o[r] + e0;
      for (int u = 0; u < NV - 1; ++u) simd::store<L>(out + u * L, a[r][u]);
      if (tail == L) simd::store<L>(out + (NV - 1) * L, a[r][NV - 1]);
      else simd::store_n(out + (NV - 1) * L, a[r][NV - 1], tail);
    }
  }
  template <typename M>
  AG_WRAPPER_AVX512 void short_tasks_avx512(int64_t tb, int64_t te, const float* Q, const float* K, const float* V,
                                            const M* mask, float* O, const Str* st, float* ws) const {
    short_tasks<16>(tb, te, Q, K, V, mask, O, st, ws);
  }
  template <typename M>
  AG_WRAPPER_AVX2 void short_tasks_avx2(int64_t tb, int64_t te, const float* Q, const float* K, const float* V,
                                        const M* mask, float* O, const Str* st, float* ws) const {
    short_tasks<8>(tb, te, Q, K, V, mask, O, st, ws);
  }

  // Short path: the tasks in parallel when there is enough work for two threads (about 64k
  // multiply-adds each), else on the calling thread (a parallel region costs more than that).
  template <typename M>
  void run_short(const float* Q, const float* K, const float* V, const M* mask, float* O, const Str* st,
                 float* scratch) const {
    const int64_t nblk = (L_ + kShortBlock - 1) / kShortBlock, tasks = B_ * H_ * nblk;
    const int64_t work = std::min(L_, kShortBlock) * S_ * (E_ + Ev_) + S_ * E_;
    const int64_t slot = short_slot_floats();
    const bool avx512 = isa::use_avx512();
    parallel_for(tasks, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, work)), [&](int64_t tb, int64_t te) {
      std::vector<float> local;
      float* ws = thread_slot(scratch, slot, local);
      if (avx512) short_tasks_avx512(tb, te, Q, K, V, mask, O, st, ws);
      else short_tasks_avx2(tb, te, Q, K, V, mask, O, st, ws);
    });
  }

  // Row kernel: parallel over query rows, or over (row, key range) items when
  // sdpa_kv_splits cuts each row's keys into ns ranges; their partials
  // {m, l, acc[Ev]} then combine per row: o = sum_c e^(m_c - m) acc_c /
  // sum_c e^(m_c - m) l_c with m = max_c m_c (0 when every m_c is -inf).
  template <typename M>
  void run_rows(const float* Q, const float* K, const float* V, const M* mask, float* O, const Str* st,
                float* scratch) const {
    const Str qs = st[0], ks = st[1], vs = st[2], os = st[3];
    const int64_t rows = B_ * H_ * L_, pw = Ev_ + 2;
    const int64_t ns = sdpa_kv_splits(rows, num_threads(), S_);
    // more threads than slots (than the machine's processors) may need more
    // partials than the scratch holds: those, like their score rows, go on the heap
    std::vector<float> heap;
    float* parts = scratch + static_cast<size_t>(slots_) * S_;
    if (ns > max_splits_) {
      heap.resize(rows * ns * pw);
      parts = heap.data();
    }
    // a split range is kSdpaMinSplit keys or more: one item is worth a thread
    const int64_t grain = ns > 1 ? 1 : std::max<int64_t>(1, 65536 / std::max<int64_t>(1, S_ * (E_ + Ev_)));
    parallel_for(rows * ns, grain, [&](int64_t wb, int64_t we) {
      std::vector<float> local;
      float* sc = thread_slot(scratch, S_, local);
      for (int64_t w = wb; w < we; ++w) {
        const int64_t r = w / ns, c = w % ns, i = r % L_, b = r / L_ / H_, h = r / L_ % H_;
        const int64_t lim = causal_ ? std::min(S_, i + 1) : S_;
        // A masked row reads only its keys from the first kept to the last kept (kept_keys): a
        // static KV cache sized for the longest generation, a batch of sequences of their own
        // lengths (left padding) attend over what they hold. A dropped key adds nothing; only a
        // NaN or inf in such a key's K would (NaN + -inf is NaN in eager), and it is never read.
        int64_t lo = 0, hi = lim;
        const M* m0 = mask ? mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2] : nullptr;  // the row's mask
        if (m0) {
          std::tie(lo, hi) = kept_keys(m0, lim);
          if (c == 0 && hi - lo < lim) g_keys_skipped.fetch_add(lim - (hi - lo), std::memory_order_relaxed);
        }
        const int64_t sp = (hi - lo + ns - 1) / ns;
        const int64_t j0 = std::min(hi, lo + c * sp), j1 = std::min(hi, j0 + sp);
        const M* mrow = m0 ? m0 + j0 * mstr_[3] : nullptr;
        const int64_t kh = h / G_;
        float *orow = O + b * os.b + h * os.h + i * os.l, *part = parts + w * pw;
        const auto [m, l] = row_range(Q + b * qs.b + h * qs.h + i * qs.l, K + b * ks.b + kh * ks.h, ks.l,
                                      V + b * vs.b + kh * vs.h, vs.l, mrow, j0, j1, sc, ns > 1 ? part + 2 : orow);
        if (ns > 1) {
          part[0] = m, part[1] = l;
        } else {  // the whole row: divide by the sum now
          const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma omp simd
          for (int64_t e = 0; e < Ev_; ++e) orow[e] *= inv;
        }
      }
    });
    if (ns == 1) return;
    g_split_runs.fetch_add(1, std::memory_order_relaxed);
    for (int64_t r = 0; r < rows; ++r) {  // combine: rows * ns * Ev flops, serial
      const float* pr = parts + r * ns * pw;
      float* orow = O + r / L_ / H_ * os.b + r / L_ % H_ * os.h + r % L_ * os.l;
      float mx = -std::numeric_limits<float>::infinity(), l = 0.f;
      bool nan = false;  // a NaN score in some range (m = NaN): the row is NaN
      for (int64_t c = 0; c < ns; ++c) mx = std::max(mx, pr[c * pw]), nan |= pr[c * pw] != pr[c * pw];
      std::fill(orow, orow + Ev_, nan ? std::numeric_limits<float>::quiet_NaN() : 0.f);
      if (nan || mx == -std::numeric_limits<float>::infinity()) continue;
      for (int64_t c = 0; c < ns; ++c) {
        const float* pc = pr + c * pw;
        if (pc[1] == 0.f) continue;  // every key of the range masked (m = -inf)
        const float f = std::exp(pc[0] - mx);
        l += f * pc[1];
#pragma omp simd
        for (int64_t e = 0; e < Ev_; ++e) orow[e] += f * pc[2 + e];
      }
      const float inv = 1.f / l;
#pragma omp simd
      for (int64_t e = 0; e < Ev_; ++e) orow[e] *= inv;
    }
  }

  bool tiles_ = false;
  int64_t tile_rows_ = 0;  // query rows per tile
  Gemms tile_gemms_[2][2];  // a tile's two GEMMs [over S keys, ranged][full tiles, the last tile's rows]
  size_t tile_pad_ = 0;    // their scratchpad, per thread slot
  DType t_, mask_t_ = DType::b8;
  int64_t B_, H_, L_, E_, Hk_, S_, Ev_, G_, chunk_ = 1;
  float scale_;
  bool causal_, has_mask_, gemm_ = false, short_ = false;
  bool blhe_[4] = {};    // q, k, v, out given (wanted) as [B, L, H, E]
  Str str_[4];           // their strides
  bool staged_[4] = {};  // copied to (from) an f32 [B, H, L, E] scratch copy
  size_t stage_off_[4] = {};  // where, in floats from floats_off_
  Shape mstr_;
  Gemms gemms_[2][2];  // [chunks of chunk_ pairs, the last chunk of fewer][all S keys, a range (trim)]
  int slots_;  // row kernel: thread slots with a score row each in the scratch
  int64_t max_splits_ = 1;  // row kernel: key splits the scratch has partials for
  size_t n_scores_ = 0;  // score floats per chunk (gemm), or per thread slots and split partials (rows)
  ScratchLayout scratch_;  // per run: scores, then the f32 copies of 16-bit inputs; the GEMMs' scratchpad
  size_t floats_off_ = 0, pad_off_ = 0;
};

std::unique_ptr<Kernel> make_sdpa(const Node& n, const BuildCtx& ctx) { return std::make_unique<SdpaKernel>(n); }

}  // namespace

int64_t sdpa_kv_splits(int64_t rows, int nt, int64_t S) {
  if (nt < 2 || rows < 1 || rows >= 2 * int64_t{nt}) return 1;
  return std::max<int64_t>(1, std::min((2 * int64_t{nt} + rows - 1) / rows, S / kSdpaMinSplit));
}

int64_t sdpa_short_max_keys() { return isa::use_avx512() ? kShortKeys : kShortKeysAvx2; }

int64_t sdpa_kv_split_runs() { return g_split_runs.load(std::memory_order_relaxed); }

int64_t sdpa_keys_skipped() { return g_keys_skipped.load(std::memory_order_relaxed); }

AG_REGISTER_OP(sdpa, {.name = "sdpa", .min_inputs = 3, .max_inputs = 4, .infer = infer_sdpa,
                      .make_kernel = make_sdpa, .props = kNoProps});

}  // namespace ag
