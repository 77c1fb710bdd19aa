// Tensor types of the IR. A dimension is either a constant or a named symbol
// (with the size it had when the graph was traced as a hint); symbolic graphs are
// specialized to concrete sizes before planning, so kernels only see constants.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace ag {

struct Dim {
  int64_t value = 0;  // the size, or the hint when symbolic
  int32_t sym = -1;   // index into Graph::symbols, -1 when constant
  bool is_static() const { return sym < 0; }
  bool operator==(const Dim& o) const { return value == o.value && sym == o.sym; }
};

using Shape = std::vector<int64_t>;

struct TensorType {
  DType dtype = DType::f32;
  std::vector<Dim> dims;

  TensorType() = default;
  TensorType(DType t, const Shape& s) : dtype(t) {
    dims.reserve(s.size());
    for (int64_t v : s) dims.push_back(Dim{v, -1});
  }
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_static() const {
    for (auto& d : dims)
      if (!d.is_static()) return false;
    return true;
  }
  Shape shape() const {  // sizes (hints for symbolic dims)
    Shape s;
    s.reserve(dims.size());
    for (auto& d : dims) s.push_back(d.value);
    return s;
  }
  int64_t size(int64_t i) const { return dims[i].value; }
  int64_t numel() const {
    int64_t n = 1;
    for (auto& d : dims) n *= d.value;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  std::string str() const;  // "float32[2, 3]"
};

std::string shape_str(const Shape& s);
Shape contiguous_strides(const Shape& s);  // in elements
int64_t normalize_dim(int64_t d, int64_t rank);  // throws on out of range

// NumPy/PyTorch broadcasting of two shapes; throws naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Strides (in elements) to read `in` broadcast to `out` (0 on broadcast dims).
Shape broadcast_strides(const Shape& in, const Shape& out);

}  // namespace ag
