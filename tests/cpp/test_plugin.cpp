// Op plugins (kernels/plugin.h, include/airgraph/op_plugin.h): the example plugin
// (examples/custom_op/scaled_gelu_plugin.cpp, built in versions 1.0 and 2.0 by CMakeLists.txt)
// loads into the registry, its op builds, passes, compiles and runs like a built-in one and
// equals its formula; its inference errors carry the node's context; a second version is
// refused; a saved file records the plugin, and airgraph-run refuses it without the plugin or
// with the other version, naming the op, and runs it with --plugin.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "airgraph/runner.h"
#include "check_op.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/serialize.h"
#include "kernels/plugin.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

namespace ag {
namespace {

float reference(float x, float scale) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x))) * scale;
}

const OpDef* load_example() {
  const PluginInfo& p = load_plugin(AIRGRAPH_EXAMPLE_PLUGIN);
  EXPECT_EQ(p.name, "mylib");
  EXPECT_EQ(p.version, "1.0");
  return find_op("mylib::scaled_gelu");
}

std::unique_ptr<Graph> example_graph(int64_t n) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(TensorType(DType::f32, {n}), "x");
  Value* y = g->add_node("mylib::scaled_gelu", {x}, test::attrs({{"scale", 0.5}}), "scaled_gelu", "model.py:3")->out();
  g->set_outputs({y});
  return g;
}

void expect_example_result(const float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], reference(x[i], 0.5f), 1e-6f) << "element " << i;
}

TEST(Plugin, LoadsIntoTheRegistryAndRunsLikeABuiltInOp) {
  const OpDef* d = load_example();
  ASSERT_NE(d, nullptr);
  EXPECT_STREQ(d->plugin, "mylib");
  EXPECT_STREQ(d->plugin_version, "1.0");
  EXPECT_TRUE(d->has(kElementwise));
  EXPECT_EQ(&load_plugin(AIRGRAPH_EXAMPLE_PLUGIN), &load_plugin(AIRGRAPH_EXAMPLE_PLUGIN));  // loading again: a no-op

  const int64_t n = 1000;
  auto g = example_graph(n);
  run_pipeline(*g, PipelineOptions{});
  auto prog = compile_program(*g);
  Executor ex(prog);
  std::vector<float> x = test::randn(n, 7);
  auto out = ex.run({x.data()});
  expect_example_result(x.data(), static_cast<const float*>(out[0].data), n);
}

TEST(Plugin, InferenceErrorsNameTheNodeAndThePlugin) {
  load_example();
  Graph g;
  Value* x = g.add_input(TensorType(DType::i32, {4}), "x");
  try {
    g.add_node("mylib::scaled_gelu", {x}, test::attrs({{"scale", 0.5}}), "scaled_gelu", "model.py:3");
    ADD_FAILURE() << "an int32 input was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("plugin mylib 1.0"), std::string::npos) << m;
    EXPECT_NE(m.find("takes float32"), std::string::npos) << m;
    EXPECT_NE(m.find("scaled_gelu"), std::string::npos) << m;
    EXPECT_NE(m.find("model.py:3"), std::string::npos) << m;
  }
  Value* f = g.add_input(TensorType(DType::f32, {4}), "f");
  EXPECT_THROW(g.add_node("mylib::scaled_gelu", {f}, Attrs{}, "no_scale"), Error);  // the plugin's own check
}

TEST(Plugin, AnotherVersionOfALoadedPluginIsRefused) {
  load_example();
  try {
    load_plugin(AIRGRAPH_EXAMPLE_PLUGIN_V2);
    ADD_FAILURE() << "version 2.0 loaded beside 1.0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("version 1.0 is already loaded"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_plugin("/nonexistent/libnothing.so"), Error);
}

TEST(Plugin, AFileRecordsThePluginAndTheRunnerNeedsIt) {
  load_example();
  const std::string path = ::testing::TempDir() + "plugin_model_" + std::to_string(::getpid()) + ".agraph";
  {
    std::ofstream f(path, std::ios::binary);
    SaveOptions opt;
    opt.producer = "test_plugin";
    f << save_graph(*example_graph(6), opt);
  }
  // this process has the plugin: the file loads
  LoadedGraph l = load_graph_file(path, nullptr);
  EXPECT_EQ(l.graph->nodes().size(), 1u);

  const std::string exe = AIRGRAPH_RUN_EXE;
  std::string out;
  EXPECT_EQ(test::shell(exe + " " + path + " --info", &out), 1) << out;
  EXPECT_NE(out.find("op 'mylib::scaled_gelu' of plugin 'mylib' version 1.0, which is not loaded"), std::string::npos)
      << out;
  EXPECT_EQ(test::shell(exe + " " + path + " --info --plugin " + AIRGRAPH_EXAMPLE_PLUGIN_V2, &out), 1) << out;
  EXPECT_NE(out.find("plugin 'mylib' version 2.0"), std::string::npos) << out;
  EXPECT_EQ(test::shell(exe + " " + path + " --info --plugin " + AIRGRAPH_EXAMPLE_PLUGIN, &out), 0) << out;
  EXPECT_NE(out.find("airgraph-run: plugin mylib 1.0"), std::string::npos) << out;

  // the public runner API, in this process (libairgraph_runtime's own registry)
  EXPECT_THROW(airgraph::Model::load(path), airgraph::Error);
  EXPECT_EQ(airgraph::load_plugin(AIRGRAPH_EXAMPLE_PLUGIN), "mylib 1.0");
  airgraph::Model m = airgraph::Model::load(path);
  std::vector<float> x = test::randn(6, 3);
  auto y = m.run({airgraph::TensorRef{x.data(), airgraph::DType::float32, {6}}});
  expect_example_result(x.data(), y[0].data_as<float>(), 6);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ag

// ---- the checks a plugin's op runs under (tests/cpp/plugins/checked_plugin.cpp) ---------------
namespace ag {
namespace {

using test::error_of;  // (check_op.h)

TEST(PluginChecks, InferenceResultsAreChecked) {
  load_plugin(AIRGRAPH_CHECKED_PLUGIN);
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {2, 3}), "x");
  const std::string e = error_of([&] { g.add_node("checked::wrong_shape", {x}, Attrs{}, "ws", "model.py:9"); });
  EXPECT_NE(e.find("broadcast shape [2, 3], inference gave float32[2, 4]"), std::string::npos) << e;
  EXPECT_NE(e.find("model.py:9"), std::string::npos) << e;
}

TEST(PluginChecks, KernelErrorsNameTheNode) {
  load_plugin(AIRGRAPH_CHECKED_PLUGIN);
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  g.set_outputs({g.add_node("checked::fails", {x}, Attrs{}, "check_me", "model.py:11")->out()});
  auto prog = compile_program(g);
  Executor ex(prog);
  std::vector<float> ok{1, 2, 3, 4}, bad{1, 2, -3, 4};
  EXPECT_EQ(static_cast<const float*>(ex.run({ok.data()})[0].data)[3], 4.f);
  const std::string e = error_of([&] { ex.run({bad.data()}); });
  EXPECT_NE(e.find("checked::fails (plugin checked 0.1): negative input -3 at element 2"), std::string::npos) << e;
  EXPECT_NE(e.find("check_me"), std::string::npos) << e;
  EXPECT_NE(e.find("model.py:11"), std::string::npos) << e;
}

// A kernel that does not declare AG_OP_THREAD_SAFE runs one call at a time, whatever the callers;
// the example's (declared safe) runs on 4 threads at once and gives the same results.
TEST(PluginChecks, ThreadSafetyIsWhatThePluginStates) {
  load_plugin(AIRGRAPH_CHECKED_PLUGIN);
  load_example();
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {64}), "x");
  Value* u = g.add_node("checked::unsafe", {x}, Attrs{}, "unsafe")->out();
  Value* y = g.add_node("mylib::scaled_gelu", {u}, test::attrs({{"scale", 0.5}}), "scaled_gelu")->out();
  g.set_outputs({y});
  auto prog = compile_program(g);
  std::vector<float> in = test::randn(64, 5);
  for (float& v : in) v = std::fabs(v);
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      Executor ex(prog);
      for (int i = 0; i < 5; ++i) {
        auto out = ex.run({in.data()});
        const float* o = static_cast<const float*>(out[0].data);
        for (int k = 0; k < 64; ++k) wrong += std::fabs(o[k] - reference(in[k], 0.5f)) > 1e-6f;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
  void* h = ::dlopen(AIRGRAPH_CHECKED_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto max_inside = reinterpret_cast<int (*)()>(::dlsym(h, "checked_max_inside"));
  ASSERT_NE(max_inside, nullptr);
  EXPECT_EQ(max_inside(), 1);
  ::dlclose(h);
}

TEST(PluginChecks, AMalformedLibraryIsRefused) {
  // (an executable: dlopen refuses it, or it has no entry point; either way an error naming the file)
  const std::string e = error_of([] { load_plugin(AIRGRAPH_RUN_EXE); });
  EXPECT_NE(e.find("airgraph plugin: "), std::string::npos) << e;
  EXPECT_NE(e.find("airgraph-run"), std::string::npos) << e;
}

}  // namespace
}  // namespace ag

// ---- a plugin's epilogue op after a linear layer ------------------------------------------------
namespace ag {
namespace {

std::shared_ptr<Storage> floats(const std::vector<float>& v) {
  auto s = Storage::allocate(v.size() * 4);
  std::memcpy(s->data, v.data(), v.size() * 4);
  return s;
}

// linear(x, w, b) -> mylib::scaled_gelu: one node after the passes (where the fused interpreter runs
// row functions, AG_FE_RUNS_ROW_FNS) or two, and the same result as the formula either way.
TEST(Plugin, AnEpilogueOpFusesIntoTheLinearBeforeIt) {
  const OpDef* d = load_example();
  const int64_t M = 5, K = 16, N = 24;
  std::vector<float> w = test::randn(N * K, 2), b = test::randn(N, 3), x = test::randn(M * K, 4);
  Graph g;
  Value* xv = g.add_input(TensorType(DType::f32, {M, K}), "x");
  Value* wv = g.add_const(TensorType(DType::f32, {N, K}), floats(w), "w");
  Value* bv = g.add_const(TensorType(DType::f32, {N}), floats(b), "b");
  Value* h = g.add_node("linear", {xv, wv, bv}, Attrs{}, "fc")->out();
  g.set_outputs({g.add_node("mylib::scaled_gelu", {h}, test::attrs({{"scale", 0.5}}), "scaled_gelu")->out()});
  run_pipeline(g, PipelineOptions{});
  const bool fused = g.nodes().size() == 1;
  EXPECT_EQ(fused, d->epilogue) << g.str();
  if (fused) EXPECT_NE(g.str().find("fused=\"scaled_gelu\""), std::string::npos) << g.str();
  else std::printf("(this build's fused interpreter does not run row functions: the plugin op stays a node)\n");
  auto prog = compile_program(g);
  Executor ex(prog);
  auto out = ex.run({x.data()});
  const float* y = static_cast<const float*>(out[0].data);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = b[j];
      for (int64_t k = 0; k < K; ++k) acc += x[i * K + k] * w[j * K + k];
      ASSERT_NEAR(y[i * N + j], reference(acc, 0.5f), 1e-4f) << i << "," << j;
    }
}

}  // namespace
}  // namespace ag
