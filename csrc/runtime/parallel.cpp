#include "runtime/parallel.h"

namespace ag {
namespace {
int g_threads = 0;
}
int num_threads() {
  if (g_threads <= 0) g_threads = omp_get_max_threads();
  return g_threads;
}
// Also sets OpenMP's default so oneDNN primitives follow the same count.
void set_num_threads(int n) {
  int want = n > 0 ? n : omp_get_max_threads();
  if (want != g_threads) {
    g_threads = want;
    omp_set_num_threads(want);
  }
}
}  // namespace ag
