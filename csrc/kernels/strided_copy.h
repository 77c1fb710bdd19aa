// A generic strided copy: dst[i] = src[i] over an index space `sizes`, each
// side addressed by its own element strides (0 = broadcast, negative = flipped)
// and element offset. Built once per node (dims of size 1 dropped, mergeable
// neighbours collapsed); run() does contiguous innermost runs with memcpy, a
// broadcast innermost dim as a fill and anything else with a typed loop,
// parallel over the outer rows. Serves permute, expand, slice, select, flip,
// repeat, cat, pad, roll and the scatters.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ir/attrs.h"
#include "base/error.h"
#include "ir/slice.h"
#include "ir/types.h"
#include "base/parallel.h"

namespace ag {

class StridedCopy {
 public:
  static constexpr int kMaxDims = 16;

  StridedCopy() = default;
  StridedCopy(const Shape& sizes, const Shape& src_strides, const Shape& dst_strides, int64_t src_off,
              int64_t dst_off, size_t esize) {
    init(sizes, src_strides, dst_strides, src_off, dst_off, esize);
  }

  void init(const Shape& sizes, const Shape& src_strides, const Shape& dst_strides, int64_t src_off,
            int64_t dst_off, size_t esize) {
    AG_CHECK(sizes.size() == src_strides.size() && sizes.size() == dst_strides.size(),
             "strided copy: rank mismatch");
    esize_ = static_cast<int64_t>(esize);
    soff_ = src_off;
    doff_ = dst_off;
    size_.clear();
    sstr_.clear();
    dstr_.clear();
    numel_ = 1;
    for (int64_t s : sizes) numel_ *= s;
    if (numel_ == 0) return;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] == 1) continue;
      if (!size_.empty() && sstr_.back() == src_strides[i] * sizes[i] && dstr_.back() == dst_strides[i] * sizes[i]) {
        size_.back() *= sizes[i];
        sstr_.back() = src_strides[i];
        dstr_.back() = dst_strides[i];
        continue;
      }
      size_.push_back(sizes[i]);
      sstr_.push_back(src_strides[i]);
      dstr_.push_back(dst_strides[i]);
    }
    if (size_.empty()) {
      size_ = {1};
      sstr_ = {1};
      dstr_ = {1};
    }
    AG_CHECK(static_cast<int>(size_.size()) <= kMaxDims, "strided copy: too many dimensions (", size_.size(), ")");
    const int nd = static_cast<int>(size_.size());
    inner_ = size_[nd - 1];
    rows_ = numel_ / inner_;
    int64_t row_bytes = std::max<int64_t>(1, inner_ * esize_);
    grain_ = std::max<int64_t>(1, (64 * 1024) / row_bytes);
    // A transpose (the innermost output dim is strided in the source while another
    // dim is contiguous there) is copied in tiles so both sides stay in cache.
    tile_ = -1;
    if (nd >= 2 && dstr_[nd - 1] == 1 && sstr_[nd - 1] != 1 && sstr_[nd - 1] != 0 && inner_ >= 8) {
      for (int k = nd - 2; k >= 0; --k)
        if (sstr_[k] == 1 && size_[k] >= 8) {
          tile_ = k;
          break;
        }
    }
    if (tile_ >= 0) {
      kblocks_ = (size_[tile_] + kTile - 1) / kTile;
      units_ = numel_ / (size_[tile_] * inner_) * kblocks_;
      tile_grain_ = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, kTile * inner_ * esize_));
    }
  }

  int64_t numel() const { return numel_; }

  void run(const void* src, void* dst) const {
    if (numel_ == 0) return;
    const char* s = static_cast<const char*>(src) + soff_ * esize_;
    char* d = static_cast<char*>(dst) + doff_ * esize_;
    switch (esize_) {
      case 1: go<uint8_t>(s, d); break;
      case 2: go<uint16_t>(s, d); break;
      case 4: go<uint32_t>(s, d); break;
      case 8: go<uint64_t>(s, d); break;
      default: fail("strided copy: element size ", esize_, " is not supported");
    }
  }

 private:
  static constexpr int64_t kTile = 32;

  template <typename T>
  void go(const char* s, char* d) const {
    if (tile_ >= 0) {
      parallel_for(units_, tile_grain_, [&](int64_t b, int64_t e) {
        tiles<T>(reinterpret_cast<const T*>(s), reinterpret_cast<T*>(d), b, e);
      });
      return;
    }
    parallel_for(rows_, grain_, [&](int64_t b, int64_t e) { rows<T>(reinterpret_cast<const T*>(s),
                                                                    reinterpret_cast<T*>(d), b, e); });
  }

  template <typename T>
  void rows(const T* src, T* dst, int64_t b, int64_t e) const {
    const int nd = static_cast<int>(size_.size());
    const int no = nd - 1;  // outer dims
    int64_t idx[kMaxDims];
    int64_t so = 0, dof = 0;
    int64_t r = b;
    for (int i = no - 1; i >= 0; --i) {
      idx[i] = r % size_[i];
      r /= size_[i];
      so += idx[i] * sstr_[i];
      dof += idx[i] * dstr_[i];
    }
    const int64_t n = inner_, ss = sstr_[nd - 1], ds = dstr_[nd - 1];
    for (int64_t row = b; row < e; ++row) {
      const T* sp = src + so;
      T* dp = dst + dof;
      if (ss == 1 && ds == 1) {
        if (n * static_cast<int64_t>(sizeof(T)) >= 256) {
          std::memcpy(dp, sp, n * sizeof(T));
        } else {
          for (int64_t j = 0; j < n; ++j) dp[j] = sp[j];
        }
      } else if (ss == 0) {
        const T v = *sp;
        if (ds == 1) {
          for (int64_t j = 0; j < n; ++j) dp[j] = v;
        } else {
          for (int64_t j = 0; j < n; ++j) dp[j * ds] = v;
        }
      } else if (ds == 1) {
        for (int64_t j = 0; j < n; ++j) dp[j] = sp[j * ss];
      } else {
        for (int64_t j = 0; j < n; ++j) dp[j * ds] = sp[j * ss];
      }
      // next row: increment the outer index with carry
      for (int i = no - 1; i >= 0; --i) {
        so += sstr_[i];
        dof += dstr_[i];
        if (++idx[i] < size_[i]) break;
        so -= sstr_[i] * size_[i];
        dof -= dstr_[i] * size_[i];
        idx[i] = 0;
      }
    }
  }

  template <typename T>
  void tiles(const T* src, T* dst, int64_t b, int64_t e) const {
    const int nd = static_cast<int>(size_.size());
    const int64_t n = inner_, sn = sstr_[nd - 1], sk = sstr_[tile_], dk = dstr_[tile_], K = size_[tile_];
    for (int64_t u = b; u < e; ++u) {
      int64_t plane = u / kblocks_, kb = u % kblocks_;
      int64_t so = 0, dof = 0, r = plane;
      for (int i = nd - 2; i >= 0; --i) {
        if (i == tile_) continue;
        int64_t ix = r % size_[i];
        r /= size_[i];
        so += ix * sstr_[i];
        dof += ix * dstr_[i];
      }
      const int64_t i0 = kb * kTile, i1 = std::min(K, i0 + kTile);
      for (int64_t j0 = 0; j0 < n; j0 += kTile) {
        const int64_t j1 = std::min(n, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          const T* sp = src + so + i * sk;
          T* dp = dst + dof + i * dk;
          for (int64_t j = j0; j < j1; ++j) dp[j] = sp[j * sn];
        }
      }
    }
  }

  std::vector<int64_t> size_, sstr_, dstr_;
  int tile_ = -1;
  int64_t kblocks_ = 0, units_ = 0, tile_grain_ = 1;
  int64_t soff_ = 0, doff_ = 0, esize_ = 1, numel_ = 0, inner_ = 1, rows_ = 0, grain_ = 1;
};

// The bytes of a scalar converted to `dtype` (in the low bytes), for fill_bits.
uint64_t scalar_bits(DType dtype, double value);
uint64_t scalar_bits(DType dtype, int64_t value);

// Fills n elements of esize bytes with the pattern from scalar_bits.
template <typename T>
inline void fill_typed(T* d, int64_t n, T v) {
  parallel_for(n, 32768, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] = v;
  });
}
inline void fill_bits(void* dst, int64_t n, uint64_t bits, size_t esize) {
  if (n <= 0) return;
  switch (esize) {
    case 1: fill_typed(static_cast<uint8_t*>(dst), n, static_cast<uint8_t>(bits)); break;
    case 2: fill_typed(static_cast<uint16_t*>(dst), n, static_cast<uint16_t>(bits)); break;
    case 4: fill_typed(static_cast<uint32_t*>(dst), n, static_cast<uint32_t>(bits)); break;
    case 8: fill_typed(static_cast<uint64_t*>(dst), n, static_cast<uint64_t>(bits)); break;
    default: fail("fill: element size ", esize, " is not supported");
  }
}

}  // namespace ag
