#include "ir/op_registry.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "ir/graph.h"

namespace ag {
namespace {
std::map<std::string, OpDef, std::less<>>& registry() {
  static std::map<std::string, OpDef, std::less<>> r;
  return r;
}
}  // namespace

void register_op(const OpDef& def) {
  auto& r = registry();
  if (r.count(def.name)) fail("op '", def.name, "' registered twice");
  if (!def.infer) fail("op '", def.name, "' registered without shape inference");
  r.emplace(def.name, def);
}

const OpDef* find_op(std::string_view name) {
  auto& r = registry();
  auto it = r.find(name);
  return it == r.end() ? nullptr : &it->second;
}

std::vector<const OpDef*> all_ops() {
  std::vector<const OpDef*> v;
  for (auto& [k, d] : registry()) v.push_back(&d);
  return v;
}

void run_kernel_once(const Kernel& k, void* const* in, void* const* out) {
  std::shared_ptr<Storage> scratch = Storage::allocate(k.scratch_bytes());
  std::unique_ptr<KernelState> state = k.make_state();
  k.run(in, out, RunCtx{scratch->data, state.get()});
}

}  // namespace ag
