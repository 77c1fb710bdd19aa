// Epilogue fusion: an elementwise op that is the only use of a "linear",
// "matmul" or "conv" result, with the same output type, is absorbed into the
// GEMM node as a post-op (run on the f32 result: binary ops by oneDNN or the
// kernel, activations by the kernel as their fused instruction; kernels/epilogue.h),
// repeatedly, so that a chain
//   conv -> batch_norm -> add(residual) -> activation
// becomes one node. Absorbed:
//   the unary ops registered with `epilogue` (OpDef: the rows marked kEpi in
//   kernels/elementwise_ops.h: the common activations and clamp),
//   encoded by their own OpDef::fuse;
//   add / sub / mul / div with a second operand of the output dtype (or a
//   float32 scalar) that broadcasts to the output without changing it: a
//   scalar, the full output (residual add, SwiGLU's gate product), a row over
//   the last dim (linear/matmul) or one value per channel (conv); the GEMM
//   result must be the left operand of sub and div, add's alpha must be 1;
//   batch_norm (inference, constant parameters) after a conv or a 2-D linear,
//   as a per-channel multiply and add by constants computed here the way the
//   batch_norm kernel computes them.
// A matmul/linear without a bias whose first absorbed op would be an add of a
// bias-shaped tensor takes it as its bias input instead.
// The fused node keeps the GEMM's name and moves to the consumer's position
// (so an operand computed after the GEMM, like SwiGLU's up projection, is
// defined before it); the consumer's output uses are redirected to it and dce
// drops the old nodes. The absorbed FX names are kept in attr "fused"; the
// post-op encoding is described in ir/epilogue.h.
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "ir/dtype.h"
#include "ir/epilogue.h"
#include "ir/op_registry.h"
#include "passes/passes.h"

namespace ag {
namespace {

bool is_gemm(const Node& n) {
  std::string_view op = n.op->name;
  return op == "linear" || op == "matmul" || op == "conv";
}

bool is_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }


// Reads a 1-D float parameter as f32.
bool read_param(const Value* v, int64_t C, std::vector<float>* out) {
  if (!v->is_const() || !v->storage || v->type.numel() != C) return false;
  out->resize(C);
  switch (v->type.dtype) {
    case DType::f32: std::memcpy(out->data(), v->storage->data, C * 4); return true;
    case DType::bf16:
      for (int64_t i = 0; i < C; ++i) (*out)[i] = bf16_to_f32(static_cast<const uint16_t*>(v->storage->data)[i]);
      return true;
    case DType::f16:
      for (int64_t i = 0; i < C; ++i) (*out)[i] = f16_to_f32(static_cast<const uint16_t*>(v->storage->data)[i]);
      return true;
    default: return false;
  }
}

struct Absorb {
  std::vector<int64_t> codes;
  std::vector<double> args;
  std::vector<Value*> operands;
  std::vector<epi::Mode> modes;
  bool as_bias = false;
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g) {}

  int round() {
    auto uses = g_.use_counts();
    std::vector<Node*> consumer(g_.num_values(), nullptr);
    for (auto& up : g_.nodes())
      for (Value* v : up->inputs) consumer[v->id] = up.get();
    std::unordered_set<const Node*> touched;
    int changes = 0;
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
      Node* n = g_.nodes()[i].get();
      if (!is_gemm(*n) || touched.count(n) || n->outputs.size() != 1) continue;
      Value* v = n->out();
      if (uses[v->id] != 1) continue;
      Node* c = consumer[v->id];
      if (!c || touched.count(c) || !is_float(v->type.dtype)) continue;
      // linear/matmul -> reshape keeping the last dim -> consumer: fuse through the view
      Node* via = nullptr;
      Value* cv = v;  // the value the consumer reads
      if (std::string_view(c->op->name) == "reshape" && std::string_view(n->op->name) != "conv" &&
          c->outputs.size() == 1 && uses[c->out()->id] == 1 && consumer[c->out()->id] &&
          c->out()->type.rank() >= 1 && v->type.rank() >= 1 && c->out()->type.shape().back() == v->type.shape().back()) {
        via = c;
        cv = c->out();
        c = consumer[cv->id];
        if (touched.count(c) || touched.count(via)) continue;
      }
      if (c->outputs.size() != 1 || !(c->out()->type == cv->type)) continue;
      Absorb ab;
      if (!match(*n, *c, cv, via != nullptr, &ab)) continue;
      if (via) {  // operands are now seen against the GEMM's own shape
        for (size_t k = 0; k < ab.operands.size(); ++k) ab.operands[k] = adapt(ab.operands[k], ab.modes[k], v, c);
      }
      Attrs attrs = n->attrs;
      std::vector<Value*> ins = n->inputs;
      if (ab.as_bias) {
        ins.push_back(ab.operands[0]);
      } else {
        auto codes = attrs.ints("post_ops", {});
        std::vector<double> args = attrs.has("post_args") ? attrs.floats("post_args") : std::vector<double>{};
        codes.insert(codes.end(), ab.codes.begin(), ab.codes.end());
        args.insert(args.end(), ab.args.begin(), ab.args.end());
        attrs.set("post_ops", codes);
        attrs.set("post_args", args);
        attrs.set("post_inputs", attrs.i("post_inputs", 0) + static_cast<int64_t>(ab.operands.size()));
        ins.insert(ins.end(), ab.operands.begin(), ab.operands.end());
      }
      std::string fused = attrs.s("fused", "");
      attrs.set("fused", fused.empty() ? c->name : fused + "," + c->name);
      Node* nn;
      Value* result;
      try {
        nn = g_.insert_node_before(c, n->op->name, ins, attrs, n->name, n->source);
        result = nn->out();
        if (via) {
          Node* rs = g_.insert_node_before(c, "reshape", {result}, via->attrs, via->name, via->source);
          rs->sym_attrs = via->sym_attrs;
          touched.insert(rs);
          result = rs->out();
        }
      } catch (const Error&) {
        continue;  // the op's inference refused it: leave the pair alone (dce drops any partial insert)
      }
      g_.replace_all_uses(c->out(), result);
      touched.insert(n);
      touched.insert(c);
      touched.insert(nn);
      if (via) touched.insert(via);
      ++changes;
    }
    if (changes) eliminate_dead_code(g_);
    return changes;
  }

 private:
  // An operand classified against the reshaped value, as an operand of the GEMM
  // result `v` (same bytes, same last dim): full -> v's shape, row -> [N], scalar -> [1].
  Value* adapt(Value* o, epi::Mode mode, Value* v, Node* before) {
    Shape want;
    switch (mode) {
      case epi::Mode::Full: want = v->type.shape(); break;
      case epi::Mode::Col: want = {v->type.shape().back()}; break;
      default: want = {1}; break;
    }
    if (o->type.shape() == want) return o;
    if (o->producer && std::string_view(o->producer->op->name) == "reshape" &&
        o->producer->inputs[0]->type.shape() == want)
      return o->producer->inputs[0];
    Attrs a;
    a.set("shape", want);
    Node* rs = g_.insert_node_before(before, "reshape", {o}, a, o->name + ".as_gemm", before->source);
    if (mode == epi::Mode::Full) rs->sym_attrs = g_.shape_sym_attrs(v, "shape");  // v's dims in every binding
    return rs->out();
  }

  bool match(const Node& n, const Node& c, Value* v, bool via_reshape, Absorb* ab) {
    const bool conv = std::string_view(n.op->name) == "conv";
    if (std::string_view(c.op->name) == "batch_norm") return !via_reshape && match_bn(n, c, v, conv, ab);
    if (!c.op->epilogue || !c.op->fuse) return false;
    FusedInstr fi;
    try {
      if (!c.op->fuse(c, &fi)) return false;
    } catch (const Error&) {
      return false;  // an attribute of an unexpected type: leave the node alone
    }
    if (c.inputs.size() == 1) {  // an activation, run as its fused instruction
      if (epi::is_binary(fi.code) || !epi::unary_op(fi.code)) return false;
      ab->codes.push_back(fi.code);
      ab->args.insert(ab->args.end(), fi.p, fi.p + epi::kArgs);
      return true;
    }
    // add / sub / mul / div (no alpha, no rounding mode: those encode as other instructions)
    const int64_t code = fi.code;
    if (!epi::is_binary(code) || c.inputs.size() != 2 || c.inputs[0] == c.inputs[1]) return false;
    const int idx = c.inputs[0] == v ? 0 : 1;
    Value* other = c.inputs[1 - idx];
    if ((code == epi::kSub || code == epi::kDiv) && idx != 0) return false;  // the GEMM result on the left
    const TensorType& ot = other->type;
    const DType t = v->type.dtype;
    if (!(ot.dtype == t || (ot.dtype == DType::f32 && ot.numel() == 1))) return false;
    epi::Mode mode;
    if (!ot.is_static() || !epi::classify(ot.shape(), v->type.shape(), conv, &mode)) return false;
    // an add of a bias-shaped tensor to a GEMM without bias and without post-ops: take it as the bias
    const size_t nb = epi::base_inputs(n.inputs.size(), n.attrs);
    if (code == epi::kAdd && !conv && nb == 2 && !n.attrs.has("post_ops") && ot.dtype == t) {
      std::string_view gop = n.op->name;
      bool bias_ok = gop == "matmul" || (ot.rank() == 1 && ot.size(0) == v->type.shape().back());
      if (bias_ok && (!via_reshape || mode == epi::Mode::Col)) {
        ab->as_bias = true;
        ab->operands.push_back(other);
        ab->modes.push_back(mode);
        return true;
      }
    }
    ab->codes.push_back(code);
    ab->args.insert(ab->args.end(), epi::kArgs, 0.0);
    ab->operands.push_back(other);
    ab->modes.push_back(mode);
    return true;
  }

  // batch_norm(v, mean, var[, weight][, bias]) with constant parameters, channel dim 1
  bool match_bn(const Node& n, const Node& c, Value* v, bool conv, Absorb* ab) {
    if (c.inputs[0] != v) return false;
    const Shape out = v->type.shape();
    if (out.size() < 2 || (!conv && out.size() != 2)) return false;
    const int64_t C = out[1];
    bool hw = c.attrs.b("has_weight", false), hb = c.attrs.b("has_bias", false);
    double eps;
    if (!attr_number(c.attrs, "eps", 1e-5, &eps)) return false;
    if (c.inputs.size() != static_cast<size_t>(3 + hw + hb)) return false;
    std::vector<float> mean, var, w, b;
    if (!read_param(c.inputs[1], C, &mean) || !read_param(c.inputs[2], C, &var)) return false;
    if (hw && !read_param(c.inputs[3], C, &w)) return false;
    if (hb && !read_param(c.inputs[3 + hw], C, &b)) return false;
    // as the batch_norm kernel: alpha = w / sqrt(var + eps), beta = b - mean * alpha (in float)
    Shape ps(out.size() - 1, 1);
    ps[0] = C;
    TensorType pt(DType::f32, ps);
    auto sa = Storage::allocate(C * 4), sb = Storage::allocate(C * 4);
    mark_derived(*sa, c.inputs);  // (c.inputs[0], v, is not a constant)
    mark_derived(*sb, c.inputs);
    float* al = static_cast<float*>(sa->data);
    float* be = static_cast<float*>(sb->data);
    for (int64_t i = 0; i < C; ++i) {
      float invstd = 1.0f / std::sqrt(var[i] + static_cast<float>(eps));
      float alpha = hw ? invstd * w[i] : invstd;
      float beta = (hb ? b[i] : 0.0f) - mean[i] * alpha;
      al[i] = alpha;
      be[i] = beta;
    }
    epi::Mode mode;
    if (!epi::classify(ps, out, conv, &mode)) return false;
    ab->codes = {epi::kMul, epi::kAdd};
    ab->args.assign(2 * epi::kArgs, 0.0);
    ab->operands = {g_.add_const(pt, sa, c.name + ".scale"), g_.add_const(pt, sb, c.name + ".shift")};
    ab->modes = {mode, mode};
    (void)n;
    return true;
  }

  Graph& g_;
};

}  // namespace

int fuse_epilogues(Graph& g) {
  Fuser f(g);
  int total = 0;
  for (int r = 0; r < 16; ++r) {
    int c = f.round();
    total += c;
    if (!c) break;
  }
  return total;
}

}  // namespace ag
