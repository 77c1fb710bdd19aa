// Runs a separable gather (ir/separable_gather.h) inside a kernel.
#pragma once
#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "ir/separable_gather.h"

namespace ag {

// Checks every index (throws naming `what`) and fills tab (table_bytes()).
inline void gather_prepare(const SeparableGather& g, const void* const* idx, int64_t* tab, const char* what) {
  const int64_t n = g.total();
  for (int64_t i = 0; i <= n; ++i) tab[i] = 0;
  for (size_t j = 0; j < g.i32.size(); ++j) {
    auto ld = [&](int64_t q) {
      return g.i32[j] ? static_cast<const int32_t*>(idx[j])[q] : static_cast<const int64_t*>(idx[j])[q];
    };
    const int64_t size = g.dim_size[j];
    for (int64_t q = 0; q < g.numel[j]; ++q) {
      int64_t v = ld(q);
      if (v < -size || v >= size)
        fail(what, ": index ", v, " is out of bounds for dimension ", g.dim[j], " with size ", size);
    }
    auto off = [&](int64_t q) {
      int64_t v = ld(q);
      return (v < 0 ? v + size : v) * g.dim_stride[j];
    };
    if (g.vary[j] < 0) {
      tab[n] += off(0);
      continue;
    }
    int64_t* t = tab + g.tab_start[g.vary[j]];
    for (int64_t i = 0; i < g.bshape[g.vary[j]]; ++i) t[i] += off(i * g.step[j]);
  }
}

// dst[0, n) = conv(x[source of output element b + i]) for i in [0, n).
template <typename T, typename Conv>
void gather_load(const SeparableGather& g, const T* x, const int64_t* tab, int64_t b, int64_t n, float* dst, Conv conv) {
  const int nbd = static_cast<int>(g.bshape.size());
  const int64_t L = g.bshape.back();
  int64_t ctr[16];
  int64_t rr = b / L, j = b % L;
  for (int d = nbd - 2; d >= 0; --d) {
    ctr[d] = rr % g.bshape[d];
    rr /= g.bshape[d];
  }
  int64_t pidx = rr;
  const int64_t* tl = tab + g.tab_start[nbd - 1];
  const int64_t base = tab[g.total()];
  int64_t pos = 0;
  while (pos < n) {
    int64_t off = base + pidx * g.pre_stride;
    for (int d = 0; d < nbd - 1; ++d) off += tab[g.tab_start[d] + ctr[d]];
    const int64_t len = std::min(L - j, n - pos);
    const T* s = x + off;
    const int64_t* t = tl + j;
    float* o = dst + pos;
    for (int64_t i = 0; i < len; ++i) o[i] = conv(s[t[i]]);
    pos += len;
    j = 0;
    int d = nbd - 2;
    for (; d >= 0; --d) {
      if (++ctr[d] < g.bshape[d]) break;
      ctr[d] = 0;
    }
    if (d < 0) ++pidx;
  }
}

}  // namespace ag
