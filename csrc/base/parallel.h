// Intra-op parallelism. Kernels split work with parallel_for; the thread count
// follows torch.get_num_threads() (the front sets it before each call, for the
// calling thread: each concurrent caller has its own count). OpenMP
// is the pool: PyTorch's wheel already loaded libgomp, so oneDNN, PyTorch and
// our kernels share one set of threads instead of fighting over two cores.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace ag {

int num_threads();
void set_num_threads(int n);

// One call's thread count: `n` (n <= 0: the calling thread's current OpenMP setting) while the scope
// lives, then the calling thread's own setting again, so a model compiled with num_threads never
// changes the thread count of the torch ops its caller runs next.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n) : prev_(omp_get_max_threads()) { set_num_threads(n > 0 ? n : prev_); }
  ~ThreadCountScope() { set_num_threads(prev_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int prev_;
};

// Calls f(begin, end) on disjoint chunks of [0, n); serial when n < 2 * grain.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  int nt = num_threads();
  if (nt <= 1 || n < 2 * grain || omp_in_parallel()) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(nt, (n + grain - 1) / grain);
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num();
    int64_t per = (n + chunks - 1) / chunks;
    int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) f(b, e);
  }
}

}  // namespace ag
