// Common subexpression elimination: two nodes with the same op, the same
// inputs and equal attributes (and size attributes, in a symbolic graph)
// compute the same values (ops are pure), so the later one's uses are
// redirected to the earlier one; DCE then drops it.
// Ops marked kNoCSE (random numbers) are left alone.
#include <map>
#include <tuple>

#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {

int eliminate_common_subexpressions(Graph& g) {
  std::multimap<std::tuple<const OpDef*, std::vector<int>>, Node*> seen;
  int changes = 0;
  for (auto& up : g.nodes()) {
    Node* n = up.get();
    if (n->op->has(kNoCSE)) continue;
    std::vector<int> ids;
    for (Value* v : n->inputs) ids.push_back(v->id);
    auto key = std::make_tuple(n->op, ids);
    Node* match = nullptr;
    auto [b, e] = seen.equal_range(key);
    for (auto it = b; it != e; ++it)
      if (it->second->attrs == n->attrs && it->second->sym_attrs == n->sym_attrs &&
          it->second->outputs.size() == n->outputs.size()) {
        match = it->second;
        break;
      }
    if (!match) {
      seen.emplace(key, n);
      continue;
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) g.replace_all_uses(n->outputs[i], match->outputs[i]);
    ++changes;
  }
  return changes;
}

}  // namespace ag
