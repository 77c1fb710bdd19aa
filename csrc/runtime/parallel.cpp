#include "runtime/parallel.h"

namespace ag {
namespace {
int g_threads = 0;
}
int num_threads() {
  if (g_threads <= 0) g_threads = omp_get_max_threads();
  return g_threads;
}
void set_num_threads(int n) { g_threads = n > 0 ? n : omp_get_max_threads(); }
}  // namespace ag
