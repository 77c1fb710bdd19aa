// "sdpa"(q, k, v[, mask]){scale, is_causal, has_mask}: scaled dot-product
// attention, softmax(q k^T * scale + mask) v, for q [B, H, L, E],
// k [B, Hk, S, E], v [B, Hk, S, Ev] with H % Hk == 0 (query head h reads key
// head h / (H / Hk), like enable_gqa). mask: bool (True = keep) or an additive
// float mask, broadcastable to [B, H, L, S]. is_causal keeps keys j <= i
// (top-left aligned, as torch). Rows where every key is masked give 0, like
// PyTorch's CPU attention kernels.
//
// A straightforward row kernel: per query row, the scores against all keys
// (contiguous dot products), a numerically stable softmax (max subtracted) and
// the weighted sum of value rows, all in f32. Work is split over (b, h, block
// of query rows). 16-bit inputs: k and v are widened to f32 once per call.
#include <limits>

#include "kernels/common.h"

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

template <typename T>
void widen(const T* src, float* dst, int64_t n) {
  parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(load(src[i]));
  });
}

class SdpaKernel final : public Kernel {
 public:
  explicit SdpaKernel(const Node& n) {
    auto q = n.inputs[0]->type.shape(), k = n.inputs[1]->type.shape(), v = n.inputs[2]->type.shape();
    t_ = n.inputs[0]->type.dtype;
    B_ = q[0], H_ = q[1], L_ = q[2], E_ = q[3], Hk_ = k[1], S_ = k[2], Ev_ = v[3];
    scale_ = static_cast<float>(n.attrs.f("scale"));
    causal_ = n.attrs.b("is_causal", false);
    has_mask_ = n.inputs.size() > 3;
    if (has_mask_) {
      mask_t_ = n.inputs[3]->type.dtype;
      Shape ms = n.inputs[3]->type.shape();
      while (ms.size() < 4) ms.insert(ms.begin(), 1);
      mstr_ = broadcast_strides(ms, {B_, H_, L_, S_});
    }
    if (t_ != DType::f32) {
      k32_.resize(B_ * Hk_ * S_ * E_);
      v32_.resize(B_ * Hk_ * S_ * Ev_);
    }
    nblk_ = (L_ + kRows - 1) / kRows;
    slots_ = std::max({omp_get_max_threads(), omp_get_num_procs(), num_threads()});
    per_slot_ = S_ + E_ + Ev_;
    scratch_.resize(static_cast<size_t>(slots_) * per_slot_);
  }

  std::string name() const override { return std::string("sdpa_") + dtype_name(t_); }

  void run(void* const* in, void* const* out) override {
    if (B_ * H_ * L_ * Ev_ == 0) return;
    AG_DISPATCH_FLOAT(t_, "sdpa", [&] {
      const float *K, *V;
      if constexpr (std::is_same_v<scalar_t, float>) {
        K = static_cast<const float*>(in[1]);
        V = static_cast<const float*>(in[2]);
      } else {
        widen(static_cast<const scalar_t*>(in[1]), k32_.data(), static_cast<int64_t>(k32_.size()));
        widen(static_cast<const scalar_t*>(in[2]), v32_.data(), static_cast<int64_t>(v32_.size()));
        K = k32_.data();
        V = v32_.data();
      }
      const scalar_t* Q = static_cast<const scalar_t*>(in[0]);
      scalar_t* O = static_cast<scalar_t*>(out[0]);
      if (!has_mask_) {
        compute<scalar_t, bool, false>(Q, K, V, nullptr, O);
      } else if (mask_t_ == DType::b8) {
        compute<scalar_t, bool, true>(Q, K, V, static_cast<const bool*>(in[3]), O);
      } else {
        AG_DISPATCH_FLOAT(mask_t_, "sdpa mask", [&] {
          using mask_t = scalar_t;
          compute<std::remove_cv_t<std::remove_pointer_t<decltype(Q)>>, mask_t, true>(
              Q, K, V, static_cast<const mask_t*>(in[3]), O);
        });
      }
    });
  }

 private:
  static constexpr int64_t kRows = 16;

  template <typename T, typename M, bool kMask>
  void compute(const T* Q, const float* K, const float* V, const M* mask, T* O) {
    const int64_t work = B_ * H_ * nblk_;
    const int64_t grp = H_ / Hk_;
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kRows * S_ * (E_ + Ev_)));
    parallel_for(work, grain, [&](int64_t wb, int64_t we) {
      int tid = omp_get_thread_num();
      std::vector<float> local;
      float* buf;
      if (tid < slots_) {
        buf = scratch_.data() + static_cast<size_t>(tid) * per_slot_;
      } else {
        local.resize(per_slot_);
        buf = local.data();
      }
      float* sc = buf;
      float* qf = sc + S_;
      float* acc = qf + E_;
      for (int64_t w = wb; w < we; ++w) {
        const int64_t blk = w % nblk_, bh = w / nblk_, b = bh / H_, h = bh % H_;
        const int64_t hk = h / grp;
        const float* Kh = K + (b * Hk_ + hk) * S_ * E_;
        const float* Vh = V + (b * Hk_ + hk) * S_ * Ev_;
        const int64_t i0 = blk * kRows, i1 = std::min(L_, i0 + kRows);
        for (int64_t i = i0; i < i1; ++i) {
          const T* qrow = Q + ((b * H_ + h) * L_ + i) * E_;
          T* orow = O + ((b * H_ + h) * L_ + i) * Ev_;
          for (int64_t e = 0; e < E_; ++e) qf[e] = static_cast<float>(load(qrow[e]));
          const int64_t lim = causal_ ? std::min(S_, i + 1) : S_;
          float mx = -std::numeric_limits<float>::infinity();
          const M* mrow = nullptr;
          if constexpr (kMask) mrow = mask + b * mstr_[0] + h * mstr_[1] + i * mstr_[2];
          for (int64_t j = 0; j < lim; ++j) {
            const float* kr = Kh + j * E_;
            float s = 0.f;
#pragma omp simd reduction(+ : s)
            for (int64_t e = 0; e < E_; ++e) s += qf[e] * kr[e];
            s *= scale_;
            if constexpr (kMask) {
              if constexpr (std::is_same_v<M, bool>) {
                if (!mrow[j * mstr_[3]]) s = -std::numeric_limits<float>::infinity();
              } else {
                s += static_cast<float>(load(mrow[j * mstr_[3]]));
              }
            }
            sc[j] = s;
            mx = std::max(mx, s);
          }
          for (int64_t e = 0; e < Ev_; ++e) acc[e] = 0.f;
          if (mx == -std::numeric_limits<float>::infinity()) {  // every key masked: 0, as PyTorch's CPU kernels
            for (int64_t e = 0; e < Ev_; ++e) store(orow[e], static_cast<acc_t<T>>(0.f));
            continue;
          }
          float sum = 0.f;
          for (int64_t j = 0; j < lim; ++j) {
            float p = std::exp(sc[j] - mx);
            sum += p;
            if (p == 0.f) continue;
            const float* vr = Vh + j * Ev_;
#pragma omp simd
            for (int64_t e = 0; e < Ev_; ++e) acc[e] += p * vr[e];
          }
          const float inv = 1.f / sum;
          for (int64_t e = 0; e < Ev_; ++e) store(orow[e], static_cast<acc_t<T>>(acc[e] * inv));
        }
      }
    });
  }

  DType t_, mask_t_ = DType::b8;
  int64_t B_, H_, L_, E_, Hk_, S_, Ev_, nblk_;
  float scale_;
  bool causal_, has_mask_;
  Shape mstr_;
  std::vector<float> k32_, v32_, scratch_;
  int slots_;
  int64_t per_slot_;
};

std::unique_ptr<Kernel> make_sdpa(const Node& n) { return std::make_unique<SdpaKernel>(n); }

}  // namespace

AG_REGISTER_OP(sdpa, {.name = "sdpa", .min_inputs = 3, .max_inputs = 4, .infer = infer_sdpa,
                      .make_kernel = make_sdpa, .props = kNoProps});

}  // namespace ag
