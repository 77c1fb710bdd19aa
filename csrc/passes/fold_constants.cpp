// Constant folding: a node whose inputs are all constants (frozen parameters,
// buffers, literals) is run once at compile time with its own kernel and
// replaced by a constant holding the result. Results larger than max_bytes are
// not folded (folding a transposed weight would double the model's memory).
// Ops marked kNoFold are never folded.
#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {

int fold_constants(Graph& g, size_t max_bytes) {
  int changes = 0;
  for (auto& up : g.nodes()) {
    Node* n = up.get();
    // A node whose attributes are sizes of the symbols (arange(s0) has no inputs at all; a slice
    // of a buffer up to s0) depends on the binding: a symbolic graph keeps it, and so does each
    // instance, so that the passes decide alike on both (compiler.py checks that they do).
    if (n->op->has(kNoFold) || !n->op->make_kernel || !n->sym_attrs.empty() || n->sized) continue;
    bool all_const = true;
    for (Value* v : n->inputs) all_const = all_const && v->is_const();
    if (!all_const) continue;
    size_t out_bytes = 0;
    for (Value* o : n->outputs) out_bytes += o->type.nbytes();
    if (out_bytes > max_bytes || !n->outputs.size()) continue;
    bool is_static = true;
    for (Value* o : n->outputs) is_static = is_static && o->type.is_static();
    if (!is_static) continue;
    std::vector<void*> ins, outs;
    std::vector<std::shared_ptr<Storage>> results;
    for (Value* v : n->inputs) ins.push_back(v->storage->data);
    for (Value* o : n->outputs) {
      if (n->op->has(kAlias)) {
        // a view of a constant: share its bytes
        auto s = std::make_shared<Storage>(*n->inputs[0]->storage);
        s->data = static_cast<char*>(s->data) + (n->op->alias_offset ? n->op->alias_offset(*n) : 0);
        s->nbytes = o->type.nbytes();
        results.push_back(s);
      } else {
        results.push_back(Storage::allocate(o->type.nbytes()));
      }
      mark_derived(*results.back(), n->inputs);
      outs.push_back(results.back()->data);
    }
    if (!n->op->has(kAlias)) {
      auto k = n->op->make_kernel(*n, BuildCtx{});
      run_kernel_once(*k, ins.data(), outs.data());
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      Value* c = g.add_const(n->outputs[i]->type, results[i], n->outputs[i]->name);
      g.replace_all_uses(n->outputs[i], c);
    }
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace ag
