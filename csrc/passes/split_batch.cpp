// The early layers of a convolution net, run a group of images at a time:
//   y = f(x)  ->  y = cat([f(x[0:g]), f(x[g:2g]), ...], dim 0)
// for the region f of nodes that compute each image on its own (convolutions, pools, inference
// batch norms, spatial means, padding of the inner dims, elementwise ops against constants that do
// not vary over the batch) and whose activations are large against their weights. At a large batch
// a MobileNetV2's expanded activations (112 x 112 x 96 floats an image: 38.5 MB at batch 8) leave
// the caches between a convolution and the next, so every layer reads its input from memory; an
// image at a time, each layer's input is still in the cache (Zen 4, 2 threads: MobileNetV2 batch 8
// as eight calls of one image ran 1.09x faster than one call of eight). Layers with large weights
// and small activations (the late stages, the classifier) keep the whole batch, where one read of
// the weights serves every image; the groups' results are concatenated where the region ends.
// Each image's results are those of the same layers at the group's batch.
// Only static graphs that write no input; the region starts at 4-D graph inputs of the same batch
// size. After dce, before the fusions (each group's nodes are then fused as any others).
#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "ir/op_registry.h"
#include "passes/chain_rewrite.h"
#include "passes/passes.h"

namespace ag {
namespace {

// A split when the region's largest value over the whole batch is at least kMinBytes; groups of as
// many images as keep its largest value within kGroupBytes; a node with weights joins the region
// when its activations an image (inputs and result) are at least kActPerWeight times its weights.
// Measured on a Zen 4 (L3 32 MB, 2 threads; the pass on and off, interleaved in one process):
// MobileNetV2 at batch 8 (largest value 38.5 MB, groups of one image) 1.11x in geometric mean over 25
// processes (0.92-1.31x: the L3 is shared with the host's other tenants), batch 32 1.10x, batch 4
// (19.3 MB) 1.00x; ResNet-50 at batch 8 (25.7 MB, groups of two) 1.02-1.04x, batch 32 1.04x.
constexpr int64_t kMinBytes = int64_t{24} << 20, kGroupBytes = int64_t{8} << 20, kActPerWeight = 4;

int64_t bytes(const Value* v) { return static_cast<int64_t>(v->type.nbytes()); }

bool static_type(const Value* v) { return v->type.is_static(); }

// Whether node `n` computes each image from that image's inputs alone, given which values carry the
// batch in dim 0 (`carries`); its other inputs must be constants that do not vary over the batch.
bool per_image(const Node* n, const std::vector<bool>& carries, int64_t N) {
  if (n->outputs.size() != 1 || !n->sym_attrs.empty() || n->sized || !static_type(n->out())) return false;
  const TensorType& o = n->out()->type;
  if (o.rank() < 1 || o.size(0) != N) return false;
  for (Value* v : n->inputs)
    if (!static_type(v)) return false;
  const std::string& op = n->op->name;
  if (n->op->props & kElementwise) {
    bool any = false;
    for (Value* v : n->inputs) {
      if (carries[v->id]) {
        if (v->type.rank() != o.rank()) return false;  // its batch dim must be the result's
        any = true;
      } else if (!v->is_const() || (v->type.rank() == o.rank() && v->type.size(0) != 1)) {
        return false;
      }
    }
    return any;
  }
  // the rest read the batch through input 0 only
  if (!carries[n->inputs[0]->id]) return false;
  for (size_t i = 1; i < n->inputs.size(); ++i)
    if (!n->inputs[i]->is_const()) return false;
  const int64_t r = n->inputs[0]->type.rank();
  if (op == "conv") return r == 4 && !n->attrs.has("post_ops");
  if (op == "batch_norm" || op == "max_pool2d" || op == "avg_pool2d" || op == "adaptive_avg_pool2d") return r == 4;
  if (op == "pad") return static_cast<int64_t>(n->attrs.ints("pads").size()) / 2 < r;  // not dim 0
  if (op == "mean") {
    const std::vector<int64_t> dims = n->attrs.ints("dims", {});
    if (dims.empty()) return false;  // (all dims)
    for (int64_t d : dims)
      if (normalize_dim(d, r) == 0) return false;
    return true;
  }
  return false;
}

// The region's results read outside it are concatenated at its end, a copy of their bytes. A node at
// the region's end (nothing in the region reads it) whose result is at least as large as its region
// inputs not already read outside leaves the region, its inputs concatenated instead (ResNet's first
// projection and reducing convolution of its second stage: their inputs are the first stage's result,
// which is concatenated anyway). Then the batch norms and elementwise ops that left it and read only
// region values come back, so that a convolution's BatchNorm and activation stay with it (MobileNetV2's
// last projection in the region keeps its BatchNorm).
void prune_tail(const Graph& g, std::vector<Node*>& region, std::vector<bool>& in_region) {
  const std::vector<int> uses = g.use_counts();
  std::vector<Node*> left;
  for (bool changed = true; changed && !region.empty();) {
    changed = false;
    std::vector<int> inside(g.num_values(), 0);
    for (Node* n : region)
      for (Value* v : n->inputs) ++inside[v->id];
    for (auto it = region.rbegin(); it != region.rend(); ++it) {
      Node* n = *it;
      if (inside[n->out()->id] > 0) continue;
      int64_t added = 0;
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        const Value* v = n->inputs[i];
        bool seen = false;
        for (size_t k = 0; k < i; ++k) seen = seen || n->inputs[k] == v;
        if (!seen && in_region[v->id] && uses[v->id] == inside[v->id]) added += bytes(v);
      }
      if (added <= bytes(n->out())) {
        in_region[n->out()->id] = false;
        left.push_back(n);
        region.erase(std::next(it).base());
        changed = true;
        break;
      }
    }
  }
  std::vector<bool> was_left(g.num_values(), false);
  for (Node* n : left) was_left[n->out()->id] = true;
  bool back = false;
  for (auto& up : g.nodes()) {  // (in graph order: a BatchNorm comes back before its activation)
    Node* n = up.get();
    if (n->outputs.size() != 1 || !was_left[n->out()->id]) continue;
    if (!(n->op->props & kElementwise) && !is_op(n, "batch_norm")) continue;
    bool inside = true;
    for (Value* v : n->inputs) inside = inside && (v->is_const() || in_region[v->id]);
    if (inside) in_region[n->out()->id] = back = true;
  }
  if (!back) return;
  region.clear();
  for (auto& up : g.nodes())
    if (up->outputs.size() == 1 && in_region[up->out()->id]) region.push_back(up.get());
}

}  // namespace

int split_batch(Graph& g) {
  if (g.is_symbolic() || !g.input_writes().empty()) return 0;
  int64_t N = 0;
  std::vector<bool> carries(g.num_values(), false);  // a graph input or region value with the batch in dim 0
  for (Value* v : g.inputs())
    if (static_type(v) && v->type.rank() == 4 && v->type.size(0) >= 2 && (N == 0 || v->type.size(0) == N)) {
      N = v->type.size(0);
      carries[v->id] = true;
    }
  if (N == 0) return 0;
  std::vector<Node*> region;
  for (auto& up : g.nodes()) {
    Node* n = up.get();
    if (!per_image(n, carries, N)) continue;
    int64_t act = bytes(n->out()), w = 0;
    for (Value* v : n->inputs) (carries[v->id] ? act : w) += bytes(v);
    if (w > 0 && act / N < kActPerWeight * w) continue;
    carries[n->out()->id] = true;
    region.push_back(n);
  }
  if (region.empty()) return 0;
  std::vector<bool> in_region(g.num_values(), false);
  for (Node* n : region) in_region[n->out()->id] = true;
  prune_tail(g, region, in_region);
  int64_t largest = 0;  // bytes of the region's largest value, whole batch
  bool weighted = false;
  for (Node* n : region) {
    largest = std::max(largest, bytes(n->out()));
    weighted = weighted || is_op(n, "conv");
  }
  if (region.empty() || !weighted || largest < kMinBytes) return 0;
  int64_t gsize = 1;
  for (int64_t d = 1; d < N; ++d)
    if (N % d == 0 && largest / N * d <= kGroupBytes) gsize = d;
  const int64_t groups = N / gsize;
  if (groups < 2) return 0;

  // the region's results read outside it (by other nodes or as graph outputs)
  std::vector<Value*> exits;
  std::vector<bool> is_exit(g.num_values(), false);
  auto mark_exit = [&](Value* v) {
    if (in_region[v->id] && !is_exit[v->id]) {
      is_exit[v->id] = true;
      exits.push_back(v);
    }
  };
  for (auto& up : g.nodes())
    if (!(up->outputs.size() == 1 && in_region[up->out()->id]))  // (a region node: the producer of a region value)
      for (Value* v : up->inputs) mark_exit(v);
  for (Value* v : g.outputs()) mark_exit(v);
  if (exits.empty()) return 0;

  Node* anchor = region.front();
  std::vector<std::unordered_map<int, Value*>> copy(groups);  // per group: value id -> its group's value
  for (int64_t j = 0; j < groups; ++j) {
    auto map_in = [&](Value* v) -> Value* {
      auto it = copy[j].find(v->id);
      if (it != copy[j].end()) return it->second;
      if (!carries[v->id]) return v;  // a constant
      // (a region node reads region values, constants and graph inputs only)
      if (v->kind != ValueKind::Input) fail("split_batch: node input %", v->name, " is neither in the region nor an input");
      Attrs a;  // a graph input: this group's images, the same bytes
      a.set("dim", int64_t{0});
      a.set("start", j * gsize);
      a.set("end", (j + 1) * gsize);
      Value* s = g.insert_node_before(anchor, "slice_view", {v}, a, v->name, "")->out();
      copy[j][v->id] = s;
      return s;
    };
    for (Node* n : region) {
      std::vector<Value*> in;
      for (Value* v : n->inputs) in.push_back(map_in(v));
      copy[j][n->out()->id] = g.insert_node_before(anchor, n->op->name, in, n->attrs, n->name, n->source)->out();
    }
  }
  for (Value* v : exits) {
    std::vector<Value*> parts;
    for (int64_t j = 0; j < groups; ++j) parts.push_back(copy[j].at(v->id));
    Attrs a;
    a.set("dim", int64_t{0});
    const Node* p = v->producer;
    a.set("fused", p->name);  // (the FX node whose whole result it is: data dumps attribute it so)
    g.replace_all_uses(v, g.insert_node_before(anchor, "cat", parts, a, p->name, p->source)->out());
  }
  eliminate_dead_code(g);  // (the whole-batch region)
  return static_cast<int>(region.size());
}

}  // namespace ag
