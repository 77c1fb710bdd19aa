#include "ir/graph.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <unordered_set>

#include "base/error.h"
#include "base/memory.h"
#include "ir/op_registry.h"

namespace ag {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  auto s = std::make_shared<Storage>();
  s->owner = alloc_aligned(nbytes);
  s->data = s->owner.get();
  std::memset(s->data, 0, (nbytes + 63) / 64 * 64);
  s->nbytes = nbytes;
  return s;
}

std::string Node::context() const {
  std::ostringstream os;
  os << "node '" << name << "' (op " << (op ? op->name : "?") << ")";
  if (!inputs.empty()) {
    os << ", inputs ";
    for (size_t i = 0; i < inputs.size(); ++i) os << (i ? ", " : "") << inputs[i]->type.str();
  }
  if (!outputs.empty()) {
    os << ", outputs ";
    for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : "") << outputs[i]->type.str();
  }
  if (!attrs.items().empty()) os << ", attrs {" << attrs.str() << "}";
  if (!source.empty()) os << "\n  at " << source;
  return os.str();
}

Value* Graph::new_value(ValueKind k, const TensorType& t, const std::string& name) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->kind = k;
  v->type = t;
  v->name = name;
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(const TensorType& t, const std::string& name) {
  Value* v = new_value(ValueKind::Input, t, name);
  inputs_.push_back(v);
  return v;
}

std::vector<std::string> weight_sources(const Value* v) {
  if (!v->is_const() || !v->storage || !v->storage->from_weights) return {};
  if (!v->storage->derived_from.empty()) return v->storage->derived_from;
  return {v->name};
}

void mark_derived(Storage& s, const std::vector<Value*>& inputs) {
  std::vector<std::string> names;
  for (const Value* v : inputs)
    for (std::string& n : weight_sources(v))
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(std::move(n));
  s.from_weights = !names.empty();
  s.derived_from = std::move(names);
}

Value* Graph::add_const(const TensorType& t, std::shared_ptr<Storage> s, const std::string& name) {
  AG_CHECK(s && s->nbytes >= t.nbytes(), "constant '", name, "' of type ", t.str(), " has ", s ? s->nbytes : 0,
           " bytes of data");
  Value* v = new_value(ValueKind::Const, t, name);
  v->storage = std::move(s);
  return v;
}

int Graph::add_expr(SizeExpr e) {
  check_size_expr(e, symbols_.size());
  exprs_.push_back(std::move(e));
  return static_cast<int>(exprs_.size()) - 1;
}

void Graph::add_guard(Guard g) {
  AG_CHECK(g.expr >= 0 && g.expr < static_cast<int32_t>(exprs_.size()), "guard '", g.text, "': no size expression ",
           g.expr);
  AG_CHECK(static_cast<uint8_t>(g.rel) <= static_cast<uint8_t>(Rel::ge), "guard '", g.text, "': bad relation");
  guards_.push_back(std::move(g));
}

const Graph::Guard* Graph::failed_guard(const std::vector<int64_t>& sizes) const {
  for (const Guard& g : guards_) {
    const int64_t v = eval_size_expr(exprs_[g.expr], sizes);
    bool r = false;
    switch (g.rel) {
      case Rel::eq: r = v == 0; break;
      case Rel::ne: r = v != 0; break;
      case Rel::lt: r = v < 0; break;
      case Rel::le: r = v <= 0; break;
      case Rel::gt: r = v > 0; break;
      case Rel::ge: r = v >= 0; break;
    }
    if (r != g.outcome) return &g;
  }
  return nullptr;
}

void Graph::rename_symbols(const std::vector<std::string>& names) {
  AG_CHECK(names.size() == symbols_.size(), "rename_symbols: ", names.size(), " names for ", symbols_.size(),
           " symbols");
  symbols_ = names;
}

void Graph::set_dim_exprs(Value* v, std::vector<int32_t> exprs) {
  AG_CHECK(static_cast<int64_t>(exprs.size()) == v->type.rank(), "value %", v->name, " has rank ", v->type.rank(),
           ", got ", exprs.size(), " dim expressions");
  for (int32_t e : exprs)
    AG_CHECK(e >= -1 && e < static_cast<int32_t>(exprs_.size()), "value %", v->name, ": no size expression ", e);
  if (v->id >= static_cast<int>(dim_exprs_.size())) dim_exprs_.resize(values_.size());
  auto& slot = dim_exprs_[v->id];
  num_dim_exprs_ += slot.empty() - exprs.empty();
  slot = std::move(exprs);
}

std::vector<SymAttr> Graph::shape_sym_attrs(const Value* v, const std::string& key) const {
  std::vector<SymAttr> r;
  if (const auto* ex = dim_exprs(v))
    for (size_t i = 0; i < ex->size(); ++i)
      if ((*ex)[i] >= 0) r.push_back(SymAttr{key, static_cast<int32_t>(i), (*ex)[i]});
  return r;
}

static std::string dims_text(const std::vector<int64_t>& d) { return shape_str(d); }

std::unique_ptr<Graph> Graph::instantiate(const std::vector<int64_t>& sizes) const {
  AG_CHECK(sizes.size() == symbols_.size(), "instantiate: ", sizes.size(), " sizes for ", symbols_.size(),
           " symbols");
  if (const Guard* g = failed_guard(sizes)) {
    std::string binding;
    for (size_t i = 0; i < sizes.size(); ++i) binding += (i ? ", " : "") + symbols_[i] + "=" + std::to_string(sizes[i]);
    fail("at sizes ", binding, ": outside the sizes this graph was made for: it needs ", g->text, " to be ",
         g->outcome ? "true" : "false", " (a decision its lowering took, or the range its sizes were exported "
         "with); trace or export it with example inputs of such sizes");
  }
  return replay(&sizes);
}

std::unique_ptr<Graph> Graph::clone() const { return replay(nullptr); }

// Replays the graph: inputs, constants (sharing their bytes), then the nodes in their order,
// each value under its own id (ids of values whose node a pass removed stay, unused). With
// `sizes`, every expression is evaluated there and every type inferred again; without, the
// copy keeps the expressions.
std::unique_ptr<Graph> Graph::replay(const std::vector<int64_t>* sizes) const {
  const bool keep = sizes == nullptr;
  std::vector<int64_t> val(keep ? 0 : exprs_.size());
  for (size_t i = 0; i < val.size(); ++i) val[i] = eval_size_expr(exprs_[i], *sizes);
  auto dims_of = [&](const Value* v) {
    std::vector<int64_t> d = v->type.shape();
    if (const auto* ex = dim_exprs(v))
      for (size_t i = 0; i < d.size(); ++i)
        if ((*ex)[i] >= 0) d[i] = val[(*ex)[i]];
    return d;
  };
  std::string binding;
  for (size_t i = 0; !keep && i < sizes->size(); ++i)
    binding += (i ? ", " : "") + symbols_[i] + "=" + std::to_string((*sizes)[i]);
  auto out = std::make_unique<Graph>();
  if (keep) {
    out->symbols_ = symbols_;
    out->exprs_ = exprs_;
    out->guards_ = guards_;
  }
  out->values_.reserve(values_.size());
  // placeholders keep every id; the values a pass left unused stay bare
  for (size_t i = 0; i < values_.size(); ++i) out->new_value(ValueKind::NodeOutput, TensorType{}, std::string{});
  std::vector<char> live(values_.size(), 0);
  for (const Value* v : inputs_) {
    Value* w = out->values_[v->id].get();
    w->kind = ValueKind::Input;
    w->name = v->name;
    w->type = v->type;
    if (!keep) {
      for (int64_t d : dims_of(v)) AG_CHECK(d >= 0, "input %", v->name, " gets a negative size with ", binding);
      w->type = TensorType(v->type.dtype, dims_of(v));
    }
    out->inputs_.push_back(w);
    live[v->id] = 1;
  }
  for (auto& v : values_)
    if (v->kind == ValueKind::Const) {
      Value* w = out->values_[v->id].get();
      w->kind = ValueKind::Const;
      w->storage = v->storage;
      w->name = v->name;
      w->type = v->type;
      live[v->id] = 1;
    }
  for (auto& n : nodes_) {
    Attrs a = n->attrs;
    for (const SymAttr& s : n->sym_attrs) {
      if (keep) break;
      int64_t x = val[s.expr];
      if (s.index < 0) {
        a.set(s.key, x);
      } else {
        std::vector<int64_t> ints = a.ints(s.key);
        AG_CHECK(s.index < static_cast<int32_t>(ints.size()), "instantiate: attribute ", s.key, "[", s.index,
                 "] of node '", n->name, "' is out of range");
        ints[s.index] = x;
        a.set(s.key, ints);
      }
    }
    std::vector<Value*> ins, outs;
    for (Value* x : n->inputs) {
      AG_CHECK(live[x->id], "instantiate: node '", n->name, "' uses %", x->name, " before it is defined");
      ins.push_back(out->values_[x->id].get());
    }
    for (Value* o : n->outputs) {
      outs.push_back(out->values_[o->id].get());
      outs.back()->name = o->name;
    }
    Node* m;
    try {
      m = out->make_node(n->op->name, ins, std::move(a), n->name, n->source, &outs);
    } catch (const Error& e) {
      fail("at sizes ", binding, ": ", e.what());
    }
    m->id = n->id;
    m->sized = n->sized || !n->sym_attrs.empty();
    if (keep) m->sym_attrs = n->sym_attrs;
    out->nodes_.emplace_back(m);
    for (Value* o : n->outputs) live[o->id] = 1;
  }
  out->next_node_id_ = next_node_id_;
  for (size_t id = 0; id < dim_exprs_.size(); ++id) {
    if (dim_exprs_[id].empty() || !live[id]) continue;
    const Value* v = values_[id].get();
    if (keep) {
      out->set_dim_exprs(out->values_[id].get(), dim_exprs_[id]);
      continue;
    }
    if (v->kind == ValueKind::Input) continue;
    std::vector<int64_t> want = dims_of(v), got = out->values_[id]->type.shape();
    if (want != got) {
      const Value* w = out->values_[id].get();
      std::string where = w->producer ? w->producer->context() : "%" + v->name;
      fail("at sizes ", binding, ": %", v->name, " should have shape ", dims_text(want), " but the engine infers ",
           dims_text(got), " for ", where);
    }
  }
  std::vector<Value*> outs;
  for (Value* v : outputs_) {
    AG_CHECK(live[v->id], "instantiate: graph output %", v->name, " is never defined");
    outs.push_back(out->values_[v->id].get());
  }
  out->set_outputs(outs);
  out->input_writes_ = input_writes_;
  return out;
}

int Graph::add_symbol(const std::string& name) {
  symbols_.push_back(name);
  return static_cast<int>(symbols_.size()) - 1;
}

Node* Graph::make_node(const std::string& opname, const std::vector<Value*>& inputs, Attrs attrs,
                       const std::string& name, const std::string& source, const std::vector<Value*>* outputs) {
  const OpDef* op = find_op(opname);
  auto node = std::make_unique<Node>();
  node->op = op;
  node->inputs = inputs;
  node->attrs = std::move(attrs);
  node->name = name.empty() ? opname + "_" + std::to_string(next_node_id_) : name;
  node->source = source;
  if (!op) fail("unknown op '", opname, "' for ", node->context());
  int n = static_cast<int>(inputs.size());
  if (n < op->min_inputs || (op->max_inputs >= 0 && n > op->max_inputs))
    fail("op ", op->name, " takes ", op->min_inputs, "..", op->max_inputs, " inputs, got ", n, ": ", node->context());
  for (Value* v : inputs) AG_CHECK(v != nullptr, "null input for ", node->context());
  std::vector<TensorType> in_types;
  in_types.reserve(inputs.size());
  for (Value* v : inputs) in_types.push_back(v->type);
  std::vector<TensorType> out_types;
  try {
    out_types = op->infer(in_types, node->attrs);
  } catch (const Error& e) {
    fail(e.what(), "\n  in ", node->context());
  }
  for (auto& t : out_types) {  // (a corrupt file's attributes may ask for any size)
    int64_t bytes = static_cast<int64_t>(dtype_size(t.dtype));
    for (auto& d : t.dims)
      AG_CHECK(d.value >= 0 && !__builtin_mul_overflow(bytes, d.value, &bytes), "size ", t.str(), " inferred for ",
               node->context(), " is negative or does not fit in 64 bits");
  }
  if (outputs)
    AG_CHECK(outputs->size() == out_types.size(), "op ", op->name, " gives ", out_types.size(), " outputs, not ",
             outputs->size(), ": ", node->context());
  node->id = next_node_id_++;
  for (size_t i = 0; i < out_types.size(); ++i) {
    Value* v;
    if (outputs) {
      v = (*outputs)[i];
      v->type = out_types[i];
    } else {
      v = new_value(ValueKind::NodeOutput, out_types[i],
                    node->name + (out_types.size() > 1 ? "." + std::to_string(i) : ""));
    }
    v->producer = node.get();
    v->output_index = static_cast<int>(i);
    node->outputs.push_back(v);
  }
  Node* raw = node.release();
  return raw;
}

Node* Graph::add_node(const std::string& op, const std::vector<Value*>& inputs, Attrs attrs, const std::string& name,
                      const std::string& source) {
  Node* n = make_node(op, inputs, std::move(attrs), name, source);
  nodes_.emplace_back(n);
  return n;
}

Node* Graph::insert_node_before(Node* before, const std::string& op, const std::vector<Value*>& inputs, Attrs attrs,
                                const std::string& name, const std::string& source) {
  Node* n = make_node(op, inputs, std::move(attrs), name, source);
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](auto& p) { return p.get() == before; });
  nodes_.insert(it, std::unique_ptr<Node>(n));
  return n;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (num_dim_exprs_ > 0 && to->kind != ValueKind::Input && dim_exprs(from) && !dim_exprs(to) &&
      from->type.rank() == to->type.rank())
    set_dim_exprs(to, *dim_exprs(from));
  for (auto& n : nodes_)
    for (auto& v : n->inputs)
      if (v == from) v = to;
  for (auto& v : outputs_)
    if (v == from) v = to;
}

int Graph::remove_nodes_if(const std::function<bool(const Node&)>& dead) {
  size_t before = nodes_.size();
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return dead(*n); }), nodes_.end());
  return static_cast<int>(before - nodes_.size());
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> c(values_.size(), 0);
  for (auto& n : nodes_)
    for (Value* v : n->inputs) c[v->id]++;
  for (Value* v : outputs_) c[v->id]++;
  return c;
}

static std::string vname(const Value* v) { return "%" + v->name; }

std::string Graph::str() const {
  std::ostringstream os;
  auto dims_with_exprs = [&](const Value* v) {  // "float32[s0, 4]" where dims are expressions
    const auto* ex = dim_exprs(v);
    if (!ex) return v->type.str();
    std::string t = std::string(dtype_name(v->type.dtype)) + "[";
    for (size_t i = 0; i < ex->size(); ++i)
      t += (i ? ", " : "") + ((*ex)[i] >= 0 ? exprs_[(*ex)[i]].text : std::to_string(v->type.size(i)));
    return t + "]";
  };
  os << "graph(";
  for (size_t i = 0; i < inputs_.size(); ++i)
    os << (i ? ", " : "") << vname(inputs_[i]) << ": " << dims_with_exprs(inputs_[i]);
  os << ") {\n";
  if (!symbols_.empty()) {
    os << "  symbols:";
    for (auto& s : symbols_) os << " " << s;
    os << "\n";
  }
  for (const Guard& g : guards_) os << "  guard: " << g.text << " is " << (g.outcome ? "true" : "false") << "\n";
  std::unordered_set<const Value*> consts;
  for (auto& n : nodes_)
    for (Value* v : n->inputs)
      if (v->is_const() && consts.insert(v).second)
        os << "  " << vname(v) << ": " << v->type.str() << " = constant\n";
  for (auto& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i)
      os << (i ? ", " : "") << vname(n->outputs[i]) << ": " << dims_with_exprs(n->outputs[i]);
    os << " = " << n->op->name << "(";
    for (size_t i = 0; i < n->inputs.size(); ++i) os << (i ? ", " : "") << vname(n->inputs[i]);
    os << ")";
    if (!n->attrs.items().empty()) os << " {" << n->attrs.str() << "}";
    if (!n->sym_attrs.empty()) {
      os << " sizes {";
      for (size_t i = 0; i < n->sym_attrs.size(); ++i) {
        const SymAttr& a = n->sym_attrs[i];
        os << (i ? ", " : "") << a.key;
        if (a.index >= 0) os << "[" << a.index << "]";
        os << "=" << exprs_[a.expr].text;
      }
      os << "}";
    }
    if (!n->source.empty()) {
      std::string src = n->source.substr(0, n->source.find('\n'));
      os << "  # " << src;
    }
    os << "\n";
  }
  os << "  return ";
  for (size_t i = 0; i < outputs_.size(); ++i) os << (i ? ", " : "") << vname(outputs_[i]);
  os << "\n";
  for (const InputWrite& w : input_writes_)
    os << "  write " << vname(inputs_[w.input]) << " <- " << vname(outputs_[w.output]) << "\n";
  os << "}\n";
  return os.str();
}

void Graph::verify() const {
  std::unordered_set<const Value*> defined;
  for (Value* v : inputs_) defined.insert(v);
  for (auto& n : nodes_) {
    AG_CHECK(n->op != nullptr, "verifier: node '", n->name, "' has no op");
    for (Value* v : n->inputs) {
      AG_CHECK(v != nullptr, "verifier: null input in ", n->context());
      AG_CHECK(v->is_const() || defined.count(v), "verifier: input %", v->name, " used before it is defined in ",
               n->context());
    }
    std::vector<TensorType> in;
    for (Value* v : n->inputs) in.push_back(v->type);
    std::vector<TensorType> out;
    try {
      out = n->op->infer(in, n->attrs);
    } catch (const Error& e) {
      fail("verifier: ", e.what(), "\n  in ", n->context());
    }
    AG_CHECK(out.size() == n->outputs.size(), "verifier: output count changed for ", n->context());
    for (size_t i = 0; i < out.size(); ++i) {
      AG_CHECK(out[i] == n->outputs[i]->type, "verifier: output ", i, " should be ", out[i].str(), " in ",
               n->context());
      AG_CHECK(n->outputs[i]->producer == n.get(), "verifier: output ", i, " has the wrong producer in ", n->context());
      defined.insert(n->outputs[i]);
    }
  }
  for (Value* v : outputs_)
    AG_CHECK(v->is_const() || defined.count(v), "verifier: graph output %", v->name, " is never defined");
  std::unordered_set<int> written;
  for (const InputWrite& w : input_writes_) {
    AG_CHECK(w.input >= 0 && w.input < static_cast<int>(inputs_.size()) && w.output >= 0 &&
                 w.output < static_cast<int>(outputs_.size()),
             "verifier: input write ", w.input, " <- output ", w.output, " is out of range");
    AG_CHECK(written.insert(w.input).second, "verifier: input %", inputs_[w.input]->name, " is written twice");
    AG_CHECK(inputs_[w.input]->type == outputs_[w.output]->type, "verifier: input %", inputs_[w.input]->name, " ",
             inputs_[w.input]->type.str(), " is written with %", outputs_[w.output]->name, " ",
             outputs_[w.output]->type.str());
  }
}

}  // namespace ag
