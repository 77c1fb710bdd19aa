// The attention kernel's split-KV decision, its short path's key limit, and counts of its split runs
// and of the keys it skips, for tests (the kernel itself registers as op "sdpa"; see attention.cpp).
#pragma once
#include <cstdint>

namespace ag {

// Keys per split, at least, when the row kernel splits a row's key range.
inline constexpr int64_t kSdpaMinSplit = 256;

// Split-KV ("flash-decoding") for the row kernel: into how many key ranges each
// of `rows` query rows is cut, for nt threads and S keys. Rows alone keep the
// threads busy from 2 per thread; fewer are cut so that there are about 2
// (row, range) items per thread, each range at least kSdpaMinSplit keys.
// 1 = no split.
int64_t sdpa_kv_splits(int64_t rows, int nt, int64_t S);

// The most keys the one-kernel short path takes under the instruction set our kernels run now
// (isa.h): more with AVX-512 than with AVX2 (measured; see attention.cpp's kShortKeys).
int64_t sdpa_short_max_keys();

// How many runs took the split path so far (process-wide; tests read it).
int64_t sdpa_kv_split_runs();

// Keys not read because the mask drops them (false, or -inf) (process-wide; tests read it): the
// row kernel's before a row's first kept key or after its last, within its causal bound; the GEMM
// path's outside a chunk's range (the union of its rows' ranges), S minus its width for each of
// the chunk's query rows.
int64_t sdpa_keys_skipped();

}  // namespace ag
