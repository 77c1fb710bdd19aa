// Program and executor, split as PyTorch Static Runtime splits its module and
// runtimes. compile_program() turns a planned graph into a Program: a flat list
// of instructions (a kernel plus the positions of its operand pointers in one
// array), built once and read-only from then on, so any number of threads may
// run it at once. An Executor is one caller's run state: the operand array,
// the arena (intermediate values, then one scratch region that every kernel
// borrows during its own run: sized to the largest kernel's scratch_bytes()),
// and each kernel's per-executor state (oneDNN argument maps). run() binds the
// inputs, patches the few pointers that change per call and runs the list in
// order; nothing on that path allocates except the output buffers it hands
// back (run_into: not even those). An ExecutorPool hands one idle executor to
// each concurrent caller.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "base/background.h"
#include "runtime/layout.h"
#include "runtime/memory_planner.h"

namespace ag {

struct Instr {
  const Kernel* kernel;
  uint32_t in_begin, out_begin;  // positions in Program::operands
};

struct Patch {  // operands[pos] = base(kind, index) + offset, resolved per call
  uint32_t pos;
  LocKind kind;  // Input or External
  int index;
  int64_t offset;
};

struct OutputSpec {
  LocKind kind;  // External, Const (a constant returned as is) or Input (an input the graph writes, in place)
  int index;     // external root, or input
  int64_t offset;
  TensorType type;
  std::string name;                  // of the graph value (the graph may be gone by now)
  std::shared_ptr<Storage> storage;  // Const outputs: the constant's bytes
};

struct CompileStats {
  int nodes = 0;
  size_t arena_bytes = 0, naive_bytes = 0, const_bytes = 0;
  int inplace = 0;
};

class Program {
 public:
  std::vector<std::shared_ptr<const Kernel>> kernels;  // shared with other programs through a KernelCache
  std::vector<Instr> instrs;
  std::vector<void*> operands;  // template; arena pointers are rebased by the executor
  std::vector<int64_t> arena_offsets;  // per operand: arena offset, or -1
  std::vector<Patch> patches;
  std::vector<OutputSpec> outputs;
  std::vector<TensorType> input_types;
  // Inputs checked finite and within kInputBound on each call (ir/value_bounds.h), where a kernel
  // runs a faster form in checked runs (Kernel::uses_bounds): its float32 inputs. Empty: no check.
  std::vector<int> bounded_inputs;
  std::vector<size_t> external_bytes;
  std::vector<std::shared_ptr<const std::string>> instr_context;  // node context for errors (cold)
  std::vector<std::string> instr_names;    // FX node names
  std::vector<std::string> instr_ops;      // op names
  size_t arena_bytes = 0;     // intermediate values
  size_t scratch_bytes = 0;   // the largest kernel scratch, placed after them in each executor's arena
  std::vector<std::shared_ptr<Storage>> constants;  // keeps every constant's bytes alive
  CompileStats stats;
  // The kernels' work left for after the first run (base/background.h), or null.
  std::unique_ptr<DeferredWork> deferred;
};

// Kernels shared by the programs that one symbolic graph builds for its sizes. A node with the
// same name, op, attributes, input and output types and constant inputs as one seen before
// gets that node's kernel (a kernel is read-only once made, and each executor keeps its own
// state), so a new size makes only the kernels whose shapes changed: for a decode step with a
// new KV length the attention and the cache update, not the GEMMs. Constants are held by the
// entries, so a constant's address is never reused while an entry names it.
class KernelCache {
 public:
  struct Entry {
    std::shared_ptr<const Kernel> kernel;
    std::shared_ptr<const std::string> context;
  };
  Entry get(const Node& n, const BuildCtx& ctx);  // makes the kernel on a miss (with `ctx`)
  size_t hits() const;
  size_t size() const;

 private:
  struct Key {
    std::vector<TensorType> in, out;
    Attrs attrs;
    std::string name;
    std::vector<std::shared_ptr<Storage>> consts;
    std::vector<uint8_t> nhwc;  // the inputs' and outputs' layouts (BuildCtx::channels_last)
    std::vector<double> bounds;  // the non-constant inputs' proven bounds (BuildCtx::bounds)
  };
  static constexpr size_t kMaxEntries = 16384;  // then it starts over (programs keep their kernels)
  mutable std::mutex mu_;
  std::unordered_multimap<size_t, std::pair<Key, Entry>> entries_;
  size_t hits_ = 0;
};

struct CompileOptions {
  bool allow_inplace = true;        // the planner may put an output over a dying input's bytes
  BuildCtx build;                   // what the kernel factories are given
  KernelCache* kernels = nullptr;   // nodes seen before reuse their kernels (see KernelCache)
  // Replaces each node's kernel by what it returns (debug tools: a planted fault, bindings/fault.h).
  // A program built with it uses no KernelCache.
  std::function<std::unique_ptr<Kernel>(const Node&, std::unique_ptr<Kernel>)> wrap;
  // Convolutions and their neighbours hand each other channels-last values (runtime/layout.h).
  bool channels_last = true;
};


// Graph must be verified and fully static. Keeps constants alive through the program.
std::shared_ptr<Program> compile_program(const Graph& g, const CompileOptions& opt = {});

// Arena memory shared by the programs one graph builds for its sizes (compiler.py's
// SymbolicEngineGraph): an executor of such a program leases a buffer for each call instead of
// owning one, so the memory held is one arena of the largest size seen per concurrent caller,
// not one per size. A released buffer smaller than the largest seen is freed.
class ArenaSource {
 public:
  struct Lease {
    std::shared_ptr<void> buf;
    size_t bytes = 0;
  };
  Lease acquire(size_t bytes);
  void release(Lease l);
  size_t bytes_held() const;  // idle buffers (all of them when no call runs)

 private:
  mutable std::mutex mu_;
  std::vector<Lease> idle_;
  size_t largest_ = 0;
};

// An output buffer handed back to the caller; `owner` frees it.
struct OutBuffer {
  void* data;
  TensorType type;
  std::shared_ptr<void> owner;
};

class Executor {
 public:
  // With `arena`, each call leases its arena from that source (see ArenaSource).
  explicit Executor(std::shared_ptr<const Program> p, std::shared_ptr<ArenaSource> arena = nullptr);
  // inputs[i] points at contiguous data of program->input_types[i] (checked by the caller).
  std::vector<OutBuffer> run(const std::vector<void*>& inputs);
  // The same with caller-provided buffers for the external roots (one per
  // entry of Program::external_bytes): no allocation at all on this path.
  void run_into(const void* const* inputs, void* const* ext_roots);
  const Program& program() const { return *prog_; }
  // Profiling: when enabled, run() records when each instruction started
  // (nanoseconds since the call began) and how long it took.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<int64_t>& last_times_ns() const { return times_; }
  const std::vector<int64_t>& last_starts_ns() const { return starts_; }

 private:
  void rebase(char* base);  // points the arena operands and scratch into `base`
  std::shared_ptr<const Program> prog_;
  std::vector<void*> ops_;
  std::shared_ptr<void> arena_;
  std::shared_ptr<ArenaSource> source_;
  char* base_ = nullptr;  // where the arena operands point now
  size_t values_ = 0;     // arena bytes of the values (scratch follows)
  std::vector<std::unique_ptr<KernelState>> states_;
  std::vector<RunCtx> ctx_;  // per instruction
  bool bounded_ = false;     // what ctx_[*].bounded says (the last call's input check)
  bool profiling_ = false;
  std::vector<int64_t> times_, starts_;
};

// Executors of one program for concurrent callers: acquire() lends an idle
// executor, making a new one when every executor is busy (so there are as
// many as the most callers ever seen at once), and the lease returns it.
class ExecutorPool {
 public:
  explicit ExecutorPool(std::shared_ptr<const Program> p, std::shared_ptr<ArenaSource> arena = nullptr)
      : prog_(std::move(p)), arena_(std::move(arena)) {}
  class Lease {
   public:
    Lease(ExecutorPool* pool, std::unique_ptr<Executor> e) : pool_(pool), e_(std::move(e)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (e_) pool_->release(std::move(e_));
    }
    Executor& operator*() const { return *e_; }
    Executor* operator->() const { return e_.get(); }

   private:
    ExecutorPool* pool_;
    std::unique_ptr<Executor> e_;
  };
  Lease acquire();
  size_t size() const;  // executors made so far
  const Program& program() const { return *prog_; }

 private:
  void release(std::unique_ptr<Executor> e);
  std::shared_ptr<const Program> prog_;
  std::shared_ptr<ArenaSource> arena_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Executor>> idle_;
  size_t made_ = 0;
};

}  // namespace ag
