// Typed node attributes: a small ordered list of (name, value). Only touched at
// compile time; kernels copy what they need into their own state.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "ir/dtype.h"
#include "base/error.h"

namespace ag {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, DType>;

class Attrs {
 public:
  void set(const std::string& k, AttrValue v) {
    for (auto& [name, val] : items_)
      if (name == k) {
        val = std::move(v);
        return;
      }
    items_.emplace_back(k, std::move(v));
  }
  bool has(const std::string& k) const { return find(k) != nullptr; }
  const AttrValue* find(const std::string& k) const {
    for (auto& [name, val] : items_)
      if (name == k) return &val;
    return nullptr;
  }
  int64_t i(const std::string& k) const { return get<int64_t>(k); }
  int64_t i(const std::string& k, int64_t dflt) const { return has(k) ? i(k) : dflt; }
  double f(const std::string& k) const {
    const AttrValue* v = find(k);
    if (v && std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
    return get<double>(k);
  }
  double f(const std::string& k, double dflt) const { return has(k) ? f(k) : dflt; }
  bool b(const std::string& k) const {
    const AttrValue* v = find(k);
    if (v && std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v) != 0;
    return get<bool>(k);
  }
  bool b(const std::string& k, bool dflt) const { return has(k) ? b(k) : dflt; }
  const std::string& s(const std::string& k) const { return get<std::string>(k); }
  std::string s(const std::string& k, const std::string& dflt) const { return has(k) ? s(k) : dflt; }
  const std::vector<int64_t>& ints(const std::string& k) const { return get<std::vector<int64_t>>(k); }
  std::vector<int64_t> ints(const std::string& k, std::vector<int64_t> dflt) const { return has(k) ? ints(k) : dflt; }
  const std::vector<double>& floats(const std::string& k) const { return get<std::vector<double>>(k); }
  DType dtype(const std::string& k) const { return get<DType>(k); }
  DType dtype(const std::string& k, DType dflt) const { return has(k) ? dtype(k) : dflt; }

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool operator==(const Attrs& o) const { return items_ == o.items_; }
  std::string str() const;

 private:
  template <typename T>
  const T& get(const std::string& k) const {
    const AttrValue* v = find(k);
    AG_CHECK(v != nullptr, "missing attribute '", k, "'");
    AG_CHECK(std::holds_alternative<T>(*v), "attribute '", k, "' has the wrong type");
    return std::get<T>(*v);
  }
  std::vector<std::pair<std::string, AttrValue>> items_;
};

// Attribute `k` as a number (int or double) in *out; `dflt` when absent. False
// when it holds something else.
inline bool attr_number(const Attrs& a, const std::string& k, double dflt, double* out) {
  const AttrValue* v = a.find(k);
  if (!v) {
    *out = dflt;
    return true;
  }
  if (std::holds_alternative<int64_t>(*v)) *out = static_cast<double>(std::get<int64_t>(*v));
  else if (std::holds_alternative<double>(*v)) *out = std::get<double>(*v);
  else return false;
  return true;
}

}  // namespace ag
