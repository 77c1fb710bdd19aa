// The op registry: an op's name, arity, shape/dtype inference, properties and
// kernel factory are registered together, in the kernel file that implements it:
//
//   AG_REGISTER_OP(softmax, {.name = "softmax", .min_inputs = 1, .max_inputs = 1,
//                            .infer = infer_softmax, .make_kernel = make_softmax});
// (The elementwise ops are registered from one table, kernels/elementwise_ops.h.)
//
// Inference sees only input types and attributes and throws ag::Error with a
// plain message; the graph adds the node context. Kernels are built once per
// node at compile time with all shapes known, and run with raw pointers.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/kernel.h"
#include "ir/attrs.h"
#include "ir/types.h"

namespace ag {

struct Node;

enum OpProps : uint32_t {
  kNoProps = 0,
  kElementwise = 1u << 0,  // output[i] depends on input[i] only (after broadcasting)
  kAlias = 1u << 1,        // output 0 is a view of input 0's bytes (see alias_offset)
  kReduction = 1u << 2,
  kNoFold = 1u << 3,       // never constant-fold (random, side effects)
  kNoCSE = 1u << 4,
  // Output 0 is input 0 with some elements overwritten (scatters): the kernel copies input 0 into
  // output 0 only when they are different buffers and reads no other element of input 0, so the
  // planner may put output 0 over input 0's bytes (a dying intermediate, or a graph input the
  // graph writes: a KV cache updated in place).
  kUpdatesInput0 = 1u << 5,
  // Making the kernel is costly (oneDNN JIT code, packed weights): compile_program makes these
  // kernels on several threads at once.
  kCostlyKernel = 1u << 6,
};

// Runs a kernel once outside any executor (constant folding, tests): makes its
// state and scratch for this one run.
void run_kernel_once(const Kernel& k, void* const* in, void* const* out);

using InferFn = std::vector<TensorType> (*)(const std::vector<TensorType>& in, const Attrs& attrs);
using MakeKernelFn = std::unique_ptr<Kernel> (*)(const Node& node, const BuildCtx& ctx);
using AliasOffsetFn = int64_t (*)(const Node& node);  // byte offset of output 0 inside input 0

// One instruction of a fused elementwise program (the fused_elementwise op,
// kernels/fused_elementwise.h), as an elementwise op declares it for the fusion passes.
struct FusedInstr {
  static constexpr int kMaxArgs = 3;  // operand slots per instruction in the fused program's "args"
  int64_t code = 0;  // the fused interpreter's instruction code
  int nargs = 0;
  double p[3] = {0, 0, 0};  // numbers the instruction carries (attributes)
};
// Encodes a node as one instruction; false when it cannot be fused with these dtypes or attributes.
using FuseFn = bool (*)(const Node& node, FusedInstr* out);
// Channels-last (BuildCtx::channels_last), declared with the op's kernel: whether the node's kernel
// reads input `i` (>= 0) as NHWC bytes of its logical [N, C, H, W], or may write its result so when
// its input 0 is row-major (kWritesChannelsLast) or channels-last (kPassesChannelsLast: a pool
// passes the layout on, a convolution makes its own), or whether row-major values cost the kernel a
// reorder of its own (kPrefersChannelsLast: oneDNN's convolutions run on NHWC; a permute between
// the layouts is a plain copy instead of a transposing one). runtime/layout.cpp's plan asks every
// reader and writer of a value.
inline constexpr int kWritesChannelsLast = -1, kPassesChannelsLast = -2, kPrefersChannelsLast = -3;
using ChannelsLastFn = bool (*)(const Node& node, int i);
// Layout-transparent ops (runtime/layout.h): whether the node computes on the NHWC bytes of its 4-D
// values what the same op computes over their permuted shapes [N, H, W, C] with the attributes it
// writes to `attrs` (given the node's own). kElementwise ops with one result are transparent without
// one (their attributes hold no dims).
using NhwcViewFn = bool (*)(const Node& node, Attrs* attrs);
// The input whose bytes the node's kernel may take as its result's starting value, adding its
// result to them (a residual add run as oneDNN's sum post-op), or -1: the planner may then put
// output 0 over that input where it dies at the node (runtime/memory_planner.cpp). The kernel
// checks at run time whether it got them (and copies the input there where it did not).
using AccumulatesIntoFn = int (*)(const Node& node, const BuildCtx& ctx);
// Value bounds (ir/value_bounds.h): the largest |x| of the node's output 0, given its inputs' bounds
// (b.of(input)), such that the output is finite wherever the inputs are finite and within theirs;
// kUnbounded when the op cannot tell.
using BoundFn = double (*)(const Node& node, const ValueBounds& b);

struct OpDef {
  const char* name = nullptr;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  InferFn infer = nullptr;
  MakeKernelFn make_kernel = nullptr;
  uint32_t props = kNoProps;
  AliasOffsetFn alias_offset = nullptr;  // kAlias ops; nullptr means offset 0
  // Elementwise fusion, declared with the op (kernels/elementwise_ops.h): `fuse` makes a node one
  // instruction of a fused_elementwise node (passes/fuse_elementwise.cpp); `fused_code` is the
  // op's instruction code where it has one; an `epilogue` op may also be absorbed by a GEMM or
  // convolution as a post-op, run as the same instruction on the f32 result (passes/fuse_epilogues.cpp).
  FuseFn fuse = nullptr;
  int64_t fused_code = 0;
  bool epilogue = false;
  ChannelsLastFn channels_last = nullptr;  // nullptr: row-major only
  NhwcViewFn nhwc_view = nullptr;
  AccumulatesIntoFn accumulates_into = nullptr;
  BoundFn bound = nullptr;  // nullptr: the output's bound is unknown
  // A unary op with no row in the fused interpreter (a plugin's op, kernels/plugin.h): its float32
  // row function, in place, with the instruction's numbers; the interpreter runs it for the op's
  // fused_code (the GEMM/conv epilogues apply it as a post-op).
  void (*row_f32)(float* x, int64_t n, const double* p) = nullptr;
  // An op a plugin loaded at run time brought (kernels/plugin.h): the plugin's name and version,
  // which an airgraph file that uses the op records (ir/serialize.h); nullptr for built-in ops.
  const char* plugin = nullptr;
  const char* plugin_version = nullptr;
  bool has(OpProps p) const { return (props & p) != 0; }
};

// Fused instruction codes of ops that carry a row function (OpDef::row_f32: plugins' epilogue ops):
// [kRowCodeBegin, kRowCodeBegin + kMaxRowCodes), above every code of the fused interpreter's own.
inline constexpr int64_t kRowCodeBegin = 9000, kMaxRowCodes = 512;
using RowF32Fn = void (*)(float* x, int64_t n, const double* p);
// The row function registered for instruction `code`, or nullptr: a lock-free read (the
// interpreter's and the epilogues' run-time dispatch).
RowF32Fn row_fn(int64_t code);

void register_op(const OpDef& def);
const OpDef* find_op(std::string_view name);  // nullptr if unknown
std::vector<const OpDef*> all_ops();           // sorted by name

struct OpRegistrar {
  explicit OpRegistrar(const OpDef& def) { register_op(def); }
};
#define AG_REGISTER_OP(ident, ...) static ::ag::OpRegistrar ag_op_registrar_##ident(::ag::OpDef __VA_ARGS__)

}  // namespace ag
