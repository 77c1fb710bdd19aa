// Helpers shared by the C++ tests: deterministic random data and attribute lists. The op-test
// harness (build, compile, run at several thread counts, compare) is check_op.h.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ir/attrs.h"

namespace ag::test {

// n normally distributed floats, the same for the same seed.
inline std::vector<float> randn(int64_t n, uint32_t seed = 1) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline Attrs attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (auto& [k, v] : kv) a.set(k, v);
  return a;
}

}  // namespace ag::test
