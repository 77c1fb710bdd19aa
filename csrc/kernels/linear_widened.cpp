// "linear"(x, w[, bias]) whose constant weights are read in a narrower dtype than the arithmetic and
// widened by the kernel, never into a lasting f32 copy:
//  - weight-only int8: x [.., K] float32 or bfloat16, w [N, K] int8 (torchao's Int8WeightOnlyConfig,
//    gpt-fast's int8 weights). The weight's integer values are the matrix; the per-channel scale is a
//    post-op of the node (canonicalize and fuse_epilogues put torchao's `mm(x, w.to(float)) * scale +
//    bias` into this form);
//  - bfloat16 x and w on a CPU where oneDNN has no native bf16 matmul (AVX2): the f32 emulation would
//    otherwise keep a widened f32 copy of every weight, twice the model's bytes.
// The weight bytes are read where they are stored (the parameter's own memory):
//  - few rows (decode): a GEMV that widens each weight in registers (kernels/gemv.h), or for int8
//    weights with int8_activations on an AVX-512 VNNI CPU, sums int8 products of x quantized per row
//    (gemv::dot8_u8s8; init_vnni below);
//  - more rows: the weights are widened one block of columns at a time into the call's scratch
//    and multiplied there by oneDNN's f32 matmul, so the f32 bytes of a block live only while
//    it is used (the cost of widening is spread over the rows).
// Products are summed in f32; a bfloat16 x is widened once and the result rounded once.
//
// int8 weights with more rows than a GEMV takes (prefill, encoders) run int8 products instead when
// BuildCtx::int8_activations is set (CompilerConfig.int8_activations="per_row", the default): each row
// of x is quantized at run time to int8 with its own scale (amax / 127, round to nearest even), oneDNN's
// s8 x s8 -> f32 matmul reads the weights in place (AVX-512 VNNI or AMX; on a CPU with neither the
// exact path runs), and the row's scale multiplies its sums. The error is the rounding of x to 8 bits (about
// amax / 440 * |w| per product sum); a row holding inf or nan is computed exactly.
#include <type_traits>

#include "kernels/common.h"
#include "kernels/epilogue.h"
#include "kernels/gemv.h"
#include "kernels/int8_rows.h"
#include "kernels/onednn_util.h"

namespace ag {
namespace {

using namespace dnnl_util;
constexpr size_t kNone = ScratchLayout::kNone;

template <typename W>
class WidenedLinearKernel final : public Kernel {
 public:
  WidenedLinearKernel(const Node& n, const BuildCtx& ctx, int64_t M, int64_t K, int64_t N) : M_(M), K_(K), N_(N) {
    t_ = n.inputs[0]->type.dtype;
    const Value* w = n.inputs[1];
    AG_CHECK(w->is_const() && w->storage, "linear: int8 weights must be a constant (a bound parameter) for '",
             n.name, "'");
    w_ = static_cast<const W*>(w->storage->data);
    epi_ = epi::parse(n, Shape{M, N}, false);
    if (epi::base_inputs(n.inputs.size(), n.attrs) > 2) {
      has_bias_ = true;
      const Value* b = n.inputs[2];
      if (b->is_const() && b->storage) {  // widened once
        bias_c_ = alloc_buffer(N * 4);
        to_f32(t_, b->storage->data, static_cast<float*>(bias_c_.data()), N);
      } else if (t_ != DType::f32) {
        bias_s_ = scratch_.add(N * 4);
      }
    }
    if (t_ != DType::f32) out_f32_ = scratch_.add(M * N * 4);
    if (M * N == 0) return;
    if (M <= kGemvRows || K == 0) {
      gemv_ = true;
      if (t_ != DType::f32) x_f32_ = scratch_.add(M * K * 4);
      name_ = std::string("gemv_") + wname() + "_weights_" + dtype_name(t_);
      if constexpr (std::is_same_v<W, int8_t>) {
        if (ctx.int8_activations && K <= gemv::kVnniMaxK && gemv::has_avx512_vnni()) init_vnni();
      }
      return;
    }
    if constexpr (std::is_same_v<W, int8_t>) {
      if (ctx.int8_activations && init_int8()) return;
    }
    if (t_ != DType::f32) x_f32_ = scratch_.add(M * K * 4);
    // Blocks of about 2 MB of widened weights (in L2 on most CPUs), a multiple of 16 columns.
    nb_ = std::min<int64_t>(N, std::max<int64_t>(16, (int64_t{2} << 20) / (4 * K) / 16 * 16));
    // (a block is [nb, K] widened weight rows, read as its [K, nb] transpose, writing columns n0..)
    impl_ = init_panel_matmul(full_, M, K, nb_, N, /*k_inner=*/true, has_bias_);
    if (N % nb_) init_panel_matmul(tail_, M, K, N % nb_, N, true, has_bias_);
    w_blk_ = scratch_.add(nb_ * K * 4);
    pad_ = scratch_.add(std::max(full_.scratch_bytes, tail_.scratch_bytes));
    name_ = std::string("onednn_matmul_f32_") + wname() + "_weights_" + dtype_name(t_) + " (" + impl_ +
            ", weights widened per block of " + std::to_string(nb_) + " columns)";
  }

  std::string name() const override { return name_; }
  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (int8_) {
      auto st = std::make_unique<State>();
      st->full = full_.make_args();
      return st;
    }
    if (gemv_ || nb_ == 0) return nullptr;
    auto st = std::make_unique<State>();
    st->full = full_.make_args();
    if (N_ % nb_) st->tail = tail_.make_args();
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (M_ * N_ == 0) return;
    if (int8_) return run_int8(in, out, ctx);
    if (vnni_ && run_vnni(in, out, ctx)) return;  // (false: a row holds inf or nan, summed exactly below)
    const float* x = static_cast<const float*>(in[0]);
    if (t_ != DType::f32) {
      float* xf = ScratchLayout::at<float>(ctx, x_f32_);
      to_f32(t_, in[0], xf, M_ * K_);
      x = xf;
    }
    const float* bias = bias_f32(in, ctx);
    float* o = out_f32(out, ctx);
    if (gemv_) {
      // (x is float32 or bfloat16: infer_linear; the GEMV rounds a bf16 result itself)
      gemv::run(x, w_, M_, N_, K_, bias, o, t_ == DType::bf16 ? static_cast<uint16_t*>(out[0]) : nullptr, epi_, in);
      return;
    }
    State* st = static_cast<State*>(ctx.state);
    float* wb = ScratchLayout::at<float>(ctx, w_blk_);
    for (int64_t n0 = 0; n0 < N_; n0 += nb_) {
      const int64_t nb = std::min(nb_, N_ - n0);
      const W* wsrc = w_ + n0 * K_;
      parallel_for(nb * K_, 16384, [&](int64_t b, int64_t e) {
        int64_t i = b;
        for (; i + 8 <= e; i += 8) _mm256_storeu_ps(wb + i, gemv::load8(wsrc + i));
        for (; i < e; ++i) wb[i] = gemv::load1(wsrc + i);
      });
      const bool full = nb == nb_;
      Args& a = full ? st->full : st->tail;
      a.set(DNNL_ARG_SRC, const_cast<float*>(x));
      a.set(DNNL_ARG_WEIGHTS, wb);
      a.set(DNNL_ARG_DST, o + n0);
      if (has_bias_) a.set(DNNL_ARG_BIAS, const_cast<float*>(bias + n0));
      (full ? full_ : tail_).run(a, ScratchLayout::at(ctx, pad_));
    }
    epi_.apply_all(o, M_, in, 0);
    if (t_ != DType::f32) from_f32(t_, o, out[0], M_ * N_);
  }

 private:
  static constexpr int64_t kGemvRows = gemv::kGemvMaxRows;

  float* out_f32(void* const* out, const RunCtx& ctx) const {
    return t_ == DType::f32 ? static_cast<float*>(out[0]) : ScratchLayout::at<float>(ctx, out_f32_);
  }
  const float* bias_f32(void* const* in, const RunCtx& ctx) const {
    if (!has_bias_) return nullptr;
    if (bias_c_.data()) return static_cast<const float*>(bias_c_.data());
    if (bias_s_ == kNone) return static_cast<const float*>(in[2]);
    float* b = ScratchLayout::at<float>(ctx, bias_s_);
    to_f32(t_, in[2], b, N_);
    return b;
  }

  // oneDNN's s8 x s8 -> f32 matmul of the quantized rows [M, K] with the weights as stored ([N, K],
  // read as their [K, N] transpose); false (the exact path is built instead) where it would not run
  // on VNNI/AMX (init_panel_matmul_s8).
  bool init_int8() {
    impl_ = init_panel_matmul_s8(full_, M_, K_, N_, N_, /*k_inner=*/true);
    if (impl_.empty()) return false;
    int8_ = true;
    q_ = scratch_.add(M_ * K_);
    row_scale_ = scratch_.add(M_ * 4);
    row_f32_ = scratch_.add(K_ * 4);
    pad_ = scratch_.add(full_.scratch_bytes);
    name_ = std::string("onednn_matmul_s8s8_int8_weights_") + dtype_name(t_) + " (" + impl_ +
            ", activations quantized per row)";
    return true;
  }

  void run_int8(void* const* in, void* const* out, const RunCtx& ctx) const {
    int8_t* q = ScratchLayout::at<int8_t>(ctx, q_);
    float* rs = ScratchLayout::at<float>(ctx, row_scale_);
    // (a row's scale is NaN when it holds inf or nan: computed exactly below)
    if (t_ == DType::f32) int8_rows::quantize_rows(static_cast<const float*>(in[0]), M_, K_, q, rs);
    else int8_rows::quantize_rows(static_cast<const uint16_t*>(in[0]), M_, K_, q, rs);
    float* o = out_f32(out, ctx);
    State* st = static_cast<State*>(ctx.state);
    st->full.set(DNNL_ARG_SRC, q);
    st->full.set(DNNL_ARG_WEIGHTS, const_cast<W*>(w_));
    st->full.set(DNNL_ARG_DST, o);
    full_.run(st->full, ScratchLayout::at(ctx, pad_));
    const float* bias = bias_f32(in, ctx);
    for (int64_t m = 0; m < M_; ++m) {
      if (!std::isnan(rs[m])) continue;
      // (f32 sums of the exact products, like the GEMV: inf and nan reach the outputs they reach in eager)
      float* xr = ScratchLayout::at<float>(ctx, row_f32_);
      to_f32(t_, static_cast<const char*>(in[0]) + m * K_ * dtype_size(t_), xr, K_);
      gemv::run(xr, w_, 1, N_, K_, nullptr, o + m * N_, nullptr, epi::Epilogue{}, in);
      rs[m] = 1.f;
    }
    // Each row's scale and the bias, then the node's epilogue, a block of rows and columns at a time.
    const int64_t cb = std::min<int64_t>(N_, 4096);
    const int64_t nblk = (N_ + cb - 1) / cb;
    parallel_for(M_ * nblk, 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t m = i / nblk, j0 = i % nblk * cb, n = std::min(cb, N_ - j0);
        float* r = o + m * N_ + j0;
        const float s = rs[m];
        if (bias)
          for (int64_t j = 0; j < n; ++j) r[j] = r[j] * s + bias[j0 + j];
        else
          for (int64_t j = 0; j < n; ++j) r[j] *= s;
        if (!epi_.empty()) epi_.apply(r, m, j0, n, in, 0);
        if (t_ != DType::f32) from_f32(t_, r, static_cast<uint16_t*>(out[0]) + m * N_ + j0, n);
      }
    });
  }

  // The decode GEMV on int8 products (AVX-512 VNNI): each row of x quantized per row as in run_int8,
  // stored as u8 (+ 128) for vpdpbusd; the weights' row sums (made once here) take the 128 back out.
  void init_vnni() {
    vnni_ = true;
    row_sum_.resize(N_);
    parallel_for(N_, 64, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) {
        int32_t t = 0;
        for (int64_t k = 0; k < K_; ++k) t += w_[n * K_ + k];
        row_sum_[n] = t;
      }
    });
    q_ = scratch_.add(M_ * K_);
    row_scale_ = scratch_.add(M_ * 4);
    name_ += " (VNNI u8s8, activations quantized per row)";
  }

  bool run_vnni(void* const* in, void* const* out, const RunCtx& ctx) const {
    if constexpr (!std::is_same_v<W, int8_t>) {
      return false;  // (init_vnni is only called for int8 weights)
    } else {
      uint8_t* q = ScratchLayout::at<uint8_t>(ctx, q_);
      float* rs = ScratchLayout::at<float>(ctx, row_scale_);
      for (int64_t m = 0; m < M_; ++m) {
        int8_t* qm = reinterpret_cast<int8_t*>(q + m * K_);
        rs[m] = t_ == DType::f32 ? int8_rows::quantize(static_cast<const float*>(in[0]) + m * K_, K_, qm)
                                 : int8_rows::quantize(static_cast<const uint16_t*>(in[0]) + m * K_, K_, qm);
        if (std::isnan(rs[m])) return false;
        for (int64_t k = 0; k < K_; ++k) q[m * K_ + k] ^= 0x80;  // int8 -> u8 (+ 128)
      }
      const float* bias = bias_f32(in, ctx);
      float* o = out_f32(out, ctx);
      uint16_t* ob = t_ == DType::bf16 ? static_cast<uint16_t*>(out[0]) : nullptr;
      parallel_for(N_, std::max<int64_t>(4, 65536 / std::max<int64_t>(K_, 1)), [&](int64_t nb, int64_t ne) {
        int32_t s[8];
        for (int64_t m = 0; m < M_; ++m) {
          const uint8_t* xm = q + m * K_;
          float* om = o + m * N_;
          int64_t n = nb;
          for (; n + 8 <= ne; n += 8) {
            gemv::dot8_u8s8(xm, w_ + n * K_, K_, s);
            for (int i = 0; i < 8; ++i) om[n + i] = rs[m] * static_cast<float>(s[i] - 128 * row_sum_[n + i]);
          }
          for (; n < ne; ++n)
            om[n] = rs[m] * static_cast<float>(gemv::dot1_u8s8(xm, w_ + n * K_, K_) - 128 * row_sum_[n]);
          float* seg = om + nb;
          if (bias)
            for (int64_t j = 0; j < ne - nb; ++j) seg[j] += bias[nb + j];
          if (!epi_.empty()) epi_.apply(seg, m, nb, ne - nb, in, 0);
          if (ob)
            for (int64_t j = 0; j < ne - nb; ++j) ob[m * N_ + nb + j] = f32_to_bf16(seg[j]);
        }
      });
      return true;
    }
  }

  static const char* wname() { return std::is_same_v<W, int8_t> ? "int8" : "bfloat16"; }
  struct State : KernelState {
    Args full, tail;
  };

  int64_t M_, K_, N_, nb_ = 0;
  DType t_ = DType::f32;
  const W* w_ = nullptr;
  bool has_bias_ = false, gemv_ = false, int8_ = false, vnni_ = false;
  std::vector<int32_t> row_sum_;  // the VNNI GEMV's: sum of each weight row
  Buffer bias_c_;
  epi::Epilogue epi_;
  Exec full_, tail_;
  ScratchLayout scratch_;
  size_t x_f32_ = kNone, out_f32_ = kNone, bias_s_ = kNone, w_blk_ = kNone, pad_ = kNone;
  size_t q_ = kNone, row_scale_ = kNone, row_f32_ = kNone;  // the int8 path's
  std::string name_, impl_;
};

}  // namespace

std::unique_ptr<Kernel> make_linear_widened(const Node& n, const BuildCtx& ctx, int64_t M, int64_t K, int64_t N) {
  if (n.inputs[1]->type.dtype == DType::i8) return std::make_unique<WidenedLinearKernel<int8_t>>(n, ctx, M, K, N);
  return std::make_unique<WidenedLinearKernel<uint16_t>>(n, ctx, M, K, N);
}

}  // namespace ag
