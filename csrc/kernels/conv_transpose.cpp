// "conv_transpose"(x, w[, bias]){stride, padding, output_padding, dilation, groups}:
// 1-D, 2-D and 3-D transposed convolution (PyTorch's conv_transpose*d) on
// oneDNN's deconvolution primitive. x [N, C, *spatial], w in PyTorch's
// transposed layout [C, O / groups, *kernel], bias [O]; output [N, O, *out] with
// out = (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
// The weight is described to oneDNN with strides over PyTorch's bytes (no copy);
// a constant weight is prepacked once. Activations go through the primitive's
// preferred layout with prebuilt reorders, like "conv". When output_padding
// exceeds padding (a negative right padding, which oneDNN refuses), the
// primitive computes the positions any input reaches and the rest of the
// output is the bias. 16-bit dtypes without a native implementation are
// computed in f32.
#include "kernels/common.h"
#include "kernels/onednn_util.h"

namespace ag {
namespace {

using namespace dnnl_util;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct DeconvParams {
  Shape stride, padding, output_padding, dilation;
  int64_t groups;
};

DeconvParams deconv_params(const Attrs& a, int64_t sp) {
  DeconvParams p{a.ints("stride", Shape(sp, 1)), a.ints("padding", Shape(sp, 0)),
                 a.ints("output_padding", Shape(sp, 0)), a.ints("dilation", Shape(sp, 1)), a.i("groups", 1)};
  auto fix = [&](Shape& v, const char* what) {
    if (v.size() == 1 && sp > 1) v = Shape(sp, v[0]);
    AG_CHECK(static_cast<int64_t>(v.size()) == sp, "conv_transpose: ", what, " ", shape_str(v), " does not match ",
             sp, " spatial dims");
  };
  fix(p.stride, "stride");
  fix(p.padding, "padding");
  fix(p.output_padding, "output_padding");
  fix(p.dilation, "dilation");
  for (int64_t i = 0; i < sp; ++i) {
    AG_CHECK(p.stride[i] >= 1, "conv_transpose: stride must be >= 1, got ", shape_str(p.stride));
    AG_CHECK(p.padding[i] >= 0, "conv_transpose: padding must be >= 0, got ", shape_str(p.padding));
    AG_CHECK(p.dilation[i] >= 1, "conv_transpose: dilation must be >= 1, got ", shape_str(p.dilation));
    AG_CHECK(p.output_padding[i] >= 0 && p.output_padding[i] < std::max(p.stride[i], p.dilation[i]),
             "conv_transpose: output_padding must be >= 0 and smaller than stride or dilation, got ",
             shape_str(p.output_padding));
  }
  AG_CHECK(p.groups >= 1, "conv_transpose: groups must be >= 1, got ", p.groups);
  return p;
}

std::vector<TensorType> infer_deconv(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &x = in[0], &w = in[1];
  AG_CHECK(x.rank() >= 3 && x.rank() <= 5,
           "conv_transpose: input must be [N, C, *spatial] with 1 to 3 spatial dims, got ", x.str());
  AG_CHECK(w.rank() == x.rank(), "conv_transpose: weight ", w.str(), " must have the input's rank (", x.rank(), ")");
  AG_CHECK(x.dtype == w.dtype, "conv_transpose: dtypes differ: input ", x.str(), ", weight ", w.str());
  AG_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16, "conv_transpose: dtype ",
           dtype_name(x.dtype), " is not supported (float32, bfloat16, float16)");
  AG_CHECK(in.size() == 2 || in.size() == 3, "conv_transpose: takes x, w and an optional bias, got ", in.size(),
           " inputs");
  const int64_t sp = x.rank() - 2;
  DeconvParams p = deconv_params(a, sp);
  const int64_t C = x.size(1), O = w.size(1) * p.groups;
  AG_CHECK(C == w.size(0), "conv_transpose: input ", x.str(), " has ", C, " channels but weight ", w.str(),
           " expects ", w.size(0));
  AG_CHECK(C % p.groups == 0, "conv_transpose: ", C, " input channels are not divisible by groups=", p.groups);
  if (in.size() > 2) {
    AG_CHECK(in[2].rank() == 1 && in[2].size(0) == O, "conv_transpose: bias must be [", O, "], got ", in[2].str());
    AG_CHECK(in[2].dtype == x.dtype, "conv_transpose: bias dtype ", dtype_name(in[2].dtype), " differs from ",
             dtype_name(x.dtype));
  }
  Shape o{x.size(0), O};
  for (int64_t i = 0; i < sp; ++i) {
    const int64_t n = (x.size(2 + i) - 1) * p.stride[i] - 2 * p.padding[i] + p.dilation[i] * (w.size(2 + i) - 1) +
                      p.output_padding[i] + 1;
    AG_CHECK(n > 0, "conv_transpose: input ", x.str(), " with weight ", w.str(), " gives an empty output");
    o.push_back(n);
  }
  return {TensorType(x.dtype, o)};
}

class DeconvKernel final : public Kernel {
 public:
  DeconvKernel(const Node& n, const BuildCtx& ctx) {
    t_ = n.inputs[0]->type.dtype;
    xs_ = n.inputs[0]->type.shape();
    ws_ = n.inputs[1]->type.shape();
    os_ = n.outputs[0]->type.shape();
    has_bias_ = n.inputs.size() > 2;
    x_n_ = TensorType(t_, xs_).numel();
    w_n_ = TensorType(t_, ws_).numel();
    o_n_ = TensorType(t_, os_).numel();
    O_ = os_[1];
    const int64_t sp = static_cast<int64_t>(xs_.size()) - 2;
    DeconvParams p = deconv_params(n.attrs, sp);
    in_nhwc_ = ctx.nhwc(n.inputs[0]->id);  // channels-last values (deconv_channels_last)
    out_nhwc_ = ctx.nhwc(n.outputs[0]->id);
    const void* w_const = n.inputs[1]->is_const() ? n.inputs[1]->storage->data : nullptr;
    const void* b_const = has_bias_ && n.inputs[2]->is_const() ? n.inputs[2]->storage->data : nullptr;
    w_const_ = w_const != nullptr;
    if (t_ != DType::f32) out_f32_ = scratch_.add(o_n_ * 4);  // used by the bias-only paths
    if (has_bias_) bias_f32_ = scratch_.add(O_ * 4);
    if (o_n_ == 0) {
      empty_ = true;
      return;
    }
    if (x_n_ == 0 || w_n_ == 0) {  // no input channels: out = bias
      zero_ = true;
      name_ = "conv_transpose_zero_channels";
      return;
    }
    // The primitive computes dst dims ds_ (<= os_): right padding pad - output_padding, clamped at 0.
    dnnl::memory::dims strides(p.stride.begin(), p.stride.end()), pad_l(p.padding.begin(), p.padding.end()), pad_r,
        dil;
    ds_ = os_;
    for (int64_t i = 0; i < sp; ++i) {
      dil.push_back(p.dilation[i] - 1);
      const int64_t r = p.padding[i] - p.output_padding[i];
      pad_r.push_back(std::max<int64_t>(r, 0));
      if (r < 0) {
        ds_[2 + i] += r;
        cropped_ = true;
      }
    }
    d_n_ = TensorType(t_, ds_).numel();
    // weights: PyTorch's [C, O/G, *k] = [G, C/G, O/G, *k] bytes, seen by oneDNN as [G, O/G, C/G, *k]
    const int64_t G = p.groups, CG = ws_[0] / G, OG = ws_[1];
    int64_t K = 1;
    for (int64_t i = 0; i < sp; ++i) K *= ws_[2 + i];
    Shape wg{G, OG, CG}, wst{CG * OG * K, K, OG * K};
    Shape kst = contiguous_strides(Shape(ws_.begin() + 2, ws_.end()));
    for (int64_t i = 0; i < sp; ++i) {
      wg.push_back(ws_[2 + i]);
      wst.push_back(kst[i]);
    }
    if (G == 1) {  // oneDNN's ungrouped weights: [O, C, *k]
      wg.erase(wg.begin());
      wst.erase(wst.begin());
    }
    auto build = [&](dt d) -> bool {
      const tag act = in_nhwc_ || out_nhwc_ ? tag::nhwc : tag::any;
      auto x_md = dnnl::memory::desc(to_dims(xs_), d, act);
      auto o_md = dnnl::memory::desc(to_dims(ds_), d, act);
      w_plain_ = dnnl::memory::desc(to_dims(wg), d, to_dims(wst));
      auto w_md = w_const ? dnnl::memory::desc(to_dims(wg), d, tag::any) : w_plain_;
      dnnl::deconvolution_forward::primitive_desc pd;
      bool ok = try_make_pd(pd, [&] {
        if (has_bias_)
          return dnnl::deconvolution_forward::primitive_desc(
              engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, x_md, w_md,
              plain_desc({O_}, d), o_md, strides, dil, pad_l, pad_r, default_attr());
        return dnnl::deconvolution_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference,
                                                           dnnl::algorithm::deconvolution_direct, x_md, w_md, o_md,
                                                           strides, dil, pad_l, pad_r, default_attr());
      });
      if (!ok) return false;
      std::string impl(pd.impl_info_str());
      if (d != dt::f32 && impl.find("ref") != std::string::npos) return false;
      exec_ = Exec{};
      exec_.init(dnnl::deconvolution_forward(pd), pd.scratchpad_desc());
      exec_.bind(DNNL_ARG_SRC, pd.src_desc());
      exec_.bind(DNNL_ARG_WEIGHTS, pd.weights_desc());
      exec_.bind(DNNL_ARG_DST, pd.dst_desc());
      if (has_bias_) exec_.bind(DNNL_ARG_BIAS, pd.bias_desc());
      in_ro_.init(activation_desc(xs_, d, in_nhwc_), pd.src_desc());
      out_ro_.init(pd.dst_desc(), activation_desc(ds_, d, out_nhwc_));
      x_blk_bytes_ = pd.src_desc().get_size();
      o_blk_bytes_ = pd.dst_desc().get_size();
      w_md_ = pd.weights_desc();
      name_ = std::string("onednn_conv_transpose_") + dtype_name(t_) +
              (d == dt::f32 && t_ != DType::f32 ? "_via_f32" : "") + " (" + impl + ")" +
              (cropped_ ? " + bias border" : "") + (in_nhwc_ ? " nhwc_in" : "") + (out_nhwc_ ? " nhwc_out" : "");
      return true;
    };
    if (t_ == DType::f32 || !build(to_dnnl(t_))) {
      emu_ = t_ != DType::f32;
      AG_CHECK(build(dt::f32), "oneDNN has no transposed convolution for input ", shape_str(xs_), " and weight ",
               shape_str(ws_));
    }
    // the primitive's plain result goes to out when it needs no widening or border
    const bool direct = !emu_ && !cropped_;
    AG_CHECK(!out_nhwc_ || direct, "conv_transpose: node ", n.context(),
             ": a channels-last result needs a float32 primitive and no cropped border");
    if (!direct) d_plain_ = scratch_.add(d_n_ * (emu_ ? 4 : dtype_size(t_)));
    if (emu_) {
      x_f32_ = scratch_.add(x_n_ * 4);
      if (!w_const) w_f32_ = scratch_.add(w_n_ * 4);
      if (b_const) {
        bias_c_ = alloc_buffer(O_ * 4);
        to_f32(t_, b_const, static_cast<float*>(bias_c_.data()), O_);
      }
    }
    if (in_ro_.needed) x_blk_ = scratch_.add(x_blk_bytes_);
    if (out_ro_.needed) o_blk_ = scratch_.add(o_blk_bytes_);
    if (exec_.scratch_bytes) pad_ = scratch_.add(exec_.scratch_bytes);
    if (w_const) {  // prepack once
      const void* w = prepack(ctx, w_const, t_, w_n_, emu_, w_plain_, w_md_, packed_);
      exec_.set(DNNL_ARG_WEIGHTS, const_cast<void*>(w));
    }
  }

  std::string name() const override { return name_; }
  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (empty_ || zero_) return nullptr;
    auto st = std::make_unique<State>();
    st->exec = exec_.make_args();
    st->in_ro = in_ro_.make_args();
    st->out_ro = out_ro_.make_args();
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (empty_) return;
    if (zero_) {
      fill_bias(in, out, ctx);
      return;
    }
    State& st = *static_cast<State*>(ctx.state);
    st.exec.set(DNNL_ARG_SRC, staged_input(in_ro_, st.in_ro, t_, emu_, in[0], x_n_, ScratchLayout::at(ctx, x_f32_),
                                           ScratchLayout::at(ctx, x_blk_)));
    if (!w_const_) st.exec.set(DNNL_ARG_WEIGHTS, widened(t_, emu_, in[1], w_n_, ScratchLayout::at(ctx, w_f32_)));
    if (has_bias_) {
      void* b = in[2];
      if (bias_c_.data()) {
        b = bias_c_.data();
      } else if (emu_) {
        b = ScratchLayout::at(ctx, bias_f32_);
        to_f32(t_, in[2], static_cast<float*>(b), O_);
      }
      st.exec.set(DNNL_ARG_BIAS, b);
    }
    void* d_plain = d_plain_ == kNone ? out[0] : ScratchLayout::at(ctx, d_plain_);
    void* d = out_ro_.needed ? ScratchLayout::at(ctx, o_blk_) : d_plain;
    st.exec.set(DNNL_ARG_DST, d);
    exec_.run(st.exec, ScratchLayout::at(ctx, pad_));
    if (out_ro_.needed) out_ro_.run(st.out_ro, d, d_plain);
    if (d_plain_ == kNone) return;
    if (emu_) {
      if (!cropped_) {
        from_f32(t_, static_cast<float*>(d_plain), out[0], o_n_);
        return;
      }
      float* o = ScratchLayout::at<float>(ctx, out_f32_);
      place<float>(static_cast<const float*>(d_plain), o, in, ctx);
      from_f32(t_, o, out[0], o_n_);
      return;
    }
    AG_DISPATCH_FLOAT(t_, "conv_transpose", [&] {
      place<scalar_t>(static_cast<const scalar_t*>(d_plain), static_cast<scalar_t*>(out[0]), in, ctx);
    });
  }

 private:
  static constexpr size_t kNone = ScratchLayout::kNone;
  struct State : KernelState {
    Args exec, in_ro, out_ro;
  };

  // bias (or 0) in f32, one value per output channel
  const float* bias_values(void* const* in, const RunCtx& ctx) const {
    if (!has_bias_) return nullptr;
    if (bias_c_.data()) return static_cast<const float*>(bias_c_.data());
    float* b = ScratchLayout::at<float>(ctx, bias_f32_);
    to_f32(t_, in[2], b, O_);
    return b;
  }

  // Copies the primitive's result d [N, O, *ds_] into the top-left corner of
  // out [N, O, *os_]; the positions no input reaches get the bias.
  template <typename T>
  void place(const T* d, T* o, void* const* in, const RunCtx& ctx) const {
    const float* b = bias_values(in, ctx);
    const int64_t sp = static_cast<int64_t>(os_.size()) - 2;
    // 3-D view of the spatial dims: [D, H, W] (leading ones for lower ranks)
    int64_t OD = 1, OH = 1, OW = os_.back(), DD = 1, DH = 1, DW = ds_.back();
    if (sp >= 2) OH = os_[os_.size() - 2], DH = ds_[ds_.size() - 2];
    if (sp >= 3) OD = os_[2], DD = ds_[2];
    const int64_t planes = os_[0] * O_;
    parallel_for(planes * OD * OH, std::max<int64_t>(1, 32768 / std::max<int64_t>(OW, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t pl = r / (OD * OH), dz = (r / OH) % OD, y = r % OH;
        T* orow = o + r * OW;
        const T bv = [&] {
          T v;
          store(v, static_cast<acc_t<T>>(b ? b[pl % O_] : 0.0f));
          return v;
        }();
        int64_t x0 = 0;
        if (dz < DD && y < DH) {
          const T* drow = d + ((pl * DD + dz) * DH + y) * DW;
          for (int64_t x = 0; x < DW; ++x) orow[x] = drow[x];
          x0 = DW;
        }
        for (int64_t x = x0; x < OW; ++x) orow[x] = bv;
      }
    });
  }

  void fill_bias(void* const* in, void* const* out, const RunCtx& ctx) const {
    const float* b = bias_values(in, ctx);
    float* o = t_ == DType::f32 ? static_cast<float*>(out[0]) : ScratchLayout::at<float>(ctx, out_f32_);
    const int64_t N = os_[0], inner = o_n_ / std::max<int64_t>(1, N * O_);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < O_; ++c)
        for (int64_t j = 0; j < inner; ++j) o[(i * O_ + c) * inner + j] = b ? b[c] : 0.0f;
    if (t_ != DType::f32) from_f32(t_, o, out[0], o_n_);
  }

  DType t_;
  Shape xs_, ws_, os_, ds_;
  bool has_bias_ = false, emu_ = false, empty_ = false, zero_ = false, w_const_ = false, cropped_ = false;
  bool in_nhwc_ = false, out_nhwc_ = false;
  int64_t x_n_ = 0, w_n_ = 0, o_n_ = 0, d_n_ = 0, O_ = 0;
  Exec exec_;
  Reorder in_ro_, out_ro_;
  dnnl::memory::desc w_plain_, w_md_;
  Buffer packed_, bias_c_;
  ScratchLayout scratch_;
  size_t x_f32_ = kNone, w_f32_ = kNone, bias_f32_ = kNone, out_f32_ = kNone, d_plain_ = kNone, x_blk_ = kNone,
         o_blk_ = kNone, pad_ = kNone;
  size_t x_blk_bytes_ = 0, o_blk_bytes_ = 0;
  std::string name_ = "onednn_conv_transpose";
};

std::unique_ptr<Kernel> make_deconv(const Node& n, const BuildCtx& ctx) { return std::make_unique<DeconvKernel>(n, ctx); }

}  // namespace

// Channels-last (OpDef::channels_last): a 2-D transposed convolution, f32 or bf16, with nothing
// empty, reads its input NHWC; a float32 one whose output keeps its whole border (padding >=
// output_padding: no cropping by hand) may write its result so too.
static bool deconv_channels_last(const Node& n, int i) {
  if (!nhwc_conv_node(n)) return false;
  if (i == 0 || i == kPrefersChannelsLast) return true;
  if (i != kWritesChannelsLast && i != kPassesChannelsLast) return false;
  const DeconvParams p = deconv_params(n.attrs, 2);
  for (int d = 0; d < 2; ++d)
    if (p.padding[d] < p.output_padding[d]) return false;
  return n.inputs[0]->type.dtype == DType::f32;
}

AG_REGISTER_OP(conv_transpose, {.name = "conv_transpose", .min_inputs = 2, .max_inputs = 3, .infer = infer_deconv,
                                .make_kernel = make_deconv, .props = kCostlyKernel, .channels_last = deconv_channels_last});

}  // namespace ag
