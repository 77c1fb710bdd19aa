// "matmul"(a, b[, bias]) and "linear"(x, w[, bias]) on oneDNN's matmul.
//
//  matmul: a [..., M, K] @ b [..., K, N] (+ bias broadcast to the output), with
//          torch.matmul's batch broadcasting for rank >= 2.
//  linear: x [..., K] @ w[N, K]^T (+ bias [N]); w is used in PyTorch's layout.
//
// Primitives are created once per node. A constant right-hand side (weights) is
// created with format_tag::any and reordered once into oneDNN's preferred
// blocked layout (prepacking). 16-bit dtypes run natively when this CPU has a
// oneDNN implementation for them; otherwise they are computed in f32 (inputs
// widened, f32 accumulation, one rounding of the result), with constant
// weights widened and prepacked once. For batch-1 bf16 linear layers with
// constant weights and no native bf16 support, a GEMV reads the bf16 weights
// directly (decode is bound by weight bytes).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string_view>

#include "kernels/common.h"
#include "kernels/epilogue.h"
#include "kernels/gemm_panels.h"
#include "kernels/gemv.h"
#include "kernels/onednn_util.h"
#include "base/background.h"

namespace ag {
namespace {

using namespace dnnl_util;
using dt = dnnl::memory::data_type;

bool float_ok(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

Shape matmul_out_shape(const Shape& a, const Shape& b) {
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape o = broadcast_shapes(ba, bb);
  o.push_back(a[a.size() - 2]);
  o.push_back(b[b.size() - 1]);
  return o;
}

void check_bias(const TensorType& bias, DType t, const Shape& out, const char* op) {
  AG_CHECK(bias.dtype == t, op, ": bias dtype ", dtype_name(bias.dtype), " differs from the input dtype ",
           dtype_name(t));
  Shape bs = bias.shape();
  AG_CHECK(bs.size() <= out.size(), op, ": bias ", shape_str(bs), " does not broadcast to the output ",
           shape_str(out));
  AG_CHECK(broadcast_shapes(bs, out) == out, op, ": bias ", shape_str(bs), " does not broadcast to the output ",
           shape_str(out));
}

std::vector<TensorType> infer_matmul(const std::vector<TensorType>& in, const Attrs& attrs) {
  const TensorType &a = in[0], &b = in[1];
  AG_CHECK(a.rank() >= 2 && b.rank() >= 2, "matmul: inputs must have rank >= 2, got ", a.str(), " and ", b.str());
  AG_CHECK(a.dtype == b.dtype, "matmul: dtypes differ: ", a.str(), " and ", b.str());
  AG_CHECK(float_ok(a.dtype), "matmul: dtype ", dtype_name(a.dtype), " is not supported (float32, bfloat16, float16)");
  AG_CHECK(a.size(a.rank() - 1) == b.size(b.rank() - 2), "matmul: inner dimensions differ: ", a.str(), " @ ",
           b.str());
  Shape o = matmul_out_shape(a.shape(), b.shape());
  const size_t nb = epi::base_inputs(in.size(), attrs);
  AG_CHECK(nb == 2 || nb == 3, "matmul: takes a, b and an optional bias before the post-op inputs, got ", nb);
  if (nb > 2) check_bias(in[2], a.dtype, o, "matmul");
  TensorType out(a.dtype, o);
  epi::check_post_ops(in, nb, attrs, out, false, "matmul");
  return {out};
}

std::vector<TensorType> infer_linear(const std::vector<TensorType>& in, const Attrs& attrs) {
  const TensorType &x = in[0], &w = in[1];
  AG_CHECK(x.rank() >= 1, "linear: input must have rank >= 1, got ", x.str());
  AG_CHECK(w.rank() == 2, "linear: weight must be [out, in], got ", w.str());
  // (int8 weights with a float32/bfloat16 input: weight-only quantization, kernels/linear_widened.cpp)
  const bool w_int8 = w.dtype == DType::i8 && (x.dtype == DType::f32 || x.dtype == DType::bf16);
  AG_CHECK(x.dtype == w.dtype || w_int8, "linear: dtypes differ: input ", x.str(), ", weight ", w.str());
  AG_CHECK(float_ok(x.dtype), "linear: dtype ", dtype_name(x.dtype), " is not supported (float32, bfloat16, float16)");
  AG_CHECK(x.size(x.rank() - 1) == w.size(1), "linear: input ", x.str(), " has ", x.size(x.rank() - 1),
           " features but weight ", w.str(), " expects ", w.size(1));
  Shape o = x.shape();
  o.back() = w.size(0);
  const size_t nb = epi::base_inputs(in.size(), attrs);
  AG_CHECK(nb == 2 || nb == 3, "linear: takes x, w and an optional bias before the post-op inputs, got ", nb);
  if (nb > 2) {
    AG_CHECK(in[2].rank() == 1 && in[2].size(0) == w.size(0), "linear: bias must be [", w.size(0), "], got ",
             in[2].str());
    AG_CHECK(in[2].dtype == x.dtype, "linear: bias dtype ", dtype_name(in[2].dtype), " differs from ",
             dtype_name(x.dtype));
  }
  TensorType out(x.dtype, o);
  epi::check_post_ops(in, nb, attrs, out, false, "linear");
  return {out};
}

Shape pad_front(const Shape& s, size_t r) {
  Shape o(r - s.size(), 1);
  o.insert(o.end(), s.begin(), s.end());
  return o;
}

// May the budget take this linear weight's packed copy (BuildCtx::pack_chosen)?
bool chosen(const BuildCtx& ctx, const void* weight) {
  return !ctx.pack_chosen || std::binary_search(ctx.pack_chosen->begin(), ctx.pack_chosen->end(), weight);
}

// Everything a GEMM node needs, decided at kernel creation.
struct GemmSpec {
  DType t;
  Shape a, b, bias, out;  // all of the output's rank (leading 1s added)
  bool b_nk = false;      // b is stored [N, K] (linear weights): use its transpose
  const void* b_const = nullptr;
  const void* bias_const = nullptr;
  bool has_bias = false;
  bool budgeted = false;  // a linear whose packed copy counts against BuildCtx::pack_budget (budgeted_linear)
  epi::Epilogue epi;  // fused post-ops, on the [.., N] view of `out`
};

class GemmKernel final : public Kernel {
 public:
  GemmKernel(const GemmSpec& s, const BuildCtx& ctx) : s_(s) {
    const size_t r = s.out.size();
    out_n_ = TensorType(DType::f32, s.out).numel();
    a_n_ = TensorType(DType::f32, s.a).numel();
    b_n_ = TensorType(DType::f32, s.b).numel();
    bias_n_ = s.has_bias ? TensorType(DType::f32, s.bias).numel() : 0;
    int64_t K = s.a[r - 1];
    if (out_n_ == 0) {
      mode_ = Mode::Empty;
      return;
    }
    if (K == 0) {  // out = bias (or 0)
      mode_ = Mode::ZeroK;
      setup_emulation_buffers(/*need_a=*/false, /*need_b=*/false);
      manual_bias_ = s.has_bias;
      prepare_manual_bias();
      return;
    }
    if (try_gemv(ctx)) return;
    // (linear's [N, K] weights only: a constant [K, N] right-hand side, GPT-2's Conv1D, measured 33%
    // slower in place on GPT-2 b1, so it is packed)
    const int64_t rows = out_n_ / std::max<int64_t>(s.out.back(), 1);
    in_place_ = s.b_nk && rows >= ctx.pack_rows;
    if (in_place_ && s.budgeted && ctx.pack_budget > 0 && chosen(ctx, s.b_const)) {  // packed too, within budget
      budget_ = dnnl_util::hold_pack_budget(s.b_const, static_cast<int64_t>(TensorType(s.t, s.b).nbytes()),
                                            ctx.pack_budget);
      in_place_ = budget_ == nullptr;
    }
    // activations run by hand on the f32 result (epilogue.h): a 16-bit GEMM then writes f32
    dst_f32_ = s.t != DType::f32 && s.epi.binary_end(0) < s.epi.ops.size();
    // 1. native dtype, 2. f32 emulation with bias fused, 3. f32 emulation, bias added by hand.
    if (s.t == DType::f32 || !build(to_dnnl(s.t), s.has_bias)) {
      emu_ = s.t != DType::f32;
      if (!build(dt::f32, s.has_bias)) {
        AG_CHECK(s.has_bias && build(dt::f32, false), "oneDNN has no matmul for ", shape_str(s.a), " @ ",
                 shape_str(s.b));
        manual_bias_ = true;
      }
    }
    if (try_panels(ctx)) return;
    mode_ = Mode::Dnnl;
    if (b_md_ == b_plain_md_) budget_.reset();  // the implementation reads the weights as stored: no copy
    setup_emulation_buffers(true, s.b_const == nullptr);
    prepare_weights(ctx);
    prepare_manual_bias();
    if (s.has_bias && !manual_bias_ && emu_) prepare_f32_bias();
    const size_t pad = std::max(exec_.scratch_bytes, deferred_ ? plain_exec_.scratch_bytes : size_t{0});
    if (mode_ == Mode::Dnnl && pad) pad_ = scratch_.add(pad);
  }

  std::string name() const override { return name_; }

  size_t scratch_bytes() const override { return scratch_.bytes; }
  std::unique_ptr<KernelState> make_state() const override {
    if (mode_ == Mode::Panels && deferred_) {
      auto st = std::make_unique<State>();
      st->plain = plain_exec_.make_args();
      return st;
    }
    if (mode_ != Mode::Dnnl) return nullptr;
    auto st = std::make_unique<State>();
    st->exec = exec_.make_args();
    if (deferred_) st->plain = plain_exec_.make_args();
    return st;
  }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    switch (mode_) {
      case Mode::Empty:
        return;
      case Mode::Gemv:
        run_gemv(in, s_.has_bias ? in[2] : nullptr, out[0], ctx);
        return;
      case Mode::Panels:
        if (const void* p = packed_ptr_.load(std::memory_order_acquire)) {
          panels::run(static_cast<const float*>(in[0]), M_, K_, static_cast<const float*>(p), N_,
                      s_.has_bias ? static_cast<const float*>(in[2]) : nullptr, static_cast<float*>(out[0]), s_.epi, in);
          return;
        }
        break;  // (packing deferred: oneDNN's primitive on the weights as stored, below, until the panels are made)
      case Mode::ZeroK: {
        float* o = out_f32(out[0], ctx);
        std::memset(o, 0, out_n_ * 4);
        add_bias(o, in, ctx);
        s_.epi.apply_all(o, out_n_ / s_.epi.L, in, 0);
        finish(o, out[0]);
        return;
      }
      case Mode::Dnnl:
        break;
    }
    State* st = static_cast<State*>(ctx.state);
    const Exec* ex = &exec_;
    Args* ap = &st->exec;
    if (deferred_) {  // the packed copy once the background thread has made it, the weights as stored until then
      // (panels: the weights as stored here; a copy made since this call looked is for panels::run)
      if (const void* w = mode_ == Mode::Dnnl ? packed_ptr_.load(std::memory_order_acquire) : nullptr) {
        st->exec.set(DNNL_ARG_WEIGHTS, const_cast<void*>(w));  // (exec_ itself never changes after the build)
      } else {
        ex = &plain_exec_;
        ap = &st->plain;
      }
    }
    Args& args = *ap;
    void* a = in[0];
    if (emu_) {
      a = ScratchLayout::at(ctx, a_f32_);
      to_f32(s_.t, in[0], static_cast<float*>(a), a_n_);
    }
    args.set(DNNL_ARG_SRC, a);
    if (!s_.b_const) {
      void* b = in[1];
      if (emu_) {
        b = ScratchLayout::at(ctx, b_f32_);
        to_f32(s_.t, in[1], static_cast<float*>(b), b_n_);
      }
      args.set(DNNL_ARG_WEIGHTS, b);
    }
    if (s_.has_bias && !manual_bias_)
      args.set(DNNL_ARG_BIAS, emu_ ? const_cast<float*>(f32_bias(in, ctx)) : in[2]);
    for (size_t i = 0; i < k_dnnl_; ++i) {
      const epi::Op& op = s_.epi.ops[i];
      if (op.input >= 0 && !op.cdata) args.set(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, in[op.input]);
    }
    const bool f32_out = emu_ || dst_f32_;
    void* o = f32_out ? ScratchLayout::at(ctx, out_f32_) : out[0];
    args.set(DNNL_ARG_DST, o);
    ex->run(args, ScratchLayout::at(ctx, pad_));
    if (manual_bias_) add_bias(static_cast<float*>(o), in, ctx);
    if (k_dnnl_ < s_.epi.ops.size()) s_.epi.apply_all(static_cast<float*>(o), out_n_ / s_.epi.L, in, k_dnnl_);
    if (f32_out) from_f32(s_.t, static_cast<float*>(o), out[0], out_n_);
  }

 private:
  enum class Mode { Empty, ZeroK, Dnnl, Gemv, Panels };
  struct State : KernelState {
    Args exec, plain;  // (plain: the primitive on the weights as stored, while packing is deferred)
  };
  static constexpr size_t kNone = ScratchLayout::kNone;

  // Builds the primitive for dtype d, then moves the longest prefix of the
  // post-op chain that the same oneDNN implementation accepts into it (the
  // rest is applied by hand after it).
  bool build(dt d, bool with_bias) {
    if (!build_k(d, with_bias, 0)) return false;
    k_dnnl_ = 0;
    if (s_.epi.empty() || (s_.has_bias && !with_bias)) return true;  // bias by hand: post-ops after it
    const std::string base = impl_;
    for (size_t k = s_.epi.binary_end(0); k >= 1; --k) {  // (activations run by hand: epilogue.h)
      if (build_k(d, with_bias, k, &base)) {
        k_dnnl_ = k;
        return true;
      }
    }
    return true;
  }

  bool build_k(dt d, bool with_bias, size_t k, const std::string* same_impl = nullptr) {
    dnnl::memory::desc b_plain = plain_b(d);
    dnnl::memory::desc b_md = s_.b_const ? dnnl::memory::desc(to_dims(s_.b), d, dnnl::memory::format_tag::any) : b_plain;
    dnnl::matmul::primitive_desc pd;
    if (s_.b_const && in_place_ && d == to_dnnl(s_.t) && make_pd(pd, d, with_bias, k, b_plain) &&
        std::string(pd.impl_info_str()).find("ref") == std::string::npos) {
      b_md = b_plain;  // wide enough: the weights as stored, no packed copy
    } else if (!make_pd(pd, d, with_bias, k, b_md)) {
      return false;
    }
    std::string impl(pd.impl_info_str());
    if (s_.b_const && d == to_dnnl(s_.t) && pd.weights_desc().get_inner_nblks() == 0 &&
        pd.weights_desc() != b_plain) {
      // The preferred layout is a plain one (a transpose, not a blocked prepack):
      // when the same implementation takes the weights as they are stored, use
      // them in place rather than keep a transposed copy of every weight.
      dnnl::matmul::primitive_desc in_place;
      if (make_pd(in_place, d, with_bias, k, b_plain) && std::string(in_place.impl_info_str()) == impl)
        pd = in_place;
    }
    if (d != dt::f32 && impl.find("ref") != std::string::npos) return false;  // slow reference: emulate instead
    if (same_impl && impl != *same_impl) return false;  // the post-ops would cost a slower implementation
    pd_ = pd;  // (its primitive is made once the choice is final: prepare_weights)
    pd_d_ = d;
    pd_bias_ = with_bias;
    pd_k_ = k;
    b_plain_md_ = b_plain;
    b_md_ = pd.weights_desc();
    impl_ = impl;
    name_ = std::string("onednn_matmul_") + dtype_name(s_.t) + (d == dt::f32 && s_.t != DType::f32 ? "_via_f32" : "") +
            " (" + impl + ")" + post_name(k);
    return true;
  }

  dnnl::memory::desc plain_b(dt d) const {
    if (s_.b_nk) return dnnl::memory::desc(to_dims(s_.b), d, dnnl::memory::dims{1, s_.b[0]});  // [K, N] over [N, K]
    return plain_desc(s_.b, d);
  }

  bool make_pd(dnnl::matmul::primitive_desc& pd, dt d, bool with_bias, size_t k, const dnnl::memory::desc& bmd) const {
    dnnl::memory::desc a_md = plain_desc(s_.a, d), o_md = plain_desc(s_.out, dst_f32_ ? dt::f32 : d);
    dnnl::primitive_attr attr = default_attr();
    if (k) attr.set_post_ops(epi::to_dnnl_post_ops(s_.epi, 0, k));
    return try_make_pd(pd, [&] {
      if (with_bias) return dnnl::matmul::primitive_desc(engine(), a_md, bmd, plain_desc(s_.bias, d), o_md, attr);
      return dnnl::matmul::primitive_desc(engine(), a_md, bmd, o_md, attr);
    });
  }

  void bind_exec(Exec& e, const dnnl::matmul::primitive_desc& pd, dt d, bool with_bias, size_t k) const {
    e.init(dnnl::matmul(pd), pd.scratchpad_desc());
    e.bind(DNNL_ARG_SRC, plain_desc(s_.a, d));
    e.bind(DNNL_ARG_DST, plain_desc(s_.out, dst_f32_ ? dt::f32 : d));
    if (with_bias) e.bind(DNNL_ARG_BIAS, plain_desc(s_.bias, d));
    e.bind(DNNL_ARG_WEIGHTS, pd.weights_desc());
    for (size_t i = 0; i < k; ++i) {
      const epi::Op& op = s_.epi.ops[i];
      if (op.input < 0) continue;
      const int arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1;
      e.bind(arg, epi::operand_md(op));
      if (op.cdata) e.set(arg, const_cast<void*>(op.cdata));
    }
  }

  // Packing left for the background thread (base/background.h): a primitive for the weights
  // as they are stored serves until the packed copy is made. Not for weights widened to f32
  // (the widened copy costs what packing does), weights a PrepackCache shares between the
  // programs of a symbolic graph, or where the plain layout has only a reference implementation.
  bool defer_packing(const BuildCtx& ctx) {
    if (!ctx.background || !s_.b_const || emu_ || ctx.prepack || b_md_ == b_plain_md_) return false;
    return bind_plain_exec();
  }
  // plain_exec_: the primitive on the weights as stored, which serves the calls until the packed copy
  // (oneDNN's layout or the panels) is made; false where that layout has only a reference implementation.
  bool bind_plain_exec() {
    const dt d = to_dnnl(s_.t);
    const bool with_bias = s_.has_bias && !manual_bias_;
    dnnl::matmul::primitive_desc pd;
    if (!make_pd(pd, d, with_bias, k_dnnl_, b_plain_md_) || pd.weights_desc() != b_plain_md_ ||
        std::string(pd.impl_info_str()).find("ref") != std::string::npos)
      return false;
    bind_exec(plain_exec_, pd, d, with_bias, k_dnnl_);
    plain_exec_.set(DNNL_ARG_WEIGHTS, const_cast<void*>(s_.b_const));
    deferred_ = true;
    return true;
  }

  std::string post_name(size_t k) const {
    if (s_.epi.empty()) return "";
    std::string r = " +";
    for (size_t i = 0; i < s_.epi.ops.size(); ++i)
      r += std::string(i == k ? " | by hand:" : "") + " " + epi::code_name(s_.epi.ops[i].code);
    return r;
  }

  // Per-call f32 copies of 16-bit operands, in the run's scratch.
  void setup_emulation_buffers(bool need_a, bool need_b) {
    if (s_.t == DType::f32) return;
    if (dst_f32_ && !emu_) out_f32_ = scratch_.add(out_n_ * 4);
    if (!emu_ && mode_ != Mode::ZeroK) return;
    if (need_a) a_f32_ = scratch_.add(a_n_ * 4);
    if (need_b) b_f32_ = scratch_.add(b_n_ * 4);
    out_f32_ = scratch_.add(out_n_ * 4);
  }

  // The bias in f32: a constant one widened once here; a 16-bit input one
  // widened per call into scratch (f32 inputs are read in place).
  void prepare_f32_bias() {
    if (s_.bias_const) {
      if (s_.t == DType::f32) return;
      bias_c_ = alloc_buffer(bias_n_ * 4);
      to_f32(s_.t, s_.bias_const, static_cast<float*>(bias_c_.data()), bias_n_);
    } else if (s_.t != DType::f32 && bias_s_ == kNone) {
      bias_s_ = scratch_.add(bias_n_ * 4);
    }
  }
  const float* f32_bias(void* const* in, const RunCtx& ctx) const {
    if (bias_c_.data()) return static_cast<const float*>(bias_c_.data());
    if (s_.t == DType::f32) return static_cast<const float*>(in[2]);
    float* b = ScratchLayout::at<float>(ctx, bias_s_);
    to_f32(s_.t, in[2], b, bias_n_);
    return b;
  }

  void prepare_weights(const BuildCtx& ctx) {
    // (the packed primitive is made here, on the compiling thread, even when its weights are packed
    // later: made from this pd on the background thread, oneDNN's JIT crashed copying its post-ops)
    bind_exec(exec_, pd_, pd_d_, pd_bias_, pd_k_);
    if (!s_.b_const || defer_packing(ctx)) return;
    const void* w = prepack(ctx, s_.b_const, s_.t, b_n_, emu_, b_plain_md_, b_md_, packed_);
    exec_.set(DNNL_ARG_WEIGHTS, const_cast<void*>(w));
  }

 public:
  int background_work() const override { return !deferred_ ? 0 : packed_ptr_.load(std::memory_order_acquire) ? 2 : 1; }
  void finish_background_work() const override {
    std::lock_guard<std::mutex> lk(pack_mu_);
    if (packed_ptr_.load(std::memory_order_acquire)) return;
    Buffer b;
    const void* w = mode_ == Mode::Panels ? prepack(BuildCtx{}, s_.b_const, s_.t, b_n_, false, panel_from_, panel_to_, b)
                                          : prepack(BuildCtx{}, s_.b_const, s_.t, b_n_, false, b_plain_md_, b_md_, b);
    packed_ = b;
    packed_ptr_.store(w, std::memory_order_release);  // (runs from now on use exec_ and the packed copy)
  }

 private:

  // Bias added by hand, in f32, through broadcast strides.
  void prepare_manual_bias() {
    if (!manual_bias_) return;
    bias_strides_ = broadcast_strides(s_.bias, s_.out);
    prepare_f32_bias();
  }

  void add_bias(float* o, void* const* in, const RunCtx& ctx) const {
    if (!manual_bias_) return;
    const float* b = f32_bias(in, ctx);
    const size_t r = s_.out.size();
    const int64_t N = s_.out[r - 1];
    const int64_t rows = out_n_ / N;
    const int64_t sN = bias_strides_[r - 1];
    parallel_for(rows, 256, [&](int64_t rb, int64_t re) {
      for (int64_t row = rb; row < re; ++row) {
        int64_t off = 0, rem = row;
        for (int64_t d = static_cast<int64_t>(r) - 2; d >= 0; --d) {
          off += (rem % s_.out[d]) * bias_strides_[d];
          rem /= s_.out[d];
        }
        float* orow = o + row * N;
        const float* brow = b + off;
        for (int64_t j = 0; j < N; ++j) orow[j] += brow[j * sN];
      }
    });
  }

  float* out_f32(void* out, const RunCtx& ctx) const {
    return s_.t == DType::f32 ? static_cast<float*>(out) : ScratchLayout::at<float>(ctx, out_f32_);
  }
  void finish(float* o, void* out) const {
    if (s_.t != DType::f32) from_f32(s_.t, o, out, out_n_);
  }

  // --- f32 linears of a few rows on weights packed in 16-column panels (gemm_panels.h) --------
  // Where oneDNN's f32 implementation for the shape is its jit sgemm (CPUs without AVX-512) and the
  // linear's weights are to be packed (not in_place_: BuildCtx::pack_rows and pack_budget; "always"
  // up to kMaxRows), as they would be for oneDNN's brgemm.
  // A constant [K, N] right-hand side (GPT-2's Conv1D), which is always packed, at any row count up to kMaxRows.
  bool try_panels(const BuildCtx& ctx) {
    if (s_.t != DType::f32 || !s_.b_const || emu_ || manual_bias_) return false;
    const int64_t K = s_.a.back(), N = s_.out.back(), M = out_n_ / std::max<int64_t>(N, 1);
    // one weight matrix for every row (no batch of them), a bias of one row
    if (TensorType(DType::f32, s_.b).numel() != K * N || a_n_ != M * K ||
        (s_.has_bias && TensorType(DType::f32, s_.bias).numel() != N))
      return false;
    // (linears of up to 8 rows run the GEMV on the weights as stored)
    if (s_.b_nk && (M <= gemv::kGemvMaxRows || in_place_)) return false;
    if (!panels::wanted(M, N, impl_)) return false;
    // [N, K] (or [K, N]) as stored -> [N/16][K][16]: the same 3-d tensor [N/16, 16, K] read with other strides
    const int64_t J = N / panels::kCols, C = panels::kCols;
    panel_from_ = s_.b_nk ? dnnl::memory::desc({J, C, K}, dt::f32, dnnl::memory::dims{C * K, K, 1})
                          : dnnl::memory::desc({J, C, K}, dt::f32, dnnl::memory::dims{C, 1, N});
    panel_to_ = dnnl::memory::desc({J, C, K}, dt::f32, dnnl::memory::dims{C * K, 1, C});
    mode_ = Mode::Panels;
    M_ = M, K_ = K, N_ = N;
    name_ = "panels_f32_weights" + post_name(0);
    // packing left for the background thread as for oneDNN's layouts (defer_packing)
    if (ctx.background && !ctx.prepack && bind_plain_exec()) {
      if (plain_exec_.scratch_bytes) pad_ = scratch_.add(plain_exec_.scratch_bytes);
      return true;
    }
    packed_ptr_.store(prepack(ctx, s_.b_const, DType::f32, b_n_, false, panel_from_, panel_to_, packed_),
                      std::memory_order_release);
    return true;
  }
  dnnl::memory::desc panel_from_, panel_to_;  // the weights as stored, and as panels

  // --- GEMV for constant [N, K] weights and few rows -------------------------------
  bool try_gemv(const BuildCtx& ctx) {
    const size_t r = s_.out.size();
    if (!(s_.t == DType::bf16 || s_.t == DType::f32) || !s_.b_nk || !s_.b_const || r != 2) return false;
    int64_t M = s_.a[0];
    if (M > gemv::kGemvMaxRows) return false;
    // bf16: oneDNN when it runs bf16 natively and the weights may be packed for so few rows
    // (pack_weights "always"); by default the GEMV reads them in place, as fast
    if (s_.t == DType::bf16 && ctx.pack_rows > M && ctx.pack_rows == INT64_MAX) {
      dnnl::matmul::primitive_desc pd;
      if (try_make_pd(pd, [&] {
            return dnnl::matmul::primitive_desc(
                engine(), plain_desc(s_.a, dt::bf16),
                dnnl::memory::desc(to_dims(s_.b), dt::bf16, dnnl::memory::format_tag::any),
                plain_desc(s_.out, dt::bf16), default_attr());
          }) &&
          std::string(pd.impl_info_str()).find("ref") == std::string::npos)
        return false;
    }
    mode_ = Mode::Gemv;
    M_ = M;
    K_ = s_.a[1];
    N_ = s_.out[1];
    if (s_.t != DType::f32) {
      xf_ = scratch_.add(M_ * K_ * 4);
      out_f32_ = scratch_.add(M_ * N_ * 4);
    }
    if (s_.has_bias) {
      if (s_.bias_const) {  // f32 bias widened once (an f32 constant too: one code path)
        bias_c_ = alloc_buffer(N_ * 4);
        to_f32(s_.t, s_.bias_const, static_cast<float*>(bias_c_.data()), N_);
      } else if (s_.t != DType::f32) {
        bias_s_ = scratch_.add(N_ * 4);
      }
    }
    name_ = std::string("gemv_") + dtype_name(s_.t) + "_weights" + post_name(0);
    return true;
  }

  void run_gemv(void* const* in, const void* bias, void* out, const RunCtx& ctx) const {
    const void* x = in[0];
    const float* bf = bias ? f32_bias(in, ctx) : nullptr;
    if (s_.t == DType::f32) {
      gemv::run(static_cast<const float*>(x), static_cast<const float*>(s_.b_const), M_, N_, K_, bf,
                static_cast<float*>(out), nullptr, s_.epi, in);
    } else {
      float* xf = ScratchLayout::at<float>(ctx, xf_);
      const uint16_t* xb = static_cast<const uint16_t*>(x);
      for (int64_t i = 0; i < M_ * K_; ++i) xf[i] = bf16_to_f32(xb[i]);
      gemv::run(xf, static_cast<const uint16_t*>(s_.b_const), M_, N_, K_, bf, ScratchLayout::at<float>(ctx, out_f32_),
                static_cast<uint16_t*>(out), s_.epi, in);
    }
  }

  GemmSpec s_;
  Mode mode_ = Mode::Dnnl;
  bool emu_ = false, manual_bias_ = false;
  bool in_place_ = false;  // constant weights read as stored (BuildCtx::pack_rows)
  std::shared_ptr<void> budget_;  // the packed copy's share of BuildCtx::pack_budget, while it counts
  int64_t out_n_ = 0, a_n_ = 0, b_n_ = 0, bias_n_ = 0;
  Exec exec_;  // (with deferred_, its weights are packed_ptr_, set per call once the background thread made them)
  dnnl::matmul::primitive_desc pd_;  // exec_'s
  dt pd_d_ = dt::f32;
  bool pd_bias_ = false;
  size_t pd_k_ = 0;
  dnnl::memory::desc b_plain_md_, b_md_;
  mutable Buffer packed_;  // prepacked weights (made by finish_background_work when deferred_)
  Buffer bias_c_;          // a constant bias widened to f32
  bool deferred_ = false;  // packing left for the background thread; plain_exec_ serves until then
  Exec plain_exec_;
  mutable std::atomic<const void*> packed_ptr_{nullptr};
  mutable std::mutex pack_mu_;
  ScratchLayout scratch_;   // per call: f32 copies of 16-bit operands and results, the oneDNN scratchpad
  size_t a_f32_ = kNone, b_f32_ = kNone, out_f32_ = kNone, bias_s_ = kNone, xf_ = kNone, pad_ = kNone;
  Shape bias_strides_;
  std::string name_ = "onednn_matmul", impl_;
  size_t k_dnnl_ = 0;  // post-ops [0, k_dnnl_) run inside the oneDNN primitive
  bool dst_f32_ = false;  // a 16-bit primitive writing f32 for the activations run by hand
  int64_t M_ = 0, K_ = 0, N_ = 0;  // gemv
};

// Does oneDNN run matmuls of 16-bit dtype t natively on this CPU (an implementation other than its
// slow reference one)? Asked once per dtype.
bool native_matmul(DType t) {
  static const bool bf16 = [] {
    dnnl::matmul::primitive_desc pd;
    return try_make_pd(pd, [&] {
             return dnnl::matmul::primitive_desc(engine(), plain_desc({32, 64}, dt::bf16),
                                                 dnnl::memory::desc({64, 32}, dt::bf16, dnnl::memory::format_tag::any),
                                                 plain_desc({32, 32}, dt::bf16), default_attr());
           }) &&
           std::string(pd.impl_info_str()).find("ref") == std::string::npos;
  }();
  return t == DType::bf16 ? bf16 : t == DType::f32;
}

const void* const_data(const Value* v) { return v->is_const() && v->storage ? v->storage->data : nullptr; }

std::unique_ptr<Kernel> make_matmul(const Node& n, const BuildCtx& ctx) {
  GemmSpec s;
  s.t = n.inputs[0]->type.dtype;
  s.out = n.outputs[0]->type.shape();
  size_t r = s.out.size();
  s.a = pad_front(n.inputs[0]->type.shape(), r);
  s.b = pad_front(n.inputs[1]->type.shape(), r);
  s.b_const = const_data(n.inputs[1]);
  if (epi::base_inputs(n.inputs.size(), n.attrs) > 2) {
    s.has_bias = true;
    s.bias = pad_front(n.inputs[2]->type.shape(), r);
    s.bias_const = const_data(n.inputs[2]);
  }
  s.epi = epi::parse(n, s.out, false);
  return std::make_unique<GemmKernel>(s, ctx);
}

// A linear's rows: the product of its input's leading dims.
int64_t linear_rows(const Node& n) {
  const Shape x = n.inputs[0]->type.shape();
  int64_t M = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) M *= x[i];
  return M;
}

// int8 weights, and constant bf16 ones where this CPU has no native bf16 GEMM (whose f32 emulation
// would keep a widened copy of the weights): read as stored, widened by the kernel (make_linear_widened)
bool linear_widened(const Node& n, int64_t M) {
  return n.inputs[1]->type.dtype == DType::i8 ||
         (n.inputs[0]->type.dtype == DType::bf16 && M > gemv::kGemvMaxRows && const_data(n.inputs[1]) &&
          !native_matmul(DType::bf16));
}

// Does the linear's packed copy count against BuildCtx::pack_budget? Constant weights of its input's
// dtype, f32 or natively run bf16 (others run widened or emulated: linear_widened, or a copy made
// anyway), K > 0, more rows than the GEMV takes and at least pack_rows (fewer pack whatever the budget).
bool budgeted_linear(const Node& n, int64_t M, const BuildCtx& ctx) {
  const DType t = n.inputs[0]->type.dtype;
  return const_data(n.inputs[1]) && n.inputs[1]->type.dtype == t &&
         (t == DType::f32 || (t == DType::bf16 && native_matmul(DType::bf16))) &&
         n.inputs[0]->type.shape().back() > 0 && M > gemv::kGemvMaxRows && M >= ctx.pack_rows;
}

std::unique_ptr<Kernel> make_linear(const Node& n, const BuildCtx& ctx) {
  GemmSpec s;
  s.t = n.inputs[0]->type.dtype;
  Shape x = n.inputs[0]->type.shape();
  int64_t K = x.back(), N = n.inputs[1]->type.size(0);
  const int64_t M = linear_rows(n);
  if (linear_widened(n, M)) return make_linear_widened(n, ctx, M, K, N);
  s.budgeted = budgeted_linear(n, M, ctx);
  s.a = {M, K};
  s.b = {K, N};
  s.out = {M, N};
  s.b_nk = true;
  s.b_const = const_data(n.inputs[1]);
  if (epi::base_inputs(n.inputs.size(), n.attrs) > 2) {
    s.has_bias = true;
    s.bias = {1, N};
    s.bias_const = const_data(n.inputs[2]);
  }
  s.epi = epi::parse(n, s.out, false);
  return std::make_unique<GemmKernel>(s, ctx);
}

}  // namespace

std::vector<dnnl_util::BudgetedWeight> dnnl_util::budgeted_weights(const Graph& g, const BuildCtx& ctx) {
  std::vector<BudgetedWeight> r;
  for (auto& n : g.nodes()) {
    if (n->op->name != std::string_view("linear") || n->inputs.size() < 2 || n->inputs[0]->type.shape().empty())
      continue;
    const int64_t rows = linear_rows(*n);
    if (!budgeted_linear(*n, rows, ctx)) continue;
    const void* data = const_data(n->inputs[1]);
    auto it = std::find_if(r.begin(), r.end(), [&](const auto& e) { return e.data == data; });
    if (it != r.end())
      it->rows = std::min(it->rows, rows);
    else
      r.push_back({data, static_cast<int64_t>(n->inputs[1]->type.nbytes()), rows});
  }
  return r;
}

AG_REGISTER_OP(matmul, {.name = "matmul", .min_inputs = 2, .max_inputs = -1, .infer = infer_matmul,
                        .make_kernel = make_matmul, .props = kCostlyKernel});
AG_REGISTER_OP(linear, {.name = "linear", .min_inputs = 2, .max_inputs = -1, .infer = infer_linear,
                        .make_kernel = make_linear, .props = kCostlyKernel});

}  // namespace ag
