// Which instruction set our own kernels' two-width variants run (the decode GEMV, norms, softmax, the
// fused elementwise interpreter): AVX-512 (F/BW/DQ/VL) where the CPU has it, else AVX2 (the core's
// baseline, -march=x86-64-v3). AIRGRAPH_KERNEL_ISA=avx2 (read once) keeps AVX2 on an AVX-512 CPU;
// tests and benchmarks force either for the calls that follow with force(). A kernel reads the
// choice once per call, before it splits work across threads.
#pragma once
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ag::isa {

enum : int { kAuto = -1, kAvx2 = 0, kAvx512 = 1 };

inline bool cpu_has_avx512() {
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f")) && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return yes;
}
inline std::atomic<int>& forced() {
  static std::atomic<int> v{kAuto};
  return v;
}
inline bool env_avx512() {
  static const bool yes = [] {
    const char* e = std::getenv("AIRGRAPH_KERNEL_ISA");
    return !(e && std::strcmp(e, "avx2") == 0) && cpu_has_avx512();
  }();
  return yes;
}
// kAuto: the CPU and AIRGRAPH_KERNEL_ISA decide again; kAvx512 on a CPU without it runs AVX2.
inline void force(int which) { forced().store(which, std::memory_order_relaxed); }
inline bool use_avx512() {
  const int f = forced().load(std::memory_order_relaxed);
  return f == kAuto ? env_avx512() : f == kAvx512 && cpu_has_avx512();
}

}  // namespace ag::isa
