// Aligned host memory for the engine's large buffers (prepacked weights, arenas).
#pragma once

#include <cstddef>
#include <memory>

namespace ag {

// At least `bytes` (rounded up to 64, never 0) bytes, 64-byte aligned, freed with the last
// owner. A buffer of 4 MB or more asks Linux for transparent huge pages on its 2 MB-aligned
// interior (madvise; where THP is "madvise" or "always"): a 2 MB page is one page fault instead
// of 512 when a fresh buffer is first written (packing BERT base's GEMM weights writes 340 MB),
// and the kernels reading it miss the TLB less. AIRGRAPH_HUGE_PAGES=0 switches it off.
std::shared_ptr<void> alloc_aligned(size_t bytes);

}  // namespace ag
