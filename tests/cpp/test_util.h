// Helpers shared by the C++ tests: deterministic random data and attribute lists. The op-test
// harness (build, compile, run at several thread counts, compare) is check_op.h.
#pragma once
#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
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

// Runs a shell command; returns its exit status and puts stdout+stderr in *out.
inline int shell(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

inline Attrs attrs(std::initializer_list<std::pair<std::string, AttrValue>> kv) {
  Attrs a;
  for (auto& [k, v] : kv) a.set(k, v);
  return a;
}

}  // namespace ag::test
