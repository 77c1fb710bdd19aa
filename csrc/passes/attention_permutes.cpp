// Attention's head split and merge, read and written in place. A transformer's attention writes
//   q = linear(x).view(B, L, H, E).transpose(1, 2)          (k and v the same)
//   o = sdpa(q, k, v).transpose(1, 2).reshape(B, L, H * E)
// which lowers to a permute [0, 2, 1, 3] (a copy) before each sdpa operand and after its output.
// The sdpa kernel addresses its operands through strides, so the permutes fold into it:
//   - an operand made by permute(x){dims=[0, 2, 1, 3]} is read as x ([B, L, H, E]; attr q_blhe,
//     k_blhe or v_blhe); the permute stays while something else uses it;
//   - an output whose only use is such a permute (not a graph output) is written as
//     [B, L, H, E] (attr out_blhe), the permute's value: the reshape after it is a view.
// The sdpa node is replaced (its FX name and source line kept), so that its output is a new
// value with the permute's type. After dce (use counts are final), before the fusions.
#include "passes/chain_rewrite.h"
#include "passes/passes.h"

namespace ag {
namespace {

bool swaps_heads(const Node* n) {
  return is_op(n, "permute") && n->inputs[0]->type.rank() == 4 &&
         n->attrs.ints("dims", {}) == std::vector<int64_t>{0, 2, 1, 3};
}

constexpr const char* kFlags[4] = {"q_blhe", "k_blhe", "v_blhe", "out_blhe"};

}  // namespace

int fold_attention_permutes(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  std::vector<Node*> consumer(g.num_values(), nullptr);
  for (auto& up : g.nodes())
    for (Value* v : up->inputs) consumer[v->id] = up.get();
  std::vector<Node*> snapshot;
  for (auto& up : g.nodes())
    if (is_op(up.get(), "sdpa") && up->inputs.size() >= 3) snapshot.push_back(up.get());
  int changes = 0;
  for (Node* n : snapshot) {
    bool any = false;
    for (const char* f : kFlags) any |= n->attrs.b(f, false);
    if (any) continue;  // folded already
    std::vector<Value*> inputs = n->inputs;
    Attrs a = n->attrs;
    for (int i = 0; i < 3; ++i)
      if (swaps_heads(inputs[i]->producer)) {
        inputs[i] = inputs[i]->producer->inputs[0];
        a.set(kFlags[i], true);
        any = true;
      }
    Node* after = uses[n->out()->id] == 1 ? consumer[n->out()->id] : nullptr;
    const bool out = swaps_heads(after);
    if (out) a.set(kFlags[3], true);
    if (!any && !out) continue;
    Node* nn;
    try {
      nn = g.insert_node_before(out ? after : n, "sdpa", inputs, a, n->name, n->source);
    } catch (const Error&) {
      continue;  // (the kernel's inference refused it: keep the permutes)
    }
    nn->sym_attrs = n->sym_attrs;
    nn->sized = n->sized;
    g.replace_all_uses(out ? after->out() : n->out(), nn->out());
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace ag
