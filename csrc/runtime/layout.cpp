#include "runtime/layout.h"

#include <numeric>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "ir/op_registry.h"

namespace ag {
namespace {

// Rank 4 with C > 1 and H * W > 1: the two layouts are different bytes.
bool layout_matters(const TensorType& t) { return t.rank() == 4 && t.size(1) > 1 && t.size(2) * t.size(3) > 1; }

// Aligned to rank 4 on the right (as broadcasting aligns it), the same bytes in either layout: a
// scalar, a per-channel [C, 1, 1], a per-pixel [H, W] operand.
bool same_bytes(const TensorType& t) {
  if (t.rank() > 4) return false;
  Shape s = t.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  return s[1] == 1 || s[2] * s[3] == 1;
}

// Whether `n` is layout-transparent (OpDef::nhwc_view) for its types; its attributes in NHWC
// coordinates go to `attrs`.
bool nhwc_view(const Node& n, Attrs* attrs) {
  if (n.outputs.size() != 1 || !layout_matters(n.out()->type)) return false;
  for (const Value* v : n.inputs)
    if (v->type.rank() != 4 && !same_bytes(v->type)) return false;  // (a [C, H, W] operand: no 4-D bytes to share)
  *attrs = n.attrs;
  if (n.op->nhwc_view) return n.op->nhwc_view(n, attrs);
  return n.op->has(kElementwise);
}

bool transparent(const Node& n) {
  Attrs a;
  return nhwc_view(n, &a);
}

bool asks(const Node& n, int i) { return n.op->channels_last && n.op->channels_last(n, i); }

// A node that neither reads nor writes the layout runs between conversions (LayoutAdapter): one
// result, and a bounded number of inputs (their pointers are swapped on the stack).
constexpr size_t kMaxAdaptedInputs = 16;
bool adaptable(const Node& n) {
  return n.outputs.size() == 1 && n.inputs.size() <= kMaxAdaptedInputs && !n.op->has(kAlias) &&
         !n.op->has(kUpdatesInput0);
}

class Groups {  // union-find over value ids
 public:
  explicit Groups(size_t n) : up_(n) { std::iota(up_.begin(), up_.end(), 0); }
  int find(int v) {
    while (up_[v] != v) v = up_[v] = up_[up_[v]];
    return v;
  }
  void unite(int a, int b) { up_[find(a)] = find(b); }

 private:
  std::vector<int> up_;
};

// [N, C, H, W] -> [N, H, W, C]: the shape a channels-last value's bytes have row-major.
Shape nhwc_shape(const Shape& s) { return Shape{s[0], s[2], s[3], s[1]}; }

constexpr size_t kAlign = 64;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// A node's kernel between layout conversions: channels-last inputs it does not read so are copied
// into row-major scratch first, and a result it cannot write channels-last is written row-major
// into scratch and copied out (each a permute kernel: the region's edges). Without conversions, a
// transparent node's view kernel, named for the profiles.
class LayoutAdapter final : public Kernel {
 public:
  struct Copy {
    std::unique_ptr<Kernel> k;
    int index = 0;    // the input (or output) it converts
    size_t off = 0;   // its buffer in the scratch, after the inner kernel's
  };
  LayoutAdapter(std::unique_ptr<Kernel> inner, std::vector<Copy> ins, std::vector<Copy> outs, size_t n_in,
                size_t bytes)
      : inner_(std::move(inner)), ins_(std::move(ins)), outs_(std::move(outs)), n_in_(n_in), bytes_(bytes) {}

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (ins_.empty() && outs_.empty()) return inner_->run(in, out, ctx);  // (a transparent node's view)
    void* args[kMaxAdaptedInputs + 1];
    for (size_t i = 0; i < n_in_; ++i) args[i] = in[i];
    void* res = out[0];
    char* scratch = static_cast<char*>(ctx.scratch);
    for (const Copy& c : ins_) {
      void* dst = scratch + c.off;
      c.k->run(&in[c.index], &dst, RunCtx{});
      args[c.index] = dst;
    }
    if (!outs_.empty()) res = scratch + outs_[0].off;
    inner_->run(args, &res, ctx);
    if (!outs_.empty()) outs_[0].k->run(&res, out, RunCtx{});
  }
  size_t scratch_bytes() const override { return bytes_; }
  std::unique_ptr<KernelState> make_state() const override { return inner_->make_state(); }
  std::string name() const override {
    if (ins_.empty() && outs_.empty()) return inner_->name() + " [channels-last]";
    std::string s = inner_->name() + " [";
    for (const Copy& c : ins_) s += "input " + std::to_string(c.index) + " nhwc->nchw, ";
    if (!outs_.empty()) s += "result nchw->nhwc, ";
    return s.substr(0, s.size() - 2) + "]";
  }
  int background_work() const override { return inner_->background_work(); }
  void finish_background_work() const override { inner_->finish_background_work(); }

 private:
  std::unique_ptr<Kernel> inner_;
  std::vector<Copy> ins_, outs_;
  size_t n_in_ = 0, bytes_ = 0;
};

// A permute kernel between the layouts of a logical [N, C, H, W] `t`: NHWC bytes to NCHW (`to_nhwc`
// false), or NCHW bytes to NHWC.
std::unique_ptr<Kernel> layout_copy(const TensorType& t, bool to_nhwc, const BuildCtx& ctx) {
  const Shape s = t.shape();
  Value in, out;
  in.id = out.id = -1;
  in.type = TensorType(t.dtype, to_nhwc ? s : nhwc_shape(s));
  out.type = TensorType(t.dtype, to_nhwc ? nhwc_shape(s) : s);
  Node n;
  n.op = find_op("permute");
  AG_CHECK(n.op != nullptr, "channels-last plan: no permute op registered");
  n.name = to_nhwc ? "to_channels_last" : "from_channels_last";
  n.inputs = {&in};
  n.outputs = {&out};
  n.attrs.set("dims", to_nhwc ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 3, 1, 2});
  BuildCtx plain = ctx;
  plain.channels_last = nullptr;
  std::unique_ptr<Kernel> k = n.op->make_kernel(n, plain);
  AG_CHECK(k->scratch_bytes() == 0 && !k->make_state(), "channels-last plan: a layout copy needs no scratch or state");
  return k;
}

}  // namespace

std::vector<uint8_t> plan_channels_last(const Graph& g) {
  const size_t nv = g.num_values();
  std::vector<std::vector<std::pair<const Node*, size_t>>> uses(nv);
  std::unordered_set<const Node*> clear;  // the layout-transparent nodes
  Groups groups(nv);
  for (const auto& n : g.nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) uses[n->inputs[i]->id].emplace_back(n.get(), i);
    if (!transparent(*n)) continue;
    clear.insert(n.get());
    for (const Value* v : n->inputs)
      if (layout_matters(v->type)) groups.unite(v->id, n->out()->id);
  }
  std::vector<uint8_t> is_out(nv, 0);
  for (const Value* v : g.outputs()) is_out[v->id] = 1;
  std::vector<const Value*> members;  // (the live nodes' results: a value a pass left behind has a stale producer)
  for (const auto& n : g.nodes())
    for (const Value* v : n->outputs)
      if (layout_matters(v->type)) members.push_back(v);
  // A group is channels-last or not as a whole. Never where a member is a graph input, constant or
  // output, or a view's source or result (its bytes are another value's); else where that costs
  // fewer bytes copied than row-major: a member written or read by a node that prefers
  // channels-last (a convolution: oneDNN reorders row-major activations in and out) costs its bytes
  // row-major, one written or read by a node that neither reads nor writes channels-last costs its
  // bytes channels-last (a conversion at the region's edge).
  std::vector<uint8_t> never(nv, 0), nhwc(nv, 0);
  auto forbid = [&](const Value* v) { never[groups.find(v->id)] = 1; };
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs)
      if (v->kind != ValueKind::NodeOutput && layout_matters(v->type)) forbid(v);
  for (const Value* v : members) {
    if (is_out[v->id] || uses[v->id].empty()) forbid(v);
    const Node* w = v->producer;
    if (!clear.count(w) && !adaptable(*w) && !asks(*w, kWritesChannelsLast) && !asks(*w, kPassesChannelsLast))
      forbid(v);
    for (const auto& [c, i] : uses[v->id])
      if (!clear.count(c) && !asks(*c, static_cast<int>(i)) && !adaptable(*c)) forbid(v);
  }
  // Writers that pass the layout on (a pool) or make it only from a row-major input (a permute to
  // NCHW) depend on their input's group: decided again until nothing changes.
  std::vector<double> cost_cl(nv), cost_rm(nv);
  for (int round = 0; round < 16; ++round) {
    std::fill(cost_cl.begin(), cost_cl.end(), 0.0);
    std::fill(cost_rm.begin(), cost_rm.end(), 0.0);
    for (const Value* v : members) {
      const int r = groups.find(v->id);
      if (never[r]) continue;
      const double b = static_cast<double>(v->type.nbytes());
      const Node* w = v->producer;
      if (!clear.count(w)) {
        const bool in_cl = !w->inputs.empty() && nhwc[w->inputs[0]->id];
        const bool writes = !w->inputs.empty() && asks(*w, in_cl ? kPassesChannelsLast : kWritesChannelsLast);
        if (!writes) cost_cl[r] += b;
        else if (asks(*w, kPrefersChannelsLast)) cost_rm[r] += b;
      }
      for (const auto& [c, i] : uses[v->id]) {
        if (clear.count(c)) continue;
        if (!asks(*c, static_cast<int>(i))) cost_cl[r] += b;
        else if (asks(*c, kPrefersChannelsLast)) cost_rm[r] += b;
      }
    }
    bool changed = false;
    for (const Value* v : members) {
      const int r = groups.find(v->id);
      const uint8_t want = !never[r] && cost_cl[r] < cost_rm[r];
      changed = changed || nhwc[v->id] != want;
      nhwc[v->id] = want;
    }
    if (!changed) break;
  }
  return nhwc;
}

std::unique_ptr<Kernel> make_layout_kernel(const Node& n, const BuildCtx& ctx) {
  if (!ctx.channels_last) return nullptr;
  bool any = false;
  for (const Value* v : n.inputs) any = any || ctx.nhwc(v->id);
  for (const Value* v : n.outputs) any = any || ctx.nhwc(v->id);
  if (!any) return nullptr;
  Node view = n;
  if (nhwc_view(n, &view.attrs)) {
    if (!ctx.nhwc(n.out()->id)) return nullptr;  // (row-major, every input too: made as usual)
    std::vector<Value> vals;
    vals.reserve(n.inputs.size() + 1);
    auto permuted = [&](const Value* v) {
      Value c = *v;
      Shape s = v->type.shape();
      if (!s.empty()) {
        while (s.size() < 4) s.insert(s.begin(), 1);
        s = nhwc_shape(s);
      }
      c.type = TensorType(v->type.dtype, s);
      vals.push_back(std::move(c));
      return &vals.back();
    };
    view.inputs.clear();
    for (const Value* v : n.inputs) {
      AG_CHECK(!layout_matters(v->type) || ctx.nhwc(v->id), "channels-last plan: ", n.context(),
               " has a row-major input %", v->name, " and a channels-last result");
      view.inputs.push_back(permuted(v));
    }
    view.outputs = {permuted(n.out())};
    BuildCtx plain = ctx;
    plain.channels_last = nullptr;  // (the view's values are row-major over their permuted shapes)
    std::unique_ptr<Kernel> k = n.op->make_kernel(view, plain);
    const size_t bytes = k->scratch_bytes();
    return std::make_unique<LayoutAdapter>(std::move(k), std::vector<LayoutAdapter::Copy>{},
                                           std::vector<LayoutAdapter::Copy>{}, n.inputs.size(), bytes);
  }
  // Any other node: the channels-last values it does not read or write so are converted around it.
  std::vector<size_t> conv_in;
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (ctx.nhwc(n.inputs[i]->id) && !asks(n, static_cast<int>(i))) conv_in.push_back(i);
  bool conv_out = false;
  if (n.outputs.size() == 1 && ctx.nhwc(n.out()->id)) {
    bool in_cl = !n.inputs.empty() && ctx.nhwc(n.inputs[0]->id);
    if (!conv_in.empty() && conv_in[0] == 0) in_cl = false;
    conv_out = n.inputs.empty() || !asks(n, in_cl ? kPassesChannelsLast : kWritesChannelsLast);
  }
  if (conv_in.empty() && !conv_out) return nullptr;
  AG_CHECK(adaptable(n), "channels-last plan: ", n.context(), " can neither take nor be given its layouts");
  std::vector<uint8_t> seen = *ctx.channels_last;  // what the node's own kernel sees: row-major there
  for (size_t i : conv_in) seen[n.inputs[i]->id] = 0;
  if (conv_out) seen[n.out()->id] = 0;
  BuildCtx inner_ctx = ctx;
  inner_ctx.channels_last = &seen;
  std::unique_ptr<Kernel> inner = n.op->make_kernel(n, inner_ctx);
  size_t bytes = aligned(inner->scratch_bytes());
  std::vector<LayoutAdapter::Copy> ins, outs;
  for (size_t i : conv_in) {
    ins.push_back({layout_copy(n.inputs[i]->type, false, ctx), static_cast<int>(i), bytes});
    bytes += aligned(n.inputs[i]->type.nbytes());
  }
  if (conv_out) {
    outs.push_back({layout_copy(n.out()->type, true, ctx), 0, bytes});
    bytes += aligned(n.out()->type.nbytes());
  }
  return std::make_unique<LayoutAdapter>(std::move(inner), std::move(ins), std::move(outs), n.inputs.size(), bytes);
}

}  // namespace ag
