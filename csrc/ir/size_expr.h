// Size expressions: what a symbolic size is in terms of the graph's symbols
// (s0 * 16, (s1 + 7) // 8, max(s0, s2), ...). The front lowers a graph with
// symbolic sizes once; an expression stands wherever a size depends on the
// symbols (an input dim, a view's shape, a slice bound), and
// Graph::instantiate evaluates them for one binding of the symbols.
//
// Form: a postfix program of int64 tokens. kConst and kSym take one operand
// token (the constant, the symbol's index); the binary ops pop b, then a, and
// push a op b; kNeg negates the top. Division and modulo are Python's (floor).
// A program is checked once when it is added (stack depth, symbol range), so
// evaluation cannot read out of bounds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ag {

enum SizeOp : int64_t { kConst = 0, kSym = 1, kAdd = 2, kMul = 3, kFloorDiv = 4, kMod = 5, kMax = 6, kMin = 7, kNeg = 8 };

struct SizeExpr {
  std::vector<int64_t> code;
  std::string text;  // as the front printed it ("s0*16"), for dumps and errors
};

// Throws ag::Error when `code` is not a well-formed program over `num_symbols` symbols.
void check_size_expr(const SizeExpr& e, size_t num_symbols);
// The value for one binding (sizes[i] is symbol i); throws on division by zero.
int64_t eval_size_expr(const SizeExpr& e, const std::vector<int64_t>& sizes);

}  // namespace ag
