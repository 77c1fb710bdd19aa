// Aligned host memory for the engine's buffers (prepacked weights, arenas, outputs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ag {

// At least `bytes` (rounded up to 64, never 0) bytes, 64-byte aligned, freed with the last
// owner. (Transparent huge pages were tried here, madvise(MADV_HUGEPAGE) on buffers of 4 MB and
// more: with THP's defrag set to "madvise", faulting them in compacted memory and made packing
// BERT base's weights 2-4x slower, 150-175 ms -> 310-670 ms, for no measurable gain per call.)
std::shared_ptr<void> alloc_aligned(size_t bytes);

// The same for a graph's outputs, which are made on every call and handed to the caller: a
// block of 1 MiB or more comes back to a process-wide cache when its last owner lets it go and
// serves the next output of about its size (at most 1/4 more), so a graph called again does not
// fault a fresh mapping in page by page (glibc maps blocks over 32 MiB anew every time, and the
// kernel zeroes each page: UperNet's 39 MB logits cost 9.6 k faults, more than the kernel that
// writes them). The cache keeps at most output_cache_limit() bytes of free blocks (the oldest
// beyond it are freed; AIRGRAPH_OUTPUT_CACHE_MB, default 512; 0 turns it off), and beside them the
// last block given back that was larger than that by itself.
std::shared_ptr<void> alloc_output(size_t bytes);

struct OutputCacheStats {
  int64_t free_blocks = 0, free_bytes = 0, hits = 0, misses = 0;
};
OutputCacheStats output_cache_stats();
// Frees every cached block (the memory of outputs still held is not touched).
void release_output_cache();
size_t output_cache_limit();

}  // namespace ag
