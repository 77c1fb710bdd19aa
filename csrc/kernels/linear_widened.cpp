// "linear"(x, w[, bias]) whose constant weights are read in a narrower dtype than the arithmetic and
// widened by the kernel, never into a lasting f32 copy:
//  - weight-only int8: x [.., K] float32 or bfloat16, w [N, K] int8 (torchao's Int8WeightOnlyConfig,
//    gpt-fast's int8 weights). The weight's integer values are the matrix; the per-channel scale is a
//    post-op of the node (canonicalize and fuse_epilogues put torchao's `mm(x, w.to(float)) * scale +
//    bias` into this form);
//  - bfloat16 x and w on a CPU where oneDNN has no native bf16 matmul (AVX2): the f32 emulation would
//    otherwise keep a widened f32 copy of every weight, twice the model's bytes.
// The weight bytes are read where they are stored (the parameter's own memory):
//  - few rows (decode): a GEMV that widens each weight in registers (kernels/gemv.h);
//  - more rows: the weights are widened one block of columns at a time into the call's scratch
//    and multiplied there by oneDNN's f32 matmul, so the f32 bytes of a block live only while
//    it is used (the cost of widening is spread over the rows).
// Products are summed in f32; a bfloat16 x is widened once and the result rounded once.
#include <type_traits>

#include "kernels/common.h"
#include "kernels/epilogue.h"
#include "kernels/gemv.h"
#include "kernels/onednn_util.h"

namespace ag {
namespace {

using namespace dnnl_util;
constexpr size_t kNone = ScratchLayout::kNone;

template <typename W>
class WidenedLinearKernel final : public Kernel {
 public:
  WidenedLinearKernel(const Node& n, int64_t M, int64_t K, int64_t N) : M_(M), K_(K), N_(N) {
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
    if (t_ != DType::f32) {
      x_f32_ = scratch_.add(M * K * 4);
      out_f32_ = scratch_.add(M * N * 4);
    }
    if (M * N == 0) return;
    if (M <= kGemvRows || K == 0) {
      gemv_ = true;
      name_ = std::string("gemv_") + wname() + "_weights_" + dtype_name(t_);
      return;
    }
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
    if (gemv_ || nb_ == 0) return nullptr;
    auto st = std::make_unique<State>();
    st->full = full_.make_args();
    if (N_ % nb_) st->tail = tail_.make_args();
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (M_ * N_ == 0) return;
    const float* x = static_cast<const float*>(in[0]);
    if (t_ != DType::f32) {
      float* xf = ScratchLayout::at<float>(ctx, x_f32_);
      to_f32(t_, in[0], xf, M_ * K_);
      x = xf;
    }
    const float* bias = nullptr;
    if (has_bias_) {
      bias = bias_c_.data() ? static_cast<const float*>(bias_c_.data()) : static_cast<const float*>(in[2]);
      if (bias_s_ != kNone) {
        float* b = ScratchLayout::at<float>(ctx, bias_s_);
        to_f32(t_, in[2], b, N_);
        bias = b;
      }
    }
    float* o = t_ == DType::f32 ? static_cast<float*>(out[0]) : ScratchLayout::at<float>(ctx, out_f32_);
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
  static const char* wname() { return std::is_same_v<W, int8_t> ? "int8" : "bfloat16"; }
  struct State : KernelState {
    Args full, tail;
  };

  int64_t M_, K_, N_, nb_ = 0;
  DType t_ = DType::f32;
  const W* w_ = nullptr;
  bool has_bias_ = false, gemv_ = false;
  Buffer bias_c_;
  epi::Epilogue epi_;
  Exec full_, tail_;
  ScratchLayout scratch_;
  size_t x_f32_ = kNone, out_f32_ = kNone, bias_s_ = kNone, w_blk_ = kNone, pad_ = kNone;
  std::string name_, impl_;
};

}  // namespace

std::unique_ptr<Kernel> make_linear_widened(const Node& n, int64_t M, int64_t K, int64_t N) {
  if (n.inputs[1]->type.dtype == DType::i8) return std::make_unique<WidenedLinearKernel<int8_t>>(n, M, K, N);
  return std::make_unique<WidenedLinearKernel<uint16_t>>(n, M, K, N);
}

}  // namespace ag
