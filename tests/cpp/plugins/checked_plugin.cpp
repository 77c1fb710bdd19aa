// A test plugin whose ops break the contract on purpose (tests/cpp/test_plugin.cpp): an
// elementwise op whose inference gives another shape than its inputs' broadcast, an op whose
// kernel reports an error, and an op that does not declare itself thread safe and records how
// many calls of its kernel ran at once.
#include <airgraph/op_plugin.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {
std::atomic<int> g_inside{0}, g_max_inside{0};

int32_t same_type(const ag_type* in, int32_t, const ag_attrs*, const ag_attr_api*, ag_type* out, ag_error*) {
  out[0] = in[0];
  return 1;
}
int32_t one_longer(const ag_type* in, int32_t, const ag_attrs*, const ag_attr_api*, ag_type* out, ag_error*) {
  out[0] = in[0];
  out[0].shape[out[0].rank - 1] += 1;
  return 1;
}
void* create(const ag_type* in, int32_t, const ag_type*, int32_t, const ag_attrs*, const ag_attr_api*, ag_error*) {
  return new int64_t(ag::plugin::numel(in[0]));
}
void destroy(void* k) { delete static_cast<int64_t*>(k); }

int32_t copy_or_fail(void* k, const void* const* in, void* const* out, ag_error* err) {
  const int64_t n = *static_cast<int64_t*>(k);
  const float* x = static_cast<const float*>(in[0]);
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] < 0) {
      ag::plugin::fail(err, "negative input %g at element %lld", x[i], static_cast<long long>(i));
      return 1;
    }
    static_cast<float*>(out[0])[i] = x[i];
  }
  return 0;
}
int32_t count_inside(void* k, const void* const* in, void* const* out, ag_error* err) {
  const int now = ++g_inside;
  int m = g_max_inside.load();
  while (now > m && !g_max_inside.compare_exchange_weak(m, now)) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  --g_inside;
  return copy_or_fail(k, in, out, err);
}

const ag_op_def kOps[] = {
    {"checked::wrong_shape", 1, 1, AG_OP_ELEMENTWISE, one_longer, create, copy_or_fail, destroy, nullptr, {}},
    {"checked::fails", 1, 1, AG_OP_THREAD_SAFE, same_type, create, copy_or_fail, destroy, nullptr, {}},
    {"checked::unsafe", 1, 1, 0, same_type, create, count_inside, destroy, nullptr, {}},
};
const ag_plugin kPlugin = {AG_PLUGIN_ABI, "checked", "0.1", 3, kOps};
}  // namespace

AG_PLUGIN_EXPORT const ag_plugin* airgraph_plugin(void) { return &kPlugin; }
AG_PLUGIN_EXPORT int checked_max_inside(void) { return g_max_inside.load(); }
