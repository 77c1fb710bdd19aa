#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>

#include "base/error.h"
#include "base/background.h"
#include "base/memory.h"
#include "base/parallel.h"
#include "ir/value_bounds.h"

namespace ag {
namespace {
std::shared_ptr<void> aligned_buffer(size_t nbytes) { return alloc_aligned(nbytes); }

// Whether every element of x[0..n) is finite with |x| <= kInputBound (false for NaN and inf).
bool within_input_bound(const float* x, int64_t n) {
  constexpr float T = static_cast<float>(kInputBound);
  std::atomic<bool> ok{true};
  parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) {
    constexpr int64_t kStep = 4096;  // (a chunk at a time: stop early once it fails)
    for (int64_t i = b; i < e && ok.load(std::memory_order_relaxed); i += kStep) {
      const int64_t end = std::min(e, i + kStep);
      int good = 1;
      for (int64_t j = i; j < end; ++j) good &= static_cast<int>(std::fabs(x[j]) <= T);
      if (!good) ok.store(false, std::memory_order_relaxed);
    }
  });
  return ok.load();
}
}  // namespace

namespace {
std::unique_ptr<Kernel> make_kernel_of(const Node& n, const BuildCtx& ctx) {
  try {
    if (auto k = make_layout_kernel(n, ctx)) return k;
    return n.op->make_kernel(n, ctx);
  } catch (const Error& e) {
    fail(e.what(), "\n  while preparing the kernel of ", n.context());
  } catch (const std::exception& e) {
    fail("kernel preparation failed: ", e.what(), "\n  in ", n.context());
  }
}

// The kernels of the nodes whose ops are kCostlyKernel (GEMMs and convolutions: oneDNN JIT code,
// and packed weights for convolutions), made ahead on num_threads() threads at once: most of a
// compile's time when the passes are skipped (a compile cache hit; ResNet-50: 57 ms of JIT and
// packing). Each thread makes primitives for the caller's thread count (oneDNN plans a
// primitive's work split for the count it is made with) and packs with one thread. Empty where
// the node is left to the caller's loop (other ops, symbolic shapes); errors stay with their node.
struct Prebuilt {
  std::vector<std::unique_ptr<Kernel>> kernels;
  std::vector<std::exception_ptr> errors;
};

Prebuilt prebuild_heavy_kernels(const Graph& g, const BuildCtx& ctx, KernelCache* cache,
                                std::vector<KernelCache::Entry>& cached) {
  const auto& nodes = g.nodes();
  Prebuilt r;
  std::vector<size_t> todo;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    bool ok = n.op->has(kCostlyKernel) && n.op->make_kernel != nullptr;
    for (const Value* v : n.inputs) ok = ok && v->type.is_static();
    for (const Value* v : n.outputs) ok = ok && v->type.is_static();
    if (ok) todo.push_back(i);
  }
  const int threads = num_threads();
  const int builders = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), todo.size()));
  if (builders < 2) return r;
  r.kernels.resize(nodes.size());
  r.errors.resize(nodes.size());
  if (cache) cached.resize(nodes.size());
  std::atomic<size_t> next{0};
  BuildCtx one = ctx;
  one.pack_threads = 1;
  auto work = [&] {
    set_num_threads(threads);
    for (size_t k; (k = next.fetch_add(1)) < todo.size();) {
      const size_t i = todo[k];
      try {
        if (cache)
          cached[i] = cache->get(*nodes[i], one);  // (a KernelCache makes a kernel outside its lock)
        else
          r.kernels[i] = make_kernel_of(*nodes[i], one);
      } catch (...) {
        r.errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  try {
    for (int t = 1; t < builders; ++t) helpers.emplace_back(work);
  } catch (const std::system_error&) {  // (no thread to be had: fewer helpers, or the caller alone)
  }
  {
    ThreadCountScope keep(threads);  // (the caller's count again afterwards)
    work();
  }
  for (auto& t : helpers) t.join();
  return r;
}

size_t hash_types(size_t h, const std::vector<Value*>& vs) {
  for (const Value* v : vs) {
    h = h * 1000003u ^ static_cast<size_t>(v->type.dtype);
    for (const Dim& d : v->type.dims) h = h * 1000003u ^ static_cast<size_t>(d.value);
    if (v->is_const()) h = h * 1000003u ^ std::hash<const void*>()(v->storage.get());
  }
  return h;
}

// The proven bounds of a node's non-constant inputs (ir/value_bounds.h; part of a kernel's identity: a
// convolution fuses its activation on them).
std::vector<double> bounds_of(const Node& n, const BuildCtx& ctx) {
  std::vector<double> b;
  if (!ctx.bounds) return b;
  for (const Value* v : n.inputs)
    if (!v->is_const()) b.push_back(ctx.bounds->of(v));
  return b;
}

// The channels-last flags of a node's inputs and outputs (part of a kernel's identity).
std::vector<uint8_t> layouts_of(const Node& n, const BuildCtx& ctx) {
  std::vector<uint8_t> l;
  if (!ctx.channels_last) return l;
  for (const Value* v : n.inputs) l.push_back(ctx.nhwc(v->id));
  for (const Value* v : n.outputs) l.push_back(ctx.nhwc(v->id));
  return l;
}
}  // namespace

KernelCache::Entry KernelCache::get(const Node& n, const BuildCtx& ctx) {
  size_t h = hash_types(hash_types(std::hash<std::string>()(n.name) ^ std::hash<const void*>()(n.op), n.inputs),
                        n.outputs);
  std::vector<uint8_t> layouts = layouts_of(n, ctx);
  std::vector<double> bounds = bounds_of(n, ctx);
  auto same = [&](const Key& k) {
    if (k.name != n.name || k.in.size() != n.inputs.size() || k.out.size() != n.outputs.size() || !(k.attrs == n.attrs))
      return false;
    size_t c = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!(k.in[i] == n.inputs[i]->type)) return false;
      if (n.inputs[i]->is_const() && (c >= k.consts.size() || k.consts[c++] != n.inputs[i]->storage)) return false;
    }
    if (c != k.consts.size()) return false;
    if (k.nhwc != layouts || k.bounds != bounds) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!(k.out[i] == n.outputs[i]->type)) return false;
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [b, e] = entries_.equal_range(h);
    for (auto it = b; it != e; ++it)
      if (same(it->second.first)) {
        ++hits_;
        return it->second.second;
      }
  }
  Entry made{make_kernel_of(n, ctx), std::make_shared<const std::string>(n.context())};
  Key k{{}, {}, n.attrs, n.name, {}, std::move(layouts), std::move(bounds)};
  for (const Value* v : n.inputs) {
    k.in.push_back(v->type);
    if (v->is_const()) k.consts.push_back(v->storage);
  }
  for (const Value* v : n.outputs) k.out.push_back(v->type);
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() >= kMaxEntries) entries_.clear();
  entries_.emplace(h, std::make_pair(std::move(k), made));
  return made;
}

size_t KernelCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t KernelCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::shared_ptr<Program> compile_program(const Graph& g, const CompileOptions& opt) {
  KernelCache* kernels = opt.wrap ? nullptr : opt.kernels;  // wrapped kernels belong to this program only
  auto prog = std::make_shared<Program>();
  for (Value* v : g.inputs()) {
    AG_CHECK(v->type.is_static(), "input %", v->name, " has symbolic shape ", v->type.str(),
             "; specialize the graph before compiling it");
    prog->input_types.push_back(v->type);
  }
  CompileOptions o = opt;
  const std::vector<uint8_t> nhwc = opt.channels_last ? plan_channels_last(g) : std::vector<uint8_t>{};
  if (opt.channels_last) o.build.channels_last = &nhwc;
  const ValueBounds bounds(g);
  if (bounds.any()) o.build.bounds = &bounds;
  MemoryPlan plan = plan_memory(g, opt.allow_inplace, &o.build);
  prog->arena_bytes = plan.arena_bytes;
  prog->external_bytes = plan.external_bytes;
  auto operand = [&](Value* v) {
    const Location& l = plan.loc[v->id];
    uint32_t pos = static_cast<uint32_t>(prog->operands.size());
    int64_t arena_off = -1;
    void* p = nullptr;
    switch (l.kind) {
      case LocKind::Const:
        p = static_cast<char*>(g.value(l.root)->storage->data) + l.offset;
        break;
      case LocKind::Arena:
        arena_off = l.offset;
        break;
      case LocKind::Input:
      case LocKind::External:
        prog->patches.push_back(Patch{pos, l.kind, l.index, l.offset});
        break;
    }
    prog->operands.push_back(p);
    prog->arena_offsets.push_back(arena_off);
  };
  std::vector<KernelCache::Entry> cached;  // (made ahead through `kernels`)
  Prebuilt pre = prebuild_heavy_kernels(g, o.build, kernels, cached);
  for (auto& n : g.nodes()) {
    AG_CHECK(n->op->make_kernel != nullptr, "op ", n->op->name, " has no kernel: ", n->context());
    for (Value* v : n->inputs) AG_CHECK(v->type.is_static(), "symbolic shape reached the compiler: ", n->context());
    Instr ins{};
    ins.in_begin = static_cast<uint32_t>(prog->operands.size());
    for (Value* v : n->inputs) operand(v);
    ins.out_begin = static_cast<uint32_t>(prog->operands.size());
    for (Value* v : n->outputs) operand(v);
    KernelCache::Entry made;
    const size_t at = prog->instrs.size();
    if (at < pre.errors.size() && pre.errors[at]) std::rethrow_exception(pre.errors[at]);
    if (kernels) {
      made = at < cached.size() && cached[at].kernel ? std::move(cached[at]) : kernels->get(*n, o.build);
    } else {
      std::unique_ptr<Kernel> k =
          at < pre.kernels.size() && pre.kernels[at] ? std::move(pre.kernels[at]) : make_kernel_of(*n, o.build);
      if (opt.wrap) k = opt.wrap(*n, std::move(k));
      made = {std::move(k), std::make_shared<const std::string>(n->context())};
    }
    ins.kernel = made.kernel.get();
    prog->scratch_bytes = std::max(prog->scratch_bytes, made.kernel->scratch_bytes());
    prog->kernels.push_back(std::move(made.kernel));
    prog->instrs.push_back(ins);
    prog->instr_context.push_back(std::move(made.context));
    prog->instr_names.push_back(n->name);
    prog->instr_ops.push_back(n->op->name);
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    Value* v = g.outputs()[i];
    const Location& l = plan.loc[v->id];
    AG_CHECK(l.kind == LocKind::External || l.kind == LocKind::Const ||
                 (l.kind == LocKind::Input && plan.output_in_input[i] == l.index),
             "graph output %", v->name, " must be a fresh buffer (canonicalize copies inputs that are returned)");
    prog->outputs.push_back(OutputSpec{l.kind, l.index, l.offset, v->type, v->name,
                                       l.kind == LocKind::Const ? g.value(l.root)->storage : nullptr});
  }
  // constants stay alive as long as the program (the graph may be dropped)
  std::vector<char> seen(g.num_values(), 0);
  auto keep = [&](Value* v) {
    if (!v->is_const() || seen[v->id]) return;
    seen[v->id] = 1;
    prog->constants.push_back(v->storage);
    prog->stats.const_bytes += v->type.nbytes();
  };
  for (auto& n : g.nodes())
    for (Value* v : n->inputs) keep(v);
  for (Value* v : g.outputs()) keep(v);
  // kernels that run a faster form in checked runs: the call's float32 inputs are checked
  if (std::any_of(prog->kernels.begin(), prog->kernels.end(), [](const auto& k) { return k->uses_bounds(); }))
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (g.inputs()[i]->type.dtype == DType::f32) prog->bounded_inputs.push_back(static_cast<int>(i));
  prog->deferred = DeferredWork::of(prog->kernels);
  prog->stats.nodes = static_cast<int>(g.nodes().size());
  prog->stats.arena_bytes = plan.arena_bytes;
  prog->stats.naive_bytes = plan.naive_bytes;
  prog->stats.inplace = plan.inplace_count;
  return prog;
}

Executor::Executor(std::shared_ptr<const Program> p, std::shared_ptr<ArenaSource> arena)
    : prog_(std::move(p)), source_(std::move(arena)) {
  const Program& P = *prog_;
  values_ = (P.arena_bytes + 63) / 64 * 64;
  ops_ = P.operands;
  states_.reserve(P.kernels.size());
  ctx_.reserve(P.instrs.size());
  for (const Instr& ins : P.instrs) {
    states_.push_back(ins.kernel->make_state());
    ctx_.push_back(RunCtx{nullptr, states_.back().get()});
  }
  if (!source_) {
    arena_ = aligned_buffer(values_ + P.scratch_bytes);
    rebase(static_cast<char*>(arena_.get()));
  }
}

void Executor::rebase(char* base) {
  const Program& P = *prog_;
  for (size_t i = 0; i < ops_.size(); ++i)
    if (P.arena_offsets[i] >= 0) ops_[i] = base + P.arena_offsets[i];
  for (size_t i = 0; i < P.instrs.size(); ++i)
    ctx_[i].scratch = P.instrs[i].kernel->scratch_bytes() ? base + values_ : nullptr;
  base_ = base;
}

ArenaSource::Lease ArenaSource::acquire(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < idle_.size(); ++i) {
      if (idle_[i].bytes < bytes) continue;
      Lease l = std::move(idle_[i]);
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
      return l;
    }
    largest_ = std::max(largest_, bytes);
    bytes = largest_;
  }
  return Lease{aligned_buffer(bytes), bytes};  // outside the lock
}

void ArenaSource::release(Lease l) {
  std::lock_guard<std::mutex> lk(mu_);
  if (l.bytes < largest_) return;  // outgrown: freed
  idle_.push_back(std::move(l));
}

size_t ArenaSource::bytes_held() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const Lease& l : idle_) n += l.bytes;
  return n;
}

void Executor::run_into(const void* const* inputs, void* const* ext_roots) {
  const Program& P = *prog_;
  RunActivity activity;  // (the background thread works only between runs)
  const bool deferred_pending = P.deferred && P.deferred->pending();
  const auto t_start = deferred_pending ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  struct Leased {  // the arena of this call, from the shared source (returned on every exit)
    ArenaSource* src;
    ArenaSource::Lease l;
    ~Leased() {
      if (src) src->release(std::move(l));
    }
  } leased{source_.get(), {}};
  if (source_) {
    leased.l = source_->acquire(values_ + P.scratch_bytes);
    char* base = static_cast<char*>(leased.l.buf.get());
    if (base != base_) rebase(base);
  }
  for (const Patch& p : P.patches) {
    char* base = p.kind == LocKind::Input ? static_cast<char*>(const_cast<void*>(inputs[p.index])) : static_cast<char*>(ext_roots[p.index]);
    ops_[p.pos] = base + p.offset;
  }
  if (!P.bounded_inputs.empty()) {
    bool bounded = true;
    for (int i : P.bounded_inputs)
      bounded = bounded && within_input_bound(static_cast<const float*>(inputs[i]), P.input_types[i].numel());
    if (bounded != bounded_)
      for (RunCtx& c : ctx_) c.bounded = bounded;
    bounded_ = bounded;
  }
  void* const* ops = ops_.data();
  const size_t n = P.instrs.size();
  if (profiling_) {
    times_.assign(n, 0);
    starts_.assign(n, 0);
  }
  size_t i = 0;
  try {
    if (!profiling_) {
      for (; i < n; ++i) {
        const Instr& ins = P.instrs[i];
        ins.kernel->run(ops + ins.in_begin, ops + ins.out_begin, ctx_[i]);
      }
    } else {
      using clk = std::chrono::steady_clock;
      auto ns = [](clk::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
      const auto origin = clk::now();
      for (; i < n; ++i) {
        const Instr& ins = P.instrs[i];
        auto t0 = clk::now();
        ins.kernel->run(ops + ins.in_begin, ops + ins.out_begin, ctx_[i]);
        auto t1 = clk::now();
        starts_[i] = ns(t0 - origin);
        times_[i] = ns(t1 - t0);
      }
    }
  } catch (const std::exception& e) {
    fail("kernel failed: ", e.what(), "\n  in ", *P.instr_context[i]);
  }
  if (deferred_pending)
    P.deferred->after_run(prog_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
}

std::vector<OutBuffer> Executor::run(const std::vector<void*>& inputs) {
  const Program& P = *prog_;
  AG_CHECK(inputs.size() == P.input_types.size(), "expected ", P.input_types.size(), " inputs, got ", inputs.size());
  std::vector<std::shared_ptr<void>> ext;
  std::vector<void*> ext_ptrs;
  ext.reserve(P.external_bytes.size());
  for (size_t b : P.external_bytes) {
    ext.push_back(alloc_output(b));
    ext_ptrs.push_back(ext.back().get());
  }
  run_into(inputs.data(), ext_ptrs.data());
  std::vector<OutBuffer> outs;
  outs.reserve(P.outputs.size());
  for (const OutputSpec& o : P.outputs) {
    if (o.kind == LocKind::Const) {
      outs.push_back(OutBuffer{static_cast<char*>(o.storage->data) + o.offset, o.type, o.storage->owner});
    } else if (o.kind == LocKind::Input) {  // written in place: the caller's input holds it
      outs.push_back(OutBuffer{static_cast<char*>(inputs[o.index]) + o.offset, o.type, nullptr});
    } else {
      outs.push_back(OutBuffer{static_cast<char*>(ext[o.index].get()) + o.offset, o.type, ext[o.index]});
    }
  }
  return outs;
}

ExecutorPool::Lease ExecutorPool::acquire() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Executor> e = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(e));
    }
    ++made_;
  }
  return Lease(this, std::make_unique<Executor>(prog_, arena_));  // built outside the lock
}

void ExecutorPool::release(std::unique_ptr<Executor> e) {
  std::lock_guard<std::mutex> lk(mu_);
  idle_.push_back(std::move(e));
}

size_t ExecutorPool::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return made_;
}

}  // namespace ag
