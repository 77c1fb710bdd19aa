// A loaded airgraph file that runs: the engine side of the C++ runner (and of any
// binding that serves exported files). A Model owns the graph as it was exported
// (the lowered graph before the passes, symbolic or static), binds its symbols
// from the shapes of each call's inputs, checks every input (count, dtype, rank,
// each dim against its size expression), and compiles one Program per binding of
// the symbols (instantiate, run_pipeline, compile_program), kept in an LRU of
// kMaxPrograms bindings that share one KernelCache and one ArenaSource. Each
// program has an ExecutorPool, so any number of threads may call run() at once.
// Inputs the graph writes (Graph::input_writes: a KV cache) hold the new value
// after run() returns, whether the program computed it in place or not.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/executor.h"

namespace ag {

// One graph input or output as a caller sees it.
struct ModelTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> dims;          // -1 where the size depends on the symbols
  std::vector<std::string> dim_text;  // per dim: the size expression ("s0", "2*s0"), or "" when constant
  int written_by_output = -1;         // inputs: the output whose value it holds after a call, or -1
  std::string str() const;            // "x: float32[s0, 4]"
};

// An input of one call: contiguous (C order) data of `dtype` and `shape`. Inputs the graph writes
// are written through `data`.
struct HostTensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
};

// An output of one call. `owner` keeps `data` alive. An output that the program computed in the
// bytes of an input it writes (written_input >= 0) points into the caller's input buffer and has
// no owner: it is valid as long as that buffer is.
struct ModelOutput {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  std::shared_ptr<void> owner;
  int written_input = -1;
  size_t nbytes() const;
};

class Model {
 public:
  static constexpr size_t kMaxPrograms = 64;  // bindings of the symbols kept compiled (LRU)

  // Maps the file (constants stay in the mapping).
  static std::shared_ptr<Model> load_file(const std::string& path);
  // From bytes in memory; `keep` keeps them alive and unchanged (then 64-byte aligned constants
  // are served in place), or, when null, the bytes are copied.
  static std::shared_ptr<Model> load_bytes(const void* data, size_t size, std::shared_ptr<void> keep = nullptr);

  const std::vector<ModelTensorInfo>& inputs() const { return inputs_; }
  const std::vector<ModelTensorInfo>& outputs() const { return outputs_; }
  const std::vector<std::string>& symbols() const { return graph_->symbols(); }
  const std::string& producer() const { return producer_; }
  const std::string& metadata() const { return metadata_; }
  const Graph& graph() const { return *graph_; }

  // The binding of the symbols (one size per symbol) given by input shapes; throws ag::Error
  // naming the input and dim when a shape does not fit the graph.
  std::vector<int64_t> bind(const std::vector<Shape>& shapes) const;
  // Checks the inputs, compiles (or finds) the program for their sizes and runs it on an idle
  // executor. `threads` > 0 sets this thread's intra-op thread count first.
  std::vector<ModelOutput> run(const std::vector<HostTensor>& inputs, int threads = 0);

  size_t num_programs() const;  // bindings compiled and kept now
  size_t kernel_cache_hits() const { return kernels_.hits(); }

 private:
  bool solve_from_a_dim(int s);  // an Affine for symbol s (affine_), or false
  struct Compiled {
    std::shared_ptr<const Program> program;
    std::unique_ptr<ExecutorPool> pool;
  };
  struct Slot {  // one binding; compiled once under its own lock
    std::vector<int64_t> sizes;
    std::mutex mu;
    std::shared_ptr<Compiled> compiled;
  };
  Model(std::unique_ptr<Graph> g, std::string producer, std::string metadata);
  std::shared_ptr<Compiled> compiled_for(const std::vector<int64_t>& sizes);
  void check_input(size_t i, const HostTensor& t) const;

  std::unique_ptr<Graph> graph_;
  std::string producer_, metadata_;
  std::vector<std::shared_ptr<void>> packed_;  // the file's packed weights, registered while the model lives
  std::vector<ModelTensorInfo> inputs_, outputs_;
  std::vector<int> bare_;  // by expression id: the symbol it is bare (kSym, i), or -1
  // A symbol that no input dim is bare, solved from an input dim a * symbol + b (torch.export's
  // derived Dims: 2 * seq, seq + 1) where the dim's expression has no other symbol.
  struct Affine {
    int sym = -1;
    size_t input = 0, dim = 0;
    int32_t expr = -1;
    int64_t a = 1, b = 0;
  };
  std::vector<Affine> affine_;
  KernelCache kernels_;
  std::shared_ptr<ArenaSource> arena_ = std::make_shared<ArenaSource>();
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Slot>> lru_;  // most recently used first
};

}  // namespace ag
