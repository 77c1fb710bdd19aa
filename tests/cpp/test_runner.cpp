// The C++ runner: a graph built here, saved as an airgraph file and run through
// the public API (include/airgraph/runner.h, libairgraph_runtime.so) at several
// sizes, with an input the graph writes (in place or copied back); input checks
// that name the input and what was expected; symbol binding; DLPack; concurrent
// callers; the strict .npy reader (every truncation and random byte flips end in
// airgraph::Error); and the airgraph-run CLI end to end on files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "airgraph/runner.h"
#include "ir/graph.h"
#include "ir/serialize.h"
#include "runner/npy.h"
#include "sample_graphs.h"
#include "test_util.h"

namespace {

using ag::test::attrs;
using ag::test::shell;

std::unique_ptr<ag::Graph> runner_graph(bool reader_after) { return ag::test::symbolic_sample_graph(reader_after); }

// The process's own folder for the files the runner reads and writes, removed when the process ends.
std::string& runner_dir() {
  static std::string d;
  return d;
}

std::string temp_path(const std::string& name) {
  static const bool made = [] {
    std::string d = testing::TempDir() + "airgraph_runner_XXXXXX";
    EXPECT_NE(mkdtemp(d.data()), nullptr);
    runner_dir() = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(runner_dir(), ec);
    });
    return true;
  }();
  (void)made;
  return runner_dir() + "/" + name;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string saved_model(bool reader_after) {
  std::string path = temp_path(reader_after ? "reader.airgraph" : "model.airgraph");
  write_file(path, ag::save_graph(*runner_graph(reader_after), ag::SaveOptions{true, "test_runner", ""}));
  return path;
}

const float kW[4] = {0.5f, 1.f, 1.5f, 2.f};

std::vector<float> x_data(int64_t s0, float shift = 0) {
  std::vector<float> x(s0 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = ((i % 3 == 0) ? -1.f * i : 0.25f * i) + shift;
  return x;
}

// Runs the model at s0 and checks every output and the written state.
void check_run(airgraph::Model& m, int64_t s0, bool reader_after, float shift = 0) {
  std::vector<float> x = x_data(s0, shift), state{1, 2, 3, 4};
  const std::vector<float> state0 = state;
  auto outs = m.run({{x.data(), airgraph::DType::float32, {s0, 4}}, {state.data(), airgraph::DType::float32, {4}}});
  ASSERT_EQ(outs.size(), reader_after ? 3u : 2u);
  ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{2 * s0, 2}));
  ASSERT_EQ(outs[0].dtype(), airgraph::DType::float32);
  for (int64_t i = 0; i < s0 * 4; ++i) EXPECT_EQ(outs[0].data_as<float>()[i], std::max(0.f, x[i] * kW[i % 4])) << i;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(state[i], state0[i] + 2 * kW[i]) << "the written input, element " << i;
    EXPECT_EQ(outs[1].data_as<float>()[i], state0[i] + 2 * kW[i]);
    if (reader_after) {
      EXPECT_EQ(outs[2].data_as<float>()[i], state0[i] * state0[i]);
    }
  }
}

TEST(Runner, RunsASymbolicModelAtSeveralSizesAndWritesItsInput) {
  for (bool reader_after : {false, true}) {
    airgraph::Model m = airgraph::Model::load(saved_model(reader_after));
    EXPECT_EQ(m.producer(), "test_runner");
    ASSERT_EQ(m.symbols(), std::vector<std::string>{"s0"});
    ASSERT_EQ(m.inputs().size(), 2u);
    EXPECT_EQ(m.inputs()[0].str(), "x: float32[s0, 4]");
    EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{-1, 4}));
    EXPECT_EQ(m.inputs()[1].written_by_output, 1);
    EXPECT_EQ(m.outputs()[0].str(), "y: float32[2*s0, 2]");
    for (int64_t s0 : {1, 3, 5, 3}) check_run(m, s0, reader_after);
    EXPECT_EQ(m.num_compiled(), 3u);
    // the update is computed in the state's bytes when nothing reads the old state after it
    std::vector<float> x = x_data(2), state{1, 2, 3, 4};
    auto outs = m.run({{x.data(), airgraph::DType::float32, {2, 4}}, {state.data(), airgraph::DType::float32, {4}}});
    if (!reader_after) {
      EXPECT_EQ(outs[1].written_input(), 1);
      EXPECT_EQ(outs[1].data(), state.data());
    } else {
      EXPECT_EQ(outs[1].written_input(), -1);
    }
  }
}

TEST(Runner, LoadsFromBytesAndRunsAStaticGraph) {
  std::string bytes = read_all(saved_model(false));
  airgraph::Model m = airgraph::Model::load_bytes(bytes.data(), bytes.size());
  check_run(m, 2, false);

  ag::Graph g;  // static: no symbols
  ag::Value* a = g.add_input(ag::TensorType(ag::DType::i64, {2, 3}), "a");
  g.set_outputs({g.add_node("neg", {a}, ag::Attrs{}, "n")->out()});
  std::string sb = ag::save_graph(g, ag::SaveOptions{});
  airgraph::Model s = airgraph::Model::load_bytes(sb.data(), sb.size());
  EXPECT_TRUE(s.symbols().empty());
  EXPECT_EQ(s.inputs()[0].str(), "a: int64[2, 3]");
  std::vector<int64_t> av{1, -2, 3, -4, 5, -6};
  auto outs = s.run({{av.data(), airgraph::DType::int64, {2, 3}}});
  ASSERT_EQ(outs[0].numel(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(outs[0].data_as<int64_t>()[i], -av[i]);
}

// The message of the airgraph::Error that f throws.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const airgraph::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT airgraph::Error: ") + e.what();
  }
  return "no error";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(Runner, BadInputsGiveErrorsThatNameTheInputAndTheExpectedAndActualValues) {
  airgraph::Model m = airgraph::Model::load(saved_model(false));
  std::vector<float> x(12), state(4);
  std::vector<int32_t> xi(12);
  using airgraph::DType;
  auto run = [&](std::vector<airgraph::TensorRef> ins) { return [&m, ins] { m.run(ins); }; };
  std::string e = error_of(run({{x.data(), DType::float32, {3, 4}}}));
  EXPECT_HAS(e, "takes 2 inputs, got 1");
  e = error_of(run({{xi.data(), DType::int32, {3, 4}}, {state.data(), DType::float32, {4}}}));
  EXPECT_HAS(e, "input 'x' has dtype int32, expected float32");
  e = error_of(run({{x.data(), DType::float32, {12}}, {state.data(), DType::float32, {4}}}));
  EXPECT_HAS(e, "input 'x' has rank 1");
  EXPECT_HAS(e, "expected rank 2 (x: float32[s0, 4])");
  e = error_of(run({{x.data(), DType::float32, {2, 6}}, {state.data(), DType::float32, {4}}}));
  EXPECT_HAS(e, "input 'x' dim 1: expected 4, got 6");
  e = error_of(run({{x.data(), DType::float32, {3, 4}}, {state.data(), DType::float32, {3}}}));
  EXPECT_HAS(e, "input 'state' dim 0: expected 4, got 3");
  e = error_of(run({{nullptr, DType::float32, {3, 4}}, {state.data(), DType::float32, {4}}}));
  EXPECT_HAS(e, "input 'x' has no data");
  EXPECT_HAS(error_of([] { airgraph::Model::load("/nonexistent/model.airgraph"); }), "/nonexistent/model.airgraph");
  std::string junk(200, 'j');
  EXPECT_HAS(error_of([&] { airgraph::Model::load_bytes(junk.data(), junk.size()); }), "not an airgraph file");
  EXPECT_HAS(error_of([] { airgraph::dtype_from_name("complex64"); }), "unknown dtype 'complex64'");
}

TEST(Runner, SymbolsAreBoundFromBareInputDimsAndOtherDimsAreChecked) {
  using namespace ag;
  Graph g;
  g.add_symbol("n");
  int n = g.add_expr(SizeExpr{{kSym, 0}, "n"});
  int n2 = g.add_expr(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*n"});
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {6}), "b");
  Value* c = g.add_input(TensorType(DType::f32, {3}), "c");
  g.set_dim_exprs(a, {n});
  g.set_dim_exprs(b, {n2});
  g.set_dim_exprs(c, {n});
  Node* r = g.add_node("relu", {b}, Attrs{}, "r");
  g.set_dim_exprs(r->out(), {n2});
  g.set_outputs({r->out()});
  std::string bytes = save_graph(g, SaveOptions{});
  airgraph::Model m = airgraph::Model::load_bytes(bytes.data(), bytes.size());
  std::vector<float> buf(16, -1.f);
  using airgraph::DType;
  auto run = [&](int64_t na, int64_t nb, int64_t nc) {
    return m.run({{buf.data(), DType::float32, {na}}, {buf.data(), DType::float32, {nb}},
                  {buf.data(), DType::float32, {nc}}});
  };
  EXPECT_EQ(run(4, 8, 4)[0].shape(), std::vector<int64_t>{8});
  EXPECT_HAS(error_of([&] { run(3, 5, 3); }), "input 'b' dim 0: expected 2*n = 6 at n=3, got 5");
  EXPECT_HAS(error_of([&] { run(3, 6, 4); }), "input 'c' dim 0 is n = 4, but input 'a' dim 0 gave n = 3");

  // a symbol that no input dim gives alone is solved from a dim a * n + b (torch.export's derived
  // Dims); a dim that is no such size is refused; one that is not affine in n cannot bind it
  auto only = [&](SizeExpr e, int64_t example) {
    Graph h;
    h.add_symbol("n");
    h.add_expr(SizeExpr{{kSym, 0}, "n"});
    int he = h.add_expr(std::move(e));
    Value* hb = h.add_input(TensorType(ag::DType::f32, {example}), "b");
    h.set_dim_exprs(hb, {he});
    Node* hr = h.add_node("relu", {hb}, Attrs{}, "r");
    h.set_dim_exprs(hr->out(), {he});
    h.set_outputs({hr->out()});
    return save_graph(h, SaveOptions{});
  };
  std::string twice = only(SizeExpr{{kSym, 0, kConst, 2, kMul}, "2*n"}, 6);
  airgraph::Model t = airgraph::Model::load_bytes(twice.data(), twice.size());
  EXPECT_EQ(t.run({{buf.data(), DType::float32, {10}}})[0].shape(), std::vector<int64_t>{10});
  EXPECT_HAS(error_of([&] { t.run({{buf.data(), DType::float32, {7}}}); }),
             "input 'b' dim 0 is 7, which is not 2*n for any size n");
  std::string shifted = only(SizeExpr{{kSym, 0, kConst, 1, kAdd}, "n + 1"}, 4);
  airgraph::Model u = airgraph::Model::load_bytes(shifted.data(), shifted.size());
  EXPECT_EQ(u.run({{buf.data(), DType::float32, {9}}})[0].shape(), std::vector<int64_t>{9});
  std::string halved = only(SizeExpr{{kSym, 0, kConst, 2, kFloorDiv}, "n//2"}, 3);
  EXPECT_HAS(error_of([&] { airgraph::Model::load_bytes(halved.data(), halved.size()); }),
             "symbol 'n' is not the size of any input dim, nor a * n + b of one");
}

TEST(Runner, DLPackInputsAndOutputs) {
  airgraph::Model m = airgraph::Model::load(saved_model(false));
  std::vector<float> x = x_data(3), state{1, 2, 3, 4};
  int64_t xs[2] = {3, 4}, ss[1] = {4};
  DLManagedTensor mx{}, ms{};
  mx.dl_tensor = DLTensor{x.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, xs, nullptr, 0};
  ms.dl_tensor = DLTensor{state.data(), DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, ss, nullptr, 0};
  auto outs = m.run(std::vector<DLManagedTensor*>{&mx, &ms});
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(outs[0].data_as<float>()[i], std::max(0.f, x[i] * kW[i % 4]));
  EXPECT_EQ(state[3], 4 + 2 * kW[3]);
  DLManagedTensor* out = outs[0].to_dlpack();
  EXPECT_EQ(out->dl_tensor.ndim, 2);
  EXPECT_EQ(out->dl_tensor.shape[0], 6);
  EXPECT_EQ(out->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(out->dl_tensor.data, outs[0].data());
  out->deleter(out);

  int64_t strides[2] = {1, 3};  // Fortran order
  mx.dl_tensor.strides = strides;
  EXPECT_HAS(error_of([&] { m.run(std::vector<DLManagedTensor*>{&mx, &ms}); }), "('x') is not contiguous");
  mx.dl_tensor.strides = nullptr;
  mx.dl_tensor.device.device_type = kDLCUDA;
  EXPECT_HAS(error_of([&] { m.run(std::vector<DLManagedTensor*>{&mx, &ms}); }), "('x') is on device type 2");
  mx.dl_tensor.device.device_type = kDLCPU;
  mx.dl_tensor.dtype = DLDataType{kDLComplex, 64, 1};
  EXPECT_HAS(error_of([&] { m.run(std::vector<DLManagedTensor*>{&mx, &ms}); }), "which airgraph does not have");
}

TEST(Runner, ConcurrentCallersGetTheSameResults) {
  airgraph::Model m = airgraph::Model::load(saved_model(true));
  std::vector<std::thread> threads;
  std::array<int, 4> failures{};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      airgraph::Model mine = m;  // a handle shares the compiled programs
      for (int it = 0; it < 40; ++it) {
        int64_t s0 = 1 + (it + t) % 4;
        std::vector<float> x = x_data(s0, static_cast<float>(t)), state{1, 2, 3, 4};
        auto outs = mine.run({{x.data(), airgraph::DType::float32, {s0, 4}},
                              {state.data(), airgraph::DType::float32, {4}}});
        for (int64_t i = 0; i < s0 * 4; ++i)
          failures[t] += outs[0].data_as<float>()[i] != std::max(0.f, x[i] * kW[i % 4]);
        for (int i = 0; i < 4; ++i) failures[t] += state[i] != (i + 1) + 2 * kW[i];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(m.num_compiled(), 4u);
}

// ---- .npy ---------------------------------------------------------------------------------

TEST(Npy, WritesWhatNumpyWritesAndReadsItBack) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  std::string b = airgraph::npy::serialize(airgraph::DType::float32, {2, 3}, v, sizeof v);
  // np.save of np.arange(1, 7, dtype='<f4').reshape(2, 3): the same 128 bytes
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(b.size(), 128u + sizeof v);
  EXPECT_EQ(b.substr(0, 10), std::string("\x93NUMPY\x01\x00\x76\x00", 10));
  EXPECT_EQ(b.substr(10, header.size()), header);
  EXPECT_EQ(b[127], '\n');
  using airgraph::DType;
  for (DType t : {DType::float32, DType::float64, DType::float16, DType::bfloat16, DType::int64, DType::int32,
                  DType::int16, DType::int8, DType::uint8, DType::bool_})
    for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {5}, {2, 0, 3}, {1, 2, 3}}) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<unsigned char> data(n * airgraph::dtype_size(t));
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(t == DType::bool_ ? i % 2 : i * 7);
      std::string f = airgraph::npy::serialize(t, shape, data.data(), data.size());
      auto a = airgraph::npy::parse(f.data(), f.size(), "t.npy");
      EXPECT_EQ(a.dtype, t);
      EXPECT_EQ(a.shape, shape);
      ASSERT_EQ(a.nbytes, data.size());
      if (!data.empty())  // (an empty vector's data() may be null: memcmp must not see it)
        EXPECT_EQ(std::memcmp(a.data.get(), data.data(), data.size()), 0);
    }
  // a version 2.0 header and hand-written spacing/order/quotes are read too
  std::string h2 = "{\"shape\":(3,),'fortran_order':False,   'descr':'|u1'}\n";
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + std::string(1, char(h2.size())) + std::string(3, '\0') + h2 +
                   "abc";
  auto a = airgraph::npy::parse(v2.data(), v2.size(), "v2.npy");
  EXPECT_EQ(a.dtype, DType::uint8);
  EXPECT_EQ(a.shape, std::vector<int64_t>{3});
}

std::string npy_with_header(const std::string& dict, const std::string& data) {
  std::string h = dict + "\n";
  return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h + data;
}

TEST(Npy, MalformedFilesGiveClearErrors) {
  auto err = [](const std::string& b) {
    return error_of([&] { airgraph::npy::parse(b.data(), b.size(), "bad.npy"); });
  };
  const std::string d8(8, '\0');
  EXPECT_EQ(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", d8)), "no error");
  EXPECT_HAS(err(npy_with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", d8)), "big-endian");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", d8)), "Fortran-order");
  EXPECT_HAS(err(npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", d8)),
             "dtype '<c8' is not supported");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", d8)),
             "needs 12 data bytes but the file has 8 (truncated)");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", d8)), "trailing bytes");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False}", d8)), "lacks 'shape'");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", d8)),
             "appears twice");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", d8)),
             "unexpected header key 'x'");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", d8)),
             "a non-negative integer");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", d8)), "1-tuple");
  EXPECT_HAS(err(npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4)}", d8)),
             "overflows");
  EXPECT_HAS(err(std::string("\x93NUMPY\x03\x00", 8) + std::string(8, ' ')), "format version 3.0");
  EXPECT_HAS(err("PK\x03\x04 a zip file"), "not a .npy file");
}

TEST(NpyFuzz, TruncationsAndByteFlipsGiveErrorsNeverCrashes) {
  std::vector<float> v(10);
  for (int i = 0; i < 10; ++i) v[i] = 0.5f * i;
  const std::string good = airgraph::npy::serialize(airgraph::DType::float32, {2, 5}, v.data(), 40);
  const size_t data_start = good.size() - 40;
  int cases = 0, parsed = 0;
  auto attempt = [&](const std::string& b) -> bool {
    ++cases;
    try {
      airgraph::npy::parse(b.data(), b.size(), "fuzz.npy");
      ++parsed;
      return true;
    } catch (const airgraph::Error&) {
      return false;
    }  // anything else escapes and fails the test
  };
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(attempt(good.substr(0, n))) << "truncated to " << n;
  std::mt19937 rng(11);
  for (int i = 0; i < 4000; ++i) {
    std::string b = good;
    int flips = 1 + static_cast<int>(rng() % 3);
    bool header_hit = false;
    for (int k = 0; k < flips; ++k) {
      size_t pos = rng() % b.size();
      char before = b[pos];
      b[pos] = (i % 2) ? static_cast<char>(rng()) : static_cast<char>(b[pos] ^ (1u << (rng() % 8)));
      header_hit |= pos < data_start && b[pos] != before;
    }
    bool ok = attempt(b);
    if (!header_hit) {
      EXPECT_TRUE(ok) << "a flip in the data only must still parse";
    }
  }
  // garbage after a valid magic and version
  for (int i = 0; i < 500; ++i) {
    std::string b = good.substr(0, 8) + std::string(rng() % 200, '\0');
    for (size_t k = 8; k < b.size(); ++k) b[k] = static_cast<char>(rng());
    attempt(b);
  }
  EXPECT_GE(cases, 4500);
  std::printf("npy fuzz: %d cases, %d parsed (flips in the data or harmless spacing), the rest refused\n", cases,
              parsed);
}

// ---- airgraph-run -------------------------------------------------------------------------

TEST(RunnerCli, RunsAModelOnNpyFilesAndWritesTheOutputs) {
  const std::string exe = AIRGRAPH_RUN_EXE;
  const std::string model = saved_model(true);
  const int64_t s0 = 3;
  std::vector<float> x = x_data(s0), state{1, 2, 3, 4};
  airgraph::npy::write(temp_path("x.npy"), airgraph::DType::float32, {s0, 4}, x.data(), x.size() * 4);
  airgraph::npy::write(temp_path("state.npy"), airgraph::DType::float32, {4}, state.data(), 16);
  std::string out;
  int rc = shell(exe + " " + model + " --input " + temp_path("x.npy") + " --input " + temp_path("state.npy") +
                     " --output " + temp_path("y.npy") + " --output - --output " + temp_path("sq.npy") + " --bench 5",
                 &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_HAS(out, "output 0  y: float32[6, 2]");
  EXPECT_HAS(out, "bench: 5 calls, median");
  std::vector<float> y(s0 * 4), sq(4);
  for (int64_t i = 0; i < s0 * 4; ++i) y[i] = std::max(0.f, x[i] * kW[i % 4]);
  for (int i = 0; i < 4; ++i) sq[i] = state[i] * state[i];
  EXPECT_EQ(read_all(temp_path("y.npy")), airgraph::npy::serialize(airgraph::DType::float32, {6, 2}, y.data(), 48));
  EXPECT_EQ(read_all(temp_path("sq.npy")), airgraph::npy::serialize(airgraph::DType::float32, {4}, sq.data(), 16));

  ASSERT_EQ(shell(exe + " " + model + " --info", &out), 0) << out;
  EXPECT_HAS(out, "symbols: s0");
  EXPECT_HAS(out, "0  x: float32[s0, 4]");
  EXPECT_HAS(out, "1  state: float32[4]  (written: holds output 1 after a call)");

  // errors: a non-zero status and the message
  std::vector<int32_t> xi(8);
  airgraph::npy::write(temp_path("xi.npy"), airgraph::DType::int32, {2, 4}, xi.data(), 32);
  EXPECT_EQ(shell(exe + " " + model + " --input " + temp_path("xi.npy") + " --input " + temp_path("state.npy"), &out), 1);
  EXPECT_HAS(out, "input 'x' has dtype int32, expected float32");
  EXPECT_EQ(shell(exe + " " + model + " --input " + temp_path("x.npy"), &out), 1);
  EXPECT_HAS(out, "takes 2 inputs, got 1 --input files");
  write_file(temp_path("trunc.npy"), read_all(temp_path("x.npy")).substr(0, 70));
  EXPECT_EQ(shell(exe + " " + model + " --input " + temp_path("trunc.npy") + " --input " + temp_path("state.npy"), &out), 1);
  EXPECT_HAS(out, "trunc.npy");
  EXPECT_EQ(shell(exe + " " + temp_path("x.npy") + " --info", &out), 1);
  EXPECT_HAS(out, "not an airgraph file");
  EXPECT_EQ(shell(exe + " " + model + " --bench zero", &out), 2);
  EXPECT_HAS(out, "--bench takes an integer");
}

}  // namespace
