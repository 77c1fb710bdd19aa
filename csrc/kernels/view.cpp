// Zero-copy views and plain copies: reshape (a view: engine values are always
// contiguous, so any reshape is the same bytes) and clone (a copy).
#include "kernels/common.h"

namespace ag {
namespace {

std::vector<TensorType> infer_reshape(const std::vector<TensorType>& in, const Attrs& a) {
  Shape shape = a.ints("shape");
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      AG_CHECK(infer_at < 0, "reshape: only one dimension can be -1, got ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      AG_CHECK(shape[i] >= 0, "reshape: invalid size in ", shape_str(shape));
      known *= shape[i];
    }
  }
  int64_t n = in[0].numel();
  if (infer_at >= 0) {
    AG_CHECK(known != 0 && n % known == 0, "reshape: cannot view ", in[0].str(), " as ", shape_str(shape));
    shape[infer_at] = n / known;
  }
  AG_CHECK(TensorType(in[0].dtype, shape).numel() == n, "reshape: cannot view ", in[0].str(), " (", n,
           " elements) as ", shape_str(shape));
  return {TensorType(in[0].dtype, shape)};
}

std::unique_ptr<Kernel> make_alias(const Node&) {
  // Never runs on the hot path's data: the planner points the output at the input.
  return make_fn_kernel("view", [](void* const*, void* const*) {});
}

std::unique_ptr<Kernel> make_clone(const Node& n) {
  size_t bytes = n.inputs[0]->type.nbytes();
  return make_fn_kernel("copy", [bytes](void* const* in, void* const* out) {
    if (in[0] != out[0] && bytes) std::memcpy(out[0], in[0], bytes);
  });
}

}  // namespace

AG_REGISTER_OP(reshape, {.name = "reshape", .min_inputs = 1, .max_inputs = 1, .infer = infer_reshape,
                         .make_kernel = make_alias, .props = kAlias});
AG_REGISTER_OP(clone, {.name = "clone", .min_inputs = 1, .max_inputs = 1, .infer = infer_same,
                       .make_kernel = make_clone, .props = kNoProps});

}  // namespace ag
