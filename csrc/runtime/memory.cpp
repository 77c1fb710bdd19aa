#include "runtime/memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ir/error.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace ag {
namespace {

bool huge_pages_wanted() {
  static const bool on = [] {
    const char* e = std::getenv("AIRGRAPH_HUGE_PAGES");
    return !(e && (std::strcmp(e, "0") == 0 || std::strcmp(e, "off") == 0));
  }();
  return on;
}

}  // namespace

std::shared_ptr<void> alloc_aligned(size_t bytes) {
  size_t padded = ((bytes + 63) / 64) * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  AG_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t(2) << 20;
  if (padded >= 2 * kHuge && huge_pages_wanted()) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t b = (a + kHuge - 1) & ~(kHuge - 1), e = (a + padded) & ~(kHuge - 1);
    if (e > b) (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);  // (a hint: failure is fine)
  }
#endif
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace ag
