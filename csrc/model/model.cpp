// Model: a loaded airgraph file that binds its symbols from input shapes, checks
// the inputs, compiles one program per binding (LRU) and runs it on a pool of
// executors. See model.h.
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "ir/serialize.h"
#include "kernels/onednn_util.h"
#include "passes/passes.h"
#include "base/parallel.h"

namespace ag {

namespace {

std::string dims_str(const std::vector<std::string>& text, const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += dims[i] >= 0 ? std::to_string(dims[i]) : text[i];
  }
  return s + "]";
}

ModelTensorInfo info_of(const Graph& g, const Value* v) {
  ModelTensorInfo t;
  t.name = v->name;
  t.dtype = v->type.dtype;
  const auto* ex = g.dim_exprs(v);
  for (size_t d = 0; d < v->type.dims.size(); ++d) {
    const Dim& dim = v->type.dims[d];
    if (ex && (*ex)[d] >= 0) {
      t.dims.push_back(-1);
      t.dim_text.push_back(g.exprs()[(*ex)[d]].text);
    } else if (!ex && !dim.is_static() && g.is_symbolic()) {  // an output with no dim expressions
      t.dims.push_back(-1);
      t.dim_text.push_back(dim.sym < static_cast<int32_t>(g.symbols().size()) ? g.symbols()[dim.sym] : "?");
    } else {
      t.dims.push_back(dim.value);
      t.dim_text.push_back("");
    }
  }
  return t;
}

}  // namespace

std::string ModelTensorInfo::str() const {
  return name + ": " + dtype_name(dtype) + dims_str(dim_text, dims);
}

size_t ModelOutput::nbytes() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return static_cast<size_t>(n) * dtype_size(dtype);
}

std::shared_ptr<Model> Model::load_file(const std::string& path) {
  LoadedGraph lg = load_graph_file(path, nullptr);
  try {
    auto m = std::shared_ptr<Model>(new Model(std::move(lg.graph), std::move(lg.producer), std::move(lg.metadata)));
    m->packed_ = dnnl_util::adopt_packed(lg);  // (kernels/onednn_util.h: served from the mapping, not copied)
    return m;
  } catch (const Error& e) {
    fail(e.what(), " (", path, ")");
  }
}

std::shared_ptr<Model> Model::load_bytes(const void* data, size_t size, std::shared_ptr<void> keep) {
  if (!keep) {  // a 64-byte aligned copy, so that constants are served from it in place
    auto s = Storage::allocate(size);
    if (size) std::memcpy(s->data, data, size);
    data = s->data;
    keep = std::shared_ptr<void>(s, s->data);
  }
  LoadedGraph lg = load_graph(data, size, std::move(keep), nullptr);
  return std::shared_ptr<Model>(new Model(std::move(lg.graph), std::move(lg.producer), std::move(lg.metadata)));
}

Model::Model(std::unique_ptr<Graph> g, std::string producer, std::string metadata)
    : graph_(std::move(g)), producer_(std::move(producer)), metadata_(std::move(metadata)) {
  const Graph& G = *graph_;
  for (const Value* v : G.inputs()) inputs_.push_back(info_of(G, v));
  for (const Value* v : G.outputs()) outputs_.push_back(info_of(G, v));
  for (const auto& w : G.input_writes()) inputs_[w.input].written_by_output = w.output;
  bare_.assign(G.exprs().size(), -1);
  for (size_t e = 0; e < G.exprs().size(); ++e) {
    const auto& code = G.exprs()[e].code;
    if (code.size() == 2 && code[0] == kSym) bare_[e] = static_cast<int>(code[1]);
  }
  std::vector<char> given(G.symbols().size(), 0);
  for (const Value* v : G.inputs())
    if (const auto* ex = G.dim_exprs(v))
      for (int32_t e : *ex)
        if (e >= 0 && bare_[e] >= 0) given[bare_[e]] = 1;
  for (size_t s = 0; s < given.size(); ++s) {
    if (!given[s]) given[s] = solve_from_a_dim(static_cast<int>(s));
    AG_CHECK(given[s], "airgraph model: symbol '", G.symbols()[s],
             "' is not the size of any input dim, nor a * ", G.symbols()[s],
             " + b of one, so input shapes cannot bind it (inputs: ",
             [&] {
               std::string all;
               for (const auto& i : inputs_) all += (all.empty() ? "" : ", ") + i.str();
               return all;
             }(),
             ")");
  }
}

bool Model::solve_from_a_dim(int s) {
  const Graph& G = *graph_;
  for (size_t i = 0; i < G.inputs().size(); ++i) {
    const auto* ex = G.dim_exprs(G.inputs()[i]);
    if (!ex) continue;
    for (size_t d = 0; d < ex->size(); ++d) {
      const int32_t e = (*ex)[d];
      if (e < 0) continue;
      const auto& code = G.exprs()[e].code;
      bool only_s = false, other = false;
      for (size_t k = 0; k + 1 < code.size(); ++k)
        if (code[k] == kConst) {
          ++k;  // (its operand)
        } else if (code[k] == kSym) {
          (code[k + 1] == s ? only_s : other) = true;
          ++k;
        }
      if (!only_s || other) continue;
      // f(x) = a * x + b: probed at a few points (a floor division or a max is not affine there)
      std::vector<int64_t> at(G.symbols().size(), 0);
      auto f = [&](int64_t x) {
        at[s] = x;
        return eval_size_expr(G.exprs()[e], at);
      };
      try {
        const int64_t b = f(0), a = f(1) - b;
        if (a == 0 || f(2) != 2 * a + b || f(7) != 7 * a + b || f(64) != 64 * a + b || f(1001) != 1001 * a + b)
          continue;
        affine_.push_back(Affine{s, i, d, e, a, b});
        return true;
      } catch (const Error&) {  // (a division by zero at a probe)
        continue;
      }
    }
  }
  return false;
}

std::vector<int64_t> Model::bind(const std::vector<Shape>& shapes) const {
  const Graph& G = *graph_;
  AG_CHECK(shapes.size() == inputs_.size(), "airgraph model: takes ", inputs_.size(), " inputs, got ",
           shapes.size());
  const size_t nsym = G.symbols().size();
  std::vector<int64_t> sizes(nsym, -1);
  std::vector<std::string> from(nsym);  // where each symbol was bound, for errors
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ModelTensorInfo& in = inputs_[i];
    AG_CHECK(shapes[i].size() == in.dims.size(), "airgraph model: input '", in.name, "' has rank ", shapes[i].size(),
             " (shape ", shape_str(shapes[i]), "), expected rank ", in.dims.size(), " (", in.str(), ")");
    for (size_t d = 0; d < shapes[i].size(); ++d)
      AG_CHECK(shapes[i][d] >= 0, "airgraph model: input '", in.name, "' dim ", d, " has negative size ",
               shapes[i][d]);
    const auto* ex = G.dim_exprs(G.inputs()[i]);
    if (!ex) continue;
    for (size_t d = 0; d < ex->size(); ++d) {
      int32_t e = (*ex)[d];
      if (e < 0 || bare_[e] < 0) continue;
      int s = bare_[e];
      int64_t got = shapes[i][d];
      std::string here = "input '" + in.name + "' dim " + std::to_string(d);
      if (sizes[s] < 0) {
        sizes[s] = got;
        from[s] = here;
      } else {
        AG_CHECK(sizes[s] == got, "airgraph model: ", here, " is ", G.symbols()[s], " = ", got, ", but ", from[s],
                 " gave ", G.symbols()[s], " = ", sizes[s]);
      }
    }
  }
  for (const Affine& f : affine_) {  // (a derived dim: the symbol from a * symbol + b, checked below)
    const int64_t got = shapes[f.input][f.dim];
    AG_CHECK((got - f.b) % f.a == 0 && (got - f.b) / f.a >= 0, "airgraph model: input '", inputs_[f.input].name,
             "' dim ", f.dim, " is ", got, ", which is not ", G.exprs()[f.expr].text, " for any size ",
             G.symbols()[f.sym], " (shape ", shape_str(shapes[f.input]), ", expected ", inputs_[f.input].str(), ")");
    sizes[f.sym] = (got - f.b) / f.a;
  }
  std::string binding;
  for (size_t s = 0; s < nsym; ++s) binding += (s ? ", " : "") + G.symbols()[s] + "=" + std::to_string(sizes[s]);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ModelTensorInfo& in = inputs_[i];
    const auto* ex = G.dim_exprs(G.inputs()[i]);
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      int32_t e = ex ? (*ex)[d] : -1;
      int64_t want;
      if (e < 0) {
        want = in.dims[d];
      } else {
        try {
          want = eval_size_expr(G.exprs()[e], sizes);
        } catch (const Error& err) {
          fail("airgraph model: input '", in.name, "' dim ", d, ": its size ", G.exprs()[e].text,
               " cannot be evaluated at ", binding, ": ", err.what());
        }
      }
      if (want != shapes[i][d]) {
        if (e < 0)
          fail("airgraph model: input '", in.name, "' dim ", d, ": expected ", want, ", got ", shapes[i][d],
               " (shape ", shape_str(shapes[i]), ", expected ", in.str(), ")");
        fail("airgraph model: input '", in.name, "' dim ", d, ": expected ", G.exprs()[e].text, " = ", want, " at ",
             binding, ", got ", shapes[i][d], " (shape ", shape_str(shapes[i]), ", expected ", in.str(), ")");
      }
    }
  }
  return sizes;
}

void Model::check_input(size_t i, const HostTensor& t) const {
  const ModelTensorInfo& in = inputs_[i];
  AG_CHECK(t.dtype == in.dtype, "airgraph model: input '", in.name, "' has dtype ", dtype_name(t.dtype),
           ", expected ", dtype_name(in.dtype), " (", in.str(), ")");
  int64_t n = 1;
  for (int64_t d : t.shape) n *= std::max<int64_t>(d, 0);
  AG_CHECK(t.data != nullptr || n == 0, "airgraph model: input '", in.name, "' has no data (null pointer)");
}

std::shared_ptr<Model::Compiled> Model::compiled_for(const std::vector<int64_t>& sizes) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find_if(lru_.begin(), lru_.end(), [&](const auto& s) { return s->sizes == sizes; });
    if (it != lru_.end()) {
      slot = *it;
      lru_.splice(lru_.begin(), lru_, it);
    } else {
      slot = std::make_shared<Slot>();
      slot->sizes = sizes;
      lru_.push_front(slot);
      if (lru_.size() > kMaxPrograms) lru_.pop_back();  // callers running it keep it alive
    }
  }
  std::lock_guard<std::mutex> lk(slot->mu);
  if (!slot->compiled) {
    try {
      auto g = graph_->instantiate(sizes);
      run_pipeline(*g, PipelineOptions{});
      auto c = std::make_shared<Compiled>();
      CompileOptions o;
      o.kernels = &kernels_;
      c->program = compile_program(*g, o);
      c->pool = std::make_unique<ExecutorPool>(c->program, arena_);
      slot->compiled = std::move(c);
    } catch (...) {
      std::lock_guard<std::mutex> lk2(mu_);
      lru_.remove(slot);
      throw;
    }
  }
  return slot->compiled;
}

std::vector<ModelOutput> Model::run(const std::vector<HostTensor>& inputs, int threads) {
  AG_CHECK(inputs.size() == inputs_.size(), "airgraph model: takes ", inputs_.size(), " inputs, got ",
           inputs.size());
  std::vector<Shape> shapes(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_input(i, inputs[i]);
    shapes[i] = inputs[i].shape;
  }
  std::vector<int64_t> sizes = bind(shapes);
  std::shared_ptr<Compiled> c = compiled_for(sizes);
  const Program& P = *c->program;
  std::vector<void*> ptrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    AG_CHECK(P.input_types[i].dtype == inputs[i].dtype && P.input_types[i].shape() == inputs[i].shape,
             "airgraph model: internal: input '", inputs_[i].name, "' is compiled as ", P.input_types[i].str());
    ptrs[i] = inputs[i].data;
  }
  ThreadCountScope thread_count(threads);
  std::vector<OutBuffer> outs;
  {
    ExecutorPool::Lease ex = c->pool->acquire();
    outs = ex->run(ptrs);
  }
  std::vector<ModelOutput> res(outs.size());
  for (size_t k = 0; k < outs.size(); ++k) {
    ModelOutput& o = res[k];
    o.data = outs[k].data;
    o.dtype = outs[k].type.dtype;
    o.shape = outs[k].type.shape();
    if (P.outputs[k].kind == LocKind::Input) {
      o.written_input = P.outputs[k].index;
    } else {
      o.owner = outs[k].owner;
      // a constant returned as is: keep the program (and so its constants) alive
      if (!o.owner) o.owner = std::shared_ptr<void>(c, nullptr);
    }
  }
  // inputs the graph writes but the program did not compute in place: copy the new value back
  for (const auto& w : graph_->input_writes()) {
    const OutputSpec& spec = P.outputs[w.output];
    if (spec.kind == LocKind::Input && spec.index == w.input) continue;
    const ModelOutput& o = res[w.output];
    AG_CHECK(o.dtype == inputs[w.input].dtype && o.shape == inputs[w.input].shape, "airgraph model: output ",
             w.output, " (", outputs_[w.output].name, ") does not have the type of the input '",
             inputs_[w.input].name, "' it writes");
    if (o.nbytes()) std::memmove(inputs[w.input].data, o.data, o.nbytes());
  }
  return res;
}

size_t Model::num_programs() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

}  // namespace ag
