#include "kernels/onednn_util.h"

#include <cstdlib>

#include "kernels/common.h"
#include "runtime/memory.h"
#include "runtime/parallel.h"

namespace ag::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// oneDNN streams are not meant to be shared by threads that execute at once.
dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
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

Buffer alloc_buffer(size_t bytes) { return Buffer{alloc_aligned(bytes), bytes}; }

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
  mds.clear();
  fixed.clear();
  scratch_bytes = scratch_md.get_size();
  if (scratch_bytes) mds.emplace_back(DNNL_ARG_SCRATCHPAD, scratch_md);
}

void Exec::bind(int arg, const dnnl::memory::desc& md) { mds.emplace_back(arg, md); }

void Exec::set(int arg, void* ptr) {
  for (auto& f : fixed)
    if (f.first == arg) {
      f.second = ptr;
      return;
    }
  fixed.emplace_back(arg, ptr);
}

Args Exec::make_args() const {
  Args a;
  for (const auto& [arg, md] : mds) a.m.emplace(arg, dnnl::memory(md, engine(), DNNL_MEMORY_NONE));
  for (const auto& [arg, ptr] : fixed) a.set(arg, ptr);
  return a;
}

void Exec::run(Args& a, void* scratchpad) const {
  if (scratch_bytes) a.set(DNNL_ARG_SCRATCHPAD, scratchpad);
  prim.execute(stream(), a.m);
  stream().wait();
}

void Reorder::init(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  from_md = from;
  to_md = to;
  needed = from != to;
  if (needed) prim = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

Args Reorder::make_args() const {
  Args a;
  if (!needed) return a;
  a.m.emplace(DNNL_ARG_FROM, dnnl::memory(from_md, engine(), DNNL_MEMORY_NONE));
  a.m.emplace(DNNL_ARG_TO, dnnl::memory(to_md, engine(), DNNL_MEMORY_NONE));
  return a;
}

void Reorder::run(Args& a, void* from, void* to) const {
  a.set(DNNL_ARG_FROM, from);
  a.set(DNNL_ARG_TO, to);
  prim.execute(stream(), a.m);
  stream().wait();
}

void Reorder::run_once(void* from, void* to) const {
  Args a = make_args();
  run(a, from, to);
}

namespace {
thread_local PrepackCache* t_prepack_cache = nullptr;
thread_local int t_pack_threads = 0;
}  // namespace

PackThreadsScope::PackThreadsScope(int n) : prev_(t_pack_threads) { t_pack_threads = n; }
PackThreadsScope::~PackThreadsScope() { t_pack_threads = prev_; }

PrepackScope::PrepackScope(PrepackCache* cache) : prev_(t_prepack_cache) { t_prepack_cache = cache; }
PrepackScope::~PrepackScope() { t_prepack_cache = prev_; }
PrepackCache* active_prepack_cache() { return t_prepack_cache; }

Buffer PrepackCache::find(const Key& k) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, w] : entries_) {
    if (!(key == k)) continue;
    Buffer b;
    b.p = w.lock();
    if (b.p) {
      b.bytes = k.to.get_size();
      ++hits_;
    }
    return b;
  }
  return {};
}

void PrepackCache::put(const Key& k, const Buffer& b) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [](const auto& e) { return e.second.expired(); });
  entries_.emplace_back(k, b.p);
}

const void* prepack(const void* src, DType t, int64_t n, bool widen, const dnnl::memory::desc& from,
                    const dnnl::memory::desc& to, Buffer& packed, const std::function<void(float*)>& adjust) {
  PrepackCache* cache = adjust ? nullptr : t_prepack_cache;
  const PrepackCache::Key key{src, t, widen, from, to};
  if (cache && (widen || from != to)) {
    packed = cache->find(key);
    if (packed.data()) return packed.data();
  }
  ThreadCountScope threads(t_pack_threads);  // (0: this thread's own count)
  Buffer tmp;
  const void* s = src;
  if (widen) {
    tmp = alloc_buffer(static_cast<size_t>(n) * 4);
    to_f32(t, src, static_cast<float*>(tmp.data()), n);
    if (adjust) adjust(static_cast<float*>(tmp.data()));
    s = tmp.data();
  }
  Reorder ro;
  ro.init(from, to);
  if (ro.needed) {
    packed = alloc_buffer(to.get_size());
    ro.run_once(const_cast<void*>(s), packed.data());
  } else {
    packed = tmp;  // the plain layout is the preferred one: no copy of the weights (tmp may be empty)
  }
  if (cache && packed.data()) cache->put(key, packed);
  return packed.data() ? packed.data() : src;
}

}  // namespace ag::dnnl_util

// ---- fused epilogues ------------------------------------------------------------------
#include <cmath>
#include <limits>

#include "ir/graph.h"
#include "kernels/elementwise_math.h"

namespace ag::epi {

const char* code_name(int64_t c) {
  switch (c) {
    case kRelu: return "relu";
    case kGeluErf: return "gelu";
    case kGeluTanh: return "gelu_tanh";
    case kSilu: return "silu";
    case kTanh: return "tanh";
    case kSigmoid: return "sigmoid";
    case kClamp: return "clamp";
    case kAdd: return "add";
    case kSub: return "sub";
    case kMul: return "mul";
    case kDiv: return "div";
    default: return "?";
  }
}

bool classify(const Shape& operand, const Shape& out, bool conv, Mode* mode) {
  if (operand.size() > out.size()) return false;
  Shape p(out.size() - operand.size(), 1);
  p.insert(p.end(), operand.begin(), operand.end());
  int64_t numel = 1;
  bool all_one = true, only_last = true, only_ch = true;
  for (size_t d = 0; d < p.size(); ++d) {
    numel *= p[d];
    if (p[d] != 1 && p[d] != out[d]) return false;  // would broadcast the output
    if (p[d] != 1) {
      all_one = false;
      if (d + 1 != p.size()) only_last = false;
      if (d != 1) only_ch = false;
    }
  }
  if (all_one) {
    *mode = Mode::Scalar;
    return true;
  }
  if (p == out) {
    *mode = Mode::Full;
    return true;
  }
  if (!conv && only_last) {
    *mode = Mode::Col;
    return true;
  }
  if (conv && only_ch && p.size() >= 3) {
    *mode = Mode::Channel;
    return true;
  }
  (void)numel;
  return false;
}

void check_post_ops(const std::vector<TensorType>& in, size_t n_base, const Attrs& a, const TensorType& out, bool conv,
                    const char* op) {
  if (!a.has("post_ops")) {
    AG_CHECK(!a.has("post_inputs") || a.i("post_inputs") == 0, op, ": post_inputs without post_ops");
    return;
  }
  const auto& codes = a.ints("post_ops");
  const auto& args = a.floats("post_args");
  AG_CHECK(args.size() == 2 * codes.size(), op, ": post_args must hold 2 values per post-op, got ", args.size(),
           " for ", codes.size(), " ops");
  size_t k = n_base;
  for (int64_t c : codes) {
    AG_CHECK(c >= kRelu && c <= kDiv, op, ": unknown post-op code ", c);
    if (!is_binary(c)) continue;
    AG_CHECK(k < in.size(), op, ": post-op ", code_name(c), " has no operand (", in.size() - n_base,
             " post-op inputs)");
    const TensorType& t = in[k++];
    AG_CHECK(t.dtype == out.dtype || t.dtype == DType::f32, op, ": post-op ", code_name(c), " operand ", t.str(),
             " must have the output dtype (", dtype_name(out.dtype), ") or float32");
    Mode m;
    AG_CHECK(classify(t.shape(), out.shape(), conv, &m), op, ": post-op ", code_name(c), " operand ", t.str(),
             " does not fit the output ", out.str(),
             conv ? " (scalar, full or per channel)" : " (scalar, full or a row over the last dim)");
  }
  AG_CHECK(k == in.size(), op, ": ", in.size() - n_base, " post-op inputs for ", k - n_base, " binary post-ops");
}

static const void* const_data(const Value* v) { return v->is_const() && v->storage ? v->storage->data : nullptr; }

Epilogue parse(const Node& n, const Shape& view, bool conv) {
  Epilogue e;
  const size_t r = view.size();
  if (conv) {
    e.C = view[1];
    e.L = 1;
    for (size_t d = 2; d < r; ++d) e.L *= view[d];
  } else {
    e.L = view.back();
  }
  if (!n.attrs.has("post_ops")) return e;
  const auto& codes = n.attrs.ints("post_ops");
  const auto& args = n.attrs.floats("post_args");
  int k = static_cast<int>(base_inputs(n.inputs.size(), n.attrs));
  const Shape out = n.outputs[0]->type.shape();
  for (size_t i = 0; i < codes.size(); ++i) {
    Op op;
    op.code = codes[i];
    op.a = static_cast<float>(args[2 * i]);
    op.b = static_cast<float>(args[2 * i + 1]);
    if (is_binary(op.code)) {
      const Value* v = n.inputs[k];
      op.input = k++;
      op.dt = v->type.dtype;
      op.cdata = const_data(v);
      AG_CHECK(classify(v->type.shape(), out, conv, &op.mode), "bad post-op operand in ", n.context());
      switch (op.mode) {
        case Mode::Scalar: op.shape = Shape(r, 1); break;
        case Mode::Full: op.shape = view; break;
        case Mode::Col: op.shape = Shape(r, 1), op.shape.back() = view.back(); break;
        case Mode::Channel: op.shape = Shape(r, 1), op.shape[1] = view[1]; break;
      }
    }
    e.ops.push_back(op);
  }
  return e;
}

namespace {

template <typename T, typename F>
void binary_seg(float* s, int64_t n, const T* p, bool scalar, F f) {
  if (scalar) {
    const float v = load(p[0]);
    for (int64_t i = 0; i < n; ++i) s[i] = f(s[i], v);
  } else {
    for (int64_t i = 0; i < n; ++i) s[i] = f(s[i], load(p[i]));
  }
}

template <typename F>
void binary_any(float* s, int64_t n, DType dt, const void* p, bool scalar, F f) {
  if (dt == DType::f32) binary_seg(s, n, static_cast<const float*>(p), scalar, f);
  else if (dt == DType::bf16) binary_seg(s, n, static_cast<const bf16s*>(p), scalar, f);
  else binary_seg(s, n, static_cast<const f16s*>(p), scalar, f);
}

}  // namespace

void Epilogue::apply(float* s, int64_t r, int64_t j0, int64_t n, void* const* in, size_t k0) const {
  for (size_t k = k0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    switch (op.code) {
      case kRelu: {
        const float sl = op.a;
        if (sl == 0.f)
          for (int64_t i = 0; i < n; ++i) s[i] = s[i] > 0.f ? s[i] : (s[i] != s[i] ? s[i] : 0.f);
        else
          for (int64_t i = 0; i < n; ++i) s[i] = s[i] > 0.f ? s[i] : s[i] * sl;
        break;
      }
      case kGeluErf:
        for (int64_t i = 0; i < n; ++i) s[i] = math::gelu_erf_(s[i]);
        break;
      case kGeluTanh:
        for (int64_t i = 0; i < n; ++i) s[i] = math::gelu_tanh_(s[i]);
        break;
      case kSilu:
        for (int64_t i = 0; i < n; ++i) s[i] = math::silu_(s[i]);
        break;
      case kTanh:
        for (int64_t i = 0; i < n; ++i) s[i] = math::tanh_(s[i]);
        break;
      case kSigmoid:
        for (int64_t i = 0; i < n; ++i) s[i] = math::sigmoid_(s[i]);
        break;
      case kClamp: {
        const float lo = op.a, hi = op.b;
        for (int64_t i = 0; i < n; ++i) {
          float x = s[i];
          x = x < lo ? lo : x;
          x = x > hi ? hi : x;
          s[i] = x;
        }
        break;
      }
      default: {
        const void* base = op.cdata ? op.cdata : in[op.input];
        const size_t es = dtype_size(op.dt);
        const char* p = static_cast<const char*>(base);
        bool scalar = true;
        switch (op.mode) {
          case Mode::Scalar: break;
          case Mode::Full: p += static_cast<size_t>(r * L + j0) * es, scalar = false; break;
          case Mode::Col: p += static_cast<size_t>(j0) * es, scalar = false; break;
          case Mode::Channel: p += static_cast<size_t>(r % C) * es; break;
        }
        switch (op.code) {
          case kAdd: binary_any(s, n, op.dt, p, scalar, [](float x, float y) { return x + y; }); break;
          case kSub: binary_any(s, n, op.dt, p, scalar, [](float x, float y) { return x - y; }); break;
          case kMul: binary_any(s, n, op.dt, p, scalar, [](float x, float y) { return x * y; }); break;
          case kDiv: binary_any(s, n, op.dt, p, scalar, [](float x, float y) { return x / y; }); break;
        }
      }
    }
  }
}

void Epilogue::apply_all(float* out, int64_t R, void* const* in, size_t k0) const {
  if (k0 >= ops.size()) return;
  const int64_t len = L;
  parallel_for(R, std::max<int64_t>(1, 16384 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) apply(out + r * len, r, 0, len, in, k0);
  });
}

dnnl::memory::desc operand_md(const Op& op) { return dnnl_util::plain_desc(op.shape, dnnl_util::to_dnnl(op.dt)); }

dnnl::post_ops to_dnnl_post_ops(const Epilogue& e, size_t k0, size_t k, const dnnl::memory::desc* full_md) {
  using alg = dnnl::algorithm;
  dnnl::post_ops po;
  for (size_t i = k0; i < k && i < e.ops.size(); ++i) {
    const Op& op = e.ops[i];
    switch (op.code) {
      case kRelu: po.append_eltwise(alg::eltwise_relu, op.a, 0.f); break;
      case kGeluErf: po.append_eltwise(alg::eltwise_gelu_erf, 0.f, 0.f); break;
      case kGeluTanh: po.append_eltwise(alg::eltwise_gelu_tanh, 0.f, 0.f); break;
      case kSilu: po.append_eltwise(alg::eltwise_swish, 1.f, 0.f); break;
      case kTanh: po.append_eltwise(alg::eltwise_tanh, 0.f, 0.f); break;
      case kSigmoid: po.append_eltwise(alg::eltwise_logistic, 0.f, 0.f); break;
      case kClamp: po.append_eltwise(alg::eltwise_clip_v2, op.a, op.b); break;
      default: {
        alg a = op.code == kAdd ? alg::binary_add
                : op.code == kSub ? alg::binary_sub
                : op.code == kMul ? alg::binary_mul
                                  : alg::binary_div;
        po.append_binary(a, op.mode == Mode::Full && full_md ? *full_md : operand_md(op));
      }
    }
  }
  return po;
}

}  // namespace ag::epi
