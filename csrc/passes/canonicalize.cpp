// Canonicalization: removes nodes that do nothing and rewrites patterns into
// the forms the kernels prefer.
//  - reshape to the same shape, permute by the identity, expand to the same
//    shape, convert to the same dtype, slice (or slice_view) over the whole dim, and clone of
//    an intermediate (the IR is functional, so a copy is never observable;
//    clones feeding outputs are re-added by materialize_outputs) are dropped;
//  - reshape(reshape(x)) becomes one reshape;
//  - matmul(x, permute(w, [1, 0])[, bias]) with a 2-D w becomes linear(x, w[, bias])
//    (bias carried when it is [out]), so weights are used in PyTorch's [out, in]
//    layout with no transpose copy (and are prepacked when constant);
//  - weight-only int8: matmul(x, convert(permute(w_int8, [1, 0]))) and linear(x, convert(w_int8))
//    with a constant w_int8 and a float32/bfloat16 x become linear(x, w_int8) (torchao's
//    Int8WeightOnlyConfig traces as mm(x, t(w).to(float)) * scale: the scale stays a mul, which
//    fuse_epilogues absorbs), so the weights stay int8 in memory and are widened in registers;
//  - sdpa(q, repeat_kv(k), repeat_kv(v)) becomes sdpa(q, k, v): transformers' repeat_kv
//    (reshape to [B, Hk, 1, S, E], expand to R copies, reshape to [B, Hk*R, S, E]) copies the
//    whole KV cache R times per layer and step; the sdpa kernel reads key head h / R itself
//    (grouped-query attention), so K and V are read once, where they are.
//  - conv(pad(x, zeros)) becomes conv(x) with the pad added to its padding (start and end apart:
//    padding_r): TensorFlow-style "same" padding (MobileNet, EfficientNet: an explicit F.pad before
//    each strided or depthwise convolution) costs no copy of the activations, and the convolution
//    reads its input where the previous one wrote it (channels-last included).
// Runs to a fixed point. Keeps node order and FX names.
#include <cmath>
#include <variant>

#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {
namespace {

bool is_op(const Value* v, const char* name) {
  return v->producer && std::string_view(v->producer->op->name) == name;
}

bool is_noop(const Node& n) {
  std::string_view op = n.op->name;
  const Value* in = n.inputs.empty() ? nullptr : n.inputs[0];
  const Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
  if (!in || !out) return false;
  if (op == "reshape" || op == "expand" || op == "convert")
    return in->type == out->type;
  if (op == "permute") {
    auto p = n.attrs.ints("dims");
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] != static_cast<int64_t>(i)) return false;
    return true;
  }
  if (op == "slice") return in->type == out->type;
  // (a slice_view whose bounds are sizes of a symbolic graph is kept: its types are the hint sizes')
  if (op == "slice_view") return n.sym_attrs.empty() && in->type == out->type;
  if (op == "clone") return in->kind == ValueKind::NodeOutput;
  return false;
}

// The int8 constant that `v` converts to x's float dtype, if it is one (weight-only int8: the
// linear kernel widens the int8 bytes itself, in registers or per block of its call).
Value* int8_weight(Value* v, DType x_dtype) {
  if (!is_op(v, "convert") || v->type.dtype != x_dtype || !(x_dtype == DType::f32 || x_dtype == DType::bf16))
    return nullptr;
  Value* w = v->producer->inputs[0];
  return w->is_const() && w->storage && w->type.dtype == DType::i8 ? w : nullptr;
}

// matmul(x, convert(permute(w_int8, [1, 0]))) -> the permute it converts (to_linear then makes it
// linear(x, w_int8)).
Value* transposed_int8(Value* b, DType x_dtype) {
  if (!is_op(b, "convert") || b->type.dtype != x_dtype) return nullptr;
  Value* t = b->producer->inputs[0];
  if (!is_op(t, "permute") || t->type.dtype != DType::i8) return nullptr;
  Value* w = t->producer->inputs[0];
  return w->is_const() && w->storage && (x_dtype == DType::f32 || x_dtype == DType::bf16) ? t : nullptr;
}

// matmul(x, permute(w, [1, 0])[, bias]) -> linear(x, w[, bias]) when the shapes allow.
bool to_linear(Graph& g, Node* n) {
  Value* t = n->inputs[1];
  if (Value* t8 = transposed_int8(t, n->inputs[0]->type.dtype)) t = t8;
  Value* w = t->producer->inputs[0];
  auto dims = t->producer->attrs.ints("dims");
  // a bias is carried when it is linear's [out] (matmul's may broadcast along other dims)
  bool bias_ok =
      n->inputs.size() == 2 || (n->inputs[2]->type.rank() == 1 && n->inputs[2]->type.size(0) == w->type.size(0));
  if (!(w->type.rank() == 2 && dims == std::vector<int64_t>{1, 0} && n->inputs[0]->type.rank() >= 2 && bias_ok &&
        find_op("linear")))
    return false;
  std::vector<Value*> ins{n->inputs[0], w};
  if (n->inputs.size() == 3) ins.push_back(n->inputs[2]);
  Node* lin = g.insert_node_before(n, "linear", ins, Attrs{}, n->name, n->source);
  g.replace_all_uses(n->outputs[0], lin->outputs[0]);
  return true;
}

// The [B, Hk, S, E] value that `r` repeats along its heads (r = reshape(expand(reshape(x))) with
// shapes [B, Hk, 1, S, E], [B, Hk, R, S, E], [B, Hk*R, S, E]): head h of r is head h / R of x.
Value* repeated_heads(Value* r, int64_t* rep) {
  if (!is_op(r, "reshape")) return nullptr;
  Value* e = r->producer->inputs[0];
  if (!is_op(e, "expand")) return nullptr;
  Value* u = e->producer->inputs[0];
  if (!is_op(u, "reshape")) return nullptr;
  Value* x = u->producer->inputs[0];
  const TensorType &xt = x->type, &ut = u->type, &et = e->type, &rt = r->type;
  if (xt.rank() != 4 || ut.rank() != 5 || et.rank() != 5 || rt.rank() != 4) return nullptr;
  const int64_t B = xt.size(0), Hk = xt.size(1), S = xt.size(2), E = xt.size(3), R = et.size(2);
  if (ut.shape() != Shape{B, Hk, 1, S, E} || et.shape() != Shape{B, Hk, R, S, E} || rt.shape() != Shape{B, Hk * R, S, E})
    return nullptr;
  *rep = R;
  return x;
}

// A conv whose input is a pad by +0.0 of its spatial dims only (no crop): the pad goes into the
// conv's padding and the conv reads the pad's input.
bool fold_zero_pad(Node& n) {
  if (n.inputs.size() < 2 || !is_op(n.inputs[0], "pad")) return false;
  const Node& p = *n.inputs[0]->producer;
  const TensorType& x = p.inputs[0]->type;
  const int64_t r = x.rank(), sp = r - 2;
  if (sp < 1 || !is_floating(x.dtype)) return false;
  if (const AttrValue* v = p.attrs.find("value")) {
    const double z = std::holds_alternative<double>(*v) ? std::get<double>(*v)
                     : std::holds_alternative<int64_t>(*v) ? static_cast<double>(std::get<int64_t>(*v)) : 1.0;
    if (z != 0.0 || std::signbit(z)) return false;  // (a -0.0 pad is not the conv's own +0.0)
  }
  const Shape pads = p.attrs.ints("pads");
  for (size_t k = 0; k < pads.size(); ++k)
    if (pads[k] < 0 || (static_cast<int64_t>(k / 2) >= sp && pads[k] != 0)) return false;
  auto full = [&](Shape v) {  // (as the conv reads it: none is 0, one value is every dim's)
    if (v.empty()) v = Shape(sp, 0);
    if (v.size() == 1 && sp > 1) v = Shape(sp, v[0]);
    return v;
  };
  Shape pl = full(n.attrs.ints("padding", {}));
  Shape pr = full(n.attrs.ints("padding_r", pl));
  if (static_cast<int64_t>(pl.size()) != sp || static_cast<int64_t>(pr.size()) != sp) return false;
  for (size_t k = 0; k < pads.size() / 2 && static_cast<int64_t>(k) < sp; ++k) {
    const int64_t s = sp - 1 - static_cast<int64_t>(k);  // (pads run from the last dim backwards)
    pl[s] += pads[2 * k];
    pr[s] += pads[2 * k + 1];
  }
  n.attrs.set("padding", pl);
  n.attrs.set("padding_r", pr);
  n.inputs[0] = p.inputs[0];
  return true;
}

}  // namespace

int canonicalize(Graph& g) {
  int total = 0;
  for (int round = 0; round < 64; ++round) {
    int changes = 0;
    std::vector<Node*> matmuls;  // rewritten after the scan: inserting nodes invalidates the iteration
    for (auto& up : g.nodes()) {
      Node* n = up.get();
      if (is_noop(*n)) {
        g.replace_all_uses(n->outputs[0], n->inputs[0]);
        ++changes;
        continue;
      }
      std::string_view op = n->op->name;
      if (op == "reshape" && is_op(n->inputs[0], "reshape")) {
        n->inputs[0] = n->inputs[0]->producer->inputs[0];
        ++changes;
        continue;
      }
      if (op == "conv" && fold_zero_pad(*n)) {
        ++changes;
        continue;
      }
      if (op == "sdpa" && n->inputs.size() >= 3) {
        int64_t rk = 0, rv = 0;
        Value* k = repeated_heads(n->inputs[1], &rk);
        Value* v = repeated_heads(n->inputs[2], &rv);
        if (k && v && rk == rv) {
          n->inputs[1] = k;
          n->inputs[2] = v;
          ++changes;
          continue;
        }
      }
      if (op == "matmul" && (n->inputs.size() == 2 || n->inputs.size() == 3) &&
          (is_op(n->inputs[1], "permute") || transposed_int8(n->inputs[1], n->inputs[0]->type.dtype)))
        matmuls.push_back(n);
      if (op == "linear" && n->inputs.size() >= 2) {
        if (Value* w8 = int8_weight(n->inputs[1], n->inputs[0]->type.dtype)) {
          n->inputs[1] = w8;
          ++changes;
          continue;
        }
      }
    }
    for (Node* n : matmuls) changes += to_linear(g, n);
    if (changes) eliminate_dead_code(g);
    total += changes;
    if (!changes) break;
  }
  return total;
}

}  // namespace ag
