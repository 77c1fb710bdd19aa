// Graphs shared by the C++ tests of the airgraph file (test_serialize) and the runner (test_runner).
#pragma once
#include <memory>

#include "ir/graph.h"
#include "test_util.h"

namespace ag::test {

// x: [s0, 4] -> y = relu(reshape(x * weight, [2*s0, 2])); state: [4] -> state + 2 * weight, written
// into state (an input write). With `reader_after`, a third output reads the old state after the
// update, so the update cannot be computed in the state's own bytes and is copied back.
inline std::unique_ptr<Graph> symbolic_sample_graph(bool reader_after) {
  auto g = std::make_unique<Graph>();
  g->add_symbol("s0");
  int s0 = g->add_expr(SizeExpr{{kSym, 0}, "s0"});
  int s0x2 = g->add_expr(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*s0"});
  Value* x = g->add_input(TensorType(DType::f32, {3, 4}), "x");
  g->set_dim_exprs(x, {s0, -1});
  Value* state = g->add_input(TensorType(DType::f32, {4}), "state");
  auto w = Storage::allocate(4 * sizeof(float));
  for (int i = 0; i < 4; ++i) static_cast<float*>(w->data)[i] = 0.5f * (i + 1);
  Value* wc = g->add_const(TensorType(DType::f32, {4}), w, "weight");
  Node* m = g->add_node("mul", {x, wc}, Attrs{}, "scaled", "model.py:3 in forward: y = x * self.weight");
  Node* r = g->add_node("reshape", {m->out()}, attrs({{"shape", Shape{6, 2}}}), "r");
  r->sym_attrs.push_back(SymAttr{"shape", 0, s0x2});
  Node* y = g->add_node("relu", {r->out()}, Attrs{}, "y");
  g->set_dim_exprs(y->out(), {s0x2, -1});
  Node* upd = g->add_node("add", {state, wc}, attrs({{"alpha", 2.0}}), "state_new");
  std::vector<Value*> outs{y->out(), upd->out()};
  if (reader_after) outs.push_back(g->add_node("mul", {state, state}, Attrs{}, "old_sq")->out());
  g->set_outputs(outs);
  g->set_input_writes({{1, 1}});
  return g;
}

}  // namespace ag::test
