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
// (very long sequences), and a decode step (at most kFewRows query rows per key
// head: G * L small), run a row kernel instead: per query row, dot products,
// the exponentials against the row's max and the weighted sum of value rows,
// divided by the exponentials' sum at the end. For a decode step it is as fast
// as the GEMMs and builds no oneDNN primitive, so a new KV length costs nothing.
// When the query rows are too few to keep the threads busy (fewer than 2 per
// thread) and the keys are many, the row kernel splits each row's key range
// (split-KV, "flash-decoding"; sdpa_kv_splits decides per call from the rows,
// the thread count and S): each (row, range) item leaves its max, its sum of
// exponentials and its unnormalized weighted sum in the run's scratch, and a
// combine pass rescales them to the row's overall max (log-sum-exp) and divides.
#include <atomic>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/common.h"
#include "kernels/onednn_util.h"
#include "kernels/reduce_util.h"

namespace ag {
namespace {

std::vector<TensorType> infer_sdpa(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &q = in[0], &k = in[1], &v = in[2];
  AG_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "sdpa: q, k, v must be [B, H, L, E], got ", q.str(),
           ", ", k.str(), ", ", v.str());
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
  return {TensorType(q.dtype, {q.size(0), q.size(1), q.size(2), v.size(3)})};
}

constexpr int64_t kScoreBudget = int64_t(1) << 22;  // floats (16 MiB) of scores per chunk
constexpr int64_t kFewRows = 4;  // query rows per key head up to which the row kernel runs
std::atomic<int64_t> g_split_runs{0};  // sdpa_kv_split_runs()
std::atomic<int64_t> g_keys_skipped{0};  // sdpa_keys_skipped()

using dnnl_util::Exec;

class SdpaKernel final : public Kernel {
 public:
  explicit SdpaKernel(const Node& n) {
    auto q = n.inputs[0]->type.shape(), k = n.inputs[1]->type.shape(), v = n.inputs[2]->type.shape();
    t_ = n.inputs[0]->type.dtype;
    B_ = q[0], H_ = q[1], L_ = q[2], E_ = q[3], Hk_ = k[1], S_ = k[2], Ev_ = v[3];
    G_ = H_ / Hk_;
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
    gemm_ = B_ * H_ * L_ * Ev_ > 0 && S_ > 0 && E_ > 0 && per_head <= kScoreBudget && G_ * L_ > kFewRows;
    if (gemm_) {
      chunk_ = std::max<int64_t>(1, std::min(B_ * Hk_, kScoreBudget / per_head));
      make_gemms(chunk_, full_);
      const int64_t rest = (B_ * Hk_) % chunk_;
      if (rest) make_gemms(rest, rest_);
    }
    slots_ = std::max({omp_get_max_threads(), omp_get_num_procs(), num_threads(), 1});
    // row kernel: a score row per thread slot, then the split partials for up
    // to slots_ threads (more threads split no less: sdpa_kv_splits grows with them)
    const int64_t rows = B_ * H_ * L_;
    max_splits_ = gemm_ ? 1 : sdpa_kv_splits(rows, slots_, S_);
    n_scores_ = static_cast<size_t>(gemm_ ? chunk_ * G_ * L_ * S_
                                          : slots_ * S_ + (max_splits_ > 1 ? rows * max_splits_ * (Ev_ + 2) : 0));
    const int64_t nq = B_ * H_ * L_ * E_, nk = B_ * Hk_ * S_ * E_, nv = B_ * Hk_ * S_ * Ev_, no = B_ * H_ * L_ * Ev_;
    const size_t floats = n_scores_ + (t_ == DType::f32 ? 0 : static_cast<size_t>(nq + nk + nv + no));
    floats_off_ = scratch_.add(floats * sizeof(float));
    pad_off_ = scratch_.add(std::max({full_.qk.scratch_bytes, full_.pv.scratch_bytes, rest_.qk.scratch_bytes,
                                      rest_.pv.scratch_bytes}));
  }

  // scores (and the f32 copies of 16-bit inputs), then the GEMMs' scratchpad
  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (!gemm_) return nullptr;
    auto st = std::make_unique<State>();
    st->full = {full_.qk.make_args(), full_.pv.make_args()};
    if (rest_.qk.prim) st->rest = {rest_.qk.make_args(), rest_.pv.make_args()};
    return st;
  }

  std::string name() const override { return std::string(gemm_ ? "sdpa_gemm_" : "sdpa_rows_") + dtype_name(t_); }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (B_ * H_ * L_ * Ev_ == 0) return;
    const int64_t nq = B_ * H_ * L_ * E_, nk = B_ * Hk_ * S_ * E_, nv = B_ * Hk_ * S_ * Ev_, no = B_ * H_ * L_ * Ev_;
    const bool f32 = t_ == DType::f32;
    const size_t n_scores = n_scores_;
    float* scratch = ScratchLayout::at<float>(ctx, floats_off_);
    const float *Q = static_cast<const float*>(in[0]), *K = static_cast<const float*>(in[1]),
                *V = static_cast<const float*>(in[2]);
    float* O = static_cast<float*>(out[0]);
    if (!f32) {  // widen once, compute in f32, round once
      float* w = scratch + n_scores;
      dnnl_util::to_f32(t_, in[0], w, nq);
      dnnl_util::to_f32(t_, in[1], w + nq, nk);
      dnnl_util::to_f32(t_, in[2], w + nq + nk, nv);
      Q = w, K = w + nq, V = w + nq + nk, O = w + nq + nk + nv;
    }
    auto body = [&](const auto* mask) {
      using M = std::remove_cv_t<std::remove_pointer_t<decltype(mask)>>;
      if (gemm_)
        run_gemm<M>(Q, K, V, mask, O, scratch, *static_cast<State*>(ctx.state),
                    ScratchLayout::at(ctx, pad_off_));
      else
        run_rows<M>(Q, K, V, mask, O, scratch);
    };
    if (!has_mask_) {
      body(static_cast<const bool*>(nullptr));
    } else if (mask_t_ == DType::b8) {
      body(static_cast<const bool*>(in[3]));
    } else {
      AG_DISPATCH_FLOAT(mask_t_, "sdpa mask", [&] { body(static_cast<const scalar_t*>(in[3])); });
    }
    if (!f32) dnnl_util::from_f32(t_, O, out[0], no);
  }

 private:
  struct Gemms {
    Exec qk, pv;
  };
  struct GemmArgs {
    dnnl_util::Args qk, pv;
  };
  struct State : KernelState {
    GemmArgs full, rest;
  };

  // The two GEMMs for `nb` (batch, key head) pairs: scores = q k^T, out = p v.
  void make_gemms(int64_t nb, Gemms& g) {
    using dims = dnnl::memory::dims;
    using tag = dnnl::memory::format_tag;
    const auto f = dnnl::memory::data_type::f32;
    const int64_t M = G_ * L_;
    dnnl::memory::desc q_md(dims{nb, M, E_}, f, tag::abc);
    dnnl::memory::desc kt_md(dims{nb, E_, S_}, f, dims{S_ * E_, 1, E_});  // k^T without a copy
    dnnl::memory::desc s_md(dims{nb, M, S_}, f, tag::abc);
    dnnl::memory::desc v_md(dims{nb, S_, Ev_}, f, tag::abc);
    dnnl::memory::desc o_md(dims{nb, M, Ev_}, f, tag::abc);
    auto attr = dnnl_util::default_attr();
    dnnl::matmul::primitive_desc qk(dnnl_util::engine(), q_md, kt_md, s_md, attr);
    dnnl::matmul::primitive_desc pv(dnnl_util::engine(), s_md, v_md, o_md, attr);
    g.qk.init(dnnl::matmul(qk), qk.scratchpad_desc());
    g.qk.bind(DNNL_ARG_SRC, q_md), g.qk.bind(DNNL_ARG_WEIGHTS, kt_md), g.qk.bind(DNNL_ARG_DST, s_md);
    g.pv.init(dnnl::matmul(pv), pv.scratchpad_desc());
    g.pv.bind(DNNL_ARG_SRC, s_md), g.pv.bind(DNNL_ARG_WEIGHTS, v_md), g.pv.bind(DNNL_ARG_DST, o_md);
  }

  template <typename M>
  void run_gemm(const float* Q, const float* K, const float* V, const M* mask, float* O, float* scores, State& st,
                void* pad) const {
    const int64_t total = B_ * Hk_, rows = G_ * L_;
    for (int64_t c0 = 0; c0 < total; c0 += chunk_) {
      const int64_t nb = std::min(chunk_, total - c0);
      const Gemms& g = nb == chunk_ ? full_ : rest_;
      GemmArgs& a = nb == chunk_ ? st.full : st.rest;
      a.qk.set(DNNL_ARG_SRC, const_cast<float*>(Q + c0 * rows * E_));
      a.qk.set(DNNL_ARG_WEIGHTS, const_cast<float*>(K + c0 * S_ * E_));
      a.qk.set(DNNL_ARG_DST, scores);
      g.qk.run(a.qk, pad);
      // softmax over each score row, in place: scale, mask, causality
      parallel_for(nb * rows, std::max<int64_t>(1, 8192 / S_), [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          const int64_t bhk = c0 + r / rows, gi = r % rows, b = bhk / Hk_, h = (bhk % Hk_) * G_ + gi / L_,
                        i = gi % L_;
          const M* mrow = nullptr;
          if (mask) mrow = mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2];
          softmax_row(scores + r * S_, mrow, causal_ ? std::min(S_, i + 1) : S_);
        }
      });
      a.pv.set(DNNL_ARG_SRC, scores);
      a.pv.set(DNNL_ARG_WEIGHTS, const_cast<float*>(V + c0 * S_ * Ev_));
      a.pv.set(DNNL_ARG_DST, O + c0 * rows * Ev_);
      g.pv.run(a.pv, pad);
    }
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

  // p[0..S) <- softmax(p * scale + mask) over keys [0, lim), 0 beyond (causal);
  // a row whose keys are all masked becomes 0 (so its output row is 0).
  template <typename M>
  void softmax_row(float* p, const M* mrow, int64_t lim) const {
    const float mx = scale_mask_max(p, mrow, lim);
    std::fill(p + lim, p + S_, 0.f);
    if (mx == -std::numeric_limits<float>::infinity()) {
      std::fill(p, p + lim, 0.f);
      return;
    }
    const float inv = 1.f / exp_sum(p, lim, mx);
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) p[j] *= inv;
  }

  // One query row qf against keys [j0, j1) of its key head (Kh, Vh; mrow: the
  // row's mask at key j0, or null), with sc for j1 - j0 scores: acc[0, Ev) <-
  // sum_j exp(s_j - m) v_j; returns {m, l}: the range's max score and
  // sum_j exp(s_j - m). m = -inf, l = 0 and acc = 0 when every key is masked.
  template <typename M>
  std::pair<float, float> row_range(const float* qf, const float* Kh, const float* Vh, const M* mrow, int64_t j0,
                                    int64_t j1, float* sc, float* acc) const {
    const int64_t n = j1 - j0;
    for (int64_t j = 0; j < n; ++j) {
      const float* kr = Kh + (j0 + j) * E_;
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
      const float* vr = Vh + (j0 + j) * Ev_;
#pragma omp simd
      for (int64_t e = 0; e < Ev_; ++e) acc[e] += p * vr[e];
    }
    return {mx, l};
  }

  // Row kernel: parallel over query rows, or over (row, key range) items when
  // sdpa_kv_splits cuts each row's keys into ns ranges; their partials
  // {m, l, acc[Ev]} then combine per row: o = sum_c e^(m_c - m) acc_c /
  // sum_c e^(m_c - m) l_c with m = max_c m_c (0 when every m_c is -inf).
  template <typename M>
  void run_rows(const float* Q, const float* K, const float* V, const M* mask, float* O, float* scratch) const {
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
      int tid = omp_get_thread_num();
      std::vector<float> local;
      float* sc;
      if (tid < slots_) {
        sc = scratch + static_cast<size_t>(tid) * S_;
      } else {
        local.resize(S_);
        sc = local.data();
      }
      for (int64_t w = wb; w < we; ++w) {
        const int64_t r = w / ns, c = w % ns, i = r % L_, b = r / L_ / H_, h = r / L_ % H_;
        const int64_t lim = causal_ ? std::min(S_, i + 1) : S_;
        // A masked row reads only its keys from the first kept to the last kept (dropped: false in a
        // bool mask, -inf in an additive one, as torch makes a bool mask): a static KV cache sized
        // for the longest generation, a batch of sequences of their own lengths (left padding)
        // attend over what they hold. A dropped key adds nothing; only a NaN or inf in such a
        // key's K would (NaN + -inf is NaN in eager), and it is never read.
        int64_t lo = 0, hi = lim;
        const M* m0 = mask ? mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2] : nullptr;  // the row's mask
        if (m0) {
          const int64_t ms = mstr_[3];
          auto dropped = [&](int64_t j) {
            if constexpr (std::is_same_v<M, bool>) return !m0[j * ms];
            else return static_cast<float>(load(m0[j * ms])) == -std::numeric_limits<float>::infinity();
          };
          while (hi > 0 && dropped(hi - 1)) --hi;
          while (lo < hi && dropped(lo)) ++lo;
          if (c == 0 && hi - lo < lim) g_keys_skipped.fetch_add(lim - (hi - lo), std::memory_order_relaxed);
        }
        const int64_t sp = (hi - lo + ns - 1) / ns;
        const int64_t j0 = std::min(hi, lo + c * sp), j1 = std::min(hi, j0 + sp);
        const M* mrow = m0 ? m0 + j0 * mstr_[3] : nullptr;
        const int64_t kh = b * Hk_ + h / G_;
        float *orow = O + r * Ev_, *part = parts + w * pw;
        const auto [m, l] =
            row_range(Q + r * E_, K + kh * S_ * E_, V + kh * S_ * Ev_, mrow, j0, j1, sc, ns > 1 ? part + 2 : orow);
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
      float* orow = O + r * Ev_;
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

  DType t_, mask_t_ = DType::b8;
  int64_t B_, H_, L_, E_, Hk_, S_, Ev_, G_, chunk_ = 1;
  float scale_;
  bool causal_, has_mask_, gemm_ = false;
  Shape mstr_;
  Gemms full_, rest_;
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

int64_t sdpa_kv_split_runs() { return g_split_runs.load(std::memory_order_relaxed); }

int64_t sdpa_keys_skipped() { return g_keys_skipped.load(std::memory_order_relaxed); }

AG_REGISTER_OP(sdpa, {.name = "sdpa", .min_inputs = 3, .max_inputs = 4, .infer = infer_sdpa,
                      .make_kernel = make_sdpa, .props = kNoProps});

}  // namespace ag
