// Op plugins: loading a plugin library and adapting its C interface to OpDef and Kernel
// (see plugin.h and include/airgraph/op_plugin.h).
#include "kernels/plugin.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>

#include "airgraph/op_plugin.h"
#include "base/error.h"
#include "ir/graph.h"
#include "ir/op_registry.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {

static_assert(static_cast<int>(DType::f32) == AG_FLOAT32 && static_cast<int>(DType::f64) == AG_FLOAT64 &&
                  static_cast<int>(DType::f16) == AG_FLOAT16 && static_cast<int>(DType::bf16) == AG_BFLOAT16 &&
                  static_cast<int>(DType::i64) == AG_INT64 && static_cast<int>(DType::i32) == AG_INT32 &&
                  static_cast<int>(DType::i16) == AG_INT16 && static_cast<int>(DType::i8) == AG_INT8 &&
                  static_cast<int>(DType::u8) == AG_UINT8 && static_cast<int>(DType::b8) == AG_BOOL &&
                  kNumDTypes == 10,
              "op_plugin.h's ag_dtype must number airgraph's dtypes");

// ---- attributes: ag_attrs* is an Attrs* --------------------------------------------------------
const Attrs& attrs_of(const ag_attrs* a) { return *reinterpret_cast<const Attrs*>(a); }
const ag_attrs* as_plugin(const Attrs& a) { return reinterpret_cast<const ag_attrs*>(&a); }

int get_int(const ag_attrs* a, const char* key, int64_t* out) {
  const AttrValue* v = attrs_of(a).find(key);
  if (!v) return 0;
  if (auto* i = std::get_if<int64_t>(v)) return *out = *i, 1;
  if (auto* b = std::get_if<bool>(v)) return *out = *b, 1;
  return 0;
}
int get_float(const ag_attrs* a, const char* key, double* out) {
  const AttrValue* v = attrs_of(a).find(key);
  if (!v) return 0;
  if (auto* d = std::get_if<double>(v)) return *out = *d, 1;
  if (auto* i = std::get_if<int64_t>(v)) return *out = static_cast<double>(*i), 1;
  return 0;
}
int get_ints(const ag_attrs* a, const char* key, const int64_t** data, size_t* n) {
  const AttrValue* v = attrs_of(a).find(key);
  auto* l = v ? std::get_if<std::vector<int64_t>>(v) : nullptr;
  if (!l) return 0;
  *data = l->data(), *n = l->size();
  return 1;
}
int get_string(const ag_attrs* a, const char* key, const char** out) {
  const AttrValue* v = attrs_of(a).find(key);
  auto* s = v ? std::get_if<std::string>(v) : nullptr;
  if (!s) return 0;
  *out = s->c_str();
  return 1;
}
constexpr ag_attr_api kAttrApi{get_int, get_float, get_ints, get_string};

// ---- types --------------------------------------------------------------------------------------
ag_type to_plugin(const TensorType& t, const char* op) {
  AG_CHECK(t.rank() <= AG_MAX_RANK, op, ": a plugin op takes tensors of rank <= ", AG_MAX_RANK, ", got ", t.str());
  ag_type p{};
  p.dtype = static_cast<int32_t>(t.dtype);
  p.rank = static_cast<int32_t>(t.rank());
  for (int64_t i = 0; i < t.rank(); ++i) p.shape[i] = t.size(i);
  return p;
}
std::vector<ag_type> to_plugin(const std::vector<TensorType>& ts, const char* op) {
  std::vector<ag_type> v;
  v.reserve(ts.size());
  for (const auto& t : ts) v.push_back(to_plugin(t, op));
  return v;
}
std::string message(const ag_error& e) {
  std::string m(e.message, strnlen(e.message, AG_ERROR_BYTES));
  return m.empty() ? "(the plugin gave no message)" : m;
}

// ---- one loaded op: the plugin's definition and its OpDef ---------------------------------------
struct PluginOp {
  const ag_op_def* def = nullptr;
  std::string name, plugin, version;  // (the OpDef's strings point here: a deque never moves them)
};
std::deque<PluginOp>& plugin_ops() {
  static std::deque<PluginOp> d;
  return d;
}
std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

// InferFn is a plain function pointer (no closure): each plugin op gets one of these slots.
constexpr int kMaxPluginOps = 256;
std::array<const PluginOp*, kMaxPluginOps> g_slots{};

std::vector<TensorType> infer_plugin(const PluginOp& op, const std::vector<TensorType>& in, const Attrs& attrs) {
  const char* name = op.name.c_str();
  std::vector<ag_type> pin = to_plugin(in, name);
  ag_type out[AG_MAX_OUTPUTS]{};
  ag_error err{};
  const int32_t n = op.def->infer(pin.data(), static_cast<int32_t>(pin.size()), as_plugin(attrs), &kAttrApi, out, &err);
  AG_CHECK(n > 0, name, " (plugin ", op.plugin, " ", op.version, "): ", message(err));
  AG_CHECK(n <= AG_MAX_OUTPUTS, name, " (plugin ", op.plugin, "): inference returned ", n, " outputs (at most ",
           AG_MAX_OUTPUTS, ")");
  std::vector<TensorType> res;
  for (int32_t k = 0; k < n; ++k) {
    const ag_type& t = out[k];
    AG_CHECK(t.dtype >= 0 && t.dtype < kNumDTypes, name, " (plugin ", op.plugin, "): inference gave output ", k,
             " dtype code ", t.dtype);
    AG_CHECK(t.rank >= 0 && t.rank <= AG_MAX_RANK, name, " (plugin ", op.plugin, "): inference gave output ", k,
             " rank ", t.rank);
    Shape s(t.shape, t.shape + t.rank);
    for (int64_t d : s)
      AG_CHECK(d >= 0, name, " (plugin ", op.plugin, "): inference gave output ", k, " a negative dim: ", shape_str(s));
    res.emplace_back(static_cast<DType>(t.dtype), s);
  }
  if (op.def->flags & AG_OP_ELEMENTWISE) {
    AG_CHECK(n == 1, name, " (plugin ", op.plugin, "): an elementwise op has one output, inference gave ", n);
    Shape b = in.empty() ? Shape{} : in[0].shape();
    for (size_t i = 1; i < in.size(); ++i) b = broadcast_shapes(b, in[i].shape());
    AG_CHECK(res[0].shape() == b, name, " (plugin ", op.plugin, "): an elementwise op's output has its inputs' "
             "broadcast shape ", shape_str(b), ", inference gave ", res[0].str());
  }
  return res;
}

template <int I>
std::vector<TensorType> infer_slot(const std::vector<TensorType>& in, const Attrs& attrs) {
  return infer_plugin(*g_slots[I], in, attrs);
}
template <int... I>
constexpr std::array<InferFn, sizeof...(I)> make_infer_slots(std::integer_sequence<int, I...>) {
  return {&infer_slot<I>...};
}
constexpr auto kInferSlots = make_infer_slots(std::make_integer_sequence<int, kMaxPluginOps>{});

const PluginOp& op_of(const Node& n) {
  std::lock_guard<std::mutex> lock(load_mutex());  // (another thread may be loading a plugin)
  for (const PluginOp& p : plugin_ops())
    if (p.name == n.op->name) return p;
  fail("op ", n.op->name, " is not a plugin's");
}

class PluginKernel final : public Kernel {
 public:
  PluginKernel(const PluginOp& op, void* k) : op_(op), k_(k), locked_(!(op.def->flags & AG_OP_THREAD_SAFE)) {}
  ~PluginKernel() override {
    if (op_.def->destroy) op_.def->destroy(k_);
  }
  void run(void* const* in, void* const* out, const RunCtx&) const override {
    ag_error err{};
    int32_t rc;
    if (locked_) {
      std::lock_guard<std::mutex> g(mu_);
      rc = op_.def->run(k_, in, out, &err);
    } else {
      rc = op_.def->run(k_, in, out, &err);
    }
    if (rc != 0) fail(op_.name, " (plugin ", op_.plugin, " ", op_.version, "): ", message(err));
  }
  std::string name() const override { return "plugin:" + op_.name; }

 private:
  const PluginOp& op_;
  void* k_;
  bool locked_;
  mutable std::mutex mu_;
};

std::unique_ptr<Kernel> make_plugin_kernel(const Node& n, const BuildCtx&) {
  const PluginOp& op = op_of(n);
  std::vector<TensorType> it, ot;
  for (Value* v : n.inputs) it.push_back(v->type);
  for (Value* v : n.outputs) ot.push_back(v->type);
  // the node's types are what inference gives now (a graph read from a file was built by another process)
  std::vector<TensorType> again = infer_plugin(op, it, n.attrs);
  AG_CHECK(again == ot, op.name, " (plugin ", op.plugin, "): inference now gives other output types than the node has");
  std::vector<ag_type> pin = to_plugin(it, op.name.c_str()), pout = to_plugin(ot, op.name.c_str());
  ag_error err{};
  void* k = op.def->create(pin.data(), static_cast<int32_t>(pin.size()), pout.data(), static_cast<int32_t>(pout.size()),
                           as_plugin(n.attrs), &kAttrApi, &err);
  AG_CHECK(k != nullptr, op.name, " (plugin ", op.plugin, " ", op.version, "): kernel creation failed: ", message(err));
  return std::make_unique<PluginKernel>(op, k);
}

// An epilogue op as one instruction: its row function's numbers from the node's float attributes.
bool fuse_plugin(const Node& n, FusedInstr* o) {
  const PluginOp& op = op_of(n);
  if (n.inputs.size() != 1 || n.out()->type.dtype != n.inputs[0]->type.dtype || !is_floating(n.out()->type.dtype))
    return false;
  *o = FusedInstr{};
  o->code = n.op->fused_code;
  o->nargs = 1;
  for (int k = 0; k < 3; ++k) {
    const char* key = op.def->epilogue_attrs[k];
    if (key && !attr_number(n.attrs, key, 0.0, &o->p[k])) return false;
  }
  return true;
}

std::deque<PluginInfo>& plugins() {
  static std::deque<PluginInfo> d;
  return d;
}

}  // namespace

const PluginInfo& load_plugin(const std::string& path) {
  std::lock_guard<std::mutex> lock(load_mutex());
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  AG_CHECK(h, "airgraph plugin: cannot load ", path, ": ", ::dlerror());
  auto entry = reinterpret_cast<ag_plugin_entry>(::dlsym(h, AG_PLUGIN_ENTRY));
  if (!entry) {
    ::dlclose(h);
    fail("airgraph plugin: ", path, " has no function ", AG_PLUGIN_ENTRY, " (extern \"C\"; include/airgraph/op_plugin.h)");
  }
  const ag_plugin* p = entry();
  AG_CHECK(p && p->name && p->version && p->num_ops >= 0 && (p->ops || p->num_ops == 0), "airgraph plugin: ", path,
           ": ", AG_PLUGIN_ENTRY, "() returned an incomplete description");
  AG_CHECK(p->abi == AG_PLUGIN_ABI, "airgraph plugin: ", path, " is built for plugin ABI ", p->abi, ", this airgraph has ",
           AG_PLUGIN_ABI, " (rebuild it against this airgraph's include/airgraph/op_plugin.h)");
  const std::string name = p->name, version = p->version;
  for (const PluginInfo& q : plugins()) {
    if (q.name != name) continue;
    AG_CHECK(q.version == version, "airgraph plugin: ", path, " is plugin '", name, "' version ", version, ", but version ",
             q.version, " is already loaded (from ", q.path, "); a process holds one version of a plugin");
    return q;  // (the same plugin again: its ops are registered; the extra dlopen reference is harmless)
  }
  // check every op before registering any
  const std::string prefix = name + "::";
  for (int32_t i = 0; i < p->num_ops; ++i) {
    const ag_op_def& d = p->ops[i];
    const std::string op = d.name ? d.name : "";
    AG_CHECK(op.size() > prefix.size() && op.compare(0, prefix.size(), prefix) == 0, "airgraph plugin: ", path,
             ": op '", op, "' must be named '", prefix, "<op>' (the plugin's namespace)");
    AG_CHECK(d.infer && d.create && d.run, "airgraph plugin: ", path, ": op '", op, "' lacks infer, create or run");
    AG_CHECK(d.min_inputs >= 0 && (d.max_inputs < 0 || d.max_inputs >= d.min_inputs), "airgraph plugin: ", path,
             ": op '", op, "' has arity [", d.min_inputs, ", ", d.max_inputs, "]");
    AG_CHECK(!(d.flags & AG_OP_EPILOGUE) || (d.epilogue_f32 && d.min_inputs == 1 && d.max_inputs == 1 &&
                                             (d.flags & AG_OP_ELEMENTWISE)),
             "airgraph plugin: ", path, ": op '", op, "' declares AG_OP_EPILOGUE: it must be unary, elementwise and "
             "give epilogue_f32");
    AG_CHECK(!find_op(op), "airgraph plugin: ", path, ": op '", op, "' is already registered");
    AG_CHECK(plugin_ops().size() + i < static_cast<size_t>(std::min<int64_t>(kMaxPluginOps, kMaxRowCodes)), "airgraph plugin: ", path, ": more than ",
             kMaxPluginOps, " plugin ops in one process");
  }
  PluginInfo info{name, version, path, {}};
  for (int32_t i = 0; i < p->num_ops; ++i) {
    const ag_op_def& d = p->ops[i];
    const size_t slot = plugin_ops().size();
    PluginOp& po = plugin_ops().emplace_back(PluginOp{&d, d.name, name, version});
    g_slots[slot] = &po;
    OpDef od;
    od.name = po.name.c_str();
    od.min_inputs = d.min_inputs;
    od.max_inputs = d.max_inputs;
    od.infer = kInferSlots[slot];
    od.make_kernel = make_plugin_kernel;
    if (d.flags & AG_OP_ELEMENTWISE) od.props |= kElementwise;
    if (d.flags & AG_OP_NO_FOLD) od.props |= kNoFold | kNoCSE;
    if (d.flags & AG_OP_EPILOGUE) {  // (fe::run_unary runs its row function)
      od.epilogue = true;
      od.fuse = fuse_plugin;
      od.row_f32 = d.epilogue_f32;
      od.fused_code = kRowCodeBegin + static_cast<int64_t>(slot);
    }
    od.plugin = po.plugin.c_str();
    od.plugin_version = po.version.c_str();
    register_op(od);
    info.ops.push_back(po.name);
  }
  return plugins().emplace_back(std::move(info));
}

std::vector<PluginInfo> loaded_plugins() {
  std::lock_guard<std::mutex> lock(load_mutex());
  return {plugins().begin(), plugins().end()};
}

}  // namespace ag
