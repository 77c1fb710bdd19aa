// oneDNN helpers shared by the matmul, linear and convolution kernels: one CPU
// engine for the whole process and one stream per calling thread, dtype mapping, plain memory
// descriptors, and the pieces every oneDNN-backed kernel needs (user-mode
// scratchpad, argument maps built once, f32 emulation of 16-bit inputs when
// the CPU has no native implementation for them).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "base/kernel.h"
#include "ir/attrs.h"
#include "ir/dtype.h"
#include "ir/graph.h"
#include "ir/serialize.h"
#include "ir/types.h"

namespace ag {
struct Node;
}

namespace ag::dnnl_util {

dnnl::engine& engine();
dnnl::stream& stream();

// oneDNN data type for an engine dtype; throws for dtypes oneDNN lacks.
dnnl::memory::data_type to_dnnl(DType t);
bool has_dnnl_type(DType t);

// Row-major (contiguous) descriptor of `shape`.
dnnl::memory::desc plain_desc(const Shape& shape, dnnl::memory::data_type dt);
dnnl::memory::dims to_dims(const Shape& s);
// An activation's descriptor: row-major, or (nhwc) NHWC bytes of the logical [N, C, H, W] `s`
// (BuildCtx::channels_last).
inline dnnl::memory::desc activation_desc(const Shape& s, dnnl::memory::data_type dt, bool nhwc) {
  return nhwc ? dnnl::memory::desc(to_dims(s), dt, dnnl::memory::format_tag::nhwc) : plain_desc(s, dt);
}

// A 2-D convolution or transposed one (inputs x, w, ...) that oneDNN runs on NHWC activations: one
// result, x and it 4-D, f32 or bf16, nothing empty (their OpDef::channels_last start here).
inline bool nhwc_conv_node(const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.size() < 2) return false;
  const TensorType &x = n.inputs[0]->type, &w = n.inputs[1]->type, &o = n.outputs[0]->type;
  if (x.rank() != 4 || o.rank() != 4 || !(x.dtype == DType::f32 || x.dtype == DType::bf16)) return false;
  return x.numel() != 0 && w.numel() != 0 && o.numel() != 0;
}

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

// The argument map of one primitive for one executor: memory objects whose
// data handles are re-pointed per call. Never shared between executors.
struct Args {
  std::unordered_map<int, dnnl::memory> m;
  void set(int arg, void* ptr) { m.at(arg).set_data_handle(ptr); }
};

// A primitive built once per node and shared read-only by every executor, with
// the descriptors of its arguments. Handles known when the kernel is built
// (prepacked weights, constant operands) are fixed with set(); each executor
// makes its own Args (make_args) and sets the per-call handles there.
struct Exec {
  dnnl::primitive prim;
  std::vector<std::pair<int, dnnl::memory::desc>> mds;
  std::vector<std::pair<int, void*>> fixed;
  size_t scratch_bytes = 0;  // the user-mode scratchpad, from the caller's scratch
  void init(const dnnl::primitive& p, const dnnl::memory::desc& scratch_md);
  void bind(int arg, const dnnl::memory::desc& md);  // a per-call argument
  void set(int arg, void* ptr);                      // a handle fixed at build time
  Args make_args() const;
  void run(Args& a, void* scratchpad) const;
};

// Reorder between two descriptors, prebuilt (shared); per-executor Args.
struct Reorder {
  bool needed = false;
  dnnl::reorder prim;
  dnnl::memory::desc from_md, to_md;
  void init(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
  Args make_args() const;
  void run(Args& a, void* from, void* to) const;
  void run_once(void* from, void* to) const;  // at build time (prepacking): temporary memories
};

// Constant weights in a kernel's preferred layout: `src` (n elements of `t`) widened to f32
// when `widen`, changed by `adjust` (a BatchNorm scale folded in, say), then reordered from
// `from` to `to`. Returns the bytes the kernel reads: packed.data(), or `src` itself when no
// copy was needed.
//
// A packed copy is made once per weight and layout in the process: every kernel that packs the
// same bytes the same way (every graph, every size: prefill and decode, a static graph and the
// symbolic one Dynamo recompiles it into) shares it. The process-wide registry keys a copy by the
// source's address, layouts and a 64-bit checksum of its bytes taken when it was packed, and checks
// the checksum again before handing it out, so a weight changed in place (same address, new values)
// is packed again, never served stale. ctx.prepack (one symbolic graph's builds, whose weight guard
// rebuilds them all on any change) is consulted first, without the checksum. `adjust_tag` names
// what `adjust` does (a checksum of its scale): 0 with an `adjust` keeps the copy unshared.
const void* prepack(const BuildCtx& ctx, const void* src, DType t, int64_t n, bool widen,
                    const dnnl::memory::desc& from, const dnnl::memory::desc& to, Buffer& packed,
                    const std::function<void(float*)>& adjust = {}, uint64_t adjust_tag = 0);

// Bytes of weights held in another layout or dtype than the caller's (prepack's copies, and the
// transformed weights of kernels that make their own: counted_buffer), process-wide.
int64_t packed_weight_bytes();
// A buffer for weights in another layout or dtype than the caller's, counted in packed_weight_bytes while it lives.
Buffer counted_buffer(size_t bytes);
// Packed copies that are optional (pack_weights "auto": linears of BuildCtx::pack_rows rows and more,
// whose weights a module also holds) stay within a process-wide budget of bytes. A hold is per weight
// (src): every kernel reading that weight shares one, and its bytes count until the last kernel
// holding it is gone. Returns nullptr where the weight does not fit (then the kernel reads the
// weights in place).
std::shared_ptr<void> hold_pack_budget(const void* src, int64_t bytes, int64_t budget);
// Bytes held against that budget, process-wide.
int64_t pack_budget_used();
// The holds refused for want of budget (their kernels read the weights in place) and their bytes,
// process-wide.
std::pair<int64_t, int64_t> pack_budget_refused();
// A graph's linear weight that would pack against the budget: its address, bytes, and the fewest rows
// of the linears reading it.
struct BudgetedWeight {
  const void* data;
  int64_t bytes, rows;
};
// The weights of a graph's linears that would pack against the budget: constant f32/bf16 [N, K] weights
// of linears of more rows than a GEMV takes and at least ctx.pack_rows (kernels/matmul.cpp, which builds
// them).
std::vector<BudgetedWeight> budgeted_weights(const Graph& g, const BuildCtx& ctx);
// Which of `weights` the graph packs (sorted addresses, BuildCtx::pack_chosen): those held already (they
// cost nothing more), then the rest a row count at a time, fewest rows first (in place costs most at few
// rows), while all of that row count fits what is left of `budget`. The first row count that does not fit
// and all wider ones stay in place, counted as refused (pack_budget_refused): a graph of one row count
// packs all or none (an LLM's prefill, whose weights exceed the budget, keeps one copy instead of packing
// its first layers'), a model of two (BART's 128-row encoder and 32-row decoder at batch 1) packs the
// fewer-row one where only that fits.
std::vector<const void*> pack_budget_choose(std::vector<BudgetedWeight> weights, int64_t budget);
// Times prepack handed out a copy another kernel had made (either cache), process-wide.
int64_t packed_weight_reuses();

// Packed weights shared by the kernels of builds that name it in their BuildCtx (one set of bound
// weights), and the process-wide registry. Holds them weakly: they live as long as a kernel (or, for
// copies mapped from a file, the loaded graph) uses them.
class PrepackCache {
 public:
  struct Key {
    const void* src;
    std::string how;  // dtype, widening, the adjustment's tag, and both layouts (packing_key)
    bool operator==(const Key& o) const { return src == o.src && how == o.how; }
  };
  // The live copy under `k`. With `src_bytes`, an entry made from other bytes than the source
  // holds now (its checksum differs) is dropped; entries whose source cannot change (a read-only
  // mapping) are not checked.
  Buffer find(const Key& k, size_t src_bytes = 0);
  void put(const Key& k, const Buffer& b, uint64_t sum = 0, bool immutable = false);
  size_t hits() const { return hits_; }
  // The live entries whose source is `src`.
  std::vector<std::pair<std::string, Buffer>> of(const void* src);

 private:
  struct Entry {
    Key key;
    std::weak_ptr<void> packed;
    size_t bytes;
    uint64_t sum;
    bool immutable;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  size_t hits_ = 0;
};

// How prepack transforms a weight, as text (a file stores it beside the packed bytes; a loading
// process whose kernels want another layout finds no match and packs again).
std::string packing_key(DType t, bool widen, uint64_t adjust_tag, const dnnl::memory::desc& from,
                        const dnnl::memory::desc& to);

// An exported file's packed weights (ir/serialize.h blobs) are put into the process registry, read
// in place from the file's mapping: kernels that would pack those weights the same way use them and
// make no copy. Returns the handles that keep them registered (hold them as long as the graph).
std::vector<std::shared_ptr<void>> adopt_packed(const LoadedGraph& l);

// The packed copies the process holds of `g`'s constants, as blobs to save beside them.
std::vector<SaveOptions::Blob> packed_blobs(const Graph& g, std::vector<Buffer>& keep);

// The f32 matmul of x [M, K] (row-major) with a panel of `cols` weight columns widened into scratch,
// writing `cols` columns of a row-major result with `ldo` elements a row (and adding a bias slice
// [cols] when `bias`): the quantized and emulated linears' path for many rows (the panel's f32
// bytes live only during the call). The panel is [cols, K] row-major when `k_inner` (a linear's
// weight rows), else [K, cols]. Binds SRC, WEIGHTS, DST (and BIAS); returns the implementation's name.
std::string init_panel_matmul(Exec& e, int64_t M, int64_t K, int64_t cols, int64_t ldo, bool k_inner, bool bias);
// The same with int8 operands: x [M, K] and the panel s8, their integer products summed into the f32
// result (no bias). Returns "" and builds nothing unless oneDNN runs it with AVX-512 VNNI or AMX dot
// products (without VNNI its int8 GEMM sums pairs of products in 16 bits, which can saturate; its
// AVX2-VNNI kernels are not measured): the caller's f32 path runs there.
std::string init_panel_matmul_s8(Exec& e, int64_t M, int64_t K, int64_t cols, int64_t ldo, bool k_inner);

// Per-run operands of a convolution-like primitive: `x` (n elements of t) widened to f32 into
// `wide` when the primitive emulates a 16-bit dtype (`emu`), then reordered into the primitive's
// layout at `blk` when `ro` is needed. Returns what the primitive reads.
void* staged_input(const Reorder& ro, Args& ro_args, DType t, bool emu, void* x, int64_t n, void* wide, void* blk);
// An operand widened to f32 into `wide` when emulating, else `x` itself.
void* widened(DType t, bool emu, void* x, int64_t n, void* wide);

// A primitive attr with user-managed scratchpad and f32 fpmath left default.
dnnl::primitive_attr default_attr();

}  // namespace ag::dnnl_util
