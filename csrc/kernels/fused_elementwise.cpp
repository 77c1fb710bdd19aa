#pragma GCC optimize("no-trapping-math", "align-loops=32")  // same codegen assumptions as the single-op elementwise kernels; loops 32-byte aligned (below)
// fused_elementwise: interprets a small program (see fused_elementwise.h) tile
// by tile. The output's flat index range is cut into tiles of kTile elements;
// threads take contiguous runs of tiles. For each tile, every input is brought
// into float32 scratch (a float32 input of the full output size is read where
// it lies; other dtypes are widened; broadcast inputs are gathered with the
// same Plan the single-op kernels use; a one-element input is splatted once
// per run of tiles), then each instruction runs as one vectorizable loop over
// the tile, then the outputs are stored. Scratch buffers are assigned at build
// time by liveness (a chain of any length needs two or three), live in the
// kernel (one set per thread) and are reused every call: run() never allocates.
//
// In place: the planner may give the (single) output the buffer of a
// same-size input. A tile reads all of its inputs before it stores anything,
// and tiles are disjoint, so that is safe.
#include "kernels/fused_elementwise.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kernels/elementwise.h"
#include "kernels/elementwise_math.h"
#include "kernels/elementwise_rows.h"
#include "kernels/elementwise_special.h"
#include "kernels/isa.h"
#include "kernels/separable_gather.h"
#include "kernels/simd.h"

namespace ag {
namespace fe {
namespace {

constexpr int64_t kTile = 512;
using ew::kF, ew::kI, ew::kB, ew::kNoHalf, ew::kFI, ew::kAll, ew::kIB;  // the kinds in elementwise_ops.h

bool in_range(int64_t code, int64_t begin, int64_t end) { return code > begin && code < end; }
bool x_unary(int64_t c) { return in_range(c, kXUnaryBegin, kXUnaryEnd) || in_range(c, kXParamBegin, kXParamEnd); }
bool x_pred(int64_t c) { return in_range(c, kXPredBegin, kXPredEnd); }
bool x_binary(int64_t c) { return in_range(c, kXBinaryBegin, kXBinaryEnd); }
bool x_compare(int64_t c) { return in_range(c, kXCompareBegin, kXCompareEnd); }

int arity(int64_t code) {
  if (x_unary(code) || x_pred(code)) return 1;
  if (x_binary(code) || x_compare(code)) return 2;
  if (code == kConvert) return 1;
  if (code == kWhere || code == kFma) return 3;
  return -1;
}

// A row's flags (ew::kMath, kOpmath, ...) and kinds; 0 for other codes.
#define AG_X_ROWS(X)         \
  AG_EW_UNARY_OPS(X)         \
  AG_EW_PREDICATE_OPS(X)     \
  AG_EW_UNARY_PARAM_OPS(X)   \
  AG_EW_UNARY_FUNCTOR_OPS(X) \
  AG_EW_BINARY_OPS(X)        \
  AG_EW_BINARY_FORMS(X)      \
  AG_EW_COMPARE_OPS(X)
int row_flags(int64_t c) {
  switch (c) {
#define AG_X_FLAGS(name, ...) case kX_##name: return ew::R_##name<float>::flags;
    AG_X_ROWS(AG_X_FLAGS)
#undef AG_X_FLAGS
    default: return 0;
  }
}
int row_kinds(int64_t c) {
  switch (c) {
#define AG_X_KINDS(name, kinds, ...) case kX_##name: return (kinds);
#define AG_X_KINDS_3(name, second, kinds, ...) case kX_##name: return (kinds);  // (the functor and form lists)
    AG_EW_UNARY_OPS(AG_X_KINDS)
    AG_EW_PREDICATE_OPS(AG_X_KINDS)
    AG_EW_UNARY_PARAM_OPS(AG_X_KINDS)
    AG_EW_UNARY_FUNCTOR_OPS(AG_X_KINDS_3)
    AG_EW_BINARY_OPS(AG_X_KINDS)
    AG_EW_BINARY_FORMS(AG_X_KINDS_3)
    AG_EW_COMPARE_OPS(AG_X_KINDS)
#undef AG_X_KINDS
#undef AG_X_KINDS_3
    default: return 0;
  }
}
// Whether row c takes operands of dtype t inside a fused group (floats: the row takes floats;
// bool: it takes bool, or it is a predicate).
bool row_takes(int64_t c, DType t) {
  if (t != DType::b8) return (row_kinds(c) & ew::kF) != 0;
  return (row_kinds(c) & ew::kB) != 0 || in_range(c, kXPredBegin, kXPredEnd);
}

// dtype of an instruction's result; throws on operands the op cannot take.
DType result_dtype(int64_t code, const DType* t, const double* p) {
  if (x_unary(code) || x_pred(code)) {
    AG_CHECK(row_takes(code, t[0]), "fused_elementwise: instruction ", code, " does not take ", dtype_name(t[0]),
             " operands");
    return x_pred(code) ? DType::b8 : t[0];
  }
  if (x_binary(code) || x_compare(code)) {
    DType r = t[0];
    if (t[0] != t[1]) {  // a kOpmath row takes a float32 scalar with a bfloat16/float16 tensor
      const bool opmath = (row_flags(code) & ew::kOpmath) != 0;
      if (opmath && ew::is_half(t[0]) && t[1] == DType::f32) r = t[0];
      else if (opmath && ew::is_half(t[1]) && t[0] == DType::f32) r = t[1];
      else fail("fused_elementwise: operand dtypes ", dtype_name(t[0]), " and ", dtype_name(t[1]), " differ");
    }
    AG_CHECK(row_takes(code, r), "fused_elementwise: instruction ", code, " does not take ", dtype_name(r),
             " operands");
    return x_compare(code) ? DType::b8 : r;
  }
  if (code == kConvert) {
    int64_t d = static_cast<int64_t>(p[0]);
    AG_CHECK(d >= 0 && d < kNumDTypes && value_dtype_ok(static_cast<DType>(d)),
             "fused_elementwise: bad convert dtype ", p[0]);
    return static_cast<DType>(d);
  }
  if (code == kWhere) {
    AG_CHECK(t[0] == DType::b8, "fused_elementwise: where needs a bool condition, got ", dtype_name(t[0]));
    AG_CHECK(t[1] == t[2], "fused_elementwise: where branches differ: ", dtype_name(t[1]), " and ",
             dtype_name(t[2]));
    return t[1];
  }
  if (code == kFma) {
    AG_CHECK(t[0] != DType::b8 && t[1] == t[0] && t[2] == t[0], "fused_elementwise: fma takes three floating operands of one dtype, got ",
             dtype_name(t[0]), ", ", dtype_name(t[1]), " and ", dtype_name(t[2]));
    return t[0];
  }
  fail("fused_elementwise: unknown instruction code ", code);
}

struct Program {
  std::vector<int64_t> ops, args, outs;
  std::vector<double> params;
  std::vector<DType> slot_dtype;  // inputs then instruction results
  Shape shape;
  // gathered inputs (attr "gathers", see fuse_gathers.cpp): input slot -> gather; index tensors are aux inputs
  std::vector<int> gather_of;  // per input: index into gathers, or -1
  std::vector<char> aux;       // per input: an index tensor of a gather (read by no instruction)
  std::vector<SeparableGather> gathers;
  std::vector<std::vector<int>> gather_idx;  // input positions of each gather's index tensors
};

// attr "gathers": records [slot, first, k, dim_0 .. dim_{k-1}]: input `slot` is x and is read as
// x[..., idx...] on dims dim_*, with the k index tensors at inputs first .. first + k - 1.
void read_gathers(const std::vector<TensorType>& in, const Attrs& a, Program& p) {
  const int nin = static_cast<int>(in.size());
  p.gather_of.assign(nin, -1);
  p.aux.assign(nin, 0);
  if (!a.has("gathers")) return;
  const Shape& r = a.ints("gathers");
  for (size_t q = 0; q < r.size();) {
    AG_CHECK(q + 3 <= r.size(), "fused_elementwise: malformed gathers");
    const int64_t slot = r[q], first = r[q + 1], k = r[q + 2];
    AG_CHECK(slot >= 0 && slot < nin && k >= 1 && first >= 0 && first + k <= nin && q + 3 + k <= r.size() &&
                 p.gather_of[slot] < 0 && !p.aux[slot],
             "fused_elementwise: malformed gathers");
    Shape dims(r.begin() + q + 3, r.begin() + q + 3 + k);
    std::vector<TensorType> idx;
    std::vector<int> pos;
    for (int64_t j = 0; j < k; ++j) {
      AG_CHECK(!p.aux[first + j] && p.gather_of[first + j] < 0 && first + j != slot,
               "fused_elementwise: malformed gathers");
      p.aux[first + j] = 1;
      idx.push_back(in[first + j]);
      pos.push_back(static_cast<int>(first + j));
    }
    SeparableGather sg;
    AG_CHECK(SeparableGather::plan(in[slot], idx, dims, &sg), "fused_elementwise: input ", in[slot].str(),
             " cannot be gathered on dims ", shape_str(dims));
    p.gather_of[slot] = static_cast<int>(p.gathers.size());
    p.gathers.push_back(std::move(sg));
    p.gather_idx.push_back(pos);
    q += 3 + k;
  }
}

Program read_program(const std::vector<TensorType>& in, const Attrs& a) {
  Program p;
  AG_CHECK(!in.empty(), "fused_elementwise: needs at least one input");
  p.ops = a.ints("ops");
  p.args = a.ints("args");
  p.params = a.floats("params");
  p.outs = a.ints("outputs");
  const size_t k = p.ops.size();
  AG_CHECK(!p.ops.empty() && p.args.size() == kArgs * k && p.params.size() == kParams * k,
           "fused_elementwise: malformed program (", k, " ops, ", p.args.size(), " args, ", p.params.size(),
           " params)");
  AG_CHECK(!p.outs.empty(), "fused_elementwise: no outputs");
  read_gathers(in, a, p);
  bool first = true;
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorType& t = in[i];
    p.slot_dtype.push_back(t.dtype);
    if (p.aux[i]) continue;
    AG_CHECK(value_dtype_ok(t.dtype), "fused_elementwise: unsupported input ", t.str());
    const Shape s = p.gather_of[i] >= 0 ? p.gathers[p.gather_of[i]].out_shape : t.shape();
    p.shape = first ? s : broadcast_shapes(p.shape, s);
    first = false;
  }
  AG_CHECK(!first, "fused_elementwise: no value inputs");
  for (size_t i = 0; i < k; ++i) {
    const int64_t code = p.ops[i];
    const int n = arity(code);
    AG_CHECK(n > 0, "fused_elementwise: unknown instruction code ", code);
    DType t[kArgs] = {};
    for (int j = 0; j < kArgs; ++j) {
      int64_t s = p.args[kArgs * i + j];
      if (j >= n) {
        AG_CHECK(s == -1, "fused_elementwise: instruction ", i, " has an extra operand");
        continue;
      }
      AG_CHECK(s >= 0 && s < static_cast<int64_t>(p.slot_dtype.size()), "fused_elementwise: instruction ", i,
               " reads slot ", s, " which is not defined before it");
      AG_CHECK(s >= static_cast<int64_t>(in.size()) || !p.aux[s], "fused_elementwise: instruction ", i,
               " reads index input ", s);
      t[j] = p.slot_dtype[s];
    }
    p.slot_dtype.push_back(result_dtype(code, t, &p.params[kParams * i]));
  }
  for (int64_t s : p.outs)
    AG_CHECK(s >= static_cast<int64_t>(in.size()) && s < static_cast<int64_t>(p.slot_dtype.size()),
             "fused_elementwise: output slot ", s, " is not an instruction result");
  return p;
}

std::vector<TensorType> infer_fused(const std::vector<TensorType>& in, const Attrs& a) {
  Program p = read_program(in, a);
  std::vector<TensorType> out;
  for (int64_t s : p.outs) out.push_back(TensorType(p.slot_dtype[s], p.shape));
  return out;
}

// ---- element helpers ----------------------------------------------------------------
inline float bits_f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// f32 -> bf16 -> f32, branch free, bit-identical to f32_to_bf16 (NaN included)
inline float round_bf16(float x) {
  uint32_t u = f_bits(x);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  uint32_t q = (u & 0xffff0000u) | 0x00400000u;
  return bits_f((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}
inline float round_f16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

template <typename T>
inline float ld(const T& v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, bf16s>) return bits_f(static_cast<uint32_t>(v.b) << 16);
  else if constexpr (std::is_same_v<T, f16s>) return f16_to_f32(v.b);
  else return v != 0 ? 1.0f : 0.0f;  // bool read as uint8
}

template <typename T>
void widen(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = ld(src[i]);
}

// dst[0, n) = input elements for output positions [b, b + n), through plan p
template <typename T>
void gather(const ew::Plan<1>& p, const T* src, int64_t b, int64_t n, float* dst) {
  const int64_t inner = p.inner;
  int64_t idx[ew::kMaxDims];
  int64_t off = 0;
  int64_t rem = b / inner, j = b % inner;
  for (int d = p.nd - 1; d >= 0; --d) {
    idx[d] = rem % p.size[d];
    rem /= p.size[d];
    off += idx[d] * p.stride[0][d];
  }
  int64_t pos = 0;
  while (pos < n) {
    const int64_t len = std::min(inner - j, n - pos);
    if (p.inner_stride[0]) {
      const T* s = src + off + j;
      float* o = dst + pos;
      for (int64_t i = 0; i < len; ++i) o[i] = ld(s[i]);
    } else {
      const float v = ld(src[off]);
      float* o = dst + pos;
      for (int64_t i = 0; i < len; ++i) o[i] = v;
    }
    pos += len;
    j = 0;
    for (int d = p.nd - 1; d >= 0; --d) {
      ++idx[d];
      off += p.stride[0][d];
      if (idx[d] < p.size[d]) break;
      off -= p.stride[0][d] * p.size[d];
      idx[d] = 0;
    }
  }
}

template <typename F>
[[gnu::always_inline]] inline void un(float* d, const float* a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename F>
[[gnu::always_inline]] inline void bin(float* d, const float* a, const float* b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

// a unary row R over floats (R<float>), or, for a row that takes no floats (bitwise_not), over
// bool values as bool (R<bool>) with the result as 0/1
template <template <typename> class R, int K>
[[gnu::always_inline]] inline void un_row(float* d, const float* a, int64_t n, const double* p) {
  if constexpr (std::is_same_v<R<float>, ew::Gelu<float>>) {
    // (one loop per form: a select between both forms in the loop kept GCC from inlining the
    // functor, and the loop ran scalar, a call an element; the same functions, the same bits)
    if (R<float>(p).tanh_form) un(d, a, n, [](float x) { return math::gelu_tanh_(x); });
    else un(d, a, n, [](float x) { return math::gelu_erf_(x); });
  } else if constexpr ((K & ew::kF) != 0) {
    un(d, a, n, R<float>(p));
  } else {
    const R<bool> f(p);
    un(d, a, n, [f](float x) { return f(x != 0.0f) ? 1.0f : 0.0f; });
  }
}

// A unary row's loop compiled for AVX-512 and for the core's AVX2 (kernels/simd.h's wrappers: the
// row's functor and math inlined into each), one source: the interpreter calls the one
// isa::use_avx512() chose for the call. Every lane computes the same IEEE operations (no FMA is
// formed: -ffp-contract=off; math::fmadd is an FMA under both), so both give the same bits.
// (Loops start 32-byte aligned in this file, the pragma on its first line: where a row's loop lay in
// the binary moved a mul/add/mul chain's time by 20-25% on a Zen 4, 102-108 or 135 us a call on
// 128x3072, with the same code.)
// Whether row R runs its AVX-512 variant where the ISA is AVX-512: the math rows (exp, erf, tanh, GELU,
// ...: the wider evaluation pays); the cheap ones (add, mul, neg, compares ...) stay AVX2, which ran
// a chain of them 7-8% faster on a Zen 4 (tiles in L1, memory-bound anyway).
template <template <typename> class R>
constexpr bool kWide = (R<float>::flags & ew::kMath) != 0;

template <template <typename> class R, int K>
AG_WRAPPER_AVX512 void un_row_avx512(float* d, const float* a, int64_t n, const double* p) {
  un_row<R, K>(d, a, n, p);
}
template <template <typename> class R, int K>
AG_WRAPPER_AVX2 void un_row_avx2(float* d, const float* a, int64_t n, const double* p) {
  un_row<R, K>(d, a, n, p);
}

bool is_math(int64_t c) { return (row_flags(c) & ew::kMath) != 0; }

// The interpreter case of every unary row, expanded in the interpreter's switch and in
// run_unary (names d, a, n and the numbers p in scope): un() over the row's functor made from the
// instruction's numbers.
#define AG_FE_UN(name, kinds, ...)                \
  case kX_##name:                                 \
    AG_FE_UN_CALL(ew::R_##name, (kinds));         \
    break;
#define AG_FE_UN_F(name, F, kinds, ...) AG_FE_UN(name, kinds)
#define AG_FE_PRED(name, ...)                                     \
  case kX_##name: {                                               \
    const ew::R_##name<float> f(p);                               \
    un(d, a, n, [&f](float x) { return f(x) ? 1.0f : 0.0f; });   \
    break;                                                        \
  }
#define AG_FE_UNARY_CASES         \
  AG_EW_UNARY_OPS(AG_FE_UN)       \
  AG_EW_PREDICATE_OPS(AG_FE_PRED) \
  AG_EW_UNARY_PARAM_OPS(AG_FE_UN) \
  AG_EW_UNARY_FUNCTOR_OPS(AG_FE_UN_F)

class FusedKernel final : public Kernel {
 public:
  explicit FusedKernel(const Node& n) {
    std::vector<TensorType> in;
    for (Value* v : n.inputs) in.push_back(v->type);
    Program p = read_program(in, n.attrs);
    numel_ = TensorType(DType::f32, p.shape).numel();
    nin_ = static_cast<int>(in.size());
    const int k = static_cast<int>(p.ops.size());
    const int nslots = nin_ + k;
    // inputs
    for (int i = 0; i < nin_; ++i) {
      In x;
      x.dt = in[i].dtype;
      int64_t ne = in[i].numel();
      if (p.aux[i]) x.kind = kAux;
      else if (p.gather_of[i] >= 0) x.kind = kGather, x.gather = p.gather_of[i];
      else if (ne == numel_) x.kind = kFull;
      else if (ne == 1) x.kind = kScalar;
      else x.kind = kBcast;
      if (x.kind == kBcast) x.plan = ew::make_plan<1>(p.shape, {in[i].shape()});
      ins_.push_back(x);
    }
    gathers_ = p.gathers;
    gather_idx_ = p.gather_idx;
    for (auto& sg : gathers_) {
      AG_CHECK(TensorType(DType::f32, sg.out_shape).numel() == numel_, "fused_elementwise: gathered input of shape ",
               shape_str(sg.out_shape), " does not have the output shape ", shape_str(p.shape));
      gather_tab_.push_back(scratch_.add(sg.table_bytes()));
    }
    // liveness: last instruction reading each slot (outputs live to the end)
    std::vector<int> last(nslots, -1);
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < arity(p.ops[i]); ++j) last[p.args[kArgs * i + j]] = i;
    for (int64_t s : p.outs) last[s] = k;
    slot_buf_.assign(nslots, -1);
    std::vector<int> free_list;
    int nbuf = 0;
    auto take = [&] {
      if (!free_list.empty()) {
        int b = free_list.back();
        free_list.pop_back();
        return b;
      }
      return nbuf++;
    };
    // one-element inputs are values; only where and fma read them as (splatted) tiles
    std::vector<char> splat(nin_, 0);
    for (int i = 0; i < k; ++i)
      if (p.ops[i] == kWhere || p.ops[i] == kFma)
        for (int j = 0; j < 3; ++j)
          if (p.args[kArgs * i + j] < nin_) splat[p.args[kArgs * i + j]] = 1;
    for (int i = 0; i < nin_; ++i) {
      if (ins_[i].kind == kFull && ins_[i].dt == DType::f32) continue;  // read in place
      if (last[i] < 0 || ins_[i].kind == kAux) continue;
      if (ins_[i].kind == kScalar && !splat[i]) continue;
      slot_buf_[i] = take();  // scalar buffers are never released (filled once per run of tiles)
    }
    auto release = [&](int s, int i) {
      if (slot_buf_[s] < 0 || last[s] != i) return;
      if (s < nin_ && ins_[s].kind == kScalar) return;
      if (std::find(free_list.begin(), free_list.end(), slot_buf_[s]) == free_list.end())
        free_list.push_back(slot_buf_[s]);
    };
    weight_ = 0;
    for (int i = 0; i < k; ++i) {
      Op op;
      op.code = p.ops[i];
      op.a = static_cast<int>(p.args[kArgs * i]);
      op.b = static_cast<int>(p.args[kArgs * i + 1]);
      op.c = static_cast<int>(p.args[kArgs * i + 2]);
      if (op.code != kWhere && arity(op.code) == 2) {
        op.sa = op.a < nin_ && ins_[op.a].kind == kScalar;
        op.sb = op.b < nin_ && ins_[op.b].kind == kScalar;
        op.on_bool = p.slot_dtype[op.a] == DType::b8;
      }
      const double* pp = &p.params[kParams * i];
      const DType rt = p.slot_dtype[nin_ + i];
      op.round = rt == DType::bf16 ? 1 : rt == DType::f16 ? 2 : 0;
      if (op.code == kWhere) op.round = 0;  // moves values of its own dtype, bits untouched (like the where kernel)
      configure(op, pp);
      for (int j = 0; j < arity(op.code); ++j) release(static_cast<int>(p.args[kArgs * i + j]), i);
      const int dst = nin_ + i;
      slot_buf_[dst] = take();
      op.dst = slot_buf_[dst];
      if (last[dst] < 0) free_list.push_back(slot_buf_[dst]);  // never read
      ops_.push_back(op);
      weight_ += is_math(op.code) ? 8 : 1;
    }
    for (int64_t s : p.outs) {
      out_slot_.push_back(static_cast<int>(s));
      out_dt_.push_back(p.slot_dtype[s]);
    }
    nbuf_ = nbuf;
    nsets_ = std::clamp(std::max(num_threads(), omp_get_max_threads()), 1, 256);
    nslots_ = nslots;
    // per run, one set per thread chunk: tile buffers, slot pointers, one-element input values
    mem_ = scratch_.add(static_cast<size_t>(nbuf_) * kTile * nsets_ * sizeof(float));
    ptrs_ = scratch_.add(static_cast<size_t>(nslots_) * nsets_ * sizeof(float*));
    vals_ = scratch_.add(static_cast<size_t>(nin_) * nsets_ * sizeof(float));
    name_ = "fused_elementwise_" + std::to_string(k) + "ops";
  }

  std::string name() const override { return name_; }

  size_t scratch_bytes() const override { return scratch_.bytes; }

  void run(void* const* in, void* const* out, const RunCtx& ctx) const override {
    if (numel_ == 0) return;
    for (size_t q = 0; q < gathers_.size(); ++q) {  // serially, before any thread reads the tables
      const void* idx[16];
      for (size_t j = 0; j < gather_idx_[q].size(); ++j) idx[j] = in[gather_idx_[q][j]];
      gather_prepare(gathers_[q], idx, ScratchLayout::at<int64_t>(ctx, gather_tab_[q]), "fused_elementwise (gathered index)");
    }
    const int64_t ntiles = (numel_ + kTile - 1) / kTile;
    const bool avx512 = isa::use_avx512();
    // a chunk must be worth a task: about as much work as the single-op kernels' cheap grain
    const int64_t work = numel_ * std::max<int64_t>(weight_, 1);
    int64_t want = std::min<int64_t>({static_cast<int64_t>(nsets_), static_cast<int64_t>(num_threads()), ntiles,
                                      work / ew::kGrainCheap});
    if (want <= 1) {
      run_tiles(ctx, 0, 0, ntiles, in, out, avx512);
      return;
    }
    parallel_for(want, 1, [&](int64_t cb, int64_t ce) {
      const int set = static_cast<int>(cb);  // ranges are disjoint: cb identifies the thread
      run_tiles(ctx, set, cb * ntiles / want, ce * ntiles / want, in, out, avx512);
    });
  }

 private:
  enum Kind { kFull, kScalar, kBcast, kGather, kAux };
  struct In {
    Kind kind = kFull;
    DType dt = DType::f32;
    ew::Plan<1> plan;
    int gather = -1;
  };
  struct Op {
    int64_t code = 0;
    int a = -1, b = -1, c = -1, dst = -1;
    bool sa = false, sb = false;  // binary operand is a one-element input (read as a value, not a tile)
    int round = 0;  // 1 bf16, 2 f16
    bool on_bool = false;  // a binary or compare row over bool operands: computed as bool
    int mode = 0;   // convert: the target dtype
    double p[kParams] = {0, 0, 0};
  };
  static void configure(Op& op, const double* p) {
    for (int j = 0; j < kParams; ++j) op.p[j] = p[j];
    if (op.code == kConvert) op.mode = static_cast<int>(p[0]);
  }

  template <typename T>
  void load_input(int i, const void* src, int64_t b, int64_t n, float* dst, const RunCtx& ctx) const {
    const In& x = ins_[i];
    const T* s = static_cast<const T*>(src);
    if (x.kind == kGather)
      gather_load(gathers_[x.gather], s, ScratchLayout::at<const int64_t>(ctx, gather_tab_[x.gather]), b, n, dst,
                              [](const T& v) { return ld(v); });
    else if (x.kind == kFull) widen(s + b, dst, n);
    else gather(x.plan, s, b, n, dst);
  }
  void load(int i, const void* src, int64_t b, int64_t n, float* dst, const RunCtx& ctx) const {
    switch (ins_[i].dt) {
      case DType::f32: load_input<float>(i, src, b, n, dst, ctx); break;
      case DType::bf16: load_input<bf16s>(i, src, b, n, dst, ctx); break;
      case DType::f16: load_input<f16s>(i, src, b, n, dst, ctx); break;
      default: load_input<uint8_t>(i, src, b, n, dst, ctx); break;
    }
  }
  float scalar(int i, const void* src) const {
    switch (ins_[i].dt) {
      case DType::f32: return *static_cast<const float*>(src);
      case DType::bf16: return ld(*static_cast<const bf16s*>(src));
      case DType::f16: return ld(*static_cast<const f16s*>(src));
      default: return ld(*static_cast<const uint8_t*>(src));
    }
  }

  void run_tiles(const RunCtx& ctx, int set, int64_t t0, int64_t t1, void* const* in, void* const* out,
                 bool avx512) const {
    float* base = ScratchLayout::at<float>(ctx, mem_) + static_cast<size_t>(set) * nbuf_ * kTile;
    const float** sp = ScratchLayout::at<const float*>(ctx, ptrs_) + static_cast<size_t>(set) * nslots_;
    for (int s = 0; s < nslots_; ++s) sp[s] = slot_buf_[s] >= 0 ? base + slot_buf_[s] * kTile : nullptr;
    float* sv = ScratchLayout::at<float>(ctx, vals_) + static_cast<size_t>(set) * nin_;
    for (int i = 0; i < nin_; ++i)
      if (ins_[i].kind == kScalar) {
        const float v = sv[i] = scalar(i, in[i]);
        if (slot_buf_[i] < 0) continue;
        float* d = base + slot_buf_[i] * kTile;
        for (int64_t e = 0; e < kTile; ++e) d[e] = v;
      }
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t * kTile, n = std::min(kTile, numel_ - b);
      for (int i = 0; i < nin_; ++i) {
        if (ins_[i].kind == kScalar || ins_[i].kind == kAux) continue;
        if (slot_buf_[i] < 0) {
          if (ins_[i].kind == kFull) sp[i] = static_cast<const float*>(in[i]) + b;  // f32, read in place
          continue;
        }
        load(i, in[i], b, n, base + slot_buf_[i] * kTile, ctx);
      }
      if (avx512)
        for (const Op& op : ops_) exec<true>(op, sp, sv, base + op.dst * kTile, n);
      else
        for (const Op& op : ops_) exec<false>(op, sp, sv, base + op.dst * kTile, n);
      for (size_t j = 0; j < out_slot_.size(); ++j) store(out_dt_[j], sp[out_slot_[j]], out[j], b, n);
    }
  }

  static void store(DType dt, const float* s, void* dst, int64_t b, int64_t n) {
    switch (dt) {
      case DType::f32: std::memcpy(static_cast<float*>(dst) + b, s, n * sizeof(float)); break;
      case DType::bf16: {  // values are already rounded: the upper half is the bf16
        uint16_t* o = static_cast<uint16_t*>(dst) + b;
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<uint16_t>(f_bits(s[i]) >> 16);
        break;
      }
      case DType::f16: {
        uint16_t* o = static_cast<uint16_t*>(dst) + b;
        for (int64_t i = 0; i < n; ++i) {
          _Float16 h = static_cast<_Float16>(s[i]);
          std::memcpy(&o[i], &h, 2);
        }
        break;
      }
      default: {
        bool* o = static_cast<bool*>(dst) + b;
        for (int64_t i = 0; i < n; ++i) o[i] = s[i] != 0.0f;
        break;
      }
    }
  }

  // binary op f over tiles or one-element values
  template <typename F>
  [[gnu::always_inline]] static inline void bin2(const Op& op, const float* const* sp, const float* sv, float* d, int64_t n, F f) {
    if (!op.sa && !op.sb) {
      bin(d, sp[op.a], sp[op.b], n, f);
    } else if (!op.sa) {
      const float y = sv[op.b];
      const float* a = sp[op.a];
      for (int64_t i = 0; i < n; ++i) d[i] = f(a[i], y);
    } else if (!op.sb) {
      const float x = sv[op.a];
      const float* b = sp[op.b];
      for (int64_t i = 0; i < n; ++i) d[i] = f(x, b[i]);
    } else {
      const float v = f(sv[op.a], sv[op.b]);
      for (int64_t i = 0; i < n; ++i) d[i] = v;
    }
  }

  // a binary or compare row R: over floats (R<float>), or over bool operands as bool (R<bool>,
  // the single-op kernel's compute type for bool), the result as 0/1
  template <template <typename> class R, int K>
  [[gnu::always_inline]] static inline void bin_row(const Op& op, const float* const* sp, const float* sv, float* d, int64_t n) {
    if constexpr ((K & ew::kB) != 0) {
      if (op.on_bool) {
        const R<bool> f(op.p);
        bin2(op, sp, sv, d, n, [f](float x, float y) { return f(x != 0.0f, y != 0.0f) ? 1.0f : 0.0f; });
        return;
      }
    }
    if constexpr ((K & ew::kF) != 0) {
      const R<float> f(op.p);
      bin2(op, sp, sv, d, n, [f](float x, float y) {
        if constexpr (std::is_same_v<decltype(f(x, y)), bool>) return f(x, y) ? 1.0f : 0.0f;  // (vectorizes as a select)
        else return f(x, y);
      });
    }
  }

  // binary and compare rows: as un_row_avx512 / un_row_avx2
  template <template <typename> class R, int K>
  AG_WRAPPER_AVX512 static void bin_row_avx512(const Op& op, const float* const* sp, const float* sv, float* d,
                                               int64_t n) {
    bin_row<R, K>(op, sp, sv, d, n);
  }
  template <template <typename> class R, int K>
  AG_WRAPPER_AVX2 static void bin_row_avx2(const Op& op, const float* const* sp, const float* sv, float* d, int64_t n) {
    bin_row<R, K>(op, sp, sv, d, n);
  }

  // One instruction over a tile; the rows' loops run the kAvx512 variant (see un_row_avx512).
  template <bool kAvx512>
  static void exec(const Op& op, const float* const* sp, const float* sv, float* d, int64_t n) {
    const float* a = sp[op.a];
    const float* b = op.b >= 0 ? sp[op.b] : nullptr;
    const float* c = op.c >= 0 ? sp[op.c] : nullptr;
    switch (op.code) {
      case kConvert:
        if (static_cast<DType>(op.mode) == DType::b8) un(d, a, n, [](float x) { return x != 0.0f ? 1.0f : 0.0f; });
        else un(d, a, n, [](float x) { return x; });  // to a float dtype: the rounding below does it
        break;
      case kWhere:
        for (int64_t i = 0; i < n; ++i) d[i] = a[i] != 0.0f ? b[i] : c[i];
        break;
      case kFma:
        for (int64_t i = 0; i < n; ++i) d[i] = math::fmadd(a[i], b[i], c[i]);
        break;
#define AG_FE_BIN(name, kinds, ...)                                              \
  case kX_##name:                                                                \
    if constexpr (kAvx512 && kWide<ew::R_##name>) bin_row_avx512<ew::R_##name, (kinds)>(op, sp, sv, d, n); \
    else bin_row_avx2<ew::R_##name, (kinds)>(op, sp, sv, d, n);                  \
    break;
#define AG_FE_FORM(name, op_, kinds, ...) AG_FE_BIN(name, kinds)
      AG_EW_BINARY_OPS(AG_FE_BIN)
      AG_EW_BINARY_FORMS(AG_FE_FORM)
      AG_EW_COMPARE_OPS(AG_FE_BIN)
#undef AG_FE_BIN
#undef AG_FE_FORM
      default: {
        const double* p = op.p;
#define AG_FE_UN_CALL(R, K)                        \
  do {                                             \
    if constexpr (kAvx512 && kWide<R>) un_row_avx512<R, K>(d, a, n, p); \
    else un_row_avx2<R, K>(d, a, n, p);            \
  } while (0)
        switch (op.code) {
          AG_FE_UNARY_CASES
          default: fail("fused_elementwise: unknown instruction code ", op.code);
        }
#undef AG_FE_UN_CALL
      }
    }
    if (op.round == 1) {
      for (int64_t i = 0; i < n; ++i) d[i] = round_bf16(d[i]);
    } else if (op.round == 2) {
      for (int64_t i = 0; i < n; ++i) d[i] = round_f16(d[i]);
    }
  }

  int64_t numel_ = 0;
  int nin_ = 0, nslots_ = 0, nbuf_ = 0, nsets_ = 1;
  int64_t weight_ = 0;
  std::vector<In> ins_;
  std::vector<Op> ops_;
  std::vector<SeparableGather> gathers_;
  std::vector<std::vector<int>> gather_idx_;
  std::vector<size_t> gather_tab_;
  std::vector<int> slot_buf_;
  std::vector<int> out_slot_;
  std::vector<DType> out_dt_;
  ScratchLayout scratch_;
  size_t mem_ = 0, ptrs_ = 0, vals_ = 0;  // offsets in the run's scratch
  std::string name_;
};

std::unique_ptr<Kernel> make_fused(const Node& n, const BuildCtx& ctx) { return std::make_unique<FusedKernel>(n); }

}  // namespace

bool value_dtype_ok(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::b8; }

// (the rows' loops in their AVX-512 or AVX2 variant, un_row_avx512: the epilogues run here after
// oneDNN's GEMMs; each lane computes the same IEEE operations, so the result is the same)
void run_unary(int64_t code, const double* p, float* d, const float* a, int64_t n) {
  const bool avx512 = isa::use_avx512();
#define AG_FE_UN_CALL(R, K)                                          \
  do {                                                               \
    if constexpr (kWide<R>) {                                        \
      if (avx512) un_row_avx512<R, K>(d, a, n, p);                   \
      else un_row_avx2<R, K>(d, a, n, p);                            \
    } else {                                                         \
      un_row_avx2<R, K>(d, a, n, p);                                 \
    }                                                                \
  } while (0)
  switch (code) {
    AG_FE_UNARY_CASES
    default:
      if (const RowF32Fn row = row_fn(code)) {  // a plugin's epilogue op (OpDef::row_f32; a lock-free read)
        if (d != a) std::copy(a, a + n, d);
        row(d, n, p);
        break;
      }
      fail("fused_elementwise: ", code, " is not a unary instruction code");
  }
#undef AG_FE_UN_CALL
}

bool encode(const Node& n, FusedInstr* o) {
  if (n.outputs.size() != 1 || !n.op->has(kElementwise)) return false;
  for (Value* v : n.inputs)
    if (!value_dtype_ok(v->type.dtype)) return false;
  if (!value_dtype_ok(n.out()->type.dtype)) return false;
  const std::string_view op = n.op->name;
  *o = FusedInstr{};
  auto set = [&](int64_t code) {
    o->code = code;
    o->nargs = arity(code);
    return static_cast<int>(n.inputs.size()) == o->nargs;
  };
  if (op == "where") return set(kWhere);
  if (op == "fma") return n.out()->type.dtype != DType::b8 && set(kFma);
  if (op == "convert") {
    o->p[0] = static_cast<double>(static_cast<int>(n.attrs.dtype("dtype")));
    return set(kConvert);
  }
  return false;
}

}  // namespace fe

AG_REGISTER_OP(fused_elementwise, {.name = "fused_elementwise", .min_inputs = 1, .max_inputs = -1,
                                   .infer = fe::infer_fused, .make_kernel = fe::make_fused,
                                   .props = kElementwise});

}  // namespace ag
