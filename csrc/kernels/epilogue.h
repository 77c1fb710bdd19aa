// Runs the post-op chain of a GEMM/conv node (the format is ir/epilogue.h). The binary ops
// (add, sub, mul, div: one IEEE operation each) may run inside the oneDNN primitive as binary
// post-ops; every unary op (the activations) runs here, as the fused interpreter's instruction of
// its row (kernels/elementwise_ops.h), on the f32 result: the same code as the single-op kernel,
// so an absorbed activation gives bit for bit what the unfused op gives, NaN and inf included.
// (oneDNN's eltwise post-ops do not: its max/min-based activations turn NaN into 0, and its
// transcendental ones are other approximations.)
#pragma once
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ir/epilogue.h"
#include "ir/graph.h"

namespace ag::epi {

struct Op {
  int64_t code = 0;
  double p[kArgs] = {0, 0, 0};  // unary ops: the instruction's numbers
  int input = -1;  // node input index of the operand (binary ops)
  Mode mode = Mode::Scalar;
  DType dt = DType::f32;
  const void* cdata = nullptr;  // operand bytes when it is a constant
  Shape shape;                  // operand shape padded to the output rank
};

// The post-op chain of a node, and its implementation on f32 row segments.
struct Epilogue {
  std::vector<Op> ops;
  int64_t L = 1, C = 1;  // row length and channel count for Mode::Channel
  bool empty() const { return ops.empty(); }
  // Applies ops[k0..] to seg[0..n), which is output row r, columns j0..j0+n.
  void apply(float* seg, int64_t r, int64_t j0, int64_t n, void* const* in, size_t k0) const;
  // Applies ops[k0..] to rows [r0, r1) of an f32 output of rows of L elements (row r at out + r * L), op
  // by op over the block (serial: a kernel's block while it is in the cache).
  void apply_rows(float* out, int64_t r0, int64_t r1, void* const* in, size_t k0) const;
  // Applies ops[k0..] to a whole f32 output of R x L elements (parallel).
  void apply_all(float* out, int64_t R, void* const* in, size_t k0) const;
  // The end of the run of binary ops from k0 (the ops a oneDNN primitive may take as post-ops).
  size_t binary_end(size_t k0) const;
};
// `view`: the shape the kernel computes (linear: [M, N]; matmul, conv: the output).
Epilogue parse(const Node& n, const Shape& view, bool conv);

// oneDNN binary post-ops for ops[k0..k) (all binary: k <= binary_end(k0)). Operand descriptors
// are plain (operand_md), except full operands when `full_md` is given (conv: the primitive's
// dst layout; the kernel reorders the operand into it). The operand of op i is bound to
// DNNL_ARG_ATTR_MULTIPLE_POST_OP(i - k0) | DNNL_ARG_SRC_1. Op `sum_at` (an add of a full-size
// operand) becomes oneDNN's sum post-op instead: the destination holds the operand when the
// primitive runs, and the primitive adds its result to it (no operand to bind).
dnnl::post_ops to_dnnl_post_ops(const Epilogue& e, size_t k0, size_t k, const dnnl::memory::desc* full_md = nullptr,
                                size_t sum_at = SIZE_MAX);
dnnl::memory::desc operand_md(const Op& op);

// An activation whose oneDNN eltwise post-op (`alg`, alpha, beta) gives what its row gives on every
// finite value, up to the sign of a zero result: ReLU and clamp with number bounds, as clip (a max,
// then a min). NaN is where they differ (oneDNN's clip turns it into alpha), so a kernel appends it
// only where value bounds (ir/value_bounds.h) prove the values finite. False for any other op.
bool finite_exact_activation(const Op& op, dnnl::algorithm* alg, float* alpha, float* beta);
// The bound of such an activation's result given its input's (finite) bound b; kUnbounded for
// other unary ops.
double activation_bound(const Op& op, double b);

}  // namespace ag::epi
