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
// float32 until its final store). bool values are float 0/1 inside a tile; a binary or compare
// row over bool operands computes as bool, as its single-op kernel does.
#pragma once
#include <cstdint>

#include "ir/epilogue.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/elementwise_ops.h"

namespace ag::fe {

// Instructions that are not rows of elementwise_ops.h (ops with dtype rules of their own).
enum Code : int64_t {
  // where(cond, a, b)
  kWhere = 120,
  // fma(a, b, c): a * b + c, one rounding
  kFma = 121,
  // convert{dtype = params[0]}
  kConvert = 130,
};

// The rows of elementwise_ops.h, one code each, in ranges by kind: unary (same dtype), predicate
// (-> bool), unary with numbers p0..p2 (param and functor rows), binary (same dtype; the forms
// with p0), compare (-> bool).
#define AG_X_CODE(name, ...) kX_##name,
enum XCode : int64_t {
  kXUnaryBegin = 1000, AG_EW_UNARY_OPS(AG_X_CODE) kXUnaryEnd,
  kXPredBegin = 2000, AG_EW_PREDICATE_OPS(AG_X_CODE) kXPredEnd,
  kXParamBegin = 3000, AG_EW_UNARY_PARAM_OPS(AG_X_CODE) AG_EW_UNARY_FUNCTOR_OPS(AG_X_CODE) kXParamEnd,
  kXBinaryBegin = 4000, AG_EW_BINARY_OPS(AG_X_CODE) AG_EW_BINARY_FORMS(AG_X_CODE) kXBinaryEnd,
  kXCompareBegin = 5000, AG_EW_COMPARE_OPS(AG_X_CODE) kXCompareEnd,
};
#undef AG_X_CODE
// Each range holds its rows (a list that outgrew its range would run into the next one's codes).
static_assert(kXUnaryEnd < kXPredBegin && kXPredEnd < kXParamBegin && kXParamEnd < kXBinaryBegin &&
                  kXBinaryEnd < kXCompareBegin && kXCompareEnd < 6000,
              "elementwise_ops.h: a list has outgrown its code range");
// ... and every row has one code.
static_assert((kXUnaryEnd - kXUnaryBegin) + (kXPredEnd - kXPredBegin) + (kXParamEnd - kXParamBegin) - 3 == ew::kUnaryRows &&
                  (kXBinaryEnd - kXBinaryBegin) + (kXCompareEnd - kXCompareBegin) - 2 == ew::kBinaryRows + ew::kBinaryForms,
              "fused_elementwise.h: a list of elementwise_ops.h has no code range");
// The epilogue format names the binary post-ops by these codes (ir/epilogue.h).
static_assert(kX_add == epi::kAdd && kX_sub == epi::kSub && kX_mul == epi::kMul && kX_div == epi::kDiv,
              "ir/epilogue.h's binary codes must be the interpreter's");

constexpr int kArgs = FusedInstr::kMaxArgs;  // operand slots per instruction
constexpr int kParams = 3;                   // scalar parameters per instruction (FusedInstr::p)

// Encodes a node of an op that is not a row (where, convert) as one instruction of a fused
// program: those ops register it as their OpDef::fuse.
// False when the op, its attributes or its dtypes are not supported inside a fused group
// (only float32/bfloat16/float16 and bool values; integer math stays unfused).
bool encode(const Node& n, FusedInstr* out);
bool value_dtype_ok(DType t);  // a dtype fused values may have: f32, bf16, f16, bool

// Runs one unary instruction (a unary, predicate, param or functor row) over n floats: the
// interpreter's case, also used by the GEMM/conv epilogues (kernels/epilogue.cpp). A code in
// [kRowCodeBegin, ...) runs the row function an op registered with it (OpDef::row_f32: a plugin's
// epilogue op, kernels/plugin.cpp).
void run_unary(int64_t code, const double* p, float* d, const float* a, int64_t n);

}  // namespace ag::fe
