// A planted fault for the accuracy tools (CompilerConfig.fault_node, README "Debugging"): the
// kernel of the node with that name runs, then adds 1 to every element of its float32 output
// (or flips the low bit of another dtype's first byte), so that `airgraph compare` has a wrong
// kernel to find. Not part of the engine: the binding wraps kernels with it through
// CompileOptions::wrap only when a caller asks for a fault.
#pragma once
#include <memory>
#include <string>

#include "base/kernel.h"
#include "ir/graph.h"
#include "ir/op_registry.h"

namespace ag {

class FaultKernel final : public Kernel {
 public:
  FaultKernel(std::unique_ptr<Kernel> k, DType t, int64_t n) : k_(std::move(k)), t_(t), n_(n) {}
  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    k_->run(in, out, ctx);
    if (t_ == DType::f32) {
      for (int64_t i = 0; i < n_; ++i) static_cast<float*>(out[0])[i] += 1.0f;
    } else if (n_ > 0) {
      static_cast<unsigned char*>(out[0])[0] ^= 1;
    }
  }
  std::string name() const override { return k_->name() + "+fault"; }
  size_t scratch_bytes() const override { return k_->scratch_bytes(); }
  std::unique_ptr<KernelState> make_state() const override { return k_->make_state(); }

 private:
  std::unique_ptr<Kernel> k_;
  DType t_;
  int64_t n_;
};

// A CompileOptions::wrap that plants the fault in node `name` (views excluded: they have no bytes
// of their own to perturb).
inline auto plant_fault(std::string name) {
  return [name = std::move(name)](const Node& n, std::unique_ptr<Kernel> k) -> std::unique_ptr<Kernel> {
    if (n.name != name || n.op->has(kAlias)) return k;
    return std::make_unique<FaultKernel>(std::move(k), n.outputs[0]->type.dtype, n.outputs[0]->type.numel());
  };
}

}  // namespace ag
