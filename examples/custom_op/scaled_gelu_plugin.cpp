// The example op plugin: mylib::scaled_gelu(x, scale) = gelu_tanh(x) * scale on float32, the same
// op mylib.py defines with torch.library, as airgraph runs it from C++ (include/airgraph/op_plugin.h).
// It is elementwise, thread safe (its kernel holds only the scale) and fusable as a GEMM epilogue.
// Build: see CMakeLists.txt here, or
//   g++ -O2 -std=c++17 -shared -fPIC -I"$(python -c 'import airgraph; print(airgraph.include_dir())')"
//       scaled_gelu_plugin.cpp -o libmylib.so
#include <airgraph/op_plugin.h>

#include <cmath>

#ifndef MYLIB_VERSION
#define MYLIB_VERSION "1.0"
#endif

namespace {
using ag::plugin::fail;

// gelu's tanh form, as torch computes it in float32
inline float scaled_gelu(float x, float scale) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  const float inner = k * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner)) * scale;
}

int32_t infer(const ag_type* in, int32_t, const ag_attrs* attrs, const ag_attr_api* api, ag_type* out,
              ag_error* err) {
  if (in[0].dtype != AG_FLOAT32) return fail(err, "mylib::scaled_gelu takes float32 (dtype code %d given)", in[0].dtype);
  double scale;
  if (!api->get_float(attrs, "scale", &scale)) return fail(err, "mylib::scaled_gelu needs a float attribute 'scale'");
  out[0] = in[0];  // same dtype and shape
  return 1;
}

struct Kernel {
  float scale;
  int64_t n;
};

void* create(const ag_type* in, int32_t, const ag_type*, int32_t, const ag_attrs* attrs, const ag_attr_api* api,
             ag_error*) {
  return new Kernel{static_cast<float>(ag::plugin::float_attr(attrs, api, "scale", 1.0)), ag::plugin::numel(in[0])};
}

int32_t run(void* k, const void* const* in, void* const* out, ag_error*) {
  const Kernel& K = *static_cast<const Kernel*>(k);
  const float* x = static_cast<const float*>(in[0]);
  float* y = static_cast<float*>(out[0]);  // (may be x itself: element i is read before it is written)
  for (int64_t i = 0; i < K.n; ++i) y[i] = scaled_gelu(x[i], K.scale);
  return 0;
}

void destroy(void* k) { delete static_cast<Kernel*>(k); }

// As a GEMM's post-op: in place on a float32 row segment, p[0] = the "scale" attribute.
void epilogue(float* x, int64_t n, const double* p) {
  const float scale = static_cast<float>(p[0]);
  for (int64_t i = 0; i < n; ++i) x[i] = scaled_gelu(x[i], scale);
}

const ag_op_def kOps[] = {{
    "mylib::scaled_gelu", 1, 1, AG_OP_ELEMENTWISE | AG_OP_EPILOGUE | AG_OP_THREAD_SAFE,
    infer, create, run, destroy, epilogue, {"scale", nullptr, nullptr},
}};
const ag_plugin kPlugin = {AG_PLUGIN_ABI, "mylib", MYLIB_VERSION, 1, kOps};
}  // namespace

AG_PLUGIN_EXPORT const ag_plugin* airgraph_plugin(void) { return &kPlugin; }
