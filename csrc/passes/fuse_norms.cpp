// Norm fusion: the decomposed RMSNorm that HF Llama/T5 write in Python,
//   variance = x.to(f32).pow(2).mean(-1, keepdim=True)
//   y = x * torch.rsqrt(variance + eps)
//   return weight * y.to(input_dtype)
// lowers to
//   pow_scalar(x){exponent=2} -> mean{dims=[-1] or [rank-1], keepdim} ->
//   add(., const scalar eps) -> rsqrt -> mul(x, .) [-> mul(., weight)]
// (operands of add and the muls in either order; same-dtype converts are
// already gone after canonicalize). The chain becomes one
// rms_norm(x[, weight]){normalized_ndim=1, eps, has_weight} node.
// Matched only when: x is float32 (a bf16 model's norm is matched on its f32
// copy, so the convert back and a bf16 weight multiply stay as they are); the
// reduction is over the last dim only; eps is a constant of one element; add's
// alpha is 1; weight is float32 of shape [N] (N = x's last dim); every
// intermediate value has exactly one use (x is shared by pow and the first mul)
// and is not a graph output; the result keeps x's type.
// The new node takes the last replaced node's FX name and source line, and is
// placed where that node was; attr "fused" lists the replaced nodes' FX names in
// chain order (last one = the node's own name). dce drops the old nodes.
#include <cmath>
#include <unordered_set>

#include "ir/op_registry.h"
#include "passes/chain_rewrite.h"
#include "passes/passes.h"

namespace ag {
namespace {


// A constant of one floating element, as double.
bool const_scalar(const Value* v, double* out) {
  // (not a weight: its value would become an attribute that the next process cannot rebind)
  if (!v->is_const() || !v->storage || !v->storage->data || v->storage->from_weights || !v->type.is_static() ||
      v->type.numel() != 1)
    return false;
  const void* p = v->storage->data;
  switch (v->type.dtype) {
    case DType::f32: *out = *static_cast<const float*>(p); return true;
    case DType::f64: *out = *static_cast<const double*>(p); return true;
    case DType::bf16: *out = bf16_to_f32(*static_cast<const uint16_t*>(p)); return true;
    case DType::f16: *out = f16_to_f32(*static_cast<const uint16_t*>(p)); return true;
    default: return false;
  }
}

}  // namespace

int fuse_norms(Graph& g) {
  auto uses = g.use_counts();
  std::vector<Node*> consumer(g.num_values(), nullptr);
  for (auto& up : g.nodes())
    for (Value* v : up->inputs) consumer[v->id] = up.get();
  // the only consumer of `v` when `v` has exactly one use and it is a node input
  // (a graph output counts as a use, so an output never qualifies)
  auto single = [&](const Value* v) -> Node* { return uses[v->id] == 1 ? consumer[v->id] : nullptr; };

  std::vector<Node*> snapshot;  // inserting nodes shifts g.nodes()
  for (auto& up : g.nodes()) snapshot.push_back(up.get());
  std::unordered_set<const Node*> touched;
  int changes = 0;
  for (Node* pw : snapshot) {
    if (!is_op(pw, "pow_scalar") || touched.count(pw) || pw->inputs.size() != 1 || pw->outputs.size() != 1) continue;
    double ex;
    if (!attr_number(pw->attrs, "exponent", 0, &ex) || ex != 2.0) continue;
    Value* x = pw->inputs[0];
    const TensorType& xt = x->type;
    if (xt.dtype != DType::f32 || !xt.is_static() || xt.rank() < 1 || !(pw->out()->type == xt)) continue;
    const int64_t rank = xt.rank(), N = xt.shape().back();

    Node* mn = single(pw->out());
    if (!is_op(mn, "mean") || mn->inputs.size() != 1 || mn->outputs.size() != 1) continue;
    auto dims = mn->attrs.ints("dims", {});
    if (dims.size() != 1 || !(dims[0] == -1 || dims[0] == rank - 1) || !mn->attrs.b("keepdim", false)) continue;
    if (mn->attrs.has("dtype") && mn->attrs.dtype("dtype") != DType::f32) continue;

    Node* ad = single(mn->out());
    if (!is_op(ad, "add")) continue;
    Value* ev = other_operand(ad, mn->out());
    double alpha, eps;
    if (!ev || !attr_number(ad->attrs, "alpha", 1.0, &alpha) || alpha != 1.0 || !const_scalar(ev, &eps)) continue;
    if (!(ad->out()->type == mn->out()->type)) continue;

    Node* rs = single(ad->out());
    if (!is_op(rs, "rsqrt") || rs->inputs.size() != 1) continue;

    Node* m1 = single(rs->out());
    if (!is_op(m1, "mul") || other_operand(m1, rs->out()) != x || !(m1->out()->type == xt)) continue;

    std::vector<Node*> chain{pw, mn, ad, rs, m1};
    Value* weight = nullptr;
    if (Node* m2 = single(m1->out()); is_op(m2, "mul")) {
      Value* w = other_operand(m2, m1->out());
      if (w && w->type.dtype == DType::f32 && w->type.is_static() && w->type.rank() == 1 && w->type.size(0) == N &&
          m2->out()->type == xt) {
        weight = w;
        chain.push_back(m2);
      }
    }
    Attrs a;
    a.set("normalized_ndim", int64_t{1});
    a.set("eps", eps);
    a.set("has_weight", weight != nullptr);
    std::vector<Value*> ins{x};
    if (weight) ins.push_back(weight);
    if (!replace_chain(g, chain, "rms_norm", ins, std::move(a), touched)) continue;
    ++changes;
  }
  if (changes) eliminate_dead_code(g);
  return changes;
}

}  // namespace ag
