#include "base/memory.h"

#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <utility>

#include "base/error.h"

namespace ag {

std::shared_ptr<void> alloc_aligned(size_t bytes) {
  size_t padded = ((bytes + 63) / 64) * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  AG_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

namespace {

constexpr size_t kCachedMin = size_t{1} << 20;  // smaller blocks: glibc's heap reuses them anyway

struct OutputCache {
  struct Block {
    void* p;
    size_t bytes;
  };
  std::mutex mu;
  std::deque<Block> free;  // oldest first
  Block big{nullptr, 0};   // the last block given back that was over the limit by itself
  size_t free_bytes = 0;   // (of `free`)
  size_t limit = 0;
  int64_t hits = 0, misses = 0;

  OutputCache() {
    const char* e = std::getenv("AIRGRAPH_OUTPUT_CACHE_MB");
    long long mb = 512;
    if (e != nullptr && *e != '\0') {
      try {
        mb = std::stoll(e);
      } catch (const std::exception&) {
        mb = 512;
      }
    }
    limit = mb > 0 ? static_cast<size_t>(mb) << 20 : 0;
  }

  // A free block of [bytes, bytes + bytes / 4], the smallest (nullptr: none).
  void* take(size_t bytes, size_t* got) {
    std::lock_guard<std::mutex> lk(mu);
    size_t best = free.size();
    for (size_t i = 0; i < free.size(); ++i)
      if (free[i].bytes >= bytes && free[i].bytes <= bytes + bytes / 4 &&
          (best == free.size() || free[i].bytes < free[best].bytes))
        best = i;
    if (best == free.size()) {
      if (big.p != nullptr && big.bytes >= bytes && big.bytes <= bytes + bytes / 4) {
        ++hits;
        *got = big.bytes;
        return std::exchange(big, Block{nullptr, 0}).p;
      }
      ++misses;
      return nullptr;
    }
    ++hits;
    Block b = free[best];
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
    free_bytes -= b.bytes;
    *got = b.bytes;
    return b.p;
  }

  void give_back(void* p, size_t bytes) {
    std::deque<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (bytes > limit) {
        // a block over the limit: the last one is kept, beside the others, so that a graph whose
        // output is that large (a decoder's logits over a 151936-token vocabulary at batch 8: 622
        // MB) does not fault it in again on every call (the process held it a moment ago: its peak
        // memory is the same)
        if (big.p != nullptr) drop.push_back(big);
        big = {p, bytes};
      } else {
        free.push_back({p, bytes});
        free_bytes += bytes;
        while (free_bytes > limit) {
          drop.push_back(free.front());
          free_bytes -= free.front().bytes;
          free.pop_front();
        }
      }
    }
    for (const Block& b : drop) std::free(b.p);  // outside the lock
  }

  void release() {
    std::deque<Block> drop;
    {
      std::lock_guard<std::mutex> lk(mu);
      drop.swap(free);
      free_bytes = 0;
      if (big.p != nullptr) drop.push_back(std::exchange(big, Block{nullptr, 0}));
    }
    for (const Block& b : drop) std::free(b.p);
  }
};

// Never destroyed: outputs held by the caller may be let go during the process's exit.
OutputCache& output_cache() {
  static OutputCache* c = new OutputCache();
  return *c;
}

}  // namespace

std::shared_ptr<void> alloc_output(size_t bytes) {
  OutputCache& c = output_cache();
  size_t padded = ((bytes + 4095) / 4096) * 4096;
  if (padded < kCachedMin || c.limit == 0) return alloc_aligned(bytes);
  size_t got = 0;
  void* p = c.take(padded, &got);
  if (p == nullptr) {
    p = std::aligned_alloc(4096, padded);
    AG_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    got = padded;
  }
  return std::shared_ptr<void>(p, [got](void* q) { output_cache().give_back(q, got); });
}

OutputCacheStats output_cache_stats() {
  OutputCache& c = output_cache();
  std::lock_guard<std::mutex> lk(c.mu);
  const bool big = c.big.p != nullptr;
  return OutputCacheStats{static_cast<int64_t>(c.free.size()) + big,
                          static_cast<int64_t>(c.free_bytes + (big ? c.big.bytes : 0)), c.hits, c.misses};
}

void release_output_cache() { output_cache().release(); }

size_t output_cache_limit() { return output_cache().limit; }

}  // namespace ag
