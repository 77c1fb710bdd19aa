// A convolution over a channel concatenation, computed per part:
//   conv(cat([x_0, ..., x_n], dim=1), W, b) = conv(x_0, W_0, b) + conv(x_1, W_1) + ... + conv(x_n, W_n)
// where W_i is W's slice of input channels that x_i occupies. An FPN head (UperNet's bottleneck:
// four 256-channel levels into a 3x3 convolution of 1024 input channels) runs oneDNN 3.2's
// convolution far below the rate of its parts (Zen 4, 2 threads: 142-163 ms at batch 1 against
// four of 22 ms); the parts also read their inputs where the producers wrote them, so the
// concatenation's copy goes. The sums become the convolutions' residual-add epilogues
// (fuse_epilogues); a BatchNorm and activation after the convolution follow the last part.
// Only f32 2-D convolutions with constant weights (each part's slice is a constant derived from
// them, so a weight change rebuilds the graph as for any folded constant), groups 1, at least
// kFromChannels input channels and kFromPixels output pixels, no attribute that is a symbol's size,
// and a concatenation used only by that convolution.
// After dce (use counts are final), before the fusions.
#include <cstring>

#include "passes/chain_rewrite.h"
#include "passes/passes.h"

namespace ag {
namespace {

// Measured (Zen 4, 2 threads, a 3x3 convolution of 256 out channels over four parts, with BatchNorm and
// ReLU after): 1024 channels at 64 x 64, batch 1: 143 -> 94.7 ms; at 17 x 17, batch 2: 13.9 -> 13.5 ms;
// 2048 channels at 9 x 9: 3.76 -> 4.05 ms (slower). Hence from 1024 channels and 2048 output pixels.
constexpr int64_t kFromChannels = 1024, kFromPixels = 2048;

}  // namespace

int split_concat_convs(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  std::vector<bool> is_output(g.num_values(), false);
  for (Value* v : g.outputs()) is_output[v->id] = true;
  std::vector<Node*> snapshot;
  for (auto& up : g.nodes())
    if (is_op(up.get(), "conv")) snapshot.push_back(up.get());
  int changes = 0;
  for (Node* n : snapshot) {
    if (n->inputs.size() < 2 || n->inputs.size() > 3 || n->attrs.has("post_ops")) continue;
    if (!n->sym_attrs.empty() || n->sized) continue;  // (attrs that are sizes of a symbolic graph's symbols)
    Value *x = n->inputs[0], *w = n->inputs[1];
    Node* cat = x->producer;
    if (!is_op(cat, "cat") || uses[x->id] != 1 || is_output[x->id] || cat->inputs.size() < 2) continue;
    if (x->type.rank() != 4 || x->type.dtype != DType::f32 || !w->is_const() || !w->storage) continue;
    if (n->inputs.size() == 3 && !n->inputs[2]->is_const()) continue;
    if (n->attrs.i("groups", 1) != 1 || normalize_dim(cat->attrs.i("dim", 0), 4) != 1) continue;
    const int64_t C = x->type.size(1);
    const TensorType& ot = n->out()->type;
    if (C < kFromChannels || w->type.size(1) != C || ot.size(0) * ot.size(2) * ot.size(3) < kFromPixels) continue;
    bool ok = true;
    for (Value* p : cat->inputs) ok = ok && p->type.rank() == 4 && p->type.dtype == DType::f32 && p->type.size(1) > 0;
    if (!ok) continue;
    const Shape ws = w->type.shape();
    const int64_t O = ws[0], per = ws[2] * ws[3];
    const float* W = static_cast<const float*>(w->storage->data);
    Value* sum = nullptr;
    int64_t c0 = 0;
    for (size_t i = 0; i < cat->inputs.size(); ++i) {
      Value* part = cat->inputs[i];
      const int64_t Ci = part->type.size(1);
      auto s = Storage::allocate(static_cast<size_t>(O * Ci * per) * sizeof(float));
      float* d = static_cast<float*>(s->data);
      for (int64_t o = 0; o < O; ++o) std::memcpy(d + o * Ci * per, W + (o * C + c0) * per, Ci * per * sizeof(float));
      mark_derived(*s, {w});
      Value* wi = g.add_const(TensorType(DType::f32, {O, Ci, ws[2], ws[3]}), s, w->name + ".in" + std::to_string(i));
      std::vector<Value*> in{part, wi};
      if (i == 0 && n->inputs.size() == 3) in.push_back(n->inputs[2]);
      Node* ci = g.insert_node_before(n, "conv", in, n->attrs, n->name, n->source);
      sum = sum ? g.insert_node_before(n, "add", {sum, ci->out()}, Attrs{}, n->name, n->source)->out() : ci->out();
      c0 += Ci;
    }
    g.replace_all_uses(n->out(), sum);
    ++changes;
  }
  if (changes) eliminate_dead_code(g);  // (the whole convolutions and their concatenations)
  return changes;
}

}  // namespace ag
