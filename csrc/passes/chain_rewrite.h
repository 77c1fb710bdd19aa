// Helpers shared by the passes that match a chain of nodes and replace it with one fused node
// (fuse_norms, fuse_rope): operand matching and the replacement itself.
#pragma once
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"

namespace ag {

inline bool is_op(const Node* n, const char* op) { return n && std::string_view(n->op->name) == op; }

// For a binary node with `v` as one operand, the other operand (nullptr if `v` is both or neither).
inline Value* other_operand(const Node* n, const Value* v) {
  if (n->inputs.size() != 2 || n->inputs[0] == n->inputs[1]) return nullptr;
  if (n->inputs[0] == v) return n->inputs[1];
  if (n->inputs[1] == v) return n->inputs[0];
  return nullptr;
}

// Replaces `chain` (in order; its last node's output is the result) with one `op` node over
// `inputs`, placed where the last node was and taking its FX name and source line; attr "fused"
// lists the chain's FX names. Marks every node involved in `touched`. False (the graph unchanged)
// when a node of the chain was already rewritten or the op's inference refuses the inputs.
inline bool replace_chain(Graph& g, const std::vector<Node*>& chain, const char* op, const std::vector<Value*>& inputs,
                          Attrs a, std::unordered_set<const Node*>& touched) {
  for (Node* n : chain)
    if (touched.count(n)) return false;
  Node* last = chain.back();
  std::string fused;
  for (size_t k = 0; k < chain.size(); ++k) fused += (k ? "," : "") + chain[k]->name;
  a.set("fused", fused);
  Node* nn;
  try {
    nn = g.insert_node_before(last, op, inputs, a, last->name, last->source);
  } catch (const Error&) {
    return false;  // the op's inference refused it (a dtype or shape it does not take): keep the chain
  }
  g.replace_all_uses(last->out(), nn->out());
  for (Node* n : chain) touched.insert(n);
  touched.insert(nn);
  return true;
}

}  // namespace ag
