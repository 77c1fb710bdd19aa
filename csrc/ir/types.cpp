#include "ir/types.h"

#include <sstream>

#include "ir/attrs.h"
#include "base/error.h"

namespace ag {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

std::string TensorType::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    os << (i ? ", " : "");
    if (dims[i].is_static())
      os << dims[i].value;
    else
      os << "s" << dims[i].sym << "=" << dims[i].value;
  }
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int64_t normalize_dim(int64_t d, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  AG_CHECK(d >= -r && d < r, "dimension ", d, " out of range for a tensor of rank ", rank);
  return d < 0 ? d + r : d;
}

std::string Attrs::str() const {
  std::ostringstream os;
  bool first = true;
  for (auto& [k, v] : items_) {
    os << (first ? "" : ", ") << k << "=";
    first = false;
    std::visit(
        [&](auto&& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>>) {
            os << "[";
            for (size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
            os << "]";
          } else if constexpr (std::is_same_v<T, DType>) {
            os << dtype_name(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (x ? "true" : "false");
          } else if constexpr (std::is_same_v<T, std::string>) {
            os << '"' << x << '"';
          } else {
            os << x;
          }
        },
        v);
  }
  return os.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    AG_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape st(out.size(), 0);
  Shape cs = contiguous_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = (in[i] == 1 && out[off + i] != 1) ? 0 : cs[i];
  return st;
}

}  // namespace ag
