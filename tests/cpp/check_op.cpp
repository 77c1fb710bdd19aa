// The C++ tests' one harness: see check_op.h.
#include "check_op.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include "base/error.h"
#include "runtime/executor.h"
#include "base/parallel.h"

namespace ag::test {

// ------------------------------------------------------------------------------------------ data

Tensor::Tensor(const TensorType& t) : type(t), storage(Storage::allocate(t.nbytes())) {}

double Tensor::at(int64_t i) const {
  const void* p = data();
  switch (type.dtype) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i16: return static_cast<const int16_t*>(p)[i];
    case DType::i8: return static_cast<const int8_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::b8: return static_cast<const uint8_t*>(p)[i] != 0;
  }
  return 0;
}

std::vector<float> Tensor::floats() const {
  std::vector<float> v(numel());
  for (int64_t i = 0; i < numel(); ++i) v[i] = static_cast<float>(at(i));
  return v;
}

Tensor Tensor::clone() const { return from_bytes(type, data()); }

namespace {

void store(const Tensor& t, int64_t i, float v) {
  void* p = t.data();
  if (is_integral(t.type.dtype) && !std::isfinite(v)) v = 0;  // (converting them would be undefined)
  switch (t.type.dtype) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::i16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DType::i8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(static_cast<int>(v)); break;
    case DType::b8: static_cast<uint8_t*>(p)[i] = v != 0; break;
  }
}

}  // namespace

Tensor from_floats(const TensorType& t, const std::vector<float>& v) {
  Tensor r(t);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel()) << "values for " << t.str();
  for (int64_t i = 0; i < t.numel() && i < static_cast<int64_t>(v.size()); ++i) store(r, i, v[i]);
  return r;
}

Tensor from_bytes(const TensorType& t, const void* data) {
  Tensor r(t);
  if (t.nbytes() && data) std::memcpy(r.data(), data, t.nbytes());
  return r;
}

Tensor random_tensor(const TensorType& t, uint32_t seed, Specials sp) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  const int64_t n = t.numel();
  Tensor r(t);
  for (int64_t i = 0; i < n; ++i) {
    float v = u(rng);
    if (sp == Specials::some && n > 16 && !is_integral(t.dtype)) {
      if (i % 97 == 5) v = std::numeric_limits<float>::quiet_NaN();
      if (i % 89 == 7) v = std::numeric_limits<float>::infinity();
      if (i % 71 == 11) v = -std::numeric_limits<float>::infinity();
      if (i % 83 == 3) v = -0.0f;
      if (i % 79 == 1) v = 0.0f;
    }
    if (t.dtype == DType::b8) v = v > 0;
    else if (is_integral(t.dtype)) v = std::floor(v);
    store(r, i, v);
  }
  return r;
}

std::shared_ptr<Storage> bytes_of(const TensorType& t, const std::vector<float>& v) {
  return from_floats(t, v).storage;
}
std::shared_ptr<Storage> bytes_of(const std::vector<float>& v) {
  return bytes_of(TensorType(DType::f32, {static_cast<int64_t>(v.size())}), v);
}

// ------------------------------------------------------------------------------------ comparing

namespace {

std::string multi_index(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = s[d] ? flat % s[d] : 0;
    flat = s[d] ? flat / s[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

bool is_close(double got, double want, const Tol& tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (tol.bits) return got == want && std::signbit(got) == std::signbit(want);
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

::testing::AssertionResult mismatch(const std::string& what, const TensorType& t, int64_t bad, int64_t first,
                                    double got, double want, const Tol& tol) {
  std::ostringstream os;
  os << std::setprecision(9) << what << " " << t.str() << ": " << bad << " of " << t.numel()
     << " elements differ; the first at flat index " << first << " " << multi_index(t.shape(), first) << ": got "
     << got << ", want " << want;
  if (tol.bits) os << " (byte for byte)";
  else if (!std::isnan(want) && !std::isinf(want))
    os << " (|diff| " << std::fabs(got - want) << " > " << tol.atol + tol.rtol * std::fabs(want) << ")";
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace

::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, Tol tol,
                                     const std::string& what) {
  if (got.numel() != static_cast<int64_t>(want.size()))
    return ::testing::AssertionFailure() << what << " " << got.type.str() << " has " << got.numel()
                                         << " elements, want " << want.size();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.numel(); ++i)
    if (!is_close(got.at(i), want[i], tol) && bad++ == 0) first = i;
  if (bad) return mismatch(what, got.type, bad, first, got.at(first), want[first], tol);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  if (!(got.type == want.type))
    return ::testing::AssertionFailure() << what << " is " << got.type.str() << ", want " << want.type.str();
  if (!tol.bits) {
    std::vector<double> w(want.numel());
    for (int64_t i = 0; i < want.numel(); ++i) w[i] = want.at(i);
    return all_close(got, w, tol, what);
  }
  const size_t es = dtype_size(got.type.dtype);
  const auto* a = static_cast<const uint8_t*>(got.data());
  const auto* b = static_cast<const uint8_t*>(want.data());
  int64_t bad = 0, first = -1;
  const bool floating = is_floating(got.type.dtype);
  for (int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0 && !(floating && std::isnan(got.at(i)) && std::isnan(want.at(i))) &&
        bad++ == 0)
      first = i;
  if (bad) return mismatch(what, got.type, bad, first, got.at(first), want.at(first), tol);
  return ::testing::AssertionSuccess();
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  Tensor g = from_floats(TensorType(DType::f32, {static_cast<int64_t>(got.size())}), got);
  EXPECT_TRUE(all_close(g, std::vector<double>(want.begin(), want.end()), Tol{atol, rtol}));
}

// ------------------------------------------------------------------------------------- the case

WantFn each_element(int64_t n, std::function<double(const std::vector<Tensor>& args, int64_t i)> f) {
  return [n, f](const std::vector<Tensor>& args) {
    std::vector<std::vector<double>> w(1, std::vector<double>(n));
    for (int64_t i = 0; i < n; ++i) w[0][i] = f(args, i);
    return w;
  };
}

WantFn want_values(const std::vector<float>& w) {
  return want_values(std::vector<std::vector<double>>{std::vector<double>(w.begin(), w.end())});
}
WantFn want_values(const std::vector<std::vector<double>>& w) {
  return [w](const std::vector<Tensor>&) { return w; };
}

int Run::nodes_of(const std::string& op) const {
  int n = 0;
  for (auto& o : ops) n += o == op;
  return n;
}

namespace {

// A graph compiled the product's way, ready to run any number of times.
struct Compiled {
  Run meta;  // everything but the outputs
  std::shared_ptr<Program> prog;
};

Compiled compile(Graph& g, const PipelineOptions* passes, bool channels_last = true, bool int8_activations = true) {
  if (passes) run_pipeline(g, *passes);
  else g.verify();
  Compiled c;
  c.meta.graph = g.str();
  for (auto& n : g.nodes()) c.meta.ops.push_back(n->op->name);
  CompileOptions opt;
  opt.channels_last = channels_last;
  opt.build.int8_activations = int8_activations;
  c.prog = compile_program(g, opt);
  for (auto& k : c.prog->kernels) c.meta.kernels.push_back(k->name());
  c.meta.inplace = c.prog->stats.inplace;
  return c;
}

// One run with a fresh executor at the calling thread's count.
Run run(const Compiled& c, const std::vector<const void*>& inputs) {
  Run r = c.meta;
  Executor ex(c.prog);
  std::vector<void*> ptrs;
  for (const void* p : inputs) ptrs.push_back(const_cast<void*>(p));
  for (auto& o : ex.run(ptrs)) r.outs.push_back(from_bytes(o.type, o.data));
  r.threads = num_threads();
  return r;
}

// Builds the case's graph (with `build` when given, else one node of c.op) over the args' values
// and compiles it with `passes`.
Compiled build_and_compile(const OpCase& c, const std::vector<Tensor>& args, const BuildFn& build,
                           const PipelineOptions* passes, bool channels_last = true) {
  Graph g;
  std::vector<Value*> vals;
  int n_in = 0, n_const = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (c.args[i].is_const)
      vals.push_back(g.add_const(args[i].type, args[i].clone().storage, "c" + std::to_string(n_const++)));
    else
      vals.push_back(g.add_input(args[i].type, "x" + std::to_string(n_in++)));
  }
  std::vector<Value*> outs;
  if (build) outs = build(g, vals);
  else outs = g.add_node(c.op, vals, c.attrs, "n")->outputs;
  g.set_outputs(outs);
  return compile(g, passes, channels_last, c.int8_activations);
}

// Runs on fresh copies of the inputs (a graph may write its inputs).
Run run_on(const Compiled& comp, const OpCase& c, const std::vector<Tensor>& args) {
  std::vector<Tensor> fresh;
  std::vector<const void*> inputs;
  for (size_t i = 0; i < args.size(); ++i)
    if (!c.args[i].is_const) {
      fresh.push_back(args[i].clone());
      inputs.push_back(fresh.back().data());
    }
  return run(comp, inputs);
}

}  // namespace

Run compile_and_run(Graph& g, const std::vector<const void*>& inputs, const PipelineOptions* passes) {
  return run(compile(g, passes), inputs);
}

bool int8_dot_cpu() {
  std::ifstream f("/proc/cpuinfo");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.find("avx512_vnni") != std::string::npos || s.find("amx_int8") != std::string::npos;
}

bool vnni_cpu() {
  std::ifstream f("/proc/cpuinfo");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.find("avx512_vnni") != std::string::npos && s.find("avx512bw") != std::string::npos;
}

bool vnni_vbmi_cpu() {
  std::ifstream f("/proc/cpuinfo");
  const std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // (Linux spells it avx512vbmi; a flag ends with a space or the line's end: "avx512vbmi2" is another)
  return vnni_cpu() && (s.find(" avx512vbmi ") != std::string::npos || s.find(" avx512vbmi\n") != std::string::npos);
}

std::vector<float> per_row_int8(const std::vector<float>& x, int64_t M, int64_t K) {
  std::vector<float> q(x.size());
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0.f;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t k = 0; k < K; ++k) q[m * K + k] = std::nearbyint(x[m * K + k] * inv) * (amax / 127.f);
  }
  return q;
}

Checked check_op(const OpCase& c) {
  Checked r;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Arg& a = c.args[i];
    if (a.tensor.storage) r.args.push_back(a.tensor);
    else if (a.data) r.args.push_back(from_bytes(a.type, a.data));
    else r.args.push_back(random_tensor(a.type, c.seed + 17 * static_cast<uint32_t>(i), c.specials));
  }
  std::vector<std::vector<double>> want;
  if (c.want) want = c.want(r.args);
  const bool second = c.ref_passes.has_value() || static_cast<bool>(c.ref_build) || c.ref_row_major;
  const PipelineOptions ref_passes = c.ref_passes.value_or(c.passes);
  // compiled once, as the product compiles a graph once and runs it at the caller's thread count
  Compiled comp = build_and_compile(c, r.args, c.build, c.pipeline ? &c.passes : nullptr), ref_comp;
  if (second) ref_comp = build_and_compile(c, r.args, c.ref_build ? c.ref_build : c.build,
                                           c.pipeline ? &ref_passes : nullptr, !c.ref_row_major);
  for (size_t k = 0; k < c.threads.size(); ++k) {
    ThreadCountScope scope(c.threads[k]);
    const std::string at = " (" + (c.op.empty() ? std::string("graph") : c.op) + ", " +
                           std::to_string(c.threads[k]) + " threads)";
    Run run = run_on(comp, c, r.args);
    if (!c.want_types.empty()) {
      EXPECT_EQ(run.outs.size(), c.want_types.size()) << at;
      for (size_t o = 0; o < run.outs.size() && o < c.want_types.size(); ++o)
        EXPECT_TRUE(run.outs[o].type == c.want_types[o])
            << "output " << o << " is " << run.outs[o].type.str() << ", want " << c.want_types[o].str() << at;
    }
    if (c.want) {
      EXPECT_EQ(run.outs.size(), want.size()) << "outputs" << at;
      for (size_t o = 0; o < run.outs.size() && o < want.size(); ++o)
        EXPECT_TRUE(all_close(run.outs[o], want[o], c.tol, "output " + std::to_string(o) + at));
    }
    Run ref;
    if (second) {
      ref = run_on(ref_comp, c, r.args);
      EXPECT_EQ(run.outs.size(), ref.outs.size()) << "outputs" << at;
      for (size_t o = 0; o < run.outs.size() && o < ref.outs.size(); ++o)
        EXPECT_TRUE(same(run.outs[o], ref.outs[o], c.ref_tol, "output " + std::to_string(o) + at))
            << "\ngraph:\n" << run.graph << "reference graph:\n" << ref.graph;
    }
    if (!c.want && !second && k > 0) {
      EXPECT_EQ(run.outs.size(), r.got.outs.size()) << "outputs" << at;
      for (size_t o = 0; o < run.outs.size() && o < r.got.outs.size(); ++o)
        EXPECT_TRUE(same(run.outs[o], r.got.outs[o], c.tol,
                         "output " + std::to_string(o) + at + " against " + std::to_string(c.threads[0]) +
                             " threads"));
    }
    if (c.after_run) c.after_run(run);
    if (k == 0) {
      r.got = std::move(run);
      r.ref = std::move(ref);
    }
  }
  return r;
}

Checked check_values(const std::string& op, const std::vector<Arg>& args, const Attrs& attrs,
                     const std::vector<float>& want, Tol tol) {
  OpCase c;
  c.op = op;
  c.args = args;
  c.attrs = attrs;
  c.want = want_values(want);
  c.tol = tol;
  return check_op(c);
}

Checked run_op(const std::string& op, const std::vector<Arg>& args, const Attrs& attrs) {
  OpCase c;
  c.op = op;
  c.args = args;
  c.attrs = attrs;
  return check_op(c);
}

// --------------------------------------------------------------------------------------- errors

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string build_error(const std::string& op, const std::vector<TensorType>& types, const Attrs& a) {
  Graph g;
  std::vector<Value*> ins;
  for (size_t i = 0; i < types.size(); ++i) ins.push_back(g.add_input(types[i], "x" + std::to_string(i)));
  return error_of([&] { g.add_node(op, ins, a, "bad_node"); });
}

::testing::AssertionResult throws_with(const std::function<void()>& f, const std::string& part) {
  return throws_with(f, {part});
}

::testing::AssertionResult throws_with(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    std::string missing;
    for (const std::string& p : parts)
      if (m.find(p) == std::string::npos) missing += (missing.empty() ? "'" : ", '") + p + "'";
    if (missing.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the error does not say " << missing << ": " << m;
  }
  std::string all;
  for (const std::string& p : parts) all += (all.empty() ? "'" : ", '") + p + "'";
  return ::testing::AssertionFailure() << "no error, expected one that says " << all;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace ag::test
