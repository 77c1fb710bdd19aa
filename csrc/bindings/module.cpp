// The Python boundary: a graph builder, the pass pipeline and compiled
// executables. Tensors cross as DLPack (nanobind ndarray): constants and inputs
// are borrowed without copies, outputs are handed back owning their buffers.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <variant>

#include "bindings/fault.h"
#include "bindings/tensor_ptr.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "ir/serialize.h"
#include "kernels/attention.h"
#include "kernels/onednn_util.h"
#include "kernels/plugin.h"
#include "passes/passes.h"
#include "base/background.h"
#include "base/memory.h"
#include "runtime/executor.h"
#include "base/parallel.h"

namespace nb = nanobind;
using namespace ag;

namespace {
using Arr = nb::ndarray<nb::device::cpu>;

DType dtype_of(nb::dlpack::dtype d) {
  using C = nb::dlpack::dtype_code;
  auto code = static_cast<C>(d.code);
  if (d.lanes != 1) fail("vector dtypes are not supported");
  if (code == C::Float && d.bits == 32) return DType::f32;
  if (code == C::Float && d.bits == 64) return DType::f64;
  if (code == C::Float && d.bits == 16) return DType::f16;
  if (code == C::Bfloat && d.bits == 16) return DType::bf16;
  if (code == C::Int && d.bits == 64) return DType::i64;
  if (code == C::Int && d.bits == 32) return DType::i32;
  if (code == C::Int && d.bits == 16) return DType::i16;
  if (code == C::Int && d.bits == 8) return DType::i8;
  if (code == C::UInt && d.bits == 8) return DType::u8;
  if (code == C::Bool) return DType::b8;
  fail("dtype (code ", int(d.code), ", ", int(d.bits), " bits) is not supported by the engine");
}

nb::dlpack::dtype dl_of(DType t) {
  nb::dlpack::dtype d;
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::f32: case DType::f64: case DType::f16: d.code = uint8_t(nb::dlpack::dtype_code::Float); break;
    case DType::bf16: d.code = uint8_t(nb::dlpack::dtype_code::Bfloat); break;
    case DType::u8: d.code = uint8_t(nb::dlpack::dtype_code::UInt); break;
    case DType::b8: d.code = uint8_t(nb::dlpack::dtype_code::Bool); break;
    default: d.code = uint8_t(nb::dlpack::dtype_code::Int);
  }
  return d;
}

DType parse_dtype(const std::string& s) {
  DType t;
  if (!dtype_from_name(s, &t)) fail("unknown dtype '", s, "'");
  return t;
}

bool is_contiguous(const Arr& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;  // no elements: any strides describe it
  int64_t expect = 1;
  for (int64_t i = static_cast<int64_t>(a.ndim()) - 1; i >= 0; --i) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

Shape shape_of(const Arr& a) {
  Shape s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

AttrValue attr_from_py(const std::string& key, nb::handle h) {
  if (nb::isinstance<nb::bool_>(h)) return nb::cast<bool>(h);
  if (nb::isinstance<nb::int_>(h)) return nb::cast<int64_t>(h);
  if (nb::isinstance<nb::float_>(h)) return nb::cast<double>(h);
  if (nb::isinstance<nb::str>(h)) {
    std::string s = nb::cast<std::string>(h);
    if (key == "dtype" || key.ends_with("_dtype")) return parse_dtype(s);
    return s;
  }
  if (nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h)) {
    bool all_int = true;
    for (nb::handle x : h) all_int = all_int && nb::isinstance<nb::int_>(x) && !nb::isinstance<nb::bool_>(x);
    if (all_int) {
      std::vector<int64_t> v;
      for (nb::handle x : h) v.push_back(nb::cast<int64_t>(x));
      return v;
    }
    std::vector<double> v;
    for (nb::handle x : h) v.push_back(nb::cast<double>(x));
    return v;
  }
  fail("attribute '", key, "': unsupported Python type ", nb::cast<std::string>(nb::str(h.type())));
}

nb::object attr_to_py(const AttrValue& v) {
  return std::visit(
      [](auto&& x) -> nb::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, DType>)
          return nb::str(dtype_name(x));
        else
          return nb::cast(x);
      },
      v);
}

nb::dict describe_value(const Value* v) {
  nb::dict d;
  d["id"] = v->id;
  d["name"] = v->name;
  d["dtype"] = dtype_name(v->type.dtype);
  d["shape"] = v->type.shape();
  return d;
}

// The whole graph as plain Python data, for dumps (text, Python, DOT).
nb::dict describe_graph(const Graph& g) {
  nb::dict d;
  nb::list inputs, consts, nodes, outputs;
  for (Value* v : g.inputs()) inputs.append(describe_value(v));
  std::vector<char> seen(g.num_values(), 0);
  for (auto& n : g.nodes()) {
    for (Value* v : n->inputs)
      if (v->is_const() && !seen[v->id]) {
        seen[v->id] = 1;
        consts.append(describe_value(v));
      }
    nb::dict nd;
    nd["name"] = n->name;
    nd["op"] = n->op->name;
    nd["source"] = n->source;
    nb::list ins, outs;
    for (Value* v : n->inputs) ins.append(v->id);
    for (Value* v : n->outputs) outs.append(describe_value(v));
    nd["inputs"] = ins;
    nd["outputs"] = outs;
    nb::dict attrs;
    for (auto& [k, v] : n->attrs.items()) attrs[k.c_str()] = attr_to_py(v);
    nd["attrs"] = attrs;
    nodes.append(nd);
  }
  for (Value* v : g.outputs()) {
    outputs.append(v->id);
    if (v->is_const() && !seen[v->id]) {
      seen[v->id] = 1;
      consts.append(describe_value(v));
    }
  }
  d["inputs"] = inputs;
  d["consts"] = consts;
  d["nodes"] = nodes;
  d["outputs"] = outputs;
  return d;
}

// Owner of an output buffer, handed to the ndarray so the bytes live as long as the tensor.
struct BufferOwner {
  std::shared_ptr<void> p;
};

class PyGraph {
 public:
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  std::vector<PassStat> stats;
  std::vector<std::shared_ptr<void>> packed;  // a loaded file's packed weights, registered while the graph lives

  int add_input(const std::string& dtype, const std::vector<int64_t>& shape, const std::string& name,
                const std::vector<int>& syms) {
    TensorType t(parse_dtype(dtype), shape);
    for (size_t i = 0; i < syms.size() && i < t.dims.size(); ++i) t.dims[i].sym = syms[i];
    return g->add_input(t, name)->id;
  }
  int add_const(Arr a, const std::string& name, bool weights) {
    if (!is_contiguous(a)) fail("constant '", name, "' must be contiguous");
    TensorType t(dtype_of(a.dtype()), shape_of(a));
    auto s = std::make_shared<Storage>();
    s->data = a.data();
    s->nbytes = t.nbytes();
    // keep the foreign tensor alive; drop the reference with the GIL held
    nb::object keep = nb::cast(a);
    s->owner = std::shared_ptr<void>(new nb::object(std::move(keep)), [](void* p) {
      nb::gil_scoped_acquire gil;
      delete static_cast<nb::object*>(p);
    });
    s->from_weights = weights;
    return g->add_const(t, std::move(s), name)->id;
  }
  std::vector<int> add_node(const std::string& op, const std::vector<int>& inputs, nb::dict attrs,
                            const std::string& name, const std::string& source,
                            const std::vector<std::tuple<std::string, int, int>>& sym_attrs) {
    std::vector<Value*> ins;
    for (int id : inputs) {
      AG_CHECK(id >= 0 && id < g->num_values(), "node '", name, "' (op ", op, "): invalid input value id ", id);
      ins.push_back(g->value(id));
    }
    Attrs a;
    for (auto [k, v] : attrs) {
      std::string key = nb::cast<std::string>(k);
      a.set(key, attr_from_py(key, v));
    }
    for (auto& [key, index, expr] : sym_attrs) {
      AG_CHECK(expr >= 0 && expr < static_cast<int>(g->exprs().size()), "node '", name, "': no size expression ",
               expr);
      const AttrValue* v = a.find(key);
      bool ok = v && (index < 0 ? std::holds_alternative<int64_t>(*v)
                                : std::holds_alternative<std::vector<int64_t>>(*v) &&
                                      index < static_cast<int>(std::get<std::vector<int64_t>>(*v).size()));
      AG_CHECK(ok, "node '", name, "': symbolic size for attribute ", key, "[", index, "], which holds no int there");
    }
    Node* n = g->add_node(op, ins, std::move(a), name, source);
    for (auto& [key, index, expr] : sym_attrs) n->sym_attrs.push_back(SymAttr{key, index, expr});
    std::vector<int> outs;
    for (Value* v : n->outputs) outs.push_back(v->id);
    return outs;
  }
  void set_outputs(const std::vector<int>& ids) {
    std::vector<Value*> v;
    for (int id : ids) v.push_back(g->value(id));
    g->set_outputs(v);
  }
  // [(input index, output index)]: after a call the input holds that output (Graph::input_writes)
  void set_input_writes(const std::vector<std::pair<int, int>>& w) {
    std::vector<Graph::InputWrite> ws;
    for (auto [i, o] : w) ws.push_back(Graph::InputWrite{i, o});
    g->set_input_writes(std::move(ws));
  }
  std::pair<std::string, std::vector<int64_t>> value_type(int id) const {
    const TensorType& t = g->value(id)->type;
    return {dtype_name(t.dtype), t.shape()};
  }
};

// A compiled graph: the read-only Program and a pool of executors, one per
// concurrent caller (calls release the GIL, so Python threads run at once).
class PyExecutable {
 public:
  std::shared_ptr<const Program> prog;
  std::unique_ptr<ExecutorPool> pool;
  std::atomic<bool> profiling{false};
  std::mutex last_mu;  // the profile of the call that finished last
  std::vector<int64_t> last_times, last_starts;

  explicit PyExecutable(std::shared_ptr<const Program> p, std::shared_ptr<ArenaSource> arena = nullptr)
      : prog(std::move(p)), pool(std::make_unique<ExecutorPool>(prog, std::move(arena))) {}

  // Runs on an executor of the pool; the GIL must be released by the caller.
  void run_into(const void* const* ins, void* const* roots) {
    ExecutorPool::Lease ex = pool->acquire();
    const bool prof = profiling.load(std::memory_order_relaxed);
    ex->set_profiling(prof);
    ex->run_into(ins, roots);
    if (prof) {
      std::lock_guard<std::mutex> lk(last_mu);
      last_times = ex->last_times_ns();
      last_starts = ex->last_starts_ns();
    }
  }

  nb::list run(const std::vector<Arr>& inputs, int threads) {
    const Program& P = *prog;
    if (inputs.size() != P.input_types.size())
      fail("compiled graph takes ", P.input_types.size(), " inputs, got ", inputs.size());
    std::vector<void*> ptrs(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& a = inputs[i];
      const TensorType& t = P.input_types[i];
      DType dt = dtype_of(a.dtype());
      Shape s = shape_of(a);
      if (dt != t.dtype || s != t.shape())
        fail("input ", i, " is ", TensorType(dt, s).str(), " but the graph was compiled for ", t.str());
      if (!is_contiguous(a)) fail("input ", i, " must be contiguous");
      ptrs[i] = a.data();
    }
    ThreadCountScope thread_count(threads);
    std::vector<OutBuffer> outs;
    {
      nb::gil_scoped_release nogil;
      ExecutorPool::Lease ex = pool->acquire();
      outs = ex->run(ptrs);
    }
    nb::list res;
    for (size_t i = 0; i < outs.size(); ++i) {
      const OutBuffer& o = outs[i];
      if (P.outputs[i].kind == LocKind::Input) {  // written in place: the input itself
        res.append(nb::cast(inputs[P.outputs[i].index]));
        continue;
      }
      Shape sh = o.type.shape();
      std::vector<size_t> shape(sh.begin(), sh.end());
      auto* owner = new BufferOwner{o.owner};
      nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<BufferOwner*>(p); });
      res.append(nb::ndarray<nb::pytorch>(o.data, shape.size(), shape.data(), cap, nullptr, dl_of(o.type.dtype),
                                          nb::device::cpu::value)
                     .cast());
    }
    return res;
  }
};

}  // namespace

void bind_weights(nb::module_& m);  // weights.cpp: the per-call check of bound weights

NB_MODULE(_C, m) {
  m.doc() = "airgraph C++ core";
  // torch keeps compiled functions (and so our Executables and WeightGuards) in
  // its Dynamo caches until the interpreter is torn down, after this module:
  // those are not leaks, and the exit-time report would only alarm users.
  nb::set_leak_warnings(false);
  bind_weights(m);
  nb::exception<ag::Error>(m, "EngineError");

  nb::class_<PyGraph>(m, "Graph")
      .def(nb::init<>())
      .def("add_input", &PyGraph::add_input, nb::arg("dtype"), nb::arg("shape"), nb::arg("name"),
           nb::arg("syms") = std::vector<int>{})
      .def("add_const", &PyGraph::add_const, nb::arg("array"), nb::arg("name"), nb::arg("weights") = false)
      .def("weight_derived_consts",  // (name, [weights]) of the constants holding or computed from weights
           [](PyGraph& g) {
             std::vector<std::pair<std::string, std::vector<std::string>>> names;
             std::vector<char> seen(g.g->num_values(), 0);
             auto visit = [&](Value* v) {
               if (v->is_const() && !seen[v->id] && v->storage && v->storage->from_weights)
                 names.emplace_back(v->name, weight_sources(v));
               seen[v->id] = 1;
             };
             for (auto& n : g.g->nodes())
               for (Value* v : n->inputs) visit(v);
             for (Value* v : g.g->outputs()) visit(v);
             return names;
           })
      .def("add_symbol", [](PyGraph& g, const std::string& n) { return g.g->add_symbol(n); })
      .def("add_expr",
           [](PyGraph& g, const std::vector<int64_t>& code, const std::string& text) {
             return g.g->add_expr(SizeExpr{code, text});
           })
      .def("set_dim_exprs",
           [](PyGraph& g, int id, const std::vector<int32_t>& exprs) {
             AG_CHECK(id >= 0 && id < g.g->num_values(), "invalid value id ", id);
             g.g->set_dim_exprs(g.g->value(id), exprs);
           })
      .def("eval_expr",
           [](PyGraph& g, int id, const std::vector<int64_t>& sizes) {
             AG_CHECK(id >= 0 && id < static_cast<int>(g.g->exprs().size()), "no size expression ", id);
             AG_CHECK(sizes.size() == g.g->symbols().size(), "eval_expr: ", sizes.size(), " sizes for ",
                      g.g->symbols().size(), " symbols");
             return eval_size_expr(g.g->exprs()[id], sizes);
           })
      .def("add_guard",  // relation: sympy's class name (Equality, Unequality, StrictLessThan, ...)
           [](PyGraph& g, int expr, const std::string& relation, bool outcome, const std::string& text) {
             static const std::pair<const char*, Graph::Rel> rels[] = {
                 {"Equality", Graph::Rel::eq},      {"Unequality", Graph::Rel::ne},
                 {"StrictLessThan", Graph::Rel::lt}, {"LessThan", Graph::Rel::le},
                 {"StrictGreaterThan", Graph::Rel::gt}, {"GreaterThan", Graph::Rel::ge}};
             for (const auto& [name, rel] : rels)
               if (relation == name) return g.g->add_guard(Graph::Guard{expr, rel, outcome, text});
             fail("add_guard: unknown relation '", relation, "'");
           })
      .def("failed_guard",  // the text of the first guard that fails at `sizes`, or None
           [](PyGraph& g, const std::vector<int64_t>& sizes) -> std::optional<std::string> {
             AG_CHECK(sizes.size() == g.g->symbols().size(), "failed_guard: ", sizes.size(), " sizes for ",
                      g.g->symbols().size(), " symbols");
             const Graph::Guard* f = g.g->failed_guard(sizes);
             if (!f) return std::nullopt;
             return f->text + " is " + (f->outcome ? "true" : "false");
           })
      .def("guards",
           [](PyGraph& g) {
             std::vector<std::pair<std::string, bool>> r;
             for (const auto& gd : g.g->guards()) r.emplace_back(gd.text, gd.outcome);
             return r;
           })
      .def("symbols", [](PyGraph& g) { return g.g->symbols(); })
      .def("rename_symbols", [](PyGraph& g, const std::vector<std::string>& n) { g.g->rename_symbols(n); })
      .def("eval_exprs",  // several expressions at one binding (guards of a recorded graph)
           [](PyGraph& g, const std::vector<int>& ids, const std::vector<int64_t>& sizes) {
             AG_CHECK(sizes.size() == g.g->symbols().size(), "eval_exprs: ", sizes.size(), " sizes for ",
                      g.g->symbols().size(), " symbols");
             std::vector<int64_t> r;
             r.reserve(ids.size());
             for (int id : ids) {
               AG_CHECK(id >= 0 && id < static_cast<int>(g.g->exprs().size()), "no size expression ", id);
               r.push_back(eval_size_expr(g.g->exprs()[id], sizes));
             }
             return r;
           })
      .def("instantiate",
           [](PyGraph& g, const std::vector<int64_t>& sizes) {
             auto p = new PyGraph();
             p->g = g.g->instantiate(sizes);
             return p;
           },
           nb::rv_policy::take_ownership)
      .def("save",  // the airgraph file's bytes (ir/serialize.h)
           [](PyGraph& g, bool inline_constants, const std::string& producer, const std::string& metadata,
              const std::vector<std::string>& by_name, const PyGraph* packed_from) {
             SaveOptions o{inline_constants, producer, metadata, by_name, {}};
             std::vector<dnnl_util::Buffer> keep;
             // the packed copies the process made of `packed_from`'s constants (the same file loaded and run),
             // stored beside this graph's constants of the same names
             if (packed_from) o.blobs = dnnl_util::packed_blobs(*packed_from->g, keep);
             std::string b = save_graph(*g.g, o);
             return nb::bytes(b.data(), b.size());
           },
           nb::arg("inline_constants") = true, nb::arg("producer") = "", nb::arg("metadata") = "",
           nb::arg("by_name") = std::vector<std::string>{}, nb::arg("packed_from").none() = nb::none())
      .def("with_const_names",  // a copy whose constants named in `names` are renamed (files name weights so)
           [](PyGraph& g, const std::map<std::string, std::string>& names) {
             auto p = new PyGraph();
             p->g = g.g->clone();
             for (int i = 0; i < p->g->num_values(); ++i) {
               Value* v = p->g->value(i);
               auto it = v->is_const() ? names.find(v->name) : names.end();
               if (it != names.end()) v->name = it->second;
             }
             return p;
           },
           nb::rv_policy::take_ownership)
      .def("clone",  // a symbolic copy for the passes to run on (instantiate serves the result)
           [](PyGraph& g) {
             auto p = new PyGraph();
             p->g = g.g->clone();
             return p;
           },
           nb::rv_policy::take_ownership)
      .def("add_node", &PyGraph::add_node, nb::arg("op"), nb::arg("inputs"), nb::arg("attrs"), nb::arg("name") = "",
           nb::arg("source") = "", nb::arg("sym_attrs") = std::vector<std::tuple<std::string, int, int>>{})
      .def("set_outputs", &PyGraph::set_outputs)
      .def("set_input_writes", &PyGraph::set_input_writes)
      .def("value_type", &PyGraph::value_type)
      .def("verify", [](PyGraph& g) { g.g->verify(); })
      .def("num_nodes", [](PyGraph& g) { return g.g->nodes().size(); })
      .def("is_symbolic", [](PyGraph& g) { return g.g->is_symbolic(); })
      .def("__str__", [](PyGraph& g) { return g.g->str(); })
      .def("node_ops", [](PyGraph& g) {
        std::vector<std::pair<std::string, std::string>> r;
        for (auto& n : g.g->nodes()) r.emplace_back(n->name, n->op->name);
        return r;
      })
      .def("describe", [](PyGraph& g) { return describe_graph(*g.g); })
      .def("const_array",
           [](PyGraph& g, int id) {
             Value* v = g.g->value(id);
             AG_CHECK(v->is_const(), "value %", v->name, " is not a constant");
             Shape sh = v->type.shape();
             std::vector<size_t> shape(sh.begin(), sh.end());
             auto* owner = new BufferOwner{v->storage->owner};
             nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<BufferOwner*>(p); });
             return nb::ndarray<nb::pytorch>(v->storage->data, shape.size(), shape.data(), cap, nullptr,
                                             dl_of(v->type.dtype), nb::device::cpu::value)
                 .cast();
           })
      .def("expose",
           [](PyGraph& g, const std::vector<int>& ids) {
             // Makes intermediate values extra graph outputs (data dumps), then
             // re-materializes so that every output is a fresh buffer.
             auto& outs = g.g->mutable_outputs();
             for (int id : ids) outs.push_back(g.g->value(id));
             materialize_outputs(*g.g);
             g.g->verify();
           })
      .def(
          "optimize",
          [](PyGraph& g, const std::set<std::string>& disabled, size_t fold_max_bytes, nb::object after_pass) {
            PipelineOptions o;
            o.disabled = disabled;
            o.fold_max_bytes = fold_max_bytes;
            AfterPassFn cb;
            if (!after_pass.is_none())
              cb = [&](const std::string& name, const Graph& gr) { after_pass(name, describe_graph(gr)); };
            g.stats = run_pipeline(*g.g, o, cb);
            std::vector<std::tuple<std::string, int, int, double>> r;
            for (auto& s : g.stats) r.emplace_back(s.name, s.changes, s.nodes_after, s.ms);
            return r;
          },
          nb::arg("disabled") = std::set<std::string>{}, nb::arg("fold_max_bytes") = size_t(1) << 20,
          nb::arg("after_pass") = nb::none())
      .def(
          "compile",
          [](PyGraph& g, bool inplace, const std::string& fault_node, dnnl_util::PrepackCache* cache,
             std::shared_ptr<ArenaSource> arena, KernelCache* kernels, bool background, int64_t pack_rows,
             bool int8_activations, int64_t pack_budget) {
            CompileOptions o;
            o.build.pack_rows = pack_rows;  // GEMMs with fewer rows pack their constant weights
            o.build.pack_budget = pack_budget;  // and wider ones while the process's copies stay within it,
            if (pack_budget > 0)                // a row count at a time, fewest rows first
              o.build.pack_chosen = std::make_shared<const std::vector<const void*>>(
                  dnnl_util::pack_budget_choose(dnnl_util::budgeted_weights(*g.g, o.build), pack_budget));
            o.build.int8_activations = int8_activations;  // int8-weight GEMMs quantize their input per row
            o.allow_inplace = inplace;
            o.build.prepack = cache;         // programs sharing a cache share packed weights
            o.build.background = background; // weights packed after the first run (base/background.h)
            o.kernels = kernels;
            if (!fault_node.empty()) o.wrap = plant_fault(fault_node);
            return new PyExecutable(compile_program(*g.g, o), std::move(arena));
          },
          nb::arg("allow_inplace") = true, nb::arg("fault_node") = "", nb::arg("prepack_cache").none() = nb::none(),
          nb::arg("arena").none() = nb::none(), nb::arg("kernels").none() = nb::none(), nb::arg("background") = false,
          nb::arg("pack_rows") = INT64_MAX, nb::arg("int8_activations") = true, nb::arg("pack_budget") = 0,
          nb::rv_policy::take_ownership);

  // Kernels shared by the programs of one graph's sizes (a node seen before reuses its kernel).
  nb::class_<KernelCache>(m, "KernelCache")
      .def(nb::init<>())
      .def_prop_ro("hits", &KernelCache::hits)
      .def_prop_ro("size", &KernelCache::size);

  // Arena memory shared by the programs of one graph's sizes (leased per call).
  nb::class_<ArenaSource>(m, "ArenaSource")
      .def(nb::init<>())
      .def_prop_ro("bytes_held", &ArenaSource::bytes_held);

  // Packed weights shared by the programs one graph builds for several sizes (one per set of
  // bound weights; kept by the front, passed to compile()).
  nb::class_<dnnl_util::PrepackCache>(m, "PrepackCache")
      .def(nb::init<>())
      .def_prop_ro("hits", &dnnl_util::PrepackCache::hits);

  nb::class_<PyExecutable>(m, "Executable")
      .def("run", &PyExecutable::run, nb::arg("inputs"), nb::arg("threads") = 0)
      .def(
          "run_ptrs",
          [](PyExecutable& e, const std::vector<uintptr_t>& ins, const std::vector<uintptr_t>& roots, int threads) {
            // The fast call path: the front checked dtypes, shapes and contiguity
            // against layout() and allocated the output roots itself.
            const Program& P = *e.prog;
            AG_CHECK(ins.size() == P.input_types.size() && roots.size() == P.external_bytes.size(),
                     "run_ptrs: expected ", P.input_types.size(), " inputs and ", P.external_bytes.size(), " roots");
            ThreadCountScope thread_count(threads);
            nb::gil_scoped_release nogil;
            e.run_into(reinterpret_cast<const void* const*>(ins.data()), reinterpret_cast<void* const*>(roots.data()));
          },
          nb::arg("inputs"), nb::arg("roots"), nb::arg("threads") = 0)
      .def(
          "run_tensors",
          [](PyExecutable& e, nb::handle ins, nb::handle roots, int threads, uintptr_t data_ptr_fn,
             nb::handle tensor_type) {
            // The thinnest call path: `ins` (a tuple) and `roots` (a list) hold torch tensors that
            // the front checked (dtypes, sizes, strides) and allocated; their data pointers are
            // read here through torch's exported `void* (PyObject*)` function for objects of
            // exactly `tensor_type`, through .data_ptr() otherwise: no Python ints per call. A
            // Python number in `ins` (a size the graph uses as a value) is the 0-d input itself:
            // it is converted to that input's dtype in a slot on this call's stack.
            const Program& P = *e.prog;
            AG_CHECK(PyTuple_Check(ins.ptr()) && PyList_Check(roots.ptr()), "run_tensors: a tuple and a list");
            const Py_ssize_t ni = PyTuple_GET_SIZE(ins.ptr()), nr = PyList_GET_SIZE(roots.ptr());
            AG_CHECK(static_cast<size_t>(ni) == P.input_types.size() && static_cast<size_t>(nr) == P.external_bytes.size(),
                     "run_tensors: expected ", P.input_types.size(), " inputs and ", P.external_bytes.size(), " roots");
            auto fn = reinterpret_cast<DataPtrFn>(data_ptr_fn);
            auto ptr_of = [&](PyObject* t) {
              return reinterpret_cast<void*>(tensor_data_ptr(t, fn, tensor_type.ptr()));
            };
            void* small[32];
            int64_t small_slots[32];
            std::vector<void*> big;
            std::vector<int64_t> big_slots;
            void** ptrs = static_cast<size_t>(ni + nr) <= 32 ? small : (big.resize(ni + nr), big.data());
            int64_t* slots = ni <= 32 ? small_slots : (big_slots.resize(ni), big_slots.data());
            for (Py_ssize_t i = 0; i < ni; ++i) {
              PyObject* o = PyTuple_GET_ITEM(ins.ptr(), i);
              if (PyLong_Check(o) || PyFloat_Check(o)) {
                const TensorType& t = P.input_types[i];
                AG_CHECK(t.rank() == 0, "run_tensors: input ", i, " is ", t.str(), ", not a number");
                void* slot = &slots[i];
                const bool is_int = PyLong_Check(o);
                const long long iv = is_int ? PyLong_AsLongLong(o) : 0;
                const double dv = is_int ? static_cast<double>(iv) : PyFloat_AsDouble(o);
                if (PyErr_Occurred()) throw nb::python_error();
                switch (t.dtype) {
                  case DType::i64: *static_cast<int64_t*>(slot) = is_int ? iv : static_cast<int64_t>(dv); break;
                  case DType::i32: *static_cast<int32_t*>(slot) = static_cast<int32_t>(is_int ? iv : dv); break;
                  case DType::f64: *static_cast<double*>(slot) = dv; break;
                  case DType::f32: *static_cast<float*>(slot) = static_cast<float>(dv); break;
                  case DType::b8: *static_cast<bool*>(slot) = dv != 0; break;
                  default: fail("run_tensors: input ", i, " is ", t.str(), "; a number cannot be passed for it");
                }
                ptrs[i] = slot;
              } else {
                ptrs[i] = ptr_of(o);
              }
            }
            for (Py_ssize_t i = 0; i < nr; ++i) ptrs[ni + i] = ptr_of(PyList_GET_ITEM(roots.ptr(), i));
            ThreadCountScope thread_count(threads);
            nb::gil_scoped_release nogil;
            e.run_into(const_cast<const void* const*>(ptrs), ptrs + ni);
          },
          nb::arg("inputs"), nb::arg("roots"), nb::arg("threads"), nb::arg("data_ptr_fn"), nb::arg("tensor_type"))
      .def("layout",
           [](PyExecutable& e) {
             // inputs: [(dtype, shape)], roots: [nbytes], outputs: [(root, byte offset, dtype, shape)];
             // an output computed in an input the graph writes has root -1 - (that input's index)
             const Program& P = *e.prog;
             nb::list ins, roots, outs;
             for (auto& t : P.input_types) ins.append(nb::make_tuple(dtype_name(t.dtype), t.shape()));
             for (size_t b : P.external_bytes) roots.append(b);
             for (auto& o : P.outputs) {
               AG_CHECK(o.kind == LocKind::External || o.kind == LocKind::Input, "output %", o.name,
                        " is not a fresh buffer");
               const int root = o.kind == LocKind::Input ? -1 - o.index : o.index;
               outs.append(nb::make_tuple(root, o.offset, dtype_name(o.type.dtype), o.type.shape()));
             }
             nb::dict d;
             d["inputs"] = ins;
             d["roots"] = roots;
             d["outputs"] = outs;
             return d;
           })
      .def("stats",
           [](PyExecutable& e) {
             nb::dict d;
             d["nodes"] = e.prog->stats.nodes;
             d["arena_bytes"] = e.prog->stats.arena_bytes;
             d["naive_bytes"] = e.prog->stats.naive_bytes;
             d["const_bytes"] = e.prog->stats.const_bytes;
             d["inplace"] = e.prog->stats.inplace;
             d["scratch_bytes"] = e.prog->scratch_bytes;
             d["executors"] = e.pool->size();
             return d;
           })
      .def("background_work",  // (kernels that left work for the background thread, of which still to do)
           [](PyExecutable& e) {
             const DeferredWork* d = e.prog->deferred.get();
             return d ? std::make_pair(d->size(), d->left()) : std::make_pair(size_t{0}, size_t{0});
           })
      .def("instructions",
           [](PyExecutable& e) {
             std::vector<std::tuple<std::string, std::string, std::string>> r;
             for (size_t i = 0; i < e.prog->instrs.size(); ++i)
               r.emplace_back(e.prog->instr_names[i], e.prog->instr_ops[i], e.prog->instrs[i].kernel->name());
             return r;
           })
      .def("set_profiling", [](PyExecutable& e, bool on) { e.profiling = on; })
      .def("last_times_ns",
           [](PyExecutable& e) {
             std::lock_guard<std::mutex> lk(e.last_mu);
             return e.last_times;
           })
      .def("last_starts_ns", [](PyExecutable& e) {
        std::lock_guard<std::mutex> lk(e.last_mu);
        return e.last_starts;
      });

  m.def("ops", [] {
    std::vector<std::string> r;
    for (auto* d : all_ops()) r.push_back(d->name);
    return r;
  });
  m.def("elementwise_ops", [] {  // outputs broadcast from the inputs' shapes
    std::vector<std::string> r;
    for (auto* d : all_ops())
      if (d->has(kElementwise)) r.push_back(d->name);
    return r;
  });
  m.def("set_num_threads", &set_num_threads);
  m.def("checksum64", [](uintptr_t addr, size_t nbytes) {  // (ir/serialize.h; the compile cache's weights check)
    return checksum64(reinterpret_cast<const void*>(addr), nbytes);
  });
  m.def("wait_background_idle", [] {  // until the background thread has nothing left to do
    nb::gil_scoped_release nogil;
    wait_background_idle();
  });
  m.def("stop_background", [] {  // (at exit: the running job may need the GIL to release tensors)
    nb::gil_scoped_release nogil;
    stop_background();
  });
  m.def("num_threads", &num_threads);
  m.def("pack_budget_used", &dnnl_util::pack_budget_used);  // bytes of optional packed copies (pack_budget_mb)
  m.def("pack_budget_refused", &dnnl_util::pack_budget_refused);  // (linears, bytes) left in place past it
  m.def("packed_weight_bytes", &dnnl_util::packed_weight_bytes);  // weights copied into kernels' layouts, live
  m.def("packed_weight_reuses", &dnnl_util::packed_weight_reuses);  // packed copies handed to another kernel
  m.def("output_cache_stats", [] {  // free blocks kept for the next outputs (base/memory.h)
    const OutputCacheStats s = output_cache_stats();
    return std::map<std::string, int64_t>{{"free_blocks", s.free_blocks}, {"free_bytes", s.free_bytes},
                                          {"hits", s.hits}, {"misses", s.misses},
                                          {"limit_bytes", static_cast<int64_t>(output_cache_limit())}};
  });
  m.def("release_output_cache", &release_output_cache);
  m.def("output_block", [](size_t nbytes) {  // a uint8 torch tensor of nbytes from the output cache
    std::shared_ptr<void> block = alloc_output(nbytes);
    void* data = block.get();
    auto* owner = new BufferOwner{std::move(block)};
    nb::capsule cap(owner, [](void* p) noexcept { delete static_cast<BufferOwner*>(p); });
    const size_t shape[1] = {nbytes};
    return nb::ndarray<nb::pytorch>(data, 1, shape, cap, nullptr, nb::dtype<uint8_t>(), nb::device::cpu::value).cast();
  });
  m.def("pass_names", &pass_names);
  // What a compiled graph saved by this build means: every op's name, arity, properties, fused
  // instruction code and epilogue flag, and the passes. The compile cache keys on it, so an entry
  // written by a build whose ops encode differently (instruction codes, post-op formats) is never
  // read by this one.
  m.def("engine_digest", [] {
    std::string text = "engine-format 1;";
    for (const OpDef* d : all_ops())
      text += std::string(d->name) + ":" + std::to_string(d->min_inputs) + "," + std::to_string(d->max_inputs) + "," +
              std::to_string(d->props) + "," + std::to_string(d->fused_code) + "," + std::to_string(d->epilogue) + ";";
    for (const std::string& p : pass_names()) text += p + ";";
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(checksum64(text.data(), text.size())));
    return std::string(hex);
  });
  // An airgraph file (ir/serialize.h): the graph, its producer and its metadata text. From a path
  // the file is mapped and its constants stay in the mapping; from bytes, constants written by
  // name come from resolve(name, dtype, shape) -> a contiguous array (or None: an error).
  m.def(
      "load_graph_file",
      [](const std::string& path, bool verify_data) {
        LoadedGraph l;
        {
          nb::gil_scoped_release nogil;
          l = load_graph_file(path, nullptr, verify_data);
        }
        auto p = new PyGraph();
        p->g = std::move(l.graph);
        p->packed = dnnl_util::adopt_packed(l);
        return nb::make_tuple(nb::cast(p, nb::rv_policy::take_ownership), l.producer, l.metadata);
      },
      nb::arg("path"), nb::arg("verify_data") = true);
  m.def(
      "load_graph_bytes",
      [](nb::bytes data, nb::object resolve) {
        ConstResolver r = [&](const std::string& name, const TensorType& t) -> std::shared_ptr<Storage> {
          if (resolve.is_none()) return nullptr;
          nb::object o = resolve(name, dtype_name(t.dtype), t.shape());
          if (o.is_none()) return nullptr;
          Arr a = nb::cast<Arr>(o);
          AG_CHECK(is_contiguous(a) && dtype_of(a.dtype()) == t.dtype && shape_of(a) == t.shape(), "constant '",
                   name, "' must be a contiguous ", t.str());
          auto s = std::make_shared<Storage>();
          s->data = a.data();
          s->nbytes = t.nbytes();
          s->from_weights = true;  // bound by name: the caller's weights
          s->owner = std::shared_ptr<void>(new nb::object(o), [](void* p) {
            nb::gil_scoped_acquire gil;
            delete static_cast<nb::object*>(p);
          });
          return s;
        };
        LoadedGraph l = load_graph(data.c_str(), data.size(), nullptr, r);
        auto p = new PyGraph();
        p->g = std::move(l.graph);
        return nb::make_tuple(nb::cast(p, nb::rv_policy::take_ownership), l.producer, l.metadata);
      },
      nb::arg("data"), nb::arg("resolve") = nb::none());
  // Op plugins (kernels/plugin.h): load one into this extension's registry -> (name, version, ops)
  m.def("load_library", [](const std::string& path) {
    const PluginInfo& p = load_plugin(path);
    return nb::make_tuple(p.name, p.version, p.ops);
  });
  m.def("loaded_plugins", [] {  // [(name, version, [(op, fused code)])]
    std::vector<std::tuple<std::string, std::string, std::vector<std::pair<std::string, int64_t>>>> r;
    for (const PluginInfo& p : loaded_plugins()) {
      std::vector<std::pair<std::string, int64_t>> ops;
      for (const std::string& o : p.ops) ops.emplace_back(o, find_op(o)->fused_code);
      r.emplace_back(p.name, p.version, std::move(ops));
    }
    return r;
  });
  m.def("sdpa_short_max_keys", &sdpa_short_max_keys);  // tests: the keys the one-kernel path takes (by ISA)
  m.def("sdpa_kv_split_runs", &sdpa_kv_split_runs);  // tests: attention runs that split the keys
  m.def("sdpa_keys_skipped", &sdpa_keys_skipped);  // tests: keys a bool mask let the row kernel skip
}
