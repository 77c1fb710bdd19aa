#include "kernels/onednn_util.h"

#include <algorithm>
#include <atomic>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "kernels/common.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "ir/serialize.h"

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

Buffer PrepackCache::find(const Key& k, size_t src_bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!(it->key == k)) continue;
    Buffer b;
    b.p = it->packed.lock();
    if (!b.p) return {};
    b.bytes = it->bytes;
    if (src_bytes && !it->immutable) {
      const uint64_t want = it->sum;
      lock.unlock();  // (reads the source: others may look up meanwhile)
      if (checksum64(k.src, src_bytes) != want) {  // the same address holds other values now: never serve the old copy
        lock.lock();
        std::erase_if(entries_, [&](const Entry& e) { return e.key == k && e.sum == want; });
        return {};
      }
      lock.lock();
    }
    ++hits_;
    return b;
  }
  return {};
}

void PrepackCache::put(const Key& k, const Buffer& b, uint64_t sum, bool immutable) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [&](const Entry& e) { return e.packed.expired() || e.key == k; });
  entries_.push_back({k, b.p, b.bytes, sum, immutable});
}

std::vector<std::pair<std::string, Buffer>> PrepackCache::of(const void* src) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, Buffer>> out;
  for (const Entry& e : entries_) {
    if (e.key.src != src) continue;
    Buffer b;
    b.p = e.packed.lock();
    b.bytes = e.bytes;
    if (b.p) out.emplace_back(e.key.how, b);
  }
  return out;
}

namespace {
std::string dims_text(const dnnl::memory::dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::string layout_text(const dnnl::memory::desc& d) {
  return std::to_string(static_cast<int>(d.get_data_type())) + ":" + dims_text(d.get_dims()) + "/" +
         dims_text(d.get_padded_dims()) + "+" + dims_text(d.get_padded_offsets()) + "@" +
         std::to_string(d.get_submemory_offset()) + ":" + std::to_string(static_cast<int>(d.get_format_kind())) + ":" +
         dims_text(d.get_strides()) + ":" + dims_text(d.get_inner_blks()) + dims_text(d.get_inner_idxs()) + ":" +
         std::to_string(d.get_size());
}
}  // namespace

std::string packing_key(DType t, bool widen, uint64_t adjust_tag, const dnnl::memory::desc& from,
                        const dnnl::memory::desc& to) {
  return std::string(dtype_name(t)) + (widen ? " widened" : "") +
         (adjust_tag ? " adjusted " + std::to_string(adjust_tag) : "") + " " + layout_text(from) + " -> " +
         layout_text(to);
}

namespace {
std::atomic<int64_t> g_packed_bytes{0};
std::atomic<int64_t> g_packed_reuses{0};
}  // namespace

Buffer counted_buffer(size_t bytes) {
  Buffer raw = alloc_buffer(bytes);
  g_packed_bytes += static_cast<int64_t>(bytes);
  Buffer b;
  b.p = std::shared_ptr<void>(raw.data(), [keep = raw.p, bytes](void*) { g_packed_bytes -= static_cast<int64_t>(bytes); });
  b.bytes = bytes;
  return b;
}

namespace {
// Every packed copy in the process, keyed with its source's checksum (prepack's comment).
PrepackCache& process_packed() {
  static PrepackCache* c = new PrepackCache();  // (never destroyed: kernels may outlive static destruction)
  return *c;
}
}  // namespace

int64_t packed_weight_bytes() { return g_packed_bytes.load(); }

namespace {
// hold_pack_budget's state (never destroyed, as the registry: kernels may outlive static destruction)
struct PackBudget {
  std::mutex mu;
  int64_t used = 0;
  int64_t refused = 0, refused_bytes = 0;
  std::unordered_map<const void*, std::weak_ptr<void>> holds;  // by weight
};
PackBudget& pack_budget() {
  static auto* b = new PackBudget();
  return *b;
}
}  // namespace

std::shared_ptr<void> hold_pack_budget(const void* src, int64_t bytes, int64_t budget) {
  PackBudget& b = pack_budget();
  std::lock_guard<std::mutex> lock(b.mu);
  if (auto it = b.holds.find(src); it != b.holds.end()) {
    if (auto h = it->second.lock()) return h;  // another kernel reads this weight: its hold serves
  }
  if (bytes <= 0 || b.used + bytes > budget) {
    ++b.refused;
    b.refused_bytes += std::max<int64_t>(bytes, 0);
    return nullptr;
  }
  b.used += bytes;
  std::shared_ptr<void> h(new char(0), [src, bytes](void* p) {
    delete static_cast<char*>(p);
    PackBudget& b = pack_budget();
    std::lock_guard<std::mutex> lock(b.mu);
    b.used -= bytes;
    if (auto it = b.holds.find(src); it != b.holds.end() && it->second.expired()) b.holds.erase(it);
  });
  b.holds[src] = h;
  return h;
}

int64_t pack_budget_used() {
  PackBudget& b = pack_budget();
  std::lock_guard<std::mutex> lock(b.mu);
  return b.used;
}

std::vector<const void*> pack_budget_choose(std::vector<BudgetedWeight> weights, int64_t budget) {
  PackBudget& b = pack_budget();
  std::lock_guard<std::mutex> lock(b.mu);
  std::vector<const void*> chosen;
  std::vector<BudgetedWeight> rest;
  for (const auto& w : weights) {
    auto it = b.holds.find(w.data);
    if (it != b.holds.end() && !it->second.expired())
      chosen.push_back(w.data);  // held already: it costs nothing more
    else
      rest.push_back(w);
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& x, const auto& y) { return x.rows < y.rows; });
  int64_t planned = b.used;
  size_t i = 0;
  while (i < rest.size()) {
    size_t j = i;
    int64_t needed = 0;
    for (; j < rest.size() && rest[j].rows == rest[i].rows; ++j) needed += rest[j].bytes;
    if (planned + needed > budget) break;
    planned += needed;
    for (; i < j; ++i) chosen.push_back(rest[i].data);
  }
  for (; i < rest.size(); ++i) {
    ++b.refused;
    b.refused_bytes += rest[i].bytes;
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

std::pair<int64_t, int64_t> pack_budget_refused() {
  PackBudget& b = pack_budget();
  std::lock_guard<std::mutex> lock(b.mu);
  return {b.refused, b.refused_bytes};
}

int64_t packed_weight_reuses() { return g_packed_reuses.load(); }

const void* prepack(const BuildCtx& ctx, const void* src, DType t, int64_t n, bool widen,
                    const dnnl::memory::desc& from, const dnnl::memory::desc& to, Buffer& packed,
                    const std::function<void(float*)>& adjust, uint64_t adjust_tag) {
  const bool shareable = (widen || from != to) && (!adjust || adjust_tag != 0);
  const size_t src_bytes = static_cast<size_t>(n) * dtype_size(t);
  PrepackCache::Key key{src, shareable ? packing_key(t, widen, adjust ? adjust_tag : 0, from, to) : std::string()};
  PrepackCache* graph = shareable ? ctx.prepack : nullptr;
  if (graph) {
    packed = graph->find(key);
    if (packed.data()) {
      ++g_packed_reuses;
      return packed.data();
    }
  }
  if (shareable) {
    packed = process_packed().find(key, src_bytes);
    if (packed.data()) {
      ++g_packed_reuses;
      if (graph) graph->put(key, packed);
      return packed.data();
    }
  }
  ThreadCountScope threads(ctx.pack_threads);  // (0: this thread's own count)
  Buffer tmp;
  const void* s = src;
  if (widen) {
    tmp = counted_buffer(static_cast<size_t>(n) * 4);
    to_f32(t, src, static_cast<float*>(tmp.data()), n);
    if (adjust) adjust(static_cast<float*>(tmp.data()));
    s = tmp.data();
  }
  Reorder ro;
  ro.init(from, to);
  if (ro.needed) {
    packed = counted_buffer(to.get_size());
    ro.run_once(const_cast<void*>(s), packed.data());
  } else {
    packed = tmp;  // the plain layout is the preferred one: no copy of the weights (tmp may be empty)
  }
  if (shareable && packed.data()) {
    if (graph) graph->put(key, packed);
    process_packed().put(key, packed, checksum64(src, src_bytes));
  }
  return packed.data() ? packed.data() : src;
}

std::vector<std::shared_ptr<void>> adopt_packed(const LoadedGraph& l) {
  std::vector<std::shared_ptr<void>> pins;
  for (const LoadedGraph::Blob& b : l.blobs) {
    Buffer buf;
    buf.p = std::shared_ptr<void>(l.keep, const_cast<void*>(b.data));  // (aliases the mapping: keeps it alive)
    buf.bytes = b.nbytes;
    process_packed().put({b.src, b.key}, buf, 0, /*immutable=*/true);
    pins.push_back(buf.p);
  }
  return pins;
}

std::vector<SaveOptions::Blob> packed_blobs(const Graph& g, std::vector<Buffer>& keep) {
  std::vector<SaveOptions::Blob> out;
  for (int i = 0; i < g.num_values(); ++i) {
    const Value* v = g.value(i);
    if (!v->is_const() || !v->storage || !v->storage->data) continue;
    for (auto& [how, buf] : process_packed().of(v->storage->data)) {
      out.push_back({v->name, how, buf.data(), buf.bytes});
      keep.push_back(buf);
    }
  }
  return out;
}

std::string init_panel_matmul(Exec& e, int64_t M, int64_t K, int64_t cols, int64_t ldo, bool k_inner, bool bias) {
  using dims = dnnl::memory::dims;
  const auto f32 = dnnl::memory::data_type::f32;
  const dnnl::memory::desc a_md = plain_desc({M, K}, f32);
  const dnnl::memory::desc b_md({K, cols}, f32, k_inner ? dims{1, K} : dims{cols, 1});
  const dnnl::memory::desc o_md({M, cols}, f32, dims{ldo, 1});
  const dnnl::memory::desc bias_md({1, cols}, f32, dims{ldo, 1});
  dnnl::matmul::primitive_desc pd = bias ? dnnl::matmul::primitive_desc(engine(), a_md, b_md, bias_md, o_md, default_attr())
                                         : dnnl::matmul::primitive_desc(engine(), a_md, b_md, o_md, default_attr());
  e.init(dnnl::matmul(pd), pd.scratchpad_desc());
  e.bind(DNNL_ARG_SRC, a_md);
  e.bind(DNNL_ARG_WEIGHTS, b_md);
  e.bind(DNNL_ARG_DST, o_md);
  if (bias) e.bind(DNNL_ARG_BIAS, bias_md);
  return pd.impl_info_str();
}

std::string init_panel_matmul_s8(Exec& e, int64_t M, int64_t K, int64_t cols, int64_t ldo, bool k_inner) {
  using dims = dnnl::memory::dims;
  const auto s8 = dnnl::memory::data_type::s8;
  const dnnl::memory::desc a_md = plain_desc({M, K}, s8);
  const dnnl::memory::desc b_md({K, cols}, s8, k_inner ? dims{1, K} : dims{cols, 1});
  const dnnl::memory::desc o_md({M, cols}, dnnl::memory::data_type::f32, dims{ldo, 1});
  dnnl::matmul::primitive_desc pd;
  if (!try_make_pd(pd, [&] { return dnnl::matmul::primitive_desc(engine(), a_md, b_md, o_md, default_attr()); }))
    return "";
  std::string impl = pd.impl_info_str();
  if (impl.find("amx") == std::string::npos && impl.find("avx512_core_vnni") == std::string::npos) return "";
  e.init(dnnl::matmul(pd), pd.scratchpad_desc());
  e.bind(DNNL_ARG_SRC, a_md);
  e.bind(DNNL_ARG_WEIGHTS, b_md);
  e.bind(DNNL_ARG_DST, o_md);
  return impl;
}

void* widened(DType t, bool emu, void* x, int64_t n, void* wide) {
  if (!emu) return x;
  to_f32(t, x, static_cast<float*>(wide), n);
  return wide;
}

void* staged_input(const Reorder& ro, Args& ro_args, DType t, bool emu, void* x, int64_t n, void* wide, void* blk) {
  x = widened(t, emu, x, n, wide);
  if (!ro.needed) return x;
  ro.run(ro_args, x, blk);
  return blk;
}

}  // namespace ag::dnnl_util
