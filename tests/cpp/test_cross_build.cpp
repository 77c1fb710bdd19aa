// Numerics that do not depend on the compiler: the op rows of kernels/elementwise_ops.h, as
// single-op kernels and as fused instructions, and fused chains of them, give the same bits in
// the release build (airgraph_tests: -O3, vectorized) and in the core compiled at -O1
// (airgraph_tests_o1: scalar loops, other inlining). A compiler that formed a fused multiply-add
// on its own in one build and not the other (the bug behind -ffp-contract=off), a vector path
// that rounds differently from the scalar one, or a row whose result depends on inlining shows
// here as the first differing element, with its case and inputs.
//
// Both binaries compile this file. The release one computes the table (CrossBuild.RowTable) and,
// when AIRGRAPH_ROW_TABLE_OUT names a file, writes it there; the -O1 one runs the release binary
// for its table (CrossBuild.O1BuildGivesTheReleaseBits) and compares it with its own, element by
// element (a NaN matches any NaN: elementwise_ops.h, "Rounding").
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"
#include "check_op.h"
#include "op_rows.h"
#include "test_util.h"

namespace ag {
namespace {

using test::attrs;

// One computed result: what it is, its dtype, its bytes, and what element i was computed from.
struct Entry {
  std::string key;
  DType dtype = DType::f32;
  std::string bytes;
  std::function<std::string(size_t)> inputs;
};

std::string bytes_of(const test::Tensor& t) {
  return std::string(static_cast<const char*>(t.data()), static_cast<size_t>(t.numel()) * dtype_size(t.type.dtype));
}

void add_run(std::vector<Entry>* table, const std::string& key, Graph& g, const std::vector<test::Tensor>& in,
             std::function<std::string(size_t)> inputs) {
  std::vector<const void*> ptrs;
  for (const test::Tensor& t : in) ptrs.push_back(t.data());
  test::Run r = test::compile_and_run(g, ptrs, nullptr);
  for (size_t o = 0; o < r.outs.size(); ++o)
    table->push_back({key + (r.outs.size() > 1 ? " output " + std::to_string(o) : ""), r.outs[o].type.dtype,
                      bytes_of(r.outs[o]), inputs});
}

// Row d over inputs of `types` holding `vals` (one-element inputs one value): its single-op
// kernel and its fused instruction, when the op takes the dtypes.
void add_row(std::vector<Entry>* table, const OpDef* d, const Attrs& a, const std::vector<TensorType>& types,
             const std::vector<std::vector<float>>& vals, const std::string& what) {
  Graph single, fused;
  if (!test::row_graphs(d, a, types, &single, &fused)) return;
  std::vector<test::Tensor> in;
  for (size_t j = 0; j < types.size(); ++j) in.push_back(test::from_floats(types[j], vals[j]));
  auto inputs = [vals](size_t i) {
    std::string s;
    for (size_t j = 0; j < vals.size(); ++j)
      s += (j ? ", x" : "x") + std::to_string(j) + " = " + std::to_string(vals[j][vals[j].size() == 1 ? 0 : i]);
    return s;
  };
  add_run(table, what + " single-op kernel", single, in, inputs);
  add_run(table, what + " fused instruction", fused, in, inputs);
}

Value* op(Graph& g, const std::string& name, std::vector<Value*> in, Attrs a = {}) {
  return g.add_node(name, in, std::move(a), "")->out();
}

// The table: every unary row on the values, every binary and compare row on every pair of them
// and with a one-element operand on either side, each setting, float32/bfloat16/float16/bool;
// and chains that fuse (the fused-kernel tests' opmath and scalar-operand chains) on random data
// with specials, fused and unfused.
std::vector<Entry> row_table() {
  std::vector<Entry> table;
  const std::vector<float> v = test::row_values();
  const int64_t m = static_cast<int64_t>(v.size()), n = m * m;
  std::vector<float> xs(n), ys(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = v[i / m], ys[i] = v[i % m];
  for (int arity : {1, 2})
    for (const OpDef* d : test::rows_of(arity))
      for (const Attrs& a : test::row_settings(d->name))
        for (DType t : {DType::f32, DType::bf16, DType::f16, DType::b8}) {
          const std::string what = std::string(d->name) + " {" + a.str() + "} " + dtype_name(t);
          if (arity == 1) {
            add_row(&table, d, a, {TensorType(t, {m})}, {v}, what);
            continue;
          }
          const TensorType tt(t, {n}), ts(t, {});
          add_row(&table, d, a, {tt, tt}, {xs, ys}, what);
          for (float s : {v[1], v[5], v[11], v[24]}) {  // -NaN, -0, -2.5, 3e38
            add_row(&table, d, a, {tt, ts}, {xs, {s}}, what + " scalar y " + std::to_string(s));
            add_row(&table, d, a, {ts, tt}, {{s}, ys}, what + " scalar x " + std::to_string(s));
          }
          if (t == DType::bf16 || t == DType::f16)
            add_row(&table, d, a, {tt, TensorType(DType::f32, {})}, {xs, {v[11]}}, what + " float32 scalar y");
        }
  // chains
  using Build = std::function<Value*(Graph&, const std::vector<Value*>&)>;
  auto chain = [&](const std::string& name, const std::vector<TensorType>& types, const Build& build) {
    std::vector<test::Tensor> in;
    for (size_t j = 0; j < types.size(); ++j)
      in.push_back(test::random_tensor(types[j], 11 + 17 * static_cast<uint32_t>(j), test::Specials::some));
    for (bool fuse : {true, false}) {
      Graph g;
      std::vector<Value*> vals;
      for (size_t j = 0; j < types.size(); ++j) vals.push_back(g.add_input(types[j], "x" + std::to_string(j)));
      g.set_outputs({build(g, vals)});
      PipelineOptions opt;
      if (!fuse) opt.disabled.insert("fuse_elementwise");
      std::vector<const void*> ptrs;
      for (const test::Tensor& t : in) ptrs.push_back(t.data());
      test::Run r = test::compile_and_run(g, ptrs, &opt);
      EXPECT_EQ(r.nodes_of("fused_elementwise") > 0, fuse) << name << ":\n" << r.graph;
      table.push_back({name + (fuse ? " fused" : " unfused"), r.outs[0].type.dtype, bytes_of(r.outs[0]),
                       [in](size_t i) {
                         std::string s;
                         for (size_t j = 0; j < in.size(); ++j)
                           s += (j ? ", x" : "x") + std::to_string(j) + " = " +
                                std::to_string(in[j].at(in[j].numel() == 1 ? 0 : static_cast<int64_t>(i)));
                         return s;
                       }});
    }
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    chain(std::string("mul -> add{alpha=3} -> sigmoid ") + dtype_name(dt), {TensorType(dt, {1000}), TensorType(DType::f32, {})},
          [](Graph& g, const std::vector<Value*>& in) {
            Value* a = op(g, "mul", {in[0], in[1]});
            return op(g, "sigmoid", {op(g, "add", {a, in[1]}, attrs({{"alpha", 3}}))});
          });
    chain(std::string("alpha chain -> exp, tanh, gelu ") + dtype_name(dt), {TensorType(dt, {3000}), TensorType(dt, {3000})},
          [](Graph& g, const std::vector<Value*>& in) {
            Value* v = op(g, "add", {in[0], in[1]}, attrs({{"alpha", 0.37}}));
            v = op(g, "sub", {v, in[1]}, attrs({{"alpha", 1.3}}));
            v = op(g, "mul", {op(g, "exp", {v}), op(g, "tanh", {in[0]})});
            return op(g, "gelu", {op(g, "log", {op(g, "erf", {v})})}, attrs({{"approximate", std::string("tanh")}}));
          });
  }
  return table;
}

// The table as a file: per entry its key, dtype name and bytes, each with its length first.
void put(std::ostream& o, const std::string& s) {
  const uint64_t len = s.size();
  o.write(reinterpret_cast<const char*>(&len), sizeof len);
  o.write(s.data(), static_cast<std::streamsize>(len));
}
bool get(std::istream& i, std::string* s) {
  uint64_t len = 0;
  if (!i.read(reinterpret_cast<char*>(&len), sizeof len)) return false;
  s->resize(len);
  return static_cast<bool>(i.read(s->data(), static_cast<std::streamsize>(len)));
}

TEST(CrossBuild, RowTable) {
  const std::vector<Entry> table = row_table();
  EXPECT_GE(table.size(), 1000u) << "every row, setting and dtype, both forms";
  if (const char* out = std::getenv("AIRGRAPH_ROW_TABLE_OUT")) {
    std::ofstream o(out, std::ios::binary);
    for (const Entry& e : table) put(o, e.key), put(o, dtype_name(e.dtype)), put(o, e.bytes);
    ASSERT_TRUE(o.good()) << "writing " << out;
  }
}

#ifdef AIRGRAPH_RELEASE_TESTS
// Element i of an entry's bytes as a number.
double element(const std::string& bytes, DType dt, size_t i) {
  test::Tensor t = test::from_bytes(TensorType(dt, {1}), bytes.data() + i * dtype_size(dt));
  return t.at(0);
}

TEST(CrossBuild, O1BuildGivesTheReleaseBits) {
  const std::string path = ::testing::TempDir() + "airgraph_row_table_" + std::to_string(::getpid()) + ".bin";
  const std::string cmd = std::string("AIRGRAPH_ROW_TABLE_OUT='") + path + "' '" + AIRGRAPH_RELEASE_TESTS +
                          "' --gtest_filter=CrossBuild.RowTable --gtest_brief=1 > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the release build's row table: " << cmd;
  std::ifstream in(path, std::ios::binary);
  std::vector<std::array<std::string, 3>> release;
  std::array<std::string, 3> e;
  while (get(in, &e[0]) && get(in, &e[1]) && get(in, &e[2])) release.push_back(e);
  std::remove(path.c_str());
  const std::vector<Entry> mine = row_table();
  ASSERT_EQ(release.size(), mine.size()) << "the two builds computed different tables";
  int differ = 0;
  for (size_t k = 0; k < mine.size(); ++k) {
    const Entry& m = mine[k];
    ASSERT_EQ(release[k][0], m.key);
    ASSERT_EQ(release[k][1], dtype_name(m.dtype)) << m.key;
    ASSERT_EQ(release[k][2].size(), m.bytes.size()) << m.key;
    const size_t es = dtype_size(m.dtype);
    for (size_t i = 0; i < m.bytes.size() / es; ++i) {
      if (std::memcmp(m.bytes.data() + i * es, release[k][2].data() + i * es, es) == 0) continue;
      const double got = element(m.bytes, m.dtype, i), want = element(release[k][2], m.dtype, i);
      if (is_floating(m.dtype) && std::isnan(got) && std::isnan(want)) continue;
      if (differ++ < 10)
        ADD_FAILURE() << m.key << ": element " << i << " (" << m.inputs(i) << ") is " << std::setprecision(9) << got
                      << " at -O1, " << want << " in the release build";
      break;
    }
  }
  EXPECT_EQ(differ, 0) << "of " << mine.size() << " results differ between the builds";
}
#endif

}  // namespace
}  // namespace ag
