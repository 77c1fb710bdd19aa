#include "kernels/epilogue.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "kernels/common.h"
#include "kernels/elementwise_rows.h"
#include "kernels/fused_elementwise.h"
#include "kernels/onednn_util.h"
#include "ir/value_bounds.h"

namespace ag::epi {

static const void* const_data(const Value* v) { return v->is_const() && v->storage ? v->storage->data : nullptr; }

Epilogue parse(const Node& n, const Shape& view, bool conv) {
  Epilogue e;
  const size_t r = view.size();
  if (conv) {
    e.C = view[1];
    e.L = 1;
    for (size_t d = 2; d < r; ++d) e.L *= view[d];
  } else {
    e.L = view.back();
  }
  if (!n.attrs.has("post_ops")) return e;
  const auto& codes = n.attrs.ints("post_ops");
  const auto& args = n.attrs.floats("post_args");
  int k = static_cast<int>(base_inputs(n.inputs.size(), n.attrs));
  const Shape out = n.outputs[0]->type.shape();
  for (size_t i = 0; i < codes.size(); ++i) {
    Op op;
    op.code = codes[i];
    for (int j = 0; j < kArgs; ++j) op.p[j] = args[kArgs * i + j];
    if (is_binary(op.code)) {
      const Value* v = n.inputs[k];
      op.input = k++;
      op.dt = v->type.dtype;
      op.cdata = const_data(v);
      AG_CHECK(classify(v->type.shape(), out, conv, &op.mode), "bad post-op operand in ", n.context());
      switch (op.mode) {
        case Mode::Scalar: op.shape = Shape(r, 1); break;
        case Mode::Full: op.shape = view; break;
        case Mode::Col: op.shape = Shape(r, 1), op.shape.back() = view.back(); break;
        case Mode::Channel: op.shape = Shape(r, 1), op.shape[1] = view[1]; break;
      }
    }
    e.ops.push_back(op);
  }
  return e;
}

namespace {

template <typename T, typename F>
void binary_seg(float* s, int64_t n, const T* p, bool scalar, F f) {
  if (scalar) {
    const float v = load(p[0]);
    for (int64_t i = 0; i < n; ++i) s[i] = f(s[i], v);
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = f(s[i], load(p[i]));
  }
}

template <typename F>
void binary_any(float* s, int64_t n, DType dt, const void* p, bool scalar, F f) {
  if (dt == DType::f32) binary_seg(s, n, static_cast<const float*>(p), scalar, f);
  else if (dt == DType::bf16) binary_seg(s, n, static_cast<const bf16s*>(p), scalar, f);
  else binary_seg(s, n, static_cast<const f16s*>(p), scalar, f);
}

}  // namespace

namespace {

// op (binary) on s[0..n) with its operand at p (one value where `scalar`)
void binary_op(const Op& op, float* s, int64_t n, const char* p, bool scalar) {
  switch (op.code) {
    case kAdd: binary_any(s, n, op.dt, p, scalar, ew::R_add<float>(op.p)); break;
    case kSub: binary_any(s, n, op.dt, p, scalar, ew::R_sub<float>(op.p)); break;
    case kMul: binary_any(s, n, op.dt, p, scalar, ew::R_mul<float>(op.p)); break;
    case kDiv: binary_any(s, n, op.dt, p, scalar, ew::R_div<float>(op.p)); break;
  }
}

}  // namespace

void Epilogue::apply(float* s, int64_t r, int64_t j0, int64_t n, void* const* in, size_t k0) const {
  for (size_t k = k0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    if (!is_binary(op.code)) {
      fe::run_unary(op.code, op.p, s, s, n);
      continue;
    }
    const void* base = op.cdata ? op.cdata : in[op.input];
    const size_t es = dtype_size(op.dt);
    const char* p = static_cast<const char*>(base);
    bool scalar = true;
    switch (op.mode) {
      case Mode::Scalar: break;
      case Mode::Full: p += static_cast<size_t>(r * L + j0) * es, scalar = false; break;
      case Mode::Col: p += static_cast<size_t>(j0) * es, scalar = false; break;
      case Mode::Channel: p += static_cast<size_t>(r % C) * es; break;
    }
    binary_op(op, s, n, p, scalar);
  }
}

void Epilogue::apply_rows(float* out, int64_t r0, int64_t r1, void* const* in, size_t k0) const {
  float* s = out + r0 * L;
  const int64_t n = (r1 - r0) * L;
  for (size_t k = k0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    if (!is_binary(op.code)) {
      fe::run_unary(op.code, op.p, s, s, n);
      continue;
    }
    const char* p = static_cast<const char*>(op.cdata ? op.cdata : in[op.input]);
    const size_t es = dtype_size(op.dt);
    switch (op.mode) {  // (the block's rows are contiguous: a scalar or full-size operand is one segment)
      case Mode::Scalar: binary_op(op, s, n, p, true); break;
      case Mode::Full: binary_op(op, s, n, p + static_cast<size_t>(r0 * L) * es, false); break;
      case Mode::Col:
        for (int64_t r = r0; r < r1; ++r) binary_op(op, out + r * L, L, p, false);
        break;
      case Mode::Channel:
        for (int64_t r = r0; r < r1; ++r) binary_op(op, out + r * L, L, p + static_cast<size_t>(r % C) * es, true);
        break;
    }
  }
}

void Epilogue::apply_all(float* out, int64_t R, void* const* in, size_t k0) const {
  if (k0 >= ops.size()) return;
  bool unary_only = true;
  for (size_t k = k0; k < ops.size(); ++k) unary_only = unary_only && !is_binary(ops[k].code);
  if (unary_only) {  // (activations after the primitive's binary post-ops): flat, in L1-sized pieces
    const int64_t n = R * L;
    parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; p += 2048) {
        const int64_t m = std::min<int64_t>(2048, e - p);
        for (size_t k = k0; k < ops.size(); ++k) fe::run_unary(ops[k].code, ops[k].p, out + p, out + p, m);
      }
    });
    return;
  }
  const int64_t len = L;
  parallel_for(R, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) apply(out + r * len, r, 0, len, in, k0);
  });
}

dnnl::memory::desc operand_md(const Op& op) { return dnnl_util::plain_desc(op.shape, dnnl_util::to_dnnl(op.dt)); }

size_t Epilogue::binary_end(size_t k0) const {
  size_t k = k0;
  while (k < ops.size() && is_binary(ops[k].code)) ++k;
  return k;
}

dnnl::post_ops to_dnnl_post_ops(const Epilogue& e, size_t k0, size_t k, const dnnl::memory::desc* full_md,
                                size_t sum_at) {
  using alg = dnnl::algorithm;
  AG_CHECK(k <= e.binary_end(k0), "epilogue: post-ops ", k0, "..", k, " are not all binary");
  dnnl::post_ops po;
  for (size_t i = k0; i < k && i < e.ops.size(); ++i) {
    const Op& op = e.ops[i];
    if (i == sum_at) {
      AG_CHECK(op.code == kAdd && op.mode == Mode::Full, "epilogue: post-op ", i, " is no full-size add");
      po.append_sum(1.0f);  // (dst = result + 1.0 * dst: one rounding, as the add's)
      continue;
    }
    alg a = op.code == kAdd ? alg::binary_add
            : op.code == kSub ? alg::binary_sub
            : op.code == kMul ? alg::binary_mul
                              : alg::binary_div;
    po.append_binary(a, op.mode == Mode::Full && full_md ? *full_md : operand_md(op));
  }
  return po;
}

bool finite_exact_activation(const Op& op, dnnl::algorithm* alg, float* alpha, float* beta) {
  *alg = dnnl::algorithm::eltwise_clip;
  if (op.code == fe::kX_relu) {  // x < 0 ? 0 : x
    *alpha = 0.0f, *beta = FLT_MAX;
    return true;
  }
  if (op.code != fe::kX_clamp) return false;
  const ew::Clamp<float> c(op.p);  // (the row's own reading of its numbers)
  if ((c.has_lo && std::isnan(c.lo)) || (c.has_hi && std::isnan(c.hi)) || !(c.has_lo || c.has_hi)) return false;
  *alpha = c.has_lo ? c.lo : -FLT_MAX;
  *beta = c.has_hi ? c.hi : FLT_MAX;
  return true;
}

double activation_bound(const Op& op, double b) {
  if (!(b < kUnbounded)) return kUnbounded;
  if (op.code == fe::kX_relu) return b;
  if (op.code != fe::kX_clamp) return kUnbounded;
  const ew::Clamp<float> c(op.p);
  if ((c.has_lo && std::isnan(c.lo)) || (c.has_hi && std::isnan(c.hi))) return kUnbounded;
  const double lo = c.has_lo ? std::fabs(c.lo) : 0.0, hi = c.has_hi ? std::fabs(c.hi) : 0.0;
  // the result lies between the input and the bounds: |r| <= max(b, |lo|, |hi|); with both
  // bounds, in [lo, hi] (or hi alone when lo > hi)
  double r = std::max(b, std::max(lo, hi));
  if (c.has_lo && c.has_hi) r = std::min(r, std::max(lo, hi));
  return checked_bound(r);
}

}  // namespace ag::epi
