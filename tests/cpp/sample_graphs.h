// Graphs shared by the C++ tests of the airgraph file (test_serialize) and the runner (test_runner).
#pragma once
#include <memory>

#include "ir/graph.h"
#include "test_util.h"

namespace ag::test {

// The start of the symbolic sample graphs: symbol s0, the size expressions s0 and 2*s0, and an input
// x: [s0, 4] recorded at s0 = 3.
struct SymbolicInput {
  Value* x;
  int s0, s0x2;  // expression ids
};
inline SymbolicInput add_symbolic_input(Graph& g) {
  g.add_symbol("s0");
  SymbolicInput in;
  in.s0 = g.add_expr(SizeExpr{{kSym, 0}, "s0"});
  in.s0x2 = g.add_expr(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*s0"});
  in.x = g.add_input(TensorType(DType::f32, {3, 4}), "x");
  g.set_dim_exprs(in.x, {in.s0, -1});
  return in;
}

// y = relu(reshape(v, [2*s0, 2])) for v: [s0, 4], nodes named r and y.
inline Value* reshape_relu(Graph& g, Value* v, const SymbolicInput& in) {
  Node* r = g.add_node("reshape", {v}, attrs({{"shape", Shape{6, 2}}}), "r");
  r->sym_attrs.push_back(SymAttr{"shape", 0, in.s0x2});
  Node* y = g.add_node("relu", {r->out()}, Attrs{}, "y");
  g.set_dim_exprs(y->out(), {in.s0x2, -1});
  return y->out();
}

// x: [s0, 4] -> y = relu(reshape(x * weight, [2*s0, 2])); state: [4] -> state + 2 * weight, written
// into state (an input write). With `reader_after`, a third output reads the old state after the
// update, so the update cannot be computed in the state's own bytes and is copied back.
inline std::unique_ptr<Graph> symbolic_sample_graph(bool reader_after) {
  auto g = std::make_unique<Graph>();
  SymbolicInput in = add_symbolic_input(*g);
  Value* state = g->add_input(TensorType(DType::f32, {4}), "state");
  auto w = Storage::allocate(4 * sizeof(float));
  for (int i = 0; i < 4; ++i) static_cast<float*>(w->data)[i] = 0.5f * (i + 1);
  Value* wc = g->add_const(TensorType(DType::f32, {4}), w, "weight");
  Node* m = g->add_node("mul", {in.x, wc}, Attrs{}, "scaled", "model.py:3 in forward: y = x * self.weight");
  Value* y = reshape_relu(*g, m->out(), in);
  Node* upd = g->add_node("add", {state, wc}, attrs({{"alpha", 2.0}}), "state_new");
  std::vector<Value*> outs{y, upd->out()};
  if (reader_after) outs.push_back(g->add_node("mul", {state, state}, Attrs{}, "old_sq")->out());
  g->set_outputs(outs);
  g->set_input_writes({{1, 1}});
  return g;
}

}  // namespace ag::test
