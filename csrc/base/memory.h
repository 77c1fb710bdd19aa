// Aligned host memory for the engine's buffers (prepacked weights, arenas).
#pragma once

#include <cstddef>
#include <memory>

namespace ag {

// At least `bytes` (rounded up to 64, never 0) bytes, 64-byte aligned, freed with the last
// owner. (Transparent huge pages were tried here, madvise(MADV_HUGEPAGE) on buffers of 4 MB and
// more: with THP's defrag set to "madvise", faulting them in compacted memory and made packing
// BERT base's weights 2-4x slower, 150-175 ms -> 310-670 ms, for no measurable gain per call.)
std::shared_ptr<void> alloc_aligned(size_t bytes);

}  // namespace ag
