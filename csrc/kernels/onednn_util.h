// oneDNN helpers shared by the matmul, linear and convolution kernels: one CPU
// engine and one stream for the whole process, dtype mapping, plain memory
// descriptors, and the pieces every oneDNN-backed kernel needs (user-mode
// scratchpad, argument maps built once, f32 emulation of 16-bit inputs when
// the CPU has no native implementation for them).
#pragma once
#include <memory>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ir/dtype.h"
#include "ir/types.h"

namespace ag::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();

// oneDNN data type for an engine dtype; throws for dtypes oneDNN lacks.
dnnl::memory::data_type to_dnnl(DType t);
bool has_dnnl_type(DType t);

// Row-major (contiguous) descriptor of `shape`.
dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt);
dnnl::memory::dims to_dims(const Shape& s);

// A 64-byte aligned heap buffer owned by a kernel (scratch, prepacked weights).
struct Buffer {
  std::shared_ptr<void> p;
  size_t bytes = 0;
  void* data() const { return p.get(); }
};
Buffer alloc_buffer(size_t bytes);

// Element conversions between the engine's storage and f32 (used when a
// 16-bit dtype has no native oneDNN implementation on this CPU). Parallel.
void to_f32(DType src_t, const void* src, float* dst, int64_t n);
void from_f32(DType dst_t, const float* src, void* dst, int64_t n);

// Creates a primitive_desc for the given dtype; returns false (no throw) when
// oneDNN has no implementation. `make` builds a pd given the data type.
template <typename PD, typename F>
bool try_make_pd(PD& out, F&& make) {
  try {
    out = make();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Runs a primitive with a prebuilt argument map: only data handles change per call.
struct Exec {
  dnnl::primitive prim;
  std::unordered_map<int, dnnl::memory> args;
  Buffer scratch;
  void init(const dnnl::primitive& p, const dnnl::memory::desc& scratch_md);
  void bind(int arg, const dnnl::memory::desc& md);  // memory with no handle yet
  void set(int arg, void* ptr) { args.at(arg).set_data_handle(ptr); }
  void run() { prim.execute(stream(), args); stream().wait(); }
};

// Reorder between two descriptors, prebuilt.
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  dnnl::memory src, dst;
  std::unordered_map<int, dnnl::memory> args;
  void init(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  void run(void* from, void* to);
};

// A primitive attr with user-managed scratchpad and f32 fpmath left default.
dnnl::primitive_attr default_attr();

}  // namespace ag::dnnl_util
