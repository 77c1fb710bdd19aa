#include "base/parallel.h"

namespace ag {
namespace {
// Per calling thread: concurrent callers may each ask for their own count.
thread_local int t_threads = 0;
}  // namespace
int num_threads() {
  if (t_threads <= 0) t_threads = omp_get_max_threads();
  return t_threads;
}
// Also sets OpenMP's default for this thread (a per-thread setting in OpenMP),
// so the oneDNN primitives it runs follow the same count.
void set_num_threads(int n) {
  int want = n > 0 ? n : omp_get_max_threads();
  t_threads = want;
  if (omp_get_max_threads() != want) omp_set_num_threads(want);  // (torch may have set it since)
}
}  // namespace ag
