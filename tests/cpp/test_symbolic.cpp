// Tests of symbolic graphs: size expressions (postfix programs over the graph's
// symbols) and Graph::instantiate, which replays a graph lowered once at one
// binding for another binding of its symbols.
#include <gtest/gtest.h>

#include "base/error.h"
#include "ir/graph.h"
#include "ir/serialize.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "check_op.h"
#include "sample_graphs.h"

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
  test::SymbolicInput in = test::add_symbolic_input(*g);
  g->set_outputs({test::reshape_relu(*g, in.x, in)});
  return g;
}

// What the recorded graph computes: relu of x, element by element.
std::vector<double> relu_of(const std::vector<float>& x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.f;
  return y;
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
    std::vector<float> x(s * 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.f * i : 1.f * i;
    const PipelineOptions passes;
    auto r = test::compile_and_run(*inst, {x.data()}, &passes);
    ASSERT_EQ(r.outs[0].type.shape(), (Shape{2 * s, 2}));
    EXPECT_TRUE(test::all_close(r.outs[0], relu_of(x), {}));
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
  EXPECT_TRUE(test::throws_with([&] { g->instantiate({5}); }, {"s0=5", "should have shape [10, 5]", "node 'y'"}));
  EXPECT_THROW(g->instantiate({1, 2}), Error);  // one size per symbol
}

TEST(Instantiate, AGuardThatFailsRefusesTheBindingAndIsKept) {
  // the lowering decided at s0 = 3 that s0 != 1 (a size-1 dim would have been lowered otherwise)
  auto g = recorded_graph();
  int s0_minus_1 = g->add_expr(SizeExpr{{kSym, 0, kConst, -1, kAdd}, "s0 - 1"});
  g->add_guard(Graph::Guard{s0_minus_1, Graph::Rel::ne, true, "Ne(s0, 1)"});
  EXPECT_THROW(g->add_guard(Graph::Guard{99, Graph::Rel::eq, true, "bad"}), Error);  // no such expression
  EXPECT_NE(g->str().find("guard: Ne(s0, 1) is true"), std::string::npos) << g->str();
  EXPECT_EQ(g->failed_guard({3}), nullptr);
  ASSERT_NE(g->failed_guard({1}), nullptr);
  EXPECT_NO_THROW(g->instantiate({7}));
  auto refused = [](const Graph& h, const char* name) {
    EXPECT_TRUE(
        test::throws_with([&] { h.instantiate({1}); }, {std::string(name) + "=1", "needs Ne(s0, 1) to be true"}));
  };
  refused(*g, "s0");
  refused(*g->clone(), "s0");  // a copy for the passes keeps the guards
  g->rename_symbols({"batch"});
  std::string bytes = save_graph(*g, SaveOptions{true, "test", "{}"});
  auto loaded = load_graph(bytes.data(), bytes.size(), nullptr, nullptr);
  ASSERT_EQ(loaded.graph->guards().size(), 1u);
  EXPECT_EQ(loaded.graph->symbols(), std::vector<std::string>{"batch"});
  refused(*loaded.graph, "batch");  // and so does a file
  EXPECT_NO_THROW(loaded.graph->instantiate({2}));
  EXPECT_THROW(g->rename_symbols({"a", "b"}), Error);
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
  EXPECT_TRUE(test::throws_with([&] { g.instantiate({3}); }, {"s0=3", "sum"}));
}

// Passes run once on a symbolic graph (a clone: the recorded graph stays as it was); its
// instances must equal the passes run on the recorded graph's instances.
TEST(OptimizedOnce, PassesOnACloneGiveTheSameGraphAtEverySize) {
  Graph g;
  g.add_symbol("s0");
  int s0 = g.add_expr(SizeExpr{{kSym, 0}, "s0"});
  int s0x2 = g.add_expr(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*s0"});
  Value* x = g.add_input(TensorType(DType::f32, {3, 4}), "x");
  g.set_dim_exprs(x, {s0, -1});
  // reshape(reshape(x)) (canonicalize merges them), relu + mul (fused), and two slices equal at
  // s0 = 3 only (end = s0 and end = 3: CSE must keep both), an arange(s0) (never folded)
  Node* r1 = g.add_node("reshape", {x}, attrs({{"shape", Shape{6, 2}}}), "r1");
  r1->sym_attrs.push_back(SymAttr{"shape", 0, s0x2});
  Node* r2 = g.add_node("reshape", {r1->out()}, attrs({{"shape", Shape{3, 4}}}), "r2");
  r2->sym_attrs.push_back(SymAttr{"shape", 0, s0});
  Node* relu = g.add_node("relu", {r2->out()}, Attrs{}, "relu");
  Node* mul = g.add_node("mul", {relu->out(), relu->out()}, Attrs{}, "mul");
  g.set_dim_exprs(mul->out(), {s0, -1});
  Value* big = g.add_input(TensorType(DType::f32, {8, 4}), "big");
  Node* a = g.add_node("slice", {big}, attrs({{"dim", int64_t(0)}, {"start", int64_t(0)}, {"end", int64_t(3)},
                                               {"step", int64_t(1)}}), "a");
  a->sym_attrs.push_back(SymAttr{"end", -1, s0});
  Node* b = g.add_node("slice", {big}, attrs({{"dim", int64_t(0)}, {"start", int64_t(0)}, {"end", int64_t(3)},
                                               {"step", int64_t(1)}}), "b");
  Node* ab = g.add_node("add", {a->out(), b->out()}, Attrs{}, "ab");
  Node* ar = g.add_node("arange", {}, attrs({{"start", int64_t(0)}, {"end", int64_t(3)}, {"step", int64_t(1)}}),
                        "ar");
  ar->sym_attrs.push_back(SymAttr{"end", -1, s0});
  g.set_outputs({mul->out(), ab->out(), ar->out()});
  const std::string before = g.str();
  auto opt = g.clone();
  EXPECT_EQ(opt->str(), before);
  run_pipeline(*opt, PipelineOptions{});
  EXPECT_EQ(g.str(), before);  // the recorded graph is untouched
  EXPECT_TRUE(opt->is_symbolic());
  const std::string text = opt->str();
  EXPECT_EQ(text.find("r1"), std::string::npos) << text;       // reshape of a reshape merged
  EXPECT_NE(text.find("fused_elementwise"), std::string::npos) << text;
  EXPECT_NE(text.find("%a: "), std::string::npos) << text;     // both slices kept
  EXPECT_NE(text.find("%b: "), std::string::npos) << text;
  EXPECT_NE(text.find("= arange"), std::string::npos) << text;  // not folded into a constant
  // ab adds slices of lengths s0 and 3: only s0 = 3 is valid, and at other sizes the optimized
  // graph must refuse like the recorded one (at s0 = 3 the passes on the instance merge the two
  // slices: the front sees that difference and runs the passes per size)
  EXPECT_NO_THROW(opt->instantiate({3}));
  EXPECT_THROW(opt->instantiate({5}), Error);
  EXPECT_THROW(g.instantiate({5}), Error);
}

TEST(OptimizedOnce, InstancesOfTheOptimizedGraphRunCorrectly) {
  auto g = recorded_graph();  // x: [s0, 4] -> reshape [2*s0, 2] -> relu
  auto opt = g->clone();
  run_pipeline(*opt, PipelineOptions{});
  for (int64_t s : {1, 2, 9}) {
    auto want = g->instantiate({s});
    run_pipeline(*want, PipelineOptions{});
    auto inst = opt->instantiate({s});
    ASSERT_EQ(inst->str(), want->str()) << s;
    std::vector<float> x(s * 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0) ? -1.f * i : 1.f * i;
    auto r = test::compile_and_run(*inst, {x.data()}, nullptr);  // passes ran once, on opt: verify only
    ASSERT_EQ(r.outs[0].type.shape(), (Shape{2 * s, 2}));
    EXPECT_TRUE(test::all_close(r.outs[0], relu_of(x), {}));
  }
}

// Programs of one symbolic graph share the kernels of nodes seen before (same name, op, attrs,
// types and constants); a node whose sizes or constants differ gets its own.
TEST(KernelCache, ANodeSeenBeforeReusesItsKernel) {
  auto g = recorded_graph();  // x: [s0, 4] -> reshape [2*s0, 2] -> relu
  KernelCache cache;
  auto a = g->instantiate({3}), b = g->instantiate({3}), c = g->instantiate({5});
  auto pa = compile_program(*a, CompileOptions{.kernels = &cache});
  auto pb = compile_program(*b, CompileOptions{.kernels = &cache});
  auto pc = compile_program(*c, CompileOptions{.kernels = &cache});
  ASSERT_EQ(pa->kernels.size(), pb->kernels.size());
  for (size_t i = 0; i < pa->kernels.size(); ++i) {
    EXPECT_EQ(pa->kernels[i], pb->kernels[i]) << i;
    EXPECT_EQ(pa->instr_context[i], pb->instr_context[i]) << i;
    EXPECT_NE(pa->kernels[i], pc->kernels[i]) << i;  // other sizes
  }
  EXPECT_EQ(cache.hits(), pa->kernels.size());
  Executor ex(pc);
  std::vector<float> x(20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 2 ? 1.f * i : -1.f * i;
  auto outs = ex.run({x.data()});
  const float* y = static_cast<const float*>(outs[0].data);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.f);

  // the same node with other constant bytes (of the same type) gets its own kernel
  auto with_const = [](float v) {
    auto h = std::make_unique<Graph>();
    Value* in = h->add_input(TensorType(DType::f32, {4, 8}), "x");
    Value* w = h->add_const(TensorType(DType::f32, {8, 8}), Storage::allocate(8 * 8 * 4), "w");
    for (int i = 0; i < 64; ++i) static_cast<float*>(w->storage->data)[i] = (i % 9 == 0) ? v : 0.f;
    Node* n = h->add_node("linear", {in, w}, Attrs{}, "lin");
    h->set_outputs({n->out()});
    return h;
  };
  KernelCache wc;
  auto h1 = with_const(1.f), h2 = with_const(2.f);
  auto p1 = compile_program(*h1, CompileOptions{.kernels = &wc}), p2 = compile_program(*h2, CompileOptions{.kernels = &wc});
  EXPECT_NE(p1->kernels[0], p2->kernels[0]);
  EXPECT_EQ(wc.hits(), 0u);
  std::vector<float> xin(32, 1.f);
  auto o2 = Executor(p2).run({xin.data()});
  EXPECT_EQ(static_cast<const float*>(o2[0].data)[0], 2.f);  // identity times 2, not the first weights
}

}  // namespace
}  // namespace ag
