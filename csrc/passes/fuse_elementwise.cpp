// Elementwise fusion: connected elementwise nodes whose outputs all have one
// shape become one "fused_elementwise" node (kernels/fused_elementwise.h) that
// runs the group as a small program, tile by tile, in one pass over memory.
//
// Which nodes: those whose op's OpDef::fuse encodes them as an instruction (declared with the
// op in the registry: float32/bfloat16/float16 math, comparisons, logical ops, where, convert
// between those and bool; integer math stays unfused), with static shapes. Inputs from outside a group may
// broadcast into the group's shape, like in the single-op kernels.
//
// Grouping, in node order: a node joins the group(s) of the producers of its
// inputs when they are open and have its output shape (a node that reads two
// groups merges them); otherwise it starts a group of its own. A group closes
// as soon as any node outside it reads one of its values. Hence, while a group
// is open, nothing outside it depends on it, which makes joining and merging
// cycle free, and placing the fused node where the group's last node was keeps
// the order topological (all its inputs are defined before that point; every
// outside reader of its values comes after it). A member's value read after
// the group closed, or returned by the graph, becomes an extra output of the
// fused node (cheaper than cutting the group there: the value is stored once
// either way, and the rest of the chain still runs in the same pass).
//
// Groups of one node are left alone. The fused node takes the last member's
// FX name and source line; attr "fused" lists the members' FX names.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {
namespace {

bool static_type(const Value* v) { return v->type.is_static(); }

struct Group {
  std::vector<int> members;  // node indices, in order
  Shape shape;
  bool closed = false;
};

}  // namespace

int fuse_elementwise(Graph& g) {
  std::vector<Node*> nodes;  // a snapshot: inserting fused nodes shifts g.nodes()
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  const int n_nodes = static_cast<int>(nodes.size());
  std::unordered_map<const Node*, int> index;
  for (int i = 0; i < n_nodes; ++i) index[nodes[i]] = i;

  std::vector<FusedInstr> enc(n_nodes);
  std::vector<char> fusable(n_nodes, 0);
  for (int i = 0; i < n_nodes; ++i) {
    const Node& n = *nodes[i];
    // (an op with a row function, a plugin's epilogue op, is a GEMM's post-op only: not an instruction of
    // the fused programs, whose interpreter dispatches on its own rows)
    if (!n.op->fuse || n.op->row_f32 || !n.op->has(kElementwise) || n.outputs.size() != 1 || !static_type(n.out()))
      continue;
    bool ok = true;
    for (Value* v : n.inputs) ok = ok && static_type(v);
    if (!ok) continue;
    try {
      fusable[i] = n.op->fuse(n, &enc[i]);
    } catch (const Error&) {
      fusable[i] = 0;  // an attribute of an unexpected type: leave the node alone
    }
  }

  // grouping with union-find (groups are named by an index into `groups`)
  std::vector<Group> groups;
  std::vector<int> parent;
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<int> group_of(n_nodes, -1);
  for (int i = 0; i < n_nodes; ++i) {
    const Node& n = *nodes[i];
    std::vector<int> cand;
    for (Value* v : n.inputs) {
      if (!v->producer) continue;
      int p = index.at(v->producer);
      if (group_of[p] < 0) continue;
      int gid = find(group_of[p]);
      if (std::find(cand.begin(), cand.end(), gid) == cand.end()) cand.push_back(gid);
    }
    int joined = -1;
    if (fusable[i]) {
      const Shape s = n.out()->type.shape();
      for (int gid : cand) {
        Group& gr = groups[gid];
        if (gr.closed || gr.shape != s) continue;
        if (joined < 0) {
          joined = gid;
        } else {  // merge gid into joined
          Group& into = groups[joined];
          into.members.insert(into.members.end(), gr.members.begin(), gr.members.end());
          gr.members.clear();
          parent[gid] = joined;
        }
      }
      if (joined < 0) {
        joined = static_cast<int>(groups.size());
        groups.push_back(Group{{}, s, false});
        parent.push_back(joined);
      }
      groups[joined].members.push_back(i);
      group_of[i] = joined;
    }
    for (int gid : cand)
      if (find(gid) != joined) groups[find(gid)].closed = true;
  }

  // users of every value (node indices), and the graph's outputs
  std::vector<std::vector<int>> users(g.num_values());
  for (int i = 0; i < n_nodes; ++i)
    for (Value* v : nodes[i]->inputs) users[v->id].push_back(i);
  std::unordered_set<const Value*> graph_outs(g.outputs().begin(), g.outputs().end());

  std::unordered_set<const Node*> dead;
  int changes = 0;
  for (int gid = 0; gid < static_cast<int>(groups.size()); ++gid) {
    if (parent[gid] != gid) continue;
    std::vector<int> mem = groups[gid].members;
    if (mem.size() < 2) continue;
    std::sort(mem.begin(), mem.end());
    std::unordered_set<int> in_group(mem.begin(), mem.end());
    // the program
    std::unordered_map<const Value*, int64_t> slot;  // external inputs first, then results
    std::vector<Value*> ext;
    for (int i : mem)
      for (Value* v : nodes[i]->inputs) {
        // (a producer fused earlier in this pass is a new node, outside every group)
        auto it = v->producer ? index.find(v->producer) : index.end();
        bool internal = it != index.end() && in_group.count(it->second);
        if (!internal && !slot.count(v)) {
          slot[v] = static_cast<int64_t>(ext.size());
          ext.push_back(v);
        }
      }
    std::vector<int64_t> ops, args, outs;
    std::vector<double> params;
    std::vector<Value*> replaced;
    std::string fused;
    for (size_t k = 0; k < mem.size(); ++k) {
      const Node& n = *nodes[mem[k]];
      const FusedInstr& in = enc[mem[k]];
      ops.push_back(in.code);
      for (int j = 0; j < FusedInstr::kMaxArgs; ++j) args.push_back(j < in.nargs ? slot.at(n.inputs[j]) : -1);
      for (double p : in.p) params.push_back(p);
      const int64_t s = static_cast<int64_t>(ext.size() + k);
      slot[n.out()] = s;
      bool outside = graph_outs.count(n.out()) > 0;
      for (int u : users[n.out()->id]) outside = outside || !in_group.count(u);
      if (outside) {
        outs.push_back(s);
        replaced.push_back(n.out());
      }
      fused += (k ? "," : "") + n.name;
    }
    if (outs.empty()) continue;  // nothing reads the group (dce would drop it)
    Node* last = nodes[mem.back()];
    Attrs a;
    a.set("ops", ops);
    a.set("args", args);
    a.set("params", params);
    a.set("outputs", outs);
    a.set("fused", fused);
    Node* f;
    try {
      f = g.insert_node_before(last, "fused_elementwise", ext, a, last->name, last->source);
    } catch (const Error&) {
      continue;  // the program was refused: keep the nodes
    }
    bool same = true;
    for (size_t j = 0; j < replaced.size(); ++j) same = same && f->outputs[j]->type == replaced[j]->type;
    if (!same) {  // cannot happen if encode and infer agree; never change a type
      g.remove_nodes_if([f](const Node& x) { return &x == f; });
      continue;
    }
    for (size_t j = 0; j < replaced.size(); ++j) g.replace_all_uses(replaced[j], f->outputs[j]);
    for (int i : mem) dead.insert(nodes[i]);
    ++changes;
  }
  if (!dead.empty()) g.remove_nodes_if([&](const Node& n) { return dead.count(&n) > 0; });
  return changes;
}

}  // namespace ag
