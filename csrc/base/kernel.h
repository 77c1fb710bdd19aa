// The kernel interface: what every layer above base/ agrees a compiled kernel is.
//
// A Kernel is made once per node at compile time (by the factory its op registers,
// ir/op_registry.h), from the node and a BuildCtx, and is read-only from then on: one
// kernel serves every executor, and so every calling thread, at once. Per-executor
// mutable state lives in the KernelState it makes; per-run memory is the scratch an
// executor lends it (RunCtx).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ag {

class ValueBounds;  // ir/value_bounds.h
namespace dnnl_util {
class PrepackCache;  // kernels/onednn_util.h: packed weights shared by the kernels of one build
}

// The settings of one build that reach the kernels it makes, passed to every kernel factory
// (no thread-local side channel): who shares packed weights, whether packing may be left for
// after the first run, and how many threads packing may use.
struct BuildCtx {
  // Kernels that pack the same constant the same way share one packed copy (the programs one
  // graph builds for its sizes). nullptr: no sharing.
  dnnl_util::PrepackCache* prepack = nullptr;
  // Kernels may leave packing their constant weights for after the program's first run
  // (base/background.h). Off for constant folding, symbolic graphs and tests that time packing.
  bool background = false;
  // Linear GEMMs ([N, K] weights) with fewer rows than this pack their constant weights into oneDNN's
  // preferred layout (a copy beside the caller's); wider ones read them in place (one copy of the
  // weights) unless pack_budget takes them. A constant [K, N] matmul operand is always packed.
  // CompilerConfig.pack_weights.
  int64_t pack_rows = INT64_MAX;
  // Linears of pack_rows rows and more pack their weights too while the process's optional packed
  // copies stay within pack_budget bytes (dnnl_util::hold_pack_budget; CompilerConfig's pack_weights
  // "auto" and pack_budget_mb): in place, oneDNN reorders each call's weight blocks itself, 17-49%
  // slower at 16-32 rows, 4-13% at 64-128, 1-6% from 256 on (a Zen 4).
  int64_t pack_budget = 0;
  // The weights (sorted addresses) that pack_budget may take; the graph's other linears read theirs in
  // place. The bindings' compile chooses them a row count at a time, fewest rows first, while they fit
  // (dnnl_util::pack_budget_choose). nullptr: any.
  std::shared_ptr<const std::vector<const void*>> pack_chosen;
  // Linears with int8 or int4 weights and more rows than a GEMV takes quantize their input per row at
  // run time and run int8 products (kernels/linear_widened.cpp, linear_int4.cpp); false widens the
  // weights to f32 (the exact path). CompilerConfig.int8_activations.
  bool int8_activations = true;
  // Threads that packing a weight runs on (0: the building thread's own count). Kernels built
  // on several threads at once (compile_program) pack with one thread each.
  int pack_threads = 0;
  // Values whose bytes are in channels-last order (NHWC for a logical [N, C, H, W]), by value id:
  // a convolution writes such a value so and every reader (a convolution) reads it so
  // (runtime/executor.cpp, plan_channels_last). nullptr: every value is row-major.
  const std::vector<uint8_t>* channels_last = nullptr;
  // What the graph proves of its values when the call's float32 inputs are finite and within
  // kInputBound (ir/value_bounds.h): a kernel may run a faster form that is exact only on finite
  // values there, and must run the exact one when RunCtx::bounded is false. nullptr: nothing proven.
  const ValueBounds* bounds = nullptr;
  bool nhwc(int value_id) const {
    return channels_last && value_id >= 0 && static_cast<size_t>(value_id) < channels_last->size() &&
           (*channels_last)[value_id];
  }
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
  // The call's float32 inputs were checked finite and within kInputBound (ir/value_bounds.h), so
  // what BuildCtx::bounds proved holds in this run. False outside an executor's checked runs.
  bool bounded = false;
};

// A compiled kernel for one node. run() gets the node's input and output pointers in order
// and writes nothing but its outputs, ctx.scratch and ctx.state. It must not allocate or
// throw on the hot path except for data-dependent errors (an index out of range), which it
// reports by throwing.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void run(void* const* in, void* const* out, const RunCtx& ctx) const = 0;
  // Bytes of per-run scratch (temporary buffers, oneDNN scratchpads).
  virtual size_t scratch_bytes() const { return 0; }
  virtual std::unique_ptr<KernelState> make_state() const { return nullptr; }
  virtual std::string name() const { return "kernel"; }  // e.g. "onednn_matmul_f32"
  // The kernel runs a faster form in runs with RunCtx::bounded (BuildCtx::bounds): the executor
  // then checks the graph's float32 inputs on every call.
  virtual bool uses_bounds() const { return false; }
  // Work left for after the program's first run (packing constant weights; base/background.h):
  // 0 none, 1 left for later, 2 done. finish_background_work() runs once, on the background thread
  // or at the end of a caller's run, while run() may be running on other threads, and makes later
  // runs use its result.
  virtual int background_work() const { return 0; }
  virtual void finish_background_work() const {}
};

}  // namespace ag
