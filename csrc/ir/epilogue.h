// The post-op format of GEMM and convolution nodes: what passes/fuse_epilogues.cpp writes and
// the linear/matmul/conv kernels read (kernels/epilogue.h runs it).
//
// A GEMM/conv node may carry a chain of elementwise ops absorbed by the fuse_epilogues pass,
// applied in order to its f32 result before the single rounding to the output dtype:
//   attrs "post_ops"    ints, one code per op: the fused-elementwise instruction code of a unary
//                       op registered with `epilogue` (ir/op_registry.h), or a binary code below
//   attrs "post_args"   floats, kArgs per op: the instruction's numbers (FusedInstr::p)
//   attrs "post_inputs" int, how many inputs were appended to the node for the binary ops (one
//                       each, in chain order, after the op's own inputs)
//   attrs "fused"       string, the absorbed nodes' FX names joined by ','
// A binary op's operand has the output dtype or float32 and broadcasts to the output without
// changing it: a scalar, the full output, a row over the last dim (linear/matmul) or one value
// per channel (conv, dim 1).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/types.h"

namespace ag {
struct OpDef;
}

namespace ag::epi {

constexpr int kArgs = 3;  // post_args per op
// The binary post-ops: out = out (op) operand. The values are the fused interpreter's codes of
// add, sub, mul and div, the first rows of AG_EW_BINARY_OPS (kernels/fused_elementwise.h checks
// that they agree).
constexpr int64_t kAdd = 4001, kSub = 4002, kMul = 4003, kDiv = 4004;
inline bool is_binary(int64_t c) { return c == kAdd || c == kSub || c == kMul || c == kDiv; }
// The unary op registered with `epilogue` whose instruction code is `c`, or nullptr.
const OpDef* unary_op(int64_t c);
std::string code_name(int64_t c);  // the op's name ("add", ...)

// How a binary operand is indexed when the output is seen as [R, L] rows
// (linear/matmul: L = last dim; conv: L = spatial size, R = batch * channels).
enum class Mode : uint8_t { Scalar, Full, Col, Channel };

// Classifies `operand` against the output for a GEMM op ("linear"/"matmul": scalar,
// full, last-dim row; "conv": scalar, full, per channel). False when it does
// not fit (a broadcast that would change the output, or another pattern).
bool classify(const Shape& operand, const Shape& out, bool conv, Mode* mode);

// Validates the post-op attributes and appended inputs of a GEMM node during
// shape inference (`n_base`: the op's own input count). Throws with a message.
void check_post_ops(const std::vector<TensorType>& in, size_t n_base, const Attrs& a, const TensorType& out,
                    bool conv, const char* op);
// The number of inputs the op itself has (the rest are post-op operands).
inline size_t base_inputs(size_t n_inputs, const Attrs& a) {
  return n_inputs - static_cast<size_t>(a.i("post_inputs", 0));
}

}  // namespace ag::epi
