// The IR: a Graph owns Values and Nodes. Nodes are kept in topological order
// (the order the front built them, kept by every pass). A Value is a graph
// input, a constant (parameter, buffer or folded tensor, with its bytes), or the
// output of a node. Every node remembers the FX node it came from and the user's
// source line so that errors and dumps can point back at the model code.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "ir/size_expr.h"
#include "ir/types.h"

namespace ag {

struct OpDef;
struct Node;

// Bytes a constant points at. `owner` keeps foreign memory (a torch tensor that
// came through DLPack) alive; engine-made constants own their buffer through it.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<void> owner;
  // The bytes are the caller's weights (bound by the front), or were computed from them by a
  // pass: another process may bind other values under the same names, so such bytes are never
  // written into a file that is reused (the compile cache) except by name.
  bool from_weights = false;
  // For bytes a pass computed from the weights: the names of the weights they came from (empty
  // for a weight itself, whose name is its value's).
  std::vector<std::string> derived_from;
  static std::shared_ptr<Storage> allocate(size_t nbytes);  // 64-byte aligned, zeroed
};

enum class ValueKind : uint8_t { Input, Const, NodeOutput };

struct Value;
// The weights a constant holds or was computed from: its own name for a weight, else the names its
// bytes were derived from (see Storage::from_weights).
std::vector<std::string> weight_sources(const Value* v);
// Records that `s` was computed from `inputs`.
void mark_derived(Storage& s, const std::vector<Value*>& inputs);

struct Value {
  int id = -1;
  ValueKind kind = ValueKind::NodeOutput;
  TensorType type;
  Node* producer = nullptr;
  int output_index = 0;
  std::shared_ptr<Storage> storage;  // constants only
  std::string name;
  bool is_const() const { return kind == ValueKind::Const; }
};

// An integer attribute that depends on the symbols: attrs[key] (index < 0) or
// attrs[key][index] is Graph::exprs()[expr] in every binding.
struct SymAttr {
  std::string key;
  int32_t index = -1;
  int32_t expr = -1;
  bool operator==(const SymAttr& o) const { return key == o.key && index == o.index && expr == o.expr; }
};

struct Node {
  int id = -1;
  const OpDef* op = nullptr;
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  Attrs attrs;
  std::string name;    // FX node name
  std::string source;  // user source line ("file.py:12 in forward: x = ...")
  std::vector<SymAttr> sym_attrs;  // symbolic graphs only; attrs hold the values of the graph's own binding
  // An instance's node whose attributes were sizes of the symbols (it had sym_attrs): not folded
  // into a constant, so that an instance optimizes like the symbolic graph does (see fold_constants)
  bool sized = false;
  Value* out(int i = 0) const { return outputs[i]; }
  std::string context() const;  // op, name, input/output types and source, for errors
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_input(const TensorType& t, const std::string& name);
  Value* add_const(const TensorType& t, std::shared_ptr<Storage> s, const std::string& name);
  // Creates a node, runs the op's shape/dtype inference and creates its outputs.
  // Errors name the node; the graph is unchanged when it throws.
  Node* add_node(const std::string& op, const std::vector<Value*>& inputs, Attrs attrs,
                 const std::string& name = "", const std::string& source = "");
  // Same, but inserted right before `before` in the node order.
  Node* insert_node_before(Node* before, const std::string& op, const std::vector<Value*>& inputs, Attrs attrs,
                           const std::string& name, const std::string& source);
  void set_outputs(const std::vector<Value*>& outs) { outputs_ = outs; }
  // Inputs the graph writes (AOTAutograd's kept input mutations: a static KV cache's update):
  // after a call, input `input` holds the value of graph output `output` (same type). The
  // planner computes that output in the input's own bytes when it can (see plan_memory);
  // otherwise the caller copies it back.
  struct InputWrite {
    int input;   // index in inputs()
    int output;  // index in outputs()
  };
  void set_input_writes(std::vector<InputWrite> w) { input_writes_ = std::move(w); }
  const std::vector<InputWrite>& input_writes() const { return input_writes_; }
  int add_symbol(const std::string& name);

  // ---- symbolic graphs --------------------------------------------------------------
  // A graph lowered once for every size: it is built (and its types inferred) at one
  // binding of the symbols, and records where sizes are expressions of them: each
  // input's dims, the node attributes that hold sizes (Node::sym_attrs), and the shapes
  // other values must have (checks). instantiate() replays it for another binding.
  int add_expr(SizeExpr e);  // checked against the symbols added so far
  // A decision the lowering took at the binding it ran at (a size compared with another): the
  // graph is that lowering only where every guard has the same outcome. instantiate() refuses
  // a binding where one fails (another lowering is needed there); clone() and files keep them.
  enum class Rel : uint8_t { eq, ne, lt, le, gt, ge };  // (expr) rel 0
  struct Guard {
    int32_t expr;  // lhs - rhs
    Rel rel;
    bool outcome;      // at the recorded binding
    std::string text;  // the relation as the front wrote it, for messages
  };
  void add_guard(Guard g);
  const std::vector<Guard>& guards() const { return guards_; }
  // The first guard whose outcome differs at `sizes` (one per symbol), or nullptr.
  const Guard* failed_guard(const std::vector<int64_t>& sizes) const;
  // Renames the symbols (the names messages use; a model file's symbols are the user's dims).
  void rename_symbols(const std::vector<std::string>& names);
  const std::vector<SizeExpr>& exprs() const { return exprs_; }
  // The dims of `v` as expressions (-1: a constant dim). For a graph input they give its
  // type in every binding; for any other value they are a check on the inferred type.
  void set_dim_exprs(Value* v, std::vector<int32_t> exprs);
  // The dim expressions of `v`, or nullptr when it has none.
  const std::vector<int32_t>* dim_exprs(const Value* v) const {
    return v->id < static_cast<int>(dim_exprs_.size()) && !dim_exprs_[v->id].empty() ? &dim_exprs_[v->id] : nullptr;
  }
  // Size attributes that make `key` (an int list) equal to v's dims in every binding.
  std::vector<SymAttr> shape_sym_attrs(const Value* v, const std::string& key) const;
  bool is_symbolic() const { return !exprs_.empty() || num_dim_exprs_ > 0; }
  // A graph with the same inputs, constants (sharing their bytes), nodes, value ids and
  // outputs, every expression evaluated at `sizes` (one per symbol) and every type
  // inferred again; no expressions remain. Throws ag::Error naming the node when a size
  // check fails or an op rejects the sizes.
  // Passes may run on a symbolic graph (they decide at its own binding; the front checks the
  // result at other sizes): nodes they remove keep their values' ids unused, and instantiate
  // replays the nodes in their order.
  std::unique_ptr<Graph> instantiate(const std::vector<int64_t>& sizes) const;
  // A copy that stays symbolic (expressions, dim expressions, size attributes), for passes to
  // run on while this graph stays as it was.
  std::unique_ptr<Graph> clone() const;

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_outputs() { return outputs_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::string>& symbols() const { return symbols_; }
  Value* value(int id) const { return values_[id].get(); }
  int num_values() const { return static_cast<int>(values_.size()); }

  // Rewrites every use of `from` (node inputs and graph outputs) to `to`. In a symbolic
  // graph `to` inherits from's dim expressions (as a check) when it has none.
  void replace_all_uses(Value* from, Value* to);
  // Drops nodes for which `dead(node)` is true; keeps the order of the rest.
  int remove_nodes_if(const std::function<bool(const Node&)>& dead);
  // Number of uses of each value id (node inputs plus graph outputs).
  std::vector<int> use_counts() const;

  std::string str() const;  // readable text, one node a line
  void verify() const;      // throws ag::Error naming the broken node

 private:
  friend class GraphFile;  // ir/serialize.cpp: writes and reads this state
  Node* make_node(const std::string& op, const std::vector<Value*>& inputs, Attrs attrs, const std::string& name,
                  const std::string& source, const std::vector<Value*>* outputs = nullptr);
  std::unique_ptr<Graph> replay(const std::vector<int64_t>* sizes) const;
  Value* new_value(ValueKind k, const TensorType& t, const std::string& name);
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<InputWrite> input_writes_;
  std::vector<std::string> symbols_;
  std::vector<SizeExpr> exprs_;
  std::vector<Guard> guards_;
  std::vector<std::vector<int32_t>> dim_exprs_;  // by value id: expr per dim (empty: none)
  int num_dim_exprs_ = 0;
  int next_node_id_ = 0;
};

}  // namespace ag
