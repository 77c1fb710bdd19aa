// RoPE fusion: the rotate-half rotary embedding that transformers decoders
// (LLaMA, Qwen2, Mistral, GPT-NeoX, ...) write in Python,
//   x1, x2 = x[..., :h], x[..., h:]
//   y = x * cos + torch.cat((-x2, x1), dim=-1) * sin
// lowers to
//   slice(x){dim=last, 0:h}, slice(x){dim=last, h:D} -> neg -> cat(neg, slice 0:h){dim=last}
//   -> mul(., sin); mul(x, cos); add(mul, mul)
// (operands of the muls and the add in either order). The seven nodes become one
// rope(x, cos, sin) node: one read of x and one write of y instead of five
// kernels and four temporaries, per query and per key tensor in every layer.
// Matched only when: D (x's last dim) is static and equals 2h; both slices have
// step 1; add's alpha is 1; cos and sin have x's dtype and broadcast to x
// without widening it (every product and the sum keep x's type); every
// intermediate has exactly one use and is not a graph output (x, cos and sin
// may have other uses). Runs before fuse_elementwise, which would otherwise take
// the muls and the add into a fused node. The new node takes the add's FX name
// and source line; attr "fused" lists the replaced nodes' FX names.
#include <unordered_set>

#include "ir/op_registry.h"
#include "ir/slice.h"
#include "passes/chain_rewrite.h"
#include "passes/passes.h"

namespace ag {
namespace {

// The slice of the last dim of `x` that node `n` takes, as [start, start + len); false if it is not one.
bool last_dim_slice(const Node* n, const Value* x, int64_t* start, int64_t* len) {
  if (!(is_op(n, "slice") || is_op(n, "slice_view")) || n->inputs[0] != x) return false;
  try {
    SliceSpec s = slice_spec(x->type, n->attrs, "slice");
    if (s.dim != x->type.rank() - 1 || s.step != 1) return false;
    *start = s.start;
    *len = s.len;
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

int fuse_rope(Graph& g) {
  auto uses = g.use_counts();
  std::vector<Node*> producer(g.num_values(), nullptr), consumer(g.num_values(), nullptr);
  for (auto& up : g.nodes()) {
    for (Value* v : up->outputs) producer[v->id] = up.get();
    for (Value* v : up->inputs) consumer[v->id] = up.get();
  }
  // the node making `v` when `v` has exactly one use (a graph output counts as a use)
  auto single_made = [&](const Value* v) -> Node* { return uses[v->id] == 1 ? producer[v->id] : nullptr; };
  auto single_use = [&](const Value* v) -> Node* { return uses[v->id] == 1 ? consumer[v->id] : nullptr; };

  std::vector<Node*> snapshot;
  for (auto& up : g.nodes()) snapshot.push_back(up.get());
  std::unordered_set<const Node*> touched;
  int changes = 0;
  for (Node* cat : snapshot) {
    if (!is_op(cat, "cat") || touched.count(cat) || cat->inputs.size() != 2 || cat->outputs.size() != 1) continue;
    Node* neg = single_made(cat->inputs[0]);
    Node* lo = single_made(cat->inputs[1]);
    if (!is_op(neg, "neg") || !lo || lo->inputs.size() != 1) continue;
    Node* hi = single_made(neg->inputs[0]);
    Value* x = lo->inputs[0];
    const TensorType& xt = x->type;
    if (!hi || xt.rank() < 1 || !xt.dims.back().is_static()) continue;
    const int64_t D = xt.dims.back().value, h = D / 2;
    int64_t s0, n0, s1, n1;
    if (D % 2 != 0 || !last_dim_slice(lo, x, &s0, &n0) || !last_dim_slice(hi, x, &s1, &n1)) continue;
    if (s0 != 0 || n0 != h || s1 != h || n1 != h) continue;
    try {
      if (normalize_dim(cat->attrs.i("dim", 0), xt.rank()) != xt.rank() - 1) continue;
    } catch (const Error&) {
      continue;
    }
    Node* m2 = single_use(cat->out());
    if (!is_op(m2, "mul")) continue;
    Value* sin = other_operand(m2, cat->out());
    Node* add = m2 ? single_use(m2->out()) : nullptr;
    if (!sin || !is_op(add, "add")) continue;
    double alpha;
    if (!attr_number(add->attrs, "alpha", 1.0, &alpha) || alpha != 1.0) continue;
    Value* p1 = other_operand(add, m2->out());
    Node* m1 = p1 ? single_made(p1) : nullptr;
    if (!is_op(m1, "mul")) continue;
    Value* cos = other_operand(m1, x);
    if (!cos) continue;
    bool same_types = m1->out()->type == xt && m2->out()->type == xt && add->out()->type == xt &&
                      cos->type.dtype == xt.dtype && sin->type.dtype == xt.dtype;
    if (!same_types) continue;
    if (!replace_chain(g, {lo, hi, neg, cat, m2, m1, add}, "rope", {x, cos, sin}, Attrs{}, touched)) continue;
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace ag
