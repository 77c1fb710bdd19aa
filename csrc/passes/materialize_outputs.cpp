// Output materialization: every graph output must be a buffer the executor
// allocates per call, so that results never alias the caller's inputs, the
// model's parameters or each other. Outputs that are inputs, constants, views
// of them, or repeated are given a "clone" node.
#include <unordered_set>

#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {

static const Value* root_of(const Value* v) {
  while (v->producer && v->producer->op->has(kAlias)) v = v->producer->inputs[0];
  return v;
}

int materialize_outputs(Graph& g) {
  int changes = 0;
  std::unordered_set<const Value*> seen_roots;
  auto& outs = g.mutable_outputs();
  for (auto& v : outs) {
    const Value* r = root_of(v);
    bool needs_copy = r->kind != ValueKind::NodeOutput || seen_roots.count(r);
    seen_roots.insert(r);
    if (!needs_copy) continue;
    Node* c = g.add_node("clone", {v}, Attrs{}, v->name + "_out", "");
    v = c->outputs[0];
    seen_roots.insert(v);
    ++changes;
  }
  return changes;
}

}  // namespace ag
