// The slice attributes {dim, start, end, step} as torch reads them: one reading for the slice
// ops' inference and kernels and for the passes that match slices.
#pragma once
#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "ir/attrs.h"
#include "ir/types.h"

namespace ag {

// A slice {dim, start, end, step} normalized like torch: negative indices wrap,
// bounds clamp, an empty range is allowed. `what` names the op in errors.
struct SliceSpec {
  int64_t dim, start, len, step;
};
inline SliceSpec slice_spec(const TensorType& t, const Attrs& a, const char* what) {
  AG_CHECK(t.rank() >= 1, what, ": cannot slice a 0-d tensor");
  int64_t dim = normalize_dim(a.i("dim", 0), t.rank());
  int64_t size = t.size(dim), step = a.i("step", 1);
  AG_CHECK(step > 0, what, ": step must be positive, got ", step);
  int64_t start = a.i("start", 0), end = a.i("end", INT64_MAX);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, 0, size);
  if (end < start) end = start;
  return {dim, start, (end - start + step - 1) / step, step};
}

}  // namespace ag
