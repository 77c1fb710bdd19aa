// oneDNN helpers shared by the matmul, linear and convolution kernels: one CPU
// engine for the whole process and one stream per calling thread, dtype mapping, plain memory
// descriptors, and the pieces every oneDNN-backed kernel needs (user-mode
// scratchpad, argument maps built once, f32 emulation of 16-bit inputs when
// the CPU has no native implementation for them).
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ir/attrs.h"
#include "ir/dtype.h"
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
// copy was needed. Inside a PrepackScope, kernels that pack the same constant the same way
// (without `adjust`) share one packed copy: the programs one graph builds for its sizes keep one
// copy of the weights, not one per size.
const void* prepack(const void* src, DType t, int64_t n, bool widen, const dnnl::memory::desc& from,
                    const dnnl::memory::desc& to, Buffer& packed, const std::function<void(float*)>& adjust = {});

// Packed weights shared within a scope (one set of bound weights). Holds them weakly: they live
// as long as a kernel uses them.
class PrepackCache {
 public:
  struct Key {
    const void* src;
    DType t;
    bool widen;
    dnnl::memory::desc from, to;
    bool operator==(const Key& o) const {
      return src == o.src && t == o.t && widen == o.widen && from == o.from && to == o.to;
    }
  };
  Buffer find(const Key& k);
  void put(const Key& k, const Buffer& b);
  size_t hits() const { return hits_; }

 private:
  std::mutex mu_;
  std::vector<std::pair<Key, std::weak_ptr<void>>> entries_;
  size_t hits_ = 0;
};

// The PrepackCache of the scope this thread is in (nullptr: none).
PrepackCache* active_prepack_cache();

// The thread count prepack() runs with on this thread until the scope ends (0: the thread's own).
// Kernels built on several threads at once (compile_program) pack with one thread each.
class PackThreadsScope {
 public:
  explicit PackThreadsScope(int n);
  ~PackThreadsScope();
  PackThreadsScope(const PackThreadsScope&) = delete;
  PackThreadsScope& operator=(const PackThreadsScope&) = delete;

 private:
  int prev_;
};

// Makes `cache` the one prepack() uses on this thread until the scope ends.
class PrepackScope {
 public:
  explicit PrepackScope(PrepackCache* cache);
  ~PrepackScope();
  PrepackScope(const PrepackScope&) = delete;
  PrepackScope& operator=(const PrepackScope&) = delete;

 private:
  PrepackCache* prev_;
};

// A primitive attr with user-managed scratchpad and f32 fpmath left default.
dnnl::primitive_attr default_attr();

}  // namespace ag::dnnl_util

// ---- fused epilogues ------------------------------------------------------------------
// A GEMM/conv node may carry a chain of elementwise ops absorbed by the
// fuse_epilogues pass, applied in order to its f32 result before the single
// rounding to the output dtype:
//   attrs "post_ops"   ints, one EpiCode per op
//   attrs "post_args"  floats, two per op (relu: negative slope; clamp: lo, hi)
//   attrs "post_inputs" int, how many inputs were appended to the node for the
//                      binary ops (one each, in chain order, after the op's own
//                      inputs)
//   attrs "fused"      string, the absorbed nodes' FX names joined by ','
// A binary op's operand has the output dtype or float32 and broadcasts to the
// output without changing it: a scalar, the full output, a row over the last
// dim (linear/matmul) or one value per channel (conv, dim 1).
namespace ag::epi {

enum Code : int64_t {
  kRelu = 1,  // args: negative slope (0 for relu, leaky_relu otherwise)
  kGeluErf = 2,
  kGeluTanh = 3,
  kSilu = 4,
  kTanh = 5,
  kSigmoid = 6,
  kClamp = 7,  // args: lo, hi (+-inf when absent)
  kAdd = 8,    // out = out + operand
  kSub = 9,    // out = out - operand
  kMul = 10,   // out = out * operand
  kDiv = 11,   // out = out / operand
};
inline bool is_binary(int64_t c) { return c >= kAdd && c <= kDiv; }
const char* code_name(int64_t c);

// How a binary operand is indexed when the output is seen as [R, L] rows
// (linear/matmul: L = last dim; conv: L = spatial size, R = batch * channels).
enum class Mode : uint8_t { Scalar, Full, Col, Channel };

// Classifies `operand` against the output for a GEMM op ("linear"/"matmul": scalar,
// full, last-dim row; "conv": scalar, full, per channel). False when it does
// not fit (a broadcast that would change the output, or another pattern).
bool classify(const Shape& operand, const Shape& out, bool conv, Mode* mode);

// Validates the post-op attributes and appended inputs of a GEMM node during
// shape inference (`n_base`: the op's own input count). Throws with a message.
void check_post_ops(const std::vector<TensorType>& in, size_t n_base, const Attrs& a, const TensorType& out,
                    bool conv, const char* op);
// The number of inputs the op itself has (the rest are post-op operands).
inline size_t base_inputs(size_t n_inputs, const Attrs& a) {
  return n_inputs - static_cast<size_t>(a.i("post_inputs", 0));
}

struct Op {
  int64_t code = 0;
  float a = 0, b = 0;
  int input = -1;  // node input index of the operand (binary ops)
  Mode mode = Mode::Scalar;
  DType dt = DType::f32;
  const void* cdata = nullptr;  // operand bytes when it is a constant
  Shape shape;                  // operand shape padded to the output rank
};

// The post-op chain of a node, and a portable implementation of any suffix of
// it on f32 row segments (used where oneDNN cannot take the op: GEMV, K = 0,
// implementations without that post-op).
struct Epilogue {
  std::vector<Op> ops;
  int64_t L = 1, C = 1;  // row length and channel count for Mode::Channel
  bool empty() const { return ops.empty(); }
  // Applies ops[k0..] to seg[0..n), which is output row r, columns j0..j0+n.
  void apply(float* seg, int64_t r, int64_t j0, int64_t n, void* const* in, size_t k0) const;
  // Applies ops[k0..] to a whole f32 output of R x L elements (parallel).
  void apply_all(float* out, int64_t R, void* const* in, size_t k0) const;
};
// `view`: the shape the kernel computes (linear: [M, N]; matmul, conv: the output).
Epilogue parse(const Node& n, const Shape& view, bool conv);

// oneDNN post-ops for ops[k0..k). Operand descriptors are plain (operand_md),
// except full operands when `full_md` is given (conv: the primitive's dst
// layout; the kernel reorders the operand into it). The operand of op i is
// bound to DNNL_ARG_ATTR_MULTIPLE_POST_OP(i - k0) | DNNL_ARG_SRC_1.
dnnl::post_ops to_dnnl_post_ops(const Epilogue& e, size_t k0, size_t k, const dnnl::memory::desc* full_md = nullptr);
dnnl::memory::desc operand_md(const Op& op);

}  // namespace ag::epi
