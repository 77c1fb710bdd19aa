#include "runtime/memory_planner.h"

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "ir/op_registry.h"

namespace ag {
namespace {
size_t align64(size_t n) { return ((n + 63) / 64) * 64; }

// Whether node n's kernel may write its single output over operand k's bytes: an elementwise op
// reads each element before writing it (a whole operand, not a broadcast one); an update
// (kUpdatesInput0) copies operand 0 and then only writes, if no other operand reads those bytes.
// An accumulating kernel (OpDef::accumulates_into: `acc`) adds its result to operand acc's bytes,
// likewise if no other operand reads them.
bool may_overwrite(const Node& n, size_t k, const std::vector<int>& root, int acc) {
  const Value* x = n.inputs[k];
  if (n.outputs.size() != 1 || x->type.numel() != n.outputs[0]->type.numel()) return false;
  if (n.op->has(kElementwise)) return true;
  if (!(n.op->has(kUpdatesInput0) && k == 0) && static_cast<int>(k) != acc) return false;
  for (size_t j = 0; j < n.inputs.size(); ++j)
    if (j != k && root[n.inputs[j]->id] == root[x->id]) return false;
  return true;
}
}  // namespace

MemoryPlan plan_memory(const Graph& g, bool allow_inplace, const BuildCtx* ctx) {
  MemoryPlan plan;
  const int nv = g.num_values();
  plan.loc.assign(nv, Location{});
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    Value* v = g.inputs()[i];
    plan.loc[v->id] = Location{LocKind::Input, static_cast<int>(i), 0, v->id};
  }
  auto mark_const = [&](Value* v) {
    if (v->is_const()) plan.loc[v->id] = Location{LocKind::Const, 0, 0, v->id};
  };
  for (auto& n : g.nodes())
    for (Value* v : n->inputs) mark_const(v);
  for (Value* v : g.outputs()) mark_const(v);

  // 1. roots and offsets of views; share[] maps an in-place output to the root it reuses.
  std::vector<int> root(nv, -1);
  std::vector<int64_t> off(nv, 0);
  for (int i = 0; i < nv; ++i) root[i] = i;
  const auto& nodes = g.nodes();
  const int nn = static_cast<int>(nodes.size());
  std::vector<int> def(nv, -1), last(nv, -1);
  for (int t = 0; t < nn; ++t) {
    const Node& n = *nodes[t];
    if (n.op->has(kAlias)) {
      Value* in = n.inputs[0];
      Value* out = n.outputs[0];
      root[out->id] = root[in->id];
      off[out->id] = off[in->id] + (n.op->alias_offset ? n.op->alias_offset(n) : 0);
    }
    for (Value* o : n.outputs) def[o->id] = t;
  }
  // 2. lifetimes of roots
  for (int t = 0; t < nn; ++t)
    for (Value* v : nodes[t]->inputs) last[root[v->id]] = std::max(last[root[v->id]], t);
  std::vector<char> is_external(nv, 0);
  for (Value* v : g.outputs()) {
    int r = root[v->id];
    if (g.value(r)->kind == ValueKind::NodeOutput) is_external[r] = 1;
    last[r] = nn;
  }
  // Written inputs: the written value lives in the input's bytes when its producer is the last
  // node to read the input's old value, and reads it only where its output may overlap it.
  plan.output_in_input.assign(g.outputs().size(), -1);
  if (!g.input_writes().empty()) {
    std::vector<int> out_uses(nv, 0);
    for (Value* v : g.outputs()) out_uses[root[v->id]]++;
    for (const Graph::InputWrite& w : g.input_writes()) {
      Value* v = g.outputs()[w.output];
      const Value* in = g.inputs()[w.input];
      const int r = v->id;
      if (v->kind != ValueKind::NodeOutput || root[r] != r || out_uses[r] != 1 || out_uses[in->id] != 0) continue;
      const int tp = def[r];
      const Node& p = *nodes[tp];
      bool ok = true;
      for (int t = tp; t < nn && ok; ++t) {
        const Node& n = *nodes[t];
        if (n.op->has(kAlias)) continue;  // a view reads nothing; its readers are checked
        for (size_t k = 0; k < n.inputs.size() && ok; ++k) {
          const Value* x = n.inputs[k];
          if (root[x->id] != in->id) continue;
          ok = t == tp && x == in && may_overwrite(p, k, root, -1);
        }
      }
      if (!ok) continue;
      is_external[r] = 2;
      plan.output_in_input[w.output] = w.input;
    }
  }
  // roots that are node outputs, in definition order
  std::vector<int> roots;
  for (int t = 0; t < nn; ++t)
    for (Value* o : nodes[t]->outputs)
      if (root[o->id] == o->id) {
        roots.push_back(o->id);
        if (last[o->id] < 0) last[o->id] = t;  // unused output: dies at once
      }

  // 3. in place: out reuses the buffer of an input root that dies here
  std::vector<int> share(nv, -1);
  if (allow_inplace) {
    for (int t = 0; t < nn; ++t) {
      const Node& n = *nodes[t];
      const int acc = ctx && n.op->accumulates_into ? n.op->accumulates_into(n, *ctx) : -1;
      if (!(n.op->has(kElementwise) || n.op->has(kUpdatesInput0) || acc >= 0) || n.outputs.size() != 1) continue;
      Value* o = n.outputs[0];
      if (root[o->id] != o->id || is_external[o->id]) continue;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        if (!may_overwrite(n, k, root, acc)) continue;
        Value* in = n.inputs[k];
        int r = root[in->id];
        Value* rv = g.value(r);
        if (rv->kind != ValueKind::NodeOutput || is_external[r] || last[r] != t) continue;
        if (in->id != r && off[in->id] != 0) continue;
        if (in->type.nbytes() != o->type.nbytes() || rv->type.nbytes() != o->type.nbytes()) continue;
        int base = share[r] >= 0 ? share[r] : r;
        share[o->id] = base;
        last[base] = std::max(last[base], last[o->id]);
        plan.inplace_count++;
        break;
      }
    }
    // propagate lifetimes along share chains (an in-place output may itself be reused)
    for (auto it = roots.rbegin(); it != roots.rend(); ++it)
      if (share[*it] >= 0) last[share[*it]] = std::max(last[share[*it]], last[*it]);
  }

  // 4. external roots
  for (int r : roots)
    if (is_external[r] == 1) {
      plan.loc[r] = Location{LocKind::External, static_cast<int>(plan.external_roots.size()), 0, r};
      plan.external_roots.push_back(r);
      plan.external_bytes.push_back(g.value(r)->type.nbytes());
    }

  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (plan.output_in_input[i] >= 0) {
      const int r = g.outputs()[i]->id, j = plan.output_in_input[i];
      plan.loc[r] = Location{LocKind::Input, j, 0, g.inputs()[j]->id};
    }

  // 5. arena placement, largest first, best fit
  struct Block {
    int id;
    size_t size;
    int begin, end;
    size_t offset;
  };
  std::vector<Block> blocks;
  for (int r : roots) {
    if (is_external[r] || share[r] >= 0) continue;
    size_t sz = align64(g.value(r)->type.nbytes());
    plan.naive_bytes += sz;
    blocks.push_back(Block{r, sz, def[r], last[r], 0});
  }
  std::vector<int> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return blocks[a].size > blocks[b].size; });
  std::vector<int> placed;
  for (int bi : order) {
    Block& b = blocks[bi];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int pi : placed) {
      const Block& p = blocks[pi];
      if (p.begin <= b.end && b.begin <= p.end) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cur = 0;
    for (auto& [s, e] : busy) {
      if (s > cur && s - cur >= b.size && s - cur < best_gap) {
        best = cur;
        best_gap = s - cur;
      }
      cur = std::max(cur, e);
    }
    b.offset = best != SIZE_MAX ? best : cur;
    plan.arena_bytes = std::max(plan.arena_bytes, b.offset + b.size);
    placed.push_back(bi);
    plan.loc[b.id] = Location{LocKind::Arena, 0, static_cast<int64_t>(b.offset), b.id};
  }
  // in-place outputs take their base's location
  for (int r : roots)
    if (share[r] >= 0) plan.loc[r] = plan.loc[share[r]];

  // views: root location + offset
  for (int t = 0; t < nn; ++t)
    for (Value* o : nodes[t]->outputs) {
      int r = root[o->id];
      if (r == o->id) continue;
      Location l = plan.loc[r];
      l.offset += off[o->id];
      plan.loc[o->id] = l;
    }
  return plan;
}

}  // namespace ag
