#include "ir/size_expr.h"

#include "base/error.h"

namespace ag {

static bool binary(int64_t op) { return op >= kAdd && op <= kMin; }

void check_size_expr(const SizeExpr& e, size_t num_symbols) {
  int depth = 0;
  const auto& c = e.code;
  for (size_t i = 0; i < c.size(); ++i) {
    int64_t op = c[i];
    if (op == kConst || op == kSym) {
      AG_CHECK(i + 1 < c.size(), "size expression '", e.text, "': missing operand");
      int64_t arg = c[++i];
      AG_CHECK(op == kConst || (arg >= 0 && static_cast<size_t>(arg) < num_symbols), "size expression '", e.text,
               "': symbol ", arg, " out of range (the graph has ", num_symbols, ")");
      ++depth;
    } else if (binary(op)) {
      AG_CHECK(depth >= 2, "size expression '", e.text, "': operator without operands");
      --depth;
    } else {
      AG_CHECK(op == kNeg, "size expression '", e.text, "': unknown token ", op);
      AG_CHECK(depth >= 1, "size expression '", e.text, "': operator without operand");
    }
  }
  AG_CHECK(depth == 1, "size expression '", e.text, "' does not leave one value");
}

static int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t eval_size_expr(const SizeExpr& e, const std::vector<int64_t>& sizes) {
  int64_t stack[64];
  int sp = 0;
  const auto& c = e.code;
  for (size_t i = 0; i < c.size(); ++i) {
    int64_t op = c[i];
    if (op == kConst || op == kSym) {
      AG_CHECK(sp < 64, "size expression '", e.text, "' is too deep");
      int64_t arg = c[++i];
      stack[sp++] = op == kConst ? arg : sizes.at(static_cast<size_t>(arg));
      continue;
    }
    if (op == kNeg) {
      stack[sp - 1] = -stack[sp - 1];
      continue;
    }
    int64_t b = stack[--sp], a = stack[sp - 1], r = 0;
    switch (op) {
      case kAdd: r = a + b; break;
      case kMul: r = a * b; break;
      case kFloorDiv:
        AG_CHECK(b != 0, "size expression '", e.text, "' divides by zero");
        r = floordiv(a, b);
        break;
      case kMod:
        AG_CHECK(b != 0, "size expression '", e.text, "' divides by zero");
        r = a - floordiv(a, b) * b;
        break;
      case kMax: r = a > b ? a : b; break;
      default: r = a < b ? a : b; break;  // kMin
    }
    stack[sp - 1] = r;
  }
  return stack[0];
}

}  // namespace ag
