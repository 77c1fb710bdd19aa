// Dead code elimination: removes nodes none of whose outputs reach a graph
// output. Assumes every op is pure (the IR is functional: in-place updates are
// expressed as new values), so nothing with an unused result has an effect.
#include "passes/passes.h"

#include <unordered_set>

#include "ir/op_registry.h"

namespace ag {

int eliminate_dead_code(Graph& g) {
  std::unordered_set<const Value*> live(g.outputs().begin(), g.outputs().end());
  std::unordered_set<const Node*> keep;
  const auto& nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node* n = it->get();
    bool used = false;
    for (Value* o : n->outputs) used = used || live.count(o);
    if (!used) continue;
    keep.insert(n);
    for (Value* v : n->inputs) live.insert(v);
  }
  return g.remove_nodes_if([&](const Node& n) { return !keep.count(&n); });
}

}  // namespace ag
