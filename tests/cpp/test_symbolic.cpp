// Tests of symbolic graphs: size expressions (postfix programs over the graph's
// symbols) and Graph::instantiate, which replays a graph lowered once at one
// binding for another binding of its symbols.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "ir/graph.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace ag {
namespace {

using test::attrs;

TEST(SizeExpr, EvaluatesWithPythonFloorSemantics) {
  // (s0 * 3 + -7) // 4, and its Python modulo
  SizeExpr e{{kSym, 0, kConst, 3, kMul, kConst, -7, kAdd, kConst, 4, kFloorDiv}, "(3*s0 - 7)//4"};
  SizeExpr m{{kSym, 0, kConst, 3, kMul, kConst, -7, kAdd, kConst, 4, kMod}, "(3*s0 - 7)%4"};
  check_size_expr(e, 1);
  for (int64_t s : {0, 1, 2, 5, 17}) {
    int64_t a = 3 * s - 7;
    int64_t q = a >= 0 ? a / 4 : -((-a + 3) / 4);
    EXPECT_EQ(eval_size_expr(e, {s}), q) << s;
    EXPECT_EQ(eval_size_expr(m, {s}), a - q * 4) << s;
  }
  SizeExpr mx{{kSym, 0, kSym, 1, kMax, kSym, 1, kNeg, kMin}, "min(max(s0, s1), -s1)"};
  check_size_expr(mx, 2);
  EXPECT_EQ(eval_size_expr(mx, {3, 5}), -5);
}

TEST(SizeExpr, MalformedProgramsAreRejected) {
  EXPECT_THROW(check_size_expr(SizeExpr{{kSym, 2}, "s2"}, 2), Error);             // no such symbol
  EXPECT_THROW(check_size_expr(SizeExpr{{kConst, 1, kAdd}, "1+"}, 0), Error);     // missing operand
  EXPECT_THROW(check_size_expr(SizeExpr{{kConst, 1, kConst, 2}, "1 2"}, 0), Error);  // two values left
  EXPECT_THROW(check_size_expr(SizeExpr{{kConst}, "?"}, 0), Error);               // truncated
  EXPECT_THROW(check_size_expr(SizeExpr{{42}, "?"}, 0), Error);                   // unknown token
  SizeExpr div{{kConst, 1, kSym, 0, kFloorDiv}, "1//s0"};
  check_size_expr(div, 1);
  EXPECT_THROW(eval_size_expr(div, {0}), Error);
}

// x: [s0, 4] -> reshape to [s0 * 2, 2] -> relu; recorded at s0 = 3.
std::unique_ptr<Graph> recorded_graph() {
  auto g = std::make_unique<Graph>();
  g->add_symbol("s0");
  int s0 = g->add_expr(SizeExpr{{kSym, 0}, "s0"});
  int s0x2 = g->add_expr(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*s0"});
  Value* x = g->add_input(TensorType(DType::f32, {3, 4}), "x");
  g->set_dim_exprs(x, {s0, -1});
  Node* r = g->add_node("reshape", {x}, attrs({{"shape", Shape{6, 2}}}), "r");
  r->sym_attrs.push_back(SymAttr{"shape", 0, s0x2});
  Node* y = g->add_node("relu", {r->out()}, Attrs{}, "y");
  g->set_dim_exprs(y->out(), {s0x2, -1});
  g->set_outputs({y->out()});
  return g;
}

TEST(Instantiate, ReplaysTheGraphAtOtherSizes) {
  auto g = recorded_graph();
  EXPECT_NE(g->str().find("sizes {shape[0]=2*s0}"), std::string::npos) << g->str();
  EXPECT_NE(g->str().find("%x: float32[s0, 4]"), std::string::npos) << g->str();
  for (int64_t s : {1, 3, 7}) {
    auto inst = g->instantiate({s});
    EXPECT_FALSE(inst->is_symbolic());
    ASSERT_EQ(inst->inputs()[0]->type.shape(), (Shape{s, 4}));
    ASSERT_EQ(inst->outputs()[0]->type.shape(), (Shape{2 * s, 2}));
    EXPECT_EQ(inst->outputs()[0]->id, g->outputs()[0]->id);  // value ids are kept
    inst->verify();
    run_pipeline(*inst, PipelineOptions{});
    Executor ex(compile_program(*inst));
    std::vector<float> x(s * 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.f * i : 1.f * i;
    auto outs = ex.run({x.data()});
    ASSERT_EQ(outs[0].type.shape(), (Shape{2 * s, 2}));
    const float* y = static_cast<const float*>(outs[0].data);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.f);
  }
  // the recorded graph itself is unchanged
  EXPECT_EQ(g->inputs()[0]->type.shape(), (Shape{3, 4}));
}

TEST(Instantiate, AShapeCheckThatFailsNamesTheValueAndTheSizes) {
  auto g = recorded_graph();
  // claim the output's second dim is s0 as well: true at s0 = 2 only
  int s0 = 0;
  g->set_dim_exprs(g->outputs()[0], {1, s0});
  EXPECT_NO_THROW(g->instantiate({2}));
  try {
    g->instantiate({5});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("s0=5"), std::string::npos) << m;
    EXPECT_NE(m.find("should have shape [10, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("node 'y'"), std::string::npos) << m;
  }
  EXPECT_THROW(g->instantiate({1, 2}), Error);  // one size per symbol
}

TEST(Instantiate, AnOpThatRejectsTheSizesNamesTheBinding) {
  Graph g;
  g.add_symbol("s0");
  int s0 = g.add_expr(SizeExpr{{kSym, 0}, "s0"});
  Value* a = g.add_input(TensorType(DType::f32, {4}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {4}), "b");
  g.set_dim_exprs(a, {s0});
  Node* n = g.add_node("add", {a, b}, Attrs{}, "sum");
  g.set_outputs({n->out()});
  EXPECT_NO_THROW(g.instantiate({4}));
  try {
    g.instantiate({3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("s0=3"), std::string::npos) << m;
    EXPECT_NE(m.find("sum"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace ag
