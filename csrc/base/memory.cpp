#include "base/memory.h"

#include <cstdlib>

#include "base/error.h"

namespace ag {

std::shared_ptr<void> alloc_aligned(size_t bytes) {
  size_t padded = ((bytes + 63) / 64) * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  AG_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace ag
