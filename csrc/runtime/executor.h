// Program and executor. compile() turns a planned graph into a flat list of
// instructions (a kernel plus the positions of its operand pointers in one
// array); Executor::run binds the inputs, allocates the external outputs,
// patches the few pointers that change per call and runs the list in order.
// Nothing on that path allocates except the output buffers handed back.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "runtime/memory_planner.h"

namespace ag {

struct Instr {
  Kernel* kernel;
  uint32_t in_begin, out_begin;  // positions in Program::operands
};

struct Patch {  // operands[pos] = base(kind, index) + offset, resolved per call
  uint32_t pos;
  LocKind kind;  // Input or External
  int index;
  int64_t offset;
};

struct OutputSpec {
  LocKind kind;  // External, or Const (a constant returned as is)
  int index;     // external root
  int64_t offset;
  TensorType type;
  const Value* value;
};

struct CompileStats {
  int nodes = 0;
  size_t arena_bytes = 0, naive_bytes = 0, const_bytes = 0;
  int inplace = 0;
};

class Program {
 public:
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<Instr> instrs;
  std::vector<void*> operands;  // template; arena pointers are rebased by the executor
  std::vector<int64_t> arena_offsets;  // per operand: arena offset, or -1
  std::vector<Patch> patches;
  std::vector<OutputSpec> outputs;
  std::vector<TensorType> input_types;
  std::vector<size_t> external_bytes;
  std::vector<std::string> instr_context;  // node context for errors (cold)
  std::vector<std::string> instr_names;    // FX node names
  std::vector<std::string> instr_ops;      // op names
  size_t arena_bytes = 0;
  std::vector<std::shared_ptr<Storage>> constants;  // keeps every constant's bytes alive
  CompileStats stats;
};

// Graph must be verified and fully static. Keeps constants alive through the program.
// `fault_node` is a test-only hook: the kernel of the node with that name gets
// its first output perturbed after every run (to test accuracy bisection).
std::shared_ptr<Program> compile_program(const Graph& g, bool allow_inplace = true,
                                         const std::string& fault_node = "");

// An output buffer handed back to the caller; `owner` frees it.
struct OutBuffer {
  void* data;
  TensorType type;
  std::shared_ptr<void> owner;
};

class Executor {
 public:
  explicit Executor(std::shared_ptr<Program> p);
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
  std::shared_ptr<Program> prog_;
  std::vector<void*> ops_;
  std::shared_ptr<void> arena_;
  bool profiling_ = false;
  std::vector<int64_t> times_, starts_;
};

}  // namespace ag
