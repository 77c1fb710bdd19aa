#include "kernels/onednn_util.h"

#include <cstdlib>

#include "kernels/common.h"

namespace ag::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

bool has_dnnl_type(DType t) {
  switch (t) {
    case DType::f32:
    case DType::bf16:
    case DType::f16:
    case DType::i32:
    case DType::i8:
    case DType::u8:
      return true;
    default:
      return false;
  }
}

dnnl::memory::data_type to_dnnl(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i32: return dt::s32;
    case DType::i8: return dt::s8;
    case DType::u8: return dt::u8;
    default: fail("oneDNN has no data type for ", dtype_name(t));
  }
}

dnnl::memory::dims to_dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt) {
  Shape st = contiguous_strides(shape);
  return dnnl::memory::desc(to_dims(shape), dt, to_dims(st));
}

Buffer alloc_buffer(size_t bytes) {
  size_t padded = ((bytes + 63) / 64) * 64;
  if (padded == 0) padded = 64;
  void* p = std::aligned_alloc(64, padded);
  AG_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  return Buffer{std::shared_ptr<void>(p, [](void* q) { std::free(q); }), bytes};
}

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  AG_DISPATCH_FLOAT(t, "to_f32", [&] {
    const scalar_t* s = static_cast<const scalar_t*>(src);
    parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(load(s[i]));
    });
  });
}

void from_f32(DType t, const float* src, void* dst, int64_t n) {
  AG_DISPATCH_FLOAT(t, "from_f32", [&] {
    scalar_t* d = static_cast<scalar_t*>(dst);
    parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) store(d[i], static_cast<acc_t<scalar_t>>(src[i]));
    });
  });
}

dnnl::primitive_attr default_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void Exec::init(const dnnl::primitive& p, const dnnl::memory::desc& scratch_md) {
  prim = p;
  size_t sz = scratch_md.get_size();
  if (sz) {
    scratch = alloc_buffer(sz);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratch_md, engine(), scratch.data()));
  }
}

void Exec::bind(int arg, const dnnl::memory::desc& md) {
  args.emplace(arg, dnnl::memory(md, engine(), DNNL_MEMORY_NONE));
}

void Reorder::init(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  needed = from != to;
  if (!needed) return;
  src = dnnl::memory(from, engine(), DNNL_MEMORY_NONE);
  dst = dnnl::memory(to, engine(), DNNL_MEMORY_NONE);
  prim = dnnl::reorder(src, dst);
  args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
}

void Reorder::run(void* from, void* to) {
  src.set_data_handle(from);
  dst.set_data_handle(to);
  prim.execute(stream(), args);
  stream().wait();
}

}  // namespace ag::dnnl_util
