// The op registry: an op's name, arity, shape/dtype inference, properties and
// kernel factory are registered together, in the kernel file that implements it:
//
//   AG_REGISTER_OP(relu, {.name = "relu", .min_inputs = 1, .max_inputs = 1,
//                         .infer = infer_same, .make_kernel = make_relu, .props = kElementwise});
//
// Inference sees only input types and attributes and throws ag::Error with a
// plain message; the graph adds the node context. Kernels are built once per
// node at compile time with all shapes known, and run with raw pointers.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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

// Per-executor mutable state of a kernel (oneDNN argument maps whose data
// handles are re-pointed on every call). Made once per executor by
// Kernel::make_state; never shared between executors.
class KernelState {
 public:
  virtual ~KernelState() = default;
};

// What an executor lends a kernel for one run: `scratch` holds the kernel's
// scratch_bytes() (64-byte aligned, owned by that executor, contents undefined
// on entry), `state` is what make_state() returned for that executor.
struct RunCtx {
  void* scratch = nullptr;
  KernelState* state = nullptr;
};

// A compiled kernel for one node, built once at compile time and then
// read-only: one kernel serves every executor (and so every calling thread) at
// once. run() gets the node's input and output pointers in order and writes
// nothing but its outputs, ctx.scratch and ctx.state. It must not allocate or
// throw on the hot path except for data-dependent errors (an index out of
// range), which it reports by throwing.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void run(void* const* in, void* const* out, const RunCtx& ctx) const = 0;
  // Bytes of per-run scratch (temporary buffers, oneDNN scratchpads).
  virtual size_t scratch_bytes() const { return 0; }
  virtual std::unique_ptr<KernelState> make_state() const { return nullptr; }
  virtual std::string name() const { return "kernel"; }  // e.g. "onednn_matmul_f32"
  // Work left for after the program's first run (packing constant weights; runtime/background.h):
  // 0 none, 1 left for later, 2 done. finish_background_work() runs once, on the background thread
  // or at the end of a caller's run, while run() may be running on other threads, and makes later
  // runs use its result.
  virtual int background_work() const { return 0; }
  virtual void finish_background_work() const {}
};

// Runs a kernel once outside any executor (constant folding, tests): makes its
// state and scratch for this one run.
void run_kernel_once(const Kernel& k, void* const* in, void* const* out);

using InferFn = std::vector<TensorType> (*)(const std::vector<TensorType>& in, const Attrs& attrs);
using MakeKernelFn = std::unique_ptr<Kernel> (*)(const Node& node);
using AliasOffsetFn = int64_t (*)(const Node& node);  // byte offset of output 0 inside input 0

struct OpDef {
  const char* name = nullptr;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: any number
  InferFn infer = nullptr;
  MakeKernelFn make_kernel = nullptr;
  uint32_t props = kNoProps;
  AliasOffsetFn alias_offset = nullptr;  // kAlias ops; nullptr means offset 0
  bool has(OpProps p) const { return (props & p) != 0; }
};

void register_op(const OpDef& def);
const OpDef* find_op(std::string_view name);  // nullptr if unknown
std::vector<const OpDef*> all_ops();           // sorted by name

struct OpRegistrar {
  explicit OpRegistrar(const OpDef& def) { register_op(def); }
};
#define AG_REGISTER_OP(ident, ...) static ::ag::OpRegistrar ag_op_registrar_##ident(::ag::OpDef __VA_ARGS__)

}  // namespace ag
