// Tests of the IR, the passes, the memory planner and the executor, using
// test-only ops registered below so they do not depend on any kernel family.
#include <gtest/gtest.h>

#include <random>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/common.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "runtime/memory_planner.h"
#include "check_op.h"

namespace ag {
namespace {

// t_addc: out = in + c (f32, elementwise)
std::unique_ptr<Kernel> make_addc(const Node& n, const BuildCtx& ctx) {
  float c = static_cast<float>(n.attrs.f("c", 1.0));
  int64_t numel = n.inputs[0]->type.numel();
  return make_fn_kernel("t_addc", [c, numel](void* const* in, void* const* out) {
    auto* x = static_cast<const float*>(in[0]);
    auto* y = static_cast<float*>(out[0]);
    for (int64_t i = 0; i < numel; ++i) y[i] = x[i] + c;
  });
}
std::vector<TensorType> infer_addc(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[0].dtype == DType::f32, "t_addc takes float32, got ", in[0].str());
  return {in[0]};
}
// t_add: out = a + b (same shapes)
std::unique_ptr<Kernel> make_add(const Node& n, const BuildCtx& ctx) {
  int64_t numel = n.inputs[0]->type.numel();
  return make_fn_kernel("t_add", [numel](void* const* in, void* const* out) {
    auto* a = static_cast<const float*>(in[0]);
    auto* b = static_cast<const float*>(in[1]);
    auto* y = static_cast<float*>(out[0]);
    for (int64_t i = 0; i < numel; ++i) y[i] = a[i] + b[i];
  });
}
std::vector<TensorType> infer_add(const std::vector<TensorType>& in, const Attrs&) {
  AG_CHECK(in[0] == in[1], "t_add: shapes differ: ", in[0].str(), " vs ", in[1].str());
  return {in[0]};
}
std::unique_ptr<Kernel> make_fail(const Node&, const BuildCtx&) {
  return make_fn_kernel("t_fail", [](void* const*, void* const*) { fail("index 7 out of range"); });
}
int g_runs_of_count = 0;
std::unique_ptr<Kernel> make_count(const Node& n, const BuildCtx& ctx) {
  int64_t numel = n.inputs[0]->type.numel();
  return make_fn_kernel("t_count", [numel](void* const* in, void* const* out) {
    ++g_runs_of_count;
    std::memcpy(out[0], in[0], numel * 4);
  });
}

AG_REGISTER_OP(t_addc, {.name = "t_addc", .min_inputs = 1, .max_inputs = 1, .infer = infer_addc,
                        .make_kernel = make_addc, .props = kElementwise});
AG_REGISTER_OP(t_add, {.name = "t_add", .min_inputs = 2, .max_inputs = 2, .infer = infer_add,
                       .make_kernel = make_add, .props = kElementwise});
AG_REGISTER_OP(t_fail, {.name = "t_fail", .min_inputs = 1, .max_inputs = 1, .infer = infer_same,
                        .make_kernel = make_fail, .props = kNoFold});
AG_REGISTER_OP(t_count, {.name = "t_count", .min_inputs = 1, .max_inputs = 1, .infer = infer_same,
                         .make_kernel = make_count, .props = kNoProps});

Attrs addc(double c) {
  Attrs a;
  a.set("c", c);
  return a;
}

std::shared_ptr<Storage> filled(int64_t n, float v) {
  auto s = Storage::allocate(n * 4);
  for (int64_t i = 0; i < n; ++i) static_cast<float*>(s->data)[i] = v;
  return s;
}

TensorType f32(Shape s) { return TensorType(DType::f32, s); }

// ---------------------------------------------------------------- IR
TEST(IR, BuildPrintVerify) {
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  Node* n = g.add_node("t_addc", {x}, addc(2), "add_1", "model.py:3 in forward: y = x + 2");
  g.set_outputs({n->out()});
  g.verify();
  std::string s = g.str();
  EXPECT_NE(s.find("%add_1: float32[2, 3] = t_addc(%x) {c=2}"), std::string::npos) << s;
  EXPECT_NE(s.find("model.py:3"), std::string::npos);
  EXPECT_EQ(n->out()->producer, n);
}

TEST(IR, InferenceErrorNamesNodeOpShapesAndSource) {
  Graph g;
  Value* a = g.add_input(f32({2, 3}), "a");
  Value* b = g.add_input(f32({3, 2}), "b");
  EXPECT_TRUE(
      test::throws_with([&] { g.add_node("t_add", {a, b}, Attrs{}, "add_7", "net.py:12 in forward: z = a + b"); },
                        {"add_7", "t_add", "float32[2, 3]", "float32[3, 2]", "net.py:12"}));
  EXPECT_TRUE(g.nodes().empty());
}

TEST(IR, UnknownOpAndArity) {
  Graph g;
  Value* a = g.add_input(f32({2}), "a");
  EXPECT_THROW(g.add_node("no_such_op", {a}, Attrs{}), Error);
  EXPECT_THROW(g.add_node("t_add", {a}, Attrs{}), Error);
  TensorType bad(DType::i64, {2});
  Value* i = g.add_input(bad, "i");
  EXPECT_THROW(g.add_node("t_addc", {i}, addc(1)), Error);
}

TEST(IR, AbsurdSizesAreErrorsNotOverflows) {
  // sizes a corrupt airgraph file may carry in a node's attributes: an error, never a signed
  // overflow (found by the loader's fuzz test under UBSan)
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  for (std::vector<int64_t> shape : {std::vector<int64_t>{int64_t(1) << 62, 6, -1},
                                     std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 40},
                                     std::vector<int64_t>{-5, 6}}) {
    Attrs r;
    r.set("shape", shape);
    EXPECT_THROW(g.add_node("reshape", {x}, r), Error);
  }
}

TEST(IR, SymbolicDims) {
  Graph g;
  int s = g.add_symbol("batch");
  TensorType t = f32({4, 8});
  t.dims[0].sym = s;
  Value* x = g.add_input(t, "x");
  EXPECT_FALSE(x->type.is_static());
  EXPECT_EQ(x->type.str(), "float32[s0=4, 8]");
  g.set_outputs({g.add_node("t_addc", {x}, addc(1))->out()});
  EXPECT_THROW(compile_program(g), Error);  // must be specialized first
}

TEST(IR, AttrsTyped) {
  Attrs a;
  a.set("k", int64_t{3});
  a.set("f", 0.5);
  a.set("v", std::vector<int64_t>{1, 2});
  a.set("d", DType::bf16);
  EXPECT_EQ(a.i("k"), 3);
  EXPECT_DOUBLE_EQ(a.f("k"), 3.0);
  EXPECT_DOUBLE_EQ(a.f("f"), 0.5);
  EXPECT_EQ(a.ints("v").size(), 2u);
  EXPECT_EQ(a.dtype("d"), DType::bf16);
  EXPECT_EQ(a.i("missing", 9), 9);
  EXPECT_THROW(a.i("f"), Error);
  EXPECT_THROW(a.i("missing"), Error);
}

TEST(IR, DTypeConversions) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), f32_to_bf16(1.0f));  // ties to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.25f)), 0.25f);
  DType t;
  EXPECT_TRUE(dtype_from_name("bfloat16", &t));
  EXPECT_EQ(t, DType::bf16);
  EXPECT_FALSE(dtype_from_name("complex64", &t));
}

// ---------------------------------------------------------------- passes
TEST(Passes, DeadCodeElimination) {
  Graph g;
  Value* x = g.add_input(f32({4}), "x");
  Value* used = g.add_node("t_addc", {x}, addc(1))->out();
  g.add_node("t_addc", {x}, addc(2));  // unused
  g.set_outputs({used});
  EXPECT_EQ(eliminate_dead_code(g), 1);
  EXPECT_EQ(g.nodes().size(), 1u);
}

TEST(Passes, CommonSubexpressions) {
  Graph g;
  Value* x = g.add_input(f32({4}), "x");
  Value* a = g.add_node("t_addc", {x}, addc(1))->out();
  Value* b = g.add_node("t_addc", {x}, addc(1))->out();
  Value* c = g.add_node("t_addc", {x}, addc(3))->out();  // different attrs: kept
  g.set_outputs({g.add_node("t_add", {a, b}, Attrs{})->out(), c});
  EXPECT_EQ(eliminate_common_subexpressions(g), 1);
  eliminate_dead_code(g);
  EXPECT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes().back()->inputs[0], g.nodes().back()->inputs[1]);
}

TEST(Passes, FoldConstants) {
  Graph g;
  Value* w = g.add_const(f32({3}), filled(3, 2.0f), "w");
  Value* x = g.add_input(f32({3}), "x");
  Value* w2 = g.add_node("t_addc", {w}, addc(1))->out();  // constant: folded to 3
  g.set_outputs({g.add_node("t_add", {x, w2}, Attrs{})->out()});
  EXPECT_EQ(fold_constants(g, 1 << 20), 1);
  ASSERT_EQ(g.nodes().size(), 1u);
  Value* folded = g.nodes()[0]->inputs[1];
  ASSERT_TRUE(folded->is_const());
  EXPECT_EQ(static_cast<float*>(folded->storage->data)[2], 3.0f);
  // a limit of 0 bytes folds nothing
  Graph h;
  Value* w3 = h.add_const(f32({3}), filled(3, 2.0f), "w");
  h.set_outputs({h.add_node("t_addc", {w3}, addc(1))->out()});
  EXPECT_EQ(fold_constants(h, 0), 0);
}

TEST(Passes, CanonicalizeReshapes) {
  Graph g;
  Value* x = g.add_input(f32({2, 6}), "x");
  Attrs same, r1, r2;
  same.set("shape", std::vector<int64_t>{2, 6});
  r1.set("shape", std::vector<int64_t>{12});
  r2.set("shape", std::vector<int64_t>{3, 4});
  Value* a = g.add_node("reshape", {x}, same)->out();      // no-op
  Value* b = g.add_node("reshape", {a}, r1)->out();
  Value* c = g.add_node("reshape", {b}, r2)->out();        // reshape(reshape) -> one reshape
  Value* d = g.add_node("t_addc", {c}, addc(1))->out();
  g.set_outputs({d});
  EXPECT_GT(canonicalize(g), 0);
  g.verify();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_STREQ(g.nodes()[0]->op->name, "reshape");
  EXPECT_EQ(g.nodes()[0]->inputs[0], x);
}

TEST(Passes, CanonicalizeEveryTransposedWeightMatmulToLinear) {
  // a 40-layer chain of matmul(x, permute(w, [1, 0])): every one becomes linear(x, w)
  Graph g;
  Value* x = g.add_input(f32({3, 8}), "x");
  Attrs t;
  t.set("dims", std::vector<int64_t>{1, 0});
  for (int i = 0; i < 40; ++i) {
    Value* w = g.add_const(f32({8, 8}), filled(64, 0.01f), "w" + std::to_string(i));
    x = g.add_node("matmul", {x, g.add_node("permute", {w}, t)->out()}, Attrs{})->out();
  }
  g.set_outputs({x});
  EXPECT_EQ(canonicalize(g), 40);
  g.verify();
  ASSERT_EQ(g.nodes().size(), 40u);
  for (auto& n : g.nodes()) {
    EXPECT_STREQ(n->op->name, "linear");
    EXPECT_TRUE(n->inputs[1]->is_const());
  }
}

TEST(Passes, MaterializeOutputs) {
  Graph g;
  Value* x = g.add_input(f32({2}), "x");
  Value* y = g.add_node("t_addc", {x}, addc(1))->out();
  g.set_outputs({x, y, y});
  EXPECT_EQ(materialize_outputs(g), 2);  // the input, and the repeated output
  g.verify();
  for (Value* o : g.outputs()) EXPECT_EQ(o->kind, ValueKind::NodeOutput);
  EXPECT_NE(g.outputs()[1], g.outputs()[2]);
}

TEST(Passes, PipelineRespectsDisabled) {
  Graph g;
  Value* x = g.add_input(f32({4}), "x");
  Value* a = g.add_node("t_addc", {x}, addc(1))->out();
  Value* b = g.add_node("t_addc", {x}, addc(1))->out();
  g.set_outputs({g.add_node("t_add", {a, b}, Attrs{})->out()});
  PipelineOptions opt;
  opt.disabled = {"cse"};
  auto stats = run_pipeline(g, opt);
  EXPECT_EQ(g.nodes().size(), 3u);
  for (auto& s : stats) EXPECT_NE(s.name, "cse");
  run_pipeline(g, PipelineOptions{});
  EXPECT_EQ(g.nodes().size(), 2u);
}

// ---------------------------------------------------------------- planner
TEST(Planner, ReusesMemoryAlongAChain) {
  Graph g;
  Value* v = g.add_input(f32({1024}), "x");
  for (int i = 0; i < 8; ++i) v = g.add_node("t_count", {v}, Attrs{})->out();  // not elementwise: no in place
  g.set_outputs({v});
  MemoryPlan p = plan_memory(g);
  // 7 intermediates of 4 KiB each; at most two are alive at once.
  EXPECT_EQ(p.naive_bytes, 7u * 4096u);
  EXPECT_EQ(p.arena_bytes, 2u * 4096u);
  EXPECT_EQ(p.external_roots.size(), 1u);
}

TEST(Planner, InPlaceElementwise) {
  Graph g;
  Value* v = g.add_input(f32({256}), "x");
  for (int i = 0; i < 6; ++i) v = g.add_node("t_addc", {v}, addc(1))->out();
  g.set_outputs({v});
  MemoryPlan p = plan_memory(g, true);
  EXPECT_GE(p.inplace_count, 4);
  EXPECT_EQ(p.arena_bytes, 1024u);
  MemoryPlan q = plan_memory(g, false);
  EXPECT_EQ(q.inplace_count, 0);
  EXPECT_EQ(q.arena_bytes, 2048u);
}

// Random DAGs: values alive at the same time never share arena bytes.
TEST(Planner, NoOverlapOnRandomGraphs) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 30; ++trial) {
    Graph g;
    std::vector<Value*> vals{g.add_input(f32({64}), "x")};
    std::vector<Value*> big;
    for (int i = 0; i < 25; ++i) {
      Value* a = vals[rng() % vals.size()];
      Value* b = vals[rng() % vals.size()];
      Value* r = (rng() % 2) ? g.add_node("t_add", {a, b}, Attrs{})->out() : g.add_node("t_count", {a}, Attrs{})->out();
      vals.push_back(r);
    }
    g.set_outputs({vals.back(), vals[vals.size() / 2]});
    eliminate_dead_code(g);
    MemoryPlan p = plan_memory(g, trial % 2 == 0);
    // compute lifetimes directly
    const auto& nodes = g.nodes();
    std::vector<int> def(g.num_values(), -1), last(g.num_values(), -1);
    for (int t = 0; t < (int)nodes.size(); ++t) {
      for (Value* o : nodes[t]->outputs) def[o->id] = t;
      for (Value* in : nodes[t]->inputs) last[in->id] = t;
    }
    std::vector<Value*> arena;
    for (auto& n : nodes)
      for (Value* o : n->outputs)
        if (p.loc[o->id].kind == LocKind::Arena) arena.push_back(o);
    for (Value* a : arena)
      for (Value* b : arena) {
        if (a == b || p.loc[a->id].offset == p.loc[b->id].offset) continue;  // same slot: in-place chain
        bool time = def[a->id] <= std::max(last[b->id], def[b->id]) && def[b->id] <= std::max(last[a->id], def[a->id]);
        int64_t a0 = p.loc[a->id].offset, a1 = a0 + a->type.nbytes();
        int64_t b0 = p.loc[b->id].offset, b1 = b0 + b->type.nbytes();
        bool space = a0 < b1 && b0 < a1;
        EXPECT_FALSE(time && space) << "trial " << trial << ": %" << a->name << " and %" << b->name << " overlap";
      }
  }
}

// ---------------------------------------------------------------- executor
TEST(Executor, RunsAndReturnsFreshOutputs) {
  Graph g;
  Value* x = g.add_input(f32({3}), "x");
  Value* w = g.add_const(f32({3}), filled(3, 10.0f), "w");
  Value* a = g.add_node("t_addc", {x}, addc(1))->out();
  Value* b = g.add_node("t_add", {a, w}, Attrs{})->out();
  Value* c = g.add_node("t_addc", {b}, addc(0.5))->out();
  g.set_outputs({c, a});
  run_pipeline(g, PipelineOptions{});
  auto prog = compile_program(g);
  Executor ex(prog);
  float in[3] = {1, 2, 3};
  auto o1 = ex.run({in});
  ASSERT_EQ(o1.size(), 2u);
  auto* y = static_cast<float*>(o1[0].data);
  EXPECT_FLOAT_EQ(y[0], 12.5f);
  EXPECT_FLOAT_EQ(y[2], 14.5f);
  EXPECT_FLOAT_EQ(static_cast<float*>(o1[1].data)[1], 3.0f);
  float in2[3] = {0, 0, 0};
  auto o2 = ex.run({in2});
  EXPECT_NE(o1[0].data, o2[0].data);   // a second call never overwrites the first results
  EXPECT_FLOAT_EQ(y[0], 12.5f);
  EXPECT_FLOAT_EQ(static_cast<float*>(o2[0].data)[0], 11.5f);
  EXPECT_THROW(ex.run({}), Error);
}

// An input the graph writes (a KV cache's slice_scatter update): computed in the input's own bytes
// when the update is the last reader of its old value; otherwise a fresh output for the caller to
// copy back, never an overwrite of a value something still reads.
TEST(Executor, InputWritesAreMadeInPlaceWhenNothingReadsTheOldValueLater) {
  Attrs at;
  at.set("dim", int64_t{1});
  at.set("start", int64_t{1});
  at.set("end", int64_t{2});
  at.set("step", int64_t{1});
  for (bool read_after : {false, true}) {
    Graph g;
    Value* cache = g.add_input(f32({2, 3}), "cache");
    Value* k = g.add_input(f32({2, 1}), "k");
    Value* upd = g.add_node("slice_scatter", {cache, k}, at, "update")->out();
    Value* y = g.add_node("t_addc", {upd}, addc(1))->out();  // reads the new value: fine
    std::vector<Value*> outs{y, upd};
    if (read_after) outs.push_back(g.add_node("t_addc", {cache}, addc(0))->out());  // the old value, later
    g.set_outputs(outs);
    g.set_input_writes({Graph::InputWrite{0, 1}});
    g.verify();
    MemoryPlan plan = plan_memory(g);
    EXPECT_EQ(plan.output_in_input[1], read_after ? -1 : 0);
    auto prog = compile_program(g);
    Executor ex(prog);
    float c[6] = {0, 1, 2, 3, 4, 5}, kv[2] = {-1, -2};
    auto o = ex.run({c, kv});
    const float want[6] = {0, -1, 2, 3, -2, 5};
    const float* got = static_cast<const float*>(o[1].data);
    for (int i = 0; i < 6; ++i) {
      EXPECT_FLOAT_EQ(got[i], want[i]);
      EXPECT_FLOAT_EQ(static_cast<const float*>(o[0].data)[i], want[i] + 1);
      if (read_after) EXPECT_FLOAT_EQ(static_cast<const float*>(o[2].data)[i], float(i));  // the old cache
    }
    EXPECT_EQ(got == c, !read_after);  // in place: the output is the caller's cache
  }
  // the written value must have the input's type
  Graph bad;
  bad.add_input(f32({4}), "x");
  Value* z = bad.add_input(f32({2}), "z");
  bad.set_outputs({bad.add_node("t_count", {z}, Attrs{})->out()});
  bad.set_input_writes({Graph::InputWrite{0, 0}});
  EXPECT_THROW(bad.verify(), Error);
  bad.set_input_writes({Graph::InputWrite{1, 1}});  // no output 1
  EXPECT_THROW(bad.verify(), Error);
}

// Programs of one graph at several sizes lease their arena from one ArenaSource: the memory held
// is one buffer of the largest size seen, and alternating sizes never mixes up the data.
TEST(Executor, ProgramsShareOneArenaOfTheLargestSize) {
  auto program = [](int64_t n) {
    Graph g;
    Value* x = g.add_input(f32({n}), "x");
    Value* a = g.add_node("t_addc", {x}, addc(1))->out();
    Value* b = g.add_node("t_addc", {a}, addc(2))->out();
    g.set_outputs({g.add_node("t_addc", {b}, addc(4))->out()});
    run_pipeline(g, PipelineOptions{.disabled = {"fuse_elementwise"}});
    return compile_program(g, CompileOptions{.allow_inplace = false});
  };
  auto small = program(3), large = program(1000);
  ASSERT_GT(large->arena_bytes, small->arena_bytes);
  auto source = std::make_shared<ArenaSource>();
  Executor es(small, source), el(large, source);
  EXPECT_EQ(source->bytes_held(), 0u);  // nothing is allocated before a call
  std::vector<float> xs(3, 1.0f), xl(1000, 2.0f);
  for (int round = 0; round < 3; ++round) {
    auto os = es.run({xs.data()});
    EXPECT_FLOAT_EQ(static_cast<float*>(os[0].data)[2], 8.0f);
    auto ol = el.run({xl.data()});
    EXPECT_FLOAT_EQ(static_cast<float*>(ol[0].data)[999], 9.0f);
  }
  const size_t need = (large->arena_bytes + 63) / 64 * 64 + large->scratch_bytes;
  EXPECT_EQ(source->bytes_held(), need);  // the small size's buffer was outgrown and freed
}

TEST(Executor, KernelErrorsNameTheNode) {
  Graph g;
  Value* x = g.add_input(f32({3}), "x");
  g.set_outputs({g.add_node("t_fail", {x}, Attrs{}, "embedding_3", "m.py:9 in forward: e = self.emb(ids)")->out()});
  Executor ex(compile_program(g));
  float in[3] = {0, 0, 0};
  EXPECT_TRUE(test::throws_with([&] { ex.run({in}); }, {"index 7 out of range", "embedding_3", "m.py:9"}));
}

TEST(Executor, ViewsAliasWithoutCopies) {
  Graph g;
  Value* x = g.add_input(f32({2, 3}), "x");
  Attrs r;
  r.set("shape", std::vector<int64_t>{6});
  Value* a = g.add_node("t_addc", {x}, addc(1))->out();
  Value* v = g.add_node("reshape", {a}, r)->out();
  g.set_outputs({v});
  run_pipeline(g, PipelineOptions{});
  auto prog = compile_program(g);
  EXPECT_EQ(prog->arena_bytes, 0u);  // the only intermediate is the output itself
  Executor ex(prog);
  float in[6] = {0, 1, 2, 3, 4, 5};
  auto o = ex.run({in});
  EXPECT_EQ(o[0].type.shape(), Shape({6}));
  EXPECT_FLOAT_EQ(static_cast<float*>(o[0].data)[5], 6.0f);
}

TEST(Executor, ProfilingRecordsEachInstruction) {
  Graph g;
  Value* v = g.add_input(f32({8}), "x");
  for (int i = 0; i < 3; ++i) v = g.add_node("t_count", {v}, Attrs{})->out();
  g.set_outputs({v});
  Executor ex(compile_program(g));
  ex.set_profiling(true);
  float in[8] = {};
  g_runs_of_count = 0;
  ex.run({in});
  EXPECT_EQ(g_runs_of_count, 3);
  EXPECT_EQ(ex.last_times_ns().size(), 3u);
}

}  // namespace
}  // namespace ag

namespace ag {
namespace {
TEST(Executor, ConstantsOutliveTheGraph) {
  std::shared_ptr<Program> prog;
  {
    Graph g;
    Value* x = g.add_input(f32({2}), "x");
    Value* w = g.add_const(f32({2}), filled(2, 5.0f), "w");
    g.set_outputs({g.add_node("t_add", {x, w}, Attrs{})->out()});
    prog = compile_program(g);
  }  // graph and its values are gone; the program must still own the constant
  Executor ex(prog);
  float in[2] = {1, 2};
  auto o = ex.run({in});
  EXPECT_FLOAT_EQ(static_cast<float*>(o[0].data)[1], 7.0f);
  EXPECT_EQ(prog->constants.size(), 1u);
}
}  // namespace
}  // namespace ag
