#include "ir/op_registry.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "base/error.h"
#include "ir/graph.h"

namespace ag {
namespace {
std::map<std::string, OpDef, std::less<>>& registry() {
  static std::map<std::string, OpDef, std::less<>> r;
  return r;
}
// Plugins register ops while other threads may compile (find_op): the map is read under a shared
// lock; its entries never move, so an OpDef* stays valid.
std::shared_mutex& registry_mutex() {
  static std::shared_mutex m;
  return m;
}

std::array<std::atomic<RowF32Fn>, kMaxRowCodes>& row_fns() {
  static std::array<std::atomic<RowF32Fn>, kMaxRowCodes> a{};
  return a;
}
}  // namespace

RowF32Fn row_fn(int64_t code) {
  if (code < kRowCodeBegin || code >= kRowCodeBegin + kMaxRowCodes) return nullptr;
  return row_fns()[code - kRowCodeBegin].load(std::memory_order_acquire);
}

void register_op(const OpDef& def) {
  std::unique_lock lock(registry_mutex());
  auto& r = registry();
  if (r.count(def.name)) fail("op '", def.name, "' registered twice");
  if (!def.infer) fail("op '", def.name, "' registered without shape inference");
  if (def.row_f32) {
    AG_CHECK(def.fused_code >= kRowCodeBegin && def.fused_code < kRowCodeBegin + kMaxRowCodes, "op '", def.name,
             "': a row function needs an instruction code in [", kRowCodeBegin, ", ", kRowCodeBegin + kMaxRowCodes, ")");
    AG_CHECK(!row_fn(def.fused_code), "op '", def.name, "': instruction code ", def.fused_code, " is taken");
  }
  r.emplace(def.name, def);
  if (def.row_f32) row_fns()[def.fused_code - kRowCodeBegin].store(def.row_f32, std::memory_order_release);
}

const OpDef* find_op(std::string_view name) {
  std::shared_lock lock(registry_mutex());
  auto& r = registry();
  auto it = r.find(name);
  return it == r.end() ? nullptr : &it->second;
}

std::vector<const OpDef*> all_ops() {
  std::shared_lock lock(registry_mutex());
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
