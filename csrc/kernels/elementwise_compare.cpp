#pragma GCC optimize("no-trapping-math")  // lets GCC if-convert float selects and vectorize floor/round
// Comparisons (eq ne lt le gt ge -> bool), logical and/or/xor (nonzero tests,
// -> bool) and bitwise and/or/xor (integers and bool), with broadcasting. Both
// inputs share one dtype (the front promotes or casts them).
#include "kernels/elementwise.h"
#include "kernels/fused_elementwise.h"

namespace ag {
namespace {
using namespace ew;

#define AG_CMP_FUNCTOR(Name, R, expr)                  \
  template <typename C>                                \
  struct Name {                                        \
    static constexpr bool kMath = false;               \
    static constexpr bool kCheckZero = false;          \
    explicit Name(const Attrs&) {}                     \
    R operator()(C a, C b) const { return expr; }      \
  };

AG_CMP_FUNCTOR(Eq, bool, a == b)
AG_CMP_FUNCTOR(Ne, bool, a != b)
AG_CMP_FUNCTOR(Lt, bool, a < b)
AG_CMP_FUNCTOR(Le, bool, a <= b)
AG_CMP_FUNCTOR(Gt, bool, a > b)
AG_CMP_FUNCTOR(Ge, bool, a >= b)
AG_CMP_FUNCTOR(LogicalAnd, bool, (a != C(0)) && (b != C(0)))
AG_CMP_FUNCTOR(LogicalOr, bool, (a != C(0)) || (b != C(0)))
AG_CMP_FUNCTOR(LogicalXor, bool, (a != C(0)) != (b != C(0)))
AG_CMP_FUNCTOR(BitAnd, C, C(a & b))
AG_CMP_FUNCTOR(BitOr, C, C(a | b))
AG_CMP_FUNCTOR(BitXor, C, C(a ^ b))

}  // namespace

#define AG_CMP(ident, Op, K, BoolOut)                                                                   \
  AG_REGISTER_OP(ident, {.name = #ident, .min_inputs = 2, .max_inputs = 2,                            \
                         .infer = infer_binary<K, BoolOut, false>,                                    \
                         .make_kernel = make_binary<Op, K, BoolOut, false>, .props = kElementwise,    \
                         .fuse = fe::encode});

AG_CMP(eq, Eq, kAll, true)
AG_CMP(ne, Ne, kAll, true)
AG_CMP(lt, Lt, kAll, true)
AG_CMP(le, Le, kAll, true)
AG_CMP(gt, Gt, kAll, true)
AG_CMP(ge, Ge, kAll, true)
AG_CMP(logical_and, LogicalAnd, kAll, true)
AG_CMP(logical_or, LogicalOr, kAll, true)
AG_CMP(logical_xor, LogicalXor, kAll, true)
AG_CMP(bitwise_and, BitAnd, kIB, false)
AG_CMP(bitwise_or, BitOr, kIB, false)
AG_CMP(bitwise_xor, BitXor, kIB, false)

}  // namespace ag
