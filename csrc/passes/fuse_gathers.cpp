// Gather fusion: an "index" node (x[..., i_0, .., i_k], integer index tensors)
// whose only reader is a fused_elementwise node, and whose output has that
// node's output shape, is absorbed into it: the fused node reads x through the
// index tensors tile by tile (kernels/separable_gather.h) instead of reading a
// stored copy. This is what the decomposed F.interpolate modes look like
// (bilinear: four gathers of x feeding the lerp arithmetic), and it saves
// storing and re-reading every gathered tensor.
//
// Runs after fuse_elementwise (it needs the fused nodes). Assumes static
// shapes. Only separable gathers on x's trailing dims qualify (each index
// tensor varies along one dim of the index shape, SeparableGather::plan), of a
// float32/bfloat16/float16 x whose element count differs from the output's
// (so the memory planner never lets the output overwrite x in place; index
// tensors are read into tables before any output is written). Guarantees:
// results bit-identical to the unfused nodes (a gather moves values, exactly),
// the same index range errors, and the order stays topological (x and the
// index tensors are defined before the index node, hence before the fused node).
#include <algorithm>
#include <unordered_set>

#include "ir/op_registry.h"
#include "ir/separable_gather.h"
#include "passes/passes.h"

namespace ag {

int fuse_gathers(Graph& g) {
  std::vector<Node*> fused;
  for (auto& n : g.nodes())
    if (n->op->name == std::string_view("fused_elementwise") && !n->attrs.has("gathers")) fused.push_back(n.get());
  if (fused.empty()) return 0;
  std::vector<int> uses = g.use_counts();
  std::unordered_set<const Value*> graph_outs(g.outputs().begin(), g.outputs().end());
  std::unordered_set<const Node*> dead;
  int changes = 0;
  for (Node* f : fused) {
    const Shape out_shape = f->out()->type.shape();
    const int64_t out_numel = f->out()->type.numel();
    const int64_t nin = static_cast<int64_t>(f->inputs.size());
    std::vector<Value*> inputs = f->inputs, extra;
    Shape records;
    std::vector<Node*> absorbed;
    for (int64_t i = 0; i < nin; ++i) {
      Value* v = f->inputs[i];
      Node* p = v->producer;
      if (!p || p->op->name != std::string_view("index") || p->outputs.size() != 1) continue;
      if (uses[v->id] != 1 || graph_outs.count(v) || !v->type.is_static() || v->type.shape() != out_shape) continue;
      const TensorType& x = p->inputs[0]->type;
      if (x.dtype != DType::f32 && x.dtype != DType::bf16 && x.dtype != DType::f16) continue;
      if (x.numel() == out_numel) continue;
      std::vector<TensorType> idx;
      for (size_t j = 1; j < p->inputs.size(); ++j) idx.push_back(p->inputs[j]->type);
      const Shape dims = p->attrs.ints("dims");
      SeparableGather sg;
      if (!SeparableGather::plan(x, idx, dims, &sg) || sg.out_shape != out_shape) continue;
      inputs[i] = p->inputs[0];
      records.push_back(i);
      records.push_back(nin + static_cast<int64_t>(extra.size()));
      records.push_back(static_cast<int64_t>(idx.size()));
      records.insert(records.end(), dims.begin(), dims.end());
      for (size_t j = 1; j < p->inputs.size(); ++j) extra.push_back(p->inputs[j]);
      absorbed.push_back(p);
    }
    if (absorbed.empty()) continue;
    const int64_t added = static_cast<int64_t>(extra.size());
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    Attrs a = f->attrs;
    Shape args = a.ints("args"), outs = a.ints("outputs");
    for (auto& s : args)
      if (s >= nin) s += added;  // instruction results move up past the index inputs
    for (auto& s : outs) s += added;
    a.set("args", args);
    a.set("outputs", outs);
    a.set("gathers", records);
    Node* nf;
    try {
      nf = g.insert_node_before(f, "fused_elementwise", inputs, a, f->name, f->source);
    } catch (const Error&) {
      continue;  // refused: keep the nodes as they are
    }
    bool same = nf->outputs.size() == f->outputs.size();
    for (size_t j = 0; same && j < f->outputs.size(); ++j) same = nf->outputs[j]->type == f->outputs[j]->type;
    if (!same) {
      g.remove_nodes_if([nf](const Node& x) { return &x == nf; });
      continue;
    }
    for (size_t j = 0; j < f->outputs.size(); ++j) g.replace_all_uses(f->outputs[j], nf->outputs[j]);
    dead.insert(f);
    for (Node* p : absorbed) dead.insert(p);
    ++changes;
  }
  if (!dead.empty()) g.remove_nodes_if([&](const Node& n) { return dead.count(&n) > 0; });
  return changes;
}

}  // namespace ag
