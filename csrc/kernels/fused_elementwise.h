// The "fused_elementwise" op: a group of elementwise nodes (built by
// passes/fuse_elementwise.cpp) run as one tiled pass over memory.
//
// Attributes (a small program; slots 0..N-1 are the node's inputs, slot N+i is
// the result of instruction i):
//   ops      int[K]     instruction codes (fe::Code)
//   args     int[3K]    operand slots of each instruction, -1 when unused
//   params   float[3K]  per-instruction scalars (alpha, bounds, slope, exponent,
//                       target dtype of a convert), see fe::encode
//   outputs  int[M]     the slot of each node output
//   fused    string     the FX names of the original nodes, comma separated
// Every output has the shape all inputs broadcast to; its dtype follows from
// the program (inference re-derives the type of every slot).
//
// Numerics: every value is computed in float32 with the same functions as the
// single-op kernels, and every instruction whose result dtype is bfloat16 or
// float16 rounds its result to that dtype right away, exactly where the
// unfused graph would have stored it. A fused group is therefore bit-identical
// to the unfused kernels (and unlike Inductor, which keeps a bf16 chain in
// float32 until its final store). bool values are float 0/1 inside a tile.
#pragma once
#include <cstdint>

#include "ir/graph.h"
#include "kernels/elementwise_ops.h"

namespace ag::fe {

enum Code : int64_t {
  // unary, float -> same dtype
  kNeg = 1, kAbs, kRelu, kSilu, kTanh, kSigmoid, kErf, kExp, kLog, kLog1p, kExpm1, kRsqrt, kSqrt, kSin, kCos,
  kReciprocal, kFloor, kCeil, kRound, kTrunc, kSign, kLeakyRelu, kGeluErf, kGeluTanh, kClamp, kPowScalar,
  // unary -> bool
  kLogicalNot = 40, kIsNan,
  // binary arithmetic, float
  kAdd = 60, kAddAlpha, kSub, kSubAlpha, kMul, kDiv, kDivTrunc, kPow, kAtan2,
  // binary, float or bool -> same dtype
  kMaximum = 80, kMinimum,
  // binary -> bool
  kEq = 100, kNe, kLt, kLe, kGt, kGe, kLogicalAnd, kLogicalOr, kLogicalXor,
  // where(cond, a, b)
  kWhere = 120,
  // convert{dtype = params[0]}
  kConvert = 130,
};

// The listed ops of elementwise_ops.h, one code each, in ranges by kind:
// unary (same dtype), predicate (-> bool), unary with params p0..p2, binary.
#define AG_X_CODE(name, ...) kX_##name,
enum XCode : int64_t {
  kXUnaryBegin = 1000, AG_EW_UNARY_OPS(AG_X_CODE) kXUnaryEnd,
  kXPredBegin = 2000, AG_EW_PREDICATE_OPS(AG_X_CODE) kXPredEnd,
  kXParamBegin = 3000, AG_EW_UNARY_PARAM_OPS(AG_X_CODE) kXParamEnd,
  kXBinaryBegin = 4000, AG_EW_BINARY_OPS(AG_X_CODE) kXBinaryEnd,
};
#undef AG_X_CODE

constexpr int kArgs = 3;    // operand slots per instruction
constexpr int kParams = 3;  // scalar parameters per instruction

struct Instr {
  int64_t code = 0;
  int nargs = 0;
  double p[kParams] = {0, 0, 0};
};

// Encodes elementwise node `n` as one instruction of a fused program. False when
// the op, its attributes or its dtypes are not supported inside a fused group
// (only float32/bfloat16/float16 and bool values; integer math stays unfused).
bool encode(const Node& n, Instr* out);

}  // namespace ag::fe
