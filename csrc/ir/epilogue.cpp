#include "ir/epilogue.h"

#include <unordered_map>

#include "base/error.h"
#include "ir/op_registry.h"

namespace ag::epi {

// The op registered with `epilogue` whose instruction code is c (unary or binary), or nullptr.
// (Ops registered later, by a plugin loaded at run time, are not in the map made at the first call:
// codes it lacks are looked up in the registry.)
static const OpDef* epilogue_op(int64_t c) {
  static const std::unordered_map<int64_t, const OpDef*> by_code = [] {
    std::unordered_map<int64_t, const OpDef*> m;
    for (const OpDef* d : all_ops())
      if (d->epilogue && d->fused_code != 0) m.emplace(d->fused_code, d);
    return m;
  }();
  auto it = by_code.find(c);
  if (it != by_code.end()) return it->second;
  if (!row_fn(c)) return nullptr;
  for (const OpDef* d : all_ops())
    if (d->epilogue && d->fused_code == c) return d;
  return nullptr;
}

const OpDef* unary_op(int64_t c) {
  const OpDef* d = epilogue_op(c);
  return d && d->max_inputs == 1 ? d : nullptr;
}

std::string code_name(int64_t c) {
  const OpDef* d = epilogue_op(c);
  return d ? d->name : "?";
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
  AG_CHECK(args.size() == kArgs * codes.size(), op, ": post_args must hold ", kArgs, " values per post-op, got ",
           args.size(), " for ", codes.size(), " ops");
  size_t k = n_base;
  for (int64_t c : codes) {
    AG_CHECK(is_binary(c) || unary_op(c), op, ": unknown post-op code ", c);
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

}  // namespace ag::epi
