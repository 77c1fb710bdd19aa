// "conv"(x, w[, bias]){stride, padding, dilation, groups[, padding_r]}: 1-D, 2-D and 3-D
// convolution (cross-correlation, as PyTorch) on oneDNN. x [N, C, *spatial],
// w [O, C / groups, *kernel], bias [O]; output [N, O, *out_spatial]; padding_r pads the end of each
// spatial dim where it differs from the start (canonicalize folds a zero pad in so), all plain
// NC(D)(H)W. The primitive picks its preferred (blocked) activation layout; the
// reorders to and from it are prebuilt, and a constant weight is reordered
// into the primitive's layout once, when the kernel is built. 16-bit dtypes
// without a native oneDNN implementation are computed in f32.
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "base/parallel.h"
#include "kernels/common.h"
#include "kernels/conv_pointwise.h"
#include "kernels/conv_winograd.h"
#include "kernels/epilogue.h"
#include "kernels/isa.h"
#include "kernels/onednn_util.h"
#include "ir/serialize.h"
#include "ir/value_bounds.h"

namespace ag {
namespace {

using namespace dnnl_util;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct ConvParams {
  Shape stride, padding, dilation;
  int64_t groups;
  Shape padding_r;  // the end of each spatial dim: padding_r when given (a folded zero pad), else padding
};

ConvParams conv_params(const Attrs& a, int64_t sp) {
  ConvParams p{a.ints("stride", Shape(sp, 1)), a.ints("padding", Shape(sp, 0)), a.ints("dilation", Shape(sp, 1)),
               a.i("groups", 1), {}};
  auto fix = [&](Shape& v, const char* what) {
    if (v.size() == 1 && sp > 1) v = Shape(sp, v[0]);
    AG_CHECK(static_cast<int64_t>(v.size()) == sp, "conv: ", what, " ", shape_str(v), " does not match ", sp,
             " spatial dims");
  };
  fix(p.stride, "stride");
  fix(p.padding, "padding");
  fix(p.dilation, "dilation");
  p.padding_r = a.ints("padding_r", p.padding);
  fix(p.padding_r, "padding_r");
  for (int64_t i = 0; i < sp; ++i) {
    AG_CHECK(p.stride[i] >= 1, "conv: stride must be >= 1, got ", shape_str(p.stride));
    AG_CHECK(p.padding[i] >= 0 && p.padding_r[i] >= 0, "conv: padding must be >= 0, got ", shape_str(p.padding),
             " and ", shape_str(p.padding_r));
    AG_CHECK(p.dilation[i] >= 1, "conv: dilation must be >= 1, got ", shape_str(p.dilation));
  }
  AG_CHECK(p.groups >= 1, "conv: groups must be >= 1, got ", p.groups);
  return p;
}

std::vector<TensorType> infer_conv(const std::vector<TensorType>& in, const Attrs& a) {
  const TensorType &x = in[0], &w = in[1];
  AG_CHECK(x.rank() >= 3 && x.rank() <= 5, "conv: input must be [N, C, *spatial] with 1 to 3 spatial dims, got ",
           x.str());
  AG_CHECK(w.rank() == x.rank(), "conv: weight ", w.str(), " must have the input's rank (", x.rank(), ")");
  AG_CHECK(x.dtype == w.dtype, "conv: dtypes differ: input ", x.str(), ", weight ", w.str());
  AG_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16, "conv: dtype ",
           dtype_name(x.dtype), " is not supported (float32, bfloat16, float16)");
  int64_t sp = x.rank() - 2;
  ConvParams p = conv_params(a, sp);
  int64_t C = x.size(1), O = w.size(0);
  AG_CHECK(C == w.size(1) * p.groups, "conv: input ", x.str(), " has ", C, " channels but weight ", w.str(),
           " with groups=", p.groups, " expects ", w.size(1) * p.groups);
  AG_CHECK(O % p.groups == 0, "conv: ", O, " output channels are not divisible by groups=", p.groups);
  const size_t nb = epi::base_inputs(in.size(), a);
  AG_CHECK(nb == 2 || nb == 3, "conv: takes x, w and an optional bias before the post-op inputs, got ", nb);
  if (nb > 2) {
    AG_CHECK(in[2].rank() == 1 && in[2].size(0) == O, "conv: bias must be [", O, "], got ", in[2].str());
    AG_CHECK(in[2].dtype == x.dtype, "conv: bias dtype ", dtype_name(in[2].dtype), " differs from ",
             dtype_name(x.dtype));
  }
  Shape o{x.size(0), O};
  for (int64_t i = 0; i < sp; ++i) {
    int64_t eff = p.dilation[i] * (w.size(2 + i) - 1) + 1;
    int64_t n = x.size(2 + i) + p.padding[i] + p.padding_r[i] - eff;
    AG_CHECK(n >= 0, "conv: input ", x.str(), " (padded by ", shape_str(p.padding), ") is smaller than the kernel ",
             w.str(), " with dilation ", shape_str(p.dilation));
    o.push_back(n / p.stride[i] + 1);
  }
  TensorType out(x.dtype, o);
  epi::check_post_ops(in, nb, a, out, true, "conv");
  return {out};
}

// Post-ops a convolution runs by hand swap operand pointers in a stack array of this many inputs.
constexpr size_t kMaxHandInputs = 16;
// conv_pointwise.h's kernel takes a 1x1 convolution of K inputs and O outputs where K O / (K + O) (its
// multiply-adds per float read or written) is at most kPointwiseMaxIntensity and its input and result
// together are at least kPointwiseMinBytes. Measured per shape against oneDNN 3.2's brgconv_1x1 on a Zen 4
// (2 threads, the 1x1 shapes of MobileNetV2 at batch 1 and 8, interleaved): 1.08-1.53x where both hold
// (32 -> 16 and 16 -> 96 at 112 x 112, 96 -> 24 and 24 -> 144 at 56 x 56, batch 8), 1.00x on 144 -> 24
// there and on 16 -> 96 at batch 1; 0.72-0.96x on the compute-bound shapes and those that stay in the
// cache, which keep oneDNN. Output blocks of about kPointwiseBlock floats.
constexpr int64_t kPointwiseMaxIntensity = 21, kPointwiseMinBytes = int64_t{4} << 20,
                  kPointwiseMaxWeights = 64 * 1024, kPointwiseBlock = 16 * 1024;

// The leading post-ops a convolution folds into its weights and bias (ConvKernel::plan_folding):
// a constant per-channel (or scalar) mul, then such an add, where `allowed` (f32, constant weights
// and bias).
size_t folded_post_ops(const epi::Epilogue& e, bool allowed, bool* mul, bool* add) {
  auto ok = [&](size_t i, int64_t code) {
    if (!allowed || i >= e.ops.size()) return false;
    const epi::Op& op = e.ops[i];
    return op.code == code && op.cdata && (op.mode == epi::Mode::Channel || op.mode == epi::Mode::Scalar);
  };
  *mul = ok(0, epi::kMul);
  *add = ok(*mul ? 1 : 0, epi::kAdd);
  return static_cast<size_t>(*mul) + static_cast<size_t>(*add);
}

// The input a convolution's kernel adds its result to through oneDNN's sum post-op, or -1 (its
// OpDef::accumulates_into): an f32 convolution writing NHWC (its primitive's destination), nothing
// empty, whose first post-op after the folded ones adds a full-size f32 NHWC value (a residual).
// The add is one rounding of the same two numbers either way, so the sum gives the bits the binary
// post-op gives.
//
// Only from kSumMinChannels output channels: measured interleaved on a Zen 3 (AVX2, 2 threads, exported models,
// the same bits), ResNet-50's residual convolutions (256-2048 channels) ran 8.5% faster at batch 8 and 4% at
// batch 1 with the sum, MobileNetV2's (24-160 channels) 6% slower at batch 8.
constexpr int64_t kSumMinChannels = 256;
int conv_sum_operand(const Node& n, const BuildCtx& ctx) {
  const TensorType &x = n.inputs[0]->type, &w = n.inputs[1]->type, &o = n.outputs[0]->type;
  if (x.dtype != DType::f32 || w.dtype != DType::f32 || o.dtype != DType::f32 || x.rank() != 4 ||
      o.size(1) < kSumMinChannels || x.numel() == 0 || w.numel() == 0 || o.numel() == 0 ||
      !ctx.nhwc(n.outputs[0]->id))
    return -1;
  const bool has_bias = epi::base_inputs(n.inputs.size(), n.attrs) > 2;
  const bool allowed = n.inputs[1]->is_const() && (!has_bias || n.inputs[2]->is_const());
  const Shape os = o.shape();
  const epi::Epilogue e = epi::parse(n, os, true);
  bool mul = false, add = false;
  const size_t k0 = folded_post_ops(e, allowed, &mul, &add);
  if (k0 >= e.binary_end(k0)) return -1;
  const epi::Op& op = e.ops[k0];
  if (op.code != epi::kAdd || op.mode != epi::Mode::Full || op.cdata || op.input < 0 || op.dt != DType::f32 ||
      op.shape != os || !ctx.nhwc(n.inputs[op.input]->id))
    return -1;
  return op.input;
}

// Value bounds (ir/value_bounds.h) of a float32 convolution's result after its post-ops [0, k_end): per
// output channel o, inputs within B give |sum| <= B sum_i |w[o, i]| + |bias[o]|, then each post-op in
// order (a constant operand's magnitude for that channel, another value's bound, the activations that
// epi::activation_bound knows).
// kUnbounded where a step is unknown (weights that are not constant float32, a division, another activation).
double conv_bound_upto(const Node& n, const epi::Epilogue& e, size_t k_end, const ValueBounds& b) {
  const Value *x = n.inputs[0], *w = n.inputs[1];
  const bool has_bias = epi::base_inputs(n.inputs.size(), n.attrs) > 2;
  const Value* bias = has_bias ? n.inputs[2] : nullptr;
  if (x->type.dtype != DType::f32 || !w->is_const() || w->type.dtype != DType::f32 ||
      (bias && (!bias->is_const() || bias->type.dtype != DType::f32)))
    return kUnbounded;
  const double bx = b.of(x);
  const int64_t O = w->type.size(0);
  if (!(bx < kUnbounded) || O <= 0) return kUnbounded;
  const int64_t per = w->type.numel() / O;
  const float* wp = static_cast<const float*>(w->storage->data);
  const float* bp = bias ? static_cast<const float*>(bias->storage->data) : nullptr;
  std::vector<double> ch(O);
  for (int64_t o = 0; o < O; ++o) {
    const float* r = wp + o * per;
    double s[4] = {0, 0, 0, 0};  // (four chains: NaN or inf in a weight leaves a sum that is no bound)
    int64_t i = 0;
    for (; i + 4 <= per; i += 4)
      for (int j = 0; j < 4; ++j) s[j] += std::fabs(r[i + j]);
    for (; i < per; ++i) s[0] += std::fabs(r[i]);
    ch[o] = checked_bound(bx * ((s[0] + s[1]) + (s[2] + s[3])) + (bp ? std::fabs(bp[o]) : 0.0));
  }
  for (size_t k = 0; k < k_end && k < e.ops.size(); ++k) {
    const epi::Op& op = e.ops[k];
    if (!epi::is_binary(op.code)) {
      for (double& c : ch) c = epi::activation_bound(op, c);
      continue;
    }
    if (op.code == epi::kDiv || (op.cdata && op.dt != DType::f32)) return kUnbounded;
    const float* c = static_cast<const float*>(op.cdata);
    const double whole = !c ? b.of(n.inputs[op.input]) : op.mode == epi::Mode::Full ? const_bound(n.inputs[op.input]) : 0.0;
    for (int64_t o = 0; o < O; ++o) {
      const double m = c && op.mode == epi::Mode::Scalar    ? std::fabs(c[0])
                       : c && op.mode == epi::Mode::Channel ? std::fabs(c[o])
                                                            : whole;
      ch[o] = checked_bound(op.code == epi::kMul ? ch[o] * m : ch[o] + m);
    }
  }
  double r = 0;
  for (double c : ch) r = std::max(r, c);  // (kUnbounded wins)
  return r;
}

double conv_bound(const Node& n, const ValueBounds& b) {
  const epi::Epilogue e = epi::parse(n, n.outputs[0]->type.shape(), true);
  return conv_bound_upto(n, e, e.ops.size(), b);
}

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const Node& n, const BuildCtx& ctx) {
    t_ = n.inputs[0]->type.dtype;
    xs_ = n.inputs[0]->type.shape();
    ws_ = n.inputs[1]->type.shape();
    os_ = n.outputs[0]->type.shape();
    has_bias_ = epi::base_inputs(n.inputs.size(), n.attrs) > 2;
    x_n_ = TensorType(t_, xs_).numel();
    w_n_ = TensorType(t_, ws_).numel();
    o_n_ = TensorType(t_, os_).numel();
    O_ = ws_[0];
    epi_ = epi::parse(n, os_, true);
    const int64_t sp = static_cast<int64_t>(xs_.size()) - 2;
    ConvParams p = conv_params(n.attrs, sp);
    // channels-last values (BuildCtx::channels_last): the input arrives NHWC, the result is written
    // NHWC; either pins the primitive's source and destination to NHWC (the layout oneDNN's
    // convolutions run on here), so a chain of convolutions reorders nothing between them
    in_nhwc_ = ctx.nhwc(n.inputs[0]->id);
    out_nhwc_ = ctx.nhwc(n.outputs[0]->id);
    const void* w_const = n.inputs[1]->is_const() ? n.inputs[1]->storage->data : nullptr;
    const void* b_const = has_bias_ && n.inputs[2]->is_const() ? n.inputs[2]->storage->data : nullptr;
    w_const_ = w_const != nullptr;
    if (o_n_ == 0) {
      empty_ = true;
      return;
    }
    if (x_n_ == 0 || w_n_ == 0) {  // no input channels: out = bias
      zero_ = true;
      if (t_ != DType::f32) out_f32_ = scratch_.add(o_n_ * 4);
      if (has_bias_) bias_f32_ = scratch_.add(O_ * 4);
      if (!epi_.empty()) name_ = "conv_zero_channels" + post_name(0);
      return;
    }
    if (pointwise_fits(n, ctx, p, w_const, b_const)) {
      build_pointwise(n, ctx, w_const, b_const);
      return;
    }
    if (winograd_fits(n, ctx, p, w_const, b_const)) {
      build_winograd(n, ctx, p, w_const, b_const);
      return;
    }
    dnnl::memory::dims strides(p.stride.begin(), p.stride.end()), pad(p.padding.begin(), p.padding.end()),
        pad_r(p.padding_r.begin(), p.padding_r.end()), dil;
    for (int64_t d : p.dilation) dil.push_back(d - 1);
    // grouped weights: [G, O/G, C/G, *k] is the same bytes as PyTorch's [O, C/G, *k]
    Shape wg = ws_;
    if (p.groups > 1) {
      wg[0] = ws_[0] / p.groups;
      wg.insert(wg.begin(), p.groups);
    }
    // k post-ops inside the primitive; with post-ops, the layouts are pinned to
    // those of the plain primitive (`base`) and its implementation must stay the same.
    // (with_act: with the activation after them, ops[k], as oneDNN's eltwise: finite_exact_activation)
    auto make = [&](dt d, size_t k, const dnnl::convolution_forward::primitive_desc* base,
                    dnnl::convolution_forward::primitive_desc& pd, bool with_act = false) -> bool {
      const tag act = in_nhwc_ || out_nhwc_ ? tag::nhwc : tag::any;
      auto x_md = base ? base->src_desc() : dnnl::memory::desc(to_dims(xs_), d, act);
      auto o_md = base ? base->dst_desc() : dnnl::memory::desc(to_dims(os_), dst_f32_ ? dt::f32 : d, act);
      auto w_md = base ? base->weights_desc()
                       : (w_const ? dnnl::memory::desc(to_dims(wg), d, tag::any) : plain_desc(wg, d));
      dnnl::primitive_attr attr = default_attr();
      if (k > k0_ || with_act) {
        dnnl::post_ops po = epi::to_dnnl_post_ops(epi_, k0_, k, &o_md, sum_k_);
        dnnl::algorithm a;
        float alpha = 0, beta = 0;
        if (with_act && epi::finite_exact_activation(epi_.ops[k], &a, &alpha, &beta)) po.append_eltwise(a, alpha, beta);
        attr.set_post_ops(po);
      }
      bool ok = try_make_pd(pd, [&] {
        if (prim_bias_)
          return dnnl::convolution_forward::primitive_desc(
              engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, x_md, w_md,
              plain_desc({O_}, d), o_md, strides, dil, pad, pad_r, attr);
        return dnnl::convolution_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference,
                                                         dnnl::algorithm::convolution_direct, x_md, w_md, o_md,
                                                         strides, dil, pad, pad_r, attr);
      });
      if (!ok) return false;
      std::string impl(pd.impl_info_str());
      if (d != dt::f32 && impl.find("ref") != std::string::npos) return false;
      if (base && impl != std::string(base->impl_info_str())) return false;
      return true;
    };
    auto build = [&](dt d) -> bool {
      plan_folding(d == dt::f32 && w_const && (!has_bias_ || b_const));
      plan_sum(n, ctx, d);
      dnnl::convolution_forward::primitive_desc pd;
      if (!make(d, k0_, nullptr, pd)) return false;
      k_dnnl_ = k0_;
      for (size_t k = epi_.binary_end(k0_); k > k0_; --k) {  // (activations run by hand: epilogue.h)
        dnnl::convolution_forward::primitive_desc pk;
        if (make(d, k, &pd, pk)) {
          pd = pk;
          k_dnnl_ = k;
          break;
        }
      }
      // the activation after them in the primitive too, where the values it sees are proven finite (the
      // exact primitive, without it, is made on the first call whose inputs fail the check: run)
      act_ = false;
      dnnl::convolution_forward::primitive_desc pa;
      if (bounded_activation(n, ctx, d) && make(d, k_dnnl_, &pd, pa, true) &&
          pa.scratchpad_desc() == pd.scratchpad_desc()) {
        exact_pd_ = pd;
        pd = pa;
        act_ = true;
      }
      std::string impl(pd.impl_info_str());
      exec_ = Exec{};
      exec_.init(dnnl::convolution_forward(pd), pd.scratchpad_desc());
      exec_.bind(DNNL_ARG_SRC, pd.src_desc());
      exec_.bind(DNNL_ARG_WEIGHTS, pd.weights_desc());
      exec_.bind(DNNL_ARG_DST, pd.dst_desc());
      if (prim_bias_) exec_.bind(DNNL_ARG_BIAS, pd.bias_desc());
      in_ro_.init(activation_desc(xs_, d, in_nhwc_), pd.src_desc());
      out_ro_.init(pd.dst_desc(), activation_desc(os_, dst_f32_ ? dt::f32 : d, out_nhwc_));
      x_blk_bytes_ = pd.src_desc().get_size();  // blocked copies live in the run's scratch
      o_blk_bytes_ = pd.dst_desc().get_size();
      w_plain_ = plain_desc(wg, d);
      w_md_ = pd.weights_desc();
      // post-op operands: plain, except full ones, which are reordered into the dst layout
      post_.assign(k_dnnl_, PostArg{});
      for (size_t i = k0_; i < k_dnnl_; ++i) {
        const epi::Op& op = epi_.ops[i];
        if (op.input < 0 || i == sum_k_) continue;  // (the sum's operand is the destination: run)
        PostArg& pa = post_[i];
        pa.arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i - k0_)) | DNNL_ARG_SRC_1;
        pa.input = op.input;
        dnnl::memory::desc md = epi::operand_md(op);
        if (op.mode == epi::Mode::Full) {
          const bool nhwc = !op.cdata && ctx.nhwc(n.inputs[op.input]->id);  // (a channels-last value)
          md = activation_desc(op.shape, md.get_data_type(), nhwc);
          // a 16-bit operand of an f32 primitive: widened by hand first (oneDNN's
          // converting reorder into a blocked layout is a slow reference one here)
          if (to_dnnl(op.dt) != d) {
            pa.widen = op.dt;
            pa.n = TensorType(op.dt, op.shape).numel();
            md = activation_desc(op.shape, d, nhwc);
          }
          pa.ro.init(md, pd.dst_desc());
          md = pd.dst_desc();
          pa.bytes = md.get_size();
        }
        exec_.bind(pa.arg, md);
        if (op.cdata) {  // a constant is widened and reordered once
          exec_.set(pa.arg, pa.prepare_const(const_cast<void*>(op.cdata)));
          pa.input = -1;  // nothing to do per call
        }
      }
      plan_by_hand(n, ctx);
      name_ = std::string("onednn_conv_") + dtype_name(t_) + (d == dt::f32 && t_ != DType::f32 ? "_via_f32" : "") +
              " (" + impl + ")" + post_name(k_dnnl_ + act_) + (in_nhwc_ ? " nhwc_in" : "") + (out_nhwc_ ? " nhwc_out" : "");
      if (act_) name_ += " (" + epi::code_name(epi_.ops[k_dnnl_].code) + " in the primitive on checked inputs)";
      name_ += folded_name();
      return true;
    };
    // activations run by hand on the f32 result (epilogue.h): a 16-bit convolution then writes f32
    dst_f32_ = t_ != DType::f32 && epi_.binary_end(0) < epi_.ops.size();
    if (t_ == DType::f32 || !build(to_dnnl(t_))) {
      emu_ = t_ != DType::f32;
      AG_CHECK(build(dt::f32), "oneDNN has no convolution for input ", shape_str(xs_), " and weight ",
               shape_str(ws_));
    }
    if (dst_f32_ && !emu_) out_f32_ = scratch_.add(o_n_ * 4);
    if (sum_input_ >= 0) {
      AG_CHECK(!emu_ && !dst_f32_ && !out_ro_.needed && n_in_ <= kMaxHandInputs,
               "conv: node ", n.context(), ": a residual sum needs the result in its operand's layout");
      if (sum_k_ >= k_dnnl_) sum_copy_ = scratch_.add(o_n_ * 4);
      else name_ += " (add as sum)";
    }
    if (emu_) {
      x_f32_ = scratch_.add(x_n_ * 4);
      out_f32_ = scratch_.add(o_n_ * 4);
      if (!w_const) w_f32_ = scratch_.add(w_n_ * 4);
      if (b_const) {
        bias_c_ = alloc_buffer(O_ * 4);
        to_f32(t_, b_const, static_cast<float*>(bias_c_.data()), O_);
      } else if (has_bias_) {
        bias_f32_ = scratch_.add(O_ * 4);
      }
    }
    // per call: blocked copies of the activations, post-op operands, the scratchpad
    if (in_ro_.needed) x_blk_ = scratch_.add(x_blk_bytes_);
    if (out_ro_.needed) o_blk_ = scratch_.add(o_blk_bytes_);
    if (exec_.scratch_bytes) pad_ = scratch_.add(exec_.scratch_bytes);
    for (PostArg& pa : post_) {
      if (pa.input < 0) continue;
      if (pa.widen != DType::f32) pa.wide_off = scratch_.add(pa.n * 4);
      if (pa.ro.needed) pa.buf_off = scratch_.add(pa.bytes);
    }
    for (HandReorder& h : hand_ro_) h.buf_off = scratch_.add(h.ro.to_md.get_size());
    if (k0_) {
      fold_bias(b_const);
      exec_.set(DNNL_ARG_BIAS, folded_bias_.data());
    }
    if (w_const) {  // prepack once
      std::function<void(float*)> fold;
      uint64_t fold_tag = 0;  // (names the scale folded in: graphs folding the same one share the copy)
      if (fold_mul_) {
        std::vector<float> scale = folded_scale();
        fold_tag = checksum64(scale.data(), scale.size() * sizeof(float)) | 1;
        fold = [this, scale = std::move(scale)](float* w) { scale_weights(w, scale); };
      }
      const void* w = prepack(ctx, w_const, t_, w_n_, emu_ || fold_mul_, w_plain_, w_md_, packed_, fold, fold_tag);
      exec_.set(DNNL_ARG_WEIGHTS, const_cast<void*>(w));
    }
  }

  std::string name() const override { return name_; }
  bool uses_bounds() const override { return act_; }

  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (empty_ || zero_) return nullptr;
    auto st = std::make_unique<State>();
    for (const HandReorder& h : hand_ro_) st->hand_ro.push_back(h.ro.make_args());
    if (pointwise_) return st;
    if (winograd_) {
      for (int i = 0; i < slots_; ++i) st->wg.push_back(wg_.gemm.make_args());
      return st;
    }
    st->exec = exec_.make_args();
    st->in_ro = in_ro_.make_args();
    st->out_ro = out_ro_.make_args();
    for (const PostArg& pa : post_) st->post.push_back(pa.input >= 0 ? pa.ro.make_args() : Args{});
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (empty_) return;
    if (zero_) {
      run_zero(in, out, ctx);
      return;
    }
    if (pointwise_) {
      run_pointwise(in, out, ctx);
      return;
    }
    if (winograd_) {
      run_winograd(in, out, ctx);
      return;
    }
    State& st = *static_cast<State*>(ctx.state);
    st.exec.set(DNNL_ARG_SRC, staged_input(in_ro_, st.in_ro, t_, emu_, in[0], x_n_, ScratchLayout::at(ctx, x_f32_),
                                           ScratchLayout::at(ctx, x_blk_)));
    if (!w_const_) st.exec.set(DNNL_ARG_WEIGHTS, widened(t_, emu_, in[1], w_n_, ScratchLayout::at(ctx, w_f32_)));
    if (has_bias_ && !k0_) {
      void* b = in[2];
      if (bias_c_.data()) {
        b = bias_c_.data();
      } else if (emu_) {
        b = ScratchLayout::at(ctx, bias_f32_);
        to_f32(t_, in[2], static_cast<float*>(b), O_);
      }
      st.exec.set(DNNL_ARG_BIAS, b);
    }
    for (size_t i = 0; i < post_.size(); ++i) {
      const PostArg& pa = post_[i];
      if (pa.input >= 0) st.exec.set(pa.arg, pa.prepare(in[pa.input], st.post[i], ctx));
    }
    const bool f32_out = emu_ || dst_f32_;
    void* o_plain = f32_out ? ScratchLayout::at(ctx, out_f32_) : out[0];
    void* o = out_ro_.needed ? ScratchLayout::at(ctx, o_blk_) : o_plain;
    st.exec.set(DNNL_ARG_DST, o);
    void* swapped[kMaxHandInputs];
    void* const* args = in;
    if (sum_input_ >= 0) {
      std::copy(in, in + n_in_, swapped);
      prepare_sum(in, o, ctx, swapped);
      args = swapped;
    }
    // (the args bind the same descriptors for both primitives: same implementation, layouts and scratchpad)
    const bool fused = act_ && ctx.bounded;
    (act_ && !fused ? exact_exec() : exec_).run(st.exec, ScratchLayout::at(ctx, pad_));
    if (out_ro_.needed) out_ro_.run(st.out_ro, o, o_plain);
    if (const size_t k_hand = k_dnnl_ + fused; k_hand < epi_.ops.size()) {
      if (!hand_ro_.empty()) {
        if (args == in) std::copy(in, in + n_in_, swapped);
        reorder_hand_operands(in, st, ctx, swapped);
        args = swapped;
      }
      hand_.apply_all(static_cast<float*>(o_plain), o_n_ / hand_.L, args, k_hand);
    }
    if (f32_out) from_f32(t_, static_cast<float*>(o_plain), out[0], o_n_);
  }

 private:
  static constexpr size_t kNone = ScratchLayout::kNone;
  struct State : KernelState {
    Args exec, in_ro, out_ro;
    std::vector<Args> post;  // per post-op operand reorder (empty for constants)
    std::vector<Args> hand_ro;  // per HandReorder
    std::vector<Args> wg;       // the Winograd GEMM's, per thread slot
  };

  // The post-ops run by hand (from k_dnnl_) read the result in its layout: on NHWC bytes a row is a
  // pixel's C channels, so a per-channel operand indexes the row's columns (Col), and a full-size
  // operand whose layout is not the result's is reordered into it first (HandReorder, per call).
  struct HandReorder {
    Reorder ro;
    int input = 0;
    size_t buf_off = kNone;
  };
  // Whether the activation after the primitive's post-ops (ops[k_dnnl_]) may run inside it: an f32
  // convolution whose values there are proven finite in checked runs (ir/value_bounds.h) and an
  // activation that oneDNN computes as our row does on finite values (epi::finite_exact_activation).
  bool bounded_activation(const Node& n, const BuildCtx& ctx, dt d) const {
    dnnl::algorithm a;
    float alpha, beta;
    return ctx.bounds && d == dt::f32 && t_ == DType::f32 && k_dnnl_ == epi_.binary_end(k0_) &&
           k_dnnl_ < epi_.ops.size() && epi::finite_exact_activation(epi_.ops[k_dnnl_], &a, &alpha, &beta) &&
           conv_bound_upto(n, epi_, k_dnnl_, *ctx.bounds) < kUnbounded;
  }
  // The primitive without the activation, for runs whose inputs were not checked (made on the first).
  const Exec& exact_exec() const {
    std::call_once(exact_once_, [&] {
      exact_ = exec_;
      exact_.prim = dnnl::convolution_forward(exact_pd_);
    });
    return exact_;
  }

  // Full operands of the post-ops by hand in another layout than the result's, reordered into it
  // (swapped: a copy of the inputs; their entries now point at the copies).
  void reorder_hand_operands(void* const* in, State& st, const RunCtx& ctx, void** swapped) const {
    for (size_t i = 0; i < hand_ro_.size(); ++i) {
      const HandReorder& h = hand_ro_[i];
      void* dst = ScratchLayout::at(ctx, h.buf_off);
      h.ro.run(st.hand_ro[i], in[h.input], dst);
      swapped[h.input] = dst;
    }
  }

  // A 1x1 f32 convolution (stride 1, no padding, one group) from channels-last bytes to channels-last
  // bytes, with constant weights (and bias), that is memory-bound (kPointwiseMaxIntensity) and reads and writes
  // more than the cores' caches hold (kPointwiseMinBytes): its own kernel (conv_pointwise.h), the post-ops run on
  // each block of rows it writes. Not where the planner may put the result over a residual
  // (conv_sum_operand): that add is oneDNN's sum.
  bool pointwise_fits(const Node& n, const BuildCtx& ctx, const ConvParams& p, const void* w_const,
                      const void* b_const) const {
    if (t_ != DType::f32 || xs_.size() != 4 || ws_[2] != 1 || ws_[3] != 1 || p.groups != 1 || !in_nhwc_ ||
        !out_nhwc_ || !w_const || (has_bias_ && !b_const) || n.inputs.size() > kMaxHandInputs)
      return false;
    for (size_t i = 0; i < p.stride.size(); ++i)
      if (p.stride[i] != 1 || p.padding[i] != 0 || p.padding_r[i] != 0) return false;
    const int64_t K = ws_[1];
    return K * O_ <= kPointwiseMaxIntensity * (K + O_) && K * O_ <= kPointwiseMaxWeights &&
           (x_n_ + o_n_) * 4 >= kPointwiseMinBytes && conv_sum_operand(n, ctx) < 0;
  }
  void build_pointwise(const Node& n, const BuildCtx& ctx, const void* w_const, const void* b_const) {
    pointwise_ = true;
    std::vector<float> scaled, scale;
    const auto [w, b] = own_weights(n, ctx, w_const, b_const, scaled, scale);
    pw_ = pointwise::pack(w, b, O_, ws_[1]);
    name_ = std::string("pointwise_conv_float32 (") + (isa::use_avx512() ? "avx512" : "avx2") + ")" +
            post_name(k_dnnl_) + " nhwc_in nhwc_out" + folded_name();
  }
  // What a kernel of our own (pointwise, Winograd) starts from: the leading per-channel mul and add folded, the
  // other post-ops planned by hand, the f32 weights with the mul folded in (scale_weights, as the oneDNN path's
  // prepack; in `scaled` where made, the scale in `scale`) and the bias with the add (folded_bias_).
  std::pair<const float*, const float*> own_weights(const Node& n, const BuildCtx& ctx, const void* w_const,
                                                    const void* b_const, std::vector<float>& scaled,
                                                    std::vector<float>& scale) {
    plan_folding(true);
    k_dnnl_ = k0_;
    plan_by_hand(n, ctx);
    for (HandReorder& h : hand_ro_) h.buf_off = scratch_.add(h.ro.to_md.get_size());
    const float* w = static_cast<const float*>(w_const);
    if (fold_mul_) {
      scale = folded_scale();
      scaled.assign(w, w + w_n_);
      scale_weights(scaled.data(), scale);
      w = scaled.data();
    }
    const float* b = static_cast<const float*>(b_const);
    if (k0_) {
      fold_bias(b_const);
      b = static_cast<const float*>(folded_bias_.data());
    }
    return {w, b};
  }
  // The per-channel scale of the folded mul (fold_mul_), and the weights [O, ...] times it: W[o, ...] *= scale[o],
  // one rounding each.
  std::vector<float> folded_scale() const {
    std::vector<float> scale(static_cast<size_t>(O_));
    for (int64_t o = 0; o < O_; ++o) scale[o] = channel_value(epi_.ops[0], o);
    return scale;
  }
  void scale_weights(float* w, const std::vector<float>& scale) const {
    const int64_t per = w_n_ / O_;
    for (int64_t o = 0; o < O_; ++o)
      for (int64_t i = 0; i < per; ++i) w[o * per + i] *= scale[o];
  }
  std::string folded_name() const {
    if (!k0_) return "";
    return " (folded into the weights:" + std::string(fold_mul_ ? " mul" : "") + (fold_add_ ? " add" : "") + ")";
  }
  // Blocks of output rows (pixels) of about kPointwiseBlock floats, each written once and its post-ops run
  // on it while it is in the cache.
  void run_pointwise(void* const* in, void* const* out, const RunCtx& ctx) const {
    void* swapped[kMaxHandInputs];
    void* const* args = in;
    if (!hand_ro_.empty()) {
      std::copy(in, in + n_in_, swapped);
      reorder_hand_operands(in, *static_cast<State*>(ctx.state), ctx, swapped);
      args = swapped;
    }
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(out[0]);
    const int64_t M = o_n_ / O_;
    const int64_t block = std::clamp<int64_t>(kPointwiseBlock / pw_.Op, 16, 1024);
    const bool avx512 = isa::use_avx512(), post = k_dnnl_ < hand_.ops.size();
    parallel_for(M, block, [&](int64_t b, int64_t e) {
      for (int64_t m0 = b; m0 < e; m0 += block) {
        const int64_t m1 = std::min(e, m0 + block);
        pointwise::rows(pw_, x, y, m0, m1, avx512);
        if (post) hand_.apply_rows(y, m0, m1, args, k_dnnl_);
      }
    });
  }

  // A 3x3 f32 convolution (stride 1, one group) from channels-last bytes to channels-last bytes, with constant
  // weights (and bias), of at least kWinogradMinChannels channels in and out, and enough output tiles a thread:
  // Winograd's F(2x2, 3x3) (conv_winograd.h), the post-ops run on each block's pixels as they are written.
  // Each thread reads all of the transformed weights (16/9 of the weights) for each block of tiles, so a layer
  // of many weights and few pixels (a ResNet's last stage at batch 1-4) reads more than it saves: at least
  // kWinogradMinTiles tiles a thread, and C * K / kWinogradWeightsPerTile. Measured on a Zen 4 (2 threads,
  // the layer alone, against oneDNN's brgconv): 64 channels at 56 x 56 1.76x, 128 at 28 x 28 1.68x, 256 at
  // 14 x 14 1.27x (25 tiles a thread), 512 at 7 x 7 0.83x at batch 1 and 0.81x at batch 4 (32 tiles a thread),
  // 1.24x at batch 8; 32 channels 0.98x, 48 1.19x. Not where the planner may put the result over a residual
  // (conv_sum_operand). AIRGRAPH_WINOGRAD=0 keeps oneDNN's direct convolution.
  static constexpr int64_t kWinogradMinChannels = 48, kWinogradMinTiles = 12, kWinogradWeightsPerTile = 4096;
  bool winograd_fits(const Node& n, const BuildCtx& ctx, const ConvParams& p, const void* w_const,
                     const void* b_const) const {
    const char* env = std::getenv("AIRGRAPH_WINOGRAD");  // (read at each build: a process can compare the two)
    const bool enabled = !env || std::string_view(env) != "0";
    if (!enabled || t_ != DType::f32 || xs_.size() != 4 || ws_[2] != 3 || ws_[3] != 3 || p.groups != 1 ||
        !in_nhwc_ || !out_nhwc_ || !w_const || (has_bias_ && !b_const) || n.inputs.size() > kMaxHandInputs ||
        xs_[1] < kWinogradMinChannels || O_ < kWinogradMinChannels)
      return false;
    for (size_t i = 0; i < p.stride.size(); ++i)
      if (p.stride[i] != 1 || p.dilation[i] != 1) return false;
    const int64_t tiles = os_[0] * ((os_[2] + 1) / 2) * ((os_[3] + 1) / 2);
    const int64_t per_thread = std::max(kWinogradMinTiles, xs_[1] * O_ / kWinogradWeightsPerTile);
    return tiles >= per_thread * std::max(num_threads(), 1) && conv_sum_operand(n, ctx) < 0;
  }
  void build_winograd(const Node& n, const BuildCtx& ctx, const ConvParams& p, const void* w_const,
                      const void* b_const) {
    winograd_ = true;
    std::vector<float> scaled, scale;  // (scale: for the direct sums of a block with an inf or NaN)
    const auto [w, b] = own_weights(n, ctx, w_const, b_const, scaled, scale);
    slots_ = std::max({omp_get_max_threads(), omp_get_num_procs(), num_threads(), 1});
    wg_ = winograd::make(w, b, static_cast<const float*>(w_const), fold_mul_ ? scale.data() : nullptr, xs_[0],
                         xs_[2], xs_[3], xs_[1], O_, p.padding[0], p.padding[1], os_[2], os_[3], num_threads());
    wg_slot_ = scratch_.add(static_cast<size_t>(slots_ * wg_.slot_floats()) * 4);
    if (wg_.pad_bytes) wg_pad_ = scratch_.add(slots_ * wg_.pad_bytes);
    name_ = std::string("winograd_conv_float32 F(2x2,3x3), ") + std::to_string(wg_.Tb) + "-tile blocks" +
            post_name(k_dnnl_) + " nhwc_in nhwc_out" + folded_name();
  }
  // Blocks of tiles split between the threads, each on its own slot of the scratch and its own GEMM arguments.
  void run_winograd(void* const* in, void* const* out, const RunCtx& ctx) const {
    State& st = *static_cast<State*>(ctx.state);
    void* swapped[kMaxHandInputs];
    void* const* args = in;
    if (!hand_ro_.empty()) {
      std::copy(in, in + n_in_, swapped);
      reorder_hand_operands(in, st, ctx, swapped);
      args = swapped;
    }
    const float* x = static_cast<const float*>(in[0]);
    float* y = static_cast<float*>(out[0]);
    float* slots = ScratchLayout::at<float>(ctx, wg_slot_);
    char* pads = wg_.pad_bytes ? ScratchLayout::at<char>(ctx, wg_pad_) : nullptr;
    const bool post = k_dnnl_ < hand_.ops.size();
    parallel_for(wg_.blocks(), 1, [&](int64_t b, int64_t e) {
      const int tid = omp_get_thread_num();
      Args own;  // (a thread past the slots: its own arguments, slot and scratchpad)
      std::vector<float> own_slot;
      std::vector<char> own_pad;
      Args* a = &own;
      float* slot = nullptr;
      char* pad = nullptr;
      if (tid < slots_) {
        a = &st.wg[tid], slot = slots + static_cast<size_t>(tid) * wg_.slot_floats();
        pad = pads ? pads + static_cast<size_t>(tid) * wg_.pad_bytes : nullptr;
      } else {
        own = wg_.gemm.make_args(), own_slot.resize(wg_.slot_floats()), own_pad.resize(wg_.pad_bytes);
        slot = own_slot.data(), pad = own_pad.data();
      }
      winograd::run_blocks(wg_, x, y, b, e, slot, *a, pad, [&](int64_t p0, int64_t p1) {
        if (post) hand_.apply_rows(y, p0, p1, args, k_dnnl_);
      });
    });
  }

  void plan_by_hand(const Node& n, const BuildCtx& ctx) {
    hand_ = epi_;
    hand_ro_.clear();
    hand_consts_.clear();
    n_in_ = n.inputs.size();
    if (k_dnnl_ >= epi_.ops.size()) return;
    if (out_nhwc_) {
      hand_.L = O_;
      for (size_t i = k_dnnl_; i < hand_.ops.size(); ++i)
        if (hand_.ops[i].mode == epi::Mode::Channel) hand_.ops[i].mode = epi::Mode::Col;
    }
    for (size_t i = k_dnnl_; i < epi_.ops.size(); ++i) {
      const epi::Op& op = epi_.ops[i];
      if (op.mode != epi::Mode::Full) continue;
      if (op.cdata) {  // a constant (row-major) in the result's layout once, at build time
        if (!out_nhwc_) continue;
        const dt od = to_dnnl(op.dt);
        Reorder ro;
        ro.init(plain_desc(op.shape, od), activation_desc(op.shape, od, true));
        hand_consts_.push_back(alloc_buffer(ro.to_md.get_size()));
        ro.run_once(const_cast<void*>(op.cdata), hand_consts_.back().data());
        hand_.ops[i].cdata = hand_consts_.back().data();
        continue;
      }
      if (ctx.nhwc(n.inputs[op.input]->id) == out_nhwc_) continue;
      AG_CHECK(n_in_ <= kMaxHandInputs, "conv: node ", n.context(), " has too many post-op operands");
      HandReorder h;
      const dt od = to_dnnl(op.dt);
      h.ro.init(activation_desc(op.shape, od, !out_nhwc_), activation_desc(op.shape, od, out_nhwc_));
      h.input = op.input;
      hand_ro_.push_back(std::move(h));
    }
  }

  // The residual add as oneDNN's sum post-op (conv_sum_operand): the primitive adds its result to
  // what the destination holds, which is the operand itself where the memory plan put the result
  // over its bytes (OpDef::accumulates_into), and a copy of it elsewhere (run). Where the primitive
  // does not take the sum, the add runs by hand (from a copy of the operand where it is the result's
  // bytes).
  void plan_sum(const Node& n, const BuildCtx& ctx, dt d) {
    sum_input_ = d == dt::f32 ? conv_sum_operand(n, ctx) : -1;
    sum_k_ = sum_input_ >= 0 ? k0_ : SIZE_MAX;
  }
  // Before the primitive runs: the operand into the destination `o` (the sum), or a copy of it where
  // the add runs by hand over its bytes; the inputs the post-ops by hand read then (args).
  void prepare_sum(void* const* in, void* o, const RunCtx& ctx, void** args) const {
    void* r = in[sum_input_];
    if (sum_k_ < k_dnnl_) {
      if (o != r) std::memcpy(o, r, o_n_ * 4);
    } else if (o == r) {
      void* c = ScratchLayout::at(ctx, sum_copy_);
      std::memcpy(c, r, o_n_ * 4);
      args[sum_input_] = c;
    }
  }

  void run_zero(void* const* in, void* const* out, const RunCtx& ctx) const {
    float* o = t_ == DType::f32 ? static_cast<float*>(out[0]) : ScratchLayout::at<float>(ctx, out_f32_);
    std::memset(o, 0, o_n_ * 4);
    if (has_bias_) {
      float* b = ScratchLayout::at<float>(ctx, bias_f32_);
      to_f32(t_, in[2], b, O_);
      int64_t N = os_[0], inner = o_n_ / std::max<int64_t>(1, N * O_);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < O_; ++c)
          for (int64_t j = 0; j < inner; ++j) o[(i * O_ + c) * inner + j] = b[c];
    }
    epi_.apply_all(o, o_n_ / epi_.L, in, 0);
    if (t_ != DType::f32) from_f32(t_, o, out[0], o_n_);
  }

  // Leading per-channel (or scalar) constant mul / add post-ops (a folded
  // batch_norm) are folded into constant f32 weights and bias when the
  // primitive computes in f32: W' = W * a, b' = b * a + s (one rounding of
  // each product, as the unfused batch_norm's).
  void plan_folding(bool allowed) {
    k0_ = folded_post_ops(epi_, allowed, &fold_mul_, &fold_add_);
    prim_bias_ = has_bias_ || fold_add_;
  }
  static float channel_value(const epi::Op& op, int64_t c) {
    int64_t i = op.mode == epi::Mode::Channel ? c : 0;
    if (op.dt == DType::f32) return static_cast<const float*>(op.cdata)[i];
    if (op.dt == DType::bf16) return load(static_cast<const bf16s*>(op.cdata)[i]);
    return load(static_cast<const f16s*>(op.cdata)[i]);
  }
  void fold_bias(const void* b_const) {
    folded_bias_ = alloc_buffer(O_ * 4);
    float* b = static_cast<float*>(folded_bias_.data());
    if (has_bias_) to_f32(t_, b_const, b, O_);
    else std::memset(b, 0, O_ * 4);
    for (int64_t o = 0; o < O_; ++o) {
      if (fold_mul_) b[o] *= channel_value(epi_.ops[0], o);
      if (fold_add_) b[o] += channel_value(epi_.ops[fold_mul_ ? 1 : 0], o);
    }
  }

  std::string post_name(size_t k) const {
    if (epi_.empty()) return "";
    std::string r = " +";
    for (size_t i = 0; i < epi_.ops.size(); ++i)
      r += std::string(i == k ? " | by hand:" : "") + " " + epi::code_name(epi_.ops[i].code);
    return r;
  }

  struct PostArg {
    int arg = 0, input = -1;  // input: node input to bind per call (-1: bound once)
    Reorder ro;               // full operands: plain -> dst layout
    size_t bytes = 0;         // of the reordered operand
    DType widen = DType::f32;  // != f32: widen the operand to f32 first
    int64_t n = 0;
    Buffer wide, buf;                          // a constant operand, widened / reordered once
    size_t wide_off = kNone, buf_off = kNone;  // per call operands: in the run's scratch
    void* prepare_const(void* p) {
      if (widen != DType::f32) {
        wide = alloc_buffer(n * 4);
        to_f32(widen, p, static_cast<float*>(wide.data()), n);
        p = wide.data();
      }
      if (!ro.needed) return p;
      buf = alloc_buffer(bytes);
      ro.run_once(p, buf.data());
      return buf.data();
    }
    void* prepare(void* p, Args& ro_args, const RunCtx& ctx) const {
      if (widen != DType::f32) {
        float* w = ScratchLayout::at<float>(ctx, wide_off);
        to_f32(widen, p, w, n);
        p = w;
      }
      if (!ro.needed) return p;
      void* dst = ScratchLayout::at(ctx, buf_off);
      ro.run(ro_args, p, dst);
      return dst;
    }
  };

  DType t_;
  epi::Epilogue epi_, hand_;  // hand_: epi_ as the post-ops from k_dnnl_ run by hand see the result (plan_by_hand)
  std::vector<HandReorder> hand_ro_;
  std::vector<Buffer> hand_consts_;  // constant full-size operands in a channels-last result's layout
  size_t n_in_ = 0;
  std::vector<PostArg> post_;
  size_t k_dnnl_ = 0;  // post-ops [k0_, k_dnnl_) run in the primitive, the rest by hand
  bool dst_f32_ = false;  // a 16-bit primitive writing f32 for the activations run by hand
  size_t k0_ = 0;      // leading post-ops folded into weights and bias
  bool fold_mul_ = false, fold_add_ = false, prim_bias_ = false;
  Buffer folded_bias_;
  Shape xs_, ws_, os_;
  bool has_bias_ = false, emu_ = false, empty_ = false, zero_ = false, w_const_ = false;
  int64_t x_n_ = 0, w_n_ = 0, o_n_ = 0, O_ = 0;
  // The residual add as oneDNN's sum post-op (plan_sum): its op index (SIZE_MAX: none) and operand
  size_t sum_k_ = SIZE_MAX;
  int sum_input_ = -1;
  size_t sum_copy_ = kNone;  // (the add by hand over its own operand's bytes: a copy of the operand)
  bool pointwise_ = false;  // conv_pointwise.h's kernel (pointwise_fits) instead of oneDNN's
  pointwise::Packed pw_;
  bool winograd_ = false;  // conv_winograd.h's kernel (winograd_fits)
  winograd::Plan wg_;
  int slots_ = 0;  // thread slots of its scratch and GEMM arguments
  size_t wg_slot_ = kNone, wg_pad_ = kNone;
  Exec exec_;
  // act_: ops[k_dnnl_] (an activation) runs in exec_'s primitive in checked runs (RunCtx::bounded);
  // other runs take exact_, the primitive without it (exact_pd_), and run it by hand
  bool act_ = false;
  dnnl::convolution_forward::primitive_desc exact_pd_;
  mutable Exec exact_;
  mutable std::once_flag exact_once_;
  Reorder in_ro_, out_ro_;
  bool in_nhwc_ = false, out_nhwc_ = false;  // channels-last input / result (BuildCtx::channels_last)
  dnnl::memory::desc w_plain_, w_md_;
  Buffer packed_, bias_c_;  // prepacked weights; a constant bias widened to f32
  ScratchLayout scratch_;
  size_t x_f32_ = kNone, w_f32_ = kNone, bias_f32_ = kNone, out_f32_ = kNone, x_blk_ = kNone, o_blk_ = kNone,
         pad_ = kNone;
  size_t x_blk_bytes_ = 0, o_blk_bytes_ = 0;
  std::string name_ = "onednn_conv";
};

std::unique_ptr<Kernel> make_conv(const Node& n, const BuildCtx& ctx) { return std::make_unique<ConvKernel>(n, ctx); }

}  // namespace

// Channels-last (OpDef::channels_last; ConvKernel honours it): a 2-D convolution, f32 or bf16, with
// nothing empty reads its input (0) and any full-size post-op operand NHWC and may write its result
// so from either layout of its input (the primitive runs on NHWC; the post-ops it does not take run
// by hand in the result's layout, plan_by_hand).
static bool conv_channels_last(const Node& n, int i) {
  if (!nhwc_conv_node(n)) return false;
  if (i == 0 || i == kPrefersChannelsLast) return true;
  if (n.inputs.size() > kMaxHandInputs) return false;  // (operands swapped on the stack by hand)
  if (i == kWritesChannelsLast || i == kPassesChannelsLast) return true;
  const size_t nb = epi::base_inputs(n.inputs.size(), n.attrs);
  return i > 0 && static_cast<size_t>(i) >= nb && n.inputs[i]->type.shape() == n.outputs[0]->type.shape();
}

AG_REGISTER_OP(conv, {.name = "conv", .min_inputs = 2, .max_inputs = -1, .infer = infer_conv,
                      .make_kernel = make_conv, .props = kCostlyKernel, .channels_last = conv_channels_last,
                      .accumulates_into = conv_sum_operand, .bound = conv_bound});

}  // namespace ag
