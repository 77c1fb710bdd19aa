// The one harness of the C++ op tests (ggml's test-backend-ops habit): build a graph (one node of
// an op, or a small graph from a builder), compile it the way the product does (the pass pipeline,
// or verify alone; compile_program; an Executor), run it at several thread counts, and compare
// every output with a reference: expected values from a callback, or the same inputs through a
// second graph (the unfused form of a fusion, say), at an absolute + relative tolerance where NaN
// must meet NaN and an infinity the same infinity. The first mismatch is reported with its index,
// got and want. Beside it, the small helpers the tests share: errors as strings, constants' bytes,
// substring counts.
//
// It reaches the core only through the graph builder (ir/graph.h), the pass pipeline
// (passes/passes.h) and compile_program/Executor (runtime/executor.h, in check_op.cpp).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/passes.h"
#include "test_util.h"

namespace ag::test {

// ------------------------------------------------------------------------------------------ data

// A tensor the test owns: a type and its contiguous bytes (64-byte aligned, as the front's are).
struct Tensor {
  TensorType type;
  std::shared_ptr<Storage> storage;

  Tensor() = default;
  explicit Tensor(const TensorType& t);  // zeroed
  int64_t numel() const { return type.numel(); }
  void* data() const { return storage ? storage->data : nullptr; }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data()); }
  template <typename T>
  std::vector<T> vec() const { return std::vector<T>(as<T>(), as<T>() + numel()); }
  double at(int64_t i) const;          // element i as a double, whatever the dtype
  std::vector<float> floats() const;   // every element as a float (bf16/f16 widened)
  Tensor clone() const;                // its own copy of the bytes
};

// `v` stored as t's dtype (bf16/f16 rounded to nearest even, integers truncated with NaN and
// infinities as 0, bool v != 0).
Tensor from_floats(const TensorType& t, const std::vector<float>& v);
// A copy of numel() elements of t's dtype at `data`.
Tensor from_bytes(const TensorType& t, const void* data);

// Random data may carry special values: NaN, +inf, -inf, -0 and 0 at fixed positions (every 97th,
// 89th, 71st, 83rd and 79th element) in tensors of more than 16 elements (scalars and short rows,
// which broadcast over the others, stay finite).
enum class Specials { none, some };
// Floats uniform in [-4, 4] (integers: their floor, no specials; bool: > 0), the same for the same
// seed.
Tensor random_tensor(const TensorType& t, uint32_t seed, Specials sp = Specials::none);

// A graph constant's bytes: `v` as t's dtype (see from_floats); float32 without a type.
std::shared_ptr<Storage> bytes_of(const TensorType& t, const std::vector<float>& v);
std::shared_ptr<Storage> bytes_of(const std::vector<float>& v);

// ------------------------------------------------------------------------------------ comparing

struct Tol {
  double atol = 0, rtol = 0;  // |got - want| <= atol + rtol * |want|; NaN matches NaN, inf itself
  bool bits = false;          // bit for bit instead (tells -0 from 0; a NaN matches any NaN: which NaN
                              // an op gives is not specified, kernels/elementwise_ops.h "Rounding")
  static Tol exact_bits() { return Tol{0, 0, true}; }
};

// Every element of `got` against `want` (same count); on a mismatch says where (flat and
// multi-index), got, want and how many differ. `what` names the output in the message.
::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, Tol tol,
                                 const std::string& what = "output");
// Two tensors of one type, element by element (or byte by byte with tol.bits).
::testing::AssertionResult same(const Tensor& got, const Tensor& want, Tol tol, const std::string& what = "output");
// Float vectors, |got - want| <= atol + rtol * |want| (NaN-aware), the first mismatch reported.
void expect_near(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol);

// ------------------------------------------------------------------------------------- the case

// One argument of a case: a graph input, or with is_const a graph constant (weights: the
// prepacking paths). Data: `tensor` when given, else numel() elements of the type's dtype at
// `data`, else random_tensor(type, seed + 17 * position, specials).
struct Arg {
  Arg(TensorType t, const void* d = nullptr, bool c = false) : type(std::move(t)), data(d), is_const(c) {}
  Arg(Tensor t, bool c = false) : type(t.type), tensor(std::move(t)), is_const(c) {}  // NOLINT: implicit
  TensorType type;
  Tensor tensor;
  const void* data = nullptr;
  bool is_const = false;
};

// Builds a graph over the args' values (inputs and constants, in the order of the args; it may
// add constants of its own) and returns the graph's outputs.
using BuildFn = std::function<std::vector<Value*>(Graph&, const std::vector<Value*>& args)>;
// The expected values of every output, one vector an output, from the data the args had.
using WantFn = std::function<std::vector<std::vector<double>>(const std::vector<Tensor>& args)>;

// A WantFn of one output of n elements, element i being f(args, i).
WantFn each_element(int64_t n, std::function<double(const std::vector<Tensor>& args, int64_t i)> f);

// A WantFn of fixed values: output 0's, or one vector an output.
WantFn want_values(const std::vector<float>& w);
WantFn want_values(const std::vector<std::vector<double>>& w);

// What one compile and run of a graph gave.
struct Run {
  std::string graph;                 // the graph after the passes
  std::vector<std::string> ops;      // the op of each node after the passes
  std::vector<std::string> kernels;  // kernel names, in program order
  int inplace = 0;                   // values the planner computes in place (CompileStats::inplace)
  std::vector<Tensor> outs;
  int threads = 0;
  int nodes_of(const std::string& op) const;  // nodes of that op after the passes
};

struct OpCase {
  // the graph: one node of `op` (named "n", all its outputs are the graph's), or `build`
  std::string op;
  Attrs attrs;
  BuildFn build;
  std::vector<Arg> args;
  uint32_t seed = 1;
  Specials specials = Specials::none;
  // how it is compiled: the pass pipeline with `passes`, or (pipeline false) verify alone
  bool pipeline = true;
  PipelineOptions passes;
  bool int8_activations = true;  // BuildCtx::int8_activations (false: int8 weights widened, exact)
  std::vector<int> threads = {1, 2};  // it runs at each; the first gives Checked::got
  // what it is compared with, at every thread count: the outputs' types when given; `want` at
  // `tol`; a second graph at `ref_tol` when ref_passes or ref_build is set (ref_build, or the same
  // graph, compiled with ref_passes); with neither want nor a second graph, the first thread
  // count's outputs at `tol`.
  std::vector<TensorType> want_types;
  WantFn want;
  Tol tol;
  std::optional<PipelineOptions> ref_passes;
  BuildFn ref_build;
  bool ref_row_major = false;  // a second graph: the same, compiled with every value row-major (no channels-last plan)
  Tol ref_tol;
  // called after each thread count's run (counters a kernel keeps, say)
  std::function<void(const Run&)> after_run;
};

// A CPU with AVX-512 VNNI or AMX, where linears with int8/int4 weights take the per-row int8 path
// (BuildCtx::int8_activations; kernels/linear_widened.cpp, linear_int4.cpp).
bool int8_dot_cpu();
// Whether the CPU has AVX-512 VNNI (the int8 decode GEMV: kernels/gemv.h dot4_u8s8).
bool vnni_cpu();
// AVX-512 VNNI and VBMI (the int4 decode GEMV on int8 products: kernels/linear_int4.cpp block_vnni).
bool vnni_vbmi_cpu();
// x [M, K] with each row rounded to int8 at the scale amax / 127 (half to even) and scaled back: the
// per-row path's input (kernels/int8_rows.h).
std::vector<float> per_row_int8(const std::vector<float>& x, int64_t M, int64_t K);

struct Checked {
  std::vector<Tensor> args;  // the data each arg had
  Run got;                   // at the first thread count
  Run ref;                   // the second graph at the first thread count (empty without one)
  const Tensor& out(size_t i = 0) const { return got.outs.at(i); }
  // output i's elements as T; its type into *type when given
  template <typename T = float>
  std::vector<T> values(TensorType* type = nullptr, size_t i = 0) const {
    if (type) *type = out(i).type;
    return out(i).vec<T>();
  }
};

// Builds and compiles the case once (at the calling thread's count, as the product compiles a graph
// once), runs it with a fresh Executor at each thread count and compares as the case says (gtest
// failures, each naming the thread count). An error thrown while building, compiling or running
// propagates to the caller (tests of errors catch it).
Checked check_op(const OpCase& c);

// One node of `op` on `args` with `attrs` against the expected values of its output 0, at `tol`.
Checked check_values(const std::string& op, const std::vector<Arg>& args, const Attrs& attrs,
                     const std::vector<float>& want, Tol tol);

// One node of `op` on `args` with `attrs`, run at 1 and 2 threads (which must agree exactly);
// for tests whose assertions are on the values it returns.
Checked run_op(const std::string& op, const std::vector<Arg>& args, const Attrs& attrs = {});

// The product's path for a graph built by the test: run_pipeline (or verify alone when `passes`
// is null), compile_program, an Executor, one run on `inputs` at the calling thread's count.
Run compile_and_run(Graph& g, const std::vector<const void*>& inputs, const PipelineOptions* passes);

// --------------------------------------------------------------------------------------- errors

// The message of the ag::Error that f throws; empty when it throws none.
std::string error_of(const std::function<void()>& f);
// The message of the error that adding one node of `op` over inputs of `types` throws (empty: none).
std::string build_error(const std::string& op, const std::vector<TensorType>& types, const Attrs& a = {});
// f throws an ag::Error whose message contains `part` (the message is shown when it does not).
::testing::AssertionResult throws_with(const std::function<void()>& f, const std::string& part);
// ... and contains every one of `parts` (those it lacks are named).
::testing::AssertionResult throws_with(const std::function<void()>& f, std::initializer_list<std::string> parts);

// How many times `what` occurs in `s`.
int count(const std::string& s, const std::string& what);

}  // namespace ag::test
